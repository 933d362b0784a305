// Package controller is prflow's control plane: it keeps every run's state in the prflow-runs
// KV (each change a revision-checked update), consumes run events and the step results workers
// offer directly (queue.ResultSubject), dispatches step jobs, parks
// waiting steps without holding a worker, and wakes them on KV changes, signals, poll
// fallbacks and deadlines. Several replicas may run; all state is in NATS.
package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
	"github.com/prflow/prflow/steps/worker"
)

// Controller runs pipelines.
type Controller struct {
	conn *queue.Conn
	// resultKey signs job tokens (queue.JobToken); results must echo them.
	resultKey []byte
	b         *queue.Buckets
	reg       *steps.Registry
	convert   SourceConverter
	log       *slog.Logger
	metrics   *Metrics
	workers   int
	// noChecks turns off the run-start check of connectors and agents (WithoutStartChecks).
	noChecks bool
	policy   policy.Evaluator // nil: no policies (WithPolicy)
	apps     *appWatch        // prflow-apps in memory for stage policies (appwatch.go)
	appCache sync.Map         // prflow-apps key → cachedApp, for stage policies reading the bucket directly
	appList  atomic.Pointer[appList]
	audit    *audit.Log // nil: no audit log (WithAudit)
	// auditLimit bounds entries about unauthenticated callers (WithAuditLimiter).
	auditLimit *audit.Limiter
	rbac       PolicySource // WithRBAC; nil: every authenticated caller is admin (rbac.go)

	// Run state, what wakes parked steps and when runs are due: each part has its own lock.
	runStore                  // prflow-runs reads and writes, the cached copies (runstore.go)
	park      *parkIndex      // which parked step waits on which key or topic (parkindex.go)
	changed   *changeLog      // key or topic → when it last changed (changes.go)
	timers    *timerScheduler // each run's next due time (timers.go)
	runs      runIndex        // every run's summary, for lists (runindex.go)
	retention *RunRetention   // WithRunRetention; nil: prflow-runs keeps every run (retention.go)
	viewMu    sync.Mutex      // guards view and viewAt (workerView)
	view      []worker.Info
	viewAt    time.Time
	ready     chan struct{}
	loaded    chan struct{} // closed once the runs watcher replayed every run
	loadOne   sync.Once

	mu        sync.Mutex                       // guards the maps below
	machines  map[string]*pipelines.Machine    // by spec hash
	parsed    map[string]*pipelines.Pipeline   // by file and source (Start)
	specs     map[string]struct{}              // spec hashes known to be in prflow-specs
	waiters   map[string][]chan *pipelines.Run // run → Wait calls to tell when it ends
	seenDepth map[depthKey]struct{}            // queue-depth series reported so far

	webhooks atomic.Pointer[Webhooks]   // /hooks/<provider> secrets (hooks.go)
	triggers atomic.Pointer[TriggerSet] // pipelines started by webhooks (scmevents.go)
	feedback atomic.Pointer[Feedback]   // commit statuses and PR comments (feedback.go)
	idem     idempotency                // Idempotency-Key of run starts (idempotency.go)
	envs     *environments.Model        // what runs where (environments.go)
	regs     *registrations             // prflow-agents and prflow-workers in memory (registrations.go)
}

// Option configures a Controller.
type Option func(*Controller)

// WithRegistry sets the step registry used to validate pipelines.
func WithRegistry(r *steps.Registry) Option { return func(c *Controller) { c.reg = r } }

// SourceConverter turns a pipeline in another format (Harness YAML) into native prflow YAML.
// It returns src unchanged when src is already native. Start converts before storing, so
// runs keep native text and a restarted controller reloads them without the converter.
type SourceConverter func(file string, src []byte, inputs map[string]any) ([]byte, error)

// WithSourceConverter makes Start accept another pipeline format (see SourceConverter).
func WithSourceConverter(fn SourceConverter) Option { return func(c *Controller) { c.convert = fn } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *Controller) { c.log = l } }

