package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
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
	parkedRuns       = flag.Int("parked", 1000, "BenchmarkParkedGitOpsSync: how many runs park at once")
	parkedIdle       = flag.Duration("parked-idle", time.Minute, "BenchmarkParkedGitOpsSync: how long the parked runs sit while idle jobs are counted")
	parkedSettle     = flag.Duration("parked-settle", 2*time.Second, "BenchmarkParkedGitOpsSync: how long nothing must happen (no prflow-apps change, wake, GitOpsSync job or Argo CD operation) before the idle window opens")
	parkedPaused     = flag.Bool("parked-worker-paused", false, "BenchmarkParkedGitOpsSync: start every run before the worker starts, so the starts compete with no step work")
	parkedStarters   = flag.Int("parked-starters", 1, "BenchmarkParkedGitOpsSync: how many goroutines start the runs (1: one after the other)")
	parkedWorkerConn = flag.Bool("parked-worker-conn", false, "BenchmarkParkedGitOpsSync: the worker has its own NATS connection (as a worker process has) instead of sharing the controller's")
	parkedAudit      = flag.Bool("parked-audit", false, "BenchmarkParkedGitOpsSync: keep an audit log, as prflow server does (each start appends run.started)")
	parkedCPU        = flag.String("parked-cpuprofile", "", "BenchmarkParkedGitOpsSync: write a CPU profile of the start loop to this file and report its split")
	parkedMutex      = flag.String("parked-mutexprofile", "", "BenchmarkParkedGitOpsSync: write a mutex profile of the start loop to this file")
	parkedBlock      = flag.String("parked-blockprofile", "", "BenchmarkParkedGitOpsSync: write a block profile of the start loop to this file")
)

