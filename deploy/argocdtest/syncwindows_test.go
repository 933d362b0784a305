package argocdtest

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock tests move by hand.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.set(t)
	return c
}
func (c *testClock) now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Thursday 26 November 2026, 23:00 UTC: inside a nightly deny window.
var lateEvening = time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)

func TestSyncWindowsEndpointAndRefusal(t *testing.T) {
	clock := newTestClock(lateEvening)
	s, _, _ := newFake(t, WithClock(clock.now))
	repo := "https://git.example/demo.git"
	if err := s.SetSyncWindows("default", SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"demo*"}, TimeZone: "UTC"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"demo", "other"} {
		if err := s.AddApp(demoApp(n, repo, "apps/demo")); err != nil {
			t.Fatal(err)
		}
	}

	var w ApplicationSyncWindowsResponse
	call(t, s, "GET", "/api/v1/applications/demo/syncwindows", nil).json(t, &w)
	want := ApplicationSyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h"}
	if w.CanSync || len(w.ActiveWindows) != 1 || w.ActiveWindows[0] != want || len(w.AssignedWindows) != 1 || w.AssignedWindows[0] != want {
		t.Fatalf("demo's windows at 23:00: %+v", w)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{"name": "demo"}), 403, 7, "cannot sync: blocked by sync window")

	// A window assigns to the apps its globs match, and only to them.
	w = ApplicationSyncWindowsResponse{}
	r := call(t, s, "GET", "/api/v1/applications/other/syncwindows", nil)
	r.json(t, &w)
	if !w.CanSync || len(w.AssignedWindows) != 0 || !strings.Contains(string(r.body), `"canSync":true`) {
		t.Fatalf("other's windows: %s", r.body)
	}
	if r := call(t, s, "POST", "/api/v1/applications/other/sync", map[string]any{"name": "other"}); r.status != 200 {
		t.Fatalf("sync of an app no window matches: %d %s", r.status, r.body)
	}

	// At 06:00 the window has ended.
	clock.set(lateEvening.Add(7 * time.Hour))
	w = ApplicationSyncWindowsResponse{}
	call(t, s, "GET", "/api/v1/applications/demo/syncwindows", nil).json(t, &w)
	if !w.CanSync || len(w.ActiveWindows) != 0 || len(w.AssignedWindows) != 1 {
		t.Fatalf("demo's windows at 06:00: %+v", w)
	}
	if r := call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{"name": "demo"}); r.status != 200 {
		t.Fatalf("sync after the window: %d %s", r.status, r.body)
	}

	// The project carries the windows with their time zones.
	var p AppProject
	call(t, s, "GET", "/api/v1/projects/default", nil).json(t, &p)
	if len(p.Spec.SyncWindows) != 1 || p.Spec.SyncWindows[0].TimeZone != "UTC" || p.Metadata.ResourceVersion == "" {
		t.Fatalf("project: %+v", p)
	}
	wantError(t, call(t, s, "GET", "/api/v1/projects/nope", nil), 404, 5, `appprojects.argoproj.io "nope" not found`)
	wantError(t, call(t, s, "GET", "/api/v1/applications/nope/syncwindows", nil), 403, 7, "permission denied")
}

func TestSyncWindowsManualSyncAndDenyWins(t *testing.T) {
	clock := newTestClock(lateEvening)
	s, _, _ := newFake(t, WithClock(clock.now))
	repo := "https://git.example/demo.git"
	if err := s.AddApp(demoApp("demo", repo, "apps/demo")); err != nil {
		t.Fatal(err)
	}
	// The API server counts every sync it is asked for as manual: manualSync lets it through.
	if err := s.SetSyncWindows("default", SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Namespaces: []string{"demo"}, ManualSync: true}); err != nil {
		t.Fatal(err)
	}
	var w ApplicationSyncWindowsResponse
	call(t, s, "GET", "/api/v1/applications/demo/syncwindows", nil).json(t, &w)
	if !w.CanSync || len(w.ActiveWindows) != 1 || !w.ActiveWindows[0].ManualSync {
		t.Fatalf("manualSync deny window: %+v", w)
	}
	if r := call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{"name": "demo"}); r.status != 200 {
		t.Fatalf("sync through a manualSync window: %d %s", r.status, r.body)
	}
	waitApp(t, s, "demo", func(a Application) bool {
		return a.Status.OperationState != nil && a.Status.OperationState.Phase == PhaseSucceeded
	})

	// An active allow window does not open an active deny window.
	if err := s.SetSyncWindows("default",
		SyncWindow{Kind: "allow", Schedule: "0 20 * * *", Duration: "6h", Clusters: []string{"https://kubernetes.default.svc"}},
		SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	w = ApplicationSyncWindowsResponse{}
	call(t, s, "GET", "/api/v1/applications/demo/syncwindows", nil).json(t, &w)
	if w.CanSync || len(w.ActiveWindows) != 2 {
		t.Fatalf("allow and deny active: %+v", w)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{"name": "demo"}), 403, 7, "cannot sync: blocked by sync window")
	// andOperator: every given selector must match.
	if err := s.SetSyncWindows("default", SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h",
		Applications: []string{"demo"}, Namespaces: []string{"elsewhere"}, AndOperator: true}); err != nil {
		t.Fatal(err)
	}
	if r := call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{"name": "demo"}); r.status != 200 {
		t.Fatalf("andOperator window that does not match: %d %s", r.status, r.body)
	}
}

func TestSyncWindowsBlockAutoSync(t *testing.T) {
	clock := newTestClock(lateEvening)
	s, _, _ := newFake(t, WithClock(clock.now))
	if err := s.SetSyncWindows("default", SyncWindow{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	a := demoApp("demo", "https://git.example/demo.git", "apps/demo")
	a.Spec.SyncPolicy = &SyncPolicy{Automated: &SyncPolicyAutomated{}}
	if err := s.AddApp(a); err != nil {
		t.Fatal(err)
	}
	s.Reconcile()
	if got := getApp(t, s, "demo"); got.Operation != nil || got.Status.OperationState != nil {
		t.Fatalf("auto-sync ran inside a deny window: %s", state(got))
	}
	clock.set(lateEvening.Add(8 * time.Hour))
	s.Reconcile()
	waitApp(t, s, "demo", func(a Application) bool {
		return a.Status.OperationState != nil && a.Status.OperationState.Operation.InitiatedBy.Automated
	})
}

func TestSetSyncWindowsRefusesWhatArgoCDRefuses(t *testing.T) {
	s, _, _ := newFake(t)
	for _, c := range []struct {
		w    []SyncWindow
		want string
	}{
		{[]SyncWindow{{Kind: "block", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"*"}}}, "kind 'block' mismatch"},
		{[]SyncWindow{{Kind: "deny", Schedule: "0 25 * * *", Duration: "8h", Applications: []string{"*"}}}, "cannot parse schedule '0 25 * * *'"},
		{[]SyncWindow{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8x", Applications: []string{"*"}}}, "cannot parse duration '8x'"},
		{[]SyncWindow{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", TimeZone: "Nowhere/Town", Applications: []string{"*"}}}, "cannot parse timezone"},
		{[]SyncWindow{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h"}}, "requires one of application, cluster or namespace"},
		{[]SyncWindow{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"a"}},
			{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Applications: []string{"b"}}}, "already exists"},
	} {
		if err := s.SetSyncWindows("default", c.w...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.w, err, c.want)
		}
	}
}
