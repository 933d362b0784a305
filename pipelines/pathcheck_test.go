package pipelines

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

const pathCheckPipeline = "name: x\nstages:\n  - id: build\n    steps:\n      - {id: a, type: Noop}\n  - id: deploy\n    steps:\n      - {id: b, type: Noop}\n"

// pathCheckRun is a run started by a PR trigger whose paths the webhook could not settle.
func pathCheckRun(t *testing.T) (*Machine, *Run) {
	t.Helper()
	m := mustLoad(t, pathCheckPipeline)
	r, err := NewRun(m.P, "r1", nil, "webhook:github", testNow)
	if err != nil {
		t.Fatal(err)
	}
	r.Trigger = &TriggerInfo{Kind: "webhook", Provider: "github", Event: "pull_request", Action: "merged", Repo: "acme/web",
		SHA: "abc", PR: 7, Connector: "web", Paths: []string{"services/web/**"}}
	return m, r
}

func noStageStarted(t *testing.T, r *Run) {
	t.Helper()
	for _, sr := range r.Stages {
		if !sr.Started.IsZero() || sr.Status == StRunning || sr.Status == StSucceeded {
			t.Fatalf("stage %s started: %s", sr.ID, sr.Status)
		}
		for _, st := range sr.Steps {
			if st.Attempt != 0 || !st.Queued.IsZero() {
				t.Fatalf("step %s/%s was dispatched", sr.ID, st.ID)
			}
		}
	}
}

// A pending path check dispatches only the check job, under ids no pipeline can use; nothing
// else happens until its result.
func TestPathCheckDispatchesOnlyTheCheck(t *testing.T) {
	m, r := pathCheckRun(t)
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v", jobs)
	}
	j := jobs[0]
	if j.Type != steps.TypeTriggerPaths || j.ID() != "r1/_trigger/_paths/1/0" || j.Pool != DefaultPool ||
		len(j.Connectors) != 1 || j.Connectors[0] != "web" {
		t.Fatalf("check job %+v", j)
	}
	in, _ := json.Marshal(j.Inputs)
	if string(in) != `{"connector":"web","paths":["services/web/**"],"prNumber":7,"repo":"acme/web"}` {
		t.Fatalf("check inputs %s", in)
	}
	if r.Status != StRunning || !r.PathsPending() || r.Trigger.PathCheck.Status != StQueued {
		t.Fatalf("run %s pending=%v", r.Status, r.PathsPending())
	}
	noStageStarted(t, r)
	// Advancing again (a tick, another event) sends nothing new; a pipeline id can never be _trigger.
	if again := m.Advance(r, testNow.Add(time.Second)); len(again) != 0 {
		t.Fatalf("second advance dispatched %+v", again)
	}
	if idRE.MatchString(PathCheckStage) || idRE.MatchString(PathCheckStep) {
		t.Fatal("reserved ids are valid pipeline ids")
	}
	noStageStarted(t, r)
}

// A match lets the stages run; the same result delivered again (or a stale attempt) changes
// nothing.
func TestPathCheckMatchStartsStagesDuplicateAppliedOnce(t *testing.T) {
	m, r := pathCheckRun(t)
	check := m.Advance(r, testNow)[0]
	res := steps.Done(map[string]any{"matched": true, "files": []any{"services/web/a.go"}, "changed": 3})
	next := result(m, r, check, res, testNow)
	if len(next) != 1 || next[0].Stage != "build" || next[0].Step != "a" {
		t.Fatalf("after the match: %+v", next)
	}
	if r.PathsPending() || r.Trigger.PathCheck.Status != StSucceeded || r.Trigger.PathCheck.Outputs["changed"] != 3 {
		t.Fatalf("check state %+v", r.Trigger.PathCheck)
	}
	before, _ := json.Marshal(r)
	dup := steps.Done(map[string]any{"matched": false})
	if m.Apply(r, &envelope.Event{Kind: queue.EvResult, Run: r.ID, Stage: check.Stage, Step: check.Step, Attempt: 1, Result: &dup}, testNow.Add(time.Second)) {
		t.Fatal("duplicate check result applied")
	}
	if m.Apply(r, &envelope.Event{Kind: queue.EvDead, Run: r.ID, Stage: check.Stage, Step: check.Step, Attempt: 1, Reason: "lost"}, testNow.Add(time.Second)) {
		t.Fatal("dead letter of an applied check applied")
	}
	if again := m.Advance(r, testNow.Add(time.Second)); len(again) != 0 {
		t.Fatalf("duplicate dispatched %+v", again)
	}
	after, _ := json.Marshal(r)
	if string(before) != string(after) {
		t.Fatalf("duplicate changed the run:\n%s\n%s", before, after)
	}
	// The run finishes normally.
	next = result(m, r, next[0], steps.Done(nil), testNow)
	result(m, r, next[0], steps.Done(nil), testNow)
	if r.Status != StSucceeded {
		t.Fatalf("run %s %s", r.Status, r.Error)
	}
}

