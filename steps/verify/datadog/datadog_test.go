package datadog

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/steps/verify"
	"github.com/prflow/prflow/steps/verify/verifytest"
)

const (
	apiKey = "dd-api-key-0123456789"
	appKey = "dd-app-key-9876543210"
	query  = "avg:trace.http.request.errors{env:prod,service:web}.as_rate()"
)

func newClient(dd *verifytest.Datadog, api, app string) *Client {
	return &Client{BaseURL: dd.URL, HTTP: &http.Client{Timeout: 10 * time.Second}, APIKey: api, AppKey: app}
}

func TestDatadogQuery(t *testing.T) {
	dd := verifytest.NewDatadog(apiKey, appKey)
	defer dd.Close()
	// A gap at the newest point: the value is the last real one, never the null.
	now := time.Now().Truncate(10 * time.Second)
	dd.Metric(query, func(ts time.Time) (float64, bool) {
		if !ts.Before(now) {
			return 0, false
		}
		return float64(ts.Unix()%100) / 100, true
	})
	c := newClient(dd, apiKey, appKey)
	res, err := c.Query(context.Background(), verify.Query{Expr: query, Start: now.Add(-time.Minute), At: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Series) != 1 || len(res.Series[0].Points) != 6 {
		t.Fatalf("want one series of 6 points (null skipped), got %+v", res.Series)
	}
	want := float64(now.Add(-10*time.Second).Unix()%100) / 100
	if v, err := res.Value(); err != nil || v != want {
		t.Fatalf("Value = %v, %v; want %v", v, err, want)
	}
	// Nothing matches: status ok with no series is no data.
	res, err = c.Query(context.Background(), verify.Query{Expr: "avg:nothing{env:prod}", At: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Value(); !errors.Is(err, verify.ErrNoData) {
		t.Fatalf("no series: %v", err)
	}
}

func TestDatadogErrors(t *testing.T) {
	dd := verifytest.NewDatadog(apiKey, appKey)
	defer dd.Close()
	ctx := context.Background()
	q := verify.Query{Expr: query, At: time.Now()}

	// A query Datadog cannot parse: terminal, with its error text.
	_, err := newClient(dd, apiKey, appKey).Query(ctx, verify.Query{Expr: "avg:web.errors", At: time.Now()})
	if !verify.IsTerminal(err) || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "Error parsing query") {
		t.Fatalf("bad query: %v", err)
	}
	// Wrong keys: terminal, and the keys appear nowhere.
	_, err = newClient(dd, "wrong-api-key-123", appKey).Query(ctx, q)
	if !verify.IsTerminal(err) || !strings.Contains(err.Error(), "HTTP 403") || strings.Contains(err.Error(), "wrong-api-key-123") || strings.Contains(err.Error(), appKey) {
		t.Fatalf("bad key: %v", err)
	}
	// Server errors: transient.
	dd.Fail(http.StatusBadGateway)
	if _, err = newClient(dd, apiKey, appKey).Query(ctx, q); err == nil || verify.IsTerminal(err) {
		t.Fatalf("502: %v, want transient", err)
	}
	dd.Fail(0)
	// Down: transient.
	dd.Close()
	if _, err = newClient(dd, apiKey, appKey).Query(ctx, q); err == nil || verify.IsTerminal(err) {
		t.Fatalf("closed server: %v, want transient", err)
	}
}

// 429 is transient and says how long to wait: X-RateLimit-Reset is seconds until the period
// ends (not an epoch time). Under concurrent callers exactly the allowed number get through.
func TestDatadogRateLimit(t *testing.T) {
	dd := verifytest.NewDatadog(apiKey, appKey)
	defer dd.Close()
	dd.Metric(query, func(time.Time) (float64, bool) { return 1, true })
	dd.RateLimit(5, 30*time.Second)
	c := newClient(dd, apiKey, appKey)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, limited := 0, 0
	var retry []time.Duration
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Query(context.Background(), verify.Query{Expr: query, At: time.Now()})
			mu.Lock()
			defer mu.Unlock()
			var e *verify.Error
			switch {
			case err == nil:
				ok++
			case errors.As(err, &e) && e.Status == http.StatusTooManyRequests && !e.Terminal:
				limited++
				retry = append(retry, e.Retry)
				if !strings.Contains(e.Msg, "Remaining=0") || !strings.Contains(e.Msg, "Limit=5") {
					t.Errorf("429 message lacks the rate-limit headers: %s", e.Msg)
				}
			default:
				t.Errorf("unexpected: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok != 5 || limited != 15 {
		t.Fatalf("ok %d, limited %d; want 5 and 15", ok, limited)
	}
	for _, r := range retry {
		if r < 25*time.Second || r > 30*time.Second {
			t.Fatalf("retry delay %s, want the ~30s until the period resets", r)
		}
	}
}
