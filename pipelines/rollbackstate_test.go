package pipelines

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/steps"
)

const stageWithRollback = "name: x\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n    rollbackSteps:\n      - {id: undo, type: Noop}\n      - {id: undo2, type: Noop}\n"

// A step that failed blind (its agent could not see Argo CD) fails the stage without running
// its rollback, says so, and keeps its outputs.
func TestMachineNoRollbackSkipsTheRollback(t *testing.T) {
	m := mustLoad(t, stageWithRollback)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	res := steps.FailBlind("cannot see Argo CD")
	res.Outputs = map[string]any{"applications": []any{map[string]any{"name": "web"}}}
	if jobs := result(m, r, j, res, testNow); len(jobs) != 0 {
		t.Fatalf("rollback dispatched after a blind failure: %+v", jobs)
	}
	st := step(r, "s", "a")
	if r.Status != StFailed || !st.NoRollback || !strings.Contains(r.Error, "not rolled back") || st.Outputs["applications"] == nil {
		t.Fatalf("run %s %q; step %+v", r.Status, r.Error, st)
	}
	if u := r.Find("s").Step("undo", true); u.Status == StSucceeded || u.Status == StQueued {
		t.Fatalf("rollback step %s", u.Status)
	}
	// The same failure without NoRollback rolls back, as before.
	r2, _ := NewRun(m.P, "r2", nil, "me", testNow)
	j = m.Advance(r2, testNow)[0]
	if jobs := result(m, r2, j, steps.Fail("degraded"), testNow); len(jobs) != 1 || jobs[0].Step != "undo" {
		t.Fatalf("a normal failure must roll back: %+v", jobs)
	}
}

// A rollback that cannot finish leaves the run failed with RollbackFailed saying what git and
// the cluster hold, and the error says "rollback failed".
func TestMachineRollbackFailedSaysWhatIsLeft(t *testing.T) {
	m := mustLoad(t, stageWithRollback)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	jobs := result(m, r, j, steps.Fail("degraded"), testNow)
	if len(jobs) != 1 || jobs[0].Step != "undo" {
		t.Fatalf("rollback: %+v", jobs)
	}
	result(m, r, jobs[0], steps.Fail("401 from Argo CD"), testNow)
	if r.Status != StFailed || r.RollbackFailed == "" || !strings.Contains(r.Error, "rollback failed: step undo: 401 from Argo CD") ||
		!strings.Contains(r.RollbackFailed, "stage s: git: ") || !strings.Contains(r.RollbackFailed, "cluster: ") {
		t.Fatalf("run %s %q; rollbackFailed %q", r.Status, r.Error, r.RollbackFailed)
	}
	if u := r.Find("s").Step("undo2", true); u.Status != StNotRun {
		t.Fatalf("the rest of the rollback: %s", u.Status)
	}
}

func TestRollbackStateNamesGitAndCluster(t *testing.T) {
	sr := &StageRun{ID: "prod",
		Steps: []*StepRun{
			{ID: "merge", Type: "MergePR", Status: StSucceeded, Outputs: map[string]any{"commitId": "aaaaaaaaaaaaaaaaaaaa"}},
			{ID: "sync", Type: "GitOpsSync", Status: StFailed, Outputs: map[string]any{"applications": []any{
				map[string]any{"name": "web", "sync": "Synced", "health": "Degraded", "revision": "aaaaaaaaaaaaaaaaaaaa"}}}},
		},
		Rollback: []*StepRun{
			{ID: "revert", Type: "RevertPR", Status: StSucceeded, Outputs: map[string]any{"prNumber": 7, "prlink": "https://git.example/pr/7"}},
			{ID: "mergeRevert", Type: "MergePR", Status: StFailed},
			{ID: "resync", Type: "GitOpsSync", Status: StPending},
		},
	}
	got := rollbackState(sr)
	want := "git: the change is merged as aaaaaaaaaaaa, the revert PR https://git.example/pr/7 is open, not merged; cluster: web Synced/Degraded at aaaaaaaaaaaa"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	sr.Rollback[1].Status, sr.Rollback[1].Outputs = StSucceeded, map[string]any{"commitId": "bbbbbbbbbbbbbbbb"}
	sr.Rollback[2].Status, sr.Rollback[2].Outputs = StFailed, map[string]any{"applications": []any{
		map[string]any{"name": "web", "sync": "OutOfSync", "health": "Degraded", "revision": "aaaaaaaaaaaaaaaa", "stale": "since T: 401"}}}
	got = rollbackState(sr)
	if !strings.Contains(got, "the revert is merged as bbbbbbbbbbbb") || !strings.Contains(got, "web OutOfSync/Degraded at aaaaaaaaaaaa (stale view: since T: 401)") {
		t.Fatalf("got %q", got)
	}
	// An app the rollback skipped because it no longer exists says so, not "?/? at ?".
	sr.Rollback[2].Outputs = map[string]any{"applications": []any{
		map[string]any{"name": "web", "state": "skipped", "skipped": "app web was deleted at T: nothing to roll back there"}}}
	if got := rollbackState(sr); !strings.Contains(got, "cluster: web skipped (app web was deleted at T: nothing to roll back there)") {
		t.Fatalf("got %q", got)
	}
	if got := rollbackState(&StageRun{ID: "x"}); got != "git: unknown (no merge recorded); cluster: unknown (no sync recorded)" {
		t.Fatalf("empty: %q", got)
	}
}
