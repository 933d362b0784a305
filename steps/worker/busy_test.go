package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// A worker with one slot, busy with a long job, while more jobs wait: every waiting job
// must run once the slot frees, on its first delivery, and none may reach MaxDeliver and the
// dead-letter path. Reconnects (a network blip, or a server restart with pull requests in
// the reconnect buffer) used to leave the server more pull requests than the worker had
// slots; each job delivered beyond them was handed back at once and delivered again at once,
// and a job spent its 5 deliveries in a moment without running ("job delivered 5 times
// without a result (worker lost)", issue 32 item 8).
func TestBusyWorkerDoesNotBurnQueuedJobsDeliveries(t *testing.T) {
	t.Parallel() // its own server on its own port
	ctx, log, admin, open := tcpQueue(t, 2*time.Minute)
	// Dead letters show as the server's max-deliveries advisories.
	var deadMu sync.Mutex
	var dead []string
	asub, err := admin.NC.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+queue.StreamJobs+".>", func(m *nats.Msg) {
		deadMu.Lock()
		dead = append(dead, string(m.Data))
		deadMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = asub.Unsubscribe() }()

	// Each execution records the run it belongs to and its delivery.
	var mu sync.Mutex
	ran := map[string][]int{}
	longStarted := make(chan struct{}, 1)
	step := func(typ string, hold time.Duration) steps.Definition {
		return steps.Definition{Type: typ, New: func() steps.Step {
			return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
				mu.Lock()
				ran[sc.RunID] = append(ran[sc.RunID], sc.Delivery)
				mu.Unlock()
				if typ == "Long" {
					longStarted <- struct{}{}
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
	reg := steps.NewRegistry()
	reg.Register(step("Long", 3*time.Second))
	reg.Register(step("Quick", 0))
	metrics, err := queue.NewPullerMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	wc := open("w1")
	w := &Worker{ID: "w1", Concurrency: 1, Registry: reg, Log: log, StreamResults: true, PullerMetrics: metrics,
		Tuning: queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5}, DrainTimeout: time.Second}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx, wc) }()
	defer func() { stop(); <-done }()
	cons := func() *jetstream.ConsumerInfo {
		c, err := admin.JS.Consumer(ctx, queue.StreamJobs, queue.PoolConsumerName("default"))
		if err != nil {
			return nil
		}
		info, err := c.Info(ctx)
		if err != nil {
			return nil
		}
		return info
	}
	waitUntil(t, "the worker's first pull request", 20*time.Second, func() bool { info := cons(); return info != nil && info.NumWaiting > 0 })

	// Network blips while the worker idles: the server keeps each old pull request and
	// honours it again once the worker's inbox is subscribed anew.
	for i := 0; i < 6; i++ {
		before := wc.NC.Stats().Reconnects
		if err := wc.NC.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the worker to reconnect", 20*time.Second, func() bool { return wc.NC.IsConnected() && wc.NC.Stats().Reconnects > before })
		time.Sleep(50 * time.Millisecond)
	}

	publish := func(run, typ string) {
		job := &envelope.Job{V: envelope.Version, Run: run, Pipeline: "p", Stage: "s", Step: "x", Type: typ, Pool: "default", Attempt: 1}
		data, _ := json.Marshal(job)
		if _, err := admin.JS.Publish(ctx, queue.JobSubject("default"), data, jetstream.WithMsgID(job.ID())); err != nil {
			t.Fatal(err)
		}
	}
	publish("long", "Long")
	<-longStarted
	const queued = 4
	for i := range queued {
		publish(fmt.Sprintf("q%d", i), "Quick")
	}

	events, err := admin.JS.Stream(ctx, queue.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for i := range queued {
		run := fmt.Sprintf("q%d", i)
		waitUntil(t, "the result of queued job "+run, 30*time.Second, func() bool {
			_, err := events.GetLastMsgForSubject(ctx, queue.EventSubject(run, queue.EvResult))
			return err == nil
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range queued {
		run := fmt.Sprintf("q%d", i)
		if d := ran[run]; len(d) != 1 || d[0] != 1 {
			t.Errorf("queued job %s ran on deliveries %v, want once on delivery 1", run, d)
		}
	}
	deadMu.Lock()
	defer deadMu.Unlock()
	if len(dead) > 0 {
		t.Errorf("jobs dead-lettered: %v", dead)
	}
	if n := metrics.HandedBack(queue.PoolConsumerName("default"), "no_free_slot"); n != 0 {
		t.Errorf("%v jobs delivered to the busy worker and handed back", n)
	}
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publishJob puts job on its pool's subject, as a controller dispatches it.
func publishJob(t *testing.T, ctx context.Context, js jetstream.JetStream, job *envelope.Job) {
	t.Helper()
	data, _ := json.Marshal(job)
	if _, err := js.Publish(ctx, queue.JobSubject(job.Pool), data, jetstream.WithMsgID(job.ID())); err != nil {
		t.Fatal(err)
	}
}

// waitResult waits for the result event of run's job and returns its result.
func waitResult(t *testing.T, ctx context.Context, js jetstream.JetStream, run string) *steps.Result {
	t.Helper()
	events, err := js.Stream(ctx, queue.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var res *steps.Result
	waitUntil(t, "the result of "+run, 30*time.Second, func() bool {
		m, err := events.GetLastMsgForSubject(ctx, queue.EventSubject(run, queue.EvResult))
		if err != nil {
			return false
		}
		ev, err := envelope.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		res = ev.Result
		return true
	})
	return res
}
