// Package prometheus queries a Prometheus server's HTTP API for the Verify step: instant
// queries (/api/v1/query) and range queries (/api/v1/query_range), with bearer or basic auth.
// A query Prometheus refuses (4xx, its bad_data and execution errors) is terminal and carries
// Prometheus's own error text; 5xx, timeouts and refused connections are transient.
package prometheus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/steps/verify"
)

func init() {
	verify.Register("prometheus", func(c verify.Config) (verify.Provider, error) {
		hc, err := c.HTTPClient()
		if err != nil {
			return nil, err
		}
		return &Client{BaseURL: c.BaseURL, HTTP: hc, Token: c.Token.Value(), Username: c.Username, Password: c.Password.Value()}, nil
	})
}

// maxBody bounds what is read of an answer: a query that returns a huge matrix is refused
// instead of filling the worker's memory.
const maxBody = 16 << 20

// Client is one Prometheus server.
type Client struct {
	BaseURL  string
	HTTP     *http.Client
	Token    string // bearer
	Username string // basic, with Password
	Password string
}

// Query runs q: instant at q.At, or a range Start..At every Step.
func (c *Client) Query(ctx context.Context, q verify.Query) (verify.Result, error) {
	v := url.Values{"query": {q.Expr}}
	at := q.At
	if at.IsZero() {
		at = time.Now()
	}
	path := "/api/v1/query"
	if q.Start.IsZero() {
		v.Set("time", formatTime(at))
	} else {
		path = "/api/v1/query_range"
		step := q.Step
		if step <= 0 {
			step = max(time.Second, at.Sub(q.Start)/60)
		}
		v.Set("start", formatTime(q.Start))
		v.Set("end", formatTime(at))
		v.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	}
	call := "GET " + path
	fail := func(status int, terminal bool, format string, a ...any) error {
		return &verify.Error{Provider: "prometheus", Call: call, Status: status, Terminal: terminal, Msg: fmt.Sprintf(format, a...)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path+"?"+v.Encode(), nil)
	if err != nil {
		return verify.Result{}, fail(0, true, "%v", err)
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case c.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.Token)
	case c.Username != "":
		req.SetBasicAuth(c.Username, c.Password)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return verify.Result{}, ctx.Err()
		}
		return verify.Result{}, fail(0, false, "%v", unwrapURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return verify.Result{}, fail(resp.StatusCode, false, "read answer: %v", err)
	}
	if len(body) > maxBody {
		return verify.Result{}, fail(resp.StatusCode, true, "answer larger than %d MiB; narrow the query", maxBody>>20)
	}
	var ans apiResponse
	jsonErr := json.Unmarshal(body, &ans)
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return verify.Result{}, fail(resp.StatusCode, true, "not allowed: check the metrics connector's credentials")
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return verify.Result{}, fail(resp.StatusCode, false, "%s", orText(ans.Error, body))
	case resp.StatusCode >= 400:
		// 400 bad_data, 422 execution: the query itself is wrong.
		return verify.Result{}, fail(resp.StatusCode, true, "%s", orText(ans.Error, body))
	case jsonErr != nil:
		return verify.Result{}, fail(resp.StatusCode, false, "answer is not Prometheus JSON: %v", jsonErr)
	case ans.Status != "success":
		return verify.Result{}, fail(resp.StatusCode, true, "status %q: %s", ans.Status, ans.Error)
	}
	res, err := ans.Data.result()
	if err != nil {
		return verify.Result{}, fail(resp.StatusCode, true, "%v", err)
	}
	return res, nil
}

func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error repeats the URL; the query string is noise (never secret: auth is in
		// headers), so keep only the cause.
		return ue.Err
	}
	return err
}

func orText(msg string, body []byte) string {
	if msg != "" {
		return msg
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

type apiResponse struct {
	Status    string  `json:"status"`
	ErrorType string  `json:"errorType"`
	Error     string  `json:"error"`
	Data      apiData `json:"data"`
}

type apiData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type sample [2]json.RawMessage // [unix seconds, "value"]

func (s sample) point() (verify.Point, error) {
	var ts float64
	var vs string
	if err := json.Unmarshal(s[0], &ts); err != nil {
		return verify.Point{}, fmt.Errorf("sample time: %v", err)
	}
	if err := json.Unmarshal(s[1], &vs); err != nil {
		return verify.Point{}, fmt.Errorf("sample value: %v", err)
	}
	v, err := strconv.ParseFloat(vs, 64) // Prometheus writes NaN, +Inf, -Inf as such
	if err != nil {
		return verify.Point{}, fmt.Errorf("sample value %q: %v", vs, err)
	}
	sec, frac := math.Modf(ts)
	return verify.Point{T: time.Unix(int64(sec), int64(frac*1e9)), V: v}, nil
}

func (d apiData) result() (verify.Result, error) {
	var out verify.Result
	switch d.ResultType {
	case "scalar":
		var s sample
		if err := json.Unmarshal(d.Result, &s); err != nil {
			return out, fmt.Errorf("scalar result: %v", err)
		}
		p, err := s.point()
		if err != nil {
			return out, err
		}
		out.Series = []verify.Series{{Points: []verify.Point{p}}}
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  sample            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vec); err != nil {
			return out, fmt.Errorf("vector result: %v", err)
		}
		for _, e := range vec {
			p, err := e.Value.point()
			if err != nil {
				return out, err
			}
			out.Series = append(out.Series, verify.Series{Labels: e.Metric, Points: []verify.Point{p}})
		}
	case "matrix":
		var mat []struct {
			Metric map[string]string `json:"metric"`
			Values []sample          `json:"values"`
		}
		if err := json.Unmarshal(d.Result, &mat); err != nil {
			return out, fmt.Errorf("matrix result: %v", err)
		}
		for _, e := range mat {
			s := verify.Series{Labels: e.Metric}
			for _, v := range e.Values {
				p, err := v.point()
				if err != nil {
					return out, err
				}
				s.Points = append(s.Points, p)
			}
			out.Series = append(out.Series, s)
		}
	case "string":
		return out, errors.New("the query returns a string; it must return a number")
	default:
		return out, fmt.Errorf("unknown result type %q", d.ResultType)
	}
	return out, nil
}
