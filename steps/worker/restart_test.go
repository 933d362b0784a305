package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// execLog counts executions of the test's slow step: how many run at once, and in all.
type execLog struct {
	mu            sync.Mutex
	running, peak int
	total         int
	started       chan string // the worker id, per execution
}

func (e *execLog) step(hold time.Duration, worker string) steps.Definition {
	return e.stepOf("Slow", hold, worker)
}

func (e *execLog) stepOf(typ string, hold time.Duration, worker string) steps.Definition {
	return steps.Definition{Type: typ, New: func() steps.Step {
		return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
			e.mu.Lock()
			e.running++
			e.total++
			e.peak = max(e.peak, e.running)
			e.mu.Unlock()
			defer func() { e.mu.Lock(); e.running--; e.mu.Unlock() }()
			select {
			case e.started <- worker:
			default:
			}
			select {
			case <-time.After(hold):
				return steps.Done(nil), nil
			case <-ctx.Done():
				return steps.Result{}, ctx.Err()
			}
		})
	}}
}

func (e *execLog) counts() (peak, total, running int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.peak, e.total, e.running
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startServer(t *testing.T, dir, addr string) *server.Server {
	t.Helper()
	var srv *server.Server
	var err error
	// The port of the server just shut down may take a moment to be free again.
	for i := 0; i < 50; i++ {
		if srv, err = queue.StartEmbedded(dir, addr); err == nil {
			return srv
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("embedded NATS on %s: %v", addr, err)
	return nil
}

// leaseEnv is an embedded NATS server on TCP with two workers (w1, w2, one slot each) that run
// the Slow step, each on its own connection.
type leaseEnv struct {
	t           *testing.T
	ctx         context.Context
	dir, addr   string
	srv         *server.Server
	admin       *queue.Conn
	conns       map[string]*queue.Conn
	ex          *execLog
	ackWait     time.Duration
	hold        time.Duration
	stopWorkers func()
}

func newLeaseEnv(t *testing.T, ackWait, hold time.Duration) *leaseEnv {
	e := &leaseEnv{t: t, dir: t.TempDir(), addr: freeAddr(t), conns: map[string]*queue.Conn{}, ackWait: ackWait, hold: hold,
		ex: &execLog{started: make(chan string, 4)}}
	e.srv = startServer(t, e.dir, e.addr)
	t.Cleanup(func() { e.srv.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	e.ctx = ctx
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	open := func(name string) *queue.Conn {
		c, err := queue.Open(ctx, queue.Options{URL: "nats://" + e.addr, Name: name, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	e.admin = open("admin")
	if err := queue.Setup(ctx, e.admin.JS, 1); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, id := range []string{"w1", "w2"} {
		reg := steps.NewRegistry()
		reg.Register(e.ex.step(hold, id))
		reg.Register(e.ex.stepOf(steps.TypeCleanup, hold, id))
		w := &Worker{ID: id, Concurrency: 1, Registry: reg, Log: log, StreamResults: true,
			Tuning: queue.ConsumerTuning{AckWait: ackWait, MaxDeliver: 5}, DrainTimeout: time.Second}
		c := open(id)
		e.conns[id] = c
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx, c) }()
	}
	e.stopWorkers = func() { stopWorkers(); wg.Wait() }
	t.Cleanup(e.stopWorkers)
	// Both workers must have their consumers before the job goes out.
	for deadline := time.Now().Add(20 * time.Second); ; {
		n := 0
		if b, err := queue.OpenBuckets(ctx, e.admin.JS); err == nil {
			if keys, err := b.Workers.ListKeys(ctx); err == nil {
				for range keys.Keys() {
					n++
				}
			}
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workers did not register")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return e
}

// start publishes the job and returns the id of the worker that started it.
func (e *leaseEnv) start() string {
	return e.startJob(&envelope.Job{V: envelope.Version, Run: "r1", Pipeline: "p", Stage: "s", Step: "slow", Type: "Slow", Pool: "default", Attempt: 1})
}

func (e *leaseEnv) startJob(job *envelope.Job) string {
	data, _ := json.Marshal(job)
	if _, err := e.admin.JS.Publish(e.ctx, queue.JobSubject("default"), data, jetstream.WithMsgID(job.ID())); err != nil {
		e.t.Fatal(err)
	}
	select {
	case id := <-e.ex.started:
		return id
	case <-e.ctx.Done():
		e.t.Fatal("the job never started")
	}
	return ""
}

// result waits for the job's result in the events stream.
func (e *leaseEnv) result(within time.Duration) envelope.Event { return e.resultOf("r1", within) }

func (e *leaseEnv) resultOf(run string, within time.Duration) envelope.Event {
	events, err := e.admin.JS.Stream(e.ctx, queue.StreamEvents)
	if err != nil {
		e.t.Fatal(err)
	}
	for deadline := time.Now().Add(within); ; {
		got, err := events.GetLastMsgForSubject(e.ctx, queue.EventSubject(run, queue.EvResult))
		if err == nil {
			var ev envelope.Event
			if err := json.Unmarshal(got.Data, &ev); err != nil || ev.Result == nil {
				e.t.Fatalf("result = %s (%v)", got.Data, err)
			}
			return ev
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no result for the job: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRunningJobNotRedeliveredAcrossServerRestart: a worker runs a long step; the NATS server
// stops (its consumer state says when the job's last heartbeat came) and comes back on the
// same store dir after longer than AckWait. The server then finds the job's ack deadline
// passed and redelivers it at once, before the running worker has reconnected; the second
// worker must not run it while the first still does (chaos seed 11: UpdateReleaseRepo jobs
// ran twice at the same time after a server restart). The job completes exactly once.
func TestRunningJobNotRedeliveredAcrossServerRestart(t *testing.T) {
	// Not parallel: its server comes back on the same port, which a test starting meanwhile
	// could take (freeAddr).
	const ackWait = 2 * time.Second
	e := newLeaseEnv(t, ackWait, 9*time.Second)
	e.start()
	time.Sleep(ackWait / 2)
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	time.Sleep(ackWait + ackWait/2) // down for longer than AckWait: the job's ack deadline passes
	e.srv = startServer(t, e.dir, e.addr)

	ev := e.result(e.hold + 20*time.Second)
	time.Sleep(2 * ackWait) // a redelivery would start meanwhile
	peak, total, running := e.ex.counts()
	if peak != 1 || total != 1 || running != 0 {
		t.Fatalf("job ran %d times, %d at once at the peak (%d still running); want once", total, peak, running)
	}
	if ev.Result.Status != steps.Succeeded {
		t.Fatalf("result = %+v", ev.Result)
	}
}

// TestDeadWorkersJobTakenOver: the worker running a job loses its connection for good (as when
// it is killed). The redelivered job finds its execution lease held by a worker that neither
// answers nor renews, takes it over after the takeover window, and completes on the other
// worker: a lease never strands a job.
func TestDeadWorkersJobTakenOver(t *testing.T) {
	t.Parallel() // its own server on its own port
	const ackWait = 2 * time.Second
	e := newLeaseEnv(t, ackWait, 3*time.Second)
	first := e.start()
	other := map[string]string{"w1": "w2", "w2": "w1"}[first]
	e.conns[first].NC.Close() // cut off: no heartbeat, no lease renewal, no answer, no result
	ev := e.result(30 * time.Second)
	if ev.Worker != other || ev.Result.Status != steps.Succeeded {
		t.Fatalf("result from %q: %+v; want success from %s", ev.Worker, ev.Result, other)
	}
	if _, total, _ := e.ex.counts(); total != 2 {
		t.Fatalf("job ran %d times; want 2 (the cut-off worker's and the takeover)", total)
	}
}

// A run's cancel stops its running step jobs, but not its cleanup job: that job exists because
// the run ended (failed or cancelled) and must close the PRs it opened. The cancel of a run
// that is cancelled while its cleanup already runs used to kill the cleanup ("context
// canceled"), leaving the PR and its branch behind (steps TestFailedAndCancelledRunsLeaveNoDebris
// under load).
func TestRunCancelSparesItsCleanupJob(t *testing.T) {
	t.Parallel() // its own server on its own port
	e := newLeaseEnv(t, 5*time.Second, 1500*time.Millisecond)
	e.startJob(&envelope.Job{V: envelope.Version, Run: "r2", Pipeline: "p", Stage: "_cleanup", Step: "cleanup", Type: steps.TypeCleanup, Pool: "default", Attempt: 1})
	if err := e.admin.NC.Publish(queue.CancelSubject, []byte("r2")); err != nil {
		t.Fatal(err)
	}
	if ev := e.resultOf("r2", 20*time.Second); ev.Result.Status != steps.Succeeded {
		t.Fatalf("cleanup job after its run's cancel: %+v", ev.Result)
	}
	// A step job of a run is still stopped by the run's cancel.
	e.startJob(&envelope.Job{V: envelope.Version, Run: "r3", Pipeline: "p", Stage: "s", Step: "slow", Type: "Slow", Pool: "default", Attempt: 1})
	if err := e.admin.NC.Publish(queue.CancelSubject, []byte("r3")); err != nil {
		t.Fatal(err)
	}
	if ev := e.resultOf("r3", 20*time.Second); ev.Result.Status != steps.Failed || ev.Result.Message != "cancelled" {
		t.Fatalf("step job after its run's cancel: %+v", ev.Result)
	}
}

// tcpQueue starts an embedded NATS server on TCP with prflow's streams and buckets set up,
// for tests that run a real worker on it. It returns a context that ends after timeout, the
// warning-level logger the connections use, the admin connection and a way to open more.
func tcpQueue(t *testing.T, timeout time.Duration) (context.Context, *slog.Logger, *queue.Conn, func(name string) *queue.Conn) {
	t.Helper()
	dir, addr := t.TempDir(), freeAddr(t)
	srv := startServer(t, dir, addr)
	t.Cleanup(func() { srv.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	open := func(name string) *queue.Conn {
		c, err := queue.Open(ctx, queue.Options{URL: "nats://" + addr, Name: name, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	admin := open("admin")
	if err := queue.Setup(ctx, admin.JS, 1); err != nil {
		t.Fatal(err)
	}
	return ctx, log, admin, open
}
