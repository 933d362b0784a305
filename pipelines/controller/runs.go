package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/envelope"
)

// StartRequest starts a run.
type StartRequest struct {
	File     string         `json:"file"`     // name for messages
	Source   SourceText     `json:"source"`   // the pipeline YAML (text; base64 accepted)
	Inputs   map[string]any `json:"inputs"`   // runtime inputs (--set)
	Executor string         `json:"executor"` // who starts it
	// Groups are the executor's groups, for run policies; set by the API from the caller's
	// token, never taken from a request body.
	Groups []string `json:"-"`
	// Remote is where the request came from, for the audit log; set by the API.
	Remote string `json:"-"`
	// ID makes starting idempotent (a webhook delivery id); empty = a new id.
	ID      string                 `json:"id,omitempty"`
	Trigger *pipelines.TriggerInfo `json:"trigger,omitempty"`
}

// ErrInvalid wraps every problem with a start request: nothing was stored or sent.
var ErrInvalid = errors.New("invalid run request")

// Start validates the pipeline and inputs, stores them and the run's initial state, and kicks
// the run. A bad pipeline or input stores and dispatches nothing.
func (c *Controller) Start(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
	return c.start(ctx, req, nil)
}

// start is Start with prepare, which may change the new run (or refuse it) after its inputs
// are checked and before anything else: the checks, policies, storing and dispatch that follow
// are those of every run (Rerun and Retry use it).
func (c *Controller) start(ctx context.Context, req StartRequest, prepare func(*pipelines.Pipeline, *pipelines.Run) error) (*pipelines.Run, error) {
	if c.convert != nil {
		src, err := c.convert(req.File, req.Source, req.Inputs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		req.Source = src
	}
	p, err := c.load(req.File, req.Source)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	id := req.ID
	if id == "" {
		id = pipelines.NewRunID(time.Now())
	}
	r, err := pipelines.NewRun(p, id, req.Inputs, req.Executor, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, req.File, err)
	}
	r.Trigger = req.Trigger
	if prepare != nil {
		if err := prepare(p, r); err != nil {
			return nil, err
		}
	}
	// The starter's permission on the run's environments, when the API or UI asked (rbac.go).
	if err := c.checkStart(ctx, req, p, r); err != nil {
		return nil, err
	}
	// Before anything is stored or sent: a connector or agent nothing live serves would only
	// show after earlier stages changed the release repo.
	if !c.noChecks {
		if err := c.Check(ctx, p, req.Trigger); err != nil {
			return nil, err
		}
	}
	// Policies last: a deny is a decision about a run that could otherwise start.
	warn, err := c.runPolicy(ctx, p, r, User{Name: req.Executor, Groups: req.Groups})
	if err != nil {
		c.log.Warn("run refused by policy", "pipeline", p.Name, "executor", req.Executor, "err", err)
		if errors.Is(err, policy.ErrDenied) {
			c.record(ctx, audit.Entry{Actor: req.Executor, Action: audit.PolicyDenied, Remote: req.Remote, Detail: "start of " + p.Name + ": " + err.Error()})
		}
		return nil, err
	}
	if len(warn) > 0 {
		c.log.Warn("run policy warnings", "run", r.ID, "pipeline", p.Name, "warn", warn)
		r.Warnings = warn
	}
	if err := c.storeSpec(ctx, p); err != nil {
		return nil, err
	}
	// The run is stored already advanced (its first steps queued) and their jobs go out right
	// after: no start event to store, deliver and apply. If this process dies in between, the
	// restarted controller re-sends the jobs of every active run (watchRuns).
	m := c.machineFor(p)
	now := time.Now()
	before := c.feedbackSnapshot(r)
	notified := m.NotifySnapshot(r)
	jobs := m.Advance(r, now)
	jobs = append(jobs, m.NotifyJobs(notified, r, c.runURL(r.ID))...)
	data, err := r.AppendJSON(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: run state: %w", ErrInvalid, req.File, err)
	}
	rev, err := c.writeRun(ctx, r, func() (uint64, error) { return c.b.Runs.Create(ctx, r.ID, data) })
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			existing, gerr := c.Get(ctx, r.ID)
			if gerr == nil {
				return existing, ErrExists
			}
		}
		return nil, fmt.Errorf("store run: %w", err)
	}
	// The first result finds the run cached instead of reading it back; not r itself, which
	// the caller keeps.
	c.stored(r, m, rev, data, nil)
	c.record(ctx, audit.Entry{Actor: req.Executor, Action: audit.RunStarted, Run: r.ID, Remote: req.Remote, Detail: "pipeline " + p.Name + origin(r)})
	c.sendFirstJobs(ctx, r.ID, append(jobs, c.feedbackJobs(before, r)...))
	return r, nil
}

