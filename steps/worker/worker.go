// Package worker is prflow's delegate: it pulls step jobs of its pools from JetStream, resolves
// secrets locally, runs the step with heartbeats, and reports the result (straight to a
// controller, else through the events stream) before acking the job. Transient errors are
// retried with NakWithDelay and exponential backoff; terminal errors become Failed results; a
// job on its last delivery reports its error instead of vanishing.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// Worker runs step jobs.
type Worker struct {
	ID          string
	Pools       []string
	Concurrency int // jobs run at once per pool
	Registry    *steps.Registry
	Services    steps.Services
	Secrets     []string // values masked from every log line, result and error
	// Connectors are the connector names this worker can serve (registered, so that runs
	// naming others are refused at start). Nil: the names of the SCM service, if it lists them.
	Connectors []string
	// Channels are the notification channels this worker can send to (registered like
	// connectors). Nil: the channels of the notify service, if any.
	Channels []string
	Tuning   queue.ConsumerTuning
	Version  string
	Log      *slog.Logger
	// DrainTimeout bounds how long SIGTERM waits for in-flight jobs before handing them back.
	DrainTimeout time.Duration
	// StreamResults makes every result go through the events stream, never straight to a
	// controller (see queue.ResultSubject).
	StreamResults bool
	// PullerMetrics counts the pull side (statuses, resets, hand-backs); nil: not counted.
	PullerMetrics *queue.PullerMetrics

	conn    *queue.Conn
	masker  *Masker
	results queue.SharedDeadline // for direct result requests
	// settling counts results being reported after their slot moved on; settleSlots bounds them.
	settling    sync.WaitGroup
	settleSlots chan struct{}
	running     atomic.Int64
	// reconnectedAt (unix ns) is when the connection last came back; jobs handed out soon
	// after may be ones another worker still runs whose lease a restarted server lost.
	reconnectedAt atomic.Int64
	done          atomic.Int64
	mu            sync.Mutex
	cancels       map[string]map[*jobCtx]struct{} // run → in-flight jobs, for cancel
	inflight      map[string]*inflightJob         // job id → its execution here (execlease.go)
	locks         jetstream.KeyValue              // execution leases live in the locks bucket
}

type jobCtx struct{ cancel context.CancelFunc }

// Info is what a worker registers in the prflow-workers KV.
type Info struct {
	ID          string    `json:"id"`
	Pools       []string  `json:"pools"`
	Version     string    `json:"version"`
	Concurrency int       `json:"concurrency"`
	Connectors  []string  `json:"connectors"`
	Channels    []string  `json:"channels,omitempty"`
	Running     int64     `json:"running"`
	Completed   int64     `json:"completed"`
	Host        string    `json:"host"`
	Started     time.Time `json:"started"`
	Seen        time.Time `json:"seen"`
}

