package controller_test

import (
	"context"
	"flag"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

var parkedApprovals = flag.Int("parked", 1000, "BenchmarkParkedApprovals: how many runs park on an Approval at once")

// BenchmarkParkedApprovals parks -parked runs on an Approval (one pipeline, as in production:
// many runs of few pipelines) and reports what the controller holds per parked run:
//
//   - controller-KB/parked-run: the heap held by allocations made under prflow's pipelines
//     packages (controller, runs index, state machine), from heap profiles before the starts
//     and after every run parked, ÷ N;
//   - s-to-park-all, starts/s: from the first start until every run is parked;
//   - list-ms: one runs page (GET /api/v1/runs's ListRuns, 50 runs) with N runs indexed.
//
// Run it as go test -run '^$' -bench BenchmarkParkedApprovals -benchtime 1x ./pipelines/controller/ -parked 10000.
func BenchmarkParkedApprovals(b *testing.B) {
	runs := *parkedApprovals
	runtime.MemProfileRate = 64 << 10
	m := controller.NewMetrics(nil)
	e := ctltest.New(b, ctltest.Options{Concurrency: 32, Controller: []controller.Option{controller.WithMetrics(m)}})
	ctx := context.Background()
	ctlBefore := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 { // starters, as webhooks and API callers start runs concurrently
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(runs) {
				if _, err := e.Ctl.Start(ctx, controller.StartRequest{File: "gated.yaml", Source: []byte(gateSrc), Executor: "bench"}); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5*time.Minute + time.Duration(runs)*20*time.Millisecond)
	for m.Parked() < int64(runs) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d runs parked", m.Parked(), runs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	allParked := time.Since(start)
	b.StopTimer()
	ctlAfter := ctltest.HeapUnder("github.com/prflow/prflow/pipelines")
	t0 := time.Now()
	page, err := e.Ctl.ListRuns(ctx, controller.ListOptions{Limit: 50, Status: "waitingApproval"})
	list := time.Since(t0)
	if err != nil || len(page.Runs) != 50 {
		b.Fatalf("list: %v, %d runs", err, len(page.Runs))
	}
	b.ReportMetric(float64(m.Parked()), "parked")
	b.ReportMetric(allParked.Seconds(), "s-to-park-all")
	b.ReportMetric(float64(runs)/allParked.Seconds(), "starts/s")
	b.ReportMetric(float64(ctlAfter-ctlBefore)/1024/float64(runs), "controller-KB/parked-run")
	b.ReportMetric(float64(list.Microseconds())/1000, "list-ms")
	b.ReportMetric(0, "ns/op")
}
