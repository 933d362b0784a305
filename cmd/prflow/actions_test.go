package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// TestRetryAndRerunCommands: against a real server and worker, a run whose prod approval was
// rejected is retried with `prflow retry`: dev is carried over (not run again: its step keeps
// the first run's times and worker), prod waits for its approval again and, approved, the
// retry succeeds. `prflow rerun` runs every stage again with the same inputs. Both fail
// (non-zero, the server's reason) for an unknown run and a run that has not ended, retry also
// for a run that succeeded and for a fixed pipeline that no longer has the carried stage.
func TestRetryAndRerunCommands(t *testing.T) {
	e := newTruthEnv(t)
	src := `name: gated
inputs:
  tag: {type: string, required: true}
stages:
  - id: dev
    steps:
      - {id: merge, type: Noop, with: {outputs: {commitId: "dev-${{ inputs.tag }}"}}}
  - id: prod
    steps:
      - id: ok
        type: Approval
        timeout: 5m
        with: {approvers: {groups: [release], minimumCount: 1}, message: "ship ${{ stages.dev.steps.merge.outputs.commitId }}?"}
`
	p := e.pipeline(t, src)
	first := e.start(t, p, "--set", "tag=1.2")
	e.waitStep(t, first, "prod", "ok", pipelines.StWaiting)

	for _, action := range []string{"rerun", "retry"} {
		if _, err := run(t, append([]string{action, first}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "it is waitingApproval; wait for it to end or cancel it first") || strings.Contains(err.Error(), "{") {
			t.Fatalf("%s of a waiting run: %v", action, err)
		}
		if _, err := run(t, append([]string{action, "rnope"}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "run not found: rnope") {
			t.Fatalf("%s of an unknown run: %v", action, err)
		}
	}
	if out, err := run(t, append([]string{"approve", first, "prod.ok", "--reject", "--comment", "not today"}, e.alice...)...); err != nil {
		t.Fatalf("reject: %v %s", err, out)
	}
	old := e.runState(t, first)
	for deadline := time.Now().Add(30 * time.Second); old.Status != pipelines.StFailed; {
		if time.Now().After(deadline) {
			t.Fatalf("the rejected run is %s, not failed", old.Status)
		}
		time.Sleep(50 * time.Millisecond)
		old = e.runState(t, first)
	}

	// A fixed pipeline that dropped dev does not fit what the first run carried.
	broken := e.pipeline(t, strings.Replace(strings.Replace(src, "id: dev", "id: staging", 1), "stages.dev.", "stages.staging.", 1))
	if _, err := run(t, append([]string{"retry", first, "--pipeline", broken}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "has no stage dev any more") {
		t.Fatalf("retry with a pipeline without dev: %v", err)
	}

	out, err := run(t, append([]string{"retry", first}, e.cli...)...)
	if err != nil || !strings.Contains(out, "retry of "+first+" from its failed stage; carried over, not run again: dev (from "+first+")") {
		t.Fatalf("retry: %v %s", err, out)
	}
	retry := strings.Fields(out)[1]
	e.waitStep(t, retry, "prod", "ok", pipelines.StWaiting)
	r := e.runState(t, retry)
	oldDev, newDev := old.Find("dev").Steps[0], r.Find("dev").Steps[0]
	if r.RetryOf != first || r.Find("dev").CarriedFrom != first || !newDev.Started.Equal(oldDev.Started) || newDev.Outputs["commitId"] != "dev-1.2" {
		t.Fatalf("retry's dev: carried from %q, started %v (first run's %v), outputs %v", r.Find("dev").CarriedFrom, newDev.Started, oldDev.Started, newDev.Outputs)
	}
	if out, err := run(t, append([]string{"status", retry}, e.cli...)...); err != nil || !strings.Contains(out, "retry of "+first+" from its failed stage") ||
		!strings.Contains(out, "carried over from "+first+", not run again") {
		t.Fatalf("status of the retry: %v\n%s", err, out)
	}
	if out, err := run(t, append([]string{"approve", retry, "prod.ok"}, e.alice...)...); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	if out, err := run(t, append([]string{"status", retry, "-w"}, e.cli...)...); err != nil {
		t.Fatalf("the retry did not succeed: %v\n%s", err, out)
	}
	if _, err := run(t, append([]string{"retry", retry}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "there is no failed stage to retry from") {
		t.Fatalf("retry of a run that succeeded: %v", err)
	}

	out, err = run(t, append([]string{"rerun", first, "--idempotency-key", "rerun-once"}, e.cli...)...)
	if err != nil || !strings.Contains(out, "(re-run of "+first+")") {
		t.Fatalf("rerun: %v %s", err, out)
	}
	rerun := strings.Fields(out)[1]
	if out, err := run(t, append([]string{"rerun", first, "--idempotency-key", "rerun-once"}, e.cli...)...); err != nil || !strings.Contains(out, "run "+rerun+" already started") {
		t.Fatalf("rerun with the same key: %v %s", err, out)
	}
	e.waitStep(t, rerun, "prod", "ok", pipelines.StWaiting)
	rr := e.runState(t, rerun)
	if rr.RerunOf != first || rr.Inputs["tag"] != "1.2" || rr.Find("dev").CarriedFrom != "" || rr.Find("dev").Steps[0].Started.Equal(oldDev.Started) {
		t.Fatalf("rerun: rerunOf %q inputs %v dev carried from %q", rr.RerunOf, rr.Inputs, rr.Find("dev").CarriedFrom)
	}
}

func (e *truthEnv) runState(t *testing.T, id string) *pipelines.Run {
	t.Helper()
	out, err := run(t, append([]string{"status", id, "--json"}, e.cli...)...)
	var r pipelines.Run
	if err != nil || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("status %s: %v %s", id, err, out)
	}
	return &r
}
