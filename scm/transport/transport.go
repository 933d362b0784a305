// Package transport is the HTTP stack every prflow SCM driver sends its API calls through: a
// client-side token bucket per connector, waiting out forge rate limits (Retry-After,
// X-RateLimit-*, GitHub's secondary limits, GitLab's RateLimit-Reset), bounded retries with
// jittered exponential backoff on 502/503/504 and dropped connections, Prometheus counters per
// provider, call and status, TLS options, and redaction so no token reaches an error message.
//
// Only requests that are safe to replay are retried: GET, HEAD, PUT, DELETE and OPTIONS, and
// requests whose context the caller marked with Guarded (for example a merge that carries a
// head-SHA guard). A plain POST is sent once.
//
// Errors returned by Transport itself are redacted. http.Client wraps them in a *url.Error that
// repeats the request URL (only a password is stripped), and client libraries add their own
// context, so drivers pass every error through RedactError(err, secrets...) where they turn it
// into an *scm.Error.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/prflow/prflow/scm"
)

type ctxKey int

const (
	guardedKey ctxKey = iota
	callKey
)

// Guarded marks requests made with ctx as safe to retry even when their method is not
// idempotent: the caller guarantees a replay cannot apply twice (the request is guarded by a
// SHA, or creating the same thing twice is harmless).
func Guarded(ctx context.Context) context.Context { return context.WithValue(ctx, guardedKey, true) }

// IsGuarded reports whether ctx was marked with Guarded.
func IsGuarded(ctx context.Context) bool { v, _ := ctx.Value(guardedKey).(bool); return v }

// WithCall names the API call made with ctx for metrics and logs ("merge_pr"). Without it the
// transport derives a route from the URL path with owners, names, numbers and SHAs replaced.
func WithCall(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callKey, name)
}

func callName(r *http.Request) string {
	if v, ok := r.Context().Value(callKey).(string); ok && v != "" {
		return v
	}
	return Route(r.Method, r.URL.EscapedPath())
}

// Transport is an http.RoundTripper; build it with New. It is safe for concurrent use.
type Transport struct {
	base      http.RoundTripper
	provider  string
	connector string
	limiter   *rate.Limiter
	policy
	now   func() time.Time
	sleep func(context.Context, time.Duration) error // replaced in tests

	mu           sync.Mutex
	blockedUntil time.Time // the forge said: no requests before this
}

// New wraps a base RoundTripper (http.DefaultTransport unless WithBase) with limits, retries and
// metrics.
func New(opts ...Option) (*Transport, error) {
	c := newConfig(opts)
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c.transport(c.base), nil
}

