package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

// A GitOpsSync parked on an app that is rolling out costs nothing while nothing changes: no
// job is dispatched for it (no poll round trip through a worker) in the seconds after it
// parked, when a poll ramp would have woken it several times; the app's change still wakes it.
// Then its agent losing its leader's health (no app record changes) wakes it too, and it says
// it cannot see instead of judging.
func TestParkedGitOpsSyncIsIdle(t *testing.T) {
	t.Parallel()
	m := controller.NewMetrics(nil)
	s := newWebStack(t, stackOpts{metrics: m})
	run := s.startParkedOnHealth("web", pipeline(syncWeb, true))
	jobs := m.Dispatched.WithLabelValues("GitOpsSync")
	// The app's record goes on changing for a moment after the step first parks (the
	// operation's end, the refresh after it); each change wakes the step once, rightly. Count
	// from when no job was dispatched for 2 s: a poll ramp starting at 1 s never gets there.
	before := counterValue(jobs)
	for settle := time.Now().Add(30 * time.Second); ; before = counterValue(jobs) {
		time.Sleep(2 * time.Second)
		if counterValue(jobs) == before {
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("GitOpsSync jobs are still dispatched every few seconds for a parked step (%v so far)", before)
		}
	}
	time.Sleep(8 * time.Second) // a 1s, 2s, 4s poll ramp would have dispatched three jobs
	if n := counterValue(jobs) - before; n != 0 {
		r, _ := s.ctl.Get(s.ctx, run.ID)
		st := step(r, "dev", "sync")
		t.Fatalf("%v GitOpsSync jobs dispatched for a parked step while nothing changed (wake %d: %q)\n%s", n, st.Wake, st.WakeReason, describeRun(r))
	}
	r, err := s.ctl.Get(s.ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := step(r, "dev", "sync"); st.Status != pipelines.StWaiting || st.Wait.Poll < 10*time.Minute {
		t.Fatalf("step %s, poll %s: want parked with a backstop poll of minutes", st.Status, st.Wait.Poll)
	}
	if err := s.argo.SetHealth("web", argocdtest.HealthHealthy, ""); err != nil {
		t.Fatal(err)
	}
	r = s.wait(run.ID, 60*time.Second)
	if st := step(r, "dev", "sync"); r.Status != pipelines.StSucceeded || st.WakeReason != "key "+agent.StatusKey("eu", "web")+" changed" {
		t.Fatalf("run %s, last wake reason %q: want the app's key", r.Status, st.WakeReason)
	}
}

// The agent dies while a GitOpsSync waits on a fresh view: its records do not change (nobody
// writes them), yet the step is woken once the agent's registration expires, and parks saying
// it cannot see the apps (DESIGN: no decision on a stale view) instead of waiting silently
// for the backstop poll.
func TestParkedGitOpsSyncNoticesItsAgentGone(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	// A deadline well past the registration's expiry: the step must not reach it.
	run := s.startParkedOnHealth("web", pipeline(strings.Replace(syncWeb, "timeout: 60s", "timeout: 10m", 1), true))
	s.crashAgent()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := s.ctl.Get(s.ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		st := step(r, "dev", "sync")
		if st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "agent") && strings.HasPrefix(st.WakeReason, "agent eu") {
			if r.Status.Terminal() {
				t.Fatalf("run ended blind: %s", r.Status)
			}
			return
		}
		if r.Status.Terminal() || time.Now().After(deadline) {
			t.Fatalf("run %s; step %s, wake reason %q, wait %+v: want woken by its agent's registration and parked saying it cannot see", r.Status, st.Status, st.WakeReason, st.Wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
