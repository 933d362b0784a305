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
)

// LeaseLocker serialises writers of one repo+branch across all workers with KV leases.
type LeaseLocker struct {
	Leases *queue.Leases
	Holder string
	seq    atomic.Int64
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
