// Package verifytest holds test servers for the Verify step's metrics backends. Datadog is a
// fake of Datadog's metrics query API v1 (GET /api/v1/query): the response shape of the real
// API (status, res_type, series[].pointlist with millisecond times and null gaps, from_date,
// to_date), its errors ({"errors": [...]} with 400 on a query it cannot parse, 403 on bad
// keys) and its rate limit (429 with X-RateLimit-Limit, -Period, -Remaining, -Reset in seconds
// until the period ends, and -Name). It is safe for concurrent use.
package verifytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Datadog is the fake. Set its fields before the first request, or under its methods.
type Datadog struct {
	*httptest.Server
	APIKey, AppKey string

	mu      sync.Mutex
	metrics map[string]func(time.Time) (float64, bool)
	step    time.Duration
	limit   int           // requests per period (0: unlimited)
	period  time.Duration // the rate-limit period
	window  time.Time     // start of the current period
	used    int
	calls   int
	status  int // forced status for every request (0: none)
	now     func() time.Time
}

// NewDatadog starts a fake accepting apiKey and appKey; points are every 10s.
func NewDatadog(apiKey, appKey string) *Datadog {
	d := &Datadog{APIKey: apiKey, AppKey: appKey, metrics: map[string]func(time.Time) (float64, bool){},
		step: 10 * time.Second, now: time.Now}
	d.Server = httptest.NewServer(http.HandlerFunc(d.serve))
	return d
}

// Metric answers query with fn's value at each point time (false: no value, a null gap).
func (d *Datadog) Metric(query string, fn func(t time.Time) (float64, bool)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.metrics[query] = fn
}

// Step sets the distance between points.
func (d *Datadog) Step(s time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.step = s
}

// RateLimit allows n requests per period; more get 429 until the period ends.
func (d *Datadog) RateLimit(n int, period time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.limit, d.period, d.window, d.used = n, period, d.now(), 0
}

// Fail answers every request with status (0: stop failing).
func (d *Datadog) Fail(status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.status = status
}

// Calls is how many requests reached the fake.
func (d *Datadog) Calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// A metrics query is aggregator:metric{scope} with optional functions and arithmetic; the fake
// refuses anything without a {scope}, as Datadog's parser does.
var queryRe = regexp.MustCompile(`^[^{}]*[a-zA-Z_][\w.]*\{[^{}]*\}.*$`)

func writeErr(w http.ResponseWriter, status int, msgs ...string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": msgs})
}

func (d *Datadog) serve(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.calls++
	now := d.now()
	if d.limit > 0 {
		if now.Sub(d.window) >= d.period {
			d.window, d.used = now, 0
		}
		d.used++
		reset := int((d.period - now.Sub(d.window) + time.Second - 1) / time.Second)
		w.Header().Set("X-RateLimit-Limit", strconv.Itoa(d.limit))
		w.Header().Set("X-RateLimit-Period", strconv.Itoa(int(d.period/time.Second)))
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(max(0, d.limit-d.used)))
		w.Header().Set("X-RateLimit-Reset", strconv.Itoa(max(1, reset)))
		w.Header().Set("X-RateLimit-Name", "query")
		if d.used > d.limit {
			d.mu.Unlock()
			writeErr(w, http.StatusTooManyRequests, "Too many requests")
			return
		}
	}
	status, step := d.status, d.step
	d.mu.Unlock()

	if r.Method != http.MethodGet || r.URL.Path != "/api/v1/query" {
		writeErr(w, http.StatusNotFound, "Not found")
		return
	}
	if r.Header.Get("DD-API-KEY") != d.APIKey || r.Header.Get("DD-APPLICATION-KEY") != d.AppKey {
		writeErr(w, http.StatusForbidden, "Forbidden")
		return
	}
	if status != 0 {
		writeErr(w, status, http.StatusText(status))
		return
	}
	q := r.URL.Query()
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	to, err2 := strconv.ParseInt(q.Get("to"), 10, 64)
	query := q.Get("query")
	switch {
	case err1 != nil || err2 != nil:
		writeErr(w, http.StatusBadRequest, "Invalid from or to: both are required, in seconds since the Unix epoch")
		return
	case to < from:
		writeErr(w, http.StatusBadRequest, "Invalid time range: to is before from")
		return
	case query == "":
		writeErr(w, http.StatusBadRequest, "Missing query")
		return
	case !queryRe.MatchString(query):
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("Error parsing query: \n unable to parse %s: Rule 'scope_expr' didn't match", query))
		return
	}
	d.mu.Lock()
	fn := d.metrics[query]
	d.mu.Unlock()
	ans := map[string]any{
		"status": "ok", "res_type": "time_series", "resp_version": 1, "query": query,
		"from_date": from * 1000, "to_date": to * 1000, "message": "", "group_by": []string{},
		"series": []any{}, "values": []any{}, "times": []any{},
	}
	if fn != nil {
		var points [][2]any
		start := time.Unix(from, 0).Truncate(step)
		if start.Before(time.Unix(from, 0)) {
			start = start.Add(step)
		}
		for t := start; !t.After(time.Unix(to, 0)); t = t.Add(step) {
			if v, ok := fn(t); ok {
				points = append(points, [2]any{float64(t.UnixMilli()), v})
			} else {
				points = append(points, [2]any{float64(t.UnixMilli()), nil})
			}
		}
		if len(points) > 0 {
			first, last := points[0][0].(float64), points[len(points)-1][0].(float64)
			ans["series"] = []any{map[string]any{
				"metric": query, "display_name": query, "expression": query, "scope": "*", "aggr": "avg",
				"pointlist": points, "start": int64(first), "end": int64(last) + int64(step/time.Millisecond) - 1,
				"interval": int(step / time.Second), "length": len(points), "unit": nil, "tag_set": []string{}, "query_index": 0,
			}}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}