// BenchmarkParkedGitOpsSync parks -parked runs (1,000 by default) in GitOpsSync at once, each
// waiting for its own app to become Healthy, waits until the parking has settled (see
// waitSettled), lets them sit for -parked-idle and reports:
//   - start-time/ref: the time to start every run ÷ the time of as many raw KV creates +
//     publishes measured in the same process (what the transport alone costs);
//   - starts/s, and start-cpu-s: the whole process's CPU during the start loop;
//   - s-to-settle: how long the parking's tail took (waitSettled), and settled: whether it ended;
//   - idle-jobs/s, idle-wakes/s: GitOpsSync jobs dispatched and parked steps woken per second
//     while nothing changes;
//   - controller-KB/parked-run: the heap held by allocations made under prflow's pipelines
//     packages (controller, state machine), from heap profiles before the starts and after the
//     idle wait;
//   - rss figures of the whole process (controller, worker, NATS, agent and fake Argo CD).
//
// With -v it prints one line per figure too (the first ones are the sizing table's). With
// -parked-cpuprofile it also reports where the process's CPU went during the start loop
// (cpu%-start-path, cpu%-nats-server, ...; see startProfileSplit).
func BenchmarkParkedGitOpsSync(b *testing.B) {
	runs := *parkedRuns
	runtime.MemProfileRate = 64 << 10
	m := controller.NewMetrics(nil)
	s := newStack(b, stackOpts{quiet: true, concurrency: 32, metrics: m, noWorker: *parkedPaused, workerConn: *parkedWorkerConn, audit: *parkedAudit})
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
	prof := startProfiles(b)
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	ids := make([]string, runs)
	// Labelled, so that a CPU profile tells the start path (and what it spawns) from the rest.
	pprof.Do(context.Background(), pprof.Labels("phase", "start"), func(context.Context) {
		starters := max(1, *parkedStarters)
		errs := make([]error, starters)
		var wg sync.WaitGroup
		for g := range starters {
			wg.Go(func() {
				for i := g; i < len(ids) && errs[g] == nil; i += starters {
					r, err := s.ctl.Start(context.Background(), controller.StartRequest{File: "test.yaml", Source: []byte(src),
						Inputs: map[string]any{"app": fmt.Sprintf("app-%05d", i)}, Executor: "tester"})
					if err != nil {
						errs[g] = fmt.Errorf("start %d: %w", i, err)
						continue
					}
					ids[i] = r.ID
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	})
	startTime := time.Since(start)
	startCPU := processCPU() - cpu0
	split := prof.stop(b)
	if *parkedPaused {
		s.startWorker()
	}
	deadline := time.Now().Add(5*time.Minute + time.Duration(runs)*200*time.Millisecond) // a loaded machine parks slowly
	for m.Parked() < int64(runs) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d runs parked", m.Parked(), runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	allParked := time.Since(start)
	settled, ok := waitSettled(b, s, m, runs, *parkedSettle, 2*time.Minute+time.Duration(runs)*20*time.Millisecond)
	// Let them sit: nothing changes, so nothing should be dispatched, woken, hold a worker or grow.
	jobs, wakes := m.Dispatched.WithLabelValues("GitOpsSync"), m.Wakes.WithLabelValues("event")
	jobsBefore, wakesBefore := counterValue(jobs), counterValue(wakes)
	time.Sleep(*parkedIdle)
	idleJobs, idleWakes := counterValue(jobs)-jobsBefore, counterValue(wakes)-wakesBefore
	b.StopTimer()
	parked := m.Parked()
	after := rssKB()
	heapAfter := heapInUse()
	ctlAfter := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	figures := []figure{
		{float64(runs) / startTime.Seconds(), "starts/s"},
		{idleJobs / parkedIdle.Seconds(), "idle-jobs/s"},
		{float64(ctlAfter-ctlBefore) / 1024 / float64(runs), "controller-KB/parked-run"},
		{float64(startTime) / float64(ref), "start-time/ref"},
		{startTime.Seconds(), "s-to-start-all"},
		{allParked.Seconds(), "s-to-park-all"},
		{settled.Seconds(), "s-to-settle"},
		{b2f(ok), "settled"},
		{idleWakes / parkedIdle.Seconds(), "idle-wakes/s"},
		{startCPU.Seconds(), "start-cpu-s"},
		{float64(parked), "parked"},
		{float64(after) / 1024, "rss-MB"},
		{float64(after-before) / 1024, "rss-delta-MB"},
		{float64(after-before) / float64(runs), "rss-KB/parked-run"},
		{float64(heapAfter-heapBefore) / (1 << 20), "heap-delta-MB"},
		{float64(runtime.NumGoroutine()), "goroutines"},
	}
	figures = append(figures, split...)
	// One line per figure as well, for the sizing table (docs/sizing.md).
	paused := ""
	if *parkedPaused {
		paused = ", worker paused during the starts"
	}
	if *parkedStarters > 1 {
		paused += fmt.Sprintf(", %d starters", *parkedStarters)
	}
	if *parkedWorkerConn {
		paused += ", worker on its own connection"
	}
	if *parkedAudit {
		paused += ", audit log"
	}
	for _, f := range figures {
		b.ReportMetric(f.v, f.unit)
		b.Logf("parked=%d idle=%s%s: %-26s %.3f", runs, *parkedIdle, paused, f.unit, f.v)
	}
	b.ReportMetric(0, "ns/op")
	for _, id := range ids[:min(3, len(ids))] {
		r, _ := s.ctl.Get(context.Background(), id)
		if st := step(r, "dev", "sync"); st == nil || st.Status != pipelines.StWaiting {
			b.Fatalf("run %s is not parked: %+v", id, st)
		}
	}
}

// figure is one reported figure: its value and unit.
type figure struct {
	v    float64
	unit string
}

// waitSettled waits until the parking's tail is over: every run parked, no operation running
// on the fake Argo CD, and for quiet no change to prflow-apps, no wake and no GitOpsSync job
// (each finished operation changes its app's record a few times, and a loaded controller
// works through those changes, waking steps, seconds after they were written). It returns how
// long that took and whether it settled: past limit the idle window opens anyway (polls that
// never stop show there).
func waitSettled(b *testing.B, s *stack, m *controller.Metrics, runs int, quiet, limit time.Duration) (time.Duration, bool) {
	b.Helper()
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := s.b.Apps.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	go func() {
		for range w.Updates() {
			last.Store(time.Now().UnixNano())
		}
	}()
	activity := func() float64 {
		return counterValue(m.Dispatched.WithLabelValues("GitOpsSync")) + counterValue(m.Wakes.WithLabelValues("event"))
	}
	seen := activity()
	for {
		time.Sleep(100 * time.Millisecond)
		if a := activity(); a != seen || m.Parked() < int64(runs) || s.argo.RunningOperations() > 0 {
			seen = a
			last.Store(time.Now().UnixNano())
		}
		if time.Since(time.Unix(0, last.Load())) >= quiet {
			return time.Since(t0), true
		}
		if time.Since(t0) > limit {
			b.Logf("not settled after %s: %d parked, %d operations running, last activity %s ago", limit, m.Parked(),
				s.argo.RunningOperations(), time.Since(time.Unix(0, last.Load())).Round(time.Millisecond))
			return time.Since(t0), false
		}
	}
}

// profiles are the profiles of the start loop the flags ask for.
type profiles struct {
	cpu          bytes.Buffer
	cpuOn        bool
	mutex, block bool
}

func startProfiles(b *testing.B) *profiles {
	b.Helper()
	p := &profiles{}
	if *parkedCPU != "" {
		if err := pprof.StartCPUProfile(&p.cpu); err != nil {
			b.Fatal(err)
		}
		p.cpuOn = true
	}
	if *parkedMutex != "" {
		runtime.SetMutexProfileFraction(5)
		p.mutex = true
	}
	if *parkedBlock != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		p.block = true
	}
	return p
}

// stop writes the profiles and returns the CPU profile's split (none without one).
func (p *profiles) stop(b *testing.B) []figure {
	b.Helper()
	write := func(name, file string) {
		f, err := os.Create(file)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
	}
	if p.mutex {
		write("mutex", *parkedMutex)
		runtime.SetMutexProfileFraction(0)
	}
	if p.block {
		write("block", *parkedBlock)
		runtime.SetBlockProfileRate(0)
	}
	if !p.cpuOn {
		return nil
	}
	pprof.StopCPUProfile()
	if err := os.WriteFile(*parkedCPU, p.cpu.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	split, err := startProfileSplit(p.cpu.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	return split
}

// startProfileSplit says where the CPU of a profile of the start loop went, in % of its
// samples: "start-path" is everything the labelled start loop ran (and goroutines it
// spawned); the rest goes by the outermost prflow or NATS server function on the stack
// (who started the goroutine): the controller applying events, the worker, the agent, the
// fake Argo CD, the NATS server; "gc" is the collector, "other" the NATS client's read loops
// and the rest.
func startProfileSplit(data []byte) ([]figure, error) {
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("parse the CPU profile: %w", err)
	}
	vi := len(p.SampleType) - 1 // cpu nanoseconds
	owners := []struct{ prefix, name string }{
		{"github.com/nats-io/nats-server/", "nats-server"},
		{"github.com/prflow/prflow/pipelines", "controller"},
		{"github.com/prflow/prflow/steps", "worker"},
		{"github.com/prflow/prflow/deploy/argocdtest.", "fake-argocd"},
		{"github.com/prflow/prflow/deploy/argocd.", "agent"},
		{"github.com/prflow/prflow/", "prflow-other"},
	}
	byOwner := map[string]int64{}
	var total int64
	for _, sm := range p.Sample {
		v := sm.Value[vi]
		total += v
		owner := ""
		if slices.Contains(sm.Label["phase"], "start") {
			owner = "start-path"
		}
		// Locations run leaf first: the last match is the outermost.
		for _, loc := range sm.Location {
			for _, ln := range loc.Line {
				if owner == "start-path" || ln.Function == nil {
					continue
				}
				fn := ln.Function.Name
				if strings.HasPrefix(fn, "github.com/prflow/prflow/deploy/e2e.") {
					continue // the harness's own goroutine wrappers
				}
				for _, o := range owners {
					if strings.HasPrefix(fn, o.prefix) {
						owner = o.name
						break
					}
				}
				if owner == "" && strings.HasPrefix(fn, "runtime.gc") {
					owner = "gc"
				}
			}
		}
		if owner == "" {
			owner = "other"
		}
		byOwner[owner] += v
	}
	var out []figure
	if total == 0 {
		return out, nil
	}
	for _, o := range []string{"start-path", "controller", "worker", "agent", "fake-argocd", "nats-server", "prflow-other", "gc", "other"} {
		out = append(out, figure{100 * float64(byOwner[o]) / float64(total), "cpu%-" + o})
	}
	out = append(out, figure{float64(byOwner["start-path"]) / 1e6 / float64(*parkedRuns), "start-path-cpu-ms/start"})
	return out, nil
}

// processCPU is the CPU time (user + system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
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
