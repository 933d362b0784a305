package e2e

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
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

// Flags of BenchmarkParkedGitOpsSync: the 10,000-run case is -parked 10000.
var (
	parkedRuns = flag.Int("parked", 1000, "BenchmarkParkedGitOpsSync: how many runs park at once")
	parkedIdle = flag.Duration("parked-idle", time.Minute, "BenchmarkParkedGitOpsSync: how long the parked runs sit while idle jobs are counted")
)

// BenchmarkParkedGitOpsSync parks -parked runs (1,000 by default) in GitOpsSync at once, each
// waiting for its own app to become Healthy, lets them sit for -parked-idle and reports:
//   - start-time/ref: the time to start every run ÷ the time of as many raw KV creates +
//     publishes measured in the same process (what the transport alone costs);
//   - idle-jobs/s: GitOpsSync jobs dispatched per second while nothing changes;
//   - controller-KB/parked-run: the heap held by allocations made under prflow's pipelines
//     packages (controller, state machine), from heap profiles before the starts and after the
//     idle wait;
//   - rss figures of the whole process (controller, worker, NATS, agent and fake Argo CD).
func BenchmarkParkedGitOpsSync(b *testing.B) {
	runs := *parkedRuns
	runtime.MemProfileRate = 64 << 10
	m := controller.NewMetrics(nil)
	s := newStack(b, stackOpts{quiet: true, concurrency: 32, metrics: m})
	for i := 0; i < runs; i++ {
		name := fmt.Sprintf("app-%05d", i)
		s.addApp(app(name, "apps/web", nil))
		if err := s.argo.ScriptSync(name, argocdtest.SyncScript{Progressing: -1}); err != nil {
			b.Fatal(err)
		}
	}
	// Every app recorded by the agent (a loaded machine takes longer than waitRecord allows).
	recorded := time.Now().Add(time.Minute + time.Duration(runs)*20*time.Millisecond)
	for i := 0; i < runs; i++ {
		for {
			if _, err := s.client.Status(context.Background(), "eu", fmt.Sprintf("app-%05d", i)); err == nil {
				break
			}
			if time.Now().After(recorded) {
				b.Fatalf("no status record for app-%05d", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ref := rawStartTime(b, s, runs)
	// One pipeline for all runs (as in production: many runs of few pipelines); the app is
	// an input.
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 30m
        with: {applicationsList: [{agentId: eu, applicationName: "${{ inputs.app }}"}], waitTillHealthy: true}
`, false)
	before := rssKB()
	heapBefore := heapInUse()
	ctlBefore := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	b.ResetTimer()
	start := time.Now()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = s.start(src, map[string]any{"app": fmt.Sprintf("app-%05d", i)}).ID
	}
	startTime := time.Since(start)
	deadline := time.Now().Add(5*time.Minute + time.Duration(runs)*200*time.Millisecond) // a loaded machine parks slowly
	for m.Parked() < int64(runs) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d runs parked", m.Parked(), runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	allParked := time.Since(start)
	// Let them sit: nothing changes, so nothing should be dispatched, hold a worker or grow.
	jobs := m.Dispatched.WithLabelValues("GitOpsSync")
	jobsBefore := counterValue(jobs)
	time.Sleep(*parkedIdle)
	idleJobs := counterValue(jobs) - jobsBefore
	b.StopTimer()
	parked := m.Parked()
	after := rssKB()
	heapAfter := heapInUse()
	ctlAfter := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	b.ReportMetric(float64(parked), "parked")
	b.ReportMetric(startTime.Seconds(), "s-to-start-all")
	b.ReportMetric(float64(startTime)/float64(ref), "start-time/ref")
	b.ReportMetric(allParked.Seconds(), "s-to-park-all")
	b.ReportMetric(idleJobs/parkedIdle.Seconds(), "idle-jobs/s")
	b.ReportMetric(float64(ctlAfter-ctlBefore)/1024/float64(runs), "controller-KB/parked-run")
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

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// rawStartTime is how long n raw KV creates plus n JetStream publishes take one after the
// other on the stack's connection (a run start's transport work), in a scratch bucket and
// stream that are removed afterwards.
func rawStartTime(b *testing.B, s *stack, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	js := s.conn.JS
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench-raw-runs"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteKeyValue(ctx, "bench-raw-runs") }()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_RAW", Subjects: []string{"bench.raw.>"}}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(ctx, "BENCH_RAW") }()
	val := make([]byte, 2048) // about a new run's state
	t0 := time.Now()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("r%07d", i)
		if _, err := kv.Create(ctx, k, val); err != nil {
			b.Fatal(err)
		}
		if _, err := js.Publish(ctx, "bench.raw."+k, val[:512]); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0)
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
