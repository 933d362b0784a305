package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// mergeQueue opens a merge queue on a fresh server; the locks bucket's TTL is lockTTL and
// leases are renewed every renew (long: a holder that never renews dies at lockTTL).
func mergeQueue(t *testing.T, lockTTL, renew, grace time.Duration) *MergeQueue {
	t.Helper()
	c := open(t)
	ctx := context.Background()
	locks, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketLocks, TTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := OpenMergeQueue(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	return &MergeQueue{KV: kv, Leases: &Leases{KV: locks, Renew: renew}, Grace: grace}
}

func join(t *testing.T, q *MergeQueue, line, id string) *Place {
	t.Helper()
	p, err := q.Join(context.Background(), line, id)
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	return p
}

func turned(t *testing.T, q *MergeQueue, line, id string) bool {
	t.Helper()
	_, err := q.KV.Get(context.Background(), TurnKey(line, id))
	return err == nil
}

func TestMergeQueueIsAFairFIFOAndWakesTheNext(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Minute)
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	ids := []string{"r1/dev/merge", "r2/dev/merge", "r3/dev/rb.merge"}
	var first *Lease
	for i, id := range ids {
		p := join(t, q, line, id)
		if p.Position != i {
			t.Fatalf("%s joined at %d, want %d", id, p.Position, i)
		}
		if (p.Lease != nil) != (i == 0) {
			t.Fatalf("%s at %d: lease held = %v", id, i, p.Lease != nil)
		}
		if i == 0 {
			first = p.Lease
		}
	}
	// A redelivered or woken step keeps its place and does not take the head's lease.
	if p := join(t, q, line, ids[2]); p.Position != 2 || p.Lease != nil {
		t.Fatalf("re-join of %s: position %d lease %v", ids[2], p.Position, p.Lease != nil)
	}
	if turned(t, q, line, ids[1]) {
		t.Fatal("r2 woken before r1 left")
	}
	// A second delivery of the head while the first still runs (renews its lease) must not
	// merge too; once the first is gone it takes its own place over.
	if dup := join(t, q, line, ids[0]); dup.Position != 0 || dup.Lease != nil {
		t.Fatalf("duplicate head delivery: position %d lease %v", dup.Position, dup.Lease != nil)
	}
	first.Release(ctx) //nolint:errcheck // the first delivery ends
	head := join(t, q, line, ids[0])
	if head.Position != 0 || head.Lease == nil {
		t.Fatalf("head re-join: position %d lease %v", head.Position, head.Lease != nil)
	}
	if err := q.Leave(ctx, line, ids[0], head.Lease); err != nil {
		t.Fatal(err)
	}
	if !turned(t, q, line, ids[1]) {
		t.Fatal("r2 was not woken when r1 left")
	}
	if turned(t, q, line, ids[2]) {
		t.Fatal("r3 woken though r2 is ahead of it")
	}
	p := join(t, q, line, ids[1])
	if p.Position != 0 || p.Lease == nil {
		t.Fatalf("r2 after r1 left: position %d lease %v", p.Position, p.Lease != nil)
	}
	// Leaving twice, or leaving a line one is not in, is harmless.
	if err := q.Leave(ctx, line, ids[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Leave(ctx, line, ids[1], p.Lease); err != nil {
		t.Fatal(err)
	}
	es, _ := q.Entries(ctx, line)
	if len(es) != 1 || es[0].ID != ids[2] || es[0].Head.IsZero() {
		t.Fatalf("entries: %+v", es)
	}
	if err := q.Leave(ctx, line, ids[2], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.KV.Get(ctx, lineKV(line)); err == nil {
		t.Fatal("an empty line is not deleted")
	}
	if err := q.Leave(ctx, line, ids[2], nil); err != nil {
		t.Fatalf("leave an empty line: %v", err)
	}
}

func TestMergeQueueDeadHeadLosesItsPlaceAfterItsLeaseExpires(t *testing.T) {
	// The head's holder never renews (it died): its lease goes after the 1 s TTL.
	q := mergeQueue(t, time.Second, time.Hour, 200*time.Millisecond)
	line := LineKey("gh", "acme/release", "main")
	a := join(t, q, line, "ra/s/merge")
	if a.Lease == nil {
		t.Fatal("head without lease")
	}
	if p := join(t, q, line, "rb/s/merge"); p.Position != 1 {
		t.Fatalf("b at %d while a holds its lease", p.Position)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		p := join(t, q, line, "rb/s/merge")
		if p.Position == 0 {
			if p.Lease == nil {
				t.Fatal("new head without the lease")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead head was never removed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The dead head's redelivered job finds itself gone and queues again at the end.
	if p := join(t, q, line, "ra/s/merge"); p.Position != 1 {
		t.Fatalf("dead head re-joined at %d", p.Position)
	}
}

func TestMergeQueueNewHeadGetsGraceToStart(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Hour)
	ctx := context.Background()
	line := LineKey("local", "release", "main")
	a := join(t, q, line, "ra/s/m")
	join(t, q, line, "rb/s/m")
	join(t, q, line, "rc/s/m")
	if err := q.Leave(ctx, line, "ra/s/m", a.Lease); err != nil {
		t.Fatal(err)
	}
	// b is the head now but its job has not run yet (no lease): c must not pass it.
	if p := join(t, q, line, "rc/s/m"); p.Position != 1 {
		t.Fatalf("c passed a head within its grace: position %d", p.Position)
	}
}

func TestMergeQueueConcurrentJoinsKeepEveryEntryOnce(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Minute)
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("r%02d/s/m", i)
			for range 2 { // the second join is a redelivery: same place
				p, err := q.Join(ctx, line, id)
				if err != nil {
					errs <- err
					return
				}
				if p.Lease != nil {
					defer func() { _ = p.Lease.Release(ctx) }()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	es, err := q.Entries(ctx, line)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range es {
		if seen[e.ID] {
			t.Fatalf("%s twice in the line", e.ID)
		}
		seen[e.ID] = true
	}
	if len(es) != n {
		t.Fatalf("%d entries, want %d", len(es), n)
	}
}

func TestMergeQueueRemoveRunWakesTheNext(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Minute)
	ctx := context.Background()
	l1, l2 := LineKey("gh", "acme/a", "main"), LineKey("gh", "acme/b", "main")
	x := join(t, q, l1, "rx/dev/merge") // the cancelled run, head of l1 (its holder is gone)
	join(t, q, l1, "ry/dev/merge")
	join(t, q, l2, "rz/dev/merge")
	join(t, q, l2, "rx/prod/merge")
	x.Lease.Release(ctx) //nolint:errcheck // as the cancelled job did
	n, err := q.RemoveRun(ctx, "rx")
	if err != nil || n != 2 {
		t.Fatalf("RemoveRun: %d, %v", n, err)
	}
	if !turned(t, q, l1, "ry/dev/merge") {
		t.Fatal("ry not woken after the head's run was removed")
	}
	for _, l := range []string{l1, l2} {
		es, _ := q.Entries(ctx, l)
		if len(es) != 1 || es[0].ID[:2] == "rx" {
			t.Fatalf("%s: %+v", l, es)
		}
	}
	if n, err := q.RemoveRun(ctx, "rx"); err != nil || n != 0 {
		t.Fatalf("second RemoveRun: %d, %v", n, err)
	}
	if _, err := q.Join(ctx, "", "a"); err == nil {
		t.Fatal("empty line accepted")
	}
}
