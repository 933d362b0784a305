package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Option configures New and NewClient.
type Option func(*config)

type config struct {
	base      http.RoundTripper
	provider  string
	connector string
	rps       float64
	burst     int
	policy
	timeout  time.Duration
	caPEM    []byte
	insecure bool
}

// policy is the part of the config a Transport keeps: how it retries, where it reports, what
// it hides.
type policy struct {
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	maxWait     time.Duration
	metrics     *Metrics
	secrets     []string
	log         *slog.Logger
}

func newConfig(opts []Option) *config {
	c := &config{
		provider: "unknown",
		policy: policy{
			maxAttempts: 4,
			baseDelay:   250 * time.Millisecond,
			maxDelay:    10 * time.Second,
			maxWait:     time.Minute,
			log:         slog.New(slog.DiscardHandler),
		},
		timeout: 60 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func (c *config) validate() error {
	switch {
	case c.rps < 0:
		return fmt.Errorf("transport: rate limit rps %v is negative", c.rps)
	case c.burst < 0:
		return fmt.Errorf("transport: rate limit burst %d is negative", c.burst)
	case c.maxAttempts < 1:
		return fmt.Errorf("transport: attempts %d, want at least 1", c.maxAttempts)
	case c.timeout < 0:
		return errors.New("transport: negative timeout")
	}
	return nil
}

// WithBase sets the RoundTripper that sends the requests (default http.DefaultTransport; for
// NewClient, a clone of it with the TLS settings).
func WithBase(rt http.RoundTripper) Option { return func(c *config) { c.base = rt } }

// WithProvider labels metrics and logs: the driver (github, gitlab, …) and the connector name.
func WithProvider(provider, connector string) Option {
	return func(c *config) { c.provider, c.connector = provider, connector }
}

// WithRateLimit sets the client-side token bucket: rps requests per second with bursts of
// burst (default max(1, rps)). rps 0 means no client-side limit.
func WithRateLimit(rps float64, burst int) Option {
	return func(c *config) { c.rps, c.burst = rps, burst }
}

// WithRetries sets the total number of tries of a replayable request (default 4).
func WithRetries(attempts int) Option { return func(c *config) { c.maxAttempts = attempts } }

// WithBackoff sets the exponential backoff between retries on server errors and dropped
// connections (defaults 250ms doubling to at most 10s, with jitter).
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) {
		if base > 0 {
			c.baseDelay = base
		}
		if max > 0 {
			c.maxDelay = max
		}
	}
}

// WithMaxWait caps how long a request waits for a rate limit to reset (default 1 minute). A
// longer wait is not waited: the forge's answer is returned (or, before sending, a
// *scm.RateLimitError) so the job can be retried later without holding a worker.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// WithMetrics records requests, retries, waits and the remaining quota.
func WithMetrics(m *Metrics) Option { return func(c *config) { c.metrics = m } }

// WithSecrets lists values (tokens) that must never appear in an error returned by the
// transport.
func WithSecrets(secrets ...string) Option {
	return func(c *config) { c.secrets = append(c.secrets, secrets...) }
}

// WithLogger sets the logger for retries and waits (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithTimeout bounds a whole request including retries and waits (NewClient; default 60s,
// 0 = none).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithTLS trusts the PEM CA bundle in addition to the system roots and/or skips certificate
// verification (NewClient).
func WithTLS(caPEM []byte, insecureSkipVerify bool) Option {
	return func(c *config) { c.caPEM, c.insecure = caPEM, insecureSkipVerify }
}

// NewClient returns an http.Client for a driver: a clone of http.DefaultTransport with the TLS
// settings, wrapped by a Transport, and the timeout.
func NewClient(opts ...Option) (*http.Client, error) {
	c := newConfig(opts)
	if err := c.validate(); err != nil {
		return nil, err
	}
	base := c.base
	if base == nil {
		ht := http.DefaultTransport.(*http.Transport).Clone()
		if len(c.caPEM) > 0 || c.insecure {
			tc, err := TLSConfig(c.caPEM, c.insecure)
			if err != nil {
				return nil, err
			}
			ht.TLSClientConfig = tc
		}
		base = ht
	}
	return &http.Client{Transport: c.transport(base), Timeout: c.timeout}, nil
}

// TLSConfig builds a client TLS configuration trusting the system roots plus caPEM.
func TLSConfig(caPEM []byte, insecureSkipVerify bool) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecureSkipVerify} //nolint:gosec // opt-in per connector
	if len(caPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("transport: CA bundle holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	return tc, nil
}
