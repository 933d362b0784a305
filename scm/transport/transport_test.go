package transport

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/prflow/prflow/scm"
)

// fakeClock replaces sleeping: it records requested waits and advances time instantly.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

type harness struct {
	t      *testing.T
	srv    *httptest.Server
	calls  atomic.Int32
	clock  *fakeClock
	reg    *prometheus.Registry
	tr     *Transport
	bodies chan string
}

// newHarness serves answers in order (the last one repeats) and returns a client through a
// Transport with a fake clock.
func newHarness(t *testing.T, answers []func(w http.ResponseWriter, r *http.Request), opts ...Option) (*harness, *http.Client) {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{now: time.Unix(1_800_000_000, 0)}, reg: prometheus.NewRegistry(), bodies: make(chan string, 16)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(h.calls.Add(1))
		body, _ := io.ReadAll(r.Body)
		select {
		case h.bodies <- string(body):
		default:
		}
		answers[min(n, len(answers))-1](w, r)
	}))
	t.Cleanup(h.srv.Close)
	m, err := NewMetrics(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]Option{WithProvider("github", "gh-test"), WithMetrics(m), WithBackoff(time.Millisecond, 4*time.Millisecond)}, opts...)
	tr, err := New(all...)
	if err != nil {
		t.Fatal(err)
	}
	tr.now, tr.sleep = h.clock.Now, h.clock.Sleep
	h.tr = tr
	return h, &http.Client{Transport: tr}
}

func status(code int, hdr ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"status":%d}`, code)
	}
}

func withBody(code int, body string, hdr ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func (h *harness) do(c *http.Client, ctx context.Context, method, path, body string) (*http.Response, error) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func (h *harness) counter(name string, labels map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			total += value(m)
		}
	}
	return total
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func TestRetryAfterIsHonouredForGET(t *testing.T) {
	h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){
		status(429, "Retry-After", "7"),
		status(200),
	})
	resp, err := h.do(c, context.Background(), "GET", "/repos/acme/deploy/pulls/12", "")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if h.calls.Load() != 2 {
		t.Fatalf("calls = %d, want 2", h.calls.Load())
	}
	if got := h.clock.Slept(); len(got) != 1 || got[0] != 7*time.Second {
		t.Fatalf("waited %v, want [7s]", got)
	}
	call := "GET /repos/:owner/:repo/pulls/:n"
	if n := h.counter("prflow_scm_requests_total", map[string]string{"call": call, "status": "429", "provider": "github", "connector": "gh-test"}); n != 1 {
		t.Fatalf("429 counter = %v", n)
	}
	if n := h.counter("prflow_scm_requests_total", map[string]string{"call": call, "status": "200"}); n != 1 {
		t.Fatalf("200 counter = %v", n)
	}
	if n := h.counter("prflow_scm_retries_total", map[string]string{"call": call, "reason": "rate_limited"}); n != 1 {
		t.Fatalf("retry counter = %v", n)
	}
	if n := h.counter("prflow_scm_rate_limit_wait_seconds_total", nil); n != 7 {
		t.Fatalf("wait seconds = %v", n)
	}
}

func TestRateLimitAnswers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		wait   time.Duration
	}{
		{"github secondary limit with Retry-After", withBody(403, `{"message":"You have exceeded a secondary rate limit"}`, "Retry-After", "30"), 30 * time.Second},
		{"github secondary limit without headers", withBody(403, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes."}`), time.Minute},
		{"github primary limit exhausted", status(403, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(now.Add(42*time.Second).Unix(), 10)), 42 * time.Second},
		{"gitlab RateLimit-Reset", status(429, "RateLimit-Remaining", "0", "RateLimit-Reset", strconv.FormatInt(now.Add(13*time.Second).Unix(), 10)), 13 * time.Second},
		{"Retry-After as HTTP date", status(429, "Retry-After", now.Add(9*time.Second).UTC().Format(http.TimeFormat)), 9 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){tc.answer, status(200)})
			resp, err := h.do(c, context.Background(), "GET", "/user", "")
			if err != nil || resp.StatusCode != 200 || h.calls.Load() != 2 {
				t.Fatalf("resp %v err %v calls %d", resp, err, h.calls.Load())
			}
			if got := h.clock.Slept(); len(got) != 1 || got[0] != tc.wait {
				t.Fatalf("waited %v, want %v", got, tc.wait)
			}
		})
	}
}

