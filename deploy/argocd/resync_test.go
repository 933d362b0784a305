package argocd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

// burstApps are n apps named burst-00000… on the world's healthy path.
func burstApps(n int) []argocdtest.Application {
	apps := make([]argocdtest.Application, n)
	for i := range apps {
		apps[i] = app(fmt.Sprintf("burst-%05d", i), "apps/web", map[string]string{"burst": "yes"})
	}
	return apps
}

// liveRecords counts the agent's records in prflow-apps that are not tombstones.
func (w *world) liveRecords(id string) int {
	w.t.Helper()
	ctx := context.Background()
	lister, err := w.b.Apps.ListKeysFiltered(ctx, agent.Token(id)+".*")
	if err != nil {
		w.t.Fatal(err)
	}
	n := 0
	for k := range lister.Keys() {
		if k == agent.InventoryKey(id) {
			continue
		}
		e, err := w.b.Apps.Get(ctx, k)
		if err != nil {
			continue
		}
		var s agent.AppStatus
		if agent.DecodeStatus(e.Value(), &s) == nil && !s.Gone() {
			n++
		}
	}
	return n
}

// rawRecord reads an app's record as stored, tombstones included (nil: none).
func (w *world) rawRecord(id, name string) *agent.AppStatus {
	w.t.Helper()
	e, err := w.b.Apps.Get(context.Background(), agent.StatusKey(id, name))
	if err != nil {
		return nil
	}
	var s agent.AppStatus
	if err := agent.DecodeStatus(e.Value(), &s); err != nil {
		w.t.Fatal(err)
	}
	return &s
}

// burst creates n apps at once while the agent's stream is held, so all but the first
// buffer+1 events are dropped, deterministically.
func (w *world) burst(n int) {
	w.t.Helper()
	before := w.argo.DroppedEvents()
	start := time.Now()
	release := w.argo.HoldStreams()
	if err := w.argo.AddApps(burstApps(n)); err != nil {
		release()
		w.t.Fatal(err)
	}
	release()
	w.t.Logf("created %d apps in %s; %d events dropped", n, time.Since(start).Round(time.Millisecond), w.argo.DroppedEvents()-before)
	if w.argo.DroppedEvents()-before < int64(n)/2 {
		w.t.Fatalf("the burst of %d apps dropped only %d events: the test does not test drops", n, w.argo.DroppedEvents()-before)
	}
}

// A burst of apps overflows the stream's buffer; the periodic re-list records every app
// within the resync interval, without the stream being cut.
func TestBurstDroppedEventsRepairedByPeriodicResync(t *testing.T) {
	w := newWorld(t)
	w.argo.SetWatchBuffer(50)
	resync := 3 * time.Second
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = resync; o.WatchBuffer = -1 })
	w.eventually(10*time.Second, "the first re-list", func() bool { r := w.leaderReg("eu"); return r != nil && !r.Stale })
	const n = 2000
	start := time.Now()
	w.burst(n)
	// The resync interval plus a margin for writing 2,000 records on a loaded machine.
	w.eventually(resync+60*time.Second, fmt.Sprintf("%d records", n), func() bool { return w.liveRecords("eu") == n })
	t.Logf("%d records %s after the burst (resync every %s)", n, time.Since(start).Round(time.Millisecond), resync)
	if c := a.Connects(); c != 1 {
		t.Fatalf("the stream was reconnected (%d connects): the repair must not need a cut", c)
	}
	r := w.leaderReg("eu")
	if r == nil || r.LastResync.IsZero() || r.Repaired < int64(n)/2 || r.Resyncs < 1 {
		t.Fatalf("registration does not show the repair: %+v", r)
	}
	if rs := a.Resyncs(); rs.Early != 0 {
		t.Fatalf("early re-lists with detection off: %+v", rs)
	}
}

