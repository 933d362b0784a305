package pipelines

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// manualPipeline: stage prod's verify step fails; onFailure manual, then rollback steps and
// a next stage.
func manualPipeline(onTimeout string) string {
	ot := ""
	if onTimeout != "" {
		ot = ", onTimeout: " + onTimeout
	}
	return `name: x
stages:
  - id: prod
    onFailure: {manual: {timeout: 2h` + ot + `}}
    steps:
      - {id: deploy, type: Noop}
      - {id: verify, type: Noop}
      - {id: after, type: Noop}
    rollbackSteps:
      - {id: revert, type: Noop}
  - id: next
    steps:
      - {id: n, type: Noop}
`
}

// toIntervention runs the pipeline until prod.verify has failed and the stage is parked.
func toIntervention(t *testing.T, m *Machine) *Run {
	t.Helper()
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	j = result(m, r, j, steps.Done(nil), testNow)[0]
	if j.Step != "verify" {
		t.Fatalf("dispatched %s, want verify", j.Step)
	}
	if jobs := result(m, r, j, steps.Fail("error rate 12% > 5%"), testNow); len(jobs) != 0 {
		t.Fatalf("a parked stage dispatched %v", ids(jobs))
	}
	sr := r.Stages[0]
	if sr.Status != StRunning || sr.Intervention == nil || sr.Intervention.Step != "verify" || r.Shown() != StWaitingIntervention || !r.Parked() {
		t.Fatalf("not parked for an intervention: stage %s %+v, shown %s", sr.Status, sr.Intervention, r.Shown())
	}
	if due := m.NextDue(r); !due.Equal(testNow.Add(2 * time.Hour)) {
		t.Fatalf("next due %v, want the intervention's deadline", due)
	}
	return r
}

// finish answers every job with success until the run ends or nothing is dispatched.
func finish(m *Machine, r *Run, jobs []*envelope.Job, now time.Time) []string {
	var ran []string
	for len(jobs) > 0 {
		j := jobs[0]
		jobs = append(jobs[1:], result(m, r, j, steps.Done(nil), now)...)
		ran = append(ran, j.Stage+"."+j.Step)
	}
	return ran
}

func TestInterventionActions(t *testing.T) {
	later := testNow.Add(10 * time.Minute)
	for _, tc := range []struct {
		action    string
		ran       []string // steps that run after the decision
		run       Status
		stage     Status
		stepState Status // prod.verify
		outcome   string
	}{
		{IntRetry, []string{"prod.verify", "prod.after", "next.n"}, StSucceeded, StSucceeded, StSucceeded, "retried by alice"},
		{IntIgnore, []string{"prod.after", "next.n"}, StSucceeded, StSucceeded, StFailed, "ignored by alice"},
		{IntAbort, nil, StFailed, StFailed, StFailed, "aborted by alice"},
		{IntRollback, []string{"prod.revert"}, StFailed, StFailed, StFailed, "rolled back by alice"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			m := mustLoad(t, manualPipeline(""))
			r := toIntervention(t, m)
			if err := m.Intervene(r, "prod", tc.action, "alice", "checked the dashboards", later); err != nil {
				t.Fatal(err)
			}
			ran := finish(m, r, m.Advance(r, later), later)
			if strings.Join(ran, ",") != strings.Join(tc.ran, ",") {
				t.Errorf("ran %v, want %v", ran, tc.ran)
			}
			sr := r.Stages[0]
			if r.Status != tc.run || sr.Status != tc.stage || sr.Steps[1].Status != tc.stepState {
				t.Errorf("run %s stage %s verify %s, want %s %s %s (%q)", r.Status, sr.Status, sr.Steps[1].Status, tc.run, tc.stage, tc.stepState, r.Error)
			}
			if sr.Intervention != nil || len(sr.Interventions) != 1 {
				t.Fatalf("intervention not recorded: %+v %+v", sr.Intervention, sr.Interventions)
			}
			rec := sr.Interventions[0]
			if rec.Action != tc.action || rec.User != "alice" || rec.Comment != "checked the dashboards" || rec.Outcome != tc.outcome || !rec.Decided.Equal(later) || rec.TimedOut {
				t.Errorf("record %+v", rec)
			}
			if tc.action == IntIgnore && (!sr.Steps[1].Ignored || !strings.Contains(sr.Steps[1].Error, "ignored by alice")) {
				t.Errorf("ignored step not marked: %+v", sr.Steps[1])
			}
			if tc.run == StFailed && !strings.Contains(r.Error, tc.outcome) {
				t.Errorf("run error %q does not say %q", r.Error, tc.outcome)
			}
			// A second decision finds nothing to decide.
			if err := m.Intervene(r, "prod", IntRetry, "bob", "", later); !errors.Is(err, ErrNotIntervening) || !strings.Contains(err.Error(), tc.outcome) {
				t.Errorf("second decision: %v", err)
			}
		})
	}
}

