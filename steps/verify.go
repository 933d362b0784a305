package steps

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/prflow/prflow/steps/template"
	"github.com/prflow/prflow/steps/verify"
)

// TypeVerify is the Verify step's type.
const TypeVerify = "Verify"

// ServiceMetrics names the metrics connectors in Services (a *verify.Set on workers started
// with --metrics).
const ServiceMetrics = "metrics"

// MetricsRoutePrefix marks a worker's route (worker Info.Connectors) as a metrics connector it
// holds, so that a run naming one no live worker holds is refused at start.
const MetricsRoutePrefix = "metrics:"

// MetricsRoute is the route a worker holding metrics connector name advertises.
func MetricsRoute(name string) string { return MetricsRoutePrefix + name }

// VerifyRoutes are the routes a Verify job with inputs in goes to: its metrics connectors
// (MetricsRoute), first one first, so that only a worker holding the first metric's connector
// takes the job (the job subject names one route; run start checks that each is held).
func VerifyRoutes(in map[string]any) []string {
	var out []string
	list, _ := in["metrics"].([]any)
	for _, m := range list {
		mm, _ := m.(map[string]any)
		if p, _ := mm["provider"].(string); p != "" && !slices.Contains(out, MetricsRoute(p)) {
			out = append(out, MetricsRoute(p))
		}
	}
	return out
}

// MetricsConnectors resolves a metrics connector name to its backend; *verify.Set and
// verify.Static implement it.
type MetricsConnectors interface {
	Provider(ctx context.Context, name string) (verify.Provider, error)
}

// Verify measures metrics after a stage's sync and decides whether the release is good. Each
// metric is queried every interval, count times (or for duration), each measurement judged by
// successCondition / failureCondition over `result` (and `baseline`, `ratio` with baseline:
// last). Between measurements the step is parked and holds no worker; the measurements so far
// travel in its memo. More failed measurements than failureLimit fail the step (the stage's
// onFailure then decides, e.g. rollback); more inconclusive ones than inconclusiveLimit end it
// inconclusive, which fails the step unless onInconclusive: succeed.
func init() {
	Register(Definition{
		Type:     TypeVerify,
		Priors:   NoPriors,
		Parks:    true,
		New:      func() Step { return StepFunc(runVerify) },
		Validate: func(in map[string]any) error { _, err := verifyConfigFrom(in, true); return err },
		Config:   verifyInputs{},
	})
}

// verifyInputs is Verify's `with:`; verifyConfigFrom checks it and resolves it to verifyConfig.
type verifyInputs struct {
	Metrics        []metricInput `input:"metrics,required" doc:"the metrics to measure"`
	OnInconclusive string        `input:"onInconclusive,enum=fail|succeed,default=fail" doc:"what an inconclusive verdict does to the step"`
	StartTime      string        `input:"startTime" doc:"the promotion time measurements start from (RFC 3339; default: when the step first runs)"`
}

// metricInput is one entry of metrics. count and duration are pointers: "not given" decides
// which one sets the number of measurements.
type metricInput struct {
	Name                    string         `input:"name,required" doc:"names the metric in outputs and charts"`
	Provider                string         `input:"provider,required" doc:"the metrics connector (Prometheus or Datadog) in the worker's --metrics file"`
	Query                   string         `input:"query,required" doc:"the query; it must return one series (aggregate it)"`
	Interval                time.Duration  `input:"interval,default=1m" doc:"time between measurements; each covers the interval before it"`
	Count                   *int           `input:"count" doc:"how many measurements (or duration)"`
	Duration                *time.Duration `input:"duration" doc:"measure for this long (count = duration / interval)"`
	SuccessCondition        string         `input:"successCondition" doc:"expression over result (and baseline, ratio): true = a good measurement"`
	FailureCondition        string         `input:"failureCondition" doc:"expression over result (and baseline, ratio): true = a bad measurement"`
	FailureLimit            int            `input:"failureLimit,default=0" doc:"failed measurements allowed before the metric fails"`
	InconclusiveLimit       int            `input:"inconclusiveLimit,default=0" doc:"inconclusive measurements allowed before the metric is inconclusive"`
	ConsecutiveSuccessLimit int            `input:"consecutiveSuccessLimit,default=0" doc:"succeed once this many measurements in a row were good (0: run all)"`
	Baseline                string         `input:"baseline" doc:"last (or LAST): also query the same window length before the promotion, as baseline; none: no baseline"`
	FailOnNoAnalysis        noDataInput    `input:"failOnNoAnalysis,default=inconclusive" doc:"when a query returns no data: fail, pass or inconclusive (true = fail, false = pass)"`
}

