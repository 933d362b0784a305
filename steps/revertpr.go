package steps

import (
	"context"
	"errors"
	"fmt"

	"github.com/prflow/prflow/scm"
)

// RevertPR makes a commit that undoes commitId (a plain, merge or squash commit; merges are
// reverted against their first parent) on a new branch, and opens a PR. MergePR merges it.
func init() {
	Register(Definition{
		Type:   "RevertPR",
		Priors: []string{"UpdateReleaseRepo"},
		New:    func() Step { return StepFunc(runRevertPR) },
		Config: revertConfig{},
		Validate: func(in map[string]any) error {
			if s, _ := in["commitId"].(string); s == "" {
				return fmt.Errorf("commitId: required (the commit to revert, e.g. MergePR's commitId)")
			}
			return nil
		},
	})
}

// revertConfig is RevertPR's `with:`.
type revertConfig struct {
	Connector string `input:"connector" doc:"the worker connector (SCM credentials) of the repo"`
	Repo      string `input:"repo" doc:"the repo, e.g. acme/release"`
	// BaseBranch falls back to the stage's UpdateReleaseRepo's, then to main.
	BaseBranch string `input:"baseBranch,default=main,fallback" doc:"the branch the PR targets"`
	CommitID   string `input:"commitId,required" doc:"the commit to revert, e.g. MergePR's commitId"`
	Mainline   int    `input:"mainline,default=1" doc:"the parent a merge commit is reverted against"`
	PRTitle    string `input:"prTitle"`
	PRBody     string `input:"prBody"`
	restraintInputs
}

func runRevertPR(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := Decode[revertConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	connector, repo, base := cfg.Connector, cfg.Repo, cfg.BaseBranch
	// Rollback steps usually revert what this stage's UpdateReleaseRepo did: default to it.
	for i := len(sc.Priors) - 1; i >= 0 && (connector == "" || repo == "" || base == ""); i-- {
		p := sc.Priors[i]
		if p.Type != "UpdateReleaseRepo" {
			continue
		}
		if connector == "" {
			connector, _ = p.Outputs["connector"].(string)
		}
		if repo == "" {
			repo, _ = p.Outputs["repo"].(string)
		}
		if base == "" {
			base, _ = p.Outputs["baseBranch"].(string)
		}
	}
	if base == "" {
		base = "main"
	}
	sha := cfg.CommitID
	if sha == "" {
		return Result{}, Terminalf("commitId: empty (nothing to revert)")
	}
	if repo == "" {
		return Result{}, Terminalf("repo: required")
	}
	mainline := cfg.Mainline
	p, err := scmFor(ctx, sc, connector)
	if err != nil {
		return Result{}, err
	}
	r := scm.Repo(repo)
	branch := workBranch(sc, "revert")
	unlock, err := restraint(ctx, sc, connector, "repo", connector, repo, branch)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	if pr, err := p.FindPR(ctx, r, branch, base); err == nil {
		files, _ := p.ChangedFiles(ctx, r, pr.Number)
		return Done(prOutputs(pr, pr.HeadSHA, branch, connector, repo, base, files)), nil
	} else if !errors.Is(err, scm.ErrNotFound) {
		return Result{}, classify(err, "find PR for "+branch)
	}
	var commit string
	if br, err := p.Branch(ctx, r, branch); err == nil {
		commit = br.SHA // an earlier attempt made the revert and died before the PR
	} else if errors.Is(err, scm.ErrNotFound) {
		short := sha
		if len(short) > 12 {
			short = short[:12]
		}
		commit, err = p.Revert(ctx, r, scm.RevertInput{SHA: sha, Mainline: mainline, Base: base, Branch: branch,
			Message: fmt.Sprintf("Revert %s (prflow run %s, stage %s)", short, sc.RunID, sc.Stage)})
		if err != nil {
			var ce *scm.ConflictError
			if errors.As(err, &ce) {
				return Fail(fmt.Sprintf("revert of %s in %s conflicts with later changes in: %v", short, repo, ce.Files)), nil
			}
			return Result{}, classify(err, "revert "+short)
		}
	} else {
		return Result{}, classify(err, "branch "+branch)
	}
	title := cfg.PRTitle
	if title == "" {
		title = fmt.Sprintf("prflow: revert %.12s (%s / %s)", sha, sc.Pipeline, sc.Stage)
	}
	body := cfg.PRBody
	if body == "" {
		body = fmt.Sprintf("Reverts %s. Opened by prflow run %s (stage %s, step %s).", sha, sc.RunID, sc.Stage, sc.StepID)
	}
	pr, err := p.OpenPR(ctx, r, scm.NewPR{Title: title, Body: body, Head: branch, Base: base})
	if err != nil {
		return Result{}, classify(err, "open revert PR "+branch)
	}
	files, _ := p.ChangedFiles(ctx, r, pr.Number)
	sc.Log.Info("opened revert PR", "pr", pr.Number, "url", pr.URL)
	return Done(prOutputs(pr, commit, branch, connector, repo, base, files)), nil
}

// deleteRevertBranch is MergePR's deleteSourceBranch: the input when it is given; otherwise
// true for the PR a RevertPR step of this stage opened (number), false for any other. A
// revert branch exists only for its PR, so leaving it after the merge would leave one
// branch behind per rollback.
func deleteRevertBranch(sc *Context, number int, given bool) bool {
	if hasValue(sc.Inputs, "deleteSourceBranch") {
		return given
	}
	for _, p := range sc.Priors {
		if p.Type != "RevertPR" {
			continue
		}
		if n, err := intInput(p.Outputs["prNumber"], "prNumber", false); err == nil && n == number {
			return true
		}
	}
	return given
}