func TestInterventionTimeout(t *testing.T) {
	for _, tc := range []struct {
		onTimeout string
		ran       []string
		run       Status
		outcome   string
	}{
		{"", []string{"prod.revert"}, StFailed, "timed out after 2h: rolled back"}, // default with rollback steps
		{ActRollbackStage, []string{"prod.revert"}, StFailed, "timed out after 2h: rolled back"},
		{ActFail, nil, StFailed, "timed out after 2h: aborted"},
		{ActIgnore, []string{"prod.after", "next.n"}, StSucceeded, "timed out after 2h: ignored"},
		{ActRollbackPipeline, []string{"prod.revert"}, StFailed, "timed out after 2h: pipeline rolled back"},
	} {
		t.Run("onTimeout="+tc.onTimeout, func(t *testing.T) {
			m := mustLoad(t, manualPipeline(tc.onTimeout))
			r := toIntervention(t, m)
			if m.Tick(r, testNow.Add(2*time.Hour-time.Second)) || r.Stages[0].Intervention == nil {
				t.Fatal("decided before the deadline")
			}
			due := testNow.Add(2 * time.Hour)
			if !m.Tick(r, due) {
				t.Fatal("the deadline did nothing")
			}
			ran := finish(m, r, m.Advance(r, due), due)
			if strings.Join(ran, ",") != strings.Join(tc.ran, ",") || r.Status != tc.run {
				t.Errorf("ran %v run %s, want %v %s (%q)", ran, r.Status, tc.ran, tc.run, r.Error)
			}
			rec := r.Stages[0].Interventions
			if len(rec) != 1 || !rec[0].TimedOut || rec[0].Outcome != tc.outcome || rec[0].User != "" {
				t.Fatalf("record %+v, want %q", rec, tc.outcome)
			}
			if tc.run == StFailed && !strings.Contains(r.Error, tc.outcome) {
				t.Errorf("run error %q does not say %q", r.Error, tc.outcome)
			}
		})
	}
}

// A parked stage survives a controller restart: its state goes through JSON (the run record)
// and the decoded run still waits, with the same deadline, which then still fires.
func TestInterventionSurvivesReload(t *testing.T) {
	m := mustLoad(t, manualPipeline(ActRollbackStage))
	r := toIntervention(t, m)
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	m2 := mustLoad(t, manualPipeline(ActRollbackStage)) // a new controller loads the pipeline again
	var back Run
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Shown() != StWaitingIntervention || !m2.NextDue(&back).Equal(testNow.Add(2*time.Hour)) {
		t.Fatalf("reloaded run: %s, due %v", back.Shown(), m2.NextDue(&back))
	}
	if jobs := m2.Advance(&back, testNow.Add(time.Minute)); len(jobs) != 0 {
		t.Fatalf("reloaded parked stage dispatched %v", ids(jobs))
	}
	due := testNow.Add(2 * time.Hour)
	m2.Tick(&back, due)
	if ran := finish(m2, &back, m2.Advance(&back, due), due); len(ran) != 1 || ran[0] != "prod.revert" {
		t.Fatalf("after reload the timeout ran %v", ran)
	}
}

