package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/chaos"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

const (
	owner, repoName = "acme", "release"
	watchDir        = "chaos"
	branchPrefix    = "prflow/cluster/"
)

// stack is prflow on a cluster: controllers, workers and the simulated agent, each with its
// own connection to its own first node.
type stack struct {
	t       testing.TB
	c       *Cluster
	logs    *ctltest.Buffer // every component's log lines; a failing test prints the tail
	log     *slog.Logger
	gitRoot string
	seed    string
	p       *local.Provider
	ctls    []*component[*controller.Controller]
	// creds, when set, gives a role's NATS user and password (TestPermissions…).
	creds func(role string) (user, password string)
}

type component[T any] struct {
	v      T
	conn   *queue.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *component[T]) stop() {
	c.cancel()
	<-c.done
	c.conn.Close()
}

func newStack(t *testing.T, c *Cluster, creds func(role string) (string, string)) *stack {
	s := &stack{t: t, c: c, logs: &ctltest.Buffer{}, creds: creds}
	s.log = slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			// PRFLOW_CLUSTER_LOG=FILE keeps every log line of a failed test.
			if f := os.Getenv("PRFLOW_CLUSTER_LOG"); f != "" {
				_ = os.WriteFile(f, []byte(s.logs.String()), 0o644)
			}
			t.Logf("last log lines:\n%s", s.logs.Tail(60))
		}
	})
	s.gitRoot = filepath.Join(t.TempDir(), "git")
	gs, err := scmtest.OpenGitServer(s.gitRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gs.Close() })
	files := examples.ReleaseRepo()
	files[watchDir+"/shared.json"] = "{\n  \"runs\": {}\n}\n"
	files[watchDir+"/onekey.json"] = "{\n  \"value\": \"seed\"\n}\n"
	if s.seed, err = gs.CreateRepo(owner, repoName, files); err != nil {
		t.Fatal(err)
	}
	if s.p, err = local.New(s.gitRoot); err != nil {
		t.Fatal(err)
	}
	return s
}

// open connects a component (role server, worker or agent) to the cluster, first to node.
func (s *stack) open(role string, node int, name string) *queue.Conn {
	s.t.Helper()
	o := queue.Options{URL: s.c.URLs(node), Name: name, Logger: s.log, InboxPrefix: queue.RoleInbox(role)}
	if s.creds != nil {
		user, pass := s.creds(role)
		o.URL = withUser(o.URL, user, pass)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := queue.Open(ctx, o)
	if err != nil {
		s.t.Fatalf("%s connects: %v", name, err)
	}
	return conn
}

// setup creates the topology with three replicas, as `prflow server --replicas 3` does.
func (s *stack) setup(node int) {
	s.t.Helper()
	conn := s.open("server", node, "setup")
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := queue.Setup(ctx, conn.JS, 3); err != nil {
		s.t.Fatalf("setup R3: %v", err)
	}
}

// controller starts a controller replica connected first to node.
func (s *stack) controller(node int, opts ...controller.Option) *component[*controller.Controller] {
	s.t.Helper()
	name := fmt.Sprintf("controller-%d", len(s.ctls))
	conn := s.open("server", node, name)
	ctx, cancel := context.WithCancel(context.Background())
	ctl, err := controller.New(ctx, conn, append([]controller.Option{controller.WithLogger(s.log.With("c", name))}, opts...)...)
	if err != nil {
		cancel()
		conn.Close()
		s.t.Fatalf("%s: %v", name, err)
	}
	cp := &component[*controller.Controller]{v: ctl, conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(cp.done); _ = ctl.Run(ctx) }()
	select {
	case <-ctl.Ready():
	case <-time.After(60 * time.Second):
		s.t.Fatalf("%s not ready in 60s", name)
	}
	s.ctls = append(s.ctls, cp)
	s.t.Cleanup(func() { cp.cancel(); <-cp.done; cp.conn.Close() })
	return cp
}

// worker starts a worker connected first to node.
func (s *stack) worker(node int, id string) {
	s.t.Helper()
	conn := s.open("worker", node, id)
	ctx, cancel := context.WithCancel(context.Background())
	if err := queue.Join(ctx, conn.JS, s.log); err != nil { // as `prflow worker` does
		s.t.Fatalf("worker %s joins: %v", id, err)
	}
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		s.t.Fatalf("worker %s: %v", id, err)
	}
	mq, err := queue.OpenMergeQueue(ctx, conn.JS)
	if err != nil {
		s.t.Fatalf("worker %s: %v", id, err)
	}
	svc := steps.NewServices(map[string]any{
		steps.ServiceSCM:    connector.Static{"release": s.p},
		steps.ServiceLocks:  worker.NewLeaseLocker(b, mq, id),
		steps.ServiceGitOps: agent.NewClient(conn.NC, b.Apps, b.Agents),
	})
	w := &worker.Worker{ID: id, Concurrency: 4, Log: s.log, Services: svc, DrainTimeout: 2 * time.Second,
		Tuning: queue.ConsumerTuning{AckWait: 6 * time.Second, MaxDeliver: 10}}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx, conn) }()
	s.t.Cleanup(func() { cancel(); <-done; conn.Close() })
}

