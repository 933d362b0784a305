package pipelines

import _ "embed"

// Schema is the JSON Schema of the pipeline format, for editors (yaml-language-server:
// `# yaml-language-server: $schema=…/pipelines/schema.json`).
//
//go:embed schema.json
var Schema []byte
