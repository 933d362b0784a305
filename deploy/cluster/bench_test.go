package cluster

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
)

// Sizing benchmarks on the production shape: a 3-node cluster, topology at R3, everything in
// this one process (so all share the machine's cores; on the loaded 2-core CI machine the
// figures are a floor, not a capacity).

var benchReplicas = []int{1, 2}

func noopRun(n int) []byte {
	src := "name: bench\nstages:\n  - id: s\n    steps:\n"
	for i := range n {
		src += fmt.Sprintf("      - {id: n%d, type: Noop}\n", i)
	}
	return []byte(src)
}

// benchStack is a cluster with replicas controllers (on nodes 1, 2, …) and two workers.
func benchStack(b *testing.B, replicas int) *stack {
	c := Start(b, 3, nil, nil)
	s := &stack{t: b, c: c, logs: &ctltest.Buffer{}}
	s.log = discardLog()
	s.setup(0)
	for i := range replicas {
		s.controller(i % 3)
	}
	s.worker(1, "w1")
	s.worker(2, "w2")
	return s
}

// BenchmarkClusterJobs: no-op step jobs through controller → R3 jobs stream → worker → result
// → R3 run state, with 1 and 2 controller replicas. Reports jobs/s and jobs/s per replica.
func BenchmarkClusterJobs(b *testing.B) {
	for _, replicas := range benchReplicas {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			s := benchStack(b, replicas)
			const stepsPerRun = 10
			runs := max(b.N/stepsPerRun, 20)
			b.ResetTimer()
			start := time.Now()
			runNoops(b, s, runs, stepsPerRun)
			el := time.Since(start)
			b.StopTimer()
			jobs := float64(runs * stepsPerRun)
			b.ReportMetric(jobs/el.Seconds(), "jobs/s")
			b.ReportMetric(jobs/el.Seconds()/float64(replicas), "jobs/s/replica")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkClusterParkedRuns: 1,000 runs parked on an Approval (no worker held) on the R3
// cluster; reports the Go heap they add to this process (controller, worker, the three NATS
// nodes' stores all included) and the run state they add to the runs bucket.
func BenchmarkClusterParkedRuns(b *testing.B) {
	const runs = 1000
	s := benchStack(b, 1)
	ctl := s.ctls[0].v
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	src := []byte("name: park\nstages:\n  - id: s\n    steps:\n      - {id: gate, type: Approval, timeout: 24h, with: {approvers: [alice]}}\n")
	kvBytes := func() uint64 {
		st, err := s.ctls[0].conn.JS.Stream(ctx, "KV_"+queue.BucketRuns)
		if err != nil {
			b.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return info.State.Bytes
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	// One run first, so per-process setup (pipeline cache, consumers) is not counted.
	warm, err := ctl.Start(ctx, controller.StartRequest{File: "p.yaml", Source: src})
	if err != nil {
		b.Fatal(err)
	}
	waitParked(b, ctl, []string{warm.ID})
	h0, k0 := heap(), kvBytes()
	b.ResetTimer()
	ids := make([]string, runs)
	for i := range ids {
		r, err := ctl.Start(ctx, controller.StartRequest{File: "p.yaml", Source: src})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = r.ID
	}
	waitParked(b, ctl, ids)
	b.StopTimer()
	time.Sleep(2 * time.Second)
	h1, k1 := heap(), kvBytes()
	b.ReportMetric(float64(int64(h1)-int64(h0))/(1<<20), "heap-MB/1000-parked")
	b.ReportMetric(float64(k1-k0)/(1<<20), "kv-MB/1000-parked")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
	b.ReportMetric(0, "ns/op")
}

// runNoops runs runs runs of steps no-op steps, 128 at once, started and waited for on the
// controller replicas in turn, and reports (tb.Error) any run that did not succeed.
func runNoops(tb testing.TB, s *stack, runs, steps int) {
	src := noopRun(steps)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128)
	for i := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctl := s.ctls[i%len(s.ctls)].v
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			r, err := ctl.Start(ctx, controller.StartRequest{File: "b.yaml", Source: src})
			if err != nil {
				tb.Error(err)
				return
			}
			if fin, err := ctl.Wait(ctx, r.ID, nil); err != nil || fin.Status != pipelines.StSucceeded {
				cur, gerr := ctl.Get(context.Background(), r.ID)
				if gerr == nil {
					tb.Errorf("run %s: %v; stored: %s at %s", r.ID, err, cur.Status, where(cur))
				} else {
					tb.Errorf("run %s: %v (%v)", r.ID, err, gerr)
				}
			}
		}()
	}
	wg.Wait()
}

func waitParked(b *testing.B, ctl *controller.Controller, ids []string) {
	deadline := time.Now().Add(5 * time.Minute)
	for _, id := range ids {
		for {
			r, err := ctl.Get(context.Background(), id)
			if err == nil && r.Stages[0].Steps[0].Status == pipelines.StWaiting {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("run %s not parked after 5m", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