func TestPlain403IsNotARateLimit(t *testing.T) {
	h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){withBody(403, `{"message":"Resource not accessible by integration"}`), status(200)})
	resp, err := h.do(c, context.Background(), "GET", "/repos/a/b", "")
	if err != nil || resp.StatusCode != 403 || h.calls.Load() != 1 {
		t.Fatalf("resp %v err %v calls %d", resp, err, h.calls.Load())
	}
}

func TestWhichRequestsAreRetried(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		guarded   bool
		answer    func(http.ResponseWriter, *http.Request)
		wantCalls int32
		wantCode  int
	}{
		{"GET on 503", "GET", false, status(503), 2, 200},
		{"PUT on 502", "PUT", false, status(502), 2, 200},
		{"DELETE on 504", "DELETE", false, status(504), 2, 200},
		{"POST on 503 is sent once", "POST", false, status(503), 1, 503},
		{"POST on 429 is sent once", "POST", false, status(429, "Retry-After", "1"), 1, 429},
		{"guarded POST on 503", "POST", true, status(503), 2, 200},
		{"guarded POST on 429", "POST", true, status(429, "Retry-After", "1"), 2, 200},
		{"GET on 401", "GET", false, status(401), 1, 401},
		{"GET on 404", "GET", false, status(404), 1, 404},
		{"GET on 500", "GET", false, status(500), 1, 500},
		{"PATCH on 503", "PATCH", false, status(503), 1, 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){tc.answer, status(200)})
			ctx := context.Background()
			if tc.guarded {
				ctx = Guarded(ctx)
			}
			body := ""
			if tc.method != "GET" && tc.method != "DELETE" {
				body = `{"sha":"abc"}`
			}
			resp, err := h.do(c, ctx, tc.method, "/repos/acme/deploy/pulls/1/merge", body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantCode || h.calls.Load() != tc.wantCalls {
				t.Fatalf("status %d after %d calls, want %d after %d", resp.StatusCode, h.calls.Load(), tc.wantCode, tc.wantCalls)
			}
			if body != "" {
				for i := int32(0); i < tc.wantCalls; i++ {
					if got := <-h.bodies; got != body {
						t.Fatalf("request %d body %q, want %q (replayed bodies must be complete)", i, got, body)
					}
				}
			}
		})
	}
}

func TestRetriesAreBounded(t *testing.T) {
	h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){status(503)}, WithRetries(3))
	resp, err := h.do(c, context.Background(), "GET", "/x", "")
	if err != nil || resp.StatusCode != 503 || h.calls.Load() != 3 {
		t.Fatalf("status %v err %v calls %d", resp, err, h.calls.Load())
	}
	if n := h.counter("prflow_scm_retries_total", map[string]string{"reason": "server_error"}); n != 2 {
		t.Fatalf("retries = %v", n)
	}
}

func TestLongRateLimitIsNotWaited(t *testing.T) {
	h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){status(429, "Retry-After", "3600"), status(200)}, WithMaxWait(time.Minute))
	resp, err := h.do(c, context.Background(), "GET", "/x", "")
	if err != nil || resp.StatusCode != 429 || h.calls.Load() != 1 {
		t.Fatalf("status %v err %v calls %d", resp, err, h.calls.Load())
	}
	if d, ok := RetryAfter(resp, h.clock.Now()); !ok || d != time.Hour {
		t.Fatalf("RetryAfter = %v %v", d, ok)
	}
	// The next request does not even reach the forge: it fails fast with a typed error.
	_, err = h.do(c, context.Background(), "GET", "/y", "")
	var rl *scm.RateLimitError
	if !errors.As(err, &rl) || !errors.Is(err, scm.ErrRateLimited) || rl.RetryAfter != time.Hour {
		t.Fatalf("err = %v", err)
	}
	if h.calls.Load() != 1 {
		t.Fatalf("calls = %d", h.calls.Load())
	}
}

