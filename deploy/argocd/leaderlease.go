package argocd

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaderLease is the agent leader lease (see leaderLease), exported so that agents for other
// GitOps engines (deploy/flux) elect their status writer exactly as this agent does.
type LeaderLease struct{ l leaderLease }

// ErrLeaseHeld is TryAcquire's answer while another live replica leads.
var ErrLeaseHeld = errLeaseHeld

// NewLeaderLease returns holder's lease on key (queue.LeaseKey("agent", id)) in the
// prflow-locks bucket kv, expiring ttl after its last renewal.
func NewLeaderLease(kv jetstream.KeyValue, key, holder string, ttl time.Duration) *LeaderLease {
	return &LeaderLease{leaderLease{kv: kv, key: key, holder: holder, ttl: ttl}}
}

// TryAcquire takes the lease if it is free, expired or already ours.
func (l *LeaderLease) TryAcquire(ctx context.Context) (uint64, error) { return l.l.tryAcquire(ctx) }

// Hold renews the lease until ctx ends or it is lost (second result true).
func (l *LeaderLease) Hold(ctx context.Context, rev uint64) (uint64, bool) { return l.l.hold(ctx, rev) }

// Release frees the lease if it is still ours.
func (l *LeaderLease) Release(rev uint64) { l.l.release(rev) }
