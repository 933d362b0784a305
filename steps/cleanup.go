package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prflow/prflow/scm"
)

// TypeCleanup clears up after a run that failed or was cancelled. The controller dispatches it
// when such a run ends (pipelines.Machine.CleanupJob); its result is not part of the run.
const TypeCleanup = "Cleanup"

func init() {
	// Dispatched by the controller when a run ends failed or cancelled; never in a pipeline.
	Register(Definition{Type: TypeCleanup, Internal: true, Priors: NoPriors, New: func() Step { return StepFunc(runCleanup) },
		Config: cleanupConfig{}})
}

// cleanupConfig is a cleanup job's inputs, set by the controller (pipelines.Machine.CleanupJob).
type cleanupConfig struct {
	PRs           []cleanupEntry `input:"prs" doc:"the PRs the run opened"`
	Branches      []cleanupEntry `input:"branches" doc:"work branches of release steps that reported no PR"`
	Reason        string         `input:"reason" doc:"why the run ended, for the PR comment"`
	KeepFailedPRs bool           `input:"keepFailedPRs" doc:"leave the PRs and branches for debugging"`
}

// cleanupEntry is one entry of prs or branches. Each is checked when it is cleared up
// (cleanupPR, cleanupBranch), so that a bad entry does not stop the others: one that is not a
// mapping is read as an empty one, which is reported as lacking its fields.
type cleanupEntry map[string]any

func (cleanupEntry) InputShape() Input { return Input{Type: InputObject} }

func (e *cleanupEntry) DecodeInput(v any, _ string, _ bool) error {
	*e, _ = v.(map[string]any)
	return nil
}

// RunQueues takes a run's merges out of the merge queues they joined (worker.LeaseLocker).
type RunQueues interface {
	RemoveRun(ctx context.Context, run string) (int, error)
}

// runCleanup takes the run's merges out of their merge queues, then, unless keepFailedPRs,
// closes every PR in inputs.prs that is still open with a comment naming the run and why, and
// deletes its branch (only prflow's own work branches, prflow/…), and deletes every branch in
// inputs.branches (cleanupBranch). A merged PR is left alone.
// A repeat finds closed PRs and missing branches and goes on; a PR it cannot clear up does
// not stop the others.
func runCleanup(ctx context.Context, sc *Context) (Result, error) {
	out := map[string]any{}
	if q, ok := sc.Services.Locks.(RunQueues); ok && q != nil {
		n, err := q.RemoveRun(ctx, sc.RunID)
		if err != nil {
			return Result{}, fmt.Errorf("merge queues of run %s: %w", sc.RunID, err)
		}
		out["dequeued"] = n
	}
	cfg, err := Decode[cleanupConfig](sc.Inputs, false)
	if err != nil {
		return Fail("cleanup of run " + sc.RunID + ": " + err.Error()), nil
	}
	list, branchList := cfg.PRs, cfg.Branches
	if cfg.KeepFailedPRs {
		if len(list)+len(branchList) > 0 {
			sc.Log.Info("keeping the PRs and branches of this run (cleanup.keepFailedPRs)", "prs", len(list), "branches", len(branchList))
		}
		out["kept"] = len(list) + len(branchList)
		return Done(out), nil
	}
	reason := cfg.Reason
	var closed, merged []any
	var problems []string
	var retry error
	for _, m := range list {
		res, err := cleanupPR(ctx, sc, m, reason)
		switch {
		case err == nil && res == "merged":
			merged = append(merged, m["prNumber"])
		case err == nil && res != "":
			closed = append(closed, m["prNumber"])
		case err != nil && IsTerminal(err):
			problems = append(problems, err.Error())
		case err != nil:
			retry = err
			problems = append(problems, err.Error())
		}
	}
	var deleted []any
	for _, m := range branchList {
		res, err := cleanupBranch(ctx, sc, m, reason)
		switch {
		case err == nil && res == "merged":
			merged = append(merged, m["branch"])
		case err == nil && res != "":
			deleted = append(deleted, m["branch"])
		case err != nil && IsTerminal(err):
			problems = append(problems, err.Error())
		case err != nil:
			retry = err
			problems = append(problems, err.Error())
		}
	}
	out["closed"], out["merged"], out["deletedBranches"] = closed, merged, deleted
	if retry != nil {
		return Result{}, retry // transient: the worker retries; done work is found done
	}
	if len(problems) > 0 {
		return Fail("cleanup of run " + sc.RunID + ": " + strings.Join(problems, "; ")), nil
	}
	return Done(out), nil
}

