package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// TestStatusWatchWaitingApproval: against a real server and worker, `prflow status -w` of a
// run parked on an Approval prints that the run is waitingApproval and keeps watching (it
// does not end as if the run were done); `prflow runs` and `prflow status RUN` show
// waitingApproval too. Approved, the watch prints the new status and ends with the run, exit 0.
func TestStatusWatchWaitingApproval(t *testing.T) {
	e := newTruthEnv(t)
	p := e.pipeline(t, `name: gated
stages:
  - id: prod
    steps:
      - id: ok
        type: Approval
        timeout: 5m
        with: {approvers: {groups: [release], minimumCount: 1}, message: "ship it?"}
      - {id: after, type: Noop}
`)
	id := e.start(t, p)
	e.waitStep(t, id, "prod", "ok", pipelines.StWaiting)

	if out, err := run(t, append([]string{"runs"}, e.cli...)...); err != nil || !strings.Contains(out, id) || !strings.Contains(out, "waitingApproval") {
		t.Fatalf("runs: %v\n%s", err, out)
	}
	if out, err := run(t, append([]string{"status", id}, e.cli...)...); err != nil || !strings.Contains(out, "run "+id+"  pipeline gated  waitingApproval") {
		t.Fatalf("status: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	buf, done := goCmd(ctx, append([]string{"status", "-w", id}, e.cli...)...)
	waiting := "run " + id + ": waitingApproval"
	for !strings.Contains(buf.String(), waiting) {
		select {
		case err := <-done:
			t.Fatalf("status -w ended while the run waits for an approval (%v):\n%s", err, buf.String())
		case <-ctx.Done():
			t.Fatalf("status -w never printed %q:\n%s", waiting, buf.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if out, err := run(t, append([]string{"approve", id, "prod.ok"}, e.alice...)...); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if err := <-done; err != nil {
		t.Fatalf("status -w after approval: %v\n%s", err, buf.String())
	}
	// After the approval the watch reports the run's status again: running, or succeeded at
	// once when the next poll finds it done (the Noop after the approval is quick).
	got := buf.String()
	after := got[strings.Index(got, waiting)+len(waiting):]
	if strings.Count(got, waiting) != 1 || !strings.Contains(after, "run "+id+": running") && !strings.Contains(after, "run "+id+": succeeded") {
		t.Fatalf("status -w output: want waitingApproval once, then running or succeeded:\n%s", got)
	}
}