// The same burst with drop detection on: the agent sees a buffer's worth of events back to
// back, suspects drops and re-lists long before the (hour-long) resync interval.
func TestBurstDroppedEventsDetectedAndRelistedEarly(t *testing.T) {
	w := newWorld(t)
	w.argo.SetWatchBuffer(100)
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = time.Hour; o.WatchBuffer = 100 })
	w.eventually(10*time.Second, "the first re-list", func() bool { r := w.leaderReg("eu"); return r != nil && !r.Stale })
	const n = 2000
	start := time.Now()
	w.burst(n)
	w.eventually(60*time.Second, fmt.Sprintf("%d records", n), func() bool { return w.liveRecords("eu") == n })
	t.Logf("%d records %s after the burst (early re-list)", n, time.Since(start).Round(time.Millisecond))
	if c := a.Connects(); c != 1 {
		t.Fatalf("the stream was reconnected (%d connects)", c)
	}
	if r := w.leaderReg("eu"); r == nil || r.Repaired < int64(n)/2 || r.LastResync.IsZero() {
		t.Fatalf("registration does not show the repair: %+v", r)
	}
	if rs := a.Resyncs(); rs.Early < 1 {
		t.Fatalf("no early re-list: %+v", rs)
	}
}

// Without a burst the detector stays quiet: a few events do not re-list.
func TestNoEarlyRelistWithoutBurst(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = time.Hour; o.WatchBuffer = 100 })
	w.waitRecord("eu", "web", "a record", func(s *agent.AppStatus) bool { return s != nil && s.Stale == nil })
	for i := 0; i < 20; i++ {
		if err := w.argo.SetHealth("web", argocdtest.HealthDegraded, fmt.Sprintf("change %d", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.waitRecord("eu", "web", "the last change", func(s *agent.AppStatus) bool { return s != nil && s.HealthMessage == "change 19" })
	time.Sleep(time.Second)
	if rs := a.Resyncs(); rs.Early != 0 || rs.Resyncs != 1 {
		t.Fatalf("re-lists without any burst: %+v (want only the one after connecting)", rs)
	}
}

// newDropWorld is a world with web and api deployed whose stream buffers one event, so that
// dropLast can drop one.
func newDropWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t)
	w.argo.SetWatchBuffer(1)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.addApp(app("api", "apps/api", nil), argocdtest.Deployed())
	return w
}

// dropLast makes the stream lose the last of three changes: the first is taken and held
// by the stream, the second fills its one-event buffer, the third (last) is dropped.
func (w *world) dropLast(changes ...func()) {
	w.t.Helper()
	before := w.argo.DroppedEvents()
	release := w.argo.HoldStreams()
	for _, c := range changes {
		c()
	}
	release()
	if w.argo.DroppedEvents() == before {
		w.t.Fatal("no event was dropped: the test does not test a drop")
	}
}