func TestExhaustedQuotaDelaysNextRequest(t *testing.T) {
	reset := time.Unix(1_800_000_000, 0).Add(20 * time.Second).Unix()
	h, c := newHarness(t, []func(http.ResponseWriter, *http.Request){
		status(200, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(reset, 10)),
		status(200, "X-RateLimit-Remaining", "4999"),
	})
	for i := 0; i < 2; i++ {
		if resp, err := h.do(c, context.Background(), "GET", "/x", ""); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
	}
	if got := h.clock.Slept(); len(got) != 1 || got[0] != 20*time.Second {
		t.Fatalf("waited %v, want [20s]", got)
	}
	if n := h.counter("prflow_scm_rate_limit_remaining", nil); n != 4999 {
		t.Fatalf("remaining gauge = %v", n)
	}
}

func TestDroppedConnection(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(200)
	}))
	defer srv.Close()
	tr, err := New(WithBackoff(time.Millisecond, time.Millisecond), WithBase(&http.Transport{DisableKeepAlives: true}))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	resp, err := c.Get(srv.URL + "/x")
	if err != nil || resp.StatusCode != 200 || n.Load() != 2 {
		t.Fatalf("GET: %v %v after %d", resp, err, n.Load())
	}
	resp.Body.Close()
	n.Store(0)
	_, err = c.Post(srv.URL+"/x", "application/json", strings.NewReader("{}"))
	if err == nil || n.Load() != 1 {
		t.Fatalf("POST after a dropped connection: err %v after %d requests, want an error after 1", err, n.Load())
	}
}

