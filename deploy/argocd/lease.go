package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
)

// errLeaseHeld: another live replica leads.
var errLeaseHeld = errors.New("leader lease held by another replica")

// leaderLease is the agent's leader lease in prflow-locks. Unlike queue.Leases (which rely on
// the bucket's 30s TTL), the record says when it expires, so a replica takes over from a
// crashed leader after TTL (a few seconds) instead of the bucket's TTL; the holder renews
// it every TTL/3 and stops writing once it could not renew for 2/3 of the TTL.
type leaderLease struct {
	kv     jetstream.KeyValue
	key    string
	holder string
	ttl    time.Duration
}

type leaseRecord struct {
	Holder  string    `json:"holder"`
	At      time.Time `json:"at"`
	Expires time.Time `json:"expires,omitzero"`
}

func (l *leaderLease) value(now time.Time) []byte {
	b, _ := json.Marshal(leaseRecord{Holder: l.holder, At: now.UTC(), Expires: now.Add(l.ttl).UTC()})
	return b
}

// tryAcquire takes the lease if it is free, expired or already ours; it returns the KV
// revision to renew from.
func (l *leaderLease) tryAcquire(ctx context.Context) (uint64, error) {
	now := time.Now()
	rev, err := l.kv.Create(ctx, l.key, l.value(now))
	if err == nil {
		return rev, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSeq(err) {
		return 0, fmt.Errorf("leader lease %s: %w", l.key, err)
	}
	e, err := l.kv.Get(ctx, l.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, errLeaseHeld // deleted meanwhile: the next try creates it
	}
	if err != nil {
		return 0, fmt.Errorf("leader lease %s: %w", l.key, err)
	}
	var cur leaseRecord
	_ = json.Unmarshal(e.Value(), &cur)
	exp := cur.Expires
	if exp.IsZero() {
		exp = cur.At.Add(queue.LeaseTTL) // written by queue.Leases (an older agent)
	}
	if cur.Holder != l.holder && now.Before(exp) {
		return 0, errLeaseHeld
	}
	rev, err = l.kv.Update(ctx, l.key, l.value(now), e.Revision())
	if err != nil {
		return 0, errLeaseHeld // someone else was faster
	}
	return rev, nil
}

// hold renews the lease until ctx ends or the lease is lost; it returns the last revision
// and whether the lease was lost.
func (l *leaderLease) hold(ctx context.Context, rev uint64) (uint64, bool) {
	every := l.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return rev, false
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		n, err := l.kv.Update(rctx, l.key, l.value(time.Now()), rev)
		cancel()
		switch {
		case err == nil:
			rev, lastOK = n, time.Now()
		case ctx.Err() != nil:
			return rev, false
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) || isWrongLastSeq(err):
			return rev, true // expired and taken by another replica
		case time.Since(lastOK) > l.ttl*2/3:
			return rev, true // another replica may take it soon: stop writing now
		}
	}
}

// release frees the lease if it is still ours, so another replica takes over at once.
func (l *leaderLease) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
}

func isWrongLastSeq(err error) bool {
	return err != nil && strings.Contains(err.Error(), "wrong last sequence")
}