func TestDroppedModifiedRepairedByResync(t *testing.T) {
	w := newDropWorld(t)
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = 2 * time.Second })
	w.waitRecord("eu", "api", "a healthy record", func(s *agent.AppStatus) bool { return s != nil && s.Health == agent.HealthHealthy })
	health := func(name, msg string) func() {
		return func() {
			if err := w.argo.SetHealth(name, argocdtest.HealthDegraded, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The fake holds the stream, so the last change is the one dropped (see HoldStreams).
	w.dropLast(health("web", "one"), health("web", "two"), health("api", "lost on the stream"))
	// waitRecord's 15s bound is well past the 2s resync interval.
	st := w.waitRecord("eu", "api", "the dropped health change", func(s *agent.AppStatus) bool {
		return s.Health == agent.HealthDegraded && s.HealthMessage == "lost on the stream"
	})
	if a.Connects() != 1 {
		t.Fatalf("%d connects: the repair must not need a cut", a.Connects())
	}
	if st.Stale != nil {
		t.Fatalf("repaired record is marked stale: %+v", st.Stale)
	}
	if r := w.leaderReg("eu"); r == nil || r.Repaired < 1 || r.LastResync.IsZero() {
		t.Fatalf("registration does not show the repair: %+v", r)
	}
}

func TestDroppedDeletedBecomesTombstoneAfterResync(t *testing.T) {
	w := newDropWorld(t)
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = 2 * time.Second })
	w.waitRecord("eu", "api", "a record", func(s *agent.AppStatus) bool { return s != nil && s.Health == agent.HealthHealthy })
	w.dropLast(func() { _ = w.argo.SetHealth("web", argocdtest.HealthDegraded, "one") },
		func() { _ = w.argo.SetHealth("web", argocdtest.HealthDegraded, "two") },
		func() {
			if err := w.argo.DeleteApp("api"); err != nil {
				t.Fatal(err)
			}
		})
	// A tombstone from the stream would say "reported it DELETED"; the re-list's says the app
	// is missing from a full list.
	var st *agent.AppStatus
	w.eventually(15*time.Second, "a tombstone", func() bool { st = w.rawRecord("eu", "api"); return st != nil && st.Gone() })
	if !strings.Contains(st.Deleted.Reason, "missing from a full list") {
		t.Fatalf("tombstone reason %q", st.Deleted.Reason)
	}
	if st := w.record("eu", "web"); st == nil || st.Gone() {
		t.Fatalf("the app still in Argo CD lost its record: %s", describe(st))
	}
	if a.Connects() != 1 {
		t.Fatalf("%d connects", a.Connects())
	}
}

// slowLists delays the answers of GET /api/v1/applications after Argo CD answered them, so
// a re-list's snapshot is older than the stream's events by the time the agent writes it.
type slowLists struct {
	rt    http.RoundTripper
	delay time.Duration
}

func (s *slowLists) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := s.rt.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet && r.URL.Path == "/api/v1/applications" {
		time.Sleep(s.delay)
	}
	return res, err
}