// Run pulls and runs jobs until ctx is cancelled, then drains: in-flight jobs finish (up to
// DrainTimeout) or are handed back for redelivery. Nothing is lost.
func (w *Worker) Run(ctx context.Context, conn *queue.Conn) error {
	w.conn = conn
	if w.Registry == nil {
		w.Registry = steps.Default
	}
	if w.Concurrency <= 0 {
		w.Concurrency = 1
	}
	if len(w.Pools) == 0 {
		w.Pools = []string{"default"}
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.ID == "" {
		host, _ := os.Hostname()
		w.ID = fmt.Sprintf("%s-%d", sanitize(host), os.Getpid())
	}
	if w.DrainTimeout <= 0 {
		w.DrainTimeout = 30 * time.Second
	}
	w.Tuning = withDefaults(w.Tuning)
	if w.Connectors == nil {
		w.Connectors = connectorNames(w.Services.Get(steps.ServiceSCM))
		for _, n := range connectorNames(w.Services.Get(steps.ServiceMetrics)) {
			w.Connectors = append(w.Connectors, steps.MetricsRoute(n)) // checked at run start
		}
	}
	w.Connectors = slices.Sorted(slices.Values(w.Connectors))
	if w.Channels == nil {
		if n, ok := w.Services.Get(steps.ServiceNotify).(steps.Notifier); ok && n != nil {
			w.Channels = n.Channels()
		}
	}
	w.Channels = slices.Sorted(slices.Values(w.Channels))
	w.masker = NewMasker(w.Secrets)
	w.results.D = directResultTimeout
	w.Log = slog.New(MaskHandler(w.Log.Handler(), w.masker)).With("worker", w.ID)
	w.cancels = map[string]map[*jobCtx]struct{}{}
	w.inflight = map[string]*inflightJob{}
	w.settleSlots = make(chan struct{}, max(1024, 4*w.Concurrency*len(w.Pools)*(1+len(w.Connectors)+len(w.Channels))))

	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		return err
	}
	sub, err := conn.NC.Subscribe(queue.CancelSubject, func(m *nats.Msg) { w.cancelRun(string(m.Data)) })
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", queue.CancelSubject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	w.locks = b.Locks
	qsub, err := conn.NC.Subscribe(ExecQuerySubject(w.ID), w.answerQuery)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", ExecQuerySubject(w.ID), err)
	}
	defer func() { _ = qsub.Unsubscribe() }()
	// After a reconnect every in-flight job's heartbeat goes at once: if the server restarted,
	// the ones sent while it was away are lost and its ack deadlines are already due.
	reconnected := conn.NC.StatusChanged(nats.CONNECTED)
	defer conn.NC.RemoveStatusListener(reconnected)
	go func() {
		for range reconnected {
			w.reconnectedAt.Store(time.Now().UnixNano())
			w.beatAll(ctx)
		}
	}()

	// Jobs run on their own context so that SIGTERM stops pulling but lets them finish.
	jobsCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	var wg sync.WaitGroup
	var pullers []*queue.Puller
	defer func() {
		for _, p := range pullers {
			p.Stop()
		}
	}()
	for _, pool := range w.Pools {
		if _, err := queue.PoolConsumer(ctx, conn.JS, pool, w.Tuning); err != nil {
			return fmt.Errorf("pool %s consumer: %w", pool, err)
		}
		// Jobs that need a connector come on its own subject: this worker takes only those of
		// the connectors it holds (each consumer with Concurrency slots of its own).
		// Each consumer with the call that creates it again should it be deleted under us.
		type consumer struct {
			name   string
			create func(ctx context.Context) error
		}
		consumers := []consumer{{queue.PoolConsumerName(pool), func(ctx context.Context) error {
			_, err := queue.PoolConsumer(ctx, conn.JS, pool, w.Tuning)
			return err
		}}}
		routes := slices.Clone(w.Connectors)
		for _, ch := range w.Channels {
			routes = append(routes, steps.NotifyRoute(ch)) // notification jobs of its channels
		}
		for _, cn := range routes {
			if _, err := queue.ConnectorConsumer(ctx, conn.JS, pool, cn, w.Tuning); err != nil {
				return fmt.Errorf("pool %s connector %s consumer: %w", pool, cn, err)
			}
			consumers = append(consumers, consumer{queue.ConnectorConsumerName(pool, cn), func(ctx context.Context) error {
				_, err := queue.ConnectorConsumer(ctx, conn.JS, pool, cn, w.Tuning)
				return err
			}})
		}
		for _, cons := range consumers {
			// The puller asks for no more jobs than there are free slots: none waits in a client
			// buffer while its AckWait runs out.
			p, err := queue.NewPuller(conn.NC, queue.StreamJobs, cons.name, w.Concurrency, queue.PullerConfig{
				Recreate: cons.create, Log: w.Log, Metrics: w.PullerMetrics})
			if err != nil {
				return fmt.Errorf("pool %s: %w", pool, err)
			}
			pullers = append(pullers, p)
			for i := 0; i < w.Concurrency; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						msg, err := p.Next(context.Background())
						if errors.Is(err, queue.ErrConsumerGone) {
							w.Log.Error("pool consumer unusable; this worker takes no more of its jobs", "err", err)
							return
						}
						if err != nil {
							return // stopped
						}
						w.handle(jobsCtx, msg)
						p.Release()
					}
				}()
			}
		}
	}
	w.Log.Info("worker started", "pools", strings.Join(w.Pools, ","), "connectors", strings.Join(w.Connectors, ","), "channels", strings.Join(w.Channels, ","), "concurrency", w.Concurrency)
	w.register(ctx, b.Workers, time.Now())

	<-ctx.Done()
	w.Log.Info("worker draining", "running", w.running.Load())
	for _, p := range pullers {
		p.Stop() // stop pulling; jobs not yet started are handed back for redelivery
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); w.settling.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(w.DrainTimeout):
		w.Log.Warn("drain timeout: handing in-flight jobs back for redelivery")
		stopJobs()
		<-finished
	}
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = b.Workers.Delete(dctx, w.ID)
	return nil
}

