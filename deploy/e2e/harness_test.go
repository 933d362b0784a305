// Package e2e runs the GitOps steps end to end: an embedded NATS, the controller and a worker
// in process, the Argo CD agent (deploy/argocd) bridging to the fake Argo CD
// (deploy/argocdtest), and pipelines whose steps park and wake through the real paths.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

const repoURL = "https://git.example/release.git"

// parallelTests: every test here builds its own stack (embedded NATS in its own data
// directory, fake Argo CD, agent, controller, worker, log buffer and metrics registry) and
// mostly waits (fake latencies, parked steps, graces), so nearly all call t.Parallel and the
// package runs 4 at a time (TestMain). One at a time, before the others, run those whose
// outcome hangs on a step deadline of a few seconds being reached at the right moment or not
// at all (TestGitOpsSyncTimeoutSemantics, TestTimeoutWithFreshViewStillRollsBack,
// TestDeadlineDuringOutageFailsWithoutRollback, TestRepoServerDownUntilDeadlineFailsWithoutRollback,
// TestGitOpsSyncWindowTimeoutStillApplies, TestStageGateOnStaleView's 3s soak), the one that
// bounds a failover's wall time (TestAgentCrashOtherReplicaTakesOver), the CPU-heavy
// TestGitOpsSyncHundredApps and the real-cluster tests (one shared cluster).
// Tests run next to each other slowed those down into failures at load 25-30
// (docs/test-speed-e2e.md).

func configMap(name, simulate string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  simulate: " + simulate + "\n"
}

// registry has the GitOps steps, Noop and Wait, and a stand-in MergePR whose commitId is its
// `commit` input (the real MergePR needs a forge; GitOpsSync only reads its output).
func registry() *steps.Registry {
	reg := steps.NewRegistry()
	for _, t := range []string{"GitOpsSync", "FetchLinkedApps", "GetAppDetails", "UpdateGitOpsApp", "StageGate", "Noop", "Wait"} {
		d, ok := steps.Default.Lookup(t)
		if !ok {
			panic("step type " + t + " not registered")
		}
		reg.Register(*d)
	}
	reg.Register(steps.Definition{Type: "MergePR", New: func() steps.Step {
		return steps.StepFunc(func(_ context.Context, sc *steps.Context) (steps.Result, error) {
			return steps.Done(map[string]any{"commitId": sc.Inputs["commit"]}), nil
		})
	}})
	return reg
}

type stackOpts struct {
	argo        []argocdtest.Option
	concurrency int
	metrics     *controller.Metrics
	quiet       bool // info-level logs to nowhere (benchmarks)
	// gitReader, when set, is how the fake Argo CD reads git (default: the stack's MemGit).
	gitReader argocdtest.GitReader
	// services are added to the worker's (e.g. steps.ServiceSCM); registry replaces registry().
	services map[string]any
	registry *steps.Registry
	noAgent  bool // start no agent (the test starts it with startAgent)
	noWorker bool // start no worker (the test starts it with startWorker)
	// workerConn gives the worker (and its agent client) its own NATS connection, as a worker
	// process has, instead of sharing the controller's.
	workerConn bool
	audit      bool // keep an audit log, as prflow server does
	// appsetRefresh configures the agents' ApplicationSet refresh (default: annotate).
	appsetRefresh argocd.AppSetRefreshOptions
	// clock, when set, is the time of the fake Argo CD and of the agents' sync window
	// evaluation (which then looks for windows opening every 20ms).
	clock func() time.Time
	// windowRefresh is how often the agents read AppProjects again (with clock; default 200ms).
	windowRefresh time.Duration
}

