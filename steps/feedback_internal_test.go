package steps

import (
	"context"
	"strings"
	"testing"
)

// TestForgeJobInputs: the controller-built forge jobs (CommitStatus, PRComment, TriggerPaths)
// read typed configs: a mistaken or misspelt input is a terminal error naming it, before any
// forge call, where it used to be ignored (an order that is not a number dropped the
// sequencing; a before that is not text made a push check a PR).
func TestForgeJobInputs(t *testing.T) {
	status := map[string]any{"connector": "gh", "repo": "acme/app", "sha": "abc", "context": "prflow/prod", "state": "pending"}
	with := func(base map[string]any, k string, v any) map[string]any {
		out := map[string]any{k: v}
		for bk, bv := range base {
			if bk != k {
				out[bk] = bv
			}
		}
		if v == nil {
			delete(out, k)
		}
		return out
	}
	comment := map[string]any{"connector": "gh", "repo": "acme/app", "prNumber": 7, "body": "hi"}
	paths := map[string]any{"connector": "gh", "repo": "acme/app", "prNumber": 7, "paths": []any{"apps/**"}}
	for _, c := range []struct {
		run  func(context.Context, *Context) (Result, error)
		in   map[string]any
		want string
	}{
		{runCommitStatus, with(status, "order", "soon"), "order: want a whole number"},
		{runCommitStatus, with(status, "state", "done"), `state: "done" is not pending, success, failure or error`},
		{runCommitStatus, with(status, "descripton", "x"), "descripton: unknown input"},
		{runCommitStatus, with(status, "sha", nil), "sha: required"},
		{runCommitStatus, with(status, "connector", ""), "connector: required"},
		{runPRComment, with(comment, "prNumber", "seven"), "prNumber: want a whole number"},
		{runPRComment, with(comment, "prNumber", nil), "prNumber: required"},
		{runPRComment, with(comment, "body", nil), "body: required"},
		{runTriggerPaths, with(paths, "before", []any{"a"}), "before: want a string"},
		{runTriggerPaths, with(paths, "after", "abc"), "before and after: set both"},
		{runTriggerPaths, with(paths, "paths", []any{}), "paths: required"},
		{runTriggerPaths, with(paths, "path", "x"), "path: unknown input"},
	} {
		_, err := c.run(t.Context(), &Context{RunID: "r1", Inputs: c.in})
		if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want a terminal error with %q", c.in, err, c.want)
		}
	}
}