// firstJobsRetry bounds how long a new run's first jobs are sent again when the jobs stream
// does not take them (no leader for a moment); after that they go out when a controller
// restarts, as for a controller that died right after storing the run.
const firstJobsRetry = 2 * time.Minute

// firstJobsAckWait is how long the acks of a new run's first jobs are waited for together.
const firstJobsAckWait = 30 * time.Second

// sendFirstJobs writes a new run's first jobs to the connection before it returns, so that
// anything the caller sends afterwards (a cancel) comes after them, and waits for their acks
// in the background: a start costs one round trip (storing the run), not two. A job the stream
// did not take is sent again (its message id dedups) for up to firstJobsRetry.
func (c *Controller) sendFirstJobs(ctx context.Context, run string, jobs []*envelope.Job) {
	if len(jobs) == 0 {
		return
	}
	type sent struct {
		job  *envelope.Job
		data []byte
		ack  jetstream.PubAckFuture
		err  error
	}
	out := make([]sent, len(jobs))
	for i, j := range jobs {
		j.Token = queue.JobToken(c.resultKey, j.ID())
		data, err := json.Marshal(j)
		if err != nil {
			c.log.Error("run stored but a first job cannot be encoded", "run", run, "step", j.Step, "err", err)
			continue
		}
		out[i].job, out[i].data = j, data
		out[i].ack, out[i].err = c.conn.JS.PublishAsync(j.Subject(), data, jetstream.WithMsgID(j.ID()))
		if out[i].err == nil {
			c.metrics.Dispatched.WithLabelValues(j.Type).Inc() // counted when sent, as the job's round trip starts
		}
	}
	bg := context.WithoutCancel(ctx)
	go func() {
		// An ack can be lost for good: nats.go fails pending acks on a reconnect but not when
		// the connection closes. Past this wait the job is sent again (its id dedups).
		ackCtx, cancel := context.WithTimeout(bg, firstJobsAckWait)
		defer cancel()
		for _, s := range out {
			if s.job == nil {
				continue
			}
			err := s.err
			if err == nil {
				select {
				case <-s.ack.Ok():
					continue
				case err = <-s.ack.Err():
				case <-ackCtx.Done():
					err = fmt.Errorf("no ack within %s", firstJobsAckWait)
				}
			}
			c.log.Warn("a new run's first job was not taken by the jobs stream; sending it again", "run", run, "step", s.job.Step, "err", err)
			rctx, cancel := context.WithTimeout(bg, firstJobsRetry)
			_, err = queue.Publish(rctx, c.conn.JS, s.job.Subject(), s.data, s.job.ID(), 0)
			cancel()
			if err != nil {
				// Stored with its steps queued: the jobs go out again when a controller restarts.
				c.log.Error("run stored but its first jobs not dispatched", "run", run, "err", err)
			}
		}
	}()
}

// CheckSource makes the checks Start makes, without starting anything: the pipeline loads
// (converted first when the controller converts), the inputs fit when given (nil skips them),
// and every connector and agent it names is live (Check).
func (c *Controller) CheckSource(ctx context.Context, file string, src []byte, inputs map[string]any) (*pipelines.Pipeline, error) {
	if c.convert != nil {
		out, err := c.convert(file, src, inputs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		src = out
	}
	p, err := c.load(file, src)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if inputs != nil {
		if _, err := p.CheckInputs(inputs); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, file, err)
		}
	}
	if _, err := c.pipelinePolicy(ctx, p); err != nil {
		return nil, err
	}
	return p, c.Check(ctx, p, nil)
}

// ErrExists is returned by Start when a run with the requested id already exists.
var ErrExists = errors.New("run already exists")

// ErrNotFound is returned for unknown runs.
var ErrNotFound = errors.New("run not found")