// noDataInput is failOnNoAnalysis: fail, pass or inconclusive, or Harness's true (fail) and
// false (pass).
type noDataInput string

func (noDataInput) InputShape() Input { return Input{Type: InputString} }

func (n *noDataInput) DecodeInput(v any, field string, static bool) error {
	switch x := v.(type) {
	case bool:
		*n = noDataInput(map[bool]string{true: noDataFail, false: noDataPass}[x])
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "fail", "true":
			*n = noDataFail
		case "pass", "false":
			*n = noDataPass
		case "inconclusive", "":
			*n = noDataInconclusive
		default:
			if !(static && template.Contains(x)) {
				return fmt.Errorf("%s: %q is not fail, pass or inconclusive", field, x)
			}
			*n = noDataInconclusive
		}
	default:
		return fmt.Errorf("%s: want fail, pass or inconclusive, got %T", field, v)
	}
	return nil
}

// Verdicts of measurements, metrics and the step.
const (
	verdictSuccessful   = "successful"
	verdictFailed       = "failed"
	verdictInconclusive = "inconclusive"
)

// failOnNoAnalysis values.
const (
	noDataFail         = "fail"
	noDataPass         = "pass"
	noDataInconclusive = "inconclusive"
)

// Limits of the Verify step.
const (
	verifyMaxMetrics = 20
	verifyMaxCount   = 500 // measurements per metric: the memo carries them all
	verifyMinIntvl   = time.Second
	// verifyErrorLimit: query attempts of one measurement before it is recorded inconclusive.
	verifyErrorLimit = 4
	verifyRetryBase  = 2 * time.Second
	verifyRetryMax   = 30 * time.Second
	// verifyPerWake bounds the queries one run makes (catching up after a long park): the
	// rest follow at once in the next run instead of holding the worker.
	verifyPerWake = 20
	verifyCatchUp = 10 * time.Millisecond
)

type metricSpec struct {
	Name, Provider, Query         string
	Interval                      time.Duration
	Count                         int
	Success, Failure              string
	success, failure              *vm.Program
	FailureLimit, InconclusiveLim int
	ConsecutiveSuccess            int
	Baseline                      bool
	NoData                        string
	thresholds                    []float64
}

type verifyConfig struct {
	metrics        []metricSpec
	succeedOnIncon bool
	start          time.Time
}

func conditionEnv(baseline bool) map[string]any {
	if baseline {
		return map[string]any{"result": 0.0, "baseline": 0.0, "ratio": 0.0}
	}
	return map[string]any{"result": 0.0}
}

func compileCondition(src string, baseline bool) (*vm.Program, error) {
	p, err := expr.Compile(src, expr.Env(conditionEnv(baseline)), expr.AsBool())
	if err != nil {
		msg := err.Error()
		if !baseline && (strings.Contains(msg, "baseline") || strings.Contains(msg, "ratio")) {
			msg += " (baseline and ratio need baseline: last)"
		}
		return nil, errors.New(msg)
	}
	return p, nil
}

