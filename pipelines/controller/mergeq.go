package controller

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
)

// watchMergeQueue wakes a merge parked in a merge queue (steps.MergePR) when its turn key is
// written: the merge ahead of it ended, or a waiter found the head's holder dead. Its wait key
// is the turn key with queue.MergeQueueWaitPrefix, kept apart from app status keys.
func (c *Controller) watchMergeQueue(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			k := queue.MergeQueueWaitPrefix + e.Key()
			now := time.Now()
			c.changed.set(k, now, now) // a turn that comes before the step parked still wakes it (index)
			_ = c.wakeRefs(ctx, c.park.woken(k), "its turn in the merge queue")
		}
	}
}
