package controller

import (
	"context"
	stdflag "flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

// BenchmarkFullPath measures no-op steps per second through controller → JetStream → worker →
// result → state, and dispatch latency (queued by the controller → started on a worker), next
// to raw JetStream publish+consume on the same embedded server in the same run.
func BenchmarkFullPath(b *testing.B) {
	const stepsPerRun = 10
	logLevel = slog.LevelInfo
	e := newEnv(&testing.T{}, envOpts{workers: 1, concurrency: 64})
	defer e.stop()
	src := noopPipeline("bench", stepsPerRun)
	runs := max(b.N/stepsPerRun, 8)
	v0, _ := e.conn.Embedded().Varz(nil)
	stopProfile := profileRuns(b)
	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	ids := runAll(b, runs, src, func(int) (*Controller, *Controller) { return e.ctl, e.ctl })
	elapsed := time.Since(start)
	b.StopTimer()
	stopProfile()
	cpu := cpuTime() - cpu0
	v1, _ := e.conn.Embedded().Varz(nil)
	var lat []time.Duration
	for _, id := range ids {
		r, err := e.ctl.Get(context.Background(), id)
		if err != nil {
			continue
		}
		for _, st := range r.Stages[0].Steps {
			lat = append(lat, st.Started.Sub(st.Queued))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	stepsPerSec := float64(runs*stepsPerRun) / elapsed.Seconds()
	rawCPU0 := cpuTime()
	raw := rawJetStream(b, e.conn.JS, 20000)
	rawCPU := cpuTime() - rawCPU0
	b.ReportMetric(stepsPerSec, "steps/s")
	// CPU time (this process: server and clients) per step and per raw message: steadier than
	// rates on a noisy machine, and their quotient is what the ratio would be if CPU-bound.
	b.ReportMetric(float64(cpu.Microseconds())/float64(runs*stepsPerRun), "cpu-µs/step")
	b.ReportMetric(float64(rawCPU.Microseconds())/20000, "cpu-µs/raw-msg")
	b.ReportMetric(raw, "raw-msgs/s")
	b.ReportMetric(stepsPerSec/raw, "ratio")
	// What the server handled per step (all components share it): where to look for savings.
	if v0 != nil && v1 != nil {
		n := float64(runs * stepsPerRun)
		b.ReportMetric(float64(v1.InMsgs-v0.InMsgs)/n, "srv-in-msgs/step")
		b.ReportMetric(float64(v1.OutMsgs-v0.OutMsgs)/n, "srv-out-msgs/step")
	}
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-dispatch-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-dispatch-ms")
	}
}

var runsProfile = stdflag.String("fullpath-cpuprofile", "", "BenchmarkFullPath: write a CPU profile of the runs alone (not the setup nor the raw JetStream reference) to this file; do not combine with -cpuprofile")

// profileRuns starts the -fullpath-cpuprofile profile, if asked for; the returned func stops it.
func profileRuns(b *testing.B) func() {
	if *runsProfile == "" {
		return func() {}
	}
	f, err := os.Create(*runsProfile)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// noopPipeline is a one-stage pipeline of n Noop steps.
func noopPipeline(name string, n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "name: %s\nstages:\n  - id: s\n    steps:\n", name)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "      - {id: n%d, type: Noop}\n", i)
	}
	return sb.String()
}

// runAll runs src runs times, 256 at once, each started on one controller and waited for on
// another (pick), and returns the run ids.
func runAll(b *testing.B, runs int, src string, pick func(i int) (starter, waiter *Controller)) []string {
	ids := make([]string, runs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			starter, waiter := pick(i)
			r, err := starter.Start(context.Background(), StartRequest{File: "b.yaml", Source: []byte(src)})
			if err != nil {
				b.Error(err)
				return
			}
			ids[i] = r.ID
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if fin, err := waiter.Wait(ctx, r.ID, nil); err != nil || fin.Status != pipelines.StSucceeded {
				b.Errorf("run %s: %v", r.ID, err)
			}
		}(i)
	}
	wg.Wait()
	return ids
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTwoReplicas is BenchmarkFullPath's load on two controller replicas sharing the
// work: results and events go to either, and each run is waited for on the replica that did
// not start it, so its end reaches Wait through the runs watcher.
func BenchmarkTwoReplicas(b *testing.B) {
	const stepsPerRun = 10
	logLevel = slog.LevelInfo
	e := newEnv(&testing.T{}, envOpts{workers: 1, concurrency: 64})
	defer e.stop()
	ctx, cancel := context.WithCancel(context.Background())
	second, err := New(ctx, e.conn, WithRegistry(e.reg), WithLogger(e.log))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = second.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-second.Ready()
	src := noopPipeline("bench", stepsPerRun)
	runs := max(b.N/stepsPerRun, 8)
	b.ResetTimer()
	start := time.Now()
	runAll(b, runs, src, func(i int) (*Controller, *Controller) {
		if i%2 == 1 {
			return second, e.ctl
		}
		return e.ctl, second
	})
	b.ReportMetric(float64(runs*stepsPerRun)/time.Since(start).Seconds(), "steps/s")
}

// rawJetStream publishes n messages (sync, with Nats-Msg-Id, from 16 publishers, as the
// controller publishes jobs) to a work-queue stream and consumes+acks them with a pull
// consumer: the ceiling prflow's full path is compared with.
func rawJetStream(b *testing.B, js jetstream.JetStream, n int) float64 {
	ctx := context.Background()
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "RAWBENCH", Subjects: []string{"rawbench.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: queue.DedupWindow})
	if err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(ctx, "RAWBENCH")
	cons, err := js.CreateOrUpdateConsumer(ctx, "RAWBENCH", jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan struct{}, n)
	cc, err := cons.Consume(func(m jetstream.Msg) { _ = m.Ack(); got <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	per := n / 16
	for p := 0; p < 16; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				_, _ = js.Publish(ctx, "rawbench.x", []byte(`{"v":1,"run":"r","stage":"s","step":"x","type":"Noop","attempt":1}`),
					jetstream.WithMsgID(fmt.Sprintf("%d/%d", p, i)))
			}
		}(p)
	}
	for i := 0; i < per*16; i++ {
		<-got
	}
	wg.Wait()
	return float64(per*16) / time.Since(start).Seconds()
}

// BenchmarkDispatchLatency runs steps one after another (no queueing behind other work) and
// reports the time from the controller queueing a step to a worker starting it.
func BenchmarkDispatchLatency(b *testing.B) {
	logLevel = slog.LevelInfo
	e := newEnv(&testing.T{}, envOpts{workers: 1, concurrency: 4})
	defer e.stop()
	const n = 100
	src := []byte(noopPipeline("lat", n))
	var lat []time.Duration
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := e.ctl.Start(context.Background(), StartRequest{File: "l.yaml", Source: src})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		fin, err := e.ctl.Wait(ctx, r.ID, nil)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		for _, st := range fin.Stages[0].Steps {
			lat = append(lat, st.Started.Sub(st.Queued))
		}
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-dispatch-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-dispatch-ms")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "sequential-steps/s")
	// Steadier than the latencies on a loaded machine; with 100 steps per run it shows what
	// grows with the run's size (each job's priors, each result's run rewrite).
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/step")
}
