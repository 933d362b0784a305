package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// A step's deadline can pass while one of its runs is still going: a GitOpsSync waiting on an
// agent's answer, or one about to park again just after the deadline. A step that judges at
// its deadline (Definition.JudgesAtDeadline) is then asked for that verdict, as the
// controller's deadline wake would ask it; others fail with the timeout, as before. Through a
// real worker on an embedded server.
func TestWorkerAsksForTheVerdictWhenTheDeadlineCutsARun(t *testing.T) {
	t.Parallel() // its own server on its own port
	ctx, log, admin, open := tcpQueue(t, 2*time.Minute)
	var mu sync.Mutex
	calls := map[string][]string{} // run → the wake reason of each call
	record := func(sc *steps.Context) {
		mu.Lock()
		defer mu.Unlock()
		calls[sc.RunID] = append(calls[sc.RunID], sc.WakeReason)
	}
	// verdict is what each step says when asked at its deadline.
	verdict := func(sc *steps.Context) steps.Result {
		return steps.Fail("judged at the deadline: app web Synced, health Progressing (" + sc.RunID + ")")
	}
	reg := steps.NewRegistry()
	reg.Register(steps.Definition{Type: "Hangs", JudgesAtDeadline: true, New: func() steps.Step {
		return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
			record(sc)
			if sc.WakeReason == "deadline" {
				return verdict(sc), nil
			}
			<-ctx.Done() // an agent that does not answer before the deadline
			return steps.Result{}, ctx.Err()
		})
	}})
	reg.Register(steps.Definition{Type: "ParksLate", JudgesAtDeadline: true, New: func() steps.Step {
		return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
			record(sc)
			if sc.WakeReason == "deadline" {
				return verdict(sc), nil
			}
			time.Sleep(time.Until(sc.Deadline) + 50*time.Millisecond) // slow reads; ctx is not asked
			return steps.Park(steps.Wait{Reason: "waiting for web to be Healthy"}, nil), nil
		})
	}})
	reg.Register(steps.Definition{Type: "HangsPlain", New: func() steps.Step {
		return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
			record(sc)
			<-ctx.Done()
			return steps.Result{}, ctx.Err()
		})
	}})
	reg.Register(steps.Definition{Type: "Refuses", JudgesAtDeadline: true, New: func() steps.Step {
		return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
			record(sc)
			<-ctx.Done()
			return steps.Result{}, steps.Terminalf("bad input: applicationName is empty")
		})
	}})
	w := &Worker{ID: "w1", Concurrency: 4, Registry: reg, Log: log, StreamResults: true,
		Tuning: queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5}, DrainTimeout: time.Second}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx, open("w1")) }()
	defer func() { stop(); <-done }()

	cases := []struct {
		run, typ string
		calls    []string // wake reasons, in order
		status   steps.Status
		message  string
	}{
		{run: "cut-short", typ: "Hangs", calls: []string{"", "deadline"}, status: steps.Failed, message: "judged at the deadline: app web Synced, health Progressing (cut-short)"},
		{run: "parks-late", typ: "ParksLate", calls: []string{"", "deadline"}, status: steps.Failed, message: "judged at the deadline: app web Synced, health Progressing (parks-late)"},
		{run: "plain", typ: "HangsPlain", calls: []string{""}, status: steps.Failed, message: "timed out at "},
		{run: "terminal", typ: "Refuses", calls: []string{""}, status: steps.Failed, message: "bad input: applicationName is empty"},
	}
	deadline := time.Now().Add(time.Second)
	for _, c := range cases {
		job := &envelope.Job{V: envelope.Version, Run: c.run, Pipeline: "p", Stage: "s", Step: "x", Type: c.typ,
			Pool: "default", Attempt: 1, Deadline: deadline}
		publishJob(t, ctx, admin.JS, job)
	}
	for _, c := range cases {
		res := waitResult(t, ctx, admin.JS, c.run)
		mu.Lock()
		got := fmt.Sprintf("%q", calls[c.run])
		mu.Unlock()
		if res.Status != c.status || !strings.HasPrefix(res.Message, c.message) || got != fmt.Sprintf("%q", c.calls) {
			t.Errorf("%s: result %s %q after calls (wake reasons) %s; want %s %q after %q", c.run, res.Status, res.Message, got, c.status, c.message, c.calls)
		}
	}
}
