package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func open(t *testing.T) *Conn {
	t.Helper()
	c, err := Open(context.Background(), Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// openTopology is open with prflow's topology set up (one replica).
func openTopology(t *testing.T) *Conn {
	t.Helper()
	c := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Setup(ctx, c.JS, 1); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSetupIsIdempotent(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := Setup(ctx, c.JS, 1); err != nil {
			t.Fatalf("setup #%d: %v", i+1, err)
		}
	}
	b, err := OpenBuckets(ctx, c.JS)
	if err != nil || b.Runs == nil || b.Locks == nil {
		t.Fatalf("buckets: %v", err)
	}
	s, err := c.JS.Stream(ctx, StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Duplicates != DedupWindow {
		t.Errorf("jobs stream config: %+v", info.Config)
	}
	// Dedup: the same job id published twice is stored once.
	for i := 0; i < 2; i++ {
		ack, err := c.JS.Publish(ctx, JobSubject("p"), []byte("{}"), jetstream.WithMsgID("r/s/x/1/0"))
		if err != nil || ack.Duplicate != (i == 1) {
			t.Fatalf("publish %d: dup=%v err=%v", i, ack != nil && ack.Duplicate, err)
		}
	}
}

func TestLeases(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	kv, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test-locks", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := &Leases{KV: kv, Renew: 200 * time.Millisecond}
	key := LeaseKey("acme/deploy", "main")
	if strings.ContainsAny(key, "/ ") {
		t.Fatalf("key %q is not a valid KV key", key)
	}
	a, err := l.TryAcquire(ctx, key, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, key, "worker-b"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("second holder: %v", err)
	}
	// Renewal keeps it past the TTL.
	time.Sleep(1500 * time.Millisecond)
	if _, err := l.TryAcquire(ctx, key, "worker-b"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("lease expired while renewed: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, key, "worker-b")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	// A holder that dies (stops renewing) loses the lease after the TTL; another takes it and
	// the old holder is told.
	close(b.stop)
	<-b.done
	time.Sleep(1500 * time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cLease, err := l.Acquire(actx, key, "worker-c")
	if err != nil {
		t.Fatalf("steal after expiry: %v", err)
	}
	defer cLease.Release(ctx)
}
