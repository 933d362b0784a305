// Package ctltest runs a whole prflow in a test: an embedded NATS server, a controller and
// workers in process, so step and end-to-end tests exercise the real dispatch, parking and
// waking paths.
package ctltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

// LongEnv is the environment variable that selects the long forms of the tests (`task
// test-long`): more concurrent runs, more repetitions. CI runs the short forms, which make the
// same assertions on fewer runs.
const LongEnv = "PRFLOW_TEST_LONG"

// Long reports whether the long forms of the tests were asked for (PRFLOW_TEST_LONG=1).
func Long() bool { return os.Getenv(LongEnv) == "1" }

// Pick returns long when the long forms were asked for, else short.
func Pick(short, long int) int {
	if Long() {
		return long
	}
	return short
}

// Options configure an Env.
type Options struct {
	Workers     int // in-process workers (default 1)
	Concurrency int // jobs per worker (default 4)
	Registry    *steps.Registry
	Services    map[string]any // worker services (steps.ServiceSCM, …); locks are added
	Secrets     []string
	Tuning      queue.ConsumerTuning
	Listen      string // embedded NATS TCP address for out-of-process workers/agents
	Dir         string
	Controller  []controller.Option // extra controller options (e.g. a source converter)
	Audit       bool                // keep an audit log (stream PRFLOW_AUDIT, default retention)
	// Quiet logs warnings and errors only: benchmarks of many runs, whose debug lines would
	// otherwise fill Logs (kept in memory) with several lines per step.
	Quiet bool
}

// Env is a running prflow.
type Env struct {
	T      testing.TB
	Conn   *queue.Conn
	Ctl    *controller.Controller
	Logs   *Buffer
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	opts   Options
}

// Buffer collects log output safely.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything logged so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Tail returns the last n lines logged so far.
func (s *Buffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(s.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// New starts NATS, a controller and workers; they stop at test cleanup.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	if o.Registry == nil {
		o.Registry = steps.Default
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	e := &Env{T: t, Logs: &Buffer{}, opts: o}
	level := slog.LevelDebug
	if o.Quiet {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewJSONHandler(e.Logs, &slog.HandlerOptions{Level: level}))
	e.log = log
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	conn, err := queue.Open(ctx, queue.Options{DataDir: o.Dir, Listen: o.Listen, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.Conn = conn
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	copts := []controller.Option{controller.WithRegistry(o.Registry), controller.WithLogger(log)}
	if o.Audit {
		if err := audit.Setup(ctx, conn.JS, 1, audit.DefaultRetention); err != nil {
			t.Fatal(err)
		}
		copts = append(copts, controller.WithAudit(&audit.Log{JS: conn.JS}))
	}
	ctl, err := controller.New(ctx, conn, append(copts, o.Controller...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.Ctl = ctl
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = ctl.Run(ctx) }()
	<-ctl.Ready()
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	mq, err := queue.OpenMergeQueue(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	marks, err := queue.OpenNotifyMarks(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < o.Workers; i++ {
		svc := map[string]any{}
		for k, v := range o.Services {
			svc[k] = v
		}
		id := fmt.Sprintf("w%d", i)
		svc[steps.ServiceLocks] = worker.NewLeaseLocker(b, mq, id)
		if _, ok := svc[steps.ServiceNotifyMarks]; !ok {
			svc[steps.ServiceNotifyMarks] = marks
		}
		if _, ok := svc[steps.ServiceGitOps]; !ok {
			svc[steps.ServiceGitOps] = agent.NewClient(conn.NC, b.Apps, b.Agents)
		}
		w := &worker.Worker{ID: id, Concurrency: o.Concurrency, Registry: o.Registry, Log: log,
			Services: steps.NewServices(svc), Secrets: o.Secrets, Tuning: o.Tuning, DrainTimeout: 2 * time.Second}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); _ = w.Run(ctx, conn) }()
	}
	t.Cleanup(e.Stop)
	// Runs are checked against the live workers' connectors at start: wait until they are
	// registered.
	for i := 0; i < o.Workers; i++ {
		e.WaitRegistered(fmt.Sprintf("w%d", i))
	}
	return e
}

// StartReplica starts a second controller on e's NATS with e's registry and log (and opts); it
// stops at test cleanup, before e.
func (e *Env) StartReplica(opts ...controller.Option) *controller.Controller {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ctl, err := controller.New(ctx, e.Conn, append([]controller.Option{controller.WithRegistry(e.opts.Registry), controller.WithLogger(e.log)}, opts...)...)
	if err != nil {
		cancel()
		e.T.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = ctl.Run(ctx) }()
	e.T.Cleanup(func() { cancel(); wg.Wait() })
	<-ctl.Ready()
	return ctl
}

// RegisterAgent keeps a registration of agent id in prflow-agents (agent.Heartbeat, as agents
// do) until the test ends, for pipelines that name an agent but never ask it anything.
func (e *Env) RegisterAgent(id string) {
	e.T.Helper()
	b, err := queue.OpenBuckets(context.Background(), e.Conn.JS)
	if err != nil {
		e.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := agent.Heartbeat(ctx, b.Agents, 0, func() agent.Registration {
		return agent.Registration{Agent: id, Replica: "ctltest", Kind: "simulated", Healthy: true}
	}, nil)
	if err != nil {
		cancel()
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { cancel(); <-done })
}

// StartSimAgent runs simulated agent "sim" deploying the main branch of the git repository at
// repo (quick sync timings, no log) until the test ends, and waits until it is registered.
func (e *Env) StartSimAgent(repo string) {
	e.T.Helper()
	sim, err := simagent.New(simagent.Options{AgentID: "sim", Repo: repo, Branch: "main",
		Delay: 30 * time.Millisecond, Step: 20 * time.Millisecond, Poll: 50 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sim.Run(ctx, e.Conn) }()
	e.T.Cleanup(func() { cancel(); <-done })
	e.WaitAgent("sim")
}

// WaitAgent waits until agent id has a live registration in prflow-agents (runs naming it
// are refused at start before that).
func (e *Env) WaitAgent(id string) {
	e.T.Helper()
	b, err := queue.OpenBuckets(context.Background(), e.Conn.JS)
	if err != nil {
		e.T.Fatal(err)
	}
	ac := agent.NewClient(e.Conn.NC, b.Apps, b.Agents)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := ac.Registered(context.Background(), id); err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("agent %s never registered", id)
		}
	}
}

// WaitRegistered waits until worker id is registered in prflow-workers.
func (e *Env) WaitRegistered(id string) {
	e.T.Helper()
	b, err := queue.OpenBuckets(context.Background(), e.Conn.JS)
	if err != nil {
		e.T.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := b.Workers.Get(context.Background(), id); err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("worker %s never registered", id)
		}
	}
}

// Stop shuts everything down (idempotent).
func (e *Env) Stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.wg.Wait()
	e.Conn.Close()
	e.cancel = nil
}

// Start starts a run of a pipeline source.
func (e *Env) Start(src string, inputs map[string]any) *pipelines.Run {
	e.T.Helper()
	r, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "test.yaml", Source: []byte(src), Inputs: inputs, Executor: "tester"})
	if err != nil {
		e.T.Fatalf("start: %v", err)
	}
	return r
}

