package controller

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/worker"
)

// TestWorkerDrainFinishesInFlightJob: cancelling a worker (SIGTERM) stops it pulling but lets
// the running step finish and report.
func TestWorkerDrainFinishesInFlightJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0})
	effects := t.TempDir() + "/e.log"
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker.Worker{ID: "drainer", Concurrency: 1, Registry: e.reg, Log: e.log, DrainTimeout: 10 * time.Second,
		Tuning: queue.ConsumerTuning{AckWait: 5 * time.Second}}
	stopped := make(chan struct{})
	go func() { _ = w.Run(ctx, e.conn); close(stopped) }()
	r := e.startRun("name: drain\nstages:\n  - id: s\n    steps:\n      - {id: e, type: Effect, with: {file: \""+effects+"\", sleep: 1500ms}}\n", nil)
	for {
		cur, _ := e.ctl.Get(context.Background(), r.ID)
		if cur != nil && cur.Stages[0].Steps[0].Status == pipelines.StQueued {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The step is sleeping inside the worker once its effect is written (a fixed 300 ms was
	// not always enough for the worker to pull the job on a busy machine).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(effects); strings.Contains(string(b), r.ID+"/e\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step never started in the worker")
		}
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop")
	}
	got, _ := e.ctl.Get(context.Background(), r.ID)
	for i := 0; i < 100 && !got.Status.Terminal(); i++ {
		time.Sleep(50 * time.Millisecond)
		got, _ = e.ctl.Get(context.Background(), r.ID)
	}
	if got.Status != pipelines.StSucceeded || got.Stages[0].Steps[0].Worker != "drainer" {
		t.Fatalf("in-flight job after drain: %s by %q", got.Status, got.Stages[0].Steps[0].Worker)
	}
}
