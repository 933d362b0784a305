package controller

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

// runLinger notes each start in a file, then runs for a while, as a step that is about to park
// (a merge joining its queue, a sync starting its operation) does: Parks is set on its type.
func runLinger(ctx context.Context, sc *steps.Context) (steps.Result, error) {
	path, _ := sc.Inputs["file"].(string)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return steps.Result{}, err
	}
	fmt.Fprintf(f, "%s/%s start\n", sc.RunID, sc.StepID)
	f.Close()
	d, _ := time.ParseDuration(fmt.Sprint(sc.Inputs["sleep"]))
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return steps.Result{}, ctx.Err()
	}
	return steps.Done(nil), nil
}

// A worker dies (SIGKILL) under a step that parks more often than MaxDeliver allows (3 in the
// child workers). Those deliveries are lost to worker deaths, not to a crash loop: the job is
// dispatched again and the run succeeds, where it used to fail with "delivered 3 times
// without a result (worker lost)". TestCrashLoopJobFailsRunWithLastError still fails a step
// that kills every worker.
func TestWorkerDeathsDoNotFailAParkingStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0, listen: "127.0.0.1:0"})
	url := e.conn.ClientURL()
	starts := t.TempDir() + "/starts.log"
	r := e.startRun(fmt.Sprintf("name: linger\nstages:\n  - id: s\n    steps:\n      - {id: l, type: Linger, with: {file: %q, sleep: 3s}}\n", starts), nil)
	const kills = 4
	for i := 0; i < kills; i++ {
		w := startChild(t, url, fmt.Sprintf("mortal%d", i))
		eventually(t, 60*time.Second, func() bool { b, _ := os.ReadFile(starts); return strings.Count(string(b), " start\n") > i },
			func() string { return fmt.Sprintf("delivery %d never started", i+1) })
		killChild(t, w)
	}
	startChild(t, url, "survivor")
	got := e.wait(r.ID, 90*time.Second)
	if got.Status != pipelines.StSucceeded {
		t.Fatalf("run after %d worker deaths: %s %s", kills, got.Status, got.Error)
	}
	if w := step(got, "s", "l").Worker; w != "survivor" {
		t.Errorf("result from %q, want survivor", w)
	}
}
