package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
)

// MergePR merges the PR of this stage's latest UpdateReleaseRepo or RevertPR (or a given
// prNumber) with a head-SHA guard. It parks while the forge is still computing mergeability
// or checks are pending; an already merged PR is success with its existing merge commit.
func init() {
	Register(Definition{
		Type: "MergePR",
		New:  func() Step { return StepFunc(runMergePR) },
		Validate: func(in map[string]any) error {
			if s, ok := in["mergeStrategy"].(string); ok && !hasExpr(s) {
				switch s {
				case "merge", "squash", "rebase":
				default:
					return fmt.Errorf("mergeStrategy: %q is not merge, squash or rebase", s)
				}
			}
			return nil
		},
	})
}

func runMergePR(ctx context.Context, sc *Context) (Result, error) {
	in := sc.Inputs
	connector, _ := StringInput(in, "connector")
	repo, _ := StringInput(in, "repo")
	number := 0
	if v, ok := in["prNumber"]; ok && v != nil && v != "" {
		n, err := intInput(v, "prNumber", false)
		if err != nil {
			return Result{}, Terminal(err)
		}
		number = n
	}
	if number == 0 {
		prior := priorPR(sc)
		if prior == nil {
			return Result{}, Terminalf("no PR to merge: give prNumber, or put an UpdateReleaseRepo or RevertPR step before this one in stage %s", sc.Stage)
		}
		if prior.Outputs["prNumber"] == "" || prior.Outputs["prNumber"] == nil {
			sc.Log.Info("the previous step opened no PR (nothing changed); nothing to merge", "step", prior.ID)
			return Done(map[string]any{"commitId": ""}), nil
		}
		n, err := intInput(prior.Outputs["prNumber"], "prNumber of step "+prior.ID, false)
		if err != nil {
			return Result{}, Terminal(err)
		}
		number = n
		if connector == "" {
			connector, _ = prior.Outputs["connector"].(string)
		}
		if repo == "" {
			repo, _ = prior.Outputs["repo"].(string)
		}
	}
	if repo == "" {
		return Result{}, Terminalf("repo: required with prNumber")
	}
	method := scm.MergeMethod("merge")
	if s, _ := StringInput(in, "mergeStrategy"); s != "" {
		method = scm.MergeMethod(s)
	}
	del, err := BoolInput(in, "deleteSourceBranch")
	if err != nil {
		return Result{}, Terminal(err)
	}
	p, err := scmFor(ctx, sc, connector)
	if err != nil {
		return Result{}, err
	}
	r := scm.Repo(repo)
	pr, err := p.GetPR(ctx, r, number)
	if err != nil {
		return Result{}, classify(err, fmt.Sprintf("get PR #%d", number))
	}
	switch pr.State {
	case scm.PRMerged:
		sc.Log.Info("PR already merged", "pr", pr.Number, "commit", pr.MergeSHA)
		return Done(map[string]any{"commitId": pr.MergeSHA, "prNumber": pr.Number, "prlink": pr.URL}), nil
	case scm.PRClosed:
		return Fail(fmt.Sprintf("PR #%d (%s) is closed without being merged", pr.Number, pr.URL)), nil
	}
	switch pr.Mergeability {
	case scm.MergeDirty:
		files, _ := p.ChangedFiles(ctx, r, pr.Number)
		return Fail(fmt.Sprintf("PR #%d (%s) has conflicts with %s; files: %s", pr.Number, pr.URL, pr.Base, strings.Join(files, ", "))), nil
	case scm.MergeUnknown, scm.MergeBlocked:
		if sc.WakeReason == "deadline" {
			return Fail(fmt.Sprintf("PR #%d (%s) did not become mergeable in time (%s)", pr.Number, pr.URL, pr.Mergeability)), nil
		}
		poll := 2 * time.Second
		if pr.Mergeability == scm.MergeBlocked {
			poll = 30 * time.Second // checks or reviews: status webhooks wake it sooner
		}
		return Park(Wait{Topics: []string{prTopic(p.Name(), repo, pr.Number)}, Poll: poll, Deadline: sc.Deadline,
			Reason: fmt.Sprintf("PR #%d is %s", pr.Number, pr.Mergeability)}, nil), nil
	}
	unlock, err := lock(ctx, sc, "repo", connector, repo, pr.Base)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	merged, err := p.MergePR(ctx, r, pr.Number, scm.MergeInput{Method: method, SHA: pr.HeadSHA, DeleteBranch: del})
	if err != nil {
		if errors.Is(err, scm.ErrNotMergeable) {
			// A race with another merge may have made it conflict, or a check failed.
			if cur, gerr := p.GetPR(ctx, r, pr.Number); gerr == nil && cur.State == scm.PRMerged {
				return Done(map[string]any{"commitId": cur.MergeSHA, "prNumber": cur.Number, "prlink": cur.URL}), nil
			}
		}
		return Result{}, classify(err, fmt.Sprintf("merge PR #%d", pr.Number))
	}
	sc.Log.Info("PR merged", "pr", merged.Number, "commit", merged.MergeSHA, "method", string(method))
	return Done(map[string]any{"commitId": merged.MergeSHA, "prNumber": merged.Number, "prlink": merged.URL}), nil
}