func TestInterventionRefused(t *testing.T) {
	m := mustLoad(t, manualPipeline(""))
	r := toIntervention(t, m)
	for _, tc := range []struct {
		stage, action string
		want          error
		says          string
	}{
		{"prod", "approve", ErrBadIntervention, `unknown action "approve"`},
		{"prod", "", ErrBadIntervention, `unknown action ""`},
		{"staging", IntRetry, ErrBadIntervention, `no stage "staging"`},
		{"next", IntRetry, ErrNotIntervening, "stage next of run r1 is not waiting for an intervention (it is pending)"},
	} {
		err := m.Intervene(r, tc.stage, tc.action, "alice", "", testNow)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s/%s: %v, want %v saying %q", tc.stage, tc.action, err, tc.want, tc.says)
		}
	}
	if r.Stages[0].Intervention == nil {
		t.Fatal("a refused decision changed the run")
	}
	// A cancelled run waits for nobody.
	m.cancel(r, "bob", testNow)
	if err := m.Intervene(r, "prod", IntRetry, "alice", "", testNow); !errors.Is(err, ErrNotIntervening) || r.Shown() == StWaitingIntervention {
		t.Fatalf("decision on a cancelled run: %v (%s)", err, r.Shown())
	}
}

// A retried step that fails again parks the stage again; each decision is kept.
func TestInterventionRetryFailsAgain(t *testing.T) {
	m := mustLoad(t, manualPipeline(""))
	r := toIntervention(t, m)
	_ = m.Intervene(r, "prod", IntRetry, "alice", "", testNow)
	j := m.Advance(r, testNow)
	if len(j) != 1 || j[0].Step != "verify" || j[0].Attempt != 2 {
		t.Fatalf("retry dispatched %+v", j)
	}
	result(m, r, j[0], steps.Fail("still bad"), testNow)
	sr := r.Stages[0]
	if sr.Intervention == nil || sr.Intervention.Error != "still bad" || len(sr.Interventions) != 1 {
		t.Fatalf("not parked again: %+v %+v", sr.Intervention, sr.Interventions)
	}
	_ = m.Intervene(r, "prod", IntAbort, "bob", "", testNow)
	finish(m, r, m.Advance(r, testNow), testNow)
	if r.Status != StFailed || len(sr.Interventions) != 2 || sr.Interventions[1].Outcome != "aborted by bob" {
		t.Fatalf("run %s, records %+v", r.Status, sr.Interventions)
	}
}

func TestLoadManualStrategy(t *testing.T) {
	m := mustLoad(t, strings.Replace(manualPipeline(""), "{manual: {timeout: 2h}}", "{manual: {timeout: 90m, onTimeout: ignore, approvers: [alice, 'group:sre']}}", 1))
	ms := m.P.Stages[0].OnFailure.Manual
	if m.P.Stages[0].OnFailure.Action != ActManual || ms.Timeout != 90*time.Minute || ms.OnTimeout != ActIgnore ||
		strings.Join(ms.Approvers.Users, ",") != "alice" || strings.Join(ms.Approvers.Groups, ",") != "sre" {
		t.Fatalf("loaded %+v %+v", m.P.Stages[0].OnFailure, ms)
	}
	if m := mustLoad(t, strings.Replace(manualPipeline(""), "{manual: {timeout: 2h}}", "manual", 1)); m.P.Stages[0].OnFailure.Manual.Timeout != DefaultManualTimeout {
		t.Fatal("onFailure: manual has no default timeout")
	}
	for _, tc := range []struct{ with, says string }{
		{"{manual: {timeout: 2h, onTimeout: retry}}", `t.yaml:4:50: stages[0].onFailure.manual.onTimeout: unknown action "retry"`},
		{"{manual: {timeout: 0s}}", "stages[0].onFailure.manual.timeout: want a duration > 0"},
		{"{manual: {timeout: soon}}", "stages[0].onFailure.manual.timeout"},
		{"{manual: {approvers: []}}", "stages[0].onFailure.manual.approvers: empty"},
		{"{manual: {timeout: 2h, when: always}}", "stages[0].onFailure.manual.when"},
		{"{action: retry, manual: {timeout: 2h}}", `manual decides instead of action "retry"`},
		{"{manual: 2h}", "stages[0].onFailure.manual: want {timeout, onTimeout, approvers}"},
		{"manuel", `unknown action "manuel"`},
	} {
		_, err := Load("t.yaml", []byte(strings.Replace(manualPipeline(""), "{manual: {timeout: 2h}}", tc.with, 1)), steps.Default)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.with, err, tc.says)
		}
	}
}

