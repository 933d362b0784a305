// Package datadog queries Datadog's metrics query API (v1 GET /api/v1/query?from&to&query)
// for the Verify step, authenticating with the DD-API-KEY and DD-APPLICATION-KEY headers.
// A 429 is transient and its X-RateLimit-Reset (seconds until the limit resets) becomes the
// retry delay; 400 (a bad query) and 401/403 (bad keys) are terminal with Datadog's errors.
package datadog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/steps/verify"
)

func init() {
	verify.Register("datadog", func(c verify.Config) (verify.Provider, error) {
		hc, err := c.HTTPClient()
		if err != nil {
			return nil, err
		}
		return &Client{BaseURL: c.BaseURL, HTTP: hc, APIKey: c.APIKey.Value(), AppKey: c.AppKey.Value()}, nil
	})
}

const (
	maxBody = 16 << 20
	call    = "GET /api/v1/query"
	// defaultWindow is the range asked for an instant question: Datadog answers ranges only.
	defaultWindow = 5 * time.Minute
)

// Client is one Datadog site.
type Client struct {
	BaseURL string // https://api.datadoghq.com
	HTTP    *http.Client
	APIKey  string
	AppKey  string
}

// Query asks for q.Expr from q.Start (or At-5m) to q.At.
func (c *Client) Query(ctx context.Context, q verify.Query) (verify.Result, error) {
	to := q.At
	if to.IsZero() {
		to = time.Now()
	}
	from := q.Start
	if from.IsZero() {
		from = to.Add(-defaultWindow)
	}
	if to.Unix() <= from.Unix() {
		to = from.Add(time.Second)
	}
	v := url.Values{"from": {strconv.FormatInt(from.Unix(), 10)}, "to": {strconv.FormatInt(to.Unix(), 10)}, "query": {q.Expr}}
	fail := func(status int, terminal bool, retry time.Duration, format string, a ...any) error {
		return &verify.Error{Provider: "datadog", Call: call, Status: status, Terminal: terminal, Retry: retry, Msg: fmt.Sprintf(format, a...)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/api/v1/query?"+v.Encode(), nil)
	if err != nil {
		return verify.Result{}, fail(0, true, 0, "%v", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("DD-API-KEY", c.APIKey)
	req.Header.Set("DD-APPLICATION-KEY", c.AppKey)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return verify.Result{}, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return verify.Result{}, fail(0, false, 0, "%v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return verify.Result{}, fail(resp.StatusCode, false, 0, "read answer: %v", err)
	}
	if len(body) > maxBody {
		return verify.Result{}, fail(resp.StatusCode, true, 0, "answer larger than %d MiB; narrow the query", maxBody>>20)
	}
	var ans response
	jsonErr := json.Unmarshal(body, &ans)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return verify.Result{}, fail(resp.StatusCode, false, resetDelay(resp.Header), "rate limited (%s)", rateText(resp.Header))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return verify.Result{}, fail(resp.StatusCode, true, 0, "%s: check the metrics connector's apiKey and appKey", ans.errText(body))
	case resp.StatusCode >= 500:
		return verify.Result{}, fail(resp.StatusCode, false, 0, "%s", ans.errText(body))
	case resp.StatusCode >= 400:
		return verify.Result{}, fail(resp.StatusCode, true, 0, "%s", ans.errText(body))
	case jsonErr != nil:
		return verify.Result{}, fail(resp.StatusCode, false, 0, "answer is not Datadog JSON: %v", jsonErr)
	case ans.Status != "" && ans.Status != "ok":
		// A query Datadog could parse but not run comes back 200 with status error.
		return verify.Result{}, fail(resp.StatusCode, true, 0, "status %q: %s", ans.Status, ans.errText(body))
	}
	var out verify.Result
	for _, s := range ans.Series {
		vs := verify.Series{Labels: map[string]string{"metric": s.Metric, "scope": s.Scope}}
		for _, p := range s.Pointlist {
			if p[0] == nil || p[1] == nil {
				continue // a gap: Datadog writes null where it has no value
			}
			ms := *p[0]
			vs.Points = append(vs.Points, verify.Point{T: time.UnixMilli(int64(ms)), V: *p[1]})
		}
		out.Series = append(out.Series, vs)
	}
	return out, nil
}

type response struct {
	Status string   `json:"status"`
	Error  string   `json:"error"`
	Errors []string `json:"errors"`
	Series []struct {
		Metric    string        `json:"metric"`
		Scope     string        `json:"scope"`
		Pointlist [][2]*float64 `json:"pointlist"`
	} `json:"series"`
}

func (r response) errText(body []byte) string {
	if len(r.Errors) > 0 {
		return strings.Join(r.Errors, "; ")
	}
	if r.Error != "" {
		return r.Error
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		return "no error text"
	}
	return s
}

// resetDelay reads X-RateLimit-Reset: seconds until the limit resets (Datadog's meaning,
// not an epoch time). Absent or unreadable: X-RateLimit-Period, else 0 (the step's own backoff).
func resetDelay(h http.Header) time.Duration {
	for _, k := range []string{"X-RateLimit-Reset", "X-RateLimit-Period"} {
		if n, err := strconv.Atoi(strings.TrimSpace(h.Get(k))); err == nil && n > 0 && n <= 3600 {
			return time.Duration(n) * time.Second
		}
	}
	return 0
}

func rateText(h http.Header) string {
	var parts []string
	for _, k := range []string{"X-RateLimit-Name", "X-RateLimit-Limit", "X-RateLimit-Period", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if v := h.Get(k); v != "" {
			parts = append(parts, strings.TrimPrefix(k, "X-RateLimit-")+"="+v)
		}
	}
	if len(parts) == 0 {
		return "no rate-limit headers"
	}
	return strings.Join(parts, " ")
}