// verifyConfigFrom reads the inputs; static: at pipeline load, where values may still be
// unresolved expressions. Errors name the field (metrics[1].interval).
func verifyConfigFrom(in map[string]any, static bool) (*verifyConfig, error) {
	c := &verifyConfig{}
	unresolved := func(v any) bool { s, ok := v.(string); return static && ok && template.Contains(s) }
	cfg, err := Decode[verifyInputs](in, static)
	if err != nil {
		return nil, err
	}
	c.succeedOnIncon = cfg.OnInconclusive == "succeed"
	if s := cfg.StartTime; s != "" && !unresolved(s) {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil, fmt.Errorf("startTime: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
		}
		c.start = t
	}
	if unresolved(in["metrics"]) {
		return c, nil // a list once evaluated: checked then
	}
	if len(cfg.Metrics) == 0 {
		return nil, fmt.Errorf("metrics: required, a list of {name, provider, query, …}")
	}
	if len(cfg.Metrics) > verifyMaxMetrics {
		return nil, fmt.Errorf("metrics: %d metrics, at most %d", len(cfg.Metrics), verifyMaxMetrics)
	}
	raw, _ := in["metrics"].([]any)
	seen := map[string]bool{}
	for i, mi := range cfg.Metrics {
		f := fmt.Sprintf("metrics[%d]", i)
		// m is the entry as written, for what is still an expression at load.
		m, _ := raw[i].(map[string]any)
		s := metricSpec{Name: strings.TrimSpace(mi.Name), Provider: strings.TrimSpace(mi.Provider), Query: strings.TrimSpace(mi.Query),
			Success: strings.TrimSpace(mi.SuccessCondition), Failure: strings.TrimSpace(mi.FailureCondition),
			Interval: mi.Interval, FailureLimit: mi.FailureLimit, InconclusiveLim: mi.InconclusiveLimit,
			ConsecutiveSuccess: mi.ConsecutiveSuccessLimit, NoData: string(mi.FailOnNoAnalysis)}
		for _, r := range [][2]string{{"name", s.Name}, {"provider", s.Provider}, {"query", s.Query}} {
			if r[1] == "" {
				return nil, fmt.Errorf("%s.%s: required", f, r[0])
			}
		}
		if s.Name != "" && !unresolved(s.Name) {
			if !metricNameRe(s.Name) {
				return nil, fmt.Errorf("%s.name: %q: use letters, digits, '_' and '-' (it names outputs: charts.<name>)", f, s.Name)
			}
			if seen[s.Name] {
				return nil, fmt.Errorf("%s.name: %q is used twice", f, s.Name)
			}
			seen[s.Name] = true
		}
		if s.Interval < verifyMinIntvl && !unresolved(m["interval"]) {
			return nil, fmt.Errorf("%s.interval: %s is below the minimum of %s", f, s.Interval, verifyMinIntvl)
		}
		hasCount := mi.Count != nil || unresolved(m["count"])
		hasDur := mi.Duration != nil || unresolved(m["duration"])
		switch {
		case hasCount && hasDur:
			return nil, fmt.Errorf("%s: set count or duration, not both", f)
		case mi.Count != nil:
			s.Count = *mi.Count
		case mi.Duration != nil:
			if d := *mi.Duration; !unresolved(m["interval"]) {
				if d < s.Interval {
					return nil, fmt.Errorf("%s.duration: %s is shorter than interval %s", f, d, s.Interval)
				}
				s.Count = int(d / s.Interval)
			}
		case !hasCount && !hasDur:
			return nil, fmt.Errorf("%s: set count (how many measurements) or duration", f)
		}
		if s.Count > verifyMaxCount {
			return nil, fmt.Errorf("%s: %d measurements, at most %d (use a longer interval)", f, s.Count, verifyMaxCount)
		}
		if s.Count < 1 && mi.Count != nil {
			return nil, fmt.Errorf("%s.count: want at least 1, got %d", f, s.Count)
		}
		for _, l := range []struct {
			k string
			n int
		}{{"failureLimit", s.FailureLimit}, {"inconclusiveLimit", s.InconclusiveLim}, {"consecutiveSuccessLimit", s.ConsecutiveSuccess}} {
			if l.n < 0 {
				return nil, fmt.Errorf("%s.%s: must not be negative", f, l.k)
			}
		}
		if s.ConsecutiveSuccess > s.Count && s.Count > 0 {
			return nil, fmt.Errorf("%s.consecutiveSuccessLimit: %d is more than the %d measurements", f, s.ConsecutiveSuccess, s.Count)
		}
		switch b := mi.Baseline; strings.ToLower(strings.TrimSpace(b)) {
		case "", "none":
		case "last":
			s.Baseline = true
		default:
			if !unresolved(b) {
				return nil, fmt.Errorf("%s.baseline: %q is not last (or none)", f, b)
			}
		}
		if s.Success == "" && s.Failure == "" {
			return nil, fmt.Errorf("%s: set successCondition or failureCondition (e.g. result < 0.01)", f)
		}
		for _, cnd := range []struct {
			field, src string
			dst        **vm.Program
		}{{"successCondition", s.Success, &s.success}, {"failureCondition", s.Failure, &s.failure}} {
			if cnd.src == "" || unresolved(cnd.src) {
				continue
			}
			p, err := compileCondition(cnd.src, s.Baseline)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %v", f, cnd.field, err)
			}
			*cnd.dst = p
			s.thresholds = append(s.thresholds, conditionThresholds(p)...)
		}
		c.metrics = append(c.metrics, s)
	}
	return c, nil
}

