package controller

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

// TestRBACDocTable: docs/rbac.md lists every route with its permission, generated from the
// route table; the test fails when the doc is stale (PRFLOW_UPDATE_DOCS=1 rewrites it).
func TestRBACDocTable(t *testing.T) {
	const path = "../../docs/rbac.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("<!-- routes:begin -->\n| route | resource | action | object |\n|---|---|---|---|\n")
	for _, p := range (&Controller{}).Permissions() {
		res, act := "`"+p.Resource+"`", "`"+p.Action+"`"
		switch {
		case p.Resource == "":
			res, act = "—", "—"
		case strings.Contains(p.Resource, "|"):
			a, b, _ := strings.Cut(p.Resource, "|")
			res = "`" + a + "` (an approval), `" + b + "` (another signal)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p.Route, res, act, p.Object)
	}
	b.WriteString("| `GET /healthz`, `/readyz`, `/metrics` | — | — | none (probes and metrics, outside /api) |\n")
	b.WriteString("| `POST /hooks/{provider}` | — | — | none: authenticated by the forge's signature |\n")
	b.WriteString("<!-- routes:end -->")
	s := string(doc)
	i, j := strings.Index(s, "<!-- routes:begin -->"), strings.Index(s, "<!-- routes:end -->")
	if i < 0 || j < i {
		t.Fatalf("%s has no <!-- routes:begin --> … <!-- routes:end --> markers", path)
	}
	want := s[:i] + b.String() + s[j+len("<!-- routes:end -->"):]
	if want == s {
		return
	}
	if os.Getenv("PRFLOW_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s: the routes table is stale; run PRFLOW_UPDATE_DOCS=1 go test -run TestRBACDocTable ./pipelines/controller/", path)
}

// TestStageEnvFromInput: a stage whose environment is an input's value is checked on that
// value; a value that could pass for a glob, a missing input or an expression prflow cannot
// read here is checked as * (only a grant on every environment of the pipeline matches).
func TestStageEnvFromInput(t *testing.T) {
	p := &pipelines.Pipeline{Name: "web", Stages: []*pipelines.Stage{
		{ID: "fixed", Environment: "prod"},
		{ID: "harness", Environment: "<+inputs.env>"},
		{ID: "gh", Environment: "${{ inputs.env }}"},
		{ID: "expr", Environment: `${{ inputs.env == "a" ? "dev" : "prod" }}`},
		{ID: "none"},
	}}
	for _, c := range []struct {
		stage  string
		inputs map[string]any
		want   string
	}{
		{"fixed", nil, "prod"},
		{"harness", map[string]any{"env": "staging"}, "staging"},
		{"gh", map[string]any{"env": "dev"}, "dev"},
		{"gh", map[string]any{"env": "*"}, "*"},
		{"gh", map[string]any{"env": "dev/x"}, "*"},
		{"gh", map[string]any{"env": 3}, "*"},
		{"gh", nil, "*"},
		{"expr", map[string]any{"env": "a"}, "*"},
		{"none", nil, ""},
		{"missing", nil, "*"},
	} {
		if got := stageEnv(p, c.stage, c.inputs); got != c.want {
			t.Errorf("stage %s inputs %v: %q, want %q", c.stage, c.inputs, got, c.want)
		}
	}
	if got := stageEnv(nil, "x", nil); got != "*" {
		t.Errorf("unknown pipeline: %q", got)
	}
}
