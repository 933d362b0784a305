package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest/parallel"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/worker"
)

// TestMain lets this test binary act as a `prflow worker` process for the crash test.
func TestMain(m *testing.M) {
	if url := os.Getenv("PRFLOW_TEST_WORKER_URL"); url != "" {
		runChildWorker(url, os.Getenv("PRFLOW_TEST_WORKER_ID"))
		return
	}
	if url := os.Getenv("PRFLOW_TEST_API_URL"); url != "" {
		runChildAPI(url) // idempotency_test.go
		return
	}
	parallel.Default(4) // the tests marked parallel mostly wait (docs/testing.md)
	os.Exit(m.Run())
}

func runChildWorker(url, id string) {
	ctx := context.Background()
	conn, err := queue.Open(ctx, queue.Options{URL: url})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	reg := testRegistry()
	w := &worker.Worker{ID: id, Concurrency: 1, Registry: reg,
		Tuning: queue.ConsumerTuning{AckWait: 2 * time.Second, MaxDeliver: 3}}
	_ = w.Run(ctx, conn)
}

func startChild(t *testing.T, url, id string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PRFLOW_TEST_WORKER_URL="+url, "PRFLOW_TEST_WORKER_ID="+id)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// killChild kills a child worker with SIGKILL (no drain, no goodbye) and reaps it.
func killChild(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func TestWorkerKilledMidStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0, listen: "127.0.0.1:0"})
	url := e.conn.ClientURL()
	effects := t.TempDir() + "/effects.log"
	first := startChild(t, url, "doomed")
	src := fmt.Sprintf(`
name: crash
stages:
  - id: s
    steps:
      - {id: effect, type: Effect, with: {file: %q, sleep: 3s}}
      - {id: after, type: Noop, with: {outputs: {prev: "${{ steps.effect.outputs.key }}"}}}
`, effects)
	r := e.startRun(src, nil)
	// Wait until the step has done its side effect and is sleeping, then SIGKILL the worker.
	eventually(t, 30*time.Second, func() bool { b, _ := os.ReadFile(effects); return strings.Contains(string(b), r.ID) },
		func() string { return "step never started in the child worker" })
	killChild(t, first)
	startChild(t, url, "survivor")
	got := e.wait(r.ID, 60*time.Second)
	if got.Status != pipelines.StSucceeded {
		t.Fatalf("run after worker crash: %s %s", got.Status, got.Error)
	}
	if w := step(got, "s", "effect").Worker; w != "survivor" {
		t.Errorf("step result came from %q, want the redelivered run on survivor", w)
	}
	b, _ := os.ReadFile(effects)
	if n := strings.Count(string(b), r.ID+"/effect\n"); n != 1 {
		t.Errorf("side effect happened %d times, want 1:\n%s", n, b)
	}
}

// TestCrashLoopJobFailsRunWithLastError: a step that kills its worker on every delivery
// exhausts MaxDeliver; the dead-letter advisory fails the run with the last thing the step
// logged instead of leaving it hanging.
func TestCrashLoopJobFailsRunWithLastError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0, listen: "127.0.0.1:0"})
	url := e.conn.ClientURL()
	r := e.startRun("name: crashloop\nstages:\n  - id: s\n    steps:\n      - {id: c, type: Crash}\n", nil)
	done := make(chan struct{})
	go func() {
		// Keep restarting the worker, as a supervisor would.
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "PRFLOW_TEST_WORKER_URL="+url, fmt.Sprintf("PRFLOW_TEST_WORKER_ID=crasher%d", i))
			_ = cmd.Start()
			ch := make(chan struct{})
			go func() { _ = cmd.Wait(); close(ch) }()
			select {
			case <-ch:
			case <-done:
				_ = cmd.Process.Kill()
				<-ch
				return
			}
		}
	}()
	defer close(done)
	got := e.wait(r.ID, 90*time.Second)
	if got.Status != pipelines.StFailed || !strings.Contains(got.Error, "delivered 3 times without a result") ||
		!strings.Contains(got.Error, "simulated segfault in c") {
		t.Fatalf("crash-looping job: %s %q", got.Status, got.Error)
	}
}
