package controller

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

// logLevel is debug in tests, info in benchmarks.
var logLevel = slog.LevelDebug

// testSecret must never appear in a job, KV entry, log line or error.
const testSecret = "s3cr3t-T0KEN-value-9f8e7d"

// testSecretJSON is a secret with characters JSON escapes: masked in JSON text, it must be
// found in its escaped form too.
const testSecretJSON = `p&ss<w0rd>"q\\z`

// testRegistry has the built-in steps plus steps that exercise the runtime.
// slowStarts counts how often each Slow step started (run/step → *atomic.Int64).
var slowStarts sync.Map

func testRegistry() *steps.Registry {
	reg := steps.NewRegistry()
	for _, t := range []string{"Noop", "Wait", "Approval"} {
		d, _ := steps.Default.Lookup(t)
		reg.Register(*d)
	}
	reg.Register(steps.Definition{Type: "Flaky", New: func() steps.Step { return steps.StepFunc(runFlaky) }})
	reg.Register(steps.Definition{Type: "Boom", New: func() steps.Step {
		return steps.StepFunc(func(_ context.Context, sc *steps.Context) (steps.Result, error) {
			return steps.Result{}, steps.Terminalf("boom in %s", sc.StepID)
		})
	}})
	reg.Register(steps.Definition{Type: "FailOnce", New: func() steps.Step { return steps.StepFunc(runFailOnce) }})
	reg.Register(steps.Definition{Type: "Park", New: func() steps.Step { return steps.StepFunc(runPark) }})
	reg.Register(steps.Definition{Type: "Leaky", New: func() steps.Step { return steps.StepFunc(runLeaky) }})
	reg.Register(steps.Definition{Type: "Effect", New: func() steps.Step { return steps.StepFunc(runEffect) }})
	reg.Register(steps.Definition{Type: "Linger", Parks: true, New: func() steps.Step { return steps.StepFunc(runLinger) }})
	reg.Register(steps.Definition{Type: "Slow", New: func() steps.Step {
		return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
			n, _ := slowStarts.LoadOrStore(sc.RunID+"/"+sc.StepID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			d, _ := time.ParseDuration(fmt.Sprint(sc.Inputs["sleep"]))
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return steps.Result{}, ctx.Err()
			}
			return steps.Done(map[string]any{"delivery": sc.Delivery}), nil
		})
	}})
	// Crash kills its worker process mid-step, every time; only in a child worker process.
	reg.Register(steps.Definition{Type: "Crash", New: func() steps.Step {
		return steps.StepFunc(func(_ context.Context, sc *steps.Context) (steps.Result, error) {
			if os.Getenv("PRFLOW_TEST_WORKER_URL") == "" {
				return steps.Result{}, steps.Terminalf("Crash only runs in a child worker")
			}
			sc.Log.Error("about to crash", "err", "simulated segfault in "+sc.StepID)
			time.Sleep(300 * time.Millisecond) // let the log line reach the stream
			os.Exit(7)
			return steps.Result{}, nil
		})
	}})
	return reg
}

// flaky counts attempts per run+step in memory: transient errors until `failures` is reached.
var flaky sync.Map

func runFlaky(_ context.Context, sc *steps.Context) (steps.Result, error) {
	n, _ := flaky.LoadOrStore(sc.RunID+"/"+sc.StepID, new(atomic.Int64))
	c := n.(*atomic.Int64).Add(1)
	want := int64(toInt(sc.Inputs["failures"]))
	if c <= want {
		return steps.Result{}, fmt.Errorf("transient failure %d of %d", c, want)
	}
	return steps.Done(map[string]any{"tries": c}), nil
}

// runFailOnce fails terminally on attempt 1 and succeeds after (for the retry strategy).
func runFailOnce(_ context.Context, sc *steps.Context) (steps.Result, error) {
	if sc.Attempt < 2 {
		return steps.Fail(fmt.Sprintf("attempt %d failed", sc.Attempt)), nil
	}
	return steps.Done(map[string]any{"attempt": sc.Attempt}), nil
}

// runPark waits on an app key, a topic, or an approval signal.
func runPark(_ context.Context, sc *steps.Context) (steps.Result, error) {
	if key, _ := sc.Inputs["key"].(string); key != "" {
		if sc.WakeReason != "" && strings.HasPrefix(sc.WakeReason, "key ") {
			return steps.Done(map[string]any{"woke": sc.WakeReason, "wakes": sc.Wake}), nil
		}
		return steps.Park(steps.Wait{Keys: []string{key}, Poll: time.Hour, Reason: "waiting for " + key}, nil), nil
	}
	for _, s := range sc.Signals {
		if s.Kind == "approval" {
			if !s.Approve {
				return steps.Fail("rejected by " + s.User), nil
			}
			return steps.Done(map[string]any{"approver": s.User}), nil
		}
	}
	poll := time.Hour
	if p, ok := sc.Inputs["poll"].(string); ok {
		poll, _ = time.ParseDuration(p)
	}
	return steps.Park(steps.Wait{Topics: []string{"approval"}, Poll: poll, Reason: "waiting for approval"}, nil), nil
}