func TestContextCancelStopsWaiting(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
	}))
	defer srv.Close()
	tr, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr.sleep = func(ctx context.Context, d time.Duration) error {
		cancel() // the real sleep is context-aware; cancel while "waiting"
		return scm.Sleep(ctx, d)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	_, err = (&http.Client{Transport: tr}).Do(req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// TestTokenNeverInErrors: errors from the transport itself carry no token. http.Client wraps
// them in a *url.Error that repeats the request URL (it only strips a password), so drivers
// pass errors through RedactError at their boundary; both layers are checked.
func TestTokenNeverInErrors(t *testing.T) {
	const token = "ghp_SuperSecretToken123456"
	tr, err := New(WithSecrets(token), WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	// Nothing listens on port 1: the dial error carries the URL.
	for _, u := range []string{
		"http://x-access-token:" + token + "@127.0.0.1:1/repos/a/b",
		"http://127.0.0.1:1/api/v4/projects?private_token=" + token,
		"http://" + token + "@127.0.0.1:1/x",
	} {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		_, rtErr := tr.RoundTrip(req)
		_, clientErr := c.Do(req)
		if rtErr == nil || clientErr == nil {
			t.Fatal("expected a connection error")
		}
		for _, e := range []error{rtErr, RedactError(clientErr, token)} {
			if strings.Contains(e.Error(), token) {
				t.Fatalf("token in error: %v", e)
			}
			if !strings.Contains(e.Error(), "connection refused") {
				t.Fatalf("redaction lost the cause: %v", e)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	base := errors.New("dial https://bot:s3cr3t-token@git.example.com/a.git?access_token=abcdefgh: Authorization: Bearer eyJhbGciOi.payload.sig")
	err := RedactError(fmt.Errorf("wrapped: %w", scm.ErrUnauthorized), "s3cr3t-token")
	if !errors.Is(err, scm.ErrUnauthorized) {
		t.Fatal("RedactError broke errors.Is")
	}
	got := Redact(base.Error(), "s3cr3t-token")
	for _, leak := range []string{"s3cr3t-token", "abcdefgh", "eyJhbGciOi", "bot:"} {
		if strings.Contains(got, leak) {
			t.Fatalf("%q leaks %q", got, leak)
		}
	}
	if !strings.Contains(got, "git.example.com/a.git") {
		t.Fatalf("redaction removed too much: %q", got)
	}
	if Redact("basic auth failed") != "basic auth failed" {
		t.Fatal("ordinary words must survive")
	}
	if RedactError(nil) != nil {
		t.Fatal("nil error must stay nil")
	}
	if clean := errors.New("basic auth failed"); RedactError(clean, "s3cr3t-token") != clean {
		t.Fatal("an error without a secret is returned as it is")
	}
}

func TestRoute(t *testing.T) {
	tests := map[string]string{
		"/repos/acme/deploy/pulls/12/merge":                                    "PUT /repos/:owner/:repo/pulls/:n/merge",
		"/repos/acme/deploy/git/refs/heads/feature/x":                          "PUT /repos/:owner/:repo/git/refs/:path",
		"/repos/acme/deploy/contents/envs/prod/values.yaml":                    "PUT /repos/:owner/:repo/contents/:path",
		"/repos/acme/deploy/statuses/0123456789abcdef0123456789abcdef01234567": "PUT /repos/:owner/:repo/statuses/:sha",
		"/api/v4/projects/group%2Fsub%2Fproj/merge_requests/7/merge":           "PUT /api/v4/projects/:project/merge_requests/:n/merge",
		"/api/v4/projects/42/repository/files/envs%2Fdev%2Fa.yaml/raw":         "PUT /api/v4/projects/:project/repository/files/:path/raw",
		"/2.0/repositories/ws/slug/pullrequests/3/merge":                       "PUT /2.0/repositories/:owner/:repo/pullrequests/:n/merge",
		"/2.0/repositories/ws/slug/src/abc1234/envs/dev.yaml":                  "PUT /2.0/repositories/:owner/:repo/src/:path",
		"/user":          "PUT /user",
		"/users/octocat": "PUT /users/:name",
	}
	for path, want := range tests {
		if got := Route("PUT", path); got != want {
			t.Errorf("Route(%s) = %q, want %q", path, got, want)
		}
	}
	req := httptest.NewRequest("GET", "/repos/a/b", nil).WithContext(WithCall(context.Background(), "get_repo"))
	if callName(req) != "get_repo" {
		t.Fatal("WithCall ignored")
	}
}

func TestNewClientTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	plain, err := NewClient(WithRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Get(srv.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted server: %v", err)
	}
	for name, opt := range map[string]Option{"ca bundle": WithTLS(caPEM, false), "insecure": WithTLS(nil, true)} {
		c, err := NewClient(opt, WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(srv.URL)
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("%s: %v %v", name, resp, err)
		}
		resp.Body.Close()
	}
	if _, err := NewClient(WithTLS([]byte("not pem"), false)); err == nil {
		t.Fatal("bad CA bundle accepted")
	}
	if _, err := New(WithRateLimit(-1, 0)); err == nil {
		t.Fatal("negative rps accepted")
	}
}

func TestClientSideRateLimit(t *testing.T) {
	tr, err := New(WithRateLimit(5, 2))
	if err != nil {
		t.Fatal(err)
	}
	if tr.limiter.Limit() != 5 || tr.limiter.Burst() != 2 {
		t.Fatalf("limiter %v/%d", tr.limiter.Limit(), tr.limiter.Burst())
	}
	// A cancelled context fails while waiting for a token instead of sending.
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { sent.Add(1) }))
	defer srv.Close()
	tr2, _ := New(WithRateLimit(0.001, 1))
	c := &http.Client{Transport: tr2}
	if resp, err := c.Get(srv.URL); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := c.Do(req); err == nil || sent.Load() != 1 {
		t.Fatalf("second request within the limit: err %v, sent %d", err, sent.Load())
	}
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.request("github", "x", "c", "200")
	b.request("github", "x", "c", "200")
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "prflow_scm_requests_total" && mf.GetMetric()[0].GetCounter().GetValue() != 2 {
			t.Fatalf("counters not shared: %v", mf)
		}
	}
}
