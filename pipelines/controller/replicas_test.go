package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/worker"
)

// Two controller replicas share the event consumer, so a run's events are split between them
// and their revision-checked updates collide. Every run must still finish exactly as written,
// and Wait on either replica must see the end, whichever replica wrote it.
func TestTwoControllerReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1, concurrency: 8})
	second := e.replica(WithEventWorkers(4))

	src := `
name: replicas
stages:
  - id: a
    steps:
      - {id: one, type: Noop, with: {outputs: {n: 1}}}
      - {id: two, type: Noop, with: {outputs: {n: "${{ steps.one.outputs.n + 1 }}"}}}
  - id: b
    needs: [a]
    steps:
      - {id: three, type: Noop, with: {outputs: {n: "${{ stages.a.steps.two.outputs.n + 1 }}"}}}
`
	const runs = 30
	errs := make(chan error, runs)
	for i := 0; i < runs; i++ {
		go func(i int) {
			starter, waiter := e.ctl, second
			if i%2 == 1 {
				starter, waiter = second, e.ctl
			}
			r, err := starter.Start(context.Background(), StartRequest{File: "r.yaml", Source: []byte(src)})
			if err != nil {
				errs <- err
				return
			}
			wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
			defer wcancel()
			fin, err := waiter.Wait(wctx, r.ID, nil)
			if err != nil {
				errs <- fmt.Errorf("run %s: %w", r.ID, err)
				return
			}
			if fin.Status != pipelines.StSucceeded {
				errs <- fmt.Errorf("run %s ended %s: %s", r.ID, fin.Status, fin.Error)
				return
			}
			got := fin.Stages[1].Steps[0].Outputs["n"]
			if fmt.Sprint(got) != "3" {
				errs <- fmt.Errorf("run %s: stage b got n=%v, want 3", r.ID, got)
				return
			}
			errs <- nil
		}(i)
	}
	for i := 0; i < runs; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// Neither replica keeps a copy of, or a note about its writes to, a run that ended,
	// whichever replica ended it.
	for _, c := range []*Controller{e.ctl, second} {
		n := 0
		eventually(t, 10*time.Second, func() bool {
			n = 0
			c.cache.Range(func(k, _ any) bool { n++; return true })
			c.own.mu.Lock()
			n += len(c.own.done) + len(c.own.inflight)
			c.own.mu.Unlock()
			return n == 0
		}, func() string { return fmt.Sprintf("a replica still holds %d entries for ended runs", n) })
	}
}

// Wait on a run that has already ended returns its final state at once.
func TestWaitOnFinishedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	r, err := e.ctl.Start(context.Background(), StartRequest{File: "w.yaml", Source: []byte("name: w\nstages:\n  - id: s\n    steps:\n      - {id: x, type: Noop}\n")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.ctl.Wait(ctx, r.ID, nil); err != nil {
		t.Fatal(err)
	}
	again, err := e.ctl.Wait(ctx, r.ID, nil)
	if err != nil || again.Status != pipelines.StSucceeded {
		t.Fatalf("second Wait: %v, %v", again, err)
	}
	if _, err := e.ctl.Wait(ctx, "no-such-run", nil); err == nil {
		t.Fatal("Wait on an unknown run returned no error")
	}
	e.ctl.mu.Lock()
	left := len(e.ctl.waiters)
	e.ctl.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d Wait registrations left behind", left)
	}
}

// Results go straight to a controller while one answers, and Start dispatches a run's first
// steps itself: the events stream then stores nothing for a run that only runs steps. With no
// controller answering, results take the stream and wait there (see the restart tests).
func TestResultsSkipTheEventsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	if stored := eventsStored(t, e, "name: d\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n      - {id: c, type: Noop}\n      - {id: d, type: Noop}\n"); stored != 0 {
		t.Fatalf("the events stream stored %d messages for a 4-step run; want none", stored)
	}
}

// eventsStored runs src to success and says how many messages the events stream stored
// meanwhile.
func eventsStored(t *testing.T, e *env, src string) uint64 {
	t.Helper()
	ctx := context.Background()
	stream, err := e.conn.JS.Stream(ctx, queue.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := stream.Info(ctx)
	r := e.startRun(src, nil)
	if fin := e.wait(r.ID, 30*time.Second); fin.Status != pipelines.StSucceeded {
		t.Fatalf("run ended %s: %s", fin.Status, fin.Error)
	}
	after, _ := stream.Info(ctx)
	return after.State.LastSeq - before.State.LastSeq
}

// A direct result that is not a result of the run its subject names is refused (the worker
// then uses the stream, whose checks apply), and nothing is applied.
func TestDirectResultRefusesOtherEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, payload := range map[string]string{
		"not JSON":       `{"v":1,"kind":`,
		"a cancel":       `{"v":1,"kind":"cancel","run":"r1"}`,
		"other run":      `{"v":1,"kind":"result","run":"r2","stage":"s","step":"x","attempt":1,"result":{"status":"Succeeded"}}`,
		"future version": `{"v":9,"kind":"result","run":"r1","stage":"s","step":"x","attempt":1,"result":{"status":"Succeeded"}}`,
	} {
		reply, err := e.conn.NC.RequestWithContext(ctx, queue.ResultSubject("r1"), []byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(reply.Data) == queue.ResultOK || !strings.Contains(string(reply.Data), "bad result") {
			t.Errorf("%s: controller answered %q", name, reply.Data)
		}
	}
}

// A worker told to keep results in the stream (StreamResults) reports every one through
// PRFLOW_EVENTS, and the run completes the same way.
func TestStreamResultsWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0})
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker.Worker{ID: "streamer", Concurrency: 2, Registry: e.reg, Log: e.log, StreamResults: true, DrainTimeout: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx, e.conn) }()
	defer func() { cancel(); <-done }()
	if stored := eventsStored(t, e, "name: s\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n      - {id: c, type: Noop}\n"); stored != 3 {
		t.Fatalf("the events stream stored %d messages; want the 3 results", stored)
	}
}

