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

// Parked is the number of parked steps the controller knows.
func (m *Metrics) Parked() int64 { return m.parked.Load() }