// stack is a whole prflow plus a fake Argo CD and one agent "eu" for it.
type stack struct {
	t        testing.TB
	argo     *argocdtest.Server
	git      *argocdtest.MemGit
	sha      string
	conn     *queue.Conn
	b        *queue.Buckets
	ctl      *controller.Controller
	client   *agent.Client
	agent    *argocd.Agent
	replicas []*replica
	log      *slog.Logger
	ctx      context.Context
	logs     *logBuf
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	// appsetRefresh is stackOpts.appsetRefresh, for every replica started.
	appsetRefresh argocd.AppSetRefreshOptions
	clock         func() time.Time // stackOpts.clock
	windowRefresh time.Duration    // stackOpts.windowRefresh
	startWorker   func()           // starts the stack's worker (once; newStack does unless noWorker)
}

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	s := &stack{t: t, git: argocdtest.NewMemGit(), logs: &logBuf{}, appsetRefresh: o.appsetRefresh, clock: o.clock,
		windowRefresh: o.windowRefresh}
	s.sha = s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy")})
	var reader argocdtest.GitReader = s.git
	if o.gitReader != nil {
		reader = o.gitReader
	}
	aopts := []argocdtest.Option{argocdtest.WithGitReader(reader), argocdtest.WithTimeline(3*time.Millisecond, 1)}
	if o.clock != nil {
		aopts = append(aopts, argocdtest.WithClock(o.clock))
	}
	s.argo = argocdtest.New(append(aopts, o.argo...)...)
	var log *slog.Logger
	if o.quiet {
		log = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	} else {
		log = slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.ctx, s.log = cancel, ctx, log
	conn, err := queue.Open(ctx, queue.Options{DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s.conn = conn
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	if s.b, err = queue.OpenBuckets(ctx, conn.JS); err != nil {
		t.Fatal(err)
	}
	reg := o.registry
	if reg == nil {
		reg = registry()
	}
	copts := []controller.Option{controller.WithRegistry(reg), controller.WithLogger(log)}
	if o.metrics != nil {
		copts = append(copts, controller.WithMetrics(o.metrics))
	}
	if o.audit {
		if err := audit.Setup(ctx, conn.JS, 1, audit.DefaultRetention); err != nil {
			t.Fatal(err)
		}
		copts = append(copts, controller.WithAudit(&audit.Log{JS: conn.JS}))
	}
	if o.noAgent {
		// These tests start runs while the agent is down, as if it had died after the run
		// started (the run-start check would refuse an agent that is not live).
		copts = append(copts, controller.WithoutStartChecks())
	}
	if s.ctl, err = controller.New(ctx, conn, copts...); err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = s.ctl.Run(ctx) }()
	<-s.ctl.Ready()

	s.client = agent.NewClient(conn.NC, s.b.Apps, s.b.Agents)
	if o.concurrency == 0 {
		o.concurrency = 8
	}
	wconn, wclient := conn, s.client
	if o.workerConn {
		nc, err := nats.Connect("", nats.InProcessServer(conn.Embedded()))
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		wb, err := queue.OpenBuckets(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		wconn, wclient = &queue.Conn{NC: nc, JS: js}, agent.NewClient(nc, wb.Apps, wb.Agents)
	}
	services := map[string]any{steps.ServiceGitOps: wclient}
	for k, v := range o.services {
		services[k] = v
	}
	w := &worker.Worker{ID: "w1", Concurrency: o.concurrency, Registry: reg, Log: log, DrainTimeout: 2 * time.Second,
		Services: steps.NewServices(services)}
	s.startWorker = sync.OnceFunc(func() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = w.Run(ctx, wconn)
			if wconn != conn {
				wconn.NC.Close()
			}
		}()
	})
	if !o.noWorker {
		s.startWorker()
	}

	t.Cleanup(s.stop)
	if !o.noAgent {
		s.agent, _ = s.startAgent("r1")
	}
	return s
}

// newWebStack is newStack with app web (apps/web) added and recorded by the agent.
func newWebStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	s := newStack(t, o)
	s.addApp(app("web", "apps/web", nil))
	s.waitRecord("web")
	return s
}

// replica is one agent replica on its own NATS connection (so closing it is a crash).
type replica struct {
	a    *argocd.Agent
	nc   *nats.Conn
	stop func()
}

// runAgent starts a replica of agent "eu" on its own NATS connection; it stops with the stack.
func (s *stack) runAgent(name string) *replica {
	s.t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(s.conn.Embedded()))
	if err != nil {
		s.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	c, err := argocd.NewClient(argocd.ClientOptions{URL: s.argo.URL(), Token: s.argo.Token()})
	if err != nil {
		s.t.Fatal(err)
	}
	o := argocd.Options{AgentID: "eu", Replica: name, Client: c, Log: s.log,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, LeaderRetry: 100 * time.Millisecond,
		AppSetRefresh: s.appsetRefresh}
	if s.clock != nil {
		o.Now, o.SyncWindowTick, o.SyncWindowRefresh = s.clock, 20*time.Millisecond, 200*time.Millisecond
		if s.windowRefresh > 0 {
			o.SyncWindowRefresh = s.windowRefresh
		}
	}
	a, err := argocd.New(o)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		_ = a.Run(ctx, &queue.Conn{NC: nc, JS: js})
		nc.Close()
	}()
	r := &replica{a: a, nc: nc, stop: func() { cancel(); <-done }}
	s.replicas = append(s.replicas, r)
	return r
}

