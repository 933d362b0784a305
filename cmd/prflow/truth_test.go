package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

// truthEnv is a `prflow server` (embedded NATS listening for workers) with one `prflow worker`,
// and client flags for two users: cli (no approver) and alice (approver).
type truthEnv struct {
	dir, addr, nats string
	cli, alice      []string
}

func newTruthEnv(t *testing.T) *truthEnv {
	t.Helper()
	e := &truthEnv{dir: t.TempDir()}
	t.Setenv("PRFLOW_TEST_TOKEN", "cli-token-0123456789")
	t.Setenv("PRFLOW_TEST_ALICE", "alice-token-0123456789")
	tokens := writeFile(t, e.dir, "tokens.yaml", "tokens:\n  - user: cli\n    token: env:PRFLOW_TEST_TOKEN\n  - user: alice\n    groups: [release]\n    token: env:PRFLOW_TEST_ALICE\n")
	natsAddr := freeAddr(t)
	e.nats = "nats://" + natsAddr
	e.addr = startServer(t, "--tokens", tokens, "--data-dir", filepath.Join(e.dir, "nats"), "--nats-listen", natsAddr)
	startCmd(t, "worker", "--nats", e.nats, "--log-level", "error", "--id", "w1")
	e.cli = []string{"--server", "http://" + e.addr, "--token", "env:PRFLOW_TEST_TOKEN"}
	e.alice = []string{"--server", "http://" + e.addr, "--token", "env:PRFLOW_TEST_ALICE"}
	waitWorker(t, e.cli, "w1")
	return e
}

// waitWorker waits (20 s at most) until `prflow workers` with client flags cli lists worker id.
func waitWorker(t *testing.T, cli []string, id string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if out, err := run(t, append([]string{"workers"}, cli...)...); err == nil && strings.Contains(out, id+" ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s did not register", id)
		}
	}
}

// waitWorkerKV waits (20 s at most) until worker id's record is in the workers bucket.
func waitWorkerKV(t *testing.T, ctx context.Context, b *queue.Buckets, id string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := b.Workers.Get(ctx, id); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s did not register", id)
		}
	}
}

func (e *truthEnv) pipeline(t *testing.T, src string) string {
	p := writeFile(t, e.dir, "p.yaml", src)
	return p
}

// start runs `prflow run p FLAGS…` as cli and returns the new run's id.
func (e *truthEnv) start(t *testing.T, p string, flags ...string) string {
	t.Helper()
	out, err := run(t, append(append([]string{"run", p}, flags...), e.cli...)...)
	if err != nil {
		t.Fatalf("run: %v %s", err, out)
	}
	return strings.Fields(out)[1]
}

func (e *truthEnv) waitStep(t *testing.T, id, stage, step string, want pipelines.Status) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := run(t, append([]string{"status", id, "--json"}, e.cli...)...)
		var r pipelines.Run
		if err == nil && json.Unmarshal([]byte(out), &r) == nil {
			if sr := r.Find(stage); sr != nil && sr.Step(step, false) != nil && sr.Step(step, false).Status == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("step %s.%s never became %s: %v\n%s", stage, step, want, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientCommandsTellTheTruth: approve and logs fail (non-zero, the server's reason, no raw
// JSON) for an unknown run or step, a step that waits for no approval and a caller who is not
// an approver; a real approver's decision is recorded and ends the run.
func TestClientCommandsTellTheTruth(t *testing.T) {
	e := newTruthEnv(t)
	p := e.pipeline(t, "name: gated\nstages:\n  - id: prod\n    steps:\n      - {id: nap, type: Wait, with: {duration: 200ms}}\n"+
		"      - {id: ok, type: Approval, timeout: 1m, with: {approvers: {groups: [release]}}}\n")
	id := e.start(t, p)
	e.waitStep(t, id, "prod", "ok", pipelines.StWaiting)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"logs of an unknown run", append([]string{"logs", "r000000000000nosuchrun"}, e.cli...), "run not found: r000000000000nosuchrun"},
		{"logs of an unknown step", append([]string{"logs", id, "prod.nope"}, e.cli...), "run " + id + " has no step prod.nope"},
		{"logs of a malformed step", append([]string{"logs", id, "nope"}, e.cli...), `step: want STAGE.STEP, got "nope"`},
		{"approve an unknown run", append([]string{"approve", "r000000000000nosuchrun", "prod.ok"}, e.alice...), "run not found"},
		{"approve an unknown step", append([]string{"approve", id, "prod.nope"}, e.alice...), "run " + id + " has no step prod.nope"},
		{"approve a finished step", append([]string{"approve", id, "prod.nap"}, e.alice...), "step prod.nap is already succeeded"},
		{"approve as a non-approver", append([]string{"approve", id, "prod.ok"}, e.cli...), "cli is not an approver of step prod.ok (approvers: group:release)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v\n%s", tc.want, err, out)
			}
			if strings.Contains(err.Error(), "{") || strings.Contains(out, "recorded") {
				t.Fatalf("raw JSON or a false success: %v\n%s", err, out)
			}
		})
	}
	out, err := run(t, append([]string{"approve", id, "prod.ok", "--comment", "ship it"}, e.alice...)...)
	if err != nil || !strings.Contains(out, "approval of prod.ok in run "+id+" recorded") {
		t.Fatalf("approve as alice: %v %s", err, out)
	}
	e.waitStep(t, id, "prod", "ok", pipelines.StSucceeded)
	if out, err := run(t, append([]string{"logs", id, "prod.ok"}, e.cli...)...); err != nil {
		t.Fatalf("logs of a real step: %v %s", err, out)
	}
}