// Re-lists every 100ms, each answered 300ms late, race a stream of health changes: the
// record never goes back to an older resourceVersion and ends on Argo CD's last state.
func TestConcurrentResyncNeverWritesOlderState(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	writes := w.countWrites()
	a := w.start("eu", "r1", func(o *Options, c *Client) {
		o.Resync = 100 * time.Millisecond
		c.hc.Transport = &slowLists{rt: http.DefaultTransport, delay: 300 * time.Millisecond}
	})
	w.waitRecord("eu", "web", "a record", func(s *agent.AppStatus) bool { return s != nil })
	for i := 0; i < 60; i++ {
		if err := w.argo.SetHealth("web", []string{argocdtest.HealthDegraded, argocdtest.HealthHealthy}[i%2], fmt.Sprintf("change %02d", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	want, _ := w.argo.App("web")
	st := w.waitRecord("eu", "web", "Argo CD's last state", func(s *agent.AppStatus) bool {
		return s.ResourceVersion == want.Metadata.ResourceVersion
	})
	if st.HealthMessage != "change 59" || st.Health != agent.HealthHealthy {
		t.Fatalf("final record %s %q, want Healthy \"change 59\"", describe(st), st.HealthMessage)
	}
	// Let a few more late re-lists land, then check the whole history of the key.
	r0 := w.leaderReg("eu").Resyncs
	w.eventually(20*time.Second, "more re-lists", func() bool { return w.leaderReg("eu").Resyncs >= r0+3 })
	var last int64
	for i, v := range writes.values(agent.StatusKey("eu", "web")) {
		var s agent.AppStatus
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			t.Fatal(err)
		}
		rv, _ := strconv.ParseInt(s.ResourceVersion, 10, 64)
		if rv < last {
			t.Fatalf("write %d went back from resourceVersion %d to %d (%s %q)", i, last, rv, s.Health, s.HealthMessage)
		}
		last = rv
	}
	if got := w.record("eu", "web"); got.ResourceVersion != want.Metadata.ResourceVersion {
		t.Fatalf("after more re-lists the record is at %s, want %s", got.ResourceVersion, want.Metadata.ResourceVersion)
	}
	if a.Connects() != 1 {
		t.Fatalf("%d connects", a.Connects())
	}
}

// feed runs events through a detector: gaps[i] is the pause before event i (each takes 1ms to
// process). It returns how many early re-lists the detector asked for.
func feed(d *dropDetector, gaps []time.Duration, counts func(i int) bool) int {
	kicks := 0
	now := time.Unix(1000, 0)
	for i, g := range gaps {
		now = now.Add(g)
		d.observe(now, now.Add(time.Millisecond), counts(i))
		now = now.Add(time.Millisecond)
		select {
		case <-d.kick:
			kicks++
		default:
		}
	}
	return kicks
}

func always(int) bool { return true }

func TestDropDetector(t *testing.T) {
	const threshold = 500
	backlog := func(n int) []time.Duration { return make([]time.Duration, n) } // no pause at all
	if k := feed(newDropDetector(threshold), backlog(1000), always); k != 2 {
		t.Errorf("a full buffer back to back: %d re-lists asked, want 2 (one per half buffer)", k)
	}
	if k := feed(newDropDetector(threshold), backlog(threshold-1), always); k != 0 {
		t.Errorf("just under the threshold: %d re-lists asked", k)
	}
	if k := feed(newDropDetector(0), backlog(5000), always); k != 0 {
		t.Errorf("detection off: %d re-lists asked", k)
	}
	// Replayed ADDED of unchanged apps (counts false) do not build a run.
	if k := feed(newDropDetector(threshold), backlog(5000), func(int) bool { return false }); k != 0 {
		t.Errorf("a replay of unchanged apps: %d re-lists asked", k)
	}
	// A full buffer in which the agent stalls 100ms every 100 events is still a backlog.
	stalls := backlog(1000)
	for i := 100; i < len(stalls); i += 100 {
		stalls[i] = 100 * time.Millisecond
	}
	if k := feed(newDropDetector(threshold), stalls, always); k == 0 {
		t.Error("a backlog with stalls of the agent: no re-list asked")
	}
	// A quiet stream ends the run.
	quiet := backlog(2 * threshold)
	for i := threshold / 2; i < len(quiet); i += threshold / 2 {
		quiet[i] = time.Second
	}
	if k := feed(newDropDetector(threshold), quiet, always); k != 0 {
		t.Errorf("bursts smaller than the threshold with quiet between: %d re-lists asked", k)
	}
	// Steady traffic of a big Argo CD: 10,000 apps reconciled every 3 minutes (~55 events/s,
	// random arrivals) for an hour never asks.
	rng := rand.New(rand.NewPCG(1, 2))
	steady := make([]time.Duration, 55*3600)
	for i := range steady {
		steady[i] = time.Duration(rng.ExpFloat64() / 55 * float64(time.Second))
	}
	if k := feed(newDropDetector(threshold), steady, always); k != 0 {
		t.Errorf("steady traffic at 55 events/s: %d re-lists asked in an hour", k)
	}
	// A re-list that started covers what came before: the run starts again.
	d := newDropDetector(threshold)
	feed(d, backlog(threshold-10), always)
	d.epoch.Add(1)
	if k := feed(d, backlog(threshold-10), always); k != 0 {
		t.Errorf("after a re-list started: %d re-lists asked for events it covers", k)
	}
}

// A periodic re-list that fails (Argo CD answers the list with 503 while the stream works) is
// retried with backoff; it neither marks records stale nor claims a re-list happened, and the
// dropped change is repaired once the list works again.
func TestFailedResyncRetriesWithoutClaimingSuccess(t *testing.T) {
	w := newDropWorld(t)
	logs := &lockedBuf{}
	w.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = time.Second })
	w.waitRecord("eu", "api", "a healthy record", func(s *agent.AppStatus) bool { return s != nil && s.Health == agent.HealthHealthy })
	w.eventually(10*time.Second, "the re-list after connecting", func() bool { return a.Resyncs().Resyncs >= 1 })
	w.argo.InjectFault(argocdtest.Fault{Method: http.MethodGet, Path: "/api/v1/applications", Status: http.StatusServiceUnavailable, Times: -1})
	// A re-list already under way when the fault came may still succeed: start counting after
	// the first failure.
	w.eventually(20*time.Second, "a failed re-list", func() bool { return a.Resyncs().Failed >= 1 })
	before := a.Resyncs()
	w.dropLast(func() { _ = w.argo.SetHealth("web", argocdtest.HealthDegraded, "one") },
		func() { _ = w.argo.SetHealth("web", argocdtest.HealthDegraded, "two") },
		func() { _ = w.argo.SetHealth("api", argocdtest.HealthDegraded, "lost on the stream") })
	w.eventually(20*time.Second, "two failed re-lists", func() bool { return a.Resyncs().Failed >= before.Failed+2 })
	rs := a.Resyncs()
	if rs.Resyncs != before.Resyncs || !rs.Last.Equal(before.Last) {
		t.Fatalf("a failed re-list counted as done: before %+v, now %+v", before, rs)
	}
	if st := w.record("eu", "api"); st.Health != agent.HealthHealthy || st.Stale != nil {
		t.Fatalf("record while re-lists fail: %s stale=%v (want the last seen state, not stale: the stream works)", describe(st), st.Stale)
	}
	if r := w.leaderReg("eu"); r == nil || r.Stale || !r.Healthy {
		t.Fatalf("registration while only re-lists fail: %+v", r)
	}
	if !strings.Contains(logs.String(), "re-listing applications failed") || !strings.Contains(logs.String(), "503") {
		t.Fatalf("the failed re-list was not logged with its cause:\n%s", logs.String())
	}
	w.argo.ClearFaults()
	w.waitRecord("eu", "api", "the dropped change, once the list works", func(s *agent.AppStatus) bool { return s.Health == agent.HealthDegraded })
	if a.Connects() != 1 {
		t.Fatalf("%d connects", a.Connects())
	}
}

