package controller

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prflow/prflow/pipelines"
)

// Metrics are the controller's Prometheus series: step jobs, runs and stages, parked steps
// and the HTTP API. Labels stay low-cardinality: pipeline and stage names come from pipeline
// files, step types from the registry, reasons from a fixed list.
type Metrics struct {
	Dispatched *prometheus.CounterVec
	Completed  *prometheus.CounterVec
	Duration   *prometheus.HistogramVec
	Wakes      *prometheus.CounterVec
	// Runs counts runs that ended, by pipeline and final status.
	Runs *prometheus.CounterVec
	// RunDuration and StageDuration observe runs and stages as they end.
	RunDuration   *prometheus.HistogramVec
	StageDuration *prometheus.HistogramVec
	// HTTPRequests and HTTPDuration describe the HTTP API, by route pattern.
	HTTPRequests *prometheus.CounterVec
	HTTPDuration *prometheus.HistogramVec
	parked       atomic.Int64
	workers      atomic.Pointer[func() float64]
	depth        *depthCollector
	Registry     *prometheus.Registry

	// live is every unfinished run this controller has indexed, for the gauges computed at
	// scrape time (runs by status, approvals pending, parked steps by reason).
	liveMu     sync.Mutex
	live       map[string]liveRun
	collectors []prometheus.Collector
}

type liveRun struct {
	pipeline string
	status   pipelines.Status
	// parked counts the run's parked steps by reason (parkReasons): counters, not a map,
	// since one is kept per live run (a map was most of the entry, ~300 B per parked run).
	parked [len(parkReasons)]int32
}

// The reasons of the parked-steps gauge (parkReason), and their label values.
const (
	reasonApproval = iota
	reasonPR
	reasonAppStatus
	reasonEvent
	reasonTimer
)

var parkReasons = [...]string{reasonApproval: "approval", reasonPR: "pr", reasonAppStatus: "app_status", reasonEvent: "event", reasonTimer: "timer"}

// durationBuckets fit promotions: seconds for no-op stages up to hours for gated ones.
var durationBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600}

// NewMetrics registers the controller's metrics on reg (a new registry when nil).
func NewMetrics(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{Registry: reg, live: map[string]liveRun{},
		Dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_jobs_dispatched_total", Help: "Step jobs dispatched, by step type."}, []string{"type"}),
		Completed:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_jobs_completed_total", Help: "Step results applied, by step type and outcome (succeeded, failed, waiting)."}, []string{"type", "status"}),
		Duration:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prflow_step_duration_seconds", Help: "Time a worker spent running a step.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"type"}),
		Wakes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_step_wakes_total", Help: "Parked steps woken, by cause."}, []string{"cause"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_runs_finished_total",
			Help: "Runs that ended, by pipeline and final status (succeeded, failed, cancelled)."}, []string{"pipeline", "status"}),
		RunDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prflow_run_duration_seconds",
			Help: "Time from a run's start to its end, by pipeline and final status.", Buckets: durationBuckets}, []string{"pipeline", "status"}),
		StageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prflow_stage_duration_seconds",
			Help: "Time from a stage's start to its end, by pipeline, stage and final status.", Buckets: durationBuckets}, []string{"pipeline", "stage", "status"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prflow_http_requests_total",
			Help: "HTTP API requests answered, by route pattern, method and status code."}, []string{"route", "method", "code"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prflow_http_request_duration_seconds",
			Help:    "Time to answer an HTTP API request (a followed log stream counts until it ends), by route pattern.",
			Buckets: prometheus.DefBuckets}, []string{"route", "method"}),
	}
	m.depth = &depthCollector{desc: prometheus.NewDesc("prflow_queue_depth",
		"Step jobs not yet done (waiting for a worker or running), by pool and the connector they need (\"\" for none).",
		[]string{"pool", "connector"}, nil)}
	m.register(m.depth, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "prflow_live_workers", Help: "Workers with a fresh heartbeat."},
		func() float64 {
			if fn := m.workers.Load(); fn != nil {
				return (*fn)()
			}
			return 0
		}))
	m.register(m.Dispatched, m.Completed, m.Duration, m.Wakes, m.Runs, m.RunDuration, m.StageDuration, m.HTTPRequests, m.HTTPDuration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "prflow_parked_steps", Help: "Steps parked waiting on an event, holding no worker."},
			func() float64 { return float64(m.parked.Load()) }),
		&liveCollector{m: m,
			runs: prometheus.NewDesc("prflow_runs", "Unfinished runs, by pipeline and status (pending, running).", []string{"pipeline", "status"}, nil),
			approvals: prometheus.NewDesc("prflow_approvals_pending", "Approval steps parked waiting for a decision, by pipeline.",
				[]string{"pipeline"}, nil),
			parked: prometheus.NewDesc("prflow_parked_steps_by_reason",
				"Parked steps by what they wait for: approval, pr (a forge event), app_status (Argo CD app status), event (another topic), timer (poll or deadline only).",
				[]string{"reason"}, nil)})
	return m
}