// runLeaky tries hard to leak the secret: logs it, returns it in an output and an error.
func runLeaky(_ context.Context, sc *steps.Context) (steps.Result, error) {
	sc.Log.Info("using token "+testSecret, "token", testSecret, "password", testSecretJSON)
	if sc.Inputs["fail"] == true {
		return steps.Fail("auth failed with token " + testSecret + " and password " + testSecretJSON), nil
	}
	return steps.Done(map[string]any{"header": "Bearer " + testSecret, "auth": []any{"user:" + testSecretJSON}}), nil
}

// runEffect appends the job's key to a file once per run+step (idempotent), then sleeps so a
// test can kill the worker mid-step.
func runEffect(ctx context.Context, sc *steps.Context) (steps.Result, error) {
	path, _ := sc.Inputs["file"].(string)
	key := sc.RunID + "/" + sc.StepID
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), key+"\n") {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return steps.Result{}, err
		}
		fmt.Fprintln(f, key)
		f.Close()
	}
	if d, ok := sc.Inputs["sleep"].(string); ok {
		dd, _ := time.ParseDuration(d)
		select {
		case <-time.After(dd):
		case <-ctx.Done():
			return steps.Result{}, ctx.Err()
		}
	}
	return steps.Done(map[string]any{"key": key}), nil
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		return int(x)
	case uint64:
		return int(x)
	}
	return 0
}

type env struct {
	t      *testing.T
	dir    string
	conn   *queue.Conn
	ctl    *Controller
	reg    *steps.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
	logBuf *syncBuf
	log    *slog.Logger
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type envOpts struct {
	workers     int // worker processes in-process (each Concurrency 1 unless concurrency set)
	concurrency int
	listen      string
	tuning      queue.ConsumerTuning
	dir         string
	ctl         []Option // extra controller options
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{t: t, reg: testRegistry(), logBuf: &syncBuf{}}
	e.dir = o.dir
	if e.dir == "" {
		e.dir = t.TempDir()
	}
	e.log = slog.New(slog.NewJSONHandler(io.MultiWriter(e.logBuf), &slog.HandlerOptions{Level: logLevel}))
	e.start(o)
	t.Cleanup(e.stop)
	return e
}

func (e *env) start(o envOpts) {
	t := e.t
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	conn, err := queue.Open(ctx, queue.Options{DataDir: e.dir, Listen: o.listen, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	e.conn = conn
	ctl, err := New(ctx, conn, append([]Option{WithRegistry(e.reg), WithLogger(e.log)}, o.ctl...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.ctl = ctl
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = ctl.Run(ctx) }()
	<-ctl.Ready()
	if o.concurrency == 0 {
		o.concurrency = 4
	}
	for i := 0; i < o.workers; i++ {
		w := &worker.Worker{ID: fmt.Sprintf("w%d", i), Concurrency: o.concurrency, Registry: e.reg, Log: e.log,
			Secrets: []string{testSecret, testSecretJSON}, Tuning: o.tuning, DrainTimeout: 2 * time.Second}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); _ = w.Run(ctx, conn) }()
	}
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.wg.Wait()
	e.conn.Close()
	e.cancel = nil
}

// replica starts a second controller on e's NATS with the test's registry and log (and opts);
// it stops at test cleanup, before e.
func (e *env) replica(opts ...Option) *Controller {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ctl, err := New(ctx, e.conn, append([]Option{WithRegistry(e.reg), WithLogger(e.log)}, opts...)...)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = ctl.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	<-ctl.Ready()
	return ctl
}

func (e *env) startRun(src string, inputs map[string]any) *pipelines.Run {
	e.t.Helper()
	r, err := e.ctl.Start(context.Background(), StartRequest{File: "test.yaml", Source: []byte(src), Inputs: inputs, Executor: "tester"})
	if err != nil {
		e.t.Fatalf("start: %v", err)
	}
	return r
}

func (e *env) wait(id string, d time.Duration) *pipelines.Run {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := e.ctl.Wait(ctx, id, nil)
	if err != nil {
		cur, _ := e.ctl.Get(context.Background(), id)
		b, _ := json.MarshalIndent(cur, "", " ")
		e.t.Fatalf("run %s did not finish: %v\n%s", id, err, b)
	}
	return r
}

// serve is the controller's HTTP API with auth; it closes at test cleanup.
func (e *env) serve(auth *Auth) *httptest.Server {
	srv := httptest.NewServer(e.ctl.Handler(auth))
	e.t.Cleanup(srv.Close)
	return srv
}

// tokensAuth writes text as a tokens file (--tokens) and loads it.
func tokensAuth(t *testing.T, text string) *Auth {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

// callAPI sends a request with a bearer token ("" sends none) and returns the status and body.
func callAPI(t testing.TB, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// repeatUntilStopped calls fn over and over on n goroutines, each until fn returns false or
// stop is called; stop waits for them.
func repeatUntilStopped(n int, fn func() bool) (stop func()) {
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

// eventually polls cond until it holds, failing the test with msg() after d.
func eventually(t testing.TB, d time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
	}
}

func step(r *pipelines.Run, stage, id string) *pipelines.StepRun {
	s := r.Find(stage)
	if s == nil {
		return nil
	}
	if st := s.Step(id, false); st != nil {
		return st
	}
	return s.Step(id, true)
}

func sha256hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
