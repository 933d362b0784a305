package controller

import (
	"context"
	"encoding/json"
	"errors"
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
		if c.runStore.skip(e.Key(), e.Revision()) {
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
			if !c.runStore.skip(e.Key(), e.Revision()) {
				c.reload(ctx, e.Key())
			}
		}
		_ = mw.Stop()
	}
}

// reload reads a run another replica wrote and brings the index and Wait calls up to date.
func (c *Controller) reload(ctx context.Context, id string) {
	cr, err := c.runStore.read(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		c.forget(id)
		return
	}
	if err != nil {
		c.log.Warn("read run another replica changed", "run", id, "err", err)
		return
	}
	r, err := cr.decode(id)
	if err != nil {
		c.log.Warn("unreadable run state", "run", id, "err", err)
		return
	}
	c.apply(ctx, r, cr.rev, false)
}

// apply takes in a revision of a run this controller did not write.
func (c *Controller) apply(ctx context.Context, r *pipelines.Run, rev uint64, restart bool) {
	c.indexRun(r, rev)
	c.runStore.seen(r.ID, rev)
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
		c.runStore.ended(r.ID)
		c.finished(r)
	}
}
