package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

// BenchmarkStatusChangeToResume measures an app status change on Argo CD → agent → prflow-apps
// → controller wake → worker runs the parked GitOpsSync, which finishes: p50/p99 from the
// change on Argo CD to the step's result being applied.
func BenchmarkStatusChangeToResume(b *testing.B) {
	s := newStack(b, stackOpts{quiet: true})
	s.addApp(app("web", "apps/web", nil))
	s.waitRecord("web")
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 60s
        with: {applicationsList: [{agentId: eu, applicationName: web}], waitTillHealthy: true}
`, false)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// A new commit each time, so every run deploys something and rolls out.
		s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy") + fmt.Sprintf("  run: \"%d\"\n", i)})
		if err := s.argo.ScriptSync("web", argocdtest.SyncScript{Progressing: -1}); err != nil {
			b.Fatal(err)
		}
		run := s.start(src, nil)
		s.waitStep(run.ID, "dev", "sync", "parked on Progressing", func(st *pipelines.StepRun) bool {
			return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "health Progressing")
		})
		time.Sleep(20 * time.Millisecond) // let the controller index the park
		b.StartTimer()
		t0 := time.Now()
		if err := s.argo.SetHealth("web", argocdtest.HealthHealthy, ""); err != nil {
			b.Fatal(err)
		}
		r := s.wait(run.ID, time.Minute)
		st := step(r, "dev", "sync")
		if r.Status != pipelines.StSucceeded {
			b.Fatalf("run %s: %s", r.Status, r.Error)
		}
		lat = append(lat, st.Ended.Sub(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[(len(lat)*99)/100]), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkParkedGitOpsSync parks 1,000 runs in GitOpsSync at once (each waiting for its own
// app to become Healthy) and reports the process's resident memory while they wait, against
// the same process before the runs started. The controller, worker, NATS, the agent and the
// fake Argo CD share the process: the delta is an upper bound for the controller's share.
func BenchmarkParkedGitOpsSync(b *testing.B) {
	const runs = 1000
	m := controller.NewMetrics(nil)
	s := newStack(b, stackOpts{quiet: true, concurrency: 32, metrics: m})
	for i := 0; i < runs; i++ {
		name := fmt.Sprintf("app-%04d", i)
		s.addApp(app(name, "apps/web", nil))
		if err := s.argo.ScriptSync(name, argocdtest.SyncScript{Progressing: -1}); err != nil {
			b.Fatal(err)
		}
	}
	s.waitRecord(fmt.Sprintf("app-%04d", runs-1))
	// One pipeline for all runs (as in production: many runs of few pipelines); the app is
	// an input.
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 10m
        with: {applicationsList: [{agentId: eu, applicationName: "${{ inputs.app }}"}], waitTillHealthy: true}
`, false)
	before := rssKB()
	heapBefore := heapInUse()
	b.ResetTimer()
	start := time.Now()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = s.start(src, map[string]any{"app": fmt.Sprintf("app-%04d", i)}).ID
	}
	deadline := time.Now().Add(5 * time.Minute)
	for m.Parked() < runs {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d runs parked", m.Parked(), runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	allParked := time.Since(start)
	// Let them sit: the poll fallback backs off; nothing should hold a worker or grow.
	time.Sleep(3 * time.Second)
	b.StopTimer()
	parked := m.Parked()
	after := rssKB()
	heapAfter := heapInUse()
	b.ReportMetric(float64(parked), "parked")
	b.ReportMetric(allParked.Seconds(), "s-to-park-all")
	b.ReportMetric(float64(after)/1024, "rss-MB")
	b.ReportMetric(float64(after-before)/1024, "rss-delta-MB")
	b.ReportMetric(float64(after-before)/float64(runs), "rss-KB/parked-run")
	b.ReportMetric(float64(heapAfter-heapBefore)/(1<<20), "heap-delta-MB")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
	b.ReportMetric(0, "ns/op")
	for _, id := range ids[:3] {
		r, _ := s.ctl.Get(context.Background(), id)
		if st := step(r, "dev", "sync"); st == nil || st.Status != pipelines.StWaiting {
			b.Fatalf("run %s is not parked: %+v", id, st)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rssKB reads VmRSS from /proc/self/status.
func rssKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
