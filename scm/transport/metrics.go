package transport

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the SCM client metrics shared by all connectors of a process. Labels are low
// cardinality: provider (driver), connector (configured name), call (route or WithCall name),
// status (HTTP code or "error") and reason.
type Metrics struct {
	requests *prometheus.CounterVec
	retries  *prometheus.CounterVec
	waits    *prometheus.CounterVec
	quota    *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them on reg (not the global registry).
// Registering twice on the same registry returns the already registered collectors.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_scm_requests_total",
			Help: "SCM API requests sent, by provider, connector, call and HTTP status (\"error\" when no response).",
		}, []string{"provider", "connector", "call", "status"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_scm_retries_total",
			Help: "SCM API requests retried, by reason: rate_limited, server_error, connection.",
		}, []string{"provider", "connector", "call", "reason"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prflow_scm_rate_limit_wait_seconds_total",
			Help: "Time spent waiting for client-side or forge rate limits and retry backoff.",
		}, []string{"provider", "connector"}),
		quota: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "prflow_scm_rate_limit_remaining",
			Help: "Requests left in the forge's current rate-limit window, as last reported.",
		}, []string{"provider", "connector"}),
	}
	var err error
	m.requests, err = register(reg, m.requests)
	if err != nil {
		return nil, err
	}
	if m.retries, err = register(reg, m.retries); err != nil {
		return nil, err
	}
	if m.waits, err = register(reg, m.waits); err != nil {
		return nil, err
	}
	if m.quota, err = register(reg, m.quota); err != nil {
		return nil, err
	}
	return m, nil
}

// Describe sends the descriptions of the SCM client series (a dashboard check uses it: a
// vector without samples is not in a scrape).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.retries.Describe(ch)
	m.waits.Describe(ch)
	m.quota.Describe(ch)
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *Metrics) request(provider, connector, call, status string) {
	if m != nil {
		m.requests.WithLabelValues(provider, connector, call, status).Inc()
	}
}

func (m *Metrics) retry(provider, connector, call, reason string) {
	if m != nil {
		m.retries.WithLabelValues(provider, connector, call, reason).Inc()
	}
}

func (m *Metrics) waited(provider, connector string, d time.Duration) {
	if m != nil && d > 0 {
		m.waits.WithLabelValues(provider, connector).Add(d.Seconds())
	}
}

func (m *Metrics) remaining(provider, connector string, n int) {
	if m != nil {
		m.quota.WithLabelValues(provider, connector).Set(float64(n))
	}
}