// A Verify job goes to the workers holding its metrics connector (the connector subject of
// its first metric's connector); ${{ stage.startedAt }} resolves in its inputs.
func TestVerifyJobRoutedByMetricsConnector(t *testing.T) {
	m := mustLoad(t, `name: v
stages:
  - id: prod
    steps:
      - id: verify
        type: Verify
        with:
          startTime: ${{ stage.startedAt }}
          metrics:
            - {name: errors, provider: prom-eu, query: 'sum(rate(errors_total[1m]))', count: 2, interval: 1m, failureCondition: result > 1}
            - {name: latency, provider: dd, query: 'avg:latency{*}', count: 2, interval: 1m, failureCondition: result > 1}
`)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 {
		t.Fatalf("jobs %v", ids(jobs))
	}
	j := jobs[0]
	if strings.Join(j.Connectors, ",") != "metrics:prom-eu,metrics:dd" || !strings.Contains(j.Subject(), ".c.") {
		t.Fatalf("connectors %v, subject %s", j.Connectors, j.Subject())
	}
	if got := j.Inputs["startTime"]; got != testNow.UTC().Format(time.RFC3339) {
		t.Fatalf("startTime %v, want the stage's start", got)
	}
}

// intervention.waiting goes out when the stage parks, intervention.decided when it is
// decided, each once, and again (with its own message id) when a retried step fails again.
func TestInterventionNotifications(t *testing.T) {
	m := mustLoad(t, manualPipeline("")+"notifications:\n  - {on: [intervention.waiting, intervention.decided], channel: ops}\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	j = result(m, r, j, steps.Done(nil), testNow)[0]
	events := func(before *NotifySnapshot) []string {
		var out []string
		for _, nj := range m.NotifyJobs(before, r, "") {
			out = append(out, nj.Step+"="+nj.Inputs["status"].(string))
		}
		return out
	}
	before := m.NotifySnapshot(r)
	result(m, r, j, steps.Fail("bad"), testNow)
	if got := events(before); strings.Join(got, ",") != "intervention.waiting:prod.verify:ops=waiting" {
		t.Fatalf("on park: %v", got)
	}
	before = m.NotifySnapshot(r)
	_ = m.Intervene(r, "prod", IntRetry, "alice", "", testNow)
	jobs := m.Advance(r, testNow)
	if got := events(before); strings.Join(got, ",") != "intervention.decided:prod.verify:ops=retry" {
		t.Fatalf("on decision: %v", got)
	}
	before = m.NotifySnapshot(r)
	result(m, r, jobs[0], steps.Fail("bad again"), testNow)
	if got := events(before); strings.Join(got, ",") != "intervention.waiting:prod.verify.2:ops=waiting" {
		t.Fatalf("second park: %v", got)
	}
	if got := events(nil); len(got) != 3 { // a restarted controller republishes what the state shows (dedup drops them)
		t.Fatalf("from nothing: %v", got)
	}
}
