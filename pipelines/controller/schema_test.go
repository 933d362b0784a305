package controller

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

// GET /api/v1/schema serves the pipeline schema to editors and tools without a token.
func TestAPISchema(t *testing.T) {
	e := newEnv(t, envOpts{})
	srv := e.serve(apiAuth(t))
	resp, err := http.Get(srv.URL + "/api/v1/schema")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/schema+json" {
		t.Fatalf("GET /api/v1/schema: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	want, err := pipelines.GenerateSchema(e.reg) // this server's step types (the test's registry)
	if err != nil || !bytes.Equal(body, want) || !bytes.Contains(body, []byte(`"withNoop"`)) {
		t.Errorf("served schema is not the one of the server's step types (%v):\n%.300s", err, body)
	}
	// The rest of the API still wants a token.
	if resp, err := http.Get(srv.URL + "/api/v1/runs"); err != nil || resp.StatusCode != 401 {
		t.Errorf("GET /api/v1/runs without a token: %v %v", err, resp.StatusCode)
	}
}