// register registers collectors and remembers them for Describe.
func (m *Metrics) register(cs ...prometheus.Collector) {
	m.Registry.MustRegister(cs...)
	m.collectors = append(m.collectors, cs...)
}

// Describe sends the descriptions of every series the controller registered (including the
// ones computed from NATS), whether or not they have a value yet.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// gauges sets how the series computed at scrape time from NATS are read: jobs waiting per
// pool and live workers (registered by NewMetrics, empty until then).
func (m *Metrics) gauges(depth func() map[depthKey]float64, workers func() float64) {
	m.depth.fn.Store(&depth)
	m.workers.Store(&workers)
}

type depthCollector struct {
	desc *prometheus.Desc
	fn   atomic.Pointer[func() map[depthKey]float64]
}

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }
func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	fn := d.fn.Load()
	if fn == nil {
		return
	}
	for k, n := range (*fn)() {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, n, k.pool, k.connector)
	}
}

// Parked is the number of parked steps the controller knows.
func (m *Metrics) Parked() int64 { return m.parked.Load() }

// runSnapshot is what a run looked like before an event, to see what the event ended.
type runSnapshot struct {
	status pipelines.Status
	stages []pipelines.Status
}

func snapshotRun(r *pipelines.Run) runSnapshot {
	s := runSnapshot{status: r.Status, stages: make([]pipelines.Status, len(r.Stages))}
	for i, sr := range r.Stages {
		s.stages[i] = sr.Status
	}
	return s
}

// ended observes the run and the stages that an event this controller applied and stored
// brought to an end (only the writer sees the transition, so several replicas count once).
func (m *Metrics) ended(before runSnapshot, r *pipelines.Run) {
	for i, sr := range r.Stages {
		if i < len(before.stages) && !before.stages[i].Terminal() && sr.Status.Terminal() && !sr.Started.IsZero() && !sr.Ended.IsZero() {
			m.StageDuration.WithLabelValues(r.Pipeline, sr.ID, string(sr.Status)).Observe(sr.Ended.Sub(sr.Started).Seconds())
		}
	}
	if before.status.Terminal() || !r.Status.Terminal() {
		return
	}
	m.Runs.WithLabelValues(r.Pipeline, string(r.Status)).Inc()
	start := r.Started
	if start.IsZero() {
		start = r.Created
	}
	if end := r.Ended; !end.IsZero() && !start.IsZero() {
		m.RunDuration.WithLabelValues(r.Pipeline, string(r.Status)).Observe(end.Sub(start).Seconds())
	}
}

// track records an unfinished run's status and parked steps for the scrape-time gauges;
// a finished run is dropped.
func (m *Metrics) track(r *pipelines.Run, parked []pipelines.Parked) {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if r.Status.Terminal() {
		delete(m.live, r.ID)
		return
	}
	lr := liveRun{pipeline: r.Pipeline, status: r.Status}
	for _, p := range parked {
		lr.parked[parkReason(p)]++
	}
	m.live[r.ID] = lr
}

// untrack drops a run the controller forgot.
func (m *Metrics) untrack(run string) {
	m.liveMu.Lock()
	delete(m.live, run)
	m.liveMu.Unlock()
}

// parkReason is what a parked step waits for, as an index into parkReasons (a fixed list: the
// wait's text is free-form and would make a series per run).
func parkReason(p pipelines.Parked) int {
	for _, t := range p.Topics {
		if t == "approval" {
			return reasonApproval
		}
	}
	for _, t := range p.Topics {
		if strings.HasPrefix(t, "pr:") {
			return reasonPR
		}
	}
	switch {
	case len(p.Keys) > 0:
		return reasonAppStatus
	case len(p.Topics) > 0:
		return reasonEvent
	}
	return reasonTimer
}

type liveCollector struct {
	m                       *Metrics
	runs, approvals, parked *prometheus.Desc
}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runs
	ch <- c.approvals
	ch <- c.parked
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	type runKey struct {
		pipeline string
		status   pipelines.Status
	}
	runs := map[runKey]int{}
	approvals := map[string]int{}
	var parked [len(parkReasons)]int
	c.m.liveMu.Lock()
	for _, lr := range c.m.live {
		runs[runKey{lr.pipeline, lr.status}]++
		approvals[lr.pipeline] += int(lr.parked[reasonApproval]) // 0 too: a pipeline with live runs has a series
		for i, n := range lr.parked {
			parked[i] += int(n)
		}
	}
	c.m.liveMu.Unlock()
	for k, n := range runs {
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(n), k.pipeline, string(k.status))
	}
	for p, n := range approvals {
		ch <- prometheus.MustNewConstMetric(c.approvals, prometheus.GaugeValue, float64(n), p)
	}
	for i, n := range parked {
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(n), parkReasons[i])
	}
}

// instrument counts and times the requests of one route (its pattern is the label, never
// the path, which holds run ids).
func (m *Metrics) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.HTTPRequests.WithLabelValues(route, r.Method, strconv.Itoa(sw.code)).Inc()
		m.HTTPDuration.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status code; it keeps Flush for streamed answers (logs).
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
