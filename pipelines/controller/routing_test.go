package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps/worker"
)

// TestCapabilityRouting: a job that needs a connector goes only to a worker holding it. While
// no live worker holds it, the step stays queued (not failed, not run by another worker) and
// status says what it waits for; the queue-depth metric has a series for its pool and
// connector, and one for a pool with no worker at all. A capable worker then runs it.
func TestCapabilityRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0})
	e.startWorker("wa", []string{"default"}, []string{"app"})
	// wr holds the connector when the run starts (the start check passes), then stops.
	ctx, stopWR := context.WithCancel(context.Background())
	wr := &worker.Worker{ID: "wr", Connectors: []string{"release"}, Concurrency: 2, Registry: e.reg, Log: e.log, DrainTimeout: time.Second}
	wrDone := make(chan struct{})
	go func() { defer close(wrDone); _ = wr.Run(ctx, e.conn) }()
	e.waitRegistered("wr")
	srv := e.serve(&Auth{Anonymous: &User{Name: "dev"}})

	r := e.startRun(`
name: routed
stages:
  - id: s
    steps:
      - {id: nap, type: Wait, with: {duration: 1s}}
      - {id: push, type: Noop, with: {connector: release}}
`, nil)
	stopWR()
	<-wrDone
	gpu := e.startRun("name: gpu\nstages: [{id: s, steps: [{id: a, type: Noop, pool: gpu}]}]\n", nil)

	get := func(id string) *pipelines.Run {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/v1/runs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var run pipelines.Run
		if err := json.NewDecoder(resp.Body).Decode(&run); err != nil {
			t.Fatal(err)
		}
		return &run
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := get(r.ID).Stages[0].Steps[1]
		if st.Status == pipelines.StQueued && st.Wait != nil {
			if want := "waiting for a worker with connector release in pool default"; st.Wait.Reason != want {
				t.Fatalf("wait reason %q, want %q", st.Wait.Reason, want)
			}
			break
		}
		if st.Status.Terminal() || time.Now().After(deadline) {
			t.Fatalf("push: %s %s (worker %q)", st.Status, st.Error, st.Worker)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // wa had time to take it, and must not
	if st := get(r.ID).Stages[0].Steps[1]; st.Status != pipelines.StQueued {
		t.Fatalf("a worker without the connector took the job: %s by %q %s", st.Status, st.Worker, st.Error)
	}
	if st := get(gpu.ID).Stages[0].Steps[0]; st.Status != pipelines.StQueued || st.Wait == nil || st.Wait.Reason != "waiting for a worker in pool gpu (none is live)" {
		t.Fatalf("gpu step: %s %+v", st.Status, st.Wait)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`prflow_queue_depth{connector="release",pool="default"} 1`, `prflow_queue_depth{connector="",pool="gpu"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(b), "prflow_queue_depth"))
		}
	}

	e.startWorker("wr2", []string{"default"}, []string{"release"})
	got := e.wait(r.ID, 30*time.Second)
	if st := got.Stages[0].Steps[1]; got.Status != pipelines.StSucceeded || st.Worker != "wr2" {
		t.Fatalf("run %s %s; push ran on %q", got.Status, got.Error, st.Worker)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
