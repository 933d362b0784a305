package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// A controller stored a direct result, then lost the reply or failed to publish the next
// job (a NATS node died under it: TestClusterJobsLeaderKilled saw it). The worker, told
// "not applied", sends the result through the events stream, where it arrives as a first
// delivery and finds the run already holding it. The next step's job must still go out:
// before, the run stayed with its next step queued and no job for ever.
func TestResultFoundAppliedSendsQueuedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := e.startRun("name: r\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n", nil)

	// The job for a, as a worker would take it.
	stream, err := e.conn.JS.Stream(ctx, queue.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	var jobA envelope.Job
	eventually(t, 10*time.Second, func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, queue.JobSubject("default"))
		return err == nil && json.Unmarshal(m.Data, &jobA) == nil && jobA.Step == "a"
	}, func() string { return "no job for step a" })
	res := steps.Done(nil)
	ev := &envelope.Event{V: envelope.Version, Kind: queue.EvResult, Run: r.ID, Stage: "s", Step: "a", Attempt: jobA.Attempt,
		Wake: jobA.Wake, Result: &res, Worker: "w-test", Started: time.Now(), Ended: time.Now(), Token: jobA.Token}

	// What the controller stored before its reply was lost: the run with a's result and b
	// queued; b's job never published.
	entry, err := e.ctl.b.Runs.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var run pipelines.Run
	if err := json.Unmarshal(entry.Value(), &run); err != nil {
		t.Fatal(err)
	}
	m, err := e.ctl.machine(ctx, run.Spec)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.Apply(&run, ev, now)
	if jobs := m.Advance(&run, now); len(jobs) != 1 || jobs[0].Step != "b" {
		t.Fatalf("advancing after a: jobs %v, want b's", jobs)
	}
	data, err := run.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctl.b.Runs.Update(ctx, r.ID, data, entry.Revision()); err != nil {
		t.Fatal(err)
	}

	// The worker's fallback: the result on the events stream, first delivery.
	payload, _ := json.Marshal(ev)
	if _, err := queue.Publish(ctx, e.conn.JS, queue.EventSubject(r.ID, queue.EvResult), payload, "res/"+jobA.ID(), 0); err != nil {
		t.Fatal(err)
	}
	var last envelope.Job
	eventually(t, 20*time.Second, func() bool {
		msg, err := stream.GetLastMsgForSubject(ctx, queue.JobSubject("default"))
		return err == nil && json.Unmarshal(msg.Data, &last) == nil && last.Step == "b"
	}, func() string { return fmt.Sprintf("no job for step b (last job: %s/%s)", last.Stage, last.Step) })
}