// Early signals the agent ignores (its early re-lists found nothing to repair, so it backs off)
// must not postpone the periodic re-list: with a signal every 600ms for 12s, re-lists still
// come about every Resync (2s), never 10s apart (the back-off).
func TestIgnoredEarlySignalsDoNotPostponeResync(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	// WatchBuffer 4: two back-to-back events are an early signal.
	a := w.start("eu", "r1", func(o *Options, _ *Client) { o.Resync = 2 * time.Second; o.WatchBuffer = 4 })
	w.eventually(10*time.Second, "the re-list after connecting", func() bool { return a.Resyncs().Resyncs >= 1 })
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(600 * time.Millisecond):
			}
			_ = w.argo.SetHealth("web", argocdtest.HealthDegraded, fmt.Sprintf("a%d", i))
			_ = w.argo.SetHealth("web", argocdtest.HealthHealthy, fmt.Sprintf("b%d", i))
		}
	}()
	defer func() { close(stop); <-done }()
	last, longest := a.Resyncs().Last, time.Duration(0)
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		rs := a.Resyncs()
		if !rs.Last.Equal(last) {
			longest = max(longest, rs.Last.Sub(last))
			last = rs.Last
		}
	}
	longest = max(longest, time.Since(last))
	rs := a.Resyncs()
	t.Logf("re-lists: %+v; longest gap %s", rs, longest)
	if rs.Early == 0 {
		t.Fatal("no early re-list: the test sends no early signal")
	}
	if longest > 6*time.Second {
		t.Fatalf("%s without a re-list (resync 2s): ignored early signals postponed the periodic re-list", longest)
	}
}
