package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
)

const appsPipeline = `name: apps
stages:
  - id: dev
    steps:
      - {id: apps, type: Noop, with: {outputs: {apps: [{name: web-dev, agent: sim}]}}}
      - {id: soak, type: Wait, with: {duration: 10m}}
`

// appsEnv is a controller with a UI server and a run parked on a step whose apps include
// sim/web-dev.
func appsEnv(t testing.TB) (*ctltest.Env, *httptest.Server, *pipelines.Run) {
	e, srv := newAnonUI(t)
	putApp(t, e, agent.HealthHealthy, "1111111111111111111111111111111111111111")
	r := e.Start(appsPipeline, nil)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cur, _ := e.Ctl.Get(context.Background(), r.ID)
		if st := ctltest.Step(cur, "dev", "soak"); st != nil && st.Status == pipelines.StWaiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("soak never parked")
		}
	}
	return e, srv, r
}

func putApp(t testing.TB, e *ctltest.Env, health, rev string) {
	t.Helper()
	b, _ := json.Marshal(agent.AppStatus{V: agent.Version, Agent: "sim", Name: "web-dev", Sync: agent.SyncSynced, Health: health, SyncedRevision: rev})
	if _, err := e.Ctl.Buckets().Apps.Put(context.Background(), agent.StatusKey("sim", "web-dev"), b); err != nil {
		t.Fatal(err)
	}
}

// appsConsumers is how many consumers (watches) the prflow-apps bucket's stream has.
func appsConsumers(t testing.TB, e *ctltest.Env) int {
	t.Helper()
	st, err := e.Ctl.Conn().JS.Stream(context.Background(), "KV_"+queue.BucketApps)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// openPage opens the live events of run id and waits for its first render.
func openPage(t testing.TB, ctx context.Context, url string) (*bufio.Scanner, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if got := nextRun(t, sc); !strings.Contains(got, "h-Healthy") {
		t.Fatalf("first render lacks the app:\n%s", got)
	}
	return sc, func() { cancel(); resp.Body.Close() }
}

func nextRun(t testing.TB, sc *bufio.Scanner) string {
	t.Helper()
	var data strings.Builder
	inRun := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "event: run":
			inRun = true
		case strings.HasPrefix(l, "data: ") && inRun:
			data.WriteString(strings.TrimPrefix(l, "data: ") + "\n")
		case l == "" && inRun:
			return data.String()
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
	return ""
}

// TestRunPagesShareOneAppsWatch: 50 live run pages open at once (200 with PRFLOW_TEST_LONG=1)
// cost no watch of prflow-apps of their own (the controller's one watch is fanned out to
// them), every one of them still sees an app change, and once they are closed no subscriber
// is left behind.
func TestRunPagesShareOneAppsWatch(t *testing.T) {
	t.Parallel()
	e, srv, r := appsEnv(t)
	base := appsConsumers(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pages := ctltest.Pick(50, 200)
	var scs []*bufio.Scanner
	var closers []func()
	for range pages {
		sc, closeFn := openPage(t, ctx, srv.URL+"/ui/runs/"+r.ID+"/events")
		scs, closers = append(scs, sc), append(closers, closeFn)
	}
	if n := appsConsumers(t, e); n != base {
		t.Fatalf("%d watches of prflow-apps with %d pages open, %d before", n, pages, base)
	}
	putApp(t, e, agent.HealthDegraded, "2222222222222222222222222222222222222222")
	for i, sc := range scs {
		if got := nextRun(t, sc); !strings.Contains(got, "h-Degraded") {
			t.Fatalf("page %d after the app turned Degraded:\n%s", i, got)
		}
	}
	for _, c := range closers {
		c()
	}
	for deadline := time.Now().Add(time.Minute); appSubscribers(e) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers left after every page closed", appSubscribers(e))
		}
	}
	if n := appsConsumers(t, e); n != base {
		t.Fatalf("%d watches of prflow-apps after the pages closed, %d before", n, base)
	}
}

// BenchmarkRunPageOpen measures what one open live run page costs the process while it
// waits: goroutines and heap (embedded NATS server included, where a watch of its own costs
// a consumer) per page, with 100 pages open on a parked run.
func BenchmarkRunPageOpen(b *testing.B) {
	e, srv, r := appsEnv(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const pages = 100
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		var closers []func()
		for range pages {
			_, c := openPage(b, ctx, srv.URL+"/ui/runs/"+r.ID+"/events")
			closers = append(closers, c)
		}
		time.Sleep(200 * time.Millisecond) // let the watches settle
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/pages, "goroutines/page")
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/pages/1024, "heap-KB/page")
		b.ReportMetric(float64(appsConsumers(b, e)), "apps-watches")
		for _, c := range closers {
			c()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func appSubscribers(e *ctltest.Env) int { return e.Ctl.AppSubscribers() }

// TestBrowserTwoRunPagesSeeAnAppChange: two browser tabs show the same run; the agent reports
// its app Degraded at a new revision and both pages show it, pushed over their one shared
// watch of prflow-apps, without a reload.
func TestBrowserTwoRunPagesSeeAnAppChange(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	putApp(t, e.Env, agent.HealthHealthy, "1111111111111111111111111111111111111111")
	r := startParked(t, e, appsPipeline, "dev", "soak")
	url := e.URL + "/ui/runs/" + r.ID
	first := signedInTab(t, url, bobToken)
	second := newTab(t, first) // a second tab, signed in as well
	tabs := []context.Context{first, second}
	run(t, second, "open the second page", chromedp.Navigate(url))
	for i, tab := range tabs {
		run(t, tab, fmt.Sprintf("page %d shows the app healthy", i+1), chromedp.WaitVisible(`.h-Healthy`, chromedp.ByQuery),
			chromedp.Evaluate(`window.prflowMarker = 42`, nil))
	}
	for deadline := time.Now().Add(30 * time.Second); e.Ctl.AppSubscribers() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pages subscribed to app changes, want 2", e.Ctl.AppSubscribers())
		}
	}
	putApp(t, e.Env, agent.HealthDegraded, "2222222222222222222222222222222222222222")
	for i, tab := range tabs {
		run(t, tab, fmt.Sprintf("page %d shows the app degraded", i+1), chromedp.WaitVisible(`.h-Degraded`, chromedp.ByQuery))
		if got := text(t, tab, `#live`); !strings.Contains(got, "22222222") {
			t.Errorf("page %d lacks the new revision: %.500s", i+1, got)
		}
		var marker int
		run(t, tab, "marker", chromedp.Evaluate(`window.prflowMarker || 0`, &marker))
		if marker != 42 {
			t.Fatalf("page %d was reloaded: the change was not pushed", i+1)
		}
	}
	shot(t, second, "run-app-degraded") // the tab in front: a background tab does not paint
	if err := e.Ctl.Cancel(context.Background(), r.ID, "test"); err != nil {
		t.Fatal(err)
	}
}
