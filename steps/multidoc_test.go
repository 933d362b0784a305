package steps_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/steps"
)

// manifestsYAML is issue 13's repro: a Job and a Deployment in one file, both with a
// spec.replicas-shaped path that a silent pick of the first document would edit.
const manifestsYAML = `# rendered manifests
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  backoffLimit: 2   # retries
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1   # scaled by prflow
`

func TestUpdateReleaseRepoMultiDocument(t *testing.T) {
	t.Parallel()
	fg := githubRepo(t, "release", map[string]string{"envs/dev/app.yaml": manifestsYAML})
	e := env(t, fg, 1)
	step := func(with string) string {
		return "name: md\nstages:\n  - id: s\n    steps:\n      - {id: u, type: UpdateReleaseRepo, with: {connector: release, repo: acme/release, filePath: envs/dev/app.yaml, " + with + "}}\n"
	}
	for _, tc := range []struct {
		name string
		with string
		want string // the file on the PR's branch; "" = the step fails
		err  []string
	}{
		{name: "no selector", with: `variables: [{name: spec.replicas, type: Number, value: "3"}]`,
			err: []string{"envs/dev/app.yaml", "ambiguous", "[0] Job/migrate", "[1] Deployment/web", "document: {index: N}"}},
		{name: "selector matches nothing", with: `document: {kind: StatefulSet}, variables: [{name: spec.replicas, type: Number, value: "3"}]`,
			err: []string{"envs/dev/app.yaml", `no document has kind "StatefulSet"`}},
		{name: "step-level kind and name", with: `document: {kind: Deployment, name: web}, variables: [{name: spec.replicas, type: Number, value: "3"}]`,
			want: strings.Replace(manifestsYAML, "replicas: 1 ", "replicas: 3 ", 1)},
		{name: "step-level index", with: `document: {index: 1}, variables: [{name: spec.replicas, type: Number, value: "4"}]`,
			want: strings.Replace(manifestsYAML, "replicas: 1 ", "replicas: 4 ", 1)},
		{name: "per-variable documents", with: `variables: [{name: spec.backoffLimit, type: Number, value: "5", document: {kind: Job}}, ` +
			`{name: spec.replicas, type: Number, value: "2", document: {name: web}}]`,
			want: strings.Replace(strings.Replace(manifestsYAML, "replicas: 1 ", "replicas: 2 ", 1), "backoffLimit: 2 ", "backoffLimit: 5 ", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := fg.branches()
			r := e.Wait(e.Start(step(tc.with), nil).ID, 60*time.Second)
			st := ctltest.Step(r, "s", "u")
			if tc.want == "" {
				if r.Status != pipelines.StFailed || st.Attempt != 1 {
					t.Fatalf("%s after %d attempts, want one terminal failure", r.Status, st.Attempt)
				}
				for _, s := range tc.err {
					if !strings.Contains(st.Error, s) {
						t.Errorf("error %q does not mention %q", st.Error, s)
					}
				}
				if after, _ := fg.branches(); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Errorf("a refused edit changed branches: %v → %v", before, after)
				}
				return
			}
			if r.Status != pipelines.StSucceeded {
				t.Fatalf("%s: %s", r.Status, st.Error)
			}
			ref, _ := st.Outputs["ref"].(string)
			got, err := fg.p.ReadFile(context.Background(), "acme/release", ref, "envs/dev/app.yaml")
			if err != nil || string(got) != tc.want {
				t.Fatalf("file on %q: %v\n%s\nwant\n%s", ref, err, got, tc.want)
			}
		})
	}
}

func TestUpdateReleaseRepoDocumentInputValidation(t *testing.T) {
	def, ok := steps.Default.Lookup("UpdateReleaseRepo")
	if !ok {
		t.Fatal("UpdateReleaseRepo is not registered")
	}
	base := func(extra map[string]any) map[string]any {
		in := map[string]any{"connector": "c", "repo": "r", "filePath": "a.yaml"}
		for k, v := range extra {
			in[k] = v
		}
		return in
	}
	for _, tc := range []struct {
		name string
		in   map[string]any
		want string // "" = valid
	}{
		{"index", base(map[string]any{"document": map[string]any{"index": 1}}), ""},
		{"kind and name", base(map[string]any{"document": map[string]any{"kind": "Deployment", "name": "web"}}), ""},
		{"expression", base(map[string]any{"document": map[string]any{"name": "<+env.name>", "index": "${{ inputs.i }}"}}), ""},
		{"per variable", base(map[string]any{"variables": []any{map[string]any{"name": "a", "document": map[string]any{"kind": "Job"}}}}), ""},
		{"unknown key", base(map[string]any{"document": map[string]any{"idx": 1}}), "document.idx: unknown key"},
		{"negative index", base(map[string]any{"document": map[string]any{"index": -1}}), "document.index: -1 is negative"},
		{"index not a number", base(map[string]any{"document": map[string]any{"index": "two"}}), "document.index: want a whole number"},
		{"empty", base(map[string]any{"document": map[string]any{}}), "document: empty"},
		{"scalar", base(map[string]any{"document": 1}), "document: want {index: N}"},
		{"empty kind", base(map[string]any{"document": map[string]any{"kind": ""}}), "document.kind: want a non-empty string"},
		{"bad per-variable", base(map[string]any{"variables": []any{map[string]any{"name": "a", "document": "web"}}}), "variables[0].document: want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := def.Validate(tc.in)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
