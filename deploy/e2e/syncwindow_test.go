package e2e

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// testClock is the time of the fake Argo CD and the agent's sync windows; tests move it
// instead of sleeping until a window opens.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }
func (c *testClock) now() time.Time       { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }

var (
	// 23:00 UTC tomorrow: inside the nightly deny window below, and after the real time, as
	// the ends of windows the steps park until must be (they poll at them).
	night   = time.Now().UTC().Truncate(24 * time.Hour).Add(47 * time.Hour)
	morning = night.Add(7 * time.Hour)  // 06:00: the nightly window ends
	office  = night.Add(10 * time.Hour) // 09:00: the office window opens
	nightly = argocdtest.SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"web"}}
)

// until is the park reason's time.
func until(t time.Time) string { return t.Format(time.RFC3339) }

// newNightStack is a stack at night on a test clock (returned), with app web blocked by the
// nightly deny window of project default until morning.
func newNightStack(t *testing.T) (*stack, *testClock) {
	t.Helper()
	c := newTestClock(night)
	s := newStack(t, stackOpts{clock: c.now})
	if err := s.argo.SetSyncWindows("default", nightly); err != nil {
		t.Fatal(err)
	}
	s.addApp(app("web", "apps/web", nil))
	s.waitBlocked("web", morning)
	return s, c
}

// allSyncCalls counts sync calls to Argo CD for app, refused ones included.
func (s *stack) allSyncCalls(app string) int {
	n := 0
	for _, r := range s.argo.Requests() {
		if r.Method == "POST" && r.Path == "/api/v1/applications/"+app+"/sync" {
			n++
		}
	}
	return n
}

// waitBlocked waits until the agent reports app blocked by a window until `until`.
func (s *stack) waitBlocked(app string, until time.Time) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := s.client.Status(s.ctx, "eu", app)
		if err == nil && st.SyncWindows != nil && st.SyncWindows.Blocked && st.SyncWindows.Until.Equal(until) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: the agent did not report the sync window (record %+v, err %v)", app, st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGitOpsSyncParksInSyncWindowThenReleases(t *testing.T) {
	t.Parallel()
	s, c := newNightStack(t)

	run := s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked on the sync window", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil &&
			st.Wait.Reason == "blocked by sync window until "+until(morning)+" (web)" &&
			len(st.Wait.Keys) == 1 && st.Wait.Keys[0] == agent.StatusKey("eu", "web") && st.Wait.Poll <= 15*time.Minute && st.Wait.Poll >= time.Minute
	})
	time.Sleep(300 * time.Millisecond) // several agent ticks: nothing may sync meanwhile
	if n := s.allSyncCalls("web"); n != 0 {
		t.Fatalf("%d sync calls while the window blocked", n)
	}

	c.set(morning.Add(30 * time.Second)) // the window ends
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if n := len(s.syncRequests("web")); n != 1 {
		t.Fatalf("%d sync calls, want 1 after the window opened", n)
	}
	if n := s.allSyncCalls("web"); n != 1 {
		t.Fatalf("%d sync calls in all (refused ones included), want 1", n)
	}
}

func TestGitOpsSyncWindowParksWhenTheRecordLagsBehind(t *testing.T) {
	t.Parallel()
	// The window is added after the agent read the project, and the agent reads it again only
	// in an hour, so the record does not show the window: the agent checks the windows again
	// before syncing, refuses, and the step parks all the same.
	c := newTestClock(night)
	s := newWebStack(t, stackOpts{clock: c.now, windowRefresh: time.Hour})
	time.Sleep(100 * time.Millisecond) // the agent has read the project (no windows yet)
	if err := s.argo.SetSyncWindows("default", nightly); err != nil {
		t.Fatal(err)
	}
	run := s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked on the agent's refusal", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil &&
			st.Wait.Reason == "blocked by sync window until "+until(morning)+` (deny window "0 22 * * *" for 8h) (web)`
	})
	if rec, _ := s.client.Status(s.ctx, "eu", "web"); rec.SyncWindows != nil {
		t.Fatalf("the record shows the window (%+v): this test is about a record that does not yet", rec.SyncWindows)
	}
	if n := s.allSyncCalls("web"); n != 0 {
		t.Fatalf("%d sync calls reached Argo CD", n)
	}
	// The window ends; any change of the record wakes the step, which asks again.
	c.set(morning.Add(30 * time.Second))
	a := app("web", "apps/web", map[string]string{"touched": "yes"})
	if err := s.argo.UpdateApp(a); err != nil {
		t.Fatal(err)
	}
	if r := s.wait(run.ID, 60*time.Second); r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
}

