package steps_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// editPipeline is a one-stage promotion whose update step gets the given `with` lines
// (indented under with:).
func editPipeline(with string) string {
	return `
name: promote
inputs:
  tag: {type: string, default: "1.5.0"}
stages:
  - id: dev
    steps:
` + updateStep + `
` + with + `
      - id: merge
        type: MergePR
`
}

// noSideEffects checks that a refused edit left the release repo as it was: main only (no
// work branch pushed), no PR, values.yaml untouched.
func noSideEffects(t *testing.T, fg forge) {
	t.Helper()
	br, err := fg.branches()
	if err != nil || len(br) != 1 || br["main"] == "" {
		t.Errorf("branches after a refused edit: %v %v; want main only", br, err)
	}
	if prs, err := fg.f.PullRequests("acme", "release"); err != nil || len(prs) != 0 {
		t.Errorf("PRs after a refused edit: %d (%v); want none", len(prs), err)
	}
	got, err := fg.p.ReadFile(context.Background(), "acme/release", "main", "envs/dev/values.yaml")
	if err != nil || string(got) != valuesYAML {
		t.Errorf("values.yaml changed: %v\n%s", err, got)
	}
}

func failedUpdate(t *testing.T, fg forge, src string) *pipelines.StepRun {
	t.Helper()
	e := env(t, fg, 1)
	r := e.Wait(e.Start(src, nil).ID, 90*time.Second)
	st := ctltest.Step(r, "dev", "update")
	if r.Status != pipelines.StFailed || st.Status != pipelines.StFailed {
		t.Fatalf("run %s, update %s (%s); want both failed\n%s", r.Status, st.Status, st.Error, e.Logs.String())
	}
	if st.Attempt > 1 {
		t.Errorf("a refused edit was retried (attempt %d); it is terminal", st.Attempt)
	}
	if m := ctltest.Step(r, "dev", "merge"); m.Status == pipelines.StSucceeded {
		t.Errorf("MergePR ran after a refused edit")
	}
	return st
}

// refusedWithoutSideEffects runs editPipeline(with) on GitHub: the update must fail, its
// error must say each of wants, and the release repo must be as it was.
func refusedWithoutSideEffects(t *testing.T, with string, wants ...string) {
	t.Helper()
	fg := forges(t)[0]
	st := failedUpdate(t, fg, editPipeline(with))
	for _, want := range wants {
		if !strings.Contains(st.Error, want) {
			t.Errorf("error %q does not say %q", st.Error, want)
		}
	}
	noSideEffects(t, fg)
}

// A mistyped key (image.tga) used to add a new key, open a PR, merge and go green while the
// tag stayed as it was. It is refused before anything is pushed, with the closest key.
func TestMistypedKeyRefused(t *testing.T) {
	t.Parallel()
	refusedWithoutSideEffects(t, `          filePath: envs/dev/values.yaml
          variables:
            - {name: image.tga, value: "${{ inputs.tag }}"}`,
		"envs/dev/values.yaml", `key "image.tga"`, "image.tga does not exist", "did you mean image.tag?", "create: true")
}

// A dotted annotation written without quotes is refused with the quoted form (the walk would
// have created argocd: {argoproj: ...} next to the real key).
func TestDottedAnnotationRefused(t *testing.T) {
	t.Parallel()
	fg := forges(t)[0]
	ctx := context.Background()
	manifest := "metadata:\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\n"
	if _, err := fg.git.Commit("acme", "release", "main", map[string]string{"envs/dev/app.yaml": manifest}, nil, "add app.yaml"); err != nil {
		t.Fatal(err)
	}
	st := failedUpdate(t, fg, editPipeline(`          filePath: envs/dev/app.yaml
          variables:
            - {name: metadata.annotations.argocd.argoproj.io/sync-wave, value: "5"}`))
	if !strings.Contains(st.Error, `metadata.annotations["argocd.argoproj.io/sync-wave"]`) {
		t.Errorf("error %q does not give the quoted path", st.Error)
	}
	if got, _ := fg.p.ReadFile(ctx, "acme/release", "main", "envs/dev/app.yaml"); string(got) != manifest {
		t.Errorf("app.yaml changed:\n%s", got)
	}
}

// A mistyped file (values.yml for values.yaml) used to create a new file; it is refused with
// the file that exists.
func TestMistypedFileRefused(t *testing.T) {
	t.Parallel()
	refusedWithoutSideEffects(t, `          filePath: envs/dev/values.yml
          variables:
            - {name: image.tag, value: "${{ inputs.tag }}"}`,
		"envs/dev/values.yml does not exist", "did you mean envs/dev/values.yaml?", "create: true")
}