// A controller that applied a direct result acks the job itself, with the worker's inbox as
// the ack's reply subject, so the worker sends no ack of its own: every job ack seen on the
// wire carries a reply subject, and the jobs stream ends empty.
func TestControllerAcksDirectResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	var mu sync.Mutex
	var acks []*nats.Msg
	sub, err := e.conn.NC.Subscribe(queue.JobAckPrefix+">", func(m *nats.Msg) {
		mu.Lock()
		acks = append(acks, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r := e.startRun("name: a\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n      - {id: c, type: Noop}\n", nil)
	if fin := e.wait(r.ID, 30*time.Second); fin.Status != pipelines.StSucceeded {
		t.Fatalf("run ended %s: %s", fin.Status, fin.Error)
	}
	var left uint64
	n := 0
	eventually(t, 5*time.Second, func() bool {
		left = jobsLeft(t, e.conn.JS)
		mu.Lock()
		n = len(acks)
		mu.Unlock()
		return left == 0 && n >= 3
	}, func() string { return fmt.Sprintf("%d jobs left in the stream, %d acks seen", left, n) })
	mu.Lock()
	defer mu.Unlock()
	if len(acks) != 3 {
		t.Fatalf("%d job acks for 3 steps", len(acks))
	}
	for _, a := range acks {
		if string(a.Data) != "+ACK" || a.Reply == "" {
			t.Errorf("ack %q on %s with reply %q: want the controller's +ACK with the worker's inbox", a.Data, a.Subject, a.Reply)
		}
	}
}

// A controller that only answers "ok" (one from before controllers acked jobs) leaves the ack
// to the worker, which then sends it.
func TestWorkerAcksWhenControllerOnlySaysOK(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := queue.Open(ctx, queue.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	offered := make(chan *nats.Msg, 1)
	sub, err := conn.NC.QueueSubscribe(queue.ResultSubject("*"), queue.ResultGroup, func(m *nats.Msg) {
		offered <- m
		_ = m.Respond([]byte(queue.ResultOK))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	w := &worker.Worker{ID: "w", Concurrency: 1, Registry: testRegistry(), DrainTimeout: time.Second}
	done := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	go func() { defer close(done); _ = w.Run(wctx, conn) }()
	defer func() { stop(); <-done }()
	job := `{"v":1,"run":"r1","stage":"s","step":"x","type":"Noop","pool":"default","attempt":1}`
	if _, err := conn.JS.Publish(ctx, queue.JobSubject("default"), []byte(job)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-offered:
		if !strings.HasPrefix(m.Header.Get(queue.ResultAckHeader), queue.JobAckPrefix) {
			t.Fatalf("result offered without the job's ack subject: %v", m.Header)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no result offered")
	}
	eventually(t, 5*time.Second, func() bool { return jobsLeft(t, conn.JS) == 0 },
		func() string { return "the worker did not ack the job after a plain ok" })
}

// jobsLeft is how many jobs the jobs stream holds (acked ones are removed).
func jobsLeft(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), queue.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Start stores a run with its first steps queued and sends their jobs right after. A
// controller that died in between leaves a stored run whose jobs never went out: the next
// controller to start sends them, and the run completes.
func TestStartedRunWithLostJobsResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, envOpts{workers: 1, dir: dir})
	ctx := context.Background()
	p, err := e.ctl.load("lost.yaml", []byte("name: lost\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ctl.storeSpec(ctx, p); err != nil {
		t.Fatal(err)
	}
	r, err := pipelines.NewRun(p, "rlostjobs", nil, "tester", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if jobs := e.ctl.machineFor(p).Advance(r, time.Now()); len(jobs) != 1 {
		t.Fatalf("%d jobs queued, want 1", len(jobs))
	}
	data, _ := r.AppendJSON(nil)
	if _, err := e.ctl.b.Runs.Create(ctx, r.ID, data); err != nil {
		t.Fatal(err)
	}
	e.stop()
	e.start(envOpts{workers: 1, dir: dir})
	if fin := e.wait(r.ID, 30*time.Second); fin.Status != pipelines.StSucceeded {
		t.Fatalf("run ended %s: %s", fin.Status, fin.Error)
	}
}