func TestGitOpsSyncWindowOverride(t *testing.T) {
	t.Parallel()
	t.Run("manualSync window lets the override through", func(t *testing.T) {
		t.Parallel()
		c := newTestClock(night)
		s := newStack(t, stackOpts{clock: c.now})
		w := nightly
		w.ManualSync = true
		if err := s.argo.SetSyncWindows("default", w); err != nil {
			t.Fatal(err)
		}
		s.addApp(app("web", "apps/web", nil))
		s.waitBlocked("web", morning)
		r := s.wait(s.start(pipeline(syncBlind("          syncWindow: override\n"), true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
		if r.Status != pipelines.StSucceeded || len(s.syncRequests("web")) != 1 {
			t.Fatalf("run %s: %s (sync calls %d)", r.Status, r.Error, len(s.syncRequests("web")))
		}
	})
	t.Run("window without manualSync fails the step, no park", func(t *testing.T) {
		t.Parallel()
		s, _ := newNightStack(t)
		r := s.wait(s.start(pipeline(syncBlind("          syncWindow: override\n"), true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
		st := step(r, "dev", "sync")
		if r.Status != pipelines.StFailed ||
			!strings.Contains(st.Error, "web (agent eu): blocked by sync window until "+until(morning)+", and the window does not allow manual syncs") {
			t.Fatalf("run %s: %q", r.Status, st.Error)
		}
		if n := s.allSyncCalls("web"); n != 0 {
			t.Fatalf("%d sync calls", n)
		}
	})
}

func TestGitOpsSyncWindowDenyWinsOverAllow(t *testing.T) {
	t.Parallel()
	c := newTestClock(night)
	s := newStack(t, stackOpts{clock: c.now})
	// The allow window (20:00–08:00) is open, but the deny window (22:00–06:00) wins.
	if err := s.argo.SetSyncWindows("default", nightly,
		argocdtest.SyncWindow{Kind: "allow", Schedule: "0 20 * * *", Duration: "12h", Namespaces: []string{"shop"}}); err != nil {
		t.Fatal(err)
	}
	s.addApp(app("web", "apps/web", nil))
	s.waitBlocked("web", morning)
	run := s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked on the deny window", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.HasPrefix(st.Wait.Reason, "blocked by sync window until "+until(morning))
	})
	c.set(morning.Add(time.Minute)) // deny over, allow still open
	if r := s.wait(run.ID, 60*time.Second); r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
}

func TestGitOpsSyncWindowsOfAppsInDifferentProjects(t *testing.T) {
	t.Parallel()
	c := newTestClock(night)
	s := newStack(t, stackOpts{clock: c.now})
	if err := s.argo.SetSyncWindows("night", argocdtest.SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.argo.SetSyncWindows("office", argocdtest.SyncWindow{Kind: "allow", Schedule: "0 9 * * *", Duration: "8h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	web := app("web", "apps/web", nil)
	web.Spec.Project = "night"
	api := app("api", "apps/web", nil)
	api.Spec.Project, api.Spec.Destination.Namespace = "office", "api"
	s.addApp(web)
	s.addApp(api)
	s.waitBlocked("web", morning)
	s.waitBlocked("api", office)
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}, {agentId: eu, applicationName: api}]
          waitTillHealthy: true
`, true)
	run := s.start(src, map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "both blocked", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && st.Wait.Reason == "blocked by sync window until "+until(office)+" (web, api)"
	})
	// 06:30: web's window is over, api's allow window not open yet.
	c.set(morning.Add(30 * time.Minute))
	s.waitStep(run.ID, "dev", "sync", "web synced, api blocked", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && st.Wait.Reason == "blocked by sync window until "+until(office)+" (api)"
	})
	if len(s.syncRequests("web")) != 1 || s.allSyncCalls("api") != 0 {
		t.Fatalf("sync calls: web %d, api %d", len(s.syncRequests("web")), s.allSyncCalls("api"))
	}
	c.set(office.Add(time.Minute))
	if r := s.wait(run.ID, 60*time.Second); r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
}

func TestGitOpsSyncWindowTimeoutStillApplies(t *testing.T) {
	s, _ := newNightStack(t)
	src := pipeline(strings.Replace(syncBlind(""), "timeout: 60s", "timeout: 2s", 1), true)
	r := s.wait(s.start(src, map[string]any{"commit": s.sha}).ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || !strings.Contains(st.Error, "timed out with the sync not finished for web (agent eu): blocked by sync window until "+until(morning)) {
		t.Fatalf("run %s: %q", r.Status, st.Error)
	}
}

func TestGitOpsSyncWindowOptionTypoRefusedAtLoad(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ value, want string }{
		{"overide", `"overide" is not one of wait, override; did you mean "override"?`},
		{"true", `"true" is not one of wait, override`},
	} {
		_, err := pipelines.Load("p.yaml", []byte(pipeline(syncBlind("          syncWindow: "+c.value+"\n"), true)), registry())
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "syncWindow") {
			t.Errorf("syncWindow: %s: %v, want %q", c.value, err, c.want)
		}
	}
	if _, err := pipelines.Load("p.yaml", []byte(pipeline(syncBlind("          syncWindow: wait\n"), true)), registry()); err != nil {
		t.Fatalf("syncWindow: wait refused: %v", err)
	}
}