func (w *Worker) register(ctx context.Context, kv jetstream.KeyValue, started time.Time) {
	host, _ := os.Hostname()
	put := func() {
		info := Info{ID: w.ID, Pools: w.Pools, Version: w.Version, Concurrency: w.Concurrency, Connectors: w.Connectors, Channels: w.Channels,
			Running: w.running.Load(), Completed: w.done.Load(), Host: host, Started: started, Seen: time.Now()}
		b, _ := json.Marshal(info)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := kv.Put(pctx, w.ID, b); err != nil && ctx.Err() == nil {
			w.Log.Warn("worker heartbeat failed", "err", err)
		}
	}
	put()
	go func() {
		t := time.NewTicker(queue.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				put()
			}
		}
	}()
}

// connectorNames lists the connectors an SCM service serves: a connectors file's set, or a
// fixed map (dev, tests). Anything else lists none.
func connectorNames(svc any) []string {
	switch s := svc.(type) {
	case interface{ Names() []string }:
		return s.Names()
	case connector.Static:
		return slices.Collect(maps.Keys(s))
	}
	return []string{}
}

// outlivesRun reports whether jobs of this step type run after their run ended (its cleanup,
// its notifications: "run cancelled" goes out because of the cancel), so the run's cancel must
// not stop them.
func outlivesRun(typ string) bool { return typ == steps.TypeCleanup || typ == steps.TypeNotify }

func (w *Worker) cancelRun(run string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for jc := range w.cancels[run] {
		jc.cancel()
	}
}

func (w *Worker) track(run string, jc *jobCtx, add bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if add {
		if w.cancels[run] == nil {
			w.cancels[run] = map[*jobCtx]struct{}{}
		}
		w.cancels[run][jc] = struct{}{}
		return
	}
	delete(w.cancels[run], jc)
	if len(w.cancels[run]) == 0 {
		delete(w.cancels, run)
	}
}

