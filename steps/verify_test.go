package steps

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/steps/verify"
	"github.com/prflow/prflow/steps/verify/datadog"
	"github.com/prflow/prflow/steps/verify/prometheus"
	"github.com/prflow/prflow/steps/verify/verifytest"
)

// jobInputs passes inputs through JSON as a job does (numbers arrive as float64).
func jobInputs(t *testing.T, in map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

type verifyRun struct {
	res     Result
	err     error
	reasons []string // every park's reason
	wakes   int
}

// driveVerify runs the step as the controller does: each Waiting result parks it (here: a
// sleep for its Poll), then it runs again with its memo and the next wake number.
func driveVerify(t *testing.T, in map[string]any, conns MetricsConnectors) verifyRun {
	t.Helper()
	sc := &Context{RunID: "r1", Pipeline: "p", Stage: "prod", StepID: "verify", Type: "Verify", Attempt: 1, Delivery: 1,
		Inputs: jobInputs(t, in), Services: NewServices(map[string]any{ServiceMetrics: conns}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var run verifyRun
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		run.res, run.err = runVerify(ctx, sc)
		cancel()
		if run.err != nil || run.res.Status != Waiting {
			return run
		}
		w := run.res.Wait
		if w == nil || w.Poll <= 0 || len(run.res.Memo) == 0 {
			t.Fatalf("a park without a poll or memo would never wake: %+v", run.res)
		}
		if w.Poll > time.Minute {
			t.Fatalf("park of %s in a test of seconds", w.Poll)
		}
		run.reasons = append(run.reasons, w.Reason)
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after 3m: %s", w.Reason)
		}
		time.Sleep(w.Poll)
		sc.Memo, sc.Wake, sc.WakeReason = run.res.Memo, sc.Wake+1, "poll"
		run.wakes++
	}
}

// oneMetric is Verify's inputs with one metric: m changed by over, where a nil value removes
// the key.
func oneMetric(m, over map[string]any) map[string]any {
	for k, v := range over {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return map[string]any{"metrics": []any{m}}
}

func metricOut(t *testing.T, res Result, name string) map[string]any {
	t.Helper()
	ms, _ := res.Outputs["metrics"].(map[string]any)
	m, ok := ms[name].(map[string]any)
	if !ok {
		t.Fatalf("no outputs for metric %s: %+v", name, res.Outputs)
	}
	return m
}

func TestVerifyInputs(t *testing.T) {
	base := func(over map[string]any) map[string]any {
		return oneMetric(map[string]any{"name": "errors", "provider": "prom", "query": "up", "interval": "30s", "count": 4, "failureCondition": "result > 0.05"}, over)
	}
	cases := []struct {
		name string
		in   map[string]any
		err  string
	}{
		{"valid", base(nil), ""},
		{"duration instead of count", base(map[string]any{"count": nil, "duration": "10m"}), ""},
		{"baseline ratio", base(map[string]any{"baseline": "last", "successCondition": "ratio < 1.5 || result < 0.001"}), ""},
		{"harness failOnNoAnalysis bool", base(map[string]any{"failOnNoAnalysis": true}), ""},
		{"expression left for run time", base(map[string]any{"query": "rate(x{app=\"${{ env.name }}\"}[1m])", "count": "${{ inputs.n }}"}), ""},
		{"no metrics", map[string]any{}, "metrics: required"},
		{"no query", base(map[string]any{"query": nil}), "metrics[0].query: required"},
		{"no provider", base(map[string]any{"provider": ""}), "metrics[0].provider: required"},
		{"bad name", base(map[string]any{"name": "error rate"}), `metrics[0].name: "error rate": use letters`},
		{"no conditions", base(map[string]any{"failureCondition": nil}), "metrics[0]: set successCondition or failureCondition"},
		{"condition syntax", base(map[string]any{"failureCondition": "result >"}), "metrics[0].failureCondition:"},
		{"condition not bool", base(map[string]any{"successCondition": "result * 2"}), "metrics[0].successCondition:"},
		{"condition unknown name", base(map[string]any{"failureCondition": "value > 1"}), "metrics[0].failureCondition: unknown name value"},
		{"baseline without baseline: last", base(map[string]any{"failureCondition": "ratio > 2"}), "baseline and ratio need baseline: last"},
		{"count and duration", base(map[string]any{"duration": "5m"}), "metrics[0]: set count or duration, not both"},
		{"neither count nor duration", base(map[string]any{"count": nil}), "metrics[0]: set count (how many measurements) or duration"},
		{"zero count", base(map[string]any{"count": 0}), "metrics[0].count: want at least 1"},
		{"too many", base(map[string]any{"count": 5000}), "at most 500"},
		{"duration below interval", base(map[string]any{"count": nil, "duration": "10s"}), "metrics[0].duration: 10s is shorter than interval 30s"},
		{"tiny interval", base(map[string]any{"interval": "10ms"}), "metrics[0].interval: 10ms is below the minimum of 1s"},
		{"bad interval", base(map[string]any{"interval": "often"}), "metrics[0].interval:"},
		{"negative limit", base(map[string]any{"failureLimit": -1}), "metrics[0].failureLimit: must not be negative"},
		{"limit not a number", base(map[string]any{"inconclusiveLimit": "two"}), "metrics[0].inconclusiveLimit: want a whole number"},
		{"streak above count", base(map[string]any{"consecutiveSuccessLimit": 9}), "consecutiveSuccessLimit: 9 is more than the 4 measurements"},
		{"bad baseline", base(map[string]any{"baseline": "previous"}), `metrics[0].baseline: "previous" is not last`},
		{"bad no-data", base(map[string]any{"failOnNoAnalysis": "maybe"}), `metrics[0].failOnNoAnalysis: "maybe" is not fail, pass or inconclusive`},
		{"bad onInconclusive", map[string]any{"onInconclusive": "retry", "metrics": base(nil)["metrics"]}, `onInconclusive: "retry"`},
		{"bad startTime", map[string]any{"startTime": "yesterday", "metrics": base(nil)["metrics"]}, `startTime: "yesterday" is not an RFC 3339 time`},
		{"duplicate name", map[string]any{"metrics": append(base(nil)["metrics"].([]any), base(nil)["metrics"].([]any)[0])}, `metrics[1].name: "errors" is used twice`},
		{"entry not a mapping", map[string]any{"metrics": []any{"errors"}}, "metrics[0]: want a mapping"},
	}
	def, ok := Default.Lookup("Verify")
	if !ok {
		t.Fatal("Verify is not registered")
	}
	for _, c := range cases {
		err := def.Validate(c.in)
		if c.err == "" && err != nil {
			t.Errorf("%s: unexpected error %v", c.name, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
		}
	}
}

const promErrRatio = `sum(rate(http_requests_total{code="500"}[4s])) / sum(rate(http_requests_total[4s]))`

// waitRatio waits until Prometheus sees the app's error ratio on the wanted side of 0.1.
func waitRatio(t *testing.T, c *prometheus.Client, high bool) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		res, err := c.Query(context.Background(), verify.Query{Expr: promErrRatio, At: time.Now()})
		if err != nil {
			continue
		}
		if v, err := res.Value(); err == nil && (v > 0.1) == high {
			return
		}
	}
	t.Fatalf("Prometheus never saw the error ratio high=%v", high)
}

// A real Prometheus scrapes an app whose error rate the test flips: a good release passes,
// a bad one fails, and Prometheus killed mid-verification ends inconclusive after retries —
// never a pass.
func TestVerifyRealPrometheus(t *testing.T) {
	t.Parallel()
	app := verifytest.NewApp(0)
	defer app.Close()
	prom := verifytest.StartPrometheus(t, strings.TrimPrefix(app.URL, "http://"))
	pc := &prometheus.Client{BaseURL: prom.URL, HTTP: &http.Client{Timeout: 5 * time.Second}}
	conns := verify.Static{"prom": pc}
	waitRatio(t, pc, false)
	in := func(count int) map[string]any {
		return map[string]any{"metrics": []any{map[string]any{
			"name": "errors", "provider": "prom", "query": promErrRatio, "interval": "1s", "count": count,
			"successCondition": "result < 0.05", "failOnNoAnalysis": "fail",
		}}}
	}

	t.Run("good release", func(t *testing.T) {
		run := driveVerify(t, in(3), conns)
		if run.err != nil || run.res.Status != Succeeded {
			t.Fatalf("good release: %+v %v", run.res, run.err)
		}
		if run.res.Outputs["verdict"] != verdictSuccessful || run.wakes < 3 {
			t.Fatalf("verdict %v after %d wakes", run.res.Outputs["verdict"], run.wakes)
		}
		m := metricOut(t, run.res, "errors")
		list := m["measurements"].([]any)
		if len(list) != 3 || m["successful"] != 3 {
			t.Fatalf("measurements %+v", m)
		}
		for _, e := range list {
			if v, ok := e.(map[string]any)["value"].(float64); !ok || v >= 0.05 {
				t.Fatalf("measurement %+v", e)
			}
		}
		checkSVG(t, run.res.Outputs["charts"].(map[string]any)["errors"].(string), 3)
	})

	t.Run("bad release", func(t *testing.T) {
		app.SetErrorRatio(0.4)
		waitRatio(t, pc, true)
		run := driveVerify(t, in(5), conns)
		if run.err != nil || run.res.Status != Failed || !strings.Contains(run.res.Message, "verification failed: errors: 1 failed measurement(s), failureLimit 0") {
			t.Fatalf("bad release: %+v %v", run.res, run.err)
		}
		m := metricOut(t, run.res, "errors")
		if m["verdict"] != verdictFailed || len(m["measurements"].([]any)) != 1 {
			t.Fatalf("want a fast fail on the first measurement: %+v", m)
		}
		if run.res.NoRollback {
			t.Fatal("a failed verification must let the stage roll back")
		}
		app.SetErrorRatio(0)
		waitRatio(t, pc, false)
	})

	t.Run("prometheus killed mid-verification", func(t *testing.T) {
		done := make(chan verifyRun, 1)
		go func() { done <- driveVerify(t, in(6), conns) }()
		time.Sleep(1500 * time.Millisecond) // the first measurement is at +1s
		prom.Kill()
		run := <-done
		if run.err != nil || run.res.Status != Failed || !strings.HasPrefix(run.res.Message, "inconclusive: ") {
			t.Fatalf("killed Prometheus: %+v %v; want failed inconclusive", run.res, run.err)
		}
		if run.res.Outputs["verdict"] != verdictInconclusive {
			t.Fatalf("verdict %v", run.res.Outputs["verdict"])
		}
		retried := 0
		for _, r := range run.reasons {
			if strings.Contains(r, "query failed") && strings.Contains(r, "connection refused") {
				retried++
			}
		}
		if retried != verifyErrorLimit-1 {
			t.Fatalf("want %d parked retries naming the failure, got %d: %q", verifyErrorLimit-1, retried, run.reasons)
		}
		m := metricOut(t, run.res, "errors")
		list := m["measurements"].([]any)
		last := list[len(list)-1].(map[string]any)
		if last["verdict"] != verdictInconclusive || !strings.Contains(last["message"].(string), "query failed 4 times") {
			t.Fatalf("last measurement %+v", last)
		}
	})
}

func ddConns(dd *verifytest.Datadog) verify.Static {
	return verify.Static{"dd": &datadog.Client{BaseURL: dd.URL, HTTP: &http.Client{Timeout: 5 * time.Second}, APIKey: "k1-api", AppKey: "k1-app"}}
}

// baseline: last compares each measurement with the same query over the equal window before
// the promotion; thresholds as ratios.
func TestVerifyBaseline(t *testing.T) {
	t.Parallel()
	dd := verifytest.NewDatadog("k1-api", "k1-app")
	defer dd.Close()
	dd.Step(time.Second)
	start := time.Now().Truncate(time.Second)
	after := 0.011
	dd.Metric("sum:web.errors{env:prod}.as_rate()", func(ts time.Time) (float64, bool) {
		if !ts.After(start) {
			return 0.01, true
		}
		return after, true
	})
	in := map[string]any{"startTime": start.Format(time.RFC3339), "metrics": []any{map[string]any{
		"name": "errors", "provider": "dd", "query": "sum:web.errors{env:prod}.as_rate()", "interval": "1s", "count": 2,
		"baseline": "last", "failureCondition": "ratio > 2", "successCondition": "result <= baseline * 1.5",
	}}}
	run := driveVerify(t, in, ddConns(dd))
	if run.res.Status != Succeeded {
		t.Fatalf("1.1× the baseline: %+v %v", run.res, run.err)
	}
	first := metricOut(t, run.res, "errors")["measurements"].([]any)[0].(map[string]any)
	if first["baseline"] != 0.01 || first["value"] != 0.011 {
		t.Fatalf("measurement %+v: want value 0.011 against baseline 0.01", first)
	}
	after = 0.05
	run = driveVerify(t, in, ddConns(dd))
	if run.res.Status != Failed || !strings.Contains(run.res.Message, "verification failed") {
		t.Fatalf("5× the baseline: %+v %v", run.res, run.err)
	}
	if msg := metricOut(t, run.res, "errors")["measurements"].([]any)[0].(map[string]any)["message"]; msg != "failureCondition ratio > 2 is true" {
		t.Fatalf("message %v", msg)
	}
}

// No data is decided by failOnNoAnalysis, and inconclusive never passes unless asked to.
func TestVerifyNoData(t *testing.T) {
	t.Parallel()
	dd := verifytest.NewDatadog("k1-api", "k1-app")
	defer dd.Close()
	in := func(noData any, onIncon string) map[string]any {
		m := map[string]any{"name": "errors", "provider": "dd", "query": "sum:web.missing{env:prod}", "interval": "1s", "count": 1, "failureCondition": "result > 1"}
		if noData != nil {
			m["failOnNoAnalysis"] = noData
		}
		out := map[string]any{"metrics": []any{m}}
		if onIncon != "" {
			out["onInconclusive"] = onIncon
		}
		return out
	}
	for _, c := range []struct {
		name     string
		noData   any
		onIncon  string
		status   Status
		verdict  string
		msg      string
		warnings int
	}{
		{"default is inconclusive", nil, "", Failed, verdictInconclusive, "inconclusive: errors: 1 inconclusive measurement(s)", 0},
		{"fail", "fail", "", Failed, verdictFailed, "verification failed", 0},
		{"harness true", true, "", Failed, verdictFailed, "verification failed", 0},
		{"pass", "pass", "", Succeeded, verdictSuccessful, "", 0},
		{"inconclusive let through", "inconclusive", "succeed", Succeeded, verdictInconclusive, "", 1},
	} {
		run := driveVerify(t, in(c.noData, c.onIncon), ddConns(dd))
		if run.err != nil || run.res.Status != c.status || run.res.Outputs["verdict"] != c.verdict || !strings.Contains(run.res.Message, c.msg) || len(run.res.Warnings) != c.warnings {
			t.Errorf("%s: %+v %v", c.name, run.res, run.err)
		}
	}
}

// A 429 parks the step until Datadog's limit resets (X-RateLimit-Reset), then it measures on.
func TestVerifyRateLimited(t *testing.T) {
	t.Parallel()
	dd := verifytest.NewDatadog("k1-api", "k1-app")
	defer dd.Close()
	dd.Metric("avg:web.errors{env:prod}", func(time.Time) (float64, bool) { return 0.001, true })
	dd.RateLimit(1, 4*time.Second)
	in := map[string]any{"metrics": []any{map[string]any{"name": "errors", "provider": "dd", "query": "avg:web.errors{env:prod}",
		"interval": "1s", "count": 2, "successCondition": "result < 0.01"}}}
	run := driveVerify(t, in, ddConns(dd))
	if run.err != nil || run.res.Status != Succeeded {
		t.Fatalf("%+v %v", run.res, run.err)
	}
	limited := false
	for _, r := range run.reasons {
		limited = limited || strings.Contains(r, "HTTP 429") && strings.Contains(r, "try 2 of 4")
	}
	if !limited || dd.Calls() != 3 {
		t.Fatalf("want one 429 waited out (3 calls), got %d calls, reasons %q", dd.Calls(), run.reasons)
	}
}

// A query the backend refuses fails at once (retrying a wrong query cannot help), naming the
// metric and carrying the backend's error; a missing connector or service is named too.
func TestVerifyRefusals(t *testing.T) {
	t.Parallel()
	dd := verifytest.NewDatadog("k1-api", "k1-app")
	defer dd.Close()
	in := map[string]any{"metrics": []any{map[string]any{"name": "errors", "provider": "dd", "query": "avg:web.errors",
		"interval": "1s", "count": 3, "failureCondition": "result > 1"}}}
	run := driveVerify(t, in, ddConns(dd))
	if run.err != nil || run.res.Status != Failed || !strings.Contains(run.res.Message, "metric errors: datadog GET /api/v1/query: HTTP 400: Error parsing query") || dd.Calls() != 1 {
		t.Fatalf("bad query: %+v %v (%d calls)", run.res, run.err, dd.Calls())
	}
	in["metrics"].([]any)[0].(map[string]any)["provider"] = "nope"
	run = driveVerify(t, in, ddConns(dd))
	if !IsTerminal(run.err) || !strings.Contains(run.err.Error(), `metric errors: provider: no metrics connector "nope" (have: [dd])`) {
		t.Fatalf("unknown connector: %v", run.err)
	}
	run = driveVerify(t, in, nil)
	if !IsTerminal(run.err) || !strings.Contains(run.err.Error(), "--metrics FILE") {
		t.Fatalf("no service: %v", run.err)
	}
}

// A redelivered or early-woken run with the same memo does not measure twice.
func TestVerifyRepeatDoesNotRemeasure(t *testing.T) {
	dd := verifytest.NewDatadog("k1-api", "k1-app")
	defer dd.Close()
	dd.Metric("avg:web.errors{env:prod}", func(time.Time) (float64, bool) { return 0.5, true })
	in := map[string]any{"startTime": time.Now().Add(-1500 * time.Millisecond).UTC().Format(time.RFC3339Nano), "metrics": []any{map[string]any{
		"name": "errors", "provider": "dd", "query": "avg:web.errors{env:prod}", "interval": "1s", "count": 3, "failureCondition": "result > 1"}}}
	sc := &Context{StepID: "verify", Inputs: jobInputs(t, in), Services: NewServices(map[string]any{ServiceMetrics: ddConns(dd)}), Log: slog.New(slog.DiscardHandler)}
	res, err := runVerify(context.Background(), sc)
	if err != nil || res.Status != Waiting {
		t.Fatalf("%+v %v", res, err)
	}
	calls := dd.Calls()
	if calls != 1 {
		t.Fatalf("first run: %d calls, want the one due measurement", calls)
	}
	sc.Memo, sc.Delivery = res.Memo, 2
	res2, err := runVerify(context.Background(), sc)
	if err != nil || res2.Status != Waiting || dd.Calls() != calls {
		t.Fatalf("repeat: %+v %v, %d calls", res2, err, dd.Calls())
	}
	var m verifyMemo
	if err := json.Unmarshal(res2.Memo, &m); err != nil || len(m.Metrics["errors"].Measurements) != 1 {
		t.Fatalf("memo %s %v", res2.Memo, err)
	}
}

// checkSVG parses the chart as XML to its end and checks its parts.
func checkSVG(t *testing.T, svg string, points int) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	circles, root := 0, ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Space + " " + se.Name.Local
			}
			if se.Name.Local == "circle" {
				circles++
			}
		}
	}
	if root != "http://www.w3.org/2000/svg svg" || circles != points {
		t.Fatalf("chart root %q with %d points, want svg with %d", root, circles, points)
	}
	for _, want := range []string{"promoted ", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Fatalf("chart lacks %q", want)
		}
	}
}