// cleanupPR clears up one PR; it returns "merged", "closed" (it closed it now or found it
// closed) or "" when there was nothing to do.
func cleanupPR(ctx context.Context, sc *Context, m map[string]any, reason string) (string, error) {
	connector, _ := m["connector"].(string)
	repo, _ := m["repo"].(string)
	number, err := intInput(m["prNumber"], "prNumber", false)
	if err != nil || connector == "" || repo == "" || number <= 0 {
		return "", Terminalf("prs: entry %v needs connector, repo and prNumber", m)
	}
	p, err := scmFor(ctx, sc, connector)
	if err != nil {
		return "", err
	}
	r := scm.Repo(repo)
	edits, _ := editsFrom(m["edits"])
	pr, err := readPR(ctx, p, r, number, edits) // follows a PR rebuilt as a new one (Bitbucket)
	if errors.Is(err, scm.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if pr.State == scm.PRMerged {
		return "merged", nil
	}
	branches := []string{pr.Head}
	if ref, _ := m["ref"].(string); ref != "" && ref != pr.Head {
		branches = append(branches, ref) // the first PR of a rebuilt chain
	}
	if pr.State == scm.PROpen {
		step, _ := m["step"].(string)
		body := fmt.Sprintf("prflow run %s (pipeline %s) ended %s.\n\nThis PR was opened by step %s and is closed without being merged; its branch %s is deleted. "+
			"Set `cleanup: {keepFailedPRs: true}` in the pipeline to keep the PRs of failed runs.",
			sc.RunID, sc.Pipeline, reason, step, pr.Head)
		// Once: a redelivery after a kill between comment and close finds it by its marker.
		if _, err := scm.CommentOnce(ctx, p, r, pr.Number, fmt.Sprintf("%s/cleanup/%d", sc.RunID, pr.Number), body); err != nil && !errors.Is(err, scm.ErrNotSupported) {
			return "", classify(err, fmt.Sprintf("comment on PR #%d of %s", pr.Number, repo))
		}
		if err := p.ClosePR(ctx, r, pr.Number); err != nil {
			return "", classify(err, fmt.Sprintf("close PR #%d of %s", pr.Number, repo))
		}
		sc.Log.Info("closed a PR of the failed run", "pr", pr.Number, "repo", repo)
	}
	for _, b := range branches {
		if !strings.HasPrefix(b, "prflow/") {
			continue // never someone else's branch
		}
		if err := p.DeleteBranch(ctx, r, b); err != nil && !errors.Is(err, scm.ErrNotFound) {
			return "", classify(err, fmt.Sprintf("delete branch %s of %s (PR #%d)", b, repo, pr.Number))
		}
	}
	return "closed", nil
}

// cleanupBranch clears up the work branch of a release step that reported no PR (it failed,
// was killed or cancelled after pushing, or before it could report the PR it opened): a PR
// found on the branch is cleared up like a reported one; otherwise the branch is deleted. It
// returns "deleted", "closed", "merged" or "" when there was nothing. Only a branch under the
// run's own prefix (RunBranchPrefix) is touched: nobody else has one there.
func cleanupBranch(ctx context.Context, sc *Context, m map[string]any, reason string) (string, error) {
	connector, _ := m["connector"].(string)
	repo, _ := m["repo"].(string)
	branch, _ := m["branch"].(string)
	base, _ := m["baseBranch"].(string)
	if connector == "" || repo == "" || branch == "" || base == "" {
		return "", Terminalf("branches: entry %v needs connector, repo, branch and baseBranch", m)
	}
	if prefix := RunBranchPrefix(sc.Pipeline, sc.RunID); !strings.HasPrefix(branch, prefix) || len(branch) == len(prefix) {
		return "", Terminalf("branches: %s of %s is not a work branch of run %s (%s…): not deleted", branch, repo, sc.RunID, prefix)
	}
	p, err := scmFor(ctx, sc, connector)
	if err != nil {
		return "", err
	}
	r := scm.Repo(repo)
	pr, err := p.FindPR(ctx, r, branch, base)
	switch {
	case err == nil:
		// The step opened a PR and died before it said so.
		return cleanupPR(ctx, sc, map[string]any{"connector": connector, "repo": repo, "prNumber": pr.Number, "step": m["step"]}, reason)
	case !errors.Is(err, scm.ErrNotFound) && !errors.Is(err, scm.ErrNotSupported):
		return "", classify(err, fmt.Sprintf("find a PR from %s into %s of %s", branch, base, repo))
	}
	if err := p.DeleteBranch(ctx, r, branch); err != nil {
		if errors.Is(err, scm.ErrNotFound) {
			return "", nil
		}
		return "", classify(err, fmt.Sprintf("delete branch %s of %s (pushed by step %v, which opened no PR)", branch, repo, m["step"]))
	}
	sc.Log.Info("deleted a branch the failed run pushed and opened no PR for", "branch", branch, "repo", repo, "step", m["step"])
	return "deleted", nil
}
