package pipelines

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

const notifyStages = `
stages:
  - id: build
    steps: [{id: a, type: Noop}]
  - id: deploy
    steps:
      - {id: ok, type: Approval, with: {approvers: [alice]}}
      - {id: b, type: Noop}
`

// Mistakes in notifications are load errors naming the line and field: a typo'd event (with
// a suggestion), an unknown field, a stage filter naming no stage, a missing channel.
func TestNotificationsLoadErrors(t *testing.T) {
	cases := []struct{ name, rules, want string }{
		{"typo event", "  - {on: [run.faild], channel: team}\n", `p.yaml:3:11: notifications[0].on[0]: unknown event "run.faild" (did you mean "run.failed"?)`},
		{"unknown field", "  - {on: [run.failed], chanel: team}\n", `p.yaml:3:24: notifications[0].chanel: unknown field`},
		{"no channel", "  - {on: [run.failed]}\n", `p.yaml:3:5: notifications[0].channel: required`},
		{"no on", "  - {channel: team}\n", `notifications[0].on: required`},
		{"empty on", "  - {on: [], channel: team}\n", `notifications[0].on: empty`},
		{"twice", "  - {on: [run.failed, run.failed], channel: team}\n", `notifications[0].on[1]: event "run.failed" is listed twice`},
		{"bad channel", "  - {on: [run.failed], channel: \"team slack\"}\n", `notifications[0].channel: "team slack"`},
		{"unknown stage", "  - {on: [stage.failed], stages: [deplyo], channel: team}\n", `p.yaml:3:35: notifications[0].stages[0]: no stage "deplyo" (did you mean "deploy"?)`},
		{"not a list", "  on: run.failed\n", `notifications: want a list of rules`},
		{"wrong type", "  - {on: {x: 1}, channel: team}\n", `notifications[0].on: want a list of strings`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("p.yaml", []byte("name: x\nnotifications:\n"+tc.rules+notifyStages), steps.Default)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %q", err, tc.want)
			}
		})
	}
	p, err := Load("p.yaml", []byte("name: x\nnotifications:\n  - {on: run.failed, channel: team}\n  - {on: [stage.failed, approval.waiting], stages: [deploy], channel: mail}\n"+notifyStages), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Notifications) != 2 || !slices.Equal(p.Notifications[1].On, []string{EvStageFailed, EvApprovalWaiting}) || !slices.Equal(p.NotifyChannels(), []string{"team", "mail"}) {
		t.Errorf("rules %+v, channels %v", p.Notifications, p.NotifyChannels())
	}
}

func jobSteps(jobs []*envelope.Job) []string {
	var out []string
	for _, j := range jobs {
		if j.Stage == NotifyStage {
			out = append(out, j.Step)
		}
	}
	sort.Strings(out)
	return out
}