// handle runs one job and settles its message exactly one way: result+Ack, NakWithDelay, or Term.
func (w *Worker) handle(ctx context.Context, msg *queue.Msg) {
	w.running.Add(1)
	defer w.running.Add(-1)
	delivered := msg.Delivered()
	job, err := envelope.DecodeJob(msg.Data())
	if err != nil {
		w.Log.Error("bad job payload", "err", err, "subject", msg.Subject())
		if job != nil && job.Run != "" && job.Stage != "" && job.Step != "" {
			_, _ = w.publishResult(ctx, job, steps.Fail(err.Error()), time.Now(), "")
		}
		_ = msg.TermWithReason(w.masker.Mask(err.Error()))
		return
	}
	started := time.Now()
	def, ok := w.Registry.Lookup(job.Type)
	if !ok {
		res := steps.Fail(fmt.Sprintf("worker %s (version %s) has no step type %q", w.ID, w.Version, job.Type))
		w.finish(ctx, msg, job, res, started, nil)
		return
	}
	if err := envelope.CheckPriors(job, def); err != nil {
		w.finish(ctx, msg, job, steps.Fail(err.Error()), started, nil)
		return
	}
	if !w.trackExec(job.ID(), msg) {
		// A redelivery to the worker that still runs the job (it reconnected to a restarted
		// server): the running one acks it.
		w.jobLog(job).Warn("job redelivered while it still runs here; left to the running execution", "delivery", delivered)
		return
	}
	var lease *execLease
	run := true
	if def.Pure {
		lease = &execLease{} // nothing to keep from running twice: held here only (steps.Definition.Pure)
	} else {
		lease, run, err = w.claim(ctx, msg, job.ID(), delivered)
	}
	if err != nil || !run {
		w.untrackExec(job.ID(), msg, nil)
		switch {
		case ctx.Err() != nil:
			_ = msg.NakWithDelay(queue.HandBackDelay)
		case err != nil:
			w.jobLog(job).Warn("cannot take the job's execution lease; will retry", "err", err, "delivery", delivered)
			_ = msg.NakWithDelay(backoff(delivered))
		default:
			// Neither ack nor nak: the live execution's heartbeats and ack settle the job.
			w.jobLog(job).Warn("job redelivered while another worker still runs it; left to that execution", "delivery", delivered)
		}
		return
	}

	lctx, cancelCause := context.WithCancelCause(ctx) // ends with the lease or the run
	sctx := lctx
	cancel := func() { cancelCause(context.Canceled) }
	lease.onLost = func() { cancelCause(errLeaseLost) }
	w.setLease(job.ID(), lease)
	stopHB := heartbeat(msg, w.renewEvery(), func() { go lease.renew(ctx) })
	if !job.Deadline.IsZero() {
		var c2 context.CancelFunc
		sctx, c2 = context.WithDeadline(sctx, job.Deadline)
		defer c2()
	}
	defer cancel()
	// A run's cancel stops its step jobs; jobs that exist because the run ended (its cleanup)
	// must outlive it: a cleanup killed by the cancel leaves the run's PRs open.
	if !outlivesRun(job.Type) {
		jc := &jobCtx{cancel: cancel}
		w.track(job.Run, jc, true)
		defer w.track(job.Run, jc, false)
	}

	pub := newPublishHandler(w.conn.JS, job.Run, job.Stage, job.Step)
	// The run/stage/step attributes are formatted when the step first logs: most never do.
	stepLog := slog.New(&lazyAttrs{base: fanout{w.Log.Handler(), MaskHandler(pub, w.masker)},
		attrs: []slog.Attr{slog.String("run", job.Run), slog.String("stage", job.Stage), slog.String("step", job.Step)}})
	sc := &steps.Context{
		RunID: job.Run, Pipeline: job.Pipeline, Stage: job.Stage, StepID: job.Step, Type: job.Type,
		Attempt: job.Attempt, Delivery: delivered, Wake: job.Wake, WakeReason: job.WakeReason, Executor: job.Executor, Rollback: job.Rollback,
		Inputs: job.Inputs, Env: job.Env, Priors: job.Priors, Memo: job.Memo, Signals: job.Signals,
		Deadline: job.Deadline, Log: stepLog, Services: w.Services,
	}
	// Debug lines bracketing the step's execution let a test (pipelines/chaos) prove from the
	// logs of several workers that no job ran twice at the same time.
	debug := w.Log.Enabled(ctx, slog.LevelDebug)
	if debug {
		w.Log.Debug("job started", "job", job.ID(), "delivery", delivered)
	}
	res, runErr := runStep(sctx, def.New(), sc)
	cut := runErr != nil && !steps.IsTerminal(runErr) && pastDeadline(sctx, job)
	late := runErr == nil && res.Status == steps.Waiting && !job.Deadline.IsZero() && !time.Now().Before(job.Deadline)
	if def.JudgesAtDeadline && sc.WakeReason != "deadline" && lctx.Err() == nil && (cut || late) {
		// The deadline passed while this run went on (cut short, or about to park past it,
		// which the controller fails as a plain timeout): ask the step for its verdict at the
		// deadline, as the controller's deadline wake would (a sync finished but not yet
		// healthy may pass without failOnTimeout; an outage fails without rollback).
		stepLog.Warn("the step's deadline passed while it ran; asking it for its verdict at the deadline", "err", runErr)
		fctx, fcancel := context.WithTimeout(lctx, deadlineVerdictBudget)
		fsc := *sc
		fsc.WakeReason = "deadline"
		res, runErr = runStep(fctx, def.New(), &fsc)
		fcancel()
	}
	if debug {
		w.Log.Debug("job returned", "job", job.ID(), "delivery", delivered, "err", runErr != nil)
	}
	stopHB()

	if lease.lost.Load() {
		// This worker was cut off long enough that another delivery took the job over; that
		// one reports it. Nothing of this execution is reported.
		pub.Flush(context.Background())
		w.untrackExec(job.ID(), msg, lease)
		w.jobLog(job).Warn("another delivery took this job over while it ran here; its result is dropped", "err", runErr)
		return
	}
	if runErr != nil {
		switch {
		case steps.IsTerminal(runErr):
			res = steps.Fail(runErr.Error())
		case ctx.Err() != nil:
			// Drain timeout: hand the job back untouched for another worker.
			pub.Flush(context.Background())
			w.untrackExec(job.ID(), msg, lease)
			_ = msg.NakWithDelay(queue.HandBackDelay)
			w.jobLog(job).Warn("job handed back on shutdown")
			return
		case pastDeadline(sctx, job):
			res = steps.Fail(fmt.Sprintf("timed out at %s: %v", job.Deadline.UTC().Format(time.RFC3339), runErr))
		case errors.Is(sctx.Err(), context.Canceled):
			res = steps.Fail("cancelled")
		case delivered >= w.Tuning.MaxDeliver:
			res = steps.Fail(fmt.Sprintf("gave up after %d attempts: %v", delivered, runErr))
		default:
			delay := backoff(delivered)
			stepLog.Warn("transient error, will retry", "err", runErr, "delivery", delivered, "retryIn", delay.String())
			pub.Flush(ctx)
			w.untrackExec(job.ID(), msg, lease)
			_ = msg.NakWithDelay(delay)
			return
		}
		stepLog.Error("step failed", "err", runErr)
	}
	pub.Flush(ctx)
	w.settle(ctx, msg, job, res, started, lease)
}

