package argocd

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

// clock is a clock the test moves; the fake Argo CD and the agent share it.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }

// Thursday 26 November 2026, 23:00 UTC.
var thu2300 = time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)

func inProject(a argocdtest.Application, project string) argocdtest.Application {
	a.Spec.Project = project
	return a
}

func syncWindowCalls(w *world, app string) int {
	n := 0
	for _, r := range w.argo.Requests() {
		if r.Method == "GET" && r.Path == "/api/v1/applications/"+app+"/syncwindows" {
			n++
		}
	}
	return n
}

func fastWindows(c *clock) func(*Options, *Client) {
	return func(o *Options, _ *Client) {
		o.Now, o.SyncWindowTick, o.SyncWindowRefresh = c.now, 20*time.Millisecond, 100*time.Millisecond
	}
}

func TestSyncWindowsInRecords(t *testing.T) {
	c := newClock(thu2300)
	w := newWorld(t, argocdtest.WithClock(c.now))
	// 23:00 in Paris is 22:00 UTC in winter: the window ends at 06:00 UTC, not 07:00.
	if err := w.argo.SetSyncWindows("night", argocdtest.SyncWindow{Kind: "deny", Schedule: "0 23 * * *", Duration: "8h",
		TimeZone: "Europe/Paris", Applications: []string{"web"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.argo.SetSyncWindows("office", argocdtest.SyncWindow{Kind: "allow", Schedule: "0 9 * * 1-5", Duration: "8h", Namespaces: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	w.addApp(inProject(app("web", "apps/web", nil), "night"), argocdtest.Deployed())
	w.addApp(inProject(app("api", "apps/api", nil), "office"), argocdtest.Deployed())
	w.addApp(app("free", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1", fastWindows(c))

	fri0600 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	fri0900 := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	web := w.waitRecord("eu", "web", "web blocked until 06:00 UTC", func(s *agent.AppStatus) bool {
		return s != nil && s.SyncWindows != nil && s.SyncWindows.Blocked && s.SyncWindows.Until.Equal(fri0600)
	})
	if ws := web.SyncWindows.Windows; len(ws) != 1 || !ws[0].Active || ws[0].TimeZone != "Europe/Paris" || web.SyncWindows.ManualSync ||
		web.SyncWindows.Describe() != "blocked by sync window until 2026-11-27T06:00:00Z" {
		t.Fatalf("web's windows: %+v", web.SyncWindows)
	}
	w.waitRecord("eu", "api", "api blocked until the office window opens", func(s *agent.AppStatus) bool {
		return s != nil && s.SyncWindows != nil && s.SyncWindows.Blocked && s.SyncWindows.Until.Equal(fri0900)
	})
	time.Sleep(150 * time.Millisecond) // a project refresh and a few ticks
	if free := w.record("eu", "free"); free == nil || free.SyncWindows != nil {
		t.Fatalf("free (a project without windows) has windows: %+v", free)
	}
	if n := syncWindowCalls(w, "free"); n != 0 {
		t.Fatalf("%d syncwindows calls for an app whose project has no windows; the project says so", n)
	}

	// Sync requests are refused while a window blocks, before Argo CD is asked.
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"api"}, RunID: "run1", Step: "dev/sync/1"})
	if err != nil {
		t.Fatal(err)
	}
	if e := rep.Results[0].Error; e == nil || !errors.Is(e, agent.ErrSyncWindow) || !strings.Contains(e.Message, "blocked by sync window until 2026-11-27T09:00:00Z") {
		t.Fatalf("sync of api in a closed allow window: %+v", rep.Results[0])
	}
	rep, _ = w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"api"}, RunID: "run1", Step: "dev/sync/1", Manual: true})
	if e := rep.Results[0].Error; e == nil || !errors.Is(e, agent.ErrSyncWindow) || !strings.Contains(e.Message, "does not allow manual syncs") {
		t.Fatalf("manual sync of api, window without manualSync: %+v", rep.Results[0])
	}

	// The window ends: the record is rewritten once, then left alone.
	webCalls := syncWindowCalls(w, "web")
	writes := w.countWrites()
	c.set(fri0600.Add(30 * time.Minute))
	w.waitRecord("eu", "web", "web open", func(s *agent.AppStatus) bool {
		return s.SyncWindows != nil && !s.SyncWindows.Blocked && s.SyncWindows.ManualSync && !s.SyncWindows.Windows[0].Active
	})
	time.Sleep(300 * time.Millisecond)
	if n := writes.get(agent.StatusKey("eu", "web")); n != 1 {
		t.Fatalf("web's record written %d times for one window change:\n%s", n, strings.Join(writes.values(agent.StatusKey("eu", "web")), "\n"))
	}
	if n := syncWindowCalls(w, "web") - webCalls; n != 0 {
		t.Fatalf("%d syncwindows calls for web while its project did not change", n)
	}

	// A project edit is noticed at the next refresh.
	if err := w.argo.SetSyncWindows("night", argocdtest.SyncWindow{Kind: "deny", Schedule: "0 6 * * *", Duration: "2h",
		Applications: []string{"web"}, ManualSync: true}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "the edited window", func(s *agent.AppStatus) bool {
		return s.SyncWindows != nil && s.SyncWindows.Blocked && s.SyncWindows.ManualSync &&
			s.SyncWindows.Until.Equal(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))
	})
	// manualSync: only a request that asks for a manual sync passes.
	rep, _ = w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web"}, RunID: "run2", Step: "dev/sync/1"})
	if e := rep.Results[0].Error; e == nil || !errors.Is(e, agent.ErrSyncWindow) {
		t.Fatalf("automatic sync through a manualSync window: %+v", rep.Results[0])
	}
	rep, _ = w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web"}, RunID: "run2", Step: "dev/sync/1", Manual: true})
	if rep.Results[0].Error != nil {
		t.Fatalf("manual sync through a manualSync window: %+v", rep.Results[0].Error)
	}
	w.waitRecord("eu", "web", "our operation", func(s *agent.AppStatus) bool { return s.Operation.Tagged("run2", "dev/sync/1") })
}

func TestSyncWindowRefusalFromArgoCDIsMatchable(t *testing.T) {
	// Argo CD answers 403 PermissionDenied: that must read as a sync window, not as "not found".
	c, err := NewClient(ClientOptions{URL: "http://argocd.example", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.statusError(403, []byte(`{"error":"cannot sync: blocked by sync window","code":7,"message":"cannot sync: blocked by sync window"}`),
		"POST /api/v1/applications/web/sync", "web")
	if !errors.Is(err, agent.ErrSyncWindow) || errors.Is(err, agent.ErrNotFound) || !strings.Contains(err.Error(), "cannot sync: blocked by sync window") {
		t.Fatalf("got %v", err)
	}
}