// WithMetrics sets where metrics go.
func WithMetrics(m *Metrics) Option { return func(c *Controller) { c.metrics = m } }

// WithEventWorkers sets how many events are processed at once.
func WithEventWorkers(n int) Option { return func(c *Controller) { c.workers = n } }

// New builds a controller on a connection whose topology was created with queue.Setup.
func New(ctx context.Context, conn *queue.Conn, opts ...Option) (*Controller, error) {
	c := &Controller{conn: conn, reg: steps.Default, log: slog.Default(), workers: 64,
		machines: map[string]*pipelines.Machine{}, parsed: map[string]*pipelines.Pipeline{}, specs: map[string]struct{}{},
		changed: newChangeLog(changeMaxAge, changeMaxKeys),
		waiters: map[string][]chan *pipelines.Run{}, seenDepth: map[depthKey]struct{}{}, ready: make(chan struct{}), loaded: make(chan struct{}),
		apps: newAppWatch(), regs: newRegistrations()}
	for _, o := range opts {
		o(c)
	}
	if c.metrics == nil {
		c.metrics = NewMetrics(nil)
	}
	if c.auditLimit == nil {
		c.auditLimit = audit.NewLimiter()
	}
	c.park = newParkIndex(c.changed, &c.metrics.parked)
	c.timers = newTimerScheduler(c.tick)
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		return nil, err
	}
	c.b = b
	c.runStore.kv = b.Runs
	c.apps.kv, c.apps.nc, c.apps.log = b.Apps, conn.NC, c.log
	if c.resultKey, err = queue.LoadResultKey(ctx, conn.JS); err != nil {
		return nil, err
	}
	c.metrics.gauges(c.queueDepth, c.liveWorkers)
	if err := c.newEnvironments(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// queueDepth counts the jobs in the jobs stream (waiting or running) by pool and connector,
// from the stream's per-subject counts: pools that no worker consumes count too.
func (c *Controller) queueDepth() map[depthKey]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out := map[depthKey]float64{}
	s, err := c.conn.JS.Stream(ctx, queue.StreamJobs)
	if err != nil {
		return out
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("prflow.jobs.>"))
	if err != nil {
		return out
	}
	for subject, n := range info.State.Subjects {
		if pool, conn, ok := queue.ParseJobSubject(subject); ok {
			out[depthKey{pool, conn}] += float64(n)
		}
	}
	// Pools and connectors that workers consume have a series even when empty.
	for ci := range s.ListConsumers(ctx).Info() {
		if pool, conn, ok := queue.ParseJobSubject(ci.Config.FilterSubject); ok {
			if _, seen := out[depthKey{pool, conn}]; !seen {
				out[depthKey{pool, conn}] = 0
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A pool that had jobs keeps its series at 0 once they are done, so a dashboard sees it.
	for k := range c.seenDepth {
		if _, ok := out[k]; !ok {
			out[k] = 0
		}
	}
	for k := range out {
		if len(c.seenDepth) < maxDepthSeries {
			c.seenDepth[k] = struct{}{}
		}
	}
	return out
}

// depthKey labels a queue-depth series.
type depthKey struct{ pool, connector string }

// maxDepthSeries bounds the pools × connectors the queue-depth metric remembers.
const maxDepthSeries = 1024

func (c *Controller) liveWorkers() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys, err := c.b.Workers.Keys(ctx)
	if err != nil {
		return 0
	}
	return float64(len(keys))
}

// Ready is closed once the controller has loaded every existing run and takes events and results.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Buckets exposes the KV handles (the API reads runs and workers).
func (c *Controller) Buckets() *queue.Buckets { return c.b }

// Run processes events until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	js := c.conn.JS
	cons, err := js.CreateOrUpdateConsumer(ctx, queue.StreamEvents, jetstream.ConsumerConfig{
		Durable: queue.ControllerConsumer, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: 50, MaxAckPending: 4096,
		Description: "prflow controllers",
	})
	if err != nil {
		return fmt.Errorf("controller consumer: %w", err)
	}
	dlq, err := js.CreateOrUpdateConsumer(ctx, queue.StreamDLQ, jetstream.ConsumerConfig{
		Durable: queue.DLQConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("dead-letter consumer: %w", err)
	}
	scmCons, err := c.scmConsumer(ctx)
	if err != nil {
		return fmt.Errorf("SCM event consumer: %w", err)
	}
	runsW, err := c.b.Runs.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch runs: %w", err)
	}
	appsW, err := c.b.Apps.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch apps: %w", err)
	}
	agentsW, err := c.b.Agents.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch agents: %w", err)
	}
	workersW, err := c.b.Workers.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch workers: %w", err)
	}
	mq, err := queue.OpenMergeQueue(ctx, js)
	if err != nil {
		return err
	}
	mqW, err := mq.Watch(ctx, queue.MergeQueueTurnFilter, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch merge queues: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(7)
	go func() {
		defer wg.Done()
		if err := c.envs.Run(ctx); err != nil {
			c.log.Error("environments model stopped", "err", err)
		}
	}()
	go func() { defer wg.Done(); c.watchMergeQueue(ctx, mqW) }()
	go func() { defer wg.Done(); c.consumeSCM(ctx, scmCons) }()
	go func() { defer wg.Done(); c.watchRuns(ctx, runsW) }()
	go func() { defer wg.Done(); c.watchApps(ctx, appsW) }()
	go func() { defer wg.Done(); c.consumeDLQ(ctx, dlq) }()
	go func() { defer wg.Done(); c.watchRegistrations(ctx, agentsW, workersW) }()
	wg.Add(1)
	go func() { defer wg.Done(); c.retainRuns(ctx) }() // retention.go
	if c.policy != nil {
		// Stage policies read app status from memory; the watcher runs while a stage policy
		// is loaded (from now, or from when a reload adds one).
		c.apps.inUse = func() bool { return c.policy.Has(policy.Stage) }
		c.apps.running.Store(true)
		wg.Add(1)
		go func() { defer wg.Done(); c.apps.run(ctx) }()
		if c.policy.Has(policy.Stage) {
			c.apps.need()
		}
	}

	// Consume calls back on one goroutine; events are fanned out to shards by run id so that
	// runs progress in parallel while each run's events are applied in order (no CAS fights).
	shards := make([]chan inbound, c.workers)
	// stop ends the shards once no more events come. It is not a close of the shard channels:
	// a consumer whose connection was closed under it (a killed pod) may never report Closed
	// (nats.go#1875), and a callback still running then must not send on a closed channel.
	stop := make(chan struct{})
	send := func(ch chan inbound, in inbound) {
		select {
		case ch <- in:
		case <-stop: // not acked: redelivered to a live replica
		}
	}
	var shardWG sync.WaitGroup
	for i := range shards {
		shards[i] = make(chan inbound, 64)
		shardWG.Add(1)
		go func(ch chan inbound) {
			defer shardWG.Done()
			// One deadline context for many events (see queue.SharedDeadline): each event's
			// requests still time out, within 10 to 20 seconds.
			dl := &queue.SharedDeadline{Parent: ctx, D: 10 * time.Second}
			defer dl.Stop()
			for {
				select {
				case in := <-ch:
					c.onEvent(dl.Context(), in)
				case <-stop:
					for { // what was handed over before stop is still applied
						select {
						case in := <-ch:
							c.onEvent(dl.Context(), in)
						default:
							return
						}
					}
				}
			}
		}(shards[i])
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		send(shards[shardOf(msg.Subject(), len(shards))], inbound{js: msg})
	}, jetstream.PullMaxMessages(c.workers*8), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if ctx.Err() == nil {
			c.log.Warn("event consumer", "err", err)
		}
	}))
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	// Step results offered directly by workers: applied like events, without a trip through
	// the events stream (the worker keeps its job unacked until we answer).
	results, err := c.conn.NC.QueueSubscribe(queue.ResultSubject("*"), queue.ResultGroup, func(m *nats.Msg) {
		send(shards[shardOf(m.Subject, len(shards))], inbound{req: m})
	})
	if err != nil {
		cc.Stop()
		return fmt.Errorf("subscribe %s: %w", queue.ResultSubject("*"), err)
	}
	_ = results.SetPendingLimits(-1, -1)
	select {
	case <-c.loaded:
		close(c.ready)
	case <-ctx.Done():
	}
	c.log.Info("controller started")
	<-ctx.Done()
	_ = results.Drain()
	for results.IsValid() {
		time.Sleep(5 * time.Millisecond)
	}
	queue.DrainConsumer(cc, c.conn.NC)
	close(stop)
	shardWG.Wait()
	_ = runsW.Stop()
	_ = appsW.Stop()
	_ = mqW.Stop()
	_ = agentsW.Stop()
	_ = workersW.Stop()
	wg.Wait()
	c.timers.stopAll()
	return nil
}