// Wait waits for a run to end and returns its final state.
func (e *Env) Wait(id string, d time.Duration) *pipelines.Run {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := e.Ctl.Wait(ctx, id, nil)
	if err != nil {
		cur, _ := e.Ctl.Get(context.Background(), id)
		b, _ := json.MarshalIndent(cur, "", " ")
		e.T.Fatalf("run %s did not finish: %v\n%s", id, err, b)
	}
	return r
}

// ParkedPRs waits until step stage.step of every run in ids is parked on its PR (the step's
// memo names it, as UpdateReleaseRepo's waitForMerge does) and returns the PR numbers and the
// parked step states by run id. It fails the test after d.
func (e *Env) ParkedPRs(ids []string, stage, step string, d time.Duration) (map[string]int, map[string]*pipelines.StepRun) {
	e.T.Helper()
	prs, parked := map[string]int{}, map[string]*pipelines.StepRun{}
	for deadline := time.Now().Add(d); len(prs) < len(ids) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, id := range ids {
			cur, _ := e.Ctl.Get(context.Background(), id)
			if st := Step(cur, stage, step); st != nil && st.Status == pipelines.StWaiting {
				var m struct{ PR int }
				_ = json.Unmarshal(st.Memo, &m)
				prs[id], parked[id] = m.PR, st
			}
		}
	}
	if len(prs) != len(ids) {
		e.T.Fatalf("steps %s.%s did not park on their PRs: %v", stage, step, prs)
	}
	return prs, parked
}

// RepeatUntilStopped calls fn over and over on n goroutines, each until fn returns false or
// stop is called: load beside what a test checks. stop waits for them.
func RepeatUntilStopped(n int, fn func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if !fn() {
					return
				}
			}
		})
	}
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// CallAPI sends a request to url with a bearer token ("" sends none) and returns the status
// and body.
func CallAPI(t testing.TB, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return Send(t, req)
}

// Send sends req and returns the status and body.
func Send(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Step returns a step's state (main or rollback list).
func Step(r *pipelines.Run, stage, id string) *pipelines.StepRun {
	s := r.Find(stage)
	if s == nil {
		return nil
	}
	if st := s.Step(id, false); st != nil {
		return st
	}
	return s.Step(id, true)
}

// HeapUnder is the in-use heap (scaled from the heap profile's samples, as pprof does) of
// allocations whose stack passes through a function of the package path prefix, test code
// excluded. Benchmarks take it before and after to tell the controller's share of a heap.
func HeapUnder(prefix string) int64 {
	runtime.GC()
	runtime.GC() // the profile reflects the heap as of the last completed GC cycle
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var total float64
	for _, r := range recs {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs == 0 || !stackUnder(r.Stack(), prefix) {
			continue
		}
		avg := float64(bytes) / float64(objs)
		total += float64(bytes) / (1 - math.Exp(-avg/rate))
	}
	return int64(total)
}

func stackUnder(pcs []uintptr, prefix string) bool {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, prefix) && !strings.Contains(f.Function, "_test.") {
			return true
		}
		if !more {
			return false
		}
	}
}
