package steps_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
)

func TestBadInputsFailClearlyWithoutWrites(t *testing.T) {
	t.Parallel()
	for _, fg := range forges(t) {
		t.Run(fg.name, func(t *testing.T) { t.Parallel(); badInputs(t, fg) })
	}
}

func badInputs(t *testing.T, fg forge) {
	ctx := context.Background()
	// A PR that conflicts with main and was not opened by prflow.
	base, _ := fg.p.Branch(ctx, "acme/release", "main")
	if err := fg.p.CreateBranch(ctx, "acme/release", "hotfix", base.SHA); err != nil {
		t.Fatal(err)
	}
	if _, err := fg.p.Commit(ctx, "acme/release", scm.CommitInput{Branch: "hotfix", Parent: base.SHA, Message: "x",
		Changes: []scm.FileChange{{Path: "README.md", Content: []byte("hotfix\n")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fg.p.Commit(ctx, "acme/release", scm.CommitInput{Branch: "main", Parent: base.SHA, Message: "y",
		Changes: []scm.FileChange{{Path: "README.md", Content: []byte("main moved\n")}}}); err != nil {
		t.Fatal(err)
	}
	conflicting, err := fg.p.OpenPR(ctx, "acme/release", scm.NewPR{Title: "hotfix", Head: "hotfix", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := fg.branches()
	if err != nil {
		t.Fatal(err)
	}
	e := env(t, fg, 1)
	cases := []struct {
		name, step, want string
	}{
		{"type mismatch", `{id: u, type: UpdateReleaseRepo, with: {connector: release, repo: acme/release, filePath: envs/dev/values.yaml, variables: [{name: image, value: "v2"}]}}`,
			"envs/dev/values.yaml"},
		{"bad number", `{id: u, type: UpdateReleaseRepo, with: {connector: release, repo: acme/release, filePath: a.json, variables: [{name: n, type: Number, value: "${{ 'many' }}"}]}}`, // a literal is refused at load; an expression is checked when evaluated
			"variables[0] (n)"},
		// A literal absolute path is refused at load; one an expression makes, by the run.
		{"absolute path", `{id: u, type: UpdateReleaseRepo, with: {connector: release, repo: acme/release, filePath: "${{ '/etc/passwd' }}", variables: [{name: a, value: b}]}}`,
			`file path "/etc/passwd" is absolute`},
		{"unknown PR", `{id: m, type: MergePR, with: {connector: release, repo: acme/release, prNumber: 999}}`,
			"get PR #999"},
		{"unmergeable PR", `{id: m, type: MergePR, with: {connector: release, repo: acme/release, prNumber: ` + itoa(conflicting.Number) + `}}`,
			"has conflicts with main; files: README.md"},
	}
	// A connector no worker holds is refused at run start, before anything is written.
	if _, err := e.Ctl.Start(ctx, controller.StartRequest{File: "bad.yaml", Executor: "tester",
		Source: []byte("name: bad\nstages:\n  - id: s\n    steps:\n      - {id: u, type: UpdateReleaseRepo, with: {connector: nope, repo: acme/release, filePath: a.json, variables: [{name: a, value: b}]}}\n")}); err == nil ||
		!strings.Contains(err.Error(), `refused: connector "nope" is held by no live worker of pool "default" (live: release)`) {
		t.Errorf("missing connector: %v", err)
	}
	for _, c := range cases {
		r := e.Wait(e.Start("name: bad\nstages:\n  - id: s\n    steps:\n      - "+c.step+"\n", nil).ID, 60*time.Second)
		st := r.Stages[0].Steps[0]
		if r.Status != pipelines.StFailed || !strings.Contains(st.Error, c.want) {
			t.Errorf("%s: %s %q, want failure containing %q", c.name, r.Status, st.Error, c.want)
		}
		if st.Attempt != 1 {
			t.Errorf("%s: retried (%d attempts) although the error is terminal", c.name, st.Attempt)
		}
	}
	if strings.Contains(ctltest.Step(e.Wait(e.Start("name: tm\nstages:\n  - id: s\n    steps:\n      - "+cases[0].step+"\n", nil).ID, 30*time.Second), "s", "u").Error, "map") == false {
		t.Error("type mismatch does not name both types")
	}
	// No partial writes: every branch (main included) is where it was.
	after, err := fg.branches()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("failing steps changed branches:\nbefore %v\nafter  %v", before, after)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