// inbound is an event from the events stream (js) or a result a worker offers directly (req).
type inbound struct {
	js  jetstream.Msg
	req *nats.Msg
}

func (c *Controller) onEvent(ctx context.Context, in inbound) {
	if in.req != nil {
		c.onResultRequest(ctx, in.req)
		return
	}
	msg := in.js
	ev, err := envelope.DecodeEvent(msg.Data())
	if err != nil {
		c.log.Error("dropping bad event", "subject", msg.Subject(), "err", err)
		_ = msg.TermWithReason(err.Error())
		return
	}
	if ev.Kind == queue.EvResult {
		// Only the worker given the job knows its token: a forged or misdirected result is dropped.
		if err := envelope.CheckToken(c.resultKey, ev); err != nil {
			c.log.Warn("dropping result", "run", ev.Run, "stage", ev.Stage, "step", ev.Step, "worker", ev.Worker, "err", err)
			_ = msg.TermWithReason(err.Error())
			return
		}
	}
	md, _ := msg.Metadata()
	// A result reaches the stream when a controller did not confirm it directly, and that
	// controller may have stored it and then failed to publish the next jobs or to answer (a
	// lost KV reply while a node died): like a redelivery, it may find itself applied.
	resend := (md != nil && md.NumDelivered > 1) || ev.Kind == queue.EvResult
	if err := c.handle(ctx, ev, resend); err != nil {
		c.log.Warn("event failed, will retry", "run", ev.Run, "kind", ev.Kind, "err", err)
		_ = msg.NakWithDelay(500 * time.Millisecond)
		return
	}
	_ = msg.Ack()
}