// settle reports the result and acks the job in the background, so the slot pulls its next
// job while a controller applies this one. The job stays unacked until its result is stored;
// a bound on unsettled results keeps a slow controller from piling them up.
func (w *Worker) settle(ctx context.Context, msg *queue.Msg, job *envelope.Job, res steps.Result, started time.Time, lease *execLease) {
	w.settleSlots <- struct{}{}
	w.settling.Add(1)
	go func() {
		defer w.settling.Done()
		defer func() { <-w.settleSlots }()
		w.finish(ctx, msg, job, res, started, lease)
	}()
}

func (w *Worker) finish(ctx context.Context, msg *queue.Msg, job *envelope.Job, res steps.Result, started time.Time, lease *execLease) {
	// The lease goes when the job is settled one way or the other (a redelivery before that
	// finds this execution still running), and before a nak, so that the redelivery it asks
	// for finds no live execution.
	untrack := func() {
		if lease != nil {
			w.untrackExec(job.ID(), msg, lease)
		}
	}
	acked, err := w.publishResult(ctx, job, res, started, msg.AckSubject())
	if err != nil {
		// Not acked: the job is redelivered and runs again (steps are idempotent).
		w.jobLog(job).Error("publishing result failed; job will be redelivered", "err", err)
		untrack()
		_ = msg.NakWithDelay(time.Second)
		return
	}
	// Settled: no delivery of this message can come any more, so the lease is only forgotten
	// here, not deleted (it expires with the bucket's TTL): one server message per job fewer.
	// Should the ack below be lost, a redelivery finds the lease and this worker answers idle.
	defer w.forgetExec(job.ID(), msg)
	if !acked {
		if err := msg.Ack(); err != nil {
			w.jobLog(job).Warn("ack failed; a redelivery will find the result already recorded", "err", err)
		}
	}
	w.done.Add(1)
	if w.Log.Enabled(ctx, slog.LevelDebug) {
		w.jobLog(job).Debug("step finished", "status", res.Status, "took", time.Since(started).String())
	}
}

// jobLog is the worker's logger for one job's lines.
func (w *Worker) jobLog(job *envelope.Job) *slog.Logger {
	return w.Log.With("run", job.Run, "stage", job.Stage, "step", job.Step, "attempt", job.Attempt)
}