// Labels come from pipelines and backends: they are escaped, and thresholds of numeric
// conditions are drawn.
func TestVerifyChartEscapes(t *testing.T) {
	cfg, err := verifyConfigFrom(map[string]any{"metrics": []any{map[string]any{"name": "errors", "provider": "p", "query": "q", "interval": "1m", "count": 5,
		"baseline": "last", "failureCondition": "result > 0.05 || ratio > 2", "successCondition": "0.001 <= result"}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	spec := cfg.metrics[0]
	if th := slices.Sorted(slices.Values(spec.thresholds)); len(th) != 2 || th[0] != 0.001 || th[1] != 0.05 {
		t.Fatalf("thresholds %v", spec.thresholds)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v1, v2, b := 0.01, 0.09, 0.02
	st := &metricState{Verdict: verdictFailed, Measurements: []Measurement{
		{At: start.Add(time.Minute), Value: &v1, Baseline: &b, Verdict: verdictSuccessful},
		{At: start.Add(2 * time.Minute), Value: &v2, Baseline: &b, Verdict: verdictFailed, Message: `<script>alert("x")</script> & ]]>`},
		{At: start.Add(3 * time.Minute), Verdict: verdictInconclusive, Message: "query failed 4 times: connection refused"},
	}}
	svg := verifyChart(spec, st, start)
	checkSVG(t, svg, 3)
	if strings.Contains(svg, "<script") || !strings.Contains(svg, "&lt;script&gt;") {
		t.Fatal("label not escaped")
	}
	for _, want := range []string{"threshold 0.05", "threshold 0.001", "errors: failed (3/5 measurements)", "promoted 03:04:05", `stroke-dasharray="3 3"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

// A step timeout shorter than its measurements is named at once, not discovered half-way.
func TestVerifyTimeoutShorterThanMeasurements(t *testing.T) {
	in := map[string]any{"metrics": []any{map[string]any{"name": "errors", "provider": "dd", "query": "avg:x{a:b}", "interval": "1m", "count": 10, "failureCondition": "result > 1"}}}
	sc := &Context{StepID: "verify", Inputs: jobInputs(t, in), Deadline: time.Now().Add(5 * time.Minute),
		Services: NewServices(map[string]any{ServiceMetrics: verify.Static{}}), Log: slog.New(slog.DiscardHandler)}
	_, err := runVerify(context.Background(), sc)
	if !IsTerminal(err) || !strings.Contains(err.Error(), "set the step's timeout to at least 11m0s") {
		t.Fatalf("err = %v", err)
	}
}

// TestChartAxisNiceSteps: the y axis of a Verify chart is labelled in 1, 2 or 5 × 10^k steps
// (0, 0.05, 0.1), not at the padded range's odd ends (0.05022, 0.1004).
func TestChartAxisNiceSteps(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{
		{0.0251, 0.05}, {0.02, 0.02}, {0.3, 0.5}, {7, 10}, {120, 200}, {0, 1}, {-1, 1},
	} {
		if got := niceStep(c.raw); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("niceStep(%v) = %v, want %v", c.raw, got, c.want)
		}
	}
	start := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	v1, v2 := 0.011, 0.093
	spec := metricSpec{Name: "error-rate", Interval: time.Minute, Count: 2, thresholds: []float64{0.05}}
	st := &metricState{Measurements: []Measurement{{At: start.Add(time.Minute), Value: &v1, Verdict: "successful"}, {At: start.Add(2 * time.Minute), Value: &v2, Verdict: "failed"}}}
	svg := verifyChart(spec, st, start)
	for _, label := range []string{">0<", ">0.05<", ">0.1<"} {
		if !strings.Contains(svg, label) {
			t.Errorf("chart has no axis label %s:\n%s", label, svg)
		}
	}
	if strings.Contains(svg, "0.1004") || strings.Contains(svg, "0.05022") {
		t.Errorf("chart labels the padded range's ends:\n%s", svg)
	}
}
