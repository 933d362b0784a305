package controller

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
)

// watchMergeQueue wakes a merge parked in a merge queue (steps.MergePR) when its turn key is
// written: the merge ahead of it ended, or a waiter found the head's holder dead. Its wait key
// is the turn key with queue.MergeQueueWaitPrefix, kept apart from app status keys.
func (c *Controller) watchMergeQueue(ctx context.Context, w jetstream.KeyWatcher) {
	sweep := time.NewTicker(10 * time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			c.forgetTurns(time.Now().Add(-10 * time.Minute))
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			k := queue.MergeQueueWaitPrefix + e.Key()
			c.mu.Lock()
			c.changed[k] = time.Now() // a turn that comes before the step parked still wakes it (index)
			c.mu.Unlock()
			_ = c.wakeRefs(ctx, c.refsFor(c.byKey, k), "its turn in the merge queue")
		}
	}
}

// forgetTurns drops turn keys seen before t: one is written per merge, and a park indexed
// that long after its turn was polled awake long ago.
func (c *Controller) forgetTurns(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, at := range c.changed {
		if strings.HasPrefix(k, queue.MergeQueueWaitPrefix) && at.Before(t) {
			delete(c.changed, k)
		}
	}
}
