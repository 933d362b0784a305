package queue

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// PullerMetrics are a worker's pull-side series, shared by all its pullers. Labels are low
// cardinality: consumer (one per pool and connector), status (the server's code), reason (a
// fixed list: the st* constants, plus "old_generation" for replies to given-up requests).
type PullerMetrics struct {
	statuses  *prometheus.CounterVec
	resets    *prometheus.CounterVec
	handBacks *prometheus.CounterVec
	recreates *prometheus.CounterVec
	requests  *prometheus.CounterVec
}

// NewPullerMetrics creates the metrics and registers them on reg (nil: not registered).
// Registering twice on the same registry returns the already registered collectors.
func NewPullerMetrics(reg prometheus.Registerer) (*PullerMetrics, error) {
	m := &PullerMetrics{
		statuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_puller_status_total",
			Help: "Status replies to pull requests, by consumer, status code and reason (idle_heartbeat, request_timeout, consumer_deleted, leadership_change, max_waiting, no_responders, bad_request, …).",
		}, []string{"consumer", "status", "reason"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_puller_resets_total",
			Help: "Times a puller gave up its open pull requests and asked again on a new inbox, by consumer and reason (reconnected, heartbeats_missed, a status reason, recreated).",
		}, []string{"consumer", "reason"}),
		handBacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_puller_handed_back_total",
			Help: "Jobs delivered to a worker and handed back unrun (with a delay), by consumer and reason: no_free_slot, stopped.",
		}, []string{"consumer", "reason"}),
		recreates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_puller_consumer_recreated_total",
			Help: "Pull consumers found deleted and created again, by consumer.",
		}, []string{"consumer"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_puller_pull_requests_total",
			Help: "Pull requests sent, by consumer.",
		}, []string{"consumer"}),
	}
	for _, c := range []**prometheus.CounterVec{&m.statuses, &m.resets, &m.handBacks, &m.recreates, &m.requests} {
		if reg == nil {
			continue
		}
		if err := reg.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			*c = existing
		}
	}
	return m, nil
}

func (m *PullerMetrics) status(consumer, code, reason string) {
	if m != nil {
		m.statuses.WithLabelValues(consumer, code, reason).Inc()
	}
}

func (m *PullerMetrics) reset(consumer, reason string) {
	if m != nil {
		m.resets.WithLabelValues(consumer, reason).Inc()
	}
}

func (m *PullerMetrics) handedBack(consumer, reason string) {
	if m != nil {
		m.handBacks.WithLabelValues(consumer, reason).Inc()
	}
}

func (m *PullerMetrics) recreated(consumer string) {
	if m != nil {
		m.recreates.WithLabelValues(consumer).Inc()
	}
}

func (m *PullerMetrics) request(consumer string) {
	if m != nil {
		m.requests.WithLabelValues(consumer).Inc()
	}
}

// Status is how many status replies with code and reason consumer's pullers got.
func (m *PullerMetrics) Status(consumer, code, reason string) float64 {
	return counterValue(m.statuses.WithLabelValues(consumer, code, reason))
}

// Resets is how many times consumer's pullers started a new request generation for reason.
func (m *PullerMetrics) Resets(consumer, reason string) float64 {
	return counterValue(m.resets.WithLabelValues(consumer, reason))
}

// HandedBack is how many jobs consumer's pullers handed back unrun for reason.
func (m *PullerMetrics) HandedBack(consumer, reason string) float64 {
	return counterValue(m.handBacks.WithLabelValues(consumer, reason))
}

// Recreated is how many times consumer was found deleted and created again.
func (m *PullerMetrics) Recreated(consumer string) float64 {
	return counterValue(m.recreates.WithLabelValues(consumer))
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil || d.Counter == nil {
		return 0
	}
	return d.Counter.GetValue()
}