// onResultRequest applies a result a worker offers directly and, once it is in the run state,
// acks the job for the worker (or answers "ok"). Any other answer makes the worker publish the
// result to the events stream instead.
func (c *Controller) onResultRequest(ctx context.Context, m *nats.Msg) {
	ev, err := envelope.DecodeEvent(m.Data)
	if err == nil && (ev.Kind != queue.EvResult || queue.ResultSubject(ev.Run) != m.Subject) {
		err = fmt.Errorf("a %q event for run %q on %s: only step results may come this way", ev.Kind, ev.Run, m.Subject)
	}
	if err == nil {
		err = envelope.CheckToken(c.resultKey, ev)
	}
	if err != nil {
		// Not dropped: the worker falls back to the events stream, whose checks terminate it.
		_ = m.Respond([]byte("bad result: " + err.Error()))
		return
	}
	if err := c.handle(ctx, ev, false); err != nil {
		c.log.Warn("direct result not applied; the worker will publish it to the stream", "run", ev.Run, "stage", ev.Stage, "step", ev.Step, "err", err)
		_ = m.Respond([]byte("not applied: " + err.Error()))
		return
	}
	// Ack the job for the worker; the server confirms to the worker's inbox (see
	// queue.ResultAckHeader). If that publish is lost, the worker times out and reports
	// through the stream, where the result is a no-op.
	if ack := m.Header.Get(queue.ResultAckHeader); m.Reply != "" && strings.HasPrefix(ack, queue.JobAckPrefix) && !strings.ContainsAny(ack, " *>") {
		if err := c.conn.NC.PublishRequest(ack, m.Reply, []byte("+ACK")); err == nil {
			return
		}
	}
	_ = m.Respond([]byte(queue.ResultOK))
}

