package steps

import (
	"context"
	"errors"
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps/glob"
)

// TypeTriggerPaths checks a pull request's changed files, or a push's (before..after through
// the forge's compare API), against a trigger's paths. Forge PR webhooks list no files, push
// webhooks may list only some, and the controller never calls a forge, so a run started by
// such a trigger dispatches this job first (under reserved ids) and starts its stages only
// when a file matched. It only reads, so a redelivered job is harmless.
const TypeTriggerPaths = "TriggerPaths"

// MaxPathCheckFiles caps the matching files a TriggerPaths result lists.
const MaxPathCheckFiles = 100

func init() {
	Register(Definition{
		Type:     TypeTriggerPaths,
		Internal: true,
		New:      func() Step { return StepFunc(runTriggerPaths) },
		Inputs: []Input{inConnector, inRepo, {Name: "prNumber", Type: InputInt, Doc: "the PR (or before and after)"},
			{Name: "before", Type: InputString, Doc: "a push's previous head"}, {Name: "after", Type: InputString, Doc: "a push's new head"},
			{Name: "paths", Type: InputStrings, Required: true, Doc: "glob patterns"}},
	})
}

// runTriggerPaths: inputs {connector, repo, prNumber, paths}; outputs {matched, files (the
// matching files, at most MaxPathCheckFiles), changed (how many files the PR changes)}.
func runTriggerPaths(ctx context.Context, sc *Context) (Result, error) {
	v, err := requiredStrings(sc.Inputs, "connector", "repo")
	if err != nil {
		return Result{}, err
	}
	before, _ := sc.Inputs["before"].(string)
	after, _ := sc.Inputs["after"].(string)
	n := 0
	if before == "" && after == "" {
		if n, err = prNumberInput(sc.Inputs); err != nil {
			return Result{}, err
		}
	} else if before == "" || after == "" {
		return Result{}, Terminalf("before and after: set both (a push) or neither (a PR: prNumber)")
	}
	paths, err := stringList(sc.Inputs["paths"], "paths")
	if err != nil {
		return Result{}, Terminal(err)
	}
	if len(paths) == 0 {
		return Result{}, Terminalf("paths: required")
	}
	p, err := scmFor(ctx, sc, v["connector"])
	if err != nil {
		return Result{}, err
	}
	var files []string
	what := fmt.Sprintf("PR #%d", n)
	if after != "" {
		what = fmt.Sprintf("the push %s..%s", before, after)
		cmp, ok := p.(scm.Comparer)
		if !ok {
			return Result{}, Terminalf("connector %s: the %s driver cannot compare commits", v["connector"], p.Name())
		}
		files, err = cmp.ChangedBetween(ctx, scm.Repo(v["repo"]), before, after)
	} else {
		files, err = p.ChangedFiles(ctx, scm.Repo(v["repo"]), n)
	}
	truncated := errors.Is(err, scm.ErrTruncated)
	if err != nil && !truncated {
		return Result{}, classify(err, "list the files of "+what)
	}
	matched := []any{}
	for _, f := range files {
		if glob.Any(paths, f) {
			if len(matched) < MaxPathCheckFiles {
				matched = append(matched, f)
			} else {
				break
			}
		}
	}
	if truncated && len(matched) == 0 {
		// A match in the part listed is a match; no match in it decides nothing.
		return Result{}, Terminalf("list the files of %s: %v; none of the %d listed matches paths %v, the rest cannot be read", what, err, len(files), paths)
	}
	sc.Log.Info("changed files checked against trigger paths", "repo", v["repo"], "of", what, "changed", len(files), "matched", len(matched))
	return Done(map[string]any{"matched": len(matched) > 0, "files": matched, "changed": len(files)}), nil
}
