package worker

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// Version skew on the priors a job carries, through a real worker on an embedded server: a
// job from a controller older than Definition.Priors (every earlier step, no priorTypes)
// runs with all of them; a job whose priorTypes leave out a type the worker's step reads
// (a controller with an older declaration) fails without running, saying which type and
// what to upgrade; a job whose priorTypes cover the declaration runs.
func TestWorkerChecksPriorsAgainstItsStep(t *testing.T) {
	t.Parallel() // its own server on its own port
	ctx, log, admin, open := tcpQueue(t, 2*time.Minute)
	var mu sync.Mutex
	saw := map[string][]string{} // run → the prior IDs its step got
	reg := steps.NewRegistry()
	reg.Register(steps.Definition{Type: "Sync", Priors: []string{"Merge", "Fetch"}, New: func() steps.Step {
		return steps.StepFunc(func(_ context.Context, sc *steps.Context) (steps.Result, error) {
			var ids []string
			for _, p := range sc.Priors {
				ids = append(ids, p.ID)
			}
			mu.Lock()
			saw[sc.RunID] = ids
			mu.Unlock()
			return steps.Done(nil), nil
		})
	}})
	w := &Worker{ID: "w1", Concurrency: 2, Registry: reg, Log: log, StreamResults: true,
		Tuning: queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5}, DrainTimeout: time.Second}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx, open("w1")) }()
	defer func() { stop(); <-done }()

	merge := steps.Prior{ID: "m", Type: "Merge", Outputs: map[string]any{"commitId": "abc"}}
	fetch := steps.Prior{ID: "f", Type: "Fetch"}
	other := steps.Prior{ID: "o", Type: "Other"}
	cases := []struct {
		run        string
		priors     []steps.Prior
		priorTypes []string
		ran        []string // nil: must not run
		fault      string
	}{
		{run: "old-controller", priors: []steps.Prior{other, merge, fetch}, ran: []string{"o", "m", "f"}},
		{run: "older-declaration", priors: []steps.Prior{merge}, priorTypes: []string{"Merge"}, fault: "reads Fetch as well"},
		{run: "covered", priors: []steps.Prior{merge, fetch}, priorTypes: []string{"Merge", "Fetch"}, ran: []string{"m", "f"}},
	}
	for _, c := range cases {
		job := &envelope.Job{V: envelope.Version, Run: c.run, Pipeline: "p", Stage: "s", Step: "sync", Type: "Sync",
			Pool: "default", Attempt: 1, Priors: c.priors, PriorTypes: c.priorTypes}
		publishJob(t, ctx, admin.JS, job)
	}
	for _, c := range cases {
		res := waitResult(t, ctx, admin.JS, c.run)
		mu.Lock()
		got, ran := saw[c.run]
		mu.Unlock()
		if c.fault != "" {
			if ran || res.Status != steps.Failed || !strings.Contains(res.Message, c.fault) || !strings.Contains(res.Message, "upgrade the controllers") {
				t.Errorf("%s: ran=%v, result %s %q; want a failure naming %q, the step not run", c.run, ran, res.Status, res.Message, c.fault)
			}
			continue
		}
		if res.Status != steps.Succeeded || !slices.Equal(got, c.ran) {
			t.Errorf("%s: result %s %q, step saw priors %v, want %v", c.run, res.Status, res.Message, got, c.ran)
		}
	}
}