// create: true on the step creates a new file; create: true on a variable creates its key;
// both are listed in the created output and no warning is recorded (it was asked for).
func TestCreateTrueCreates(t *testing.T) {
	t.Parallel()
	fg := forges(t)[0]
	e := env(t, fg, 1)
	src := editPipeline(`          filePath: envs/dev/values.yaml
          variables:
            - {name: image.tag, value: "${{ inputs.tag }}"}
            - {name: image.digest, value: "sha256:ab", create: true}`) + `
  - id: qa
    steps:
` + updateStep + `
          filePath: envs/qa/config.json
          create: true
          variables:
            - {name: replicas, type: Number, value: "1"}
      - id: merge
        type: MergePR
`
	r := e.Wait(e.Start(src, nil).ID, 90*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, e.Logs.String())
	}
	if got := fmt.Sprint(ctltest.Step(r, "dev", "update").Outputs["created"]); got != "[envs/dev/values.yaml: image.digest]" {
		t.Errorf("dev created %s", got)
	}
	if got := fmt.Sprint(ctltest.Step(r, "qa", "update").Outputs["created"]); got != "[envs/qa/config.json (new file)]" {
		t.Errorf("qa created %s", got)
	}
	if len(r.Warnings) != 0 {
		t.Errorf("warnings %q for creations that were asked for", r.Warnings)
	}
	ctx := context.Background()
	v, _ := fg.p.ReadFile(ctx, "acme/release", "main", "envs/dev/values.yaml")
	c, _ := fg.p.ReadFile(ctx, "acme/release", "main", "envs/qa/config.json")
	if !strings.Contains(string(v), "digest: sha256:ab") || !strings.Contains(string(v), "tag: \"1.5.0\"") || !strings.Contains(string(c), `"replicas": 1`) {
		t.Errorf("after merge: values.yaml\n%s\nconfig.json\n%s", v, c)
	}
}

// Values already on main: the step succeeds as alreadyPromoted (no branch, no PR) and MergePR
// merges nothing; allowNoFilesChanged keeps its old meaning (success, not alreadyPromoted);
// a step whose every value is skipped (ignoreMissingValues) set nothing and still fails.
func TestAlreadyPromotedOnTheForge(t *testing.T) {
	t.Parallel()
	fg := forges(t)[0]
	e := env(t, fg, 1)
	same := `          filePath: envs/dev/values.yaml
          variables: [{name: image.tag, value: "1.4.1"}, {name: replicaCount, type: Number, value: "2"}]`
	src := editPipeline(same) + `
  - id: allow
    steps:
` + updateStep + `
          allowNoFilesChanged: true
` + same + `
  - id: empty
    steps:
` + updateStep + `
          ignoreMissingValues: true
          filePath: envs/dev/values.yaml
          variables: [{name: image.tag, value: ""}]
`
	headBefore, _ := fg.branches()
	r := e.Wait(e.Start(src, nil).ID, 90*time.Second)
	up, merge := ctltest.Step(r, "dev", "update"), ctltest.Step(r, "dev", "merge")
	if up.Status != pipelines.StSucceeded || up.Outputs["alreadyPromoted"] != true || up.Outputs["prNumber"] != "" ||
		up.Outputs["commitId"] != "" || up.Outputs["revision"] != headBefore["main"] {
		t.Errorf("dev update: %s %q %v; want alreadyPromoted at main %s", up.Status, up.Error, up.Outputs, headBefore["main"])
	}
	if merge.Status != pipelines.StSucceeded || merge.Outputs["alreadyPromoted"] != true || merge.Outputs["commitId"] != "" {
		t.Errorf("dev merge: %s %v; want no merge, alreadyPromoted passed on", merge.Status, merge.Outputs)
	}
	if a := ctltest.Step(r, "allow", "update"); a.Status != pipelines.StSucceeded || a.Outputs["alreadyPromoted"] != nil {
		t.Errorf("allowNoFilesChanged: %s %v; want success without alreadyPromoted", a.Status, a.Outputs)
	}
	if x := ctltest.Step(r, "empty", "update"); x.Status != pipelines.StFailed || !strings.Contains(x.Error, "no files changed") {
		t.Errorf("every value skipped: %s %q; want the no-files-changed failure", x.Status, x.Error)
	}
	after, _ := fg.branches()
	if len(after) != 1 || after["main"] != headBefore["main"] {
		t.Errorf("branches after: %v; want main unchanged and no work branch", after)
	}
	if prs, _ := fg.f.PullRequests("acme", "release"); len(prs) != 0 {
		t.Errorf("%d PRs opened", len(prs))
	}
}
