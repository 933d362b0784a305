package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
)

// LeaseLocker serialises writers of one repo+branch across all workers with KV leases, and
// lines up merges per repo+branch in Queue (steps.MergeQueue) when it is set.
type LeaseLocker struct {
	Leases *queue.Leases
	Holder string
	// Queue is the merge queue (queue.OpenMergeQueue); nil: merges wait for the lease in Lock.
	Queue *queue.MergeQueue
	seq   atomic.Int64
}

// NewLeaseLocker is the locker of worker holder on buckets b, with the merge queue in mq
// (the prflow-mergeq bucket; nil for none).
func NewLeaseLocker(b *queue.Buckets, mq jetstream.KeyValue, holder string) *LeaseLocker {
	l := &LeaseLocker{Leases: &queue.Leases{KV: b.Locks}, Holder: holder}
	if mq != nil {
		l.Queue = &queue.MergeQueue{KV: mq, Leases: l.Leases}
	}
	return l
}

// JoinMergeQueue implements steps.MergeQueue. At the head of the line it holds the line's
// lease; when the previous head is still releasing it, it tries again for a moment.
func (l *LeaseLocker) JoinMergeQueue(ctx context.Context, id string, line ...string) (*steps.QueueTurn, error) {
	if l.Queue == nil {
		return nil, nil
	}
	key := queue.LineKey(line...)
	var p *queue.Place
	wait := 20 * time.Millisecond
	for try := 0; ; try++ {
		var err error
		if p, err = l.Queue.Join(ctx, key, id); err != nil {
			return nil, err
		}
		if p.Position > 0 || p.Lease != nil || try == 6 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
	lease := p.Lease
	return &steps.QueueTurn{Head: lease != nil, Ahead: p.Position, WakeKey: queue.MergeQueueWaitPrefix + p.WakeKey,
		Done: func(leave bool) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if leave {
				_ = l.Queue.Leave(rctx, key, id, lease)
			} else if lease != nil {
				_ = lease.Release(rctx)
			}
		}}, nil
}

// LeaveMergeQueue implements steps.MergeQueue.
func (l *LeaseLocker) LeaveMergeQueue(ctx context.Context, id string, line ...string) error {
	if l.Queue == nil {
		return nil
	}
	return l.Queue.Leave(ctx, queue.LineKey(line...), id, nil)
}

// RemoveRun takes a run's merges out of every line (its run failed or was cancelled).
func (l *LeaseLocker) RemoveRun(ctx context.Context, run string) (int, error) {
	if l.Queue == nil {
		return 0, nil
	}
	return l.Queue.RemoveRun(ctx, run)
}

// Lock blocks until the lease for key is held (or ctx ends) and returns its release.
func (l *LeaseLocker) Lock(ctx context.Context, key string) (func(), error) {
	// Each lock call is its own holder, so two jobs on one worker exclude each other too.
	ls, err := l.Leases.Acquire(ctx, queue.LeaseKey(key), fmt.Sprintf("%s/%d", l.Holder, l.seq.Add(1)))
	if err != nil {
		return nil, err
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = ls.Release(rctx)
	}, nil
}

// Advance records seq as the newest step of the sequence called key and reports whether seq is
// still current (no higher one was recorded). Jobs that may run out of order, such as a
// stage's pending and final commit status, use it under a lock to skip a stale write. The
// record lives in the locks bucket, so it is forgotten after the lease TTL.
func (l *LeaseLocker) Advance(ctx context.Context, key string, seq int) (bool, error) {
	k := queue.LeaseKey("seq", key)
	for range 20 {
		e, err := l.Leases.KV.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := l.Leases.KV.Create(ctx, k, []byte(strconv.Itoa(seq))); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			} else if err != nil {
				return false, err
			}
			return true, nil
		}
		if err != nil {
			return false, err
		}
		cur, _ := strconv.Atoi(string(e.Value()))
		if cur > seq {
			return false, nil
		}
		if cur == seq {
			return true, nil // a retry of the same write
		}
		if _, err := l.Leases.KV.Update(ctx, k, []byte(strconv.Itoa(seq)), e.Revision()); errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		} else if err != nil {
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("sequence %s: too many concurrent updates", key)
}
