package controller

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the controller's Prometheus series.
type Metrics struct {
	Dispatched *prometheus.CounterVec
	Completed  *prometheus.CounterVec
	Duration   *prometheus.HistogramVec
	Wakes      *prometheus.CounterVec
	parked     atomic.Int64
	Registry   *prometheus.Registry
}

// NewMetrics registers the controller's metrics on reg (a new registry when nil).
func NewMetrics(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{Registry: reg,
		Dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_jobs_dispatched_total", Help: "Step jobs dispatched, by step type."}, []string{"type"}),
		Completed:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_jobs_completed_total", Help: "Step results applied, by step type and outcome (succeeded, failed, waiting)."}, []string{"type", "status"}),
		Duration:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prflow_step_duration_seconds", Help: "Time a worker spent running a step.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"type"}),
		Wakes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_step_wakes_total", Help: "Parked steps woken, by cause."}, []string{"cause"}),
	}
	reg.MustRegister(m.Dispatched, m.Completed, m.Duration, m.Wakes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "prflow_parked_steps", Help: "Steps parked waiting on an event, holding no worker."},
			func() float64 { return float64(m.parked.Load()) }))
	return m
}

// gauges registers series computed at scrape time from NATS: jobs waiting per pool and live
// workers.
func (m *Metrics) gauges(depth func() map[depthKey]float64, workers func() float64) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "prflow_live_workers", Help: "Workers with a fresh heartbeat."}, workers),
		&depthCollector{desc: prometheus.NewDesc("prflow_queue_depth",
			"Step jobs not yet done (waiting for a worker or running), by pool and the connector they need (\"\" for none).",
			[]string{"pool", "connector"}, nil), fn: depth},
	)
}

type depthCollector struct {
	desc *prometheus.Desc
	fn   func() map[depthKey]float64
}

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }
func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range d.fn() {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, n, k.pool, k.connector)
	}
}

// Parked is the number of parked steps the controller knows.
func (m *Metrics) Parked() int64 { return m.parked.Load() }
