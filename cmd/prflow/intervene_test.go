package main

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// TestInterveneCommand: against a real server and worker, a stage whose step timed out waits
// for an intervention; `prflow intervene` refuses bad input and non-approvers with the server's
// reason (non-zero), `--action ignore` lets the run go on and succeed, and a second decision
// is refused because the stage no longer waits.
func TestInterveneCommand(t *testing.T) {
	e := newTruthEnv(t)
	p := e.pipeline(t, `name: manual
stages:
  - id: prod
    onFailure: {manual: {timeout: 1h, approvers: ['group:release']}}
    steps:
      - {id: verify, type: Wait, timeout: 1s, with: {duration: 1h}}
      - {id: after, type: Noop}
`)
	id := e.start(t, p)
	var r *pipelines.Run
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r = e.runState(t, id); r.Find("prod").Intervention != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never waited for an intervention: %+v", r.Find("prod"))
		}
	}
	if out, err := run(t, append([]string{"status", id}, e.cli...)...); err != nil || !strings.Contains(out, string(pipelines.StWaitingIntervention)) {
		t.Errorf("status does not say the run waits for an intervention: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"no action", append([]string{"intervene", id, "prod"}, e.alice...), "--action: required (retry, ignore, abort, rollback)"},
		{"unknown action", append([]string{"intervene", id, "prod", "--action", "skip"}, e.alice...), `unknown action "skip"`},
		{"unknown stage", append([]string{"intervene", id, "qa", "--action", "retry"}, e.alice...), `run ` + id + ` has no stage "qa"`},
		{"not an approver", append([]string{"intervene", id, "prod", "--action", "ignore"}, e.cli...), "cli may not decide on stage prod"},
		{"unknown run", append([]string{"intervene", "rnope", "prod", "--action", "ignore"}, e.alice...), "not found"},
	} {
		if _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.says)
		}
	}
	out, err := run(t, append([]string{"intervene", id, "prod", "--action", "ignore", "--comment", "known flake"}, e.alice...)...)
	if err != nil || !strings.Contains(out, "stage prod of run "+id+": step verify ignored by alice") {
		t.Fatalf("intervene: %v %s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); !r.Status.Terminal(); time.Sleep(50 * time.Millisecond) {
		if r = e.runState(t, id); time.Now().After(deadline) {
			t.Fatalf("run did not end after the decision: %s", r.Status)
		}
	}
	rec := r.Find("prod").Interventions
	if r.Status != pipelines.StSucceeded || len(rec) != 1 || rec[0].Comment != "known flake" || !r.Find("prod").Steps[0].Ignored {
		t.Fatalf("run %s %q, records %+v", r.Status, r.Error, rec)
	}
	if _, err := run(t, append([]string{"intervene", id, "prod", "--action", "retry"}, e.alice...)...); err == nil || !strings.Contains(err.Error(), "already decided: ignored by alice") {
		t.Fatalf("second decision: %v", err)
	}
}