func metricNameRe(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Measurement is one judged query.
type Measurement struct {
	At       time.Time `json:"time"`
	Value    *float64  `json:"value,omitempty"`
	Baseline *float64  `json:"baseline,omitempty"`
	Verdict  string    `json:"verdict"`
	Message  string    `json:"message,omitempty"` // why inconclusive, or what the condition said
}

type metricState struct {
	Measurements []Measurement `json:"measurements,omitempty"`
	Errors       int           `json:"errors,omitempty"`  // failed attempts of the next measurement
	RetryAt      time.Time     `json:"retryAt,omitzero"`  // when to try it again
	LastErr      string        `json:"lastErr,omitempty"` // what the last attempt said
	Verdict      string        `json:"verdict,omitempty"` // set once the metric is decided
	Reason       string        `json:"reason,omitempty"`
}

type verifyMemo struct {
	Start   time.Time               `json:"start"`
	Metrics map[string]*metricState `json:"metrics"`
}

func (s *metricState) count(v string) int {
	n := 0
	for _, m := range s.Measurements {
		if m.Verdict == v {
			n++
		}
	}
	return n
}

func (s *metricState) consecutiveSuccess() int {
	n := 0
	for i := len(s.Measurements) - 1; i >= 0 && s.Measurements[i].Verdict == verdictSuccessful; i-- {
		n++
	}
	return n
}

// decide sets the metric's verdict once its limits say so or its measurements are done.
func (s *metricState) decide(spec metricSpec) {
	if s.Verdict != "" {
		return
	}
	switch f, in := s.count(verdictFailed), s.count(verdictInconclusive); {
	case f > spec.FailureLimit:
		s.Verdict, s.Reason = verdictFailed, fmt.Sprintf("%d failed measurement(s), failureLimit %d", f, spec.FailureLimit)
	case in > spec.InconclusiveLim:
		s.Verdict, s.Reason = verdictInconclusive, fmt.Sprintf("%d inconclusive measurement(s), inconclusiveLimit %d", in, spec.InconclusiveLim)
	case spec.ConsecutiveSuccess > 0 && s.consecutiveSuccess() >= spec.ConsecutiveSuccess:
		s.Verdict, s.Reason = verdictSuccessful, fmt.Sprintf("%d good measurements in a row", spec.ConsecutiveSuccess)
	case len(s.Measurements) >= spec.Count && spec.ConsecutiveSuccess > 0:
		s.Verdict, s.Reason = verdictInconclusive, fmt.Sprintf("consecutiveSuccessLimit %d not reached in %d measurements", spec.ConsecutiveSuccess, spec.Count)
	case len(s.Measurements) >= spec.Count:
		s.Verdict, s.Reason = verdictSuccessful, fmt.Sprintf("%d measurement(s): %d good, %d failed, %d inconclusive",
			len(s.Measurements), s.count(verdictSuccessful), f, in)
	}
}

// due is when the metric's next measurement is taken (zero: decided).
func (s *metricState) due(spec metricSpec, start time.Time) time.Time {
	if s.Verdict != "" {
		return time.Time{}
	}
	at := start.Add(time.Duration(len(s.Measurements)+1) * spec.Interval)
	if s.RetryAt.After(at) {
		return s.RetryAt
	}
	return at
}

func metricsFor(sc *Context) (MetricsConnectors, error) {
	m := sc.Services.Metrics
	if m == nil {
		return nil, Terminalf("this worker has no metrics connectors (service %q); start the workers of this step's pool with --metrics FILE", ServiceMetrics)
	}
	return m, nil
}

func runVerify(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := verifyConfigFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	conns, err := metricsFor(sc)
	if err != nil {
		return Result{}, err
	}
	var memo verifyMemo
	if ok, err := sc.DecodeMemo(&memo); err != nil || !ok {
		memo = verifyMemo{Start: time.Now().UTC(), Metrics: map[string]*metricState{}}
		if !cfg.start.IsZero() {
			memo.Start = cfg.start.UTC()
		}
	}
	if !sc.Deadline.IsZero() && sc.Wake == 0 {
		// A timeout shorter than the measurements would end the step half-way as "timed
		// out"; say so now, with what the timeout must be.
		var last time.Time
		for _, spec := range cfg.metrics {
			if end := memo.Start.Add(time.Duration(spec.Count) * spec.Interval); end.After(last) {
				last = end
			}
		}
		if sc.Deadline.Before(last) {
			return Result{}, Terminalf("the step's timeout ends at %s, before its last measurement at %s: set the step's timeout to at least %s",
				sc.Deadline.UTC().Format(time.TimeOnly), last.UTC().Format(time.TimeOnly), last.Sub(memo.Start).Round(time.Second)+time.Minute)
		}
	}
	providers := map[string]verify.Provider{}
	for _, spec := range cfg.metrics {
		if memo.Metrics[spec.Name] == nil {
			memo.Metrics[spec.Name] = &metricState{}
		}
		p, err := conns.Provider(ctx, spec.Provider)
		if err != nil {
			return Result{}, Terminalf("metric %s: provider: %w", spec.Name, err)
		}
		providers[spec.Name] = p
	}
	queries := 0
	for queries < verifyPerWake {
		// The metric whose measurement is due first goes first.
		var next *metricSpec
		var nextAt time.Time
		for i := range cfg.metrics {
			at := memo.Metrics[cfg.metrics[i].Name].due(cfg.metrics[i], memo.Start)
			if !at.IsZero() && (next == nil || at.Before(nextAt)) {
				next, nextAt = &cfg.metrics[i], at
			}
		}
		if next == nil || time.Now().Before(nextAt) {
			break
		}
		queries++
		st := memo.Metrics[next.Name]
		if err := measure(ctx, sc, *next, providers[next.Name], st, memo.Start); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			st.Verdict, st.Reason = verdictFailed, err.Error()
			return Result{Status: Failed, Message: fmt.Sprintf("metric %s: %v", next.Name, err), Outputs: verifyOutputs(cfg, &memo, verdictFailed)}, nil
		}
		st.decide(*next)
		if st.Verdict == verdictFailed {
			break // fail fast: the stage's rollback should not wait for the other metrics
		}
	}
	verdict := overallVerdict(cfg, &memo)
	switch verdict {
	case verdictSuccessful:
		return Done(verifyOutputs(cfg, &memo, verdict)), nil
	case verdictFailed:
		return Result{Status: Failed, Message: "verification failed: " + reasons(cfg, &memo, verdictFailed), Outputs: verifyOutputs(cfg, &memo, verdict)}, nil
	case verdictInconclusive:
		out := verifyOutputs(cfg, &memo, verdict)
		if cfg.succeedOnIncon {
			r := Done(out)
			r.Warnings = []string{fmt.Sprintf("Verify %s was inconclusive (%s); onInconclusive: succeed let the stage go on", sc.StepID, reasons(cfg, &memo, verdictInconclusive))}
			return r, nil
		}
		return Result{Status: Failed, Message: "inconclusive: " + reasons(cfg, &memo, verdictInconclusive), Outputs: out}, nil
	}
	// Still measuring: park until the next measurement is due.
	var nextAt time.Time
	var name string
	for _, spec := range cfg.metrics {
		if at := memo.Metrics[spec.Name].due(spec, memo.Start); !at.IsZero() && (nextAt.IsZero() || at.Before(nextAt)) {
			nextAt, name = at, spec.Name
		}
	}
	poll := max(time.Until(nextAt), verifyCatchUp)
	st := memo.Metrics[name]
	reason := fmt.Sprintf("verifying: measurement %d of %s at %s", len(st.Measurements)+1, name, nextAt.UTC().Format(time.TimeOnly))
	if st.Errors > 0 {
		reason = fmt.Sprintf("verifying: %s query failed (%s); try %d of %d at %s", name, st.LastErr, st.Errors+1, verifyErrorLimit, nextAt.UTC().Format(time.TimeOnly))
	}
	return Park(Wait{Poll: poll, Reason: reason}, memo), nil
}