// ErrUnknownSpec means a run points at a pipeline source that is not stored.
var ErrUnknownSpec = errors.New("pipeline source not found")

func (c *Controller) machine(ctx context.Context, hash string) (*pipelines.Machine, error) {
	c.mu.Lock()
	m := c.machines[hash]
	c.mu.Unlock()
	if m != nil {
		return m, nil
	}
	e, err := c.b.Specs.Get(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnknownSpec, hash, err)
	}
	var sp storedSpec
	if err := json.Unmarshal(e.Value(), &sp); err != nil {
		return nil, fmt.Errorf("stored pipeline %s: %w", hash, err)
	}
	p, err := pipelines.Load(sp.File, sp.Source, c.reg)
	if err != nil {
		return nil, fmt.Errorf("stored pipeline %s no longer loads: %w", sp.File, err)
	}
	return c.machineFor(p), nil
}

// machineFor is the state machine of a loaded pipeline, one per pipeline hash.
func (c *Controller) machineFor(p *pipelines.Pipeline) *pipelines.Machine {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.machines[p.Hash]
	if m == nil {
		m = &pipelines.Machine{P: p, Reg: c.reg, Gate: c.gateFor(p)}
		c.machines[p.Hash] = m
	}
	return m
}

type storedSpec struct {
	File   string `json:"file"`
	Source []byte `json:"source"`
}

// handle applies one event with optimistic concurrency: read, change, Update(rev); on a
// revision conflict it starts over from the fresh state.
func (c *Controller) handle(ctx context.Context, ev *envelope.Event, resend bool) error {
	if environments.IsReadRun(ev.Run) {
		return c.envs.ApplyRead(ctx, ev) // a read of release values (no run state)
	}
	return c.handleWith(ctx, ev, resend, nil)
}

