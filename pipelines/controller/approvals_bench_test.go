package controller_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// Flags of BenchmarkParkedApprovals: the 100,000-run case is -approvals 100000.
var (
	approvalRuns    = flag.Int("approvals", 1000, "BenchmarkParkedApprovals: how many runs park on an Approval at once")
	approvalShare   = flag.Float64("approvals-approve", 1, "BenchmarkParkedApprovals: share of the parked runs then approved (0 to 1); each must finish")
	approvalCPU     = flag.String("approvals-cpuprofile", "", "BenchmarkParkedApprovals: write a CPU profile of starting and parking to this file (and of approving and finishing to FILE.approve)")
	approvalHeap    = flag.String("approvals-memprofile", "", "BenchmarkParkedApprovals: write a heap profile to this file once every run is parked")
	approvalStarter = flag.Int("approvals-starters", 8, "BenchmarkParkedApprovals: goroutines starting runs (and approving them) at once")
)

// approvalsSrc is the benchmark's pipeline: one Approval whose timeout outlasts the longest
// benchmark, so no run times out while the last ones are still being started.
const approvalsSrc = `
name: approvals-bench
stages:
  - id: prod
    steps:
      - id: approve
        type: Approval
        timeout: 24h
        with: {approvers: {groups: [release], minimumCount: 1}}
`

