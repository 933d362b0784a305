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

var testNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func mustLoad(t *testing.T, src string) *Machine {
	t.Helper()
	p, err := Load("t.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	return &Machine{P: p}
}

// result feeds the machine a worker result for the job.
func result(m *Machine, r *Run, j *envelope.Job, res steps.Result, now time.Time) []*envelope.Job {
	m.Apply(r, &envelope.Event{Kind: queue.EvResult, Run: r.ID, Stage: j.Stage, Step: j.Step, Rollback: j.Rollback,
		Attempt: j.Attempt, Wake: j.Wake, Result: &res}, now)
	return m.Advance(r, now)
}

func TestMachineDuplicateResultAppliedOnce(t *testing.T) {
	m := mustLoad(t, "name: x\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 || jobs[0].Step != "a" || jobs[0].ID() != "r1/s/a/1/0" {
		t.Fatalf("first dispatch: %+v", jobs)
	}
	next := result(m, r, jobs[0], steps.Done(map[string]any{"x": 1}), testNow)
	if len(next) != 1 || next[0].Step != "b" {
		t.Fatalf("second dispatch: %+v", next)
	}
	// The same result delivered again changes nothing and dispatches nothing.
	before := r.Stages[0].Steps[1].Queued
	again := result(m, r, jobs[0], steps.Done(map[string]any{"x": 2}), testNow.Add(time.Second))
	if len(again) != 0 || r.Stages[0].Steps[0].Outputs["x"] != 1 || !r.Stages[0].Steps[1].Queued.Equal(before) {
		t.Fatalf("duplicate result was applied: %+v %v", again, r.Stages[0].Steps[0].Outputs)
	}
}

func TestMachineWaitWakeDeadline(t *testing.T) {
	m := mustLoad(t, "name: x\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Noop, timeout: 10m}\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	if !j.Deadline.Equal(testNow.Add(10 * time.Minute)) {
		t.Fatalf("deadline %v", j.Deadline)
	}
	park := steps.Park(steps.Wait{Keys: []string{"a.b"}, Poll: time.Minute, Reason: "sync"}, map[string]int{"n": 1})
	if jobs := result(m, r, j, park, testNow); len(jobs) != 0 || r.Stages[0].Steps[0].Status != StWaiting {
		t.Fatalf("not parked: %s", r.Stages[0].Steps[0].Status)
	}
	if p := m.Parked(r); len(p) != 1 || p[0].Keys[0] != "a.b" {
		t.Fatalf("parked index: %+v", p)
	}
	if due := m.NextDue(r); !due.Equal(testNow.Add(time.Minute)) {
		t.Fatalf("next due %v, want the poll fallback", due)
	}
	// A stale wake (wrong wake number) is ignored; the right one requeues with the memo.
	if m.Apply(r, &envelope.Event{Kind: queue.EvWake, Stage: "s", Step: "w", Wake: 7}, testNow) {
		t.Fatal("stale wake applied")
	}
	m.Apply(r, &envelope.Event{Kind: queue.EvWake, Stage: "s", Step: "w", Wake: 0, Reason: "key a.b changed"}, testNow)
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 || jobs[0].Wake != 1 || jobs[0].WakeReason != "key a.b changed" || string(jobs[0].Memo) != `{"n":1}` {
		t.Fatalf("wake job: %+v", jobs)
	}
	// Parks again; then the deadline passes: it is woken one last time, and parking again fails it.
	result(m, r, jobs[0], park, testNow.Add(time.Minute))
	late := testNow.Add(11 * time.Minute)
	if !m.Tick(r, late) {
		t.Fatal("deadline tick did nothing")
	}
	last := m.Advance(r, late)
	if len(last) != 1 || last[0].WakeReason != "deadline" {
		t.Fatalf("deadline wake: %+v", last)
	}
	result(m, r, last[0], park, late)
	if r.Status != StFailed || !strings.Contains(r.Error, "timed out: sync") {
		t.Fatalf("run: %s %q", r.Status, r.Error)
	}
}

func TestMachineFailureStrategies(t *testing.T) {
	src := `
name: x
stages:
  - id: a
    steps:
      - {id: ok, type: Noop}
    rollbackSteps:
      - {id: undoA, type: Noop}
  - id: b
    steps:
      - {id: soft, type: Noop, onFailure: ignore}
      - {id: hard, type: Noop, onFailure: {action: retry, retries: 1, backoff: 30s, then: rollbackPipeline}}
    rollbackSteps:
      - {id: undoB, type: Noop}
`
	m := mustLoad(t, src)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	now := testNow
	j := m.Advance(r, now)[0]
	j = result(m, r, j, steps.Done(nil), now)[0] // a.ok → b.soft
	if j.Step != "soft" {
		t.Fatalf("got %s", j.Step)
	}
	j = result(m, r, j, steps.Fail("meh"), now)[0] // ignored → hard
	if j.Step != "hard" || !step(r, "b", "soft").Ignored {
		t.Fatalf("ignore strategy: %+v", j)
	}
	if jobs := result(m, r, j, steps.Fail("nope"), now); len(jobs) != 0 {
		t.Fatal("retry dispatched before its backoff")
	}
	if due := m.NextDue(r); !due.Equal(now.Add(30 * time.Second)) {
		t.Fatalf("retry due %v", due)
	}
	now = now.Add(31 * time.Second)
	m.Tick(r, now)
	jobs := m.Advance(r, now)
	if len(jobs) != 1 || jobs[0].Attempt != 2 {
		t.Fatalf("retry: %+v", jobs)
	}
	// Second failure: retries exhausted → rollbackPipeline: b's rollback, then a's.
	jobs = result(m, r, jobs[0], steps.Fail("still no"), now)
	if len(jobs) != 1 || jobs[0].Step != "undoB" || !jobs[0].Rollback {
		t.Fatalf("stage rollback: %+v", jobs)
	}
	jobs = result(m, r, jobs[0], steps.Done(nil), now)
	if len(jobs) != 1 || jobs[0].Step != "undoA" || jobs[0].Stage != "a" {
		t.Fatalf("pipeline rollback of earlier stage: %+v", jobs)
	}
	result(m, r, jobs[0], steps.Done(nil), now)
	if r.Status != StFailed || r.Find("a").Status != StRolledBack || r.Find("b").Status != StFailed {
		t.Fatalf("final: run %s a %s b %s", r.Status, r.Find("a").Status, r.Find("b").Status)
	}
	if !strings.Contains(r.Error, "step hard: still no (after 2 attempts)") {
		t.Errorf("error: %q", r.Error)
	}
}

func TestMachineInputErrorFailsStepBeforeDispatch(t *testing.T) {
	m := mustLoad(t, "name: x\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop, with: {outputs: {v: 1}}}\n      - {id: b, type: Noop, with: {outputs: {v: \"${{ steps.a.outputs.missing }}\"}}}\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	if jobs := result(m, r, j, steps.Done(map[string]any{"v": 1}), testNow); len(jobs) != 0 {
		t.Fatalf("dispatched a step whose input does not resolve: %+v", jobs)
	}
	if r.Status != StFailed || !strings.Contains(r.Error, "input outputs.v") || !strings.Contains(r.Error, "missing") {
		t.Fatalf("%s %q", r.Status, r.Error)
	}
}

func TestMachineStageTimeoutAndCancel(t *testing.T) {
	m := mustLoad(t, "name: x\nstages:\n  - id: s\n    timeout: 5m\n    steps:\n      - {id: a, type: Noop}\n  - id: t\n    steps:\n      - {id: b, type: Noop}\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	m.Advance(r, testNow)
	m.Tick(r, testNow.Add(6*time.Minute))
	m.Advance(r, testNow.Add(6*time.Minute))
	if r.Status != StFailed || !strings.Contains(r.Error, "stage timed out after 5m0s") || r.Find("t").Status != StNotRun || r.Find("t").Error != "s failed" {
		t.Fatalf("timeout: %s %q", r.Status, r.Error)
	}
	r2, _ := NewRun(m.P, "r2", nil, "me", testNow)
	m.Advance(r2, testNow)
	m.Apply(r2, &envelope.Event{Kind: queue.EvCancel, User: "bob"}, testNow)
	if jobs := m.Advance(r2, testNow); len(jobs) != 0 || r2.Status != StCancelled || r2.Error != "cancelled by bob" {
		t.Fatalf("cancel: %s %q %v", r2.Status, r2.Error, jobs)
	}
}

func step(r *Run, stage, id string) *StepRun {
	s := r.Find(stage)
	if st := s.Step(id, false); st != nil {
		return st
	}
	return s.Step(id, true)
}

func TestMachinePerTargetInputs(t *testing.T) {
	reg := steps.NewRegistry()
	reg.Register(steps.Definition{Type: "Writer", PerTarget: []string{"filePath"}, New: func() steps.Step { return nil }})
	src := `
name: x
service: {name: web, variables: {replicas: 1, tier: base}}
environments:
  - name: prod
    group: live
    variables: {replicas: 3}
    overrides: {tier: gold}
    clusters: [{name: eu, agent: a1}, {name: us, agent: a2}]
stages:
  - id: s
    environment: prod
    steps:
      - id: w
        type: Writer
        with:
          filePath: "envs/<+envgroup.name>/<+env.name>/${{ cluster.name }}/config.json"
          repo: deploy
`
	p, err := Load("t.yaml", []byte(src), reg)
	if err != nil {
		t.Fatal(err)
	}
	m := &Machine{P: p, Reg: reg}
	r, _ := NewRun(p, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	targets, _ := j.Inputs["targets"].([]any)
	if len(targets) != 2 || j.Inputs["repo"] != "deploy" || j.Inputs["filePath"] != nil {
		t.Fatalf("inputs: %#v", j.Inputs)
	}
	for i, c := range []string{"eu", "us"} {
		tg := targets[i].(map[string]any)
		if tg["filePath"] != "envs/live/prod/"+c+"/config.json" || tg["cluster"] != c || tg["env"] != "prod" {
			t.Errorf("target %d: %#v", i, tg)
		}
	}
	if v := j.Env.Variables; v["replicas"] != 3 || v["tier"] != "gold" || j.Env.Service != "web" {
		t.Errorf("service→env→override merge: %#v", j.Env)
	}
}

// The run state is rewritten to KV on every step and sent to every watcher: times that are
// not set yet must not be stored (they were, as "0001-01-01T00:00:00Z", doubling its size).
func TestRunStateOmitsUnsetTimes(t *testing.T) {
	m := mustLoad(t, "name: p\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n")
	r, err := NewRun(m.P, "r1", nil, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	jobs := m.Advance(r, testNow)
	result(m, r, jobs[0], steps.Result{Status: steps.Succeeded}, testNow.Add(time.Second))
	data, _ := json.Marshal(r)
	if strings.Contains(string(data), "0001-01-01") {
		t.Errorf("unset times stored:\n%s", data)
	}
	var back Run
	if err := json.Unmarshal(data, &back); err != nil || !back.Stages[0].Steps[0].Ended.Equal(testNow.Add(time.Second)) || !back.Stages[0].Steps[1].Ended.IsZero() {
		t.Errorf("round trip: %v %+v", err, back.Stages[0].Steps)
	}
	jd, _ := json.Marshal(jobs[0])
	if strings.Contains(string(jd), "0001-01-01") {
		t.Errorf("unset times in a job: %s", jd)
	}
}
