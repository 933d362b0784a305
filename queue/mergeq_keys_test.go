package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

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
		deadline := time.Now().Add(20 * time.Second)
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
// entries of the line: the old single line value was rewritten whole by every one.
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
	var ids []string
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	if want := []string{"r0/s/m", "r1/s/m", "r3/s/m", "r4/s/m", "r9/s/m"}; !slices.Equal(ids, want) {
		t.Fatalf("line %v, want %v", ids, want)
	}
}

// 50 merges join at once (each twice, as a redelivery does) while half of those already in
// line leave: every joined merge is in line exactly once, none that left is, and a merge
// whose join returned before another's began is ahead of it.
func TestMergeQueue50ConcurrentJoinsAndLeavesKeepFIFO(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Hour)
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	const n = 50
	for i := range n / 2 {
		join(t, q, line, fmt.Sprintf("old%02d/s/m", i))
	}
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	spans := map[string]span{}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			id := fmt.Sprintf("new%02d/s/m", i)
			start := time.Now()
			for range 2 {
				if _, err := q.Join(ctx, line, id); err != nil {
					errs <- err
					return
				}
			}
			mu.Lock()
			spans[id] = span{start, time.Now()}
			mu.Unlock()
		}()
		if i%2 == 1 { // leaves: old01, old03, …; old00 is the head and stays
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := q.Leave(ctx, line, fmt.Sprintf("old%02d/s/m", i), nil); err != nil {
					errs <- err
				}
			}()
		}
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
	pos := map[string]int{}
	for i, e := range es {
		if _, dup := pos[e.ID]; dup {
			t.Fatalf("%s twice in the line", e.ID)
		}
		pos[e.ID] = i
	}
	for i := range n {
		id := fmt.Sprintf("new%02d/s/m", i)
		if _, ok := pos[id]; !ok {
			t.Fatalf("%s joined but is not in the line", id)
		}
	}
	for i := range n / 2 {
		id := fmt.Sprintf("old%02d/s/m", i)
		p, in := pos[id]
		if in == (i%2 == 1) {
			t.Fatalf("%s: in the line = %v after %s", id, in, map[bool]string{true: "leaving", false: "staying"}[i%2 == 1])
		}
		if in && p != i/2 {
			t.Fatalf("%s at %d, want %d (the earlier entries keep their order)", id, p, i/2)
		}
	}
	if len(es) != n+n/4+1 {
		t.Fatalf("%d entries, want %d", len(es), n+n/4+1)
	}
	for a, sa := range spans {
		for b, sb := range spans {
			if sa.end.Before(sb.start) && pos[a] > pos[b] {
				t.Fatalf("%s joined before %s began to but is behind it (%d > %d)", a, b, pos[a], pos[b])
			}
		}
	}
	if es[0].ID != "old00/s/m" || es[0].Head.IsZero() {
		t.Fatalf("head %+v", es[0])
	}
	for _, e := range es[1:] {
		if !e.Head.IsZero() {
			t.Fatalf("%s is marked head behind %s", e.ID, es[0].ID)
		}
	}
}

// oldLine writes line in the format of the versions that kept a whole line in one value.
func oldLine(t *testing.T, q *MergeQueue, line string, entries ...QueueEntry) {
	t.Helper()
	data, _ := json.Marshal(mergeLine{Entries: entries, Touched: time.Now()})
	if _, err := q.KV.Put(context.Background(), "line."+line, data); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := q.KV.Put(context.Background(), runKey(runOf(e.ID), line), []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker upgraded while merges wait in a line written in the old format keeps them, in
// their order and ahead of merges that join after the upgrade, with the head still the head.
func TestMergeQueueKeepsALineWrittenInTheOldFormat(t *testing.T) {
	q := mergeQueue(t, 30*time.Second, 10*time.Second, time.Hour)
	ctx := context.Background()
	line := LineKey("gh", "acme/release", "main")
	at := time.Now().Add(-time.Minute).UTC().Round(time.Millisecond)
	head, err := q.Leases.TryAcquire(ctx, line, "ra/s/m") // the old head is merging
	if err != nil {
		t.Fatal(err)
	}
	oldLine(t, q, line, QueueEntry{ID: "ra/s/m", At: at, Head: at}, QueueEntry{ID: "rb/s/m", At: at}, QueueEntry{ID: "rc/s/m", At: at})
	p := join(t, q, line, "rd/s/m")
	if p.Position != 3 || p.Lease != nil {
		t.Fatalf("a new merge behind an old-format line of 3: position %d lease %v", p.Position, p.Lease != nil)
	}
	if _, err := q.KV.Get(ctx, "line."+line); err == nil {
		t.Fatal("the old-format value is still there after its entries moved")
	}
	es, _ := q.Entries(ctx, line)
	var ids []string
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	if want := []string{"ra/s/m", "rb/s/m", "rc/s/m", "rd/s/m"}; !slices.Equal(ids, want) || !es[0].Head.Equal(at) || !es[1].Head.IsZero() {
		t.Fatalf("line after the move: %+v", es)
	}
	// The old head ends its merge: the next old entry is woken.
	if err := q.Leave(ctx, line, "ra/s/m", head); err != nil {
		t.Fatal(err)
	}
	if !turned(t, q, line, "rb/s/m") {
		t.Fatal("rb not woken when the old head left")
	}

	// A line whose first operation after the upgrade is a leave, and a cancelled run.
	l2 := LineKey("gh", "acme/other", "main")
	oldLine(t, q, l2, QueueEntry{ID: "rx/s/m", At: at, Head: at}, QueueEntry{ID: "ry/s/m", At: at}, QueueEntry{ID: "rz/s/m", At: at})
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

	// An old-format value that is not a line is an error naming it, not an empty line.
	l3 := LineKey("gh", "acme/broken", "main")
	if _, err := q.KV.Put(ctx, "line."+l3, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Join(ctx, l3, "rq/s/m"); err == nil || !strings.Contains(err.Error(), l3) || !strings.Contains(err.Error(), "old-format") {
		t.Fatalf("join of a broken old-format line: %v", err)
	}
	// So is an entry key whose value is not an entry.
	l4 := LineKey("gh", "acme/hostile", "main")
	if _, err := q.KV.Put(ctx, "q."+l4+"."+LeaseKey("rh/s/m"), []byte(`{"at":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Entries(ctx, l4); err == nil || !strings.Contains(err.Error(), "unreadable entry") {
		t.Fatalf("entries of a line with a hostile entry: %v", err)
	}
}
