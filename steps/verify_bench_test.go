package steps_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/verify"
	"github.com/prflow/prflow/steps/verify/datadog"
	"github.com/prflow/prflow/steps/verify/verifytest"
)

// driftRecorder wraps a provider and records, for every measurement query, how late it ran
// against the time it was scheduled for (Query.At is the scheduled time).
type driftRecorder struct {
	verify.Provider
	mu    sync.Mutex
	drift []time.Duration
}

func (d *driftRecorder) Query(ctx context.Context, q verify.Query) (verify.Result, error) {
	if q.Start.IsZero() {
		late := time.Since(q.At)
		d.mu.Lock()
		d.drift = append(d.drift, late)
		d.mu.Unlock()
	}
	return d.Provider.Query(ctx, q)
}

// BenchmarkParkedVerify parks 1,000 runs in Verify at once — one worker of 4 slots, each run
// measuring a metric of the fake Datadog every 10s, 3 times — and reports how many were
// parked at once, the busiest worker-slot count seen while they waited, and how late each
// measurement ran against its schedule (p50, p99, max).
func BenchmarkParkedVerify(b *testing.B) {
	const runs = 1000
	dd := verifytest.NewDatadog("k-api", "k-app")
	defer dd.Close()
	dd.Metric("avg:web.errors{env:prod}", func(time.Time) (float64, bool) { return 0.001, true })
	rec := &driftRecorder{Provider: &datadog.Client{BaseURL: dd.URL, HTTP: &http.Client{Timeout: 10 * time.Second}, APIKey: "k-api", AppKey: "k-app"}}
	m := controller.NewMetrics(nil)
	e := ctltest.New(b, ctltest.Options{Concurrency: 4, Services: map[string]any{steps.ServiceMetrics: verify.Static{"dd": rec}},
		Controller: []controller.Option{controller.WithMetrics(m), controller.WithoutStartChecks()},
		Tuning:     queue.ConsumerTuning{AckWait: 30 * time.Second, MaxDeliver: 5}})
	src := `name: verify-bench
stages:
  - id: prod
    steps:
      - id: verify
        type: Verify
        timeout: 10m
        with:
          metrics:
            - {name: errors, provider: dd, query: "avg:web.errors{env:prod}", interval: 10s, count: 3, successCondition: result < 0.01}
`
	b.ResetTimer()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = e.Start(src, nil).ID
	}
	var maxParked, maxRunning int64
	var running []int64
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		maxParked = max(maxParked, m.Parked())
		ws, _ := e.Ctl.LiveWorkers(context.Background())
		for _, w := range ws {
			running = append(running, w.Running)
			maxRunning = max(maxRunning, w.Running)
		}
		rec.mu.Lock()
		n := len(rec.drift)
		rec.mu.Unlock()
		if n >= 3*runs || time.Now().After(deadline) {
			break
		}
	}
	for _, id := range ids {
		if r := e.Wait(id, 5*time.Minute); r.Status != pipelines.StSucceeded {
			b.Fatalf("run %s: %s %s", id, r.Status, r.Error)
		}
	}
	b.StopTimer()
	slices.Sort(rec.drift)
	slices.Sort(running)
	pct := func(p int) time.Duration { return rec.drift[(len(rec.drift)-1)*p/100] }
	b.ReportMetric(float64(maxParked), "max-parked")
	b.ReportMetric(float64(maxRunning), "max-slots-busy")
	b.ReportMetric(float64(running[(len(running)-1)*99/100]), "p99-slots-busy")
	b.ReportMetric(float64(len(rec.drift)), "measurements")
	b.ReportMetric(pct(50).Seconds()*1000, "drift-p50-ms")
	b.ReportMetric(pct(99).Seconds()*1000, "drift-p99-ms")
	b.ReportMetric(rec.drift[len(rec.drift)-1].Seconds()*1000, "drift-max-ms")
	b.ReportMetric(0, "ns/op")
}
