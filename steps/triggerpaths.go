package steps

import (
	"context"
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps/glob"
)

// TypeTriggerPaths checks a pull request's changed files against a pullRequest trigger's
// paths. Forge PR webhooks list no files and the controller never calls a forge, so a run
// started by such a trigger dispatches this job first (under reserved ids) and starts its
// stages only when a file matched. It only reads, so a redelivered job is harmless.
const TypeTriggerPaths = "TriggerPaths"

// MaxPathCheckFiles caps the matching files a TriggerPaths result lists.
const MaxPathCheckFiles = 100

func init() {
	Register(Definition{
		Type:     TypeTriggerPaths,
		Internal: true,
		New:      func() Step { return StepFunc(runTriggerPaths) },
		Inputs:   []Input{inConnector, inRepo, inPRNumber, {Name: "paths", Type: InputStrings, Required: true, Doc: "glob patterns"}},
	})
}

// runTriggerPaths: inputs {connector, repo, prNumber, paths}; outputs {matched, files (the
// matching files, at most MaxPathCheckFiles), changed (how many files the PR changes)}.
func runTriggerPaths(ctx context.Context, sc *Context) (Result, error) {
	v, err := requiredStrings(sc.Inputs, "connector", "repo")
	if err != nil {
		return Result{}, err
	}
	n, err := prNumberInput(sc.Inputs)
	if err != nil {
		return Result{}, err
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
	files, err := p.ChangedFiles(ctx, scm.Repo(v["repo"]), n)
	if err != nil {
		return Result{}, classify(err, fmt.Sprintf("list the files of PR #%d", n))
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
	sc.Log.Info("PR files checked against trigger paths", "repo", v["repo"], "pr", n, "changed", len(files), "matched", len(matched))
	return Done(map[string]any{"matched": len(matched) > 0, "files": matched, "changed": len(files)}), nil
}