// TestWorkerAndAgentNeedNATS: without --nats, worker and agent refuse to start (they would
// wait forever on a private NATS server); --embedded starts one on purpose.
func TestWorkerAndAgentNeedNATS(t *testing.T) {
	t.Setenv("PRFLOW_NATS", "")
	dir := t.TempDir()
	for _, args := range [][]string{
		{"worker", "--data-dir", dir},
		{"agent", "--agent-id", "eu", "--sim-repo", dir, "--data-dir", dir},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		root := newRoot()
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "prflow "+args[0]+" needs --nats URL") || !strings.Contains(err.Error(), "--embedded") {
			t.Fatalf("%s without --nats: %v", args[0], err)
		}
	}
	out := startCmd(t, "worker", "--embedded", "--data-dir", dir, "--log-level", "info")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "worker started") {
		if time.Now().After(deadline) {
			t.Fatalf("worker --embedded did not start:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunFollowRidesOutServerRestart: `run -f` keeps following through a server restart (NATS
// stays up), says so on stderr, and exits with the run's real result (here a timeout: exit 2).
func TestRunFollowRidesOutServerRestart(t *testing.T) {
	dir := t.TempDir()
	ns, err := queue.StartEmbedded(filepath.Join(dir, "nats"), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	natsURL := ns.ClientURL()
	tokens := cliTokens(t, dir)
	addr := freeAddr(t)
	stop := startServerAt(t, addr, "--tokens", tokens, "--nats", natsURL)
	startCmd(t, "worker", "--nats", natsURL, "--log-level", "error")
	p := writeFile(t, dir, "p.yaml", "name: slow\nstages:\n  - id: s\n    steps:\n      - {id: nap, type: Wait, with: {duration: 1m}, timeout: 4s}\n")

	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs([]string{"run", p, "-f", "--server", "http://" + addr, "--token", "env:PRFLOW_TEST_TOKEN"})
		done <- root.ExecuteContext(context.Background())
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stdout.String(), "step s.nap (Wait): waiting"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start:\n%s\n%s", &stdout, &stderr)
		}
	}
	stop()
	time.Sleep(time.Second) // run -f meets a refused connection
	t.Cleanup(startServerAt(t, addr, "--tokens", tokens, "--nats", natsURL))
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("run -f did not end:\n%s\n%s", &stdout, &stderr)
	}
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("want exit 2 with the run's timeout, got %v\n%s\n%s", err, &stdout, &stderr)
	}
	if !strings.Contains(stderr.String(), "lost the server while following run") || !strings.Contains(stderr.String(), "server back after") {
		t.Fatalf("stderr does not say what happened:\n%s", &stderr)
	}
}

// TestValidateAgainstServer: `validate --server` refuses a pipeline whose connector or agent
// nothing live serves, naming each, and passes once they are live; it starts nothing.
func TestValidateAgainstServer(t *testing.T) {
	e := newTruthEnv(t)
	p := e.pipeline(t, `name: promo
environments: [{name: prod, clusters: [{name: prod-eu, agent: eu}]}]
stages:
  - id: prod
    environment: prod
    steps:
      - {id: update, type: Noop, with: {connector: relase}}
`)
	out, err := run(t, append([]string{"validate", p}, e.cli...)...)
	want := p + `: refused: connector "relase" is held by no live worker of pool "default" (live: none); agent "eu" is not registered (registered: none)`
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("want %q, got %v\n%s", want, err, out)
	}
	if out, err := run(t, "validate", p); err != nil {
		t.Fatalf("without --server only the file is checked: %v %s", err, out)
	}
	liveWorkerAndAgent(t, e.nats, "relase", "eu")
	if out, err := run(t, append([]string{"workers"}, e.cli...)...); err != nil || !regexp.MustCompile(`w-relase +default +relase `).MatchString(out) {
		t.Fatalf("workers does not list the worker's connectors: %v\n%s", err, out)
	}
	if out, err := run(t, append([]string{"validate", p}, e.cli...)...); err != nil || !strings.Contains(out, "ok (pipeline promo, 1 stages, connectors and agents live on") {
		t.Fatalf("with both live: %v %s", err, out)
	}
	if out, _ := run(t, append([]string{"status", "--json"}, e.cli...)...); strings.TrimSpace(out) != "[]" {
		t.Fatalf("validate started a run: %s", out)
	}
}
