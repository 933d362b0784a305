package pipelines

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// CleanupSpec is a pipeline's `cleanup:` block: what happens to the side effects of a run that
// failed or was cancelled.
type CleanupSpec struct {
	// KeepFailedPRs leaves the PRs and branches such a run opened as they are (for debugging);
	// by default they are closed with a comment naming the run and the reason, and their
	// branches deleted.
	KeepFailedPRs bool
}

// Where a run's cleanup job goes: no stage of the pipeline can have this id (ids start with a
// letter), so its Nats-Msg-Id (run/_cleanup/cleanup/1/0) is unique and it goes out once.
const (
	CleanupStage = "_cleanup"
	cleanupStep  = "cleanup"
)

// CleanupJob is the job that clears up after run r, which just ended failed or cancelled
// (nil when it has nothing to clear up, or did not end that way). Invariant 5: every PR or
// branch prflow opened is merged, or closed and deleted when its run fails. The controller
// holds no forge token, so a worker does it (steps.TypeCleanup): it closes the PRs the run's
// UpdateReleaseRepo and RevertPR steps opened that are still open, with a comment, deletes
// their branches (also those of steps that pushed a branch and failed before a PR), and
// takes the run's merges out of their merge queues.
func (m *Machine) CleanupJob(r *Run) *envelope.Job {
	if r.Status != StFailed && r.Status != StCancelled {
		return nil
	}
	var prs, branches []any
	var connectors []string
	seen := map[string]bool{}
	pool, queued := "", false
	for si, sr := range r.Stages {
		if sr.CarriedFrom != "" {
			continue // a retry took it over: its PRs and branches are the run's that ran it
		}
		for ri, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if st.Type == "MergePR" && st.Status != StPending && st.Status != StSkipped {
					queued = true // it may hold a place in a merge queue
				}
				if st.Type != "UpdateReleaseRepo" && st.Type != "RevertPR" {
					continue
				}
				out := st.Outputs
				if out == nil && len(st.Memo) > 0 {
					// Parked waiting for its PR's merge (waitForMerge): the PR is in the memo.
					var memo struct {
						Outputs map[string]any `json:"outputs"`
					}
					_ = json.Unmarshal(st.Memo, &memo)
					out = memo.Outputs
				}
				pr := map[string]any{}
				for _, k := range []string{"connector", "repo", "prNumber", "ref", "baseBranch", "edits"} {
					if v, ok := out[k]; ok && v != nil && v != "" {
						pr[k] = v
					}
				}
				var c string
				if pr["connector"] == nil || pr["repo"] == nil || pr["prNumber"] == nil {
					// Opened (or reported) no PR: it may still have pushed its branch before it
					// failed, crashed or was cancelled. That branch has the step's deterministic
					// name; the worker deletes it if it is there (and closes a PR it finds on it).
					b := m.pushedBranch(r, si, st, ri == 1)
					if b == nil {
						continue // never dispatched, or its inputs no longer resolve
					}
					branches = append(branches, b)
					c = fmt.Sprint(b["connector"])
				} else {
					pr["step"] = fmt.Sprintf("%s.%s", sr.ID, st.ID)
					prs = append(prs, pr)
					c = fmt.Sprint(pr["connector"])
				}
				if !seen[c] {
					seen[c] = true
					connectors = append(connectors, c)
				}
				if pool == "" {
					if sp := m.spec(si, st, ri == 1); sp != nil {
						pool = sp.Pool
					}
				}
			}
		}
	}
	if len(prs) == 0 && len(branches) == 0 && !queued {
		return nil
	}
	if pool == "" {
		pool = DefaultPool
	}
	keep := m.P.Cleanup != nil && m.P.Cleanup.KeepFailedPRs
	reason := string(r.Status)
	if r.Error != "" {
		reason += ": " + r.Error
	}
	return &envelope.Job{V: envelope.Version, Run: r.ID, Pipeline: r.Pipeline, Stage: CleanupStage, Step: cleanupStep,
		Type: steps.TypeCleanup, Pool: pool, Attempt: 1, Executor: r.Executor, Connectors: connectors,
		Inputs: map[string]any{"prs": prs, "branches": branches, "reason": reason, "keepFailedPRs": keep}}
}

// pushedBranch describes the work branch a release step that reported no PR may have pushed:
// connector, repo and base from its inputs as its job had them, the branch by the name the
// step gives it (steps.WorkBranch). nil when the step was never dispatched.
func (m *Machine) pushedBranch(r *Run, si int, st *StepRun, rollback bool) map[string]any {
	if st.Attempt == 0 && st.Queued.IsZero() {
		return nil
	}
	sp := m.spec(si, st, rollback)
	if sp == nil {
		return nil
	}
	branch := steps.WorkBranch(st.Type, r.Pipeline, r.ID, r.Stages[si].ID, st.ID)
	if branch == "" {
		return nil
	}
	j, err := m.job(r, si, st, sp, rollback, m.Env(r, si, rollback), time.Time{})
	if err != nil {
		return nil
	}
	connector, _ := j.Inputs["connector"].(string)
	repo, _ := j.Inputs["repo"].(string)
	if connector == "" || repo == "" {
		return nil
	}
	base, _ := j.Inputs["baseBranch"].(string)
	if base == "" {
		base = "main"
	}
	return map[string]any{"connector": connector, "repo": repo, "branch": branch, "baseBranch": base,
		"step": fmt.Sprintf("%s.%s", r.Stages[si].ID, st.ID)}
}