// No matching file: the run ends skipped with the reason, every stage and step skipped.
func TestPathCheckNoMatchSkipsRun(t *testing.T) {
	m, r := pathCheckRun(t)
	check := m.Advance(r, testNow)[0]
	stale := steps.Done(map[string]any{"matched": true})
	if m.Apply(r, &envelope.Event{Kind: queue.EvResult, Stage: check.Stage, Step: check.Step, Attempt: 2, Result: &stale}, testNow) {
		t.Fatal("result of another attempt applied")
	}
	if jobs := result(m, r, check, steps.Done(map[string]any{"matched": false, "files": []any{}, "changed": 2}), testNow); len(jobs) != 0 {
		t.Fatalf("dispatched %+v", jobs)
	}
	if r.Status != StSkipped || !r.Status.Terminal() || r.Error != "no changed file of PR #7 matches paths [services/web/**]" || !r.Ended.Equal(testNow) {
		t.Fatalf("run %s %q", r.Status, r.Error)
	}
	for _, sr := range r.Stages {
		if sr.Status != StSkipped || sr.Steps[0].Status != StSkipped {
			t.Fatalf("stage %s %s, step %s", sr.ID, sr.Status, sr.Steps[0].Status)
		}
	}
	noStageStarted(t, r)
	if jobs := m.Jobs(r); len(jobs) != 0 {
		t.Fatalf("a skipped run re-sends %+v", jobs)
	}
}

// A redelivered start (the controller crashed between its update and the publish) re-sends
// the check job with the same id, so JetStream dedup keeps one.
func TestPathCheckRedeliveredStartResendsCheck(t *testing.T) {
	m, r := pathCheckRun(t)
	first := m.Advance(r, testNow)[0]
	data, _ := json.Marshal(r)
	var reloaded Run // as the controller reads it back from KV
	if err := json.Unmarshal(data, &reloaded); err != nil {
		t.Fatal(err)
	}
	if m.Apply(&reloaded, &envelope.Event{Kind: queue.EvStart, Run: r.ID}, testNow.Add(time.Second)) {
		t.Fatal("start changed the run")
	}
	if jobs := m.Advance(&reloaded, testNow.Add(time.Second)); len(jobs) != 0 {
		t.Fatalf("advance re-dispatched %+v", jobs)
	}
	again := m.Jobs(&reloaded)
	if len(again) != 1 || again[0].ID() != first.ID() || again[0].Type != steps.TypeTriggerPaths {
		t.Fatalf("re-sent %+v, want the check job %s", again, first.ID())
	}
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(again[0])
	if string(a) != string(b) {
		t.Fatalf("re-sent job differs:\n%s\n%s", a, b)
	}
}

// A forge failure (after the worker's retries, or a lost worker) fails the run with the error.
func TestPathCheckFailureFailsRun(t *testing.T) {
	m, r := pathCheckRun(t)
	check := m.Advance(r, testNow)[0]
	result(m, r, check, steps.Result{Status: steps.Failed, Message: "list the files of PR #7: 404 Not Found"}, testNow)
	if r.Status != StFailed || !strings.Contains(r.Error, "trigger paths check: list the files of PR #7: 404 Not Found") {
		t.Fatalf("run %s %q", r.Status, r.Error)
	}
	noStageStarted(t, r)

	m, r = pathCheckRun(t)
	check = m.Advance(r, testNow)[0]
	m.Apply(r, &envelope.Event{Kind: queue.EvDead, Stage: check.Stage, Step: check.Step, Attempt: check.Attempt, Reason: "job delivered 5 times"}, testNow)
	if r.Status != StFailed || !strings.Contains(r.Error, "job delivered 5 times") {
		t.Fatalf("dead letter: run %s %q", r.Status, r.Error)
	}
}

// Runs without a pending check keep the exact JSON they had (no new fields).
func TestPathCheckRunJSONBackwardCompatible(t *testing.T) {
	m := mustLoad(t, pathCheckPipeline)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	r.Trigger = &TriggerInfo{Kind: "webhook", Repo: "acme/web", PR: 7}
	m.Advance(r, testNow)
	data, _ := json.Marshal(r)
	if strings.Contains(string(data), "paths") || strings.Contains(string(data), "pathCheck") {
		t.Fatalf("new fields in an old-style run: %s", data)
	}
	var old Run
	if err := json.Unmarshal([]byte(`{"id":"r0","pipeline":"x","spec":"h","status":"running","created":"2026-11-22T10:00:00Z","stages":[],"trigger":{"kind":"webhook","pr":3}}`), &old); err != nil || old.PathsPending() {
		t.Fatalf("old run: %v pending=%v", err, old.PathsPending())
	}
}

// Cancelling a run whose check is out ends the check too; its late result changes nothing.
func TestPathCheckCancelled(t *testing.T) {
	m, r := pathCheckRun(t)
	check := m.Advance(r, testNow)[0]
	m.Apply(r, &envelope.Event{Kind: queue.EvCancel, User: "bob"}, testNow)
	if r.Status != StCancelled || r.Trigger.PathCheck.Status != StCancelled {
		t.Fatalf("run %s, check %s", r.Status, r.Trigger.PathCheck.Status)
	}
	if jobs := result(m, r, check, steps.Done(map[string]any{"matched": true}), testNow); len(jobs) != 0 || r.Status != StCancelled {
		t.Fatalf("late result: %+v %s", jobs, r.Status)
	}
}