// Get reads a run's state.
func (c *Controller) Get(ctx context.Context, id string) (*pipelines.Run, error) {
	if !validKey(id) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	e, err := c.b.Runs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var r pipelines.Run
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// List returns runs, newest first by creation time, at most limit (0: all), read whole from
// prflow-runs. The order and the selection come from the runs index; a list that shows runs
// should use ListRuns, which reads nothing.
func (c *Controller) List(ctx context.Context, limit int) ([]*pipelines.Run, error) {
	if err := c.runsLoaded(ctx); err != nil {
		return nil, err
	}
	var ids []string
	c.runs.walk(nil, func(s *RunSummary) bool {
		ids = append(ids, s.ID)
		return limit <= 0 || len(ids) < limit
	})
	var out []*pipelines.Run
	for _, id := range ids {
		if r, err := c.Get(ctx, id); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// Cancel stops a run and its parked steps; in-flight jobs are told to stop.
func (c *Controller) Cancel(ctx context.Context, id, user string) error {
	r, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if r.Status.Terminal() {
		return fmt.Errorf("run %s already %s", id, r.Status)
	}
	if err := c.Publish(ctx, envelope.Event{Kind: queue.EvCancel, Run: id, User: user}, "cancel/"+id); err != nil {
		return err
	}
	c.record(ctx, audit.Entry{Actor: user, Action: audit.RunCancelled, Run: id})
	return nil
}

// Wait blocks until the run ends or ctx is done, calling fn on every state change. The
// controller must be running. Without fn it waits on the controller's own view of the runs
// (no watcher of its own, so many waiting clients cost the server nothing).
func (c *Controller) Wait(ctx context.Context, id string, fn func(*pipelines.Run)) (*pipelines.Run, error) {
	if fn == nil {
		return c.waitEnd(ctx, id)
	}
	w, err := c.b.Runs.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r pipelines.Run
			if json.Unmarshal(e.Value(), &r) != nil {
				continue
			}
			if fn != nil {
				fn(&r)
			}
			if r.Status.Terminal() {
				return &r, nil
			}
		}
	}
}

func validKey(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=')
	}) < 0
}

func (c *Controller) waitEnd(ctx context.Context, id string) (*pipelines.Run, error) {
	ch := make(chan *pipelines.Run, 1)
	c.mu.Lock()
	c.waiters[id] = append(c.waiters[id], ch)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		list := c.waiters[id]
		for i, w := range list {
			if w == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(c.waiters, id)
		} else {
			c.waiters[id] = list
		}
	}()
	// Registered first, read second: an end between the two is not missed.
	r, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.Status.Terminal() {
		return r, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		return r, nil
	}
}

// finished hands a run that ended to its Wait calls.
func (c *Controller) finished(r *pipelines.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.waiters[r.ID] {
		select {
		case ch <- r:
		default:
		}
	}
}

// load parses a pipeline, reusing the result for a source it parsed before: a trigger or a
// script starts the same file again and again. Loaded pipelines are never changed.
func (c *Controller) load(file string, src []byte) (*pipelines.Pipeline, error) {
	sum := sha256.Sum256(src)
	key := file + "\x00" + string(sum[:])
	c.mu.Lock()
	p := c.parsed[key]
	c.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := pipelines.Load(file, src, c.reg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.parsed) >= maxParsed {
		clear(c.parsed)
	}
	c.parsed[key] = p
	c.mu.Unlock()
	return p, nil
}

// storeSpec stores a pipeline's source under its hash, once per source: runs of the same
// pipeline share it, and stored sources are never changed or removed.
func (c *Controller) storeSpec(ctx context.Context, p *pipelines.Pipeline) error {
	c.mu.Lock()
	_, done := c.specs[p.Hash]
	c.mu.Unlock()
	if done {
		return nil
	}
	spec, _ := json.Marshal(storedSpec{File: p.File, Source: p.Source})
	if _, err := c.b.Specs.Put(ctx, p.Hash, spec); err != nil {
		return fmt.Errorf("store pipeline: %w", err)
	}
	c.mu.Lock()
	if len(c.specs) >= maxSpecs {
		clear(c.specs)
	}
	c.specs[p.Hash] = struct{}{}
	c.mu.Unlock()
	return nil
}

// maxParsed and maxSpecs bound the parsed-pipeline cache and the set of stored sources.
const (
	maxParsed = 256
	maxSpecs  = 4096
)