// BenchmarkParkedApprovals parks -approvals runs on an Approval (one pipeline, as in
// production: many runs of few pipelines), approves -approvals-approve of them and waits until
// those finish. It reports:
//
//   - s-to-start-all, starts/s: from the first start until every Start returned;
//   - s-to-park-all: from the first start until every run is parked;
//   - controller-KB/parked-run: the heap held by allocations made under prflow's pipelines
//     packages (controller, runs index, state machine), from heap profiles before the starts
//     and after every run parked, ÷ N;
//   - srv-msgs/park, srv-msgs/approval: messages the NATS server took in per run parked and
//     per run approved and finished;
//   - list-ms: the median of 20 runs pages (ListRuns, 50 runs, the API's and UI's list) with
//     N runs indexed, filtered to waitingApproval; list-all-ms unfiltered and list-none-ms
//     with a filter no run matches, after the approvals;
//   - s-to-finish, approvals/s: from the first approval until every approved run succeeded;
//   - rss-MB, peak-rss-MB: the whole process (embedded NATS, controller, worker) at the end.
//
// Run it as go test -run '^$' -bench BenchmarkParkedApprovals -benchtime 1x ./pipelines/controller/ -approvals 10000.
func BenchmarkParkedApprovals(b *testing.B) {
	runs := *approvalRuns
	runtime.MemProfileRate = 64 << 10
	m := controller.NewMetrics(nil)
	e := ctltest.New(b, ctltest.Options{Concurrency: 32, Quiet: true, Controller: []controller.Option{controller.WithMetrics(m)}})
	ctx := context.Background()
	ctlBefore := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	v0, _ := e.Conn.Embedded().Varz(nil)
	stopCPU := startCPUProfile(b, *approvalCPU)
	b.ResetTimer()
	start := time.Now()
	ids := make([]string, runs)
	var startedN atomic.Int64
	progress := benchProgress(func() string {
		return fmt.Sprintf("%d started, %d parked, %d failed", startedN.Load(), m.Parked(), int64(finished(m, "failed")))
	})
	defer progress()
	err := fanOut(runs, *approvalStarter, func(i int) error {
		r, err := e.Ctl.Start(ctx, controller.StartRequest{File: "approvals.yaml", Source: []byte(approvalsSrc), Executor: "bench"})
		if err != nil {
			return err
		}
		ids[i] = r.ID
		startedN.Add(1)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	allStarted := time.Since(start)
	deadline := time.Now().Add(5*time.Minute + time.Duration(runs)*20*time.Millisecond)
	for m.Parked() < int64(runs) {
		if n := finished(m, "failed"); n > 0 {
			b.Fatalf("%.0f runs failed while %d of %d were parked", n, m.Parked(), runs)
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d runs parked", m.Parked(), runs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	allParked := time.Since(start)
	stopCPU()
	b.StopTimer()
	v1, _ := e.Conn.Embedded().Varz(nil)
	ctlAfter := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	writeHeapProfile(b, *approvalHeap)
	list := listLatency(b, e.Ctl, 20, controller.ListOptions{Limit: 50, Status: "waitingApproval"}, 50)

	approve := int(float64(runs) * *approvalShare)
	b.StartTimer()
	stopCPU = startCPUProfile(b, suffixed(*approvalCPU, ".approve"))
	t0 := time.Now()
	alice := controller.User{Name: "alice", Groups: []string{"release"}}
	err = fanOut(approve, *approvalStarter, func(i int) error {
		return e.Ctl.Decide(ctx, ids[i], controller.SignalRequest{Stage: "prod", Step: "approve", Approve: true}, alice)
	})
	if err != nil {
		b.Fatal(err)
	}
	deadline = time.Now().Add(5*time.Minute + time.Duration(approve)*20*time.Millisecond)
	for finished(m, "succeeded") < float64(approve) {
		if n := finished(m, "failed"); n > 0 {
			b.Fatalf("%.0f approved runs failed", n)
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %.0f of %d approved runs finished", finished(m, "succeeded"), approve)
		}
		time.Sleep(100 * time.Millisecond)
	}
	toFinish := time.Since(t0)
	stopCPU()
	b.StopTimer()
	v2, _ := e.Conn.Embedded().Varz(nil)
	// After the approvals: the newest page of all runs, and a filter no run matches (the
	// list walks every run's summary to learn that).
	listAll := listLatency(b, e.Ctl, 20, controller.ListOptions{Limit: 50}, min(runs, 50))
	listNone := listLatency(b, e.Ctl, 5, controller.ListOptions{Limit: 50, Status: "cancelled"}, 0)
	if left := m.Parked(); left != int64(runs-approve) {
		b.Fatalf("%d runs parked after approving %d of %d", left, approve, runs)
	}

	b.ReportMetric(allStarted.Seconds(), "s-to-start-all")
	b.ReportMetric(float64(runs)/allStarted.Seconds(), "starts/s")
	b.ReportMetric(allParked.Seconds(), "s-to-park-all")
	b.ReportMetric(float64(ctlAfter-ctlBefore)/1024/float64(runs), "controller-KB/parked-run")
	b.ReportMetric(float64(v1.InMsgs-v0.InMsgs)/float64(runs), "srv-msgs/park")
	b.ReportMetric(float64(list.Microseconds())/1000, "list-ms")
	b.ReportMetric(float64(listAll.Microseconds())/1000, "list-all-ms")
	b.ReportMetric(float64(listNone.Microseconds())/1000, "list-none-ms")
	if approve > 0 {
		b.ReportMetric(toFinish.Seconds(), "s-to-finish")
		b.ReportMetric(float64(approve)/toFinish.Seconds(), "approvals/s")
		b.ReportMetric(float64(v2.InMsgs-v1.InMsgs)/float64(approve), "srv-msgs/approval")
	}
	rss, peak := procRSS()
	b.ReportMetric(float64(rss)/1024, "rss-MB")
	b.ReportMetric(float64(peak)/1024, "peak-rss-MB")
	b.ReportMetric(0, "ns/op")
}

// fanOut calls fn(0) … fn(n-1) on workers goroutines; the first error stops it.
func fanOut(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}

// finished is how many runs of the benchmark's pipeline ended with status, as the controller
// counted them.
func finished(m *controller.Metrics, status string) float64 {
	var d dto.Metric
	var c prometheus.Counter = m.Runs.WithLabelValues("approvals-bench", status)
	if err := c.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}

// listLatency is the median time of n runs pages listed with o, each of which must hold want runs.
func listLatency(b *testing.B, ctl *controller.Controller, n int, o controller.ListOptions, want int) time.Duration {
	b.Helper()
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		page, err := ctl.ListRuns(context.Background(), o)
		ds = append(ds, time.Since(t0))
		if err != nil || len(page.Runs) != want {
			b.Fatalf("list %+v: %v, %d runs, want %d", o, err, len(page.Runs), want)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// benchProgress prints what status says every 30 s until the returned func is called: a
// 100,000-run benchmark runs for long, and where it stood matters when it does not finish.
func benchProgress(status func() string) func() {
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "%s +%s: %s\n", time.Now().UTC().Format("15:04:05"), time.Since(start).Round(time.Second), status())
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}

func startCPUProfile(b *testing.B, file string) (stop func()) {
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return sync.OnceFunc(func() { pprof.StopCPUProfile(); _ = f.Close() })
}

func writeHeapProfile(b *testing.B, file string) {
	if file == "" {
		return
	}
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

func suffixed(file, suffix string) string {
	if file == "" {
		return ""
	}
	return file + suffix
}

// procRSS is the process's resident set now and at its peak, in KB.
func procRSS() (rss, peak int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			peak = n
		}
	}
	return rss, peak
}
