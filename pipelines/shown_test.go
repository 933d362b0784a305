package pipelines

import (
	"testing"

	"github.com/prflow/prflow/steps"
)

// TestRunShown: a run shows waitingApproval only while unfinished with a step (or rollback
// step) parked on the approval topic; a step parked on something else makes it Parked (the UI's
// waiting filter) but still running; a finished run with a stale parked step shows its status.
func TestRunShown(t *testing.T) {
	approval := &steps.Wait{Topics: []string{"approval"}}
	merge := &steps.Wait{Topics: []string{"pr:github:acme/release#7"}}
	mk := func(status Status, rb bool, st *StepRun) *Run {
		sr := &StageRun{ID: "prod", Status: StRunning}
		if rb {
			sr.Rollback = []*StepRun{st}
		} else {
			sr.Steps = []*StepRun{{ID: "done", Status: StSucceeded}, st}
		}
		return &Run{ID: "r1", Status: status, Stages: []*StageRun{sr}}
	}
	for _, tc := range []struct {
		name          string
		run           *Run
		shown         Status
		parked, wants bool
	}{
		{"parked on an approval", mk(StRunning, false, &StepRun{ID: "ok", Status: StWaiting, Wait: approval}), StWaitingApproval, true, true},
		{"rollback step parked on an approval", mk(StRunning, true, &StepRun{ID: "ok", Status: StWaiting, Wait: approval}), StWaitingApproval, true, true},
		{"parked on a PR merge", mk(StRunning, false, &StepRun{ID: "merge", Status: StWaiting, Wait: merge}), StRunning, true, false},
		{"approval step queued, not parked", mk(StRunning, false, &StepRun{ID: "ok", Status: StQueued, Wait: approval}), StRunning, false, false},
		{"parked without a wait", mk(StRunning, false, &StepRun{ID: "ok", Status: StWaiting}), StRunning, true, false},
		{"cancelled run with a stale parked approval", mk(StCancelled, false, &StepRun{ID: "ok", Status: StWaiting, Wait: approval}), StCancelled, false, false},
		{"pending run", mk(StPending, false, &StepRun{ID: "ok", Status: StPending}), StPending, false, false},
	} {
		if got := tc.run.Shown(); got != tc.shown {
			t.Errorf("%s: Shown %s, want %s", tc.name, got, tc.shown)
		}
		if got := tc.run.Parked(); got != tc.parked {
			t.Errorf("%s: Parked %v, want %v", tc.name, got, tc.parked)
		}
		if got := tc.run.WaitingApproval(); got != tc.wants {
			t.Errorf("%s: WaitingApproval %v, want %v", tc.name, got, tc.wants)
		}
	}
	if StWaitingApproval.Terminal() {
		t.Error("waitingApproval is terminal: status -w would stop watching")
	}
}
