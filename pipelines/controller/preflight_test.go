package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/worker"
)

// startWorker runs a worker of pools holding connectors until the test ends and waits until
// it is registered.
func (e *env) startWorker(id string, pools, connectors []string) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker.Worker{ID: id, Pools: pools, Connectors: connectors, Concurrency: 2, Registry: e.reg, Log: e.log, DrainTimeout: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx, e.conn) }()
	e.t.Cleanup(func() { cancel(); <-done })
	e.waitRegistered(id)
}

func (e *env) waitRegistered(id string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := e.ctl.b.Workers.Get(context.Background(), id); err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("worker %s never registered", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startAgent registers an agent in prflow-agents the way agents do (agent.Heartbeat).
func (e *env) startAgent(id string) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, err := agent.Heartbeat(ctx, e.ctl.b.Agents, 0, func() agent.Registration {
		return agent.Registration{Agent: id, Replica: "r1", Kind: "simulated", Healthy: true}
	}, e.log)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cancel(); <-done })
}

// TestRunStartCheck: a run naming a connector no live worker of its pool holds, or an agent
// that is not registered, is refused before anything is stored or dispatched, with every
// missing name listed; the same pipeline starts once they are live. The API answers 409, and
// POST /api/v1/pipelines/check says the same without starting anything.
func TestRunStartCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0})
	e.startWorker("wr", []string{"default"}, []string{"release", "app"})
	e.startAgent("sim")
	srv := e.serve(&Auth{Anonymous: &User{Name: "dev"}})

	pipeline := func(conn, pool, agentName string) string {
		return fmt.Sprintf(`
name: promo
inputs: {conn: {type: string, default: release}}
environments:
  - {name: prod, clusters: [{name: prod-eu, agent: %s}, {name: prod-us, agent: sim}]}
stages:
  - id: prod
    environment: prod
    steps:
      - {id: update, type: Noop, pool: %s, with: {connector: %s}}
      - {id: dyn, type: Noop, with: {connector: '${{ inputs.conn }}'}}
    rollbackSteps:
      - {id: undo, type: Noop, with: {connectorRef: app}}
`, agentName, pool, conn)
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"typo in connector and unknown agent", pipeline("relase", "default", "eu"),
			`refused: connector "relase" is held by no live worker of pool "default" (live: app, release); agent "eu" is not registered (registered: sim)`},
		{"pool without workers", pipeline("release", "gpu", "sim"), `refused: connector "release": pool "gpu" has no live worker`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.ctl.Start(t.Context(), StartRequest{File: "p.yaml", Source: []byte(tc.src)})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("start: got %v\nwant %s", err, tc.want)
			}
			for path, code := range map[string]int{"/api/v1/runs": 409, "/api/v1/pipelines/check": 409} {
				body, _ := json.Marshal(map[string]any{"file": "p.yaml", "source": []byte(tc.src)})
				resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(string(body)))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != code || !strings.Contains(string(b), strings.ReplaceAll(tc.want, `"`, `\"`)) {
					t.Fatalf("%s: got %d %s", path, resp.StatusCode, b)
				}
			}
		})
	}
	// Nothing was stored or dispatched by the refusals.
	if runs, _ := e.ctl.List(t.Context(), 0); len(runs) != 0 {
		t.Fatalf("refused runs were stored: %d", len(runs))
	}
	if s, err := e.conn.JS.Stream(t.Context(), queue.StreamJobs); err != nil || s.CachedInfo().State.Msgs != 0 {
		t.Fatalf("refused runs dispatched jobs: %v %+v", err, s.CachedInfo().State)
	}

	// A check that passes starts nothing; a bad pipeline is 422.
	for src, code := range map[string]int{pipeline("release", "default", "sim"): 200, "name: x\nstages: [{id: s, steps: [{id: a, type: Nope}]}]\n": 422} {
		body, _ := json.Marshal(map[string]any{"file": "p.yaml", "source": []byte(src)})
		resp, err := http.Post(srv.URL+"/api/v1/pipelines/check", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("check: got %d %s, want %d", resp.StatusCode, b, code)
		}
	}
	if runs, _ := e.ctl.List(t.Context(), 0); len(runs) != 0 {
		t.Fatalf("a check started a run")
	}

	// Once the connector's pool has a capable worker and the agent is live, it runs.
	e.startWorker("wg", []string{"gpu"}, []string{"release"})
	e.startAgent("eu")
	r := e.startRun(pipeline("release", "gpu", "eu"), nil)
	if got := e.wait(r.ID, 30*time.Second); got.Status != "succeeded" {
		t.Fatalf("run: %s %s", got.Status, got.Error)
	}
}