func (c *config) transport(base http.RoundTripper) *Transport {
	lim := rate.NewLimiter(rate.Inf, 0)
	if c.rps > 0 {
		burst := c.burst
		if burst <= 0 {
			burst = max(1, int(c.rps))
		}
		lim = rate.NewLimiter(rate.Limit(c.rps), burst)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{
		base: base, provider: c.provider, connector: c.connector, limiter: lim,
		policy: c.policy, now: time.Now, sleep: scm.Sleep,
	}
}

// replayable reports whether r may be sent again.
func replayable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody && r.GetBody == nil {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return IsGuarded(r.Context())
}

// RoundTrip sends r, waiting for the token bucket and any known rate-limit reset first, and
// retries replayable requests on rate limits, 502/503/504 and connection errors.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	call := callName(r)
	again := replayable(r)
	for attempt := 1; ; attempt++ {
		if err := t.waitTurn(ctx, call); err != nil {
			return nil, err
		}
		req := r
		if attempt > 1 {
			req = r.Clone(ctx)
			if r.GetBody != nil {
				body, err := r.GetBody()
				if err != nil {
					return nil, t.redact(fmt.Errorf("%s: rewind request body: %w", call, err))
				}
				req.Body = body
			}
		}
		resp, err := t.base.RoundTrip(req)
		if err != nil {
			t.metrics.request(t.provider, t.connector, call, "error")
			if ctx.Err() != nil || !again || attempt >= t.maxAttempts || !retryableErr(err) {
				return nil, t.redact(err)
			}
			d := t.backoff(attempt)
			t.metrics.retry(t.provider, t.connector, call, "connection")
			t.log.DebugContext(ctx, "scm request failed, retrying", "provider", t.provider, "connector", t.connector, "call", call, "attempt", attempt, "wait", d, "err", t.redact(err))
			if err := t.sleep(ctx, d); err != nil {
				return nil, err
			}
			continue
		}
		t.metrics.request(t.provider, t.connector, call, strconv.Itoa(resp.StatusCode))
		t.observe(resp)

		var wait time.Duration
		var reason string
		switch {
		case isRateLimited(resp):
			wait, reason = t.rateLimitDelay(resp), "rate_limited"
			t.block(wait)
		case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
			reason = "server_error"
			wait = t.backoff(attempt)
			if ra, ok := RetryAfter(resp, t.now()); ok && ra > wait {
				wait = ra
			}
		default:
			return resp, nil
		}
		if !again || attempt >= t.maxAttempts || wait > t.maxWait {
			return resp, nil
		}
		t.metrics.retry(t.provider, t.connector, call, reason)
		t.log.DebugContext(ctx, "scm request retried", "provider", t.provider, "connector", t.connector, "call", call, "status", resp.StatusCode, "attempt", attempt, "wait", wait)
		drain(resp)
		if reason == "rate_limited" {
			continue // waitTurn sleeps until the reset recorded by block
		}
		t.metrics.waited(t.provider, t.connector, wait)
		if err := t.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// waitTurn waits for the token bucket and for a rate-limit reset the forge announced. A reset
// further away than the wait cap fails at once with a *scm.RateLimitError (the caller should
// retry the job later rather than hold a worker).
func (t *Transport) waitTurn(ctx context.Context, call string) error {
	t.mu.Lock()
	until := t.blockedUntil
	t.mu.Unlock()
	if d := until.Sub(t.now()); d > 0 {
		if d > t.maxWait {
			return &scm.RateLimitError{RetryAfter: d, Msg: fmt.Sprintf("%s %s: %s: the forge's rate limit resets at %s", t.provider, t.connector, call, until.UTC().Format(time.RFC3339))}
		}
		t.metrics.waited(t.provider, t.connector, d)
		t.log.InfoContext(ctx, "waiting for scm rate limit reset", "provider", t.provider, "connector", t.connector, "call", call, "wait", d)
		if err := t.sleep(ctx, d); err != nil {
			return err
		}
	}
	start := t.now()
	if err := t.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("%s %s: %s: client rate limit: %w", t.provider, t.connector, call, err)
	}
	if d := t.now().Sub(start); d > time.Millisecond {
		t.metrics.waited(t.provider, t.connector, d)
	}
	return nil
}

func (t *Transport) block(d time.Duration) {
	if d <= 0 {
		return
	}
	until := t.now().Add(d)
	t.mu.Lock()
	if until.After(t.blockedUntil) {
		t.blockedUntil = until
	}
	t.mu.Unlock()
}

// observe records the remaining quota and, when it is exhausted, blocks until the reset.
func (t *Transport) observe(resp *http.Response) {
	rem, ok := remaining(resp.Header)
	if !ok {
		return
	}
	t.metrics.remaining(t.provider, t.connector, rem)
	if rem == 0 && resp.StatusCode < 300 {
		if d, ok := resetDelay(resp.Header, t.now()); ok {
			t.block(d)
		}
	}
}

// rateLimitDelay is how long the forge asks us to wait: Retry-After, else the reset time of the
// exhausted quota, else one minute (GitHub's advice for secondary limits without headers).
func (t *Transport) rateLimitDelay(resp *http.Response) time.Duration {
	if d, ok := RetryAfter(resp, t.now()); ok {
		return d
	}
	return time.Minute
}

func (t *Transport) backoff(attempt int) time.Duration {
	return scm.Backoff(t.baseDelay, t.maxDelay, attempt)
}

func (t *Transport) redact(err error) error { return RedactError(err, t.secrets...) }

// isRateLimited recognises 429 from any forge and GitHub's 403 rate-limit answers (primary:
// X-RateLimit-Remaining 0; secondary: Retry-After or the documented message).
func isRateLimited(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return true
	case http.StatusForbidden:
		if resp.Header.Get("Retry-After") != "" {
			return true
		}
		if rem, ok := remaining(resp.Header); ok && rem == 0 {
			return true
		}
		body := peekBody(resp, 64<<10)
		lower := strings.ToLower(string(body))
		return strings.Contains(lower, "rate limit")
	}
	return false
}

// RetryAfter reads how long a response asks the client to wait: the Retry-After header
// (seconds or HTTP date), else the reset time of GitHub's X-RateLimit-Reset or GitLab's
// RateLimit-Reset when the remaining quota is 0 or the status is 429/403. Drivers use it to
// fill scm.RateLimitError.RetryAfter.
func RetryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(resp.Header.Get("Retry-After")); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return time.Duration(s * float64(time.Second)), true
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(at.Sub(now), 0), true
		}
	}
	rem, hasRem := remaining(resp.Header)
	if (hasRem && rem == 0) || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusForbidden {
		return resetDelay(resp.Header, now)
	}
	return 0, false
}

func remaining(h http.Header) (int, bool) {
	for _, k := range []string{"X-RateLimit-Remaining", "RateLimit-Remaining"} {
		if v := h.Get(k); v != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// resetDelay reads X-RateLimit-Reset / RateLimit-Reset: a Unix time (GitHub, GitLab) or, for
// small values, seconds from now.
func resetDelay(h http.Header, now time.Time) (time.Duration, bool) {
	for _, k := range []string{"X-RateLimit-Reset", "RateLimit-Reset"} {
		v := strings.TrimSpace(h.Get(k))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		if n > 1_000_000_000 {
			return max(time.Unix(n, 0).Sub(now), 0), true
		}
		return time.Duration(n) * time.Second, true
	}
	return 0, false
}

// peekBody reads up to limit bytes of the body and puts them back so the caller still reads
// the whole body.
func peekBody(resp *http.Response, limit int64) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader(string(b)), resp.Body), resp.Body}
	if err != nil {
		return nil
	}
	return b
}

func drain(resp *http.Response) {
	if resp.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
	}
}

// retryableErr: everything except cancellation and TLS/certificate or URL problems, which a
// retry cannot fix.
func retryableErr(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"x509:", "tls:", "certificate", "unsupported protocol scheme", "no such host"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return true
}
