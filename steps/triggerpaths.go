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
		Priors:   NoPriors,
		Internal: true,
		New:      func() Step { return StepFunc(runTriggerPaths) },
		Config:   triggerPathsConfig{},
	})
}

// triggerPathsConfig is a TriggerPaths job's inputs: a PR (prNumber) or a push (before, after).
type triggerPathsConfig struct {
	repoInputs
	PRNumber int      `input:"prNumber" doc:"the PR (or before and after)"`
	Before   string   `input:"before" doc:"a push's previous head"`
	After    string   `input:"after" doc:"a push's new head"`
	Paths    []string `input:"paths,required" doc:"glob patterns"`
}

// runTriggerPaths: inputs {connector, repo, prNumber, paths}; outputs {matched, files (the
// matching files, at most MaxPathCheckFiles), changed (how many files the PR changes)}.
func runTriggerPaths(ctx context.Context, sc *Context) (Result, error) {
	c, err := Decode[triggerPathsConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	if err := nonEmpty("connector", c.Connector, "repo", c.Repo); err != nil {
		return Result{}, err
	}
	before, after, n := c.Before, c.After, 0
	if before == "" && after == "" {
		if n = c.PRNumber; n <= 0 {
			return Result{}, Terminalf("prNumber: required")
		}
	} else if before == "" || after == "" {
		return Result{}, Terminalf("before and after: set both (a push) or neither (a PR: prNumber)")
	}
	paths := c.Paths
	if len(paths) == 0 {
		return Result{}, Terminalf("paths: required")
	}
	p, err := scmFor(ctx, sc, c.Connector)
	if err != nil {
		return Result{}, err
	}
	var files []string
	what := fmt.Sprintf("PR #%d", n)
	if after != "" {
		what = fmt.Sprintf("the push %s..%s", before, after)
		cmp, ok := p.(scm.Comparer)
		if !ok {
			return Result{}, Terminalf("connector %s: the %s driver cannot compare commits", c.Connector, p.Name())
		}
		files, err = cmp.ChangedBetween(ctx, scm.Repo(c.Repo), before, after)
	} else {
		files, err = p.ChangedFiles(ctx, scm.Repo(c.Repo), n)
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
	sc.Log.Info("changed files checked against trigger paths", "repo", c.Repo, "of", what, "changed", len(files), "matched", len(matched))
	return Done(map[string]any{"matched": len(matched) > 0, "files": matched, "changed": len(files)}), nil
}
