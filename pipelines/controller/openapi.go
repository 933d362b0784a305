package controller

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// openAPI describes the HTTP API (OpenAPI 3.1). It is written by hand; TestOpenAPIMatchesHandlers
// holds it to the registered routes and to the JSON fields of the Go types it names.
//
//go:embed openapi.json
var openAPI []byte

// apiOpenAPI serves GET /api/v1/openapi.json (no token: it describes, it holds nothing).
func (c *Controller) apiOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// SourceText is a pipeline file's text in a request: a JSON string holding the YAML as is.
// Clients before the OpenAPI document sent it base64-encoded (encoding/json's []byte); that is
// still accepted: a pipeline always has a "key: value" line, and ':' is not in the base64
// alphabet, so a string that decodes as base64 cannot be pipeline text.
type SourceText []byte

// MarshalJSON writes the text as a JSON string.
func (s SourceText) MarshalJSON() ([]byte, error) { return json.Marshal(string(s)) }

// UnmarshalJSON reads the text, or base64 of it.
func (s *SourceText) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	if dec, err := base64.StdEncoding.Strict().DecodeString(str); err == nil && len(dec) > 0 && utf8.Valid(dec) {
		*s = dec
		return nil
	}
	*s = SourceText(str)
	return nil
}