// overallVerdict is "" while any metric is still measuring and none failed.
func overallVerdict(cfg *verifyConfig, memo *verifyMemo) string {
	incon, open := false, false
	for _, spec := range cfg.metrics {
		switch memo.Metrics[spec.Name].Verdict {
		case verdictFailed:
			return verdictFailed
		case verdictInconclusive:
			incon = true
		case "":
			open = true
		}
	}
	switch {
	case open:
		return ""
	case incon:
		return verdictInconclusive
	}
	return verdictSuccessful
}

func reasons(cfg *verifyConfig, memo *verifyMemo, verdict string) string {
	var out []string
	for _, spec := range cfg.metrics {
		if st := memo.Metrics[spec.Name]; st.Verdict == verdict {
			out = append(out, spec.Name+": "+st.Reason)
		}
	}
	return strings.Join(out, "; ")
}

// measure takes the metric's next measurement. A transient query error is counted and the
// measurement retried later (parked); after verifyErrorLimit attempts it is recorded as
// inconclusive, never as good. A query the backend refuses returns the error: retrying a
// wrong query cannot help.
func measure(ctx context.Context, sc *Context, spec metricSpec, p verify.Provider, st *metricState, start time.Time) error {
	k := len(st.Measurements) + 1
	at := start.Add(time.Duration(k) * spec.Interval)
	m := Measurement{At: at}
	value, err := p.Query(ctx, verify.Query{Expr: spec.Query, At: at})
	var v float64
	if err == nil {
		v, err = value.Value()
	}
	var base float64
	if err == nil && spec.Baseline {
		// The same query over the window of equal length before the promotion.
		window := time.Duration(k) * spec.Interval
		var b verify.Result
		if b, err = p.Query(ctx, verify.Query{Expr: spec.Query, Start: start.Add(-window), At: start, Step: spec.Interval}); err == nil {
			if base, err = b.Mean(); err != nil && errors.Is(err, verify.ErrNoData) {
				err = fmt.Errorf("baseline: %w", err)
			}
		}
	}
	switch {
	case err == nil:
		m.Value = &v
		if spec.Baseline {
			m.Baseline = &base
		}
		m.Verdict, m.Message = judge(spec, v, base)
	case errors.Is(err, verify.ErrNoData):
		m.Message = err.Error()
		switch spec.NoData {
		case noDataFail:
			m.Verdict = verdictFailed
		case noDataPass:
			m.Verdict = verdictSuccessful
		default:
			m.Verdict = verdictInconclusive
		}
	case errors.Is(err, verify.ErrManySeries) || verify.IsTerminal(err):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		st.Errors++
		st.LastErr = err.Error()
		sc.Log.Warn("verify: query failed", "metric", spec.Name, "attempt", st.Errors, "err", err)
		if st.Errors < verifyErrorLimit {
			delay := min(verifyRetryBase<<(st.Errors-1), verifyRetryMax)
			if ra := verify.RetryAfter(err); ra > delay {
				delay = ra
			}
			st.RetryAt = time.Now().Add(delay)
			return nil
		}
		m.Verdict, m.Message = verdictInconclusive, fmt.Sprintf("query failed %d times: %v", st.Errors, err)
	}
	st.Errors, st.RetryAt, st.LastErr = 0, time.Time{}, ""
	st.Measurements = append(st.Measurements, m)
	return nil
}

