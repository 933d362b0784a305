package controller

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/envelope"
)

// watchRuns keeps timers, the wake index and Wait calls in step with every run's state, for
// all replicas. It first replays every run with its value (the state after a restart), then
// follows changes by revision only: this controller's own writes, nearly all of them, are
// skipped without their values crossing the wire, and only other replicas' writes are read.
func (c *Controller) watchRuns(ctx context.Context, w jetstream.KeyWatcher) {
	defer c.loadOne.Do(func() { close(c.loaded) })
	var last uint64
	for e := range w.Updates() {
		if e == nil {
			break // every run replayed
		}
		last = max(last, e.Revision())
		if e.Operation() != jetstream.KeyValuePut {
			c.forget(e.Key())
			continue
		}
		if c.own.skip(e.Key(), e.Revision()) {
			continue
		}
		var r pipelines.Run
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			c.log.Warn("unreadable run state", "run", e.Key(), "err", err)
			continue
		}
		c.apply(ctx, &r, e.Revision(), true)
	}
	_ = w.Stop()
	if ctx.Err() != nil {
		return
	}
	c.loadOne.Do(func() { close(c.loaded) })
	for ctx.Err() == nil {
		mw, err := c.b.Runs.WatchAll(ctx, jetstream.IncludeHistory(), jetstream.MetaOnly(), jetstream.ResumeFromRevision(last+1))
		if err != nil {
			c.log.Warn("watch runs", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range mw.Updates() {
			if e == nil {
				continue
			}
			last = e.Revision()
			if e.Operation() != jetstream.KeyValuePut {
				c.forget(e.Key())
				continue
			}
			if !c.own.skip(e.Key(), e.Revision()) {
				c.reload(ctx, e.Key())
			}
		}
		_ = mw.Stop()
	}
}

// reload reads a run another replica wrote and brings the index and Wait calls up to date.
func (c *Controller) reload(ctx context.Context, id string) {
	e, err := c.b.Runs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		c.forget(id)
		return
	}
	if err != nil {
		c.log.Warn("read run another replica changed", "run", id, "err", err)
		return
	}
	var r pipelines.Run
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		c.log.Warn("unreadable run state", "run", id, "err", err)
		return
	}
	c.apply(ctx, &r, e.Revision(), false)
}

// apply takes in a revision of a run this controller did not write.
func (c *Controller) apply(ctx context.Context, r *pipelines.Run, rev uint64, restart bool) {
	c.indexRun(r, rev)
	// Our cached copy is stale (and would stay in memory for good if the other replica
	// finishes the run).
	if v, ok := c.cache.Load(r.ID); ok && v.(*cachedRun).rev < rev {
		c.cache.CompareAndDelete(r.ID, v)
	}
	m, err := c.machine(ctx, r.Spec)
	if err != nil {
		return
	}
	if restart && r.Active() {
		// After a restart: re-send jobs that may never have gone out, and kick the run.
		// Notifications of every event the state shows: those already out are dropped by
		// their Nats-Msg-Id or the workers' sent marks.
		_ = c.publishJobs(ctx, append(m.Jobs(r), m.NotifyJobsSince(r, c.runURL(r.ID), notifySince())...))
		_ = c.Publish(ctx, envelope.Event{Kind: queue.EvTick, Run: r.ID}, "")
	}
	c.index(r, m, rev)
	if r.Status.Terminal() {
		c.own.forget(r.ID)
		c.finished(r)
	}
}

// ownWrites tracks this controller's writes to prflow-runs so that the runs watcher, which
// sees revisions but no values, skips them, including one it sees before the write returns.
type ownWrites struct {
	mu       sync.Mutex
	done     map[string]ownRev   // run → newest revision we wrote and indexed
	inflight map[string][]uint64 // run → revisions seen while our write was under way
}

type ownRev struct {
	rev   uint64
	final bool // the run ended: forgotten once the watcher has passed it
}

// begin marks a write to run as under way.
func (o *ownWrites) begin(run string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight == nil {
		o.inflight, o.done = map[string][]uint64{}, map[string]ownRev{}
	}
	o.inflight[run] = nil
}

// end records how the write went (revision rev if ok) and reports whether the watcher saw
// revisions meanwhile that were not ours and are newer than what we know: then the run
// must be read back.
func (o *ownWrites) end(run string, rev uint64, ok, final bool) (others bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.inflight[run]
	delete(o.inflight, run)
	passed := false
	for _, s := range seen {
		switch {
		case ok && s == rev:
			passed = true
		case !ok || s > rev:
			others = true
		}
	}
	if ok {
		if final && passed {
			delete(o.done, run)
		} else {
			o.done[run] = ownRev{rev: rev, final: final}
		}
	}
	return others
}

// skip reports whether the watcher can pass over revision rev of run: ours and indexed, or
// ours still being written (end then decides).
func (o *ownWrites) skip(run string, rev uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.done[run]; ok && d.rev >= rev {
		if d.final && d.rev == rev {
			delete(o.done, run)
		}
		return true
	}
	if seen, ok := o.inflight[run]; ok {
		o.inflight[run] = append(seen, rev)
		return true
	}
	return false
}

func (o *ownWrites) forget(run string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.done, run)
}
