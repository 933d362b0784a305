// Package examples holds the example pipelines and release repo used by `prflow dev`, the
// docs and the tests. They are embedded so `prflow dev` works from any directory.
package examples

import "embed"

//go:embed pipelines/*.yaml
var FS embed.FS

// DefaultPipelineName is the pipeline `prflow dev` runs without --pipeline.
const DefaultPipelineName = "pipelines/hello.yaml"

// DefaultPipeline returns the default example's source.
func DefaultPipeline() []byte {
	b, err := FS.ReadFile(DefaultPipelineName)
	if err != nil {
		panic(err) // embedded at build time; missing means a broken build
	}
	return b
}
