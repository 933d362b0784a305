package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

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
