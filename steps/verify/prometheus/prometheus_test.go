package prometheus

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/prflow/prflow/steps/verify"
	"github.com/prflow/prflow/steps/verify/verifytest"
)

const errRatio = `sum(rate(http_requests_total{code="500"}[4s])) / sum(rate(http_requests_total[4s]))`

func client(base string) *Client {
	return &Client{BaseURL: base, HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// One real Prometheus scraping a real target answers instant (vector, scalar) and range
// (matrix) queries, bad queries, and unreachable servers, each classified right.
func TestPrometheusRealServer(t *testing.T) {
	app := verifytest.NewApp(0.2)
	defer app.Close()
	prom := verifytest.StartPrometheus(t, strings.TrimPrefix(app.URL, "http://"))
	prom.WaitSamples(t, errRatio)
	c := client(prom.URL)
	ctx := context.Background()

	res, err := c.Query(ctx, verify.Query{Expr: errRatio, At: time.Now()})
	if err != nil {
		t.Fatalf("instant query: %v", err)
	}
	v, err := res.Value()
	if err != nil || v < 0.1 || v > 0.3 {
		t.Fatalf("instant error ratio = %v, %v; want about 0.2", v, err)
	}

	res, err = c.Query(ctx, verify.Query{Expr: "scalar(" + errRatio + ")", At: time.Now()})
	if err != nil {
		t.Fatalf("scalar query: %v", err)
	}
	if v, err := res.Value(); err != nil || v < 0.1 || v > 0.3 {
		t.Fatalf("scalar = %v, %v", v, err)
	}

	// The range fills as scrapes arrive: ask until it holds a few points.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		now := time.Now()
		res, err = c.Query(ctx, verify.Query{Expr: errRatio, Start: now.Add(-5 * time.Second), At: now, Step: time.Second})
		if err != nil {
			t.Fatalf("range query: %v", err)
		}
		if len(res.Series) == 1 && len(res.Series[0].Points) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(res.Series) != 1 || len(res.Series[0].Points) < 3 {
		t.Fatalf("range: want one series of ≥3 points, got %+v", res.Series)
	}
	if m, err := res.Mean(); err != nil || m < 0.1 || m > 0.3 {
		t.Fatalf("range mean = %v, %v", m, err)
	}

	// Several series where one value is needed: named, not silently the first.
	res, err = c.Query(ctx, verify.Query{Expr: `rate(http_requests_total[4s])`, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Value(); !errors.Is(err, verify.ErrManySeries) {
		t.Fatalf("two series: %v, want ErrManySeries", err)
	}

	// A query matching nothing is no data, not zero.
	res, err = c.Query(ctx, verify.Query{Expr: `http_requests_total{code="418"}`, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Value(); !errors.Is(err, verify.ErrNoData) {
		t.Fatalf("no series: %v, want ErrNoData", err)
	}

	// A bad query is terminal and carries Prometheus's own words.
	_, err = c.Query(ctx, verify.Query{Expr: `sum(rate(http_requests_total[4s]`, At: time.Now()})
	var pe *verify.Error
	if !errors.As(err, &pe) || !pe.Terminal || pe.Status != http.StatusBadRequest || !strings.Contains(pe.Msg, "parse error") {
		t.Fatalf("bad query: %#v, want terminal 400 with Prometheus's parse error", err)
	}
	if !strings.Contains(err.Error(), "prometheus GET /api/v1/query: HTTP 400") {
		t.Fatalf("error does not name the call: %v", err)
	}
	// A string result cannot be judged.
	if _, err = c.Query(ctx, verify.Query{Expr: `"text"`, At: time.Now()}); !verify.IsTerminal(err) {
		t.Fatalf("string result: %v, want terminal", err)
	}

	// Killed: connection refused is transient.
	prom.Kill()
	_, err = c.Query(ctx, verify.Query{Expr: errRatio, At: time.Now()})
	if err == nil || verify.IsTerminal(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("killed server: %v, want a transient connection refused", err)
	}
}

// Basic auth against Prometheus's own web.config basic_auth_users; bearer through an
// authenticating proxy in front of it (Prometheus itself takes no bearer tokens). Wrong
// credentials are terminal, and no error repeats them.
func TestPrometheusAuth(t *testing.T) {
	app := verifytest.NewApp(0)
	defer app.Close()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	prom := verifytest.StartPrometheusWith(t, "basic_auth_users:\n  verify: "+string(hash)+"\n",
		func(r *http.Request) { r.SetBasicAuth("verify", "s3cret-pw") }, strings.TrimPrefix(app.URL, "http://"))
	ctx := context.Background()
	q := verify.Query{Expr: "vector(1)", At: time.Now()}

	good := client(prom.URL)
	good.Username, good.Password = "verify", "s3cret-pw"
	if res, err := good.Query(ctx, q); err != nil {
		t.Fatalf("basic auth: %v", err)
	} else if v, _ := res.Value(); v != 1 {
		t.Fatalf("vector(1) = %v", v)
	}
	bad := client(prom.URL)
	bad.Username, bad.Password = "verify", "wrong-pw-123"
	_, err = bad.Query(ctx, q)
	if !verify.IsTerminal(err) || !strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "wrong-pw-123") {
		t.Fatalf("bad password: %v", err)
	}

	target, _ := url.Parse(prom.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-abc-123" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		r.SetBasicAuth("verify", "s3cret-pw")
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	bearer := client(proxy.URL)
	bearer.Token = "tok-abc-123"
	if _, err := bearer.Query(ctx, q); err != nil {
		t.Fatalf("bearer: %v", err)
	}
	bearer.Token = "tok-wrong-456"
	if _, err := bearer.Query(ctx, q); !verify.IsTerminal(err) || strings.Contains(err.Error(), "tok-wrong-456") {
		t.Fatalf("bad bearer: %v", err)
	}
}

// What sits in front of Prometheus can fail too: 5xx and timeouts are transient, garbage is
// transient (a proxy's error page), an endless answer is refused.
func TestPrometheusFrontFailures(t *testing.T) {
	var mu sync.Mutex
	mode := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`))
		case "html":
			_, _ = w.Write([]byte(`<html>gateway</html>`))
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "huge":
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
			chunk := []byte(strings.Repeat(`{"metric":{"a":"b"},"value":[1,"1"]},`, 1000))
			for i := 0; i < 600 && r.Context().Err() == nil; i++ {
				_, _ = w.Write(chunk)
			}
		}
	}))
	defer srv.Close()
	c := client(srv.URL)
	for _, tc := range []struct {
		mode, want string
		terminal   bool
	}{
		{"503", "query timed out", false},
		{"html", "not Prometheus JSON", false},
		{"slow", "Client.Timeout", false},
		{"huge", "larger than 16 MiB", true},
	} {
		mu.Lock()
		mode = tc.mode
		mu.Unlock()
		// Only the slow case is about the timeout; the others may take their time on a loaded machine.
		c.HTTP.Timeout = time.Minute
		if tc.mode == "slow" {
			c.HTTP.Timeout = time.Second
		}
		_, err := c.Query(context.Background(), verify.Query{Expr: "up", At: time.Now()})
		if err == nil || verify.IsTerminal(err) != tc.terminal || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want terminal=%v containing %q", tc.mode, err, tc.terminal, tc.want)
		}
	}
}