// heartbeat tells JetStream every interval that msg's step still runs, so a long step is not
// redelivered; the returned stop ends it and waits for a beat under way. A timer, not a
// goroutine per job.
func heartbeat(msg *queue.Msg, interval time.Duration, beat func()) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(interval, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress()
		beat()
		t.Reset(interval)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// publishResult reports a step's result. acked means a controller took it directly and acked
// the job (ackSubject) itself.
func (w *Worker) publishResult(ctx context.Context, job *envelope.Job, res steps.Result, started time.Time, ackSubject string) (acked bool, err error) {
	ev := envelope.Event{V: envelope.Version, Kind: queue.EvResult, Run: job.Run, Stage: job.Stage, Step: job.Step,
		Rollback: job.Rollback, Attempt: job.Attempt, Wake: job.Wake, Result: &res, Worker: w.ID,
		Started: started, Ended: time.Now(), Token: job.Token}
	data, err := json.Marshal(ev)
	if err != nil {
		res = steps.Fail(fmt.Sprintf("step %s returned outputs that cannot be encoded: %v", job.Type, err))
		data, _ = json.Marshal(ev)
	}
	// The encoded result passes through the masker (which knows each secret raw and as JSON
	// escapes it), so a secret in a message or an output never reaches the run state.
	if masked := w.masker.Mask(string(data)); masked != string(data) {
		data = []byte(masked)
		if !json.Valid(data) {
			// A secret matched across JSON syntax: keep nothing of what the step returned.
			res = steps.Fail(fmt.Sprintf("step %s returned a result that cannot be masked safely", job.Type))
			data, _ = json.Marshal(ev)
			data = []byte(w.masker.Mask(string(data)))
		}
	}
	if taken, acked := w.offerResult(job, data, ackSubject); taken {
		return acked, nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err = queue.Publish(pctx, w.conn.JS, queue.EventSubject(job.Run, queue.EvResult), data, "res/"+job.ID(), 0)
	return false, err
}

// offerResult hands the result straight to a controller, which answers once the run state
// holds it: one request instead of a stored event, a delivery and an ack. With the job's ack
// subject in queue.ResultAckHeader the controller acks the job itself and the server's
// confirmation of that ack is the answer (acked); a plain "ok" leaves the ack to us. Not
// taken means no controller took it (none listening, a timeout, an error): use the stream.
func (w *Worker) offerResult(job *envelope.Job, data []byte, ackSubject string) (taken, acked bool) {
	if w.StreamResults {
		return false, false
	}
	req := &nats.Msg{Subject: queue.ResultSubject(job.Run), Data: data}
	if ackSubject != "" {
		req.Header = nats.Header{queue.ResultAckHeader: []string{ackSubject}}
	}
	reply, err := w.conn.NC.RequestMsgWithContext(w.results.Context(), req)
	if err != nil {
		if !errors.Is(err, nats.ErrNoResponders) {
			w.Log.Debug("direct result not taken; publishing it to the events stream", "run", job.Run, "stage", job.Stage, "step", job.Step, "err", err)
		}
		return false, false
	}
	switch string(reply.Data) {
	case "":
		return ackSubject != "", ackSubject != ""
	case queue.ResultOK:
		return true, false
	}
	w.Log.Warn("controller did not apply the result; publishing it to the events stream", "run", job.Run, "stage", job.Stage, "step", job.Step, "reply", w.masker.Mask(string(reply.Data)))
	return false, false
}

// directResultTimeout bounds the wait for a controller's answer to a direct result. Late
// answers are harmless: the stream copy then carries the same result, applied once.
const directResultTimeout = 10 * time.Second

// runStep calls the step, turning a panic into a terminal error so one bad step cannot take
// the worker down.
func runStep(ctx context.Context, s steps.Step, sc *steps.Context) (res steps.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = steps.Terminalf("step %s panicked: %v\n%s", sc.Type, p, firstLines(string(debug.Stack()), 12))
		}
	}()
	res, err = s.Run(ctx, sc)
	if err == nil && res.Status == "" {
		err = steps.Terminalf("step %s returned no status", sc.Type)
	}
	if err == nil && res.Status == steps.Failed && res.Message == "" {
		res.Message = "step " + sc.Type + " failed"
	}
	return res, err
}

// deadlineVerdictBudget bounds the call that asks a step cut short by its deadline for its
// verdict (JudgesAtDeadline): reads of status records, no waiting.
const deadlineVerdictBudget = 15 * time.Second

// pastDeadline reports whether the job's deadline ended ctx.
func pastDeadline(ctx context.Context, job *envelope.Job) bool {
	return ctx.Err() != nil && !job.Deadline.IsZero() && !time.Now().Before(job.Deadline)
}

func backoff(delivered int) time.Duration {
	d := 500 * time.Millisecond << min(delivered-1, 8)
	if d > 2*time.Minute {
		d = 2 * time.Minute
	}
	return d
}

func withDefaults(t queue.ConsumerTuning) queue.ConsumerTuning {
	if t.AckWait <= 0 {
		t.AckWait = queue.DefaultTuning.AckWait
	}
	if t.MaxDeliver <= 0 {
		t.MaxDeliver = queue.DefaultTuning.MaxDeliver
	}
	if t.MaxAckPending == 0 {
		t.MaxAckPending = queue.DefaultTuning.MaxAckPending
	}
	return t
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "worker"
	}
	return b.String()
}