// handleWith is handle; with change, change (not ev) moves the run, on the state as stored (no
// cached copy), and its error ends the attempt unstored (intervene.go).
func (c *Controller) handleWith(ctx context.Context, ev *envelope.Event, resend bool, change func(m *pipelines.Machine, r *pipelines.Run, now time.Time) error) error {
	for attempt := 0; attempt < 50; attempt++ {
		var cur *cachedRun
		if attempt == 0 && change == nil {
			cur = c.runStore.take(ev.Run) // cur.run is changed below; kept again once written
		}
		fresh := cur == nil
		if fresh {
			var err error
			cur, err = c.runStore.read(ctx, ev.Run)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				c.log.Warn("event for unknown run dropped", "run", ev.Run, "kind", ev.Kind)
				return nil
			}
			if err != nil {
				return err
			}
		}
		r, err := cur.decode(ev.Run)
		if err != nil {
			return err
		}
		m, err := c.machine(ctx, r.Spec)
		if err != nil {
			if errors.Is(err, ErrUnknownSpec) || !r.Status.Terminal() {
				return c.failBroken(ctx, cur.rev, r, err)
			}
			return err
		}
		now := time.Now()
		before := c.feedbackSnapshot(r)
		notified := m.NotifySnapshot(r)
		snap := snapshotRun(r)
		wasDone := r.Status.Terminal()
		if change != nil {
			if err := change(m, r, now); err != nil {
				return err
			}
		} else if ev.Kind == queue.EvTick {
			m.Tick(r, now)
		} else {
			m.Apply(r, ev, now)
		}
		jobs := m.Advance(r, now)
		data, err := r.AppendJSON(make([]byte, 0, len(cur.data)+512))
		if err != nil {
			return fmt.Errorf("run %s: encode state: %w", r.ID, err)
		}
		if bytes.Equal(data, cur.data) {
			if !fresh {
				// Nothing changed on the cached copy, but another replica may have moved the
				// run on (queued the step this result is for): decide on the stored state.
				continue
			}
			c.runStore.keep(r.ID, cur.rev, cur.data, r, r.Status.Terminal())
			// A stored revision, maybe another replica's that the runs watcher skipped while
			// our own write was pending: index it.
			c.index(r, m, cur.rev)
			if resend {
				// A crash or a lost reply may have come between an Update and the publishes:
				// send the queued jobs again; dedup by Nats-Msg-Id drops those that got through.
				c.log.Debug("event already applied; sending the run's queued jobs again", "run", r.ID, "kind", ev.Kind, "step", ev.Step)
				js := m.Jobs(r)
				if j := m.CleanupJob(r); j != nil {
					js = append(js, j) // the run may have ended in the write before the crash
				}
				js = append(js, m.NotifyJobsSince(r, c.runURL(r.ID), notifySince())...) // events the state shows; sent ones are dropped
				return c.publishJobs(ctx, js)
			}
			return nil
		}
		rev, err := c.writeRun(ctx, r, func() (uint64, error) { return c.runStore.kv.Update(ctx, r.ID, data, cur.rev) })
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue
			}
			return err
		}
		decoded := r
		if change != nil {
			decoded = nil // r was decoded off the run's shard: the shard decodes its own copy
		}
		c.stored(r, m, rev, data, decoded)
		c.observe(ev, r, jobs)
		c.metrics.ended(snap, r)
		if ev.Kind == queue.EvCancel {
			_ = c.conn.NC.Publish(queue.CancelSubject, []byte(r.ID))
		}
		if j := m.CleanupJob(r); j != nil && !wasDone {
			jobs = append(jobs, j) // the run just failed or was cancelled: close its PRs, leave its queues
		}
		jobs = append(jobs, m.NotifyJobs(notified, r, c.runURL(r.ID))...)
		return c.publishJobs(ctx, append(jobs, c.feedbackJobs(before, r)...))
	}
	return fmt.Errorf("run %s: too many concurrent updates", ev.Run)
}

// writeRun stores r's new state with put (a Create or a revision-checked Update) as this
// controller's own write, which the runs watcher then skips; revisions of other replicas it
// saw meanwhile are read back.
func (c *Controller) writeRun(ctx context.Context, r *pipelines.Run, put func() (uint64, error)) (uint64, error) {
	rev, others, err := c.runStore.write(r.ID, r.Status.Terminal(), put)
	if others {
		c.reload(ctx, r.ID)
	}
	return rev, err
}

// stored takes in a run state this controller just wrote as revision rev: cached for the
// run's next event (with decoded, the decoded run only the run's shard may change, or nil),
// indexed, and handed to Wait calls if the run ended.
func (c *Controller) stored(r *pipelines.Run, m *pipelines.Machine, rev uint64, data []byte, decoded *pipelines.Run) {
	c.indexRun(r, rev)
	c.runStore.keep(r.ID, rev, data, decoded, r.Status.Terminal())
	c.index(r, m, rev)
	if r.Status.Terminal() {
		c.finished(r)
	}
}

// failBroken ends a run whose pipeline can no longer be loaded, instead of leaving it hanging.
func (c *Controller) failBroken(ctx context.Context, rev uint64, r *pipelines.Run, cause error) error {
	if r.Status.Terminal() {
		return nil
	}
	r.Status, r.Error, r.Ended = pipelines.StFailed, cause.Error(), time.Now()
	data, err := r.AppendJSON(nil)
	if err != nil {
		return fmt.Errorf("run %s: encode state: %w", r.ID, err)
	}
	_, err = c.runStore.kv.Update(ctx, r.ID, data, rev) // not as our own write: the watcher reads it back
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	return nil
}

