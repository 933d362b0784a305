package steps_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// webRepo is acme/web on the GitHub fake: its driver, the head of main, and run, which runs
// the worker side of TriggerPaths with the inputs given through the connector "web".
func webRepo(t *testing.T) (p scm.Provider, main scm.Ref, run func(in map[string]any) (steps.Result, error)) {
	t.Helper()
	p = githubRepo(t, "web", map[string]string{"README.md": "v1\n"}).p
	main, err := p.Branch(context.Background(), "acme/web", "main")
	if err != nil {
		t.Fatal(err)
	}
	def, ok := steps.Default.Lookup(steps.TypeTriggerPaths)
	if !ok {
		t.Fatal("TriggerPaths is not registered")
	}
	run = func(in map[string]any) (steps.Result, error) {
		sc := &steps.Context{RunID: "r1", Stage: "_trigger", StepID: "_paths", Type: steps.TypeTriggerPaths, Attempt: 1, Inputs: in,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: steps.NewServices(map[string]any{steps.ServiceSCM: connector.Static{"web": p}})}
		return def.New().Run(context.Background(), sc)
	}
	return p, main, run
}

// TestTriggerPathsStep runs the worker side of a trigger's path check against the GitHub fake:
// a PR changing 150 files under services/web/ and a README.
func TestTriggerPathsStep(t *testing.T) {
	t.Parallel()
	p, main, run := webRepo(t)
	ctx := context.Background()
	changes := []scm.FileChange{{Path: "README.md", Content: []byte("v2\n")}}
	for i := range 150 {
		changes = append(changes, scm.FileChange{Path: fmt.Sprintf("services/web/f%03d.go", i), Content: []byte("package web\n")})
	}
	if _, err := p.Commit(ctx, "acme/web", scm.CommitInput{Branch: "feature", Parent: main.SHA, Message: "x", Changes: changes}); err != nil {
		t.Fatal(err)
	}
	pr, err := p.OpenPR(ctx, "acme/web", scm.NewPR{Title: "x", Head: "feature", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	in := func(n int, paths ...any) map[string]any {
		return map[string]any{"connector": "web", "repo": "acme/web", "prNumber": float64(n), "paths": paths}
	}

	res, err := run(in(pr.Number, "services/web/**"))
	if err != nil || res.Status != steps.Succeeded || res.Outputs["matched"] != true || res.Outputs["changed"] != 151 {
		t.Fatalf("matching: %v %+v", err, res)
	}
	files := res.Outputs["files"].([]any)
	if len(files) != steps.MaxPathCheckFiles || !strings.HasPrefix(files[0].(string), "services/web/") {
		t.Fatalf("files: %d %v", len(files), files[:3])
	}
	if res, err := run(in(pr.Number, "*.md")); err != nil || res.Outputs["matched"] != true || fmt.Sprint(res.Outputs["files"]) != "[README.md]" {
		t.Fatalf("README: %v %+v", err, res)
	}
	if res, err := run(in(pr.Number, "services/api/**", "docs/**")); err != nil || res.Status != steps.Succeeded || res.Outputs["matched"] != false ||
		len(res.Outputs["files"].([]any)) != 0 {
		t.Fatalf("not matching: %v %+v", err, res)
	}
	if _, err := run(in(pr.Number+100, "**")); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("PR #%d", pr.Number+100)) {
		t.Fatalf("unknown PR: %v", err)
	}
	for _, bad := range []map[string]any{
		{"repo": "acme/web", "prNumber": 1, "paths": []any{"**"}},
		{"connector": "web", "repo": "acme/web", "paths": []any{"**"}},
		{"connector": "web", "repo": "acme/web", "prNumber": 1},
		{"connector": "nope", "repo": "acme/web", "prNumber": 1, "paths": []any{"**"}},
	} {
		if _, err := run(bad); err == nil || !steps.IsTerminal(err) {
			t.Errorf("inputs %v: %v, want a terminal error", bad, err)
		}
	}
}

// TestTriggerPathsStepPush: a push's check compares before..after through the connector.
// GitHub's compare lists at most 300 files: a match among them is a match, no match in them
// is a terminal error naming the cut (deciding "no match" on part of a push would miss files
// silently). Only one of before and after is a mistaken input.
func TestTriggerPathsStepPush(t *testing.T) {
	t.Parallel()
	p, main, run := webRepo(t)
	ctx := context.Background()
	var changes []scm.FileChange
	for i := range 320 { // sorted after the first 300: services/web/ comes last
		changes = append(changes, scm.FileChange{Path: fmt.Sprintf("docs/f%03d.md", i), Content: []byte("x\n")})
	}
	changes = append(changes, scm.FileChange{Path: "services/web/app.go", Content: []byte("package web\n")})
	after, err := p.Commit(ctx, "acme/web", scm.CommitInput{Branch: "main", Parent: main.SHA, Message: "x", Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	in := func(paths ...any) map[string]any {
		return map[string]any{"connector": "web", "repo": "acme/web", "before": main.SHA, "after": after, "paths": paths}
	}
	if res, err := run(in("docs/f001.md")); err != nil || res.Outputs["matched"] != true || fmt.Sprint(res.Outputs["files"]) != "[docs/f001.md]" {
		t.Fatalf("match in the listed part: %v %+v", err, res)
	}
	_, err = run(in("services/web/**"))
	if err == nil || !steps.IsTerminal(err) || !strings.Contains(err.Error(), "at most 300 files") ||
		!strings.Contains(err.Error(), "none of the 300 listed matches paths [services/web/**]") {
		t.Fatalf("no match in a cut list: %v, want a terminal error naming the cut", err)
	}
	if _, err := run(map[string]any{"connector": "web", "repo": "acme/web", "after": after, "paths": []any{"**"}}); err == nil || !steps.IsTerminal(err) ||
		!strings.Contains(err.Error(), "before and after: set both") {
		t.Errorf("after without before: %v", err)
	}
}
