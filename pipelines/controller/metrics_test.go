package controller

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prflow/prflow/pipelines"
)

// metricValue is the value of the series name{labels} in the controller's registry (a
// counter, gauge or a histogram's sample count); ok is false when there is no such series.
func metricValue(t *testing.T, m *Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			for k, v := range labels {
				if !hasLabel(s, k, v) {
					continue series
				}
			}
			switch {
			case s.Counter != nil:
				return s.Counter.GetValue(), true
			case s.Gauge != nil:
				return s.Gauge.GetValue(), true
			case s.Histogram != nil:
				return float64(s.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabel(s *dto.Metric, k, v string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == k {
			return l.GetValue() == v
		}
	}
	return false
}

// TestRunMetrics: a run parked on an approval shows as a running run, a pending approval and
// a step parked for "approval"; once approved, it is counted as finished with its run and
// stage durations, the gauges drop to 0, and the API's requests are counted by route.
func TestRunMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(tokensAuth(t, "tokens:\n  - {user: alice, token: sha256:"+sha256hex("alice-token-1234")+"}\n"))
	m := e.ctl.metrics
	r := e.startRun("name: gated\nstages:\n  - id: first\n    steps: [{id: a, type: Noop}]\n  - id: prod\n    steps:\n"+
		"      - {id: ok, type: Approval, timeout: 1m, with: {approvers: {users: [alice]}}}\n", nil)
	want := func(name string, labels map[string]string, v float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, ok := metricValue(t, m, name, labels)
			if ok && got == v {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want("prflow_approvals_pending", map[string]string{"pipeline": "gated"}, 1)
	want("prflow_parked_steps_by_reason", map[string]string{"reason": "approval"}, 1)
	want("prflow_parked_steps_by_reason", map[string]string{"reason": "app_status"}, 0)
	want("prflow_runs", map[string]string{"pipeline": "gated", "status": "running"}, 1)
	want("prflow_stage_duration_seconds", map[string]string{"pipeline": "gated", "stage": "first", "status": "succeeded"}, 1)
	if _, ok := metricValue(t, m, "prflow_runs_finished_total", map[string]string{"pipeline": "gated"}); ok {
		t.Fatal("a parked run counted as finished")
	}

	call := func(method, path, token, body string) int {
		t.Helper()
		code, _ := callAPI(t, method, srv.URL+path, token, body)
		return code
	}
	if code := call("GET", "/api/v1/runs/"+r.ID, "wrong-token-123", ""); code != 401 {
		t.Fatalf("bad token: %d", code)
	}
	if code := call("GET", "/api/v1/runs/"+r.ID, "alice-token-1234", ""); code != 200 {
		t.Fatalf("get: %d", code)
	}
	if code := call("POST", "/api/v1/runs/"+r.ID+"/signals", "alice-token-1234", `{"stage":"prod","step":"ok","approve":true}`); code != 202 {
		t.Fatalf("approve: %d", code)
	}
	if end := e.wait(r.ID, 20*time.Second); end.Status != "succeeded" {
		t.Fatalf("run %s: %s", end.Status, end.Error)
	}
	want("prflow_runs_finished_total", map[string]string{"pipeline": "gated", "status": "succeeded"}, 1)
	want("prflow_run_duration_seconds", map[string]string{"pipeline": "gated", "status": "succeeded"}, 1)
	want("prflow_stage_duration_seconds", map[string]string{"pipeline": "gated", "stage": "prod", "status": "succeeded"}, 1)
	if v, ok := metricValue(t, m, "prflow_approvals_pending", map[string]string{"pipeline": "gated"}); ok && v != 0 {
		t.Errorf("approvals pending after the run ended: %v", v) // no series once no run of it is live
	}
	want("prflow_parked_steps_by_reason", map[string]string{"reason": "approval"}, 0)
	want("prflow_http_requests_total", map[string]string{"route": "unauthenticated", "code": "401"}, 1)
	want("prflow_http_requests_total", map[string]string{"route": "GET /api/v1/runs/{id}", "method": "GET", "code": "200"}, 1)
	want("prflow_http_requests_total", map[string]string{"route": "POST /api/v1/runs/{id}/signals", "code": "202"}, 1)
	want("prflow_http_request_duration_seconds", map[string]string{"route": "POST /api/v1/runs/{id}/signals"}, 1)
}

// TestParkedStepsByReason: the parked-steps gauge sums every live run's parked steps by reason
// (an approval, a PR, app status, another event, a timer: the first that applies), pending
// approvals are per pipeline, and a run's newer state replaces its counts; an ended run drops.
func TestParkedStepsByReason(t *testing.T) {
	m := NewMetrics(nil)
	running := func(id, pipeline string) *pipelines.Run {
		return &pipelines.Run{ID: id, Pipeline: pipeline, Status: pipelines.StRunning}
	}
	approval := pipelines.Parked{Topics: []string{"approval"}}
	merge := pipelines.Parked{Topics: []string{"pr:github:acme/deploy#3", "commit:github:acme/deploy@c0ffee"}, Keys: []string{"eu.web"}}
	sync := pipelines.Parked{Keys: []string{"eu.web"}}
	event := pipelines.Parked{Topics: []string{"commit:github:acme/deploy@c0ffee"}}
	soak := pipelines.Parked{}
	m.track(running("r1", "gated"), []pipelines.Parked{approval, sync})
	m.track(running("r2", "gated"), []pipelines.Parked{approval, merge, event, soak, soak})
	m.track(running("r3", "deploy"), []pipelines.Parked{sync})
	m.track(running("r4", "deploy"), nil)
	check := func(reasons map[string]float64, pending map[string]float64) {
		t.Helper()
		for reason, want := range reasons {
			if got, ok := metricValue(t, m, "prflow_parked_steps_by_reason", map[string]string{"reason": reason}); !ok || got != want {
				t.Errorf("parked for %s = %v (present %v), want %v", reason, got, ok, want)
			}
		}
		for p, want := range pending {
			if got, ok := metricValue(t, m, "prflow_approvals_pending", map[string]string{"pipeline": p}); !ok || got != want {
				t.Errorf("approvals pending of %s = %v (present %v), want %v", p, got, ok, want)
			}
		}
	}
	check(map[string]float64{"approval": 2, "pr": 1, "app_status": 2, "event": 1, "timer": 2}, map[string]float64{"gated": 2, "deploy": 0})
	// r2 moved on (approved, its merge done) and r1 ended: their counts go.
	m.track(running("r2", "gated"), []pipelines.Parked{soak})
	m.track(&pipelines.Run{ID: "r1", Pipeline: "gated", Status: pipelines.StSucceeded}, nil)
	check(map[string]float64{"approval": 0, "pr": 0, "app_status": 1, "event": 0, "timer": 1}, map[string]float64{"gated": 0, "deploy": 0})
}
