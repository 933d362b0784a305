package worker

import (
	"context"

	"github.com/prflow/prflow/queue"
)

// LeaseLocker serialises writers of one repo+branch across all workers with KV leases.
type LeaseLocker struct {
	Leases *queue.Leases
	Holder string
}

// Lock blocks until the lease for key is held (or ctx ends) and returns its release.
func (l *LeaseLocker) Lock(ctx context.Context, key string) (func(), error) {
	ls, err := l.Leases.Acquire(ctx, queue.LeaseKey(key), l.Holder)
	if err != nil {
		return nil, err
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5_000_000_000)
		defer cancel()
		_ = ls.Release(rctx)
	}, nil
}