func (c *Controller) publishJobs(ctx context.Context, jobs []*envelope.Job) error {
	if len(jobs) == 1 {
		return c.publishJob(ctx, jobs[0])
	}
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- c.publishJob(ctx, j) }()
	}
	var first error
	for range jobs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Controller) publishJob(ctx context.Context, j *envelope.Job) error {
	j.Token = queue.JobToken(c.resultKey, j.ID())
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	// queue.Publish rides out a stream leader election on a cluster (the id dedups retries).
	if _, err := queue.Publish(ctx, c.conn.JS, j.Subject(), data, j.ID(), 0); err != nil {
		return fmt.Errorf("dispatch %s: %w", j.ID(), err)
	}
	c.metrics.Dispatched.WithLabelValues(j.Type).Inc()
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("dispatched", "run", j.Run, "stage", j.Stage, "step", j.Step, "attempt", j.Attempt, "wake", j.Wake)
	}
	return nil
}

func (c *Controller) observe(ev *envelope.Event, r *pipelines.Run, jobs []*envelope.Job) {
	if ev.Kind != queue.EvResult && ev.Kind != queue.EvDead {
		return
	}
	var st *pipelines.StepRun
	if ev.Stage == pipelines.PathCheckStage && r.Trigger != nil {
		st = r.Trigger.PathCheck // the trigger's path check (no stage of the pipeline)
	} else if sr := r.Find(ev.Stage); sr != nil {
		st = sr.Step(ev.Step, ev.Rollback)
	}
	if st == nil {
		return
	}
	switch st.Status {
	case pipelines.StSucceeded:
		c.metrics.Completed.WithLabelValues(st.Type, "succeeded").Inc()
	case pipelines.StFailed, pipelines.StPending:
		c.metrics.Completed.WithLabelValues(st.Type, "failed").Inc()
	case pipelines.StWaiting:
		c.metrics.Completed.WithLabelValues(st.Type, "waiting").Inc()
	}
	if !ev.Started.IsZero() && !ev.Ended.IsZero() {
		c.metrics.Duration.WithLabelValues(st.Type).Observe(ev.Ended.Sub(ev.Started).Seconds())
	}
	l := c.log.With("run", r.ID, "stage", ev.Stage, "step", ev.Step)
	if st.Status == pipelines.StFailed {
		l.Info("step failed", "err", st.Error)
	}
	if r.Status.Terminal() {
		l.Info("run finished", "status", r.Status, "err", r.Error)
	}
}

// Publish sends an event to the controllers (used by the API, timers and watchers).
func (c *Controller) Publish(ctx context.Context, ev envelope.Event, msgID string) error {
	ev.V = envelope.Version
	data, _ := json.Marshal(ev)
	// Two replicas often publish one wake under one id: on a cluster the second can be told
	// "duplicate message id is in process"; queue.Publish retries it into a duplicate ack.
	_, err := queue.Publish(ctx, c.conn.JS, queue.EventSubject(ev.Run, ev.Kind), data, msgID, 0)
	return err
}

// shardOf hashes the run id (the third subject token) to a shard.
func shardOf(subject string, n int) int {
	// prflow.events.<run>.<kind> or prflow.results.<run>
	run := subject
	if i := strings.Index(subject, ".events."); i >= 0 {
		run = subject[i+8:]
		if j := strings.IndexByte(run, '.'); j >= 0 {
			run = run[:j]
		}
	} else if r, ok := strings.CutPrefix(subject, queue.ResultSubject("")); ok {
		run = r
	}
	var h uint32 = 2166136261
	for i := 0; i < len(run); i++ {
		h = (h ^ uint32(run[i])) * 16777619
	}
	return int(h % uint32(n))
}
