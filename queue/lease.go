package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLeaseHeld is returned by TryAcquire when someone else holds the lease.
var ErrLeaseHeld = errors.New("lease held by another holder")

// Leases serialise writers of one repo+branch across all workers. A lease is a key in the
// prflow-locks bucket whose TTL (LeaseTTL) frees it if its holder dies; a live holder renews it.
type Leases struct {
	KV jetstream.KeyValue
	// Renew is how often a held lease is renewed; default LeaseTTL/3.
	Renew time.Duration
}

type leaseValue struct {
	Holder string    `json:"holder"`
	At     time.Time `json:"at"`
}

// Lease is a held lease; Release it when done.
type Lease struct {
	l      *Leases
	key    string
	holder string
	mu     sync.Mutex
	rev    uint64
	stop   chan struct{}
	done   chan struct{}
	lost   chan struct{}
}

// LeaseKey turns a repo and branch into a valid KV key.
func LeaseKey(parts ...string) string {
	b := make([]byte, 0, 64)
	for i, p := range parts {
		if i > 0 {
			b = append(b, '.')
		}
		for _, c := range []byte(p) {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
				b = append(b, c)
			default:
				b = append(b, '_')
				b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			}
		}
	}
	return string(b)
}

// TryAcquire takes the lease or returns ErrLeaseHeld.
func (l *Leases) TryAcquire(ctx context.Context, key, holder string) (*Lease, error) {
	v, _ := json.Marshal(leaseValue{Holder: holder, At: time.Now()})
	rev, err := l.KV.Create(ctx, key, v)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			// The same holder (a redelivered job on the same worker id) may re-take its own lease.
			if e, gerr := l.KV.Get(ctx, key); gerr == nil {
				var cur leaseValue
				if json.Unmarshal(e.Value(), &cur) == nil && cur.Holder == holder {
					if rev, uerr := l.KV.Update(ctx, key, v, e.Revision()); uerr == nil {
						return l.start(key, holder, rev), nil
					}
				}
			}
			return nil, ErrLeaseHeld
		}
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	return l.start(key, holder, rev), nil
}

// Acquire waits until the lease is free (polling every 100ms up to 1s apart) or ctx ends.
func (l *Leases) Acquire(ctx context.Context, key, holder string) (*Lease, error) {
	wait := 50 * time.Millisecond
	for {
		ls, err := l.TryAcquire(ctx, key, holder)
		if err == nil {
			return ls, nil
		}
		if !errors.Is(err, ErrLeaseHeld) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lease %s: %w", key, ctx.Err())
		case <-time.After(wait):
		}
		if wait < time.Second {
			wait *= 2
		}
	}
}

func (l *Leases) start(key, holder string, rev uint64) *Lease {
	ls := &Lease{l: l, key: key, holder: holder, rev: rev, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{})}
	every := l.Renew
	if every <= 0 {
		every = LeaseTTL / 3
	}
	go func() {
		defer close(ls.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ls.stop:
				return
			case <-t.C:
				v, _ := json.Marshal(leaseValue{Holder: holder, At: time.Now()})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ls.mu.Lock()
				rev, err := l.KV.Update(ctx, key, v, ls.rev)
				if err == nil {
					ls.rev = rev
				}
				ls.mu.Unlock()
				cancel()
				if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
					close(ls.lost) // expired and taken by someone else: the holder must stop writing
					return
				}
			}
		}
	}()
	return ls
}

// Lost is closed when the lease expired and another holder took it.
func (ls *Lease) Lost() <-chan struct{} { return ls.lost }

// Release frees the lease if this holder still has it.
func (ls *Lease) Release(ctx context.Context) error {
	close(ls.stop)
	<-ls.done
	ls.mu.Lock()
	defer ls.mu.Unlock()
	err := ls.l.KV.Delete(ctx, ls.key, jetstream.LastRevision(ls.rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}