// judge applies the conditions: failureCondition true fails; successCondition decides when
// set; with only failureCondition, false is good.
func judge(spec metricSpec, v, base float64) (string, string) {
	env := map[string]any{"result": v}
	if spec.Baseline {
		ratio := 1.0
		switch {
		case base != 0:
			ratio = v / base
		case v != 0:
			ratio = math.Inf(1)
		}
		env["baseline"], env["ratio"] = base, ratio
	}
	if spec.failure != nil {
		out, err := expr.Run(spec.failure, env)
		if err != nil {
			return verdictInconclusive, "failureCondition: " + err.Error()
		}
		if out == true {
			return verdictFailed, "failureCondition " + spec.Failure + " is true"
		}
	}
	if spec.success != nil {
		out, err := expr.Run(spec.success, env)
		if err != nil {
			return verdictInconclusive, "successCondition: " + err.Error()
		}
		if out != true {
			return verdictFailed, "successCondition " + spec.Success + " is false"
		}
	}
	return verdictSuccessful, ""
}

func verifyOutputs(cfg *verifyConfig, memo *verifyMemo, verdict string) map[string]any {
	metrics := map[string]any{}
	charts := map[string]any{}
	for _, spec := range cfg.metrics {
		st := memo.Metrics[spec.Name]
		list := make([]any, 0, len(st.Measurements))
		for _, m := range st.Measurements {
			e := map[string]any{"time": m.At.UTC().Format(time.RFC3339), "verdict": m.Verdict}
			if m.Value != nil {
				e["value"] = *m.Value
			}
			if m.Baseline != nil {
				e["baseline"] = *m.Baseline
			}
			if m.Message != "" {
				e["message"] = m.Message
			}
			list = append(list, e)
		}
		metrics[spec.Name] = map[string]any{
			"verdict": orDefault(st.Verdict, "undecided"), "reason": st.Reason, "measurements": list,
			"successful": st.count(verdictSuccessful), "failed": st.count(verdictFailed), "inconclusive": st.count(verdictInconclusive),
		}
		charts[spec.Name] = verifyChart(spec, st, memo.Start)
	}
	return map[string]any{"verdict": verdict, "startedAt": memo.Start.UTC().Format(time.RFC3339), "metrics": metrics, "charts": charts}
}