// agent starts the simulated agent connected first to node.
func (s *stack) agent(node int) {
	s.t.Helper()
	conn := s.open("agent", node, "agent-sim")
	if err := queue.Join(context.Background(), conn.JS, s.log); err != nil { // as `prflow agent` does
		s.t.Fatalf("agent joins: %v", err)
	}
	sim, err := simagent.New(simagent.Options{AgentID: "sim", Repo: filepath.Join(s.gitRoot, owner, repoName+".git"), Branch: "main",
		Delay: 50 * time.Millisecond, Step: 30 * time.Millisecond, Poll: 100 * time.Millisecond, Log: s.log.With("c", "agent")})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sim.Run(ctx, conn) }()
	s.t.Cleanup(func() { cancel(); <-done; conn.Close() })
}

// start starts the runs of specs, alternating between controller replicas. A start refused
// because workers or the agent are not registered yet, or cut by a leader election, is
// retried with the same run id (a retry finds the run instead of starting a second one).
func (s *stack) start(specs []chaos.RunSpec) {
	s.t.Helper()
	for i, sp := range specs {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ctl := s.ctls[i%len(s.ctls)].v
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_, err := ctl.Start(ctx, controller.StartRequest{ID: sp.ID, File: sp.ID + ".yaml", Source: chaos.Pipeline("cluster", owner+"/"+repoName, sp), Executor: "tester"})
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("start %s: %v", sp.ID, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// wait polls the runs (through any live controller) until all are terminal or d passes.
func (s *stack) wait(ctl *controller.Controller, specs []chaos.RunSpec, d time.Duration) map[string]chaos.RunResult {
	out := map[string]chaos.RunResult{}
	deadline := time.Now().Add(d)
	for {
		all := true
		for _, sp := range specs {
			if r, ok := out[sp.ID]; ok && pipelines.Status(r.Status).Terminal() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := ctl.Get(ctx, sp.ID)
			cancel()
			if err != nil {
				all = false
				continue
			}
			out[sp.ID] = chaos.RunResult{Status: string(r.Status), Error: r.Error, Where: where(r)}
			all = all && r.Status.Terminal()
		}
		if all {
			return out
		}
		if time.Now().After(deadline) {
			s.t.Logf("runs not finished after %s; goroutines inside steps:\n%s", d, stepStacks())
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check runs the chaos suite's counted checks over the runs and the release repo.
func (s *stack) check(specs []chaos.RunSpec, results map[string]chaos.RunResult) {
	s.t.Helper()
	st, err := chaos.ReadRepo(filepath.Join(s.gitRoot, owner, repoName+".git"), "main", s.seed, watchDir)
	if err != nil {
		s.t.Fatal(err)
	}
	checks := chaos.Evaluate(specs, chaos.Observed{Runs: results, Repo: st, BranchPrefix: branchPrefix})
	var b strings.Builder
	failed := false
	for _, c := range checks {
		mark := "ok"
		if !c.OK() {
			mark, failed = "FAIL", true
		}
		fmt.Fprintf(&b, "  %-34s %4d %4d %s\n", c.Name, c.Counted, c.Bad, mark)
		for i, d := range c.Details {
			if i == 10 {
				break
			}
			fmt.Fprintf(&b, "      %s\n", d)
		}
	}
	// A publish a cluster refused for a moment (an election, a duplicate in flight) is
	// retried, never dropped with a warning.
	if n := strings.Count(s.logs.String(), "duplicate message id is in process"); n > 0 {
		fmt.Fprintf(&b, "  publishes dropped on \"duplicate message id is in process\": %d FAIL\n", n)
		failed = true
	}
	s.t.Logf("checks (of, misses):\n%s", b.String())
	if failed {
		s.t.Fatal("cluster run: checks failed")
	}
}

func where(r *pipelines.Run) string {
	for _, st := range r.Stages {
		for _, s := range st.Steps {
			switch s.Status {
			case pipelines.StSucceeded, pipelines.StSkipped, pipelines.StPending:
				continue
			}
			msg := st.ID + "/" + s.ID + " " + string(s.Status)
			if s.Error != "" {
				msg += " (" + s.Error + ")"
			} else if s.Wait != nil && s.Wait.Reason != "" {
				msg += " (" + s.Wait.Reason + ")"
			}
			return msg
		}
	}
	return ""
}

// specs are n promotions across the chaos suite's three contention groups, ids prefixed.
func specs(prefix string, n int) []chaos.RunSpec {
	out := chaos.Specs(n, 7)
	for i := range out {
		out[i].ID = prefix + "-" + fmt.Sprint(i)
	}
	return out
}

// withUser puts user info into every URL of a comma-separated list.
func withUser(urls, user, pass string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = strings.Replace(p, "nats://", "nats://"+user+":"+pass+"@", 1)
	}
	return strings.Join(parts, ",")
}

// stepStacks is the stack of every goroutine that is running step code: where a run that
// does not finish is stuck.
func stepStacks() string {
	buf := make([]byte, 32<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "prflow/prflow/steps.") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