// Each event makes one job per matching rule, with a deterministic id; the stage filter
// applies to stage events only; a snapshot of nothing re-derives the same jobs (what a
// restarted controller sends again, dropped by their ids).
func TestNotifyJobs(t *testing.T) {
	m := mustLoad(t, "name: x\nnotifications:\n"+
		"  - {on: [run.started, run.failed, stage.succeeded, stage.failed, approval.waiting], stages: [deploy], channel: team}\n"+
		"  - {on: [stage.started], channel: hook}\n"+notifyStages)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	snap := m.NotifySnapshot(r)
	jobs := m.Advance(r, testNow)
	got := jobSteps(m.NotifyJobs(snap, r, "/ui/runs/r1"))
	if want := []string{"run.started:-:team", "stage.started:build:hook"}; !slices.Equal(got, want) {
		t.Fatalf("start: %q, want %q", got, want)
	}
	// build succeeds (filtered out for team), deploy starts and its approval parks.
	snap = m.NotifySnapshot(r)
	next := result(m, r, jobs[0], steps.Done(nil), testNow)
	park := steps.Park(steps.Wait{Topics: []string{"approval"}, Reason: "waiting for alice"}, nil)
	got = jobSteps(m.NotifyJobs(snap, r, ""))
	if want := []string{"stage.started:deploy:hook"}; !slices.Equal(got, want) {
		t.Fatalf("after build: %q, want %q", got, want)
	}
	snap = m.NotifySnapshot(r)
	result(m, r, next[0], park, testNow)
	nj := m.NotifyJobs(snap, r, "https://x/ui/runs/r1")
	if got := jobSteps(nj); !slices.Equal(got, []string{"approval.waiting:deploy.ok:team"}) {
		t.Fatalf("approval: %q", got)
	}
	j := nj[0]
	if j.ID() != "r1/_notify/approval.waiting:deploy.ok:team/1/0" || j.Type != steps.TypeNotify || j.Inputs["message"] != "waiting for alice" ||
		j.Inputs["url"] != "https://x/ui/runs/r1" || !slices.Equal(j.Connectors, []string{steps.NotifyRoute("team")}) {
		t.Errorf("job %s %+v", j.ID(), j)
	}
	// Woken (a signal that did not settle it) and parked again: no second approval.waiting.
	st := r.Stages[1].Steps[0]
	m.wake(st, "signal", testNow)
	snap = m.NotifySnapshot(r)
	woken := m.Advance(r, testNow)
	if len(woken) != 1 || woken[0].Wake != 1 {
		t.Fatalf("woken: %+v", woken)
	}
	result(m, r, woken[0], park, testNow)
	if got := jobSteps(m.NotifyJobs(snap, r, "")); len(got) != 0 || st.Status != StWaiting {
		t.Errorf("re-park: %q (%s)", got, st.Status)
	}
	// Rejected: the stage and the run fail.
	m.wake(st, "signal", testNow)
	again := m.Advance(r, testNow)
	snap = m.NotifySnapshot(r)
	result(m, r, again[0], steps.Fail("rejected by alice"), testNow)
	if got, want := jobSteps(m.NotifyJobs(snap, r, "")), []string{"run.failed:-:team", "stage.failed:deploy:team"}; !slices.Equal(got, want) || r.Status != StFailed {
		t.Fatalf("failure: %q, want %q (run %s)", got, want, r.Status)
	}
	// From nothing: every event the final state shows, with the same ids.
	all := jobSteps(m.NotifyJobs(nil, r, ""))
	want := []string{"run.failed:-:team", "run.started:-:team", "stage.failed:deploy:team", "stage.started:build:hook", "stage.started:deploy:hook"}
	if !slices.Equal(all, want) {
		t.Errorf("re-derived %q, want %q", all, want)
	}
	// Republished after a restart: only events since the cut-off (times the state holds).
	if got := jobSteps(m.NotifyJobsSince(r, "", testNow.Add(time.Second))); len(got) != 0 {
		t.Errorf("events before the cut-off republished: %q", got)
	}
	if got := jobSteps(m.NotifyJobsSince(r, "", testNow)); !slices.Equal(got, want) {
		t.Errorf("since the run's time: %q, want %q", got, want)
	}
	// No rules: no snapshot, no jobs.
	plain := mustLoad(t, "name: y\n"+notifyStages)
	if plain.NotifySnapshot(r) != nil || plain.NotifyJobs(nil, r, "") != nil {
		t.Error("a pipeline without rules notifies")
	}
}

// A failed notification becomes one warning on the run, also after the run ended, and never
// changes the run's status; a success or a repeat adds nothing.
func TestNotifyFailureIsAWarning(t *testing.T) {
	m := mustLoad(t, "name: x\nnotifications:\n  - {on: [run.succeeded], channel: team}\nstages:\n  - id: s\n    steps: [{id: a, type: Noop}]\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	j := m.Advance(r, testNow)[0]
	snap := m.NotifySnapshot(r)
	result(m, r, j, steps.Done(nil), testNow)
	nj := m.NotifyJobs(snap, r, "")
	if r.Status != StSucceeded || len(nj) != 1 {
		t.Fatalf("run %s, jobs %d", r.Status, len(nj))
	}
	ev := func(res steps.Result) *envelope.Event {
		return &envelope.Event{Kind: queue.EvResult, Run: "r1", Stage: NotifyStage, Step: nj[0].Step, Attempt: 1, Result: &res}
	}
	if m.Apply(r, ev(steps.Done(map[string]any{"sent": true})), testNow) || len(r.Warnings) != 0 {
		t.Fatalf("a success changed the run: %q", r.Warnings)
	}
	if !m.Apply(r, ev(steps.Fail("channel team: gave up after 4 attempts: slack: the receiver answered 502 Bad Gateway")), testNow.Add(time.Second)) {
		t.Fatal("failure not applied to the ended run")
	}
	if m.Apply(r, ev(steps.Fail("channel team: gave up after 4 attempts: slack: the receiver answered 502 Bad Gateway")), testNow.Add(time.Second)) {
		t.Error("a repeated result applied twice")
	}
	dead := &envelope.Event{Kind: queue.EvDead, Run: "r1", Stage: NotifyStage, Step: nj[0].Step, Attempt: 1, Reason: "job delivered 5 times without a result (worker lost)"}
	m.Apply(r, dead, testNow)
	want := []string{"notification run.succeeded to channel team not sent: channel team: gave up after 4 attempts: slack: the receiver answered 502 Bad Gateway",
		"notification run.succeeded to channel team not sent: job delivered 5 times without a result (worker lost)"}
	if !slices.Equal(r.Warnings, want) || r.Status != StSucceeded {
		t.Errorf("status %s, warnings %q", r.Status, r.Warnings)
	}
	// A result for a step that is no notification changes nothing.
	if m.Apply(r, &envelope.Event{Kind: queue.EvResult, Run: "r1", Stage: NotifyStage, Step: "garbage", Result: &steps.Result{Status: steps.Failed}}, testNow) {
		t.Error("a malformed notify result was applied")
	}
}