// startAgent runs a replica and waits until it leads and the agent's view is fresh.
func (s *stack) startAgent(name string) (*argocd.Agent, func()) {
	s.t.Helper()
	r := s.runAgent(name)
	deadline := time.Now().Add(10 * time.Second)
	for !(r.a.IsLeader() && s.client.View(s.ctx, "eu").Fresh) {
		if time.Now().After(deadline) {
			s.t.Fatal("agent did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r.a, r.stop
}

// startAgentFollower runs another replica and waits until it is registered.
func (s *stack) startAgentFollower(name string) (*argocd.Agent, func()) {
	s.t.Helper()
	r := s.runAgent(name)
	deadline := time.Now().Add(10 * time.Second)
	for {
		regs, _ := s.client.Registered(s.ctx, "eu")
		for _, g := range regs {
			if g.Replica == name {
				return r.a, r.stop
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatal("agent replica did not register")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runUntilEnd runs run in its own goroutine until the test ends: the cleanup cancels run's
// context and waits for it to return.
func runUntilEnd(t testing.TB, run func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// runSimAgent runs a simulated agent with o at the e2e tests' pace, logging nowhere, on conn
// until the test ends.
func runSimAgent(t testing.TB, o simagent.Options, conn *queue.Conn) {
	t.Helper()
	o.Delay, o.Step, o.Poll = 30*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	sim, err := simagent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, func(ctx context.Context) { _ = sim.Run(ctx, conn) })
}

// crashAgent kills the first replica as SIGKILL would, as far as NATS can tell: its
// connection drops with no lease release and no goodbye.
func (s *stack) crashAgent() {
	s.replicas[0].nc.Close()
}

func (s *stack) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.conn.Close()
	s.argo.Close()
	s.cancel = nil
}

func app(name, path string, labels map[string]string) argocdtest.Application {
	return argocdtest.Application{
		Metadata: argocdtest.ObjectMeta{Name: name, Labels: labels},
		Spec: argocdtest.ApplicationSpec{
			Project:     "default",
			Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: path, TargetRevision: "main"},
			Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "shop"},
		},
	}
}

func (s *stack) addApp(a argocdtest.Application, opts ...argocdtest.AppOption) {
	s.t.Helper()
	if err := s.argo.AddApp(a, opts...); err != nil {
		s.t.Fatal(err)
	}
}

// waitRecord waits until the agent reported the app (any state).
func (s *stack) waitRecord(name string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.client.Status(context.Background(), "eu", name); err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no status record for %s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *stack) start(src string, inputs map[string]any) *pipelines.Run {
	s.t.Helper()
	r, err := s.ctl.Start(context.Background(), controller.StartRequest{File: "test.yaml", Source: []byte(src), Inputs: inputs, Executor: "tester"})
	if err != nil {
		s.t.Fatalf("start: %v", err)
	}
	return r
}

func (s *stack) wait(id string, d time.Duration) *pipelines.Run {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := s.ctl.Wait(ctx, id, nil)
	if err != nil {
		cur, _ := s.ctl.Get(context.Background(), id)
		b, _ := json.MarshalIndent(cur, "", " ")
		s.t.Fatalf("run %s did not finish: %v\n%s", id, err, b)
	}
	return r
}

// waitStep waits until a step satisfies cond and returns the run.
func (s *stack) waitStep(id, stage, stepID, what string, cond func(*pipelines.StepRun) bool) *pipelines.Run {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := s.ctl.Get(context.Background(), id)
		if err == nil {
			if st := step(r, stage, stepID); st != nil && cond(st) {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(r, "", " ")
			s.t.Fatalf("step %s/%s: timed out waiting for %s\n%s", stage, stepID, what, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startParkedOnHealth holds app's health at Progressing after its syncs, starts src with the
// stack's commit and waits until the dev stage's sync step parks waiting for that health.
func (s *stack) startParkedOnHealth(app, src string) *pipelines.Run {
	s.t.Helper()
	if err := s.argo.ScriptSync(app, argocdtest.SyncScript{Progressing: -1}); err != nil {
		s.t.Fatal(err)
	}
	run := s.start(src, map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked waiting for health Progressing", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "health Progressing")
	})
	return run
}

func step(r *pipelines.Run, stage, id string) *pipelines.StepRun {
	sr := r.Find(stage)
	if sr == nil {
		return nil
	}
	return sr.Step(id, false)
}

// syncRequests returns the bodies of the sync calls Argo CD answered for an app.
func (s *stack) syncRequests(app string) []map[string]any {
	var out []map[string]any
	for _, r := range s.argo.Requests() {
		if r.Method == "POST" && r.Path == "/api/v1/applications/"+app+"/sync" && r.Status == 200 {
			var m map[string]any
			_ = json.Unmarshal(r.Body, &m)
			out = append(out, m)
		}
	}
	return out
}

func appsOut(st *pipelines.StepRun) []map[string]any {
	list, _ := st.Outputs["applications"].([]any)
	var out []map[string]any
	for _, e := range list {
		m, _ := e.(map[string]any)
		out = append(out, m)
	}
	return out
}

// pipeline renders a one-stage pipeline: an optional MergePR with ${{ inputs.commit }},
// then the given steps (YAML, indented as a list under steps:).
func pipeline(stepsYAML string, withMerge bool) string {
	var b strings.Builder
	b.WriteString(`name: deploy
inputs:
  commit: {type: string, default: ""}
  app: {type: string, default: ""}
service: {name: web}
environments:
  - name: dev
    clusters: [{name: in-cluster, agent: eu}]
stages:
  - id: dev
    environment: dev
    steps:
`)
	if withMerge {
		b.WriteString("      - {id: merge, type: MergePR, with: {commit: \"${{ inputs.commit }}\"}}\n")
	}
	b.WriteString(stepsYAML)
	return b.String()
}

func describeRun(r *pipelines.Run) string {
	b, _ := json.MarshalIndent(r, "", " ")
	return fmt.Sprintf("%s", b)
}
