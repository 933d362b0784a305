package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/envelope"
)

// index brings what waits on run r into step with its revision rev: its parked steps in the
// park index, its next due time in the timers, its metrics. A revision older than the one
// indexed changes nothing.
func (c *Controller) index(r *pipelines.Run, m *pipelines.Machine, rev uint64) {
	parked := m.Parked(r)
	missed, _ := c.park.park(r.ID, rev, r.Status.Terminal(), parked, func() {
		c.metrics.track(r, parked)
		c.timers.schedule(r.ID, m.NextDue(r))
	})
	if len(missed) > 0 {
		// A change that landed after the step's job went out but before this park was
		// indexed would otherwise wake nobody: wake now.
		go func() { _ = c.wakeRefs(context.Background(), missed, "key changed before the step parked") }()
	}
}

// forget drops everything the controller holds about a run that was deleted.
func (c *Controller) forget(run string) {
	c.runs.remove(run)
	c.runStore.drop(run)
	c.park.unpark(run, func() {
		c.metrics.untrack(run)
		c.timers.cancel(run)
	})
}

// tick wakes run at its due time: one tick per due time across all replicas.
func (c *Controller) tick(run string, due time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Publish(ctx, envelope.Event{Kind: queue.EvTick, Run: run}, "tick/"+run+"/"+strconv.FormatInt(due.UnixNano(), 36))
}

// watchApps wakes the steps parked on an app status key when it changes. The watcher first
// delivers every current record: once every run is indexed, a record written after a step
// parked (while no controller watched: a restart) wakes that step, so a parked step needs no
// poll to catch up.
func (c *Controller) watchApps(ctx context.Context, w jetstream.KeyWatcher) {
	select {
	case <-c.loaded:
	case <-ctx.Done():
		return
	}
	initial := true
	for e := range w.Updates() {
		if e == nil {
			initial = false // every current record delivered
			continue
		}
		now := time.Now()
		if initial {
			// The server stamps Created; allow for its clock and ours to differ.
			at := e.Created()
			c.changed.set(e.Key(), at, now)
			refs := c.park.wokenBefore(e.Key(), at.Add(clockSkew))
			if len(refs) > 0 {
				_ = c.wakeRefs(ctx, refs, "key "+e.Key()+" changed while no controller watched")
			}
			continue
		}
		c.changed.set(e.Key(), now, now)
		c.apps.feed.publish(e.Key()) // live run pages (appwatch.go)
		_ = c.wakeRefs(ctx, c.park.woken(e.Key()), "key "+e.Key()+" changed")
	}
}

// clockSkew is how far the NATS server's clock (a record's Created) may be behind ours: a
// record written up to this long before a step parked still wakes it after a restart (a wake
// too many costs one job; one too few a wait until the deadline).
const clockSkew = 30 * time.Second

// WakeTopic wakes every step parked on an event topic (e.g. "pr:github:acme/deploy#12" when
// that PR's webhook arrives). Wakes are deduplicated per wake number across replicas.
func (c *Controller) WakeTopic(ctx context.Context, topic string) error {
	return c.wakeRefs(ctx, c.park.wokenByTopic(topic), "event "+topic)
}

func (c *Controller) wakeRefs(ctx context.Context, refs []parkRef, reason string) error {
	var first error
	for _, ref := range refs {
		id := fmt.Sprintf("wake/%s/%s/%s/%t/%d", ref.Run, ref.Stage, ref.Step, ref.Rollback, ref.Wake)
		ev := envelope.Event{Kind: queue.EvWake, Run: ref.Run, Stage: ref.Stage, Step: ref.Step, Rollback: ref.Rollback, Wake: ref.Wake, Reason: reason}
		if err := c.Publish(ctx, ev, id); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("wake failed", "run", ref.Run, "err", err)
			}
			if first == nil {
				first = err
			}
			continue
		}
		c.metrics.Wakes.WithLabelValues("event").Inc()
	}
	return first
}
