package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
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
			release, err := joinTwice(ctx, q, line, id)
			defer release()
			if err != nil {
				errs <- err
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

// mergeQueues opens n merge queues on one embedded server, each on its own connection, as n
// worker processes would.
func mergeQueues(t *testing.T, n int, lockTTL, renew, grace time.Duration) []*MergeQueue {
	t.Helper()
	srv := mergeServer(t, lockTTL)
	qs := []*MergeQueue{mergeQueueOn(t, srv, renew, grace)}
	for i := 1; i < n; i++ {
		c, err := Open(context.Background(), Options{URL: srv.ClientURL(), Name: fmt.Sprintf("worker-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		qs = append(qs, mergeQueueOn(t, c, renew, grace))
	}
	return qs
}

// mergeServer starts an embedded server listening on TCP with a locks bucket of lockTTL.
func mergeServer(t *testing.T, lockTTL time.Duration) *Conn {
	t.Helper()
	srv, err := Open(context.Background(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if _, err := srv.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: BucketLocks, TTL: lockTTL}); err != nil {
		t.Fatal(err)
	}
	return srv
}

func mergeQueueOn(t *testing.T, c *Conn, renew, grace time.Duration) *MergeQueue {
	t.Helper()
	ctx := context.Background()
	locks, err := c.JS.KeyValue(ctx, BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := OpenMergeQueue(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	// Bounded, as OpenBuckets gives the workers their locks bucket: a request lost in a server
	// restart fails after KVAttempt instead of waiting for the caller's deadline.
	q := &MergeQueue{KV: kv, Leases: &Leases{KV: BoundKV(locks, 0), Renew: renew}, Grace: grace}
	t.Cleanup(q.Close)
	return q
}

func ids(es []QueueEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// written collects the keys of the merge-queue bucket written from now on, until stop.
func written(t *testing.T, q *MergeQueue) (stop func() []string) {
	t.Helper()
	w, err := q.KV.WatchAll(context.Background(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var keys []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e != nil {
				mu.Lock()
				keys = append(keys, e.Key())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		// A marker put after the operations: once it arrives, so has everything before it.
		if _, err := q.KV.Put(context.Background(), "zz-marker", []byte("x")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			got := slices.Contains(keys, "zz-marker")
			out := slices.Clone(keys)
			mu.Unlock()
			if got {
				_ = w.Stop()
				<-done
				return out[:len(out)-1]
			}
			if time.Now().After(deadline) {
				t.Fatal("the marker key never arrived")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A join or a leave writes its own entry's key (and the run's index), never the other
// entries of the line: the single line value was rewritten whole by every one (O(q) bytes
// per join, O(q²) under contention).
func TestMergeQueueJoinAndLeaveWriteOnlyTheirOwnKey(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Hour)
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	for i := range 5 {
		join(t, q, line, fmt.Sprintf("r%d/s/m", i))
	}
	stop := written(t, q)
	join(t, q, line, "r9/s/m")
	join(t, q, line, "r3/s/m") // a woken park: nothing to write
	if err := q.Leave(ctx, line, "r2/s/m", nil); err != nil {
		t.Fatal(err)
	}
	got := stop()
	want := []string{runKey("r9", line), "q." + line + "." + LeaseKey("r9/s/m"), "q." + line + "." + LeaseKey("r2/s/m")}
	if !slices.Equal(got, want) {
		t.Fatalf("keys written:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	es, _ := q.Entries(ctx, line)
	if want := []string{"r0/s/m", "r1/s/m", "r3/s/m", "r4/s/m", "r9/s/m"}; !slices.Equal(ids(es), want) {
		t.Fatalf("line %v, want %v", ids(es), want)
	}
}

// Three worker processes put 36 merges in one line at once and then merge them: every
// process sees the same order, a merge whose join returned before another's began is ahead
// of it, and the merges run one at a time in that order.
func TestMergeQueueProcessesAgreeOnTheOrderAndMergeOneAtATime(t *testing.T) {
	qs := mergeQueues(t, 3, 30*time.Second, 10*time.Second, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	line := LineKey("gh", "acme/release", "main")
	const per = 12
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	spans := map[string]span{}
	var wg sync.WaitGroup
	errs := make(chan error, 3*per)
	for w, q := range qs {
		for i := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("w%d-%02d/s/m", w, i)
				start := time.Now()
				p, err := q.Join(ctx, line, id)
				if err == nil && p.Lease != nil {
					err = p.Lease.Release(ctx) // the merges start below, once all are in line
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				spans[id] = span{start, time.Now()}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var order []string
	for w, q := range qs {
		es, err := q.Entries(ctx, line)
		if err != nil {
			t.Fatal(err)
		}
		if w == 0 {
			order = ids(es)
		} else if !slices.Equal(ids(es), order) {
			t.Fatalf("worker %d sees %v\nworker 0 sees %v", w, ids(es), order)
		}
	}
	if len(order) != 3*per {
		t.Fatalf("%d entries, want %d: %v", len(order), 3*per, order)
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	for a, sa := range spans {
		for b, sb := range spans {
			if sa.end.Before(sb.start) && pos[a] > pos[b] {
				t.Fatalf("%s joined before %s began to but is behind it (%d > %d)", a, b, pos[a], pos[b])
			}
		}
	}

	// Now each merge waits for its turn (polling, as a parked step woken by its turn key
	// would) and merges; merging counts the merges under way.
	var merging, most int
	var merged []string
	errs = make(chan error, 3*per)
	for _, id := range order {
		q := qs[int(id[1]-'0')]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p, err := q.Join(ctx, line, id)
				if err != nil {
					errs <- err
					return
				}
				if p.Lease == nil {
					select {
					case <-ctx.Done():
						errs <- fmt.Errorf("%s never got its turn: %w", id, ctx.Err())
						return
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				mu.Lock()
				merging++
				most = max(most, merging)
				merged = append(merged, id)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				merging--
				mu.Unlock()
				if err := q.Leave(ctx, line, id, p.Lease); err != nil {
					errs <- err
				}
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most != 1 {
		t.Fatalf("%d merges ran at once", most)
	}
	if !slices.Equal(merged, order) {
		t.Fatalf("merged in the order\n%v\nnot the line's\n%v", merged, order)
	}
	for w, q := range qs {
		if es, err := q.Entries(ctx, line); err != nil || len(es) != 0 {
			t.Fatalf("worker %d: line after all merged: %v, %v", w, ids(es), err)
		}
	}
}

// When a dead head is removed, the entry behind it becomes the head with its own grace to
// start and is woken: it is not judged dead too because it never held the lease.
func TestMergeQueueEntryBehindADeadHeadIsWokenNotDropped(t *testing.T) {
	q := mergeQueue(t, time.Second, time.Hour, 300*time.Millisecond)
	line := LineKey("gh", "acme/release", "main")
	if a := join(t, q, line, "ra/s/m"); a.Lease == nil { // its holder dies: never renews, never leaves
		t.Fatal("head without lease")
	}
	join(t, q, line, "rb/s/m")
	join(t, q, line, "rc/s/m")
	time.Sleep(1500 * time.Millisecond) // past a's lease TTL and grace
	deadline := time.Now().Add(30 * time.Second)
	for {
		// c polls first: it removes a and makes b the head, but stays behind b.
		p := join(t, q, line, "rc/s/m")
		es, err := q.Entries(context.Background(), line)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) > 0 && es[0].ID == "rb/s/m" {
			if p.Position != 1 || p.Lease != nil {
				t.Fatalf("c at %d (lease %v) behind the new head b: %v", p.Position, p.Lease != nil, ids(es))
			}
			if es[0].Head.IsZero() || !turned(t, q, line, "rb/s/m") {
				t.Fatalf("b is first but not made the head and woken: %+v", es[0])
			}
			break
		}
		if !slices.Contains(ids(es), "rb/s/m") {
			t.Fatalf("b was dropped with the dead head: %v", ids(es))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead head was never removed: %v", ids(es))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p := join(t, q, line, "rb/s/m"); p.Position != 0 || p.Lease == nil {
		t.Fatalf("b at %d, lease %v", p.Position, p.Lease != nil)
	}
}

// deafen makes q's view of line drop every update from now on, as a watch that silently
// stopped delivering would, until the view is read afresh.
func deafen(t *testing.T, q *MergeQueue, line string) (reads int) {
	t.Helper()
	v := q.view(line)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.deaf = true
	return v.reads
}

func viewReads(q *MergeQueue, line string) int {
	v := q.view(line)
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads
}

// A view that misses what another worker wrote still gives the right answers: a woken head
// finds its turn, a new join finds its place behind an entry it never saw, and an entry
// another worker removed does not take the lease from the head behind it.
func TestMergeQueueViewThatMissedEventsConverges(t *testing.T) {
	qs := mergeQueues(t, 2, 30*time.Second, 10*time.Second, time.Minute)
	a, b := qs[0], qs[1]
	a.catchUp = 300 * time.Millisecond
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	h := join(t, b, line, "rh/s/m")
	join(t, a, line, "rx/s/m")

	reads := deafen(t, a, line)
	if err := b.Leave(ctx, line, "rh/s/m", h.Lease); err != nil {
		t.Fatal(err)
	}
	if !turned(t, b, line, "rx/s/m") {
		t.Fatal("x not woken when h left")
	}
	x := join(t, a, line, "rx/s/m")
	if x.Position != 0 || x.Lease == nil {
		t.Fatalf("woken x on a view that missed h leaving: position %d, lease %v", x.Position, x.Lease != nil)
	}
	if viewReads(a, line) <= reads {
		t.Fatal("the view was not read afresh")
	}

	deafen(t, a, line)
	if p := join(t, b, line, "ry/s/m"); p.Position != 1 {
		t.Fatalf("y at %d", p.Position)
	}
	if z := join(t, a, line, "rz/s/m"); z.Position != 2 {
		t.Fatalf("z joined on a view that missed y at %d, want 2", z.Position)
	}

	// x's run is cancelled on b's worker (its job gone, its lease released): y is the head.
	deafen(t, a, line)
	if err := x.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.RemoveRun(ctx, "rx"); err != nil || n != 1 {
		t.Fatalf("RemoveRun: %d, %v", n, err)
	}
	if !turned(t, b, line, "ry/s/m") {
		t.Fatal("y not woken when x was removed")
	}
	// A late delivery of x's job on a, whose view still shows x as the head.
	if p := join(t, a, line, "rx/s/m"); p.Position != 2 || p.Lease != nil {
		t.Fatalf("removed x on a stale view: position %d, lease %v", p.Position, p.Lease != nil)
	}
	if y := join(t, b, line, "ry/s/m"); y.Position != 0 || y.Lease == nil {
		t.Fatalf("y: position %d, lease %v", y.Position, y.Lease != nil)
	}
	for w, q := range qs {
		es, err := q.Entries(ctx, line)
		if want := []string{"ry/s/m", "rz/s/m", "rx/s/m"}; err != nil || !slices.Equal(ids(es), want) {
			t.Fatalf("worker %d sees %v (%v), want %v", w, ids(es), err, want)
		}
	}
}

// Lines and ids that cannot be keys are refused with the reason; keys in a line that are not
// entries (garbage, an entry filed under another's key, an order it cannot have) are left out
// with a warning naming them, and the line keeps working.
func TestMergeQueueRefusesOrLeavesOutHostileInput(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Minute)
	var logs syncBuffer
	q.Log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	for _, c := range []struct{ line, id, want string }{
		{"", "r/s/m", "required"},
		{line, "", "required"},
		{"merge.gh.>", "r/s/m", `">" in part #3`},
		{"merge.*.main", "r/s/m", `"*" in part #2`},
		{"merge..main", "r/s/m", "empty part (#2)"},
		{"merge.gh main", "r/s/m", `" " in part #2`},
		{line, strings.Repeat("x", 2000), "bytes, more than 1024"},
	} {
		_, err := q.Join(ctx, c.line, c.id)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("join %.30q %.30q: %v, want %q", c.line, c.id, err, c.want)
		}
		if err := q.Leave(ctx, c.line, c.id, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("leave %.30q %.30q: %v, want %q", c.line, c.id, err, c.want)
		}
	}
	hostile := map[string]string{
		entryKey(line, "rg/s/m"): "{not json",
		entryKey(line, "rh/s/m"): `{"id":"ro/s/m","at":"2026-01-01T00:00:00Z"}`,
		entryKey(line, "rk/s/m"): `{"id":"rk/s/m","order":1000000}`,
		entryKey(line, "rn/s/m"): `{"at":"2026-01-01T00:00:00Z"}`,
	}
	for k, v := range hostile {
		if _, err := q.KV.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	p := join(t, q, line, "r1/s/m")
	if p.Position != 0 || p.Lease == nil {
		t.Fatalf("first real merge behind hostile keys: position %d, lease %v", p.Position, p.Lease != nil)
	}
	if p := join(t, q, line, "r2/s/m"); p.Position != 1 {
		t.Fatalf("second at %d", p.Position)
	}
	es, err := q.Entries(ctx, line)
	if want := []string{"r1/s/m", "r2/s/m"}; err != nil || !slices.Equal(ids(es), want) {
		t.Fatalf("line %v (%v), want %v", ids(es), err, want)
	}
	for k := range hostile {
		if !strings.Contains(logs.String(), "key="+k) {
			t.Errorf("no warning names %s:\n%s", k, logs.String())
		}
	}
	// A merge leaving whose key holds garbage still removes it.
	if err := q.Leave(ctx, line, "rg/s/m", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.KV.Get(ctx, entryKey(line, "rg/s/m")); err == nil {
		t.Fatal("leave left its unreadable key")
	}
}

// Four workers put 400 merges in one line at once, each twice (a redelivery): every worker
// sees the same 400, once each, without reading the line afresh (no listing per join), and
// one more joins at 400.
func TestMergeQueueHugeLineFromManyWorkers(t *testing.T) {
	qs := mergeQueues(t, 4, 30*time.Second, 10*time.Second, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	line := LineKey("gh", "acme/monorepo", "main")
	const per = 100
	var wg sync.WaitGroup
	errs := make(chan error, 4*per)
	for w, q := range qs {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < per; i += 4 {
					release, err := joinTwice(ctx, q, line, fmt.Sprintf("w%d-%03d/s/m", w, i))
					defer release()
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var first []string
	for w, q := range qs {
		es, err := q.Entries(ctx, line)
		if err != nil {
			t.Fatal(err)
		}
		got := ids(es)
		if w == 0 {
			first = got
			seen := map[string]bool{}
			for _, id := range got {
				if seen[id] {
					t.Fatalf("%s twice in the line", id)
				}
				seen[id] = true
			}
			if len(got) != 4*per {
				t.Fatalf("%d entries, want %d", len(got), 4*per)
			}
		} else if !slices.Equal(got, first) {
			t.Fatalf("worker %d sees another order than worker 0", w)
		}
		if r := viewReads(q, line); r != 1 {
			t.Errorf("worker %d read the line afresh %d times", w, r)
		}
	}
	if p := join(t, qs[2], line, "late/s/m"); p.Position != 4*per {
		t.Fatalf("late join at %d, want %d", p.Position, 4*per)
	}
}

// A line written by a version that kept the whole line in one value keeps its merges, in
// their order and ahead of merges that join after the upgrade, with its head still the head;
// a value that is not a line is an error naming it.
func TestMergeQueueKeepsALineWrittenInTheOldFormat(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Hour)
	ctx := context.Background()
	oldLine := func(line string, entries ...QueueEntry) {
		t.Helper()
		data, _ := json.Marshal(mergeLine{Entries: entries, Touched: time.Now()})
		if _, err := q.KV.Put(ctx, lineKV(line), data); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, err := q.KV.Put(ctx, runKey(runOf(e.ID), line), []byte(line)); err != nil {
				t.Fatal(err)
			}
		}
	}
	line := LineKey("gh", "acme/release", "main")
	at := time.Now().Add(-time.Minute).UTC().Round(time.Millisecond)
	head, err := q.Leases.TryAcquire(ctx, line, "ra/s/m") // the old head is merging
	if err != nil {
		t.Fatal(err)
	}
	oldLine(line, QueueEntry{ID: "ra/s/m", At: at, Head: at}, QueueEntry{ID: "rb/s/m", At: at}, QueueEntry{ID: "rc/s/m", At: at})
	if p := join(t, q, line, "rd/s/m"); p.Position != 3 || p.Lease != nil {
		t.Fatalf("a new merge behind an old-format line of 3: position %d lease %v", p.Position, p.Lease != nil)
	}
	if _, err := q.KV.Get(ctx, lineKV(line)); err == nil {
		t.Fatal("the old-format value is still there after its entries moved")
	}
	es, _ := q.Entries(ctx, line)
	if want := []string{"ra/s/m", "rb/s/m", "rc/s/m", "rd/s/m"}; !slices.Equal(ids(es), want) || !es[0].Head.Equal(at) || !es[1].Head.IsZero() {
		t.Fatalf("line after the move: %+v", es)
	}
	if err := q.Leave(ctx, line, "ra/s/m", head); err != nil {
		t.Fatal(err)
	}
	if !turned(t, q, line, "rb/s/m") {
		t.Fatal("rb not woken when the old head left")
	}

	// A line whose first operation after the upgrade is a leave, then a cancelled head.
	l2 := LineKey("gh", "acme/other", "main")
	oldLine(l2, QueueEntry{ID: "rx/s/m", At: at, Head: at}, QueueEntry{ID: "ry/s/m", At: at}, QueueEntry{ID: "rz/s/m", At: at})
	if err := q.Leave(ctx, l2, "ry/s/m", nil); err != nil {
		t.Fatal(err)
	}
	if n, err := q.RemoveRun(ctx, "rx"); err != nil || n != 1 {
		t.Fatalf("RemoveRun of the old head: %d, %v", n, err)
	}
	es, _ = q.Entries(ctx, l2)
	if len(es) != 1 || es[0].ID != "rz/s/m" || es[0].Head.IsZero() || !turned(t, q, l2, "rz/s/m") {
		t.Fatalf("old-format line after a leave and a cancelled head: %+v", es)
	}

	l3 := LineKey("gh", "acme/broken", "main")
	if _, err := q.KV.Put(ctx, lineKV(l3), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Join(ctx, l3, "rq/s/m"); err == nil || !strings.Contains(err.Error(), l3) || !strings.Contains(err.Error(), "old-format") {
		t.Fatalf("join of a broken old-format line: %v", err)
	}
}

// A view nobody uses stops its watch; the next use starts a new one.
func TestMergeQueueIdleViewStopsItsWatch(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Minute)
	q.idleAfter = 300 * time.Millisecond
	line := LineKey("gh", "acme/release", "main")
	join(t, q, line, "ra/s/m")
	q.mu.Lock()
	v := q.views[line]
	q.mu.Unlock()
	select {
	case <-v.done:
	case <-time.After(30 * time.Second):
		t.Fatal("an idle view kept its watch")
	}
	q.mu.Lock()
	n := len(q.views)
	q.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d views left", n)
	}
	if p := join(t, q, line, "rb/s/m"); p.Position != 1 {
		t.Fatalf("join after the view stopped: position %d", p.Position)
	}
}

// TestMain runs this test binary as a merge-queue holder process when asked (see
// runMergeHolder); otherwise it runs the tests.
func TestMain(m *testing.M) {
	if url := os.Getenv("PRFLOW_TEST_MERGEQ_URL"); url != "" {
		runMergeHolder(url, os.Getenv("PRFLOW_TEST_MERGEQ_LINE"), os.Getenv("PRFLOW_TEST_MERGEQ_ID"))
		return
	}
	os.Exit(m.Run())
}

// runMergeHolder joins line as id, and once it holds the line's lease says "head" and keeps
// renewing it until it is killed.
func runMergeHolder(url, line, id string) {
	ctx := context.Background()
	c, err := Open(ctx, Options{URL: url, Name: "merge-holder"})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	locks, err := c.JS.KeyValue(ctx, BucketLocks)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	kv, err := OpenMergeQueue(ctx, c.JS)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	q := &MergeQueue{KV: kv, Leases: &Leases{KV: locks, Renew: 300 * time.Millisecond}, Grace: 500 * time.Millisecond}
	for {
		p, err := q.Join(ctx, line, id)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		if p.Lease != nil {
			fmt.Println("head")
			select {}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A worker process merging at the head keeps its place for as long as it lives, however long
// past the lease TTL; killed with SIGKILL (no leave, no release), its entry goes once its
// lease expired and the merge behind it takes the line.
func TestMergeQueueHeadKilledWithSIGKILLLosesItsPlace(t *testing.T) {
	const lockTTL = 2 * time.Second
	srv := mergeServer(t, lockTTL)
	q := mergeQueueOn(t, srv, time.Hour, 500*time.Millisecond)
	line := LineKey("gh", "acme/release", "main")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PRFLOW_TEST_MERGEQ_URL="+srv.ClientURL(), "PRFLOW_TEST_MERGEQ_LINE="+line, "PRFLOW_TEST_MERGEQ_ID=ra/s/m")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	said := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			said <- sc.Text()
		}
		close(said)
	}()
	select {
	case s := <-said:
		if s != "head" {
			t.Fatalf("holder process: %s", s)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the holder process never became the head")
	}
	// Alive, it keeps the head past its grace and its lease TTL (it renews).
	until := time.Now().Add(lockTTL + time.Second)
	for time.Now().Before(until) {
		if p := join(t, q, line, "rb/s/m"); p.Position != 1 || p.Lease != nil {
			t.Fatalf("b at %d (lease %v) while the head's process lives", p.Position, p.Lease != nil)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	for {
		p := join(t, q, line, "rb/s/m")
		if p.Position == 0 && p.Lease != nil {
			break
		}
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("b still at %d a minute after the head's process was killed", p.Position)
		}
		time.Sleep(100 * time.Millisecond)
	}
	es, err := q.Entries(context.Background(), line)
	if err != nil || !slices.Equal(ids(es), []string{"rb/s/m"}) {
		t.Fatalf("line after the dead head went: %v, %v", ids(es), err)
	}
}

// Two workers' views of one line live through a restart of the NATS server: both are read
// afresh when their connection is back, then a leave on one wakes the next merge on the
// other, which finds its turn, and a join on one is seen by the other.
func TestMergeQueueViewsConvergeAfterTheServerRestarts(t *testing.T) {
	dir := t.TempDir()
	s, err := StartEmbedded(dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var qs []*MergeQueue
	for i := range 2 {
		c, err := Open(ctx, Options{URL: "nats://" + addr, Name: fmt.Sprintf("worker-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		if i == 0 {
			// A release lost in the restart leaves h's lease to expire: 5 s.
			if _, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketLocks, TTL: 5 * time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		qs = append(qs, mergeQueueOn(t, c, time.Second, time.Minute))
	}
	a, b := qs[0], qs[1]
	// Only the reconnect may make a view read its line afresh here, not a write it waits for.
	a.catchUp, b.catchUp = 10*time.Minute, 10*time.Minute
	line := LineKey("gh", "acme/release", "main")
	h := join(t, b, line, "rh/s/m")
	if x := join(t, a, line, "rx/s/m"); x.Position != 1 {
		t.Fatalf("x at %d", x.Position)
	}

	s.Shutdown()
	s.WaitForShutdown()
	if s, err = StartEmbedded(dir, addr); err != nil {
		t.Fatal(err)
	}
	// retry runs op until it stops failing: the clients reconnect on their own.
	retry := func(what string, op func() error) {
		t.Helper()
		for {
			err := op()
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s after the restart: %v", what, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	restarted := time.Now()
	for viewReads(a, line) < 2 || viewReads(b, line) < 2 {
		if time.Since(restarted) > time.Minute {
			t.Fatalf("the views were not read afresh after the reconnect (reads %d and %d)", viewReads(a, line), viewReads(b, line))
		}
		time.Sleep(50 * time.Millisecond)
	}
	retry("h leaves", func() error { return b.Leave(ctx, line, "rh/s/m", h.Lease) })
	retry("x's turn", func() error {
		p, err := a.Join(ctx, line, "rx/s/m")
		if err == nil && (p.Position != 0 || p.Lease == nil) {
			err = fmt.Errorf("x at %d, lease %v", p.Position, p.Lease != nil)
		}
		return err
	})
	retry("y joins", func() error {
		p, err := b.Join(ctx, line, "ry/s/m")
		if err == nil && p.Position != 1 {
			t.Fatalf("y at %d", p.Position)
		}
		return err
	})
	if z := join(t, a, line, "rz/s/m"); z.Position != 2 {
		t.Fatalf("z joined at %d on the worker that did not see y join, want 2", z.Position)
	}
	for w, q := range qs {
		es, err := q.Entries(ctx, line)
		if want := []string{"rx/s/m", "ry/s/m", "rz/s/m"}; err != nil || !slices.Equal(ids(es), want) {
			t.Fatalf("worker %d sees %v (%v), want %v", w, ids(es), err, want)
		}
	}
}

// joinTwice joins id to line twice, the second time as a redelivery would (same place), and
// returns what releases the leases the joins got (the caller holds them until it ends).
func joinTwice(ctx context.Context, q *MergeQueue, line, id string) (release func(), err error) {
	var leases []*Lease
	release = func() {
		for _, l := range leases {
			_ = l.Release(ctx)
		}
	}
	for range 2 {
		p, err := q.Join(ctx, line, id)
		if err != nil {
			return release, err
		}
		if p.Lease != nil {
			leases = append(leases, p.Lease)
		}
	}
	return release, nil
}
