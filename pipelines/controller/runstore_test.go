package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

// newRunStore is a run store on prflow-runs of an embedded NATS server of its own.
func newRunStore(t *testing.T) *runStore {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := queue.Open(ctx, queue.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); conn.Close() })
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	return &runStore{kv: b.Runs}
}

func runState(id string, st pipelines.Status) []byte {
	r := &pipelines.Run{ID: id, Pipeline: "p", Spec: "h", Status: st, Created: time.Unix(1764000000, 0).UTC()}
	data, err := r.AppendJSON(nil)
	if err != nil {
		panic(err)
	}
	return data
}

// Creates, revision-checked updates and reads against a real prflow-runs bucket, including
// the failures callers rely on (a run that exists, a stale revision, no such run, bad state).
func TestRunStoreReadWrite(t *testing.T) {
	s := newRunStore(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		run     func(id string) error
		wantErr error  // errors.Is
		wantMsg string // in the error
	}{
		{name: "create then get", run: func(id string) error {
			rev, _, err := s.create(ctx, id, runState(id, pipelines.StRunning), false)
			if err != nil {
				return err
			}
			r, got, err := s.get(ctx, id)
			if err != nil {
				return err
			}
			if got != rev || r.ID != id || r.Status != pipelines.StRunning {
				return fmt.Errorf("got %s %s at rev %d, want rev %d", r.ID, r.Status, got, rev)
			}
			return nil
		}},
		{name: "create of a run that exists", wantErr: jetstream.ErrKeyExists, run: func(id string) error {
			if _, _, err := s.create(ctx, id, runState(id, pipelines.StRunning), false); err != nil {
				return fmt.Errorf("first create failed: %v", err)
			}
			_, _, err := s.create(ctx, id, runState(id, pipelines.StRunning), false)
			return err
		}},
		{name: "update at the current revision", run: func(id string) error {
			rev, _, err := s.create(ctx, id, runState(id, pipelines.StRunning), false)
			if err != nil {
				return err
			}
			next, _, err := s.update(ctx, id, runState(id, pipelines.StSucceeded), rev, true)
			if err != nil {
				return err
			}
			if r, got, err := s.get(ctx, id); err != nil || got != next || r.Status != pipelines.StSucceeded {
				return fmt.Errorf("after update: %v at %d (want %d): %v", r, got, next, err)
			}
			return nil
		}},
		{name: "update at a stale revision", wantErr: jetstream.ErrKeyRevisionMismatch, run: func(id string) error {
			rev, _, err := s.create(ctx, id, runState(id, pipelines.StRunning), false)
			if err != nil {
				return err
			}
			if _, _, err := s.update(ctx, id, runState(id, pipelines.StRunning), rev, false); err != nil {
				return err
			}
			_, _, err = s.update(ctx, id, runState(id, pipelines.StFailed), rev, true)
			return err
		}},
		{name: "get of no such run", wantErr: jetstream.ErrKeyNotFound, run: func(id string) error {
			_, _, err := s.get(ctx, id)
			return err
		}},
		{name: "get of an unreadable state names the run", wantMsg: "state:", run: func(id string) error {
			if _, err := s.kv.Put(ctx, id, []byte(`{"id":`)); err != nil {
				return err
			}
			_, _, err := s.get(ctx, id)
			if err != nil && !strings.Contains(err.Error(), id) {
				return fmt.Errorf("error does not name run %s: %w", id, err)
			}
			return err
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run(fmt.Sprintf("run-%d", i))
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			case tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)):
				t.Fatalf("err = %v, want one with %q", err, tt.wantMsg)
			case tt.wantErr == nil && tt.wantMsg == "" && err != nil:
				t.Fatal(err)
			}
		})
	}
}

// The runs watcher skips our own writes, also one it sees before the write returns, and not
// another replica's; a revision of another replica seen during our write (after it, or when
// ours failed) tells the writer to read the run back.
func TestRunStoreOwnWrites(t *testing.T) {
	s := newRunStore(t)
	ctx := context.Background()
	rev, others, err := s.create(ctx, "a", runState("a", pipelines.StRunning), false)
	if err != nil || others {
		t.Fatalf("create: %v, others %v", err, others)
	}
	if !s.skip("a", rev) {
		t.Fatal("the watcher reads back our own create")
	}
	theirs, err := s.kv.Put(ctx, "a", runState("a", pipelines.StRunning)) // another replica
	if err != nil {
		t.Fatal(err)
	}
	if s.skip("a", theirs) {
		t.Fatal("the watcher skips another replica's write")
	}

	// Another replica writes right after us, before our write returns: the watcher sees both.
	var after uint64
	rev, others, err = s.write("a", false, func() (uint64, error) {
		mine, err := s.kv.Update(ctx, "a", runState("a", pipelines.StRunning), theirs)
		if err != nil {
			return 0, err
		}
		if after, err = s.kv.Put(ctx, "a", runState("a", pipelines.StRunning)); err != nil {
			return 0, err
		}
		if !s.skip("a", mine) || !s.skip("a", after) {
			t.Error("revisions seen during our write are not held for it")
		}
		return mine, nil
	})
	if err != nil || !others {
		t.Fatalf("write with a newer revision of another replica meanwhile: err %v, others %v; want others", err, others)
	}

	// Our write fails (stale revision) while the watcher sees one: read back too.
	_, others, err = s.write("a", false, func() (uint64, error) {
		s.skip("a", after)
		return s.kv.Update(ctx, "a", runState("a", pipelines.StRunning), rev)
	})
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || !others {
		t.Fatalf("failed write: err %v, others %v; want a mismatch and others", err, others)
	}

	// A final write is forgotten once the watcher passed it.
	cur, _ := s.kv.Get(ctx, "a")
	rev, _, err = s.update(ctx, "a", runState("a", pipelines.StSucceeded), cur.Revision(), true)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.cached(); n != 1 {
		t.Fatalf("%d entries before the watcher passed the final write, want 1", n)
	}
	if !s.skip("a", rev) {
		t.Fatal("the watcher reads back our final write")
	}
	if n := s.cached(); n != 0 {
		t.Fatalf("%d entries left for an ended run", n)
	}
}

// The cached copy: kept for the next event unless the run ended, taken once, dropped when
// another replica's newer revision is seen, kept when an older one is.
func TestRunStoreCache(t *testing.T) {
	r := &pipelines.Run{ID: "a"}
	tests := []struct {
		name   string
		keep   bool   // keep rev 5 first
		final  bool   // as the run's last state
		seen   uint64 // then another replica's revision is seen (0: none)
		drop   bool
		wantAt uint64 // rev take returns (0: nothing)
	}{
		{name: "kept", keep: true, wantAt: 5},
		{name: "a final state is not kept", keep: true, final: true},
		{name: "a newer revision of another replica drops it", keep: true, seen: 6},
		{name: "an older revision leaves it", keep: true, seen: 4, wantAt: 5},
		{name: "its own revision leaves it", keep: true, seen: 5, wantAt: 5},
		{name: "dropped", keep: true, drop: true},
		{name: "nothing kept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s runStore
			if tt.keep {
				s.keep("a", 5, []byte("{}"), r, tt.final)
			}
			if tt.seen != 0 {
				s.seen("a", tt.seen)
			}
			if tt.drop {
				s.drop("a")
			}
			cr := s.take("a")
			switch {
			case tt.wantAt == 0 && cr != nil:
				t.Fatalf("took rev %d, want nothing", cr.rev)
			case tt.wantAt != 0 && (cr == nil || cr.rev != tt.wantAt || cr.run != r):
				t.Fatalf("took %+v, want rev %d with the decoded run", cr, tt.wantAt)
			}
			if s.take("a") != nil {
				t.Fatal("taken twice")
			}
		})
	}
}

// Runs written from many goroutines (the event shards) while a real watcher of prflow-runs
// passes every revision through skip, and another replica writes one run of its own: none of
// ours is read back, theirs is (its newest revision at least), and once every run ended nothing is held.
func TestRunStoreConcurrentWatcher(t *testing.T) {
	t.Parallel()
	s := newRunStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := s.kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	const runs, writes, foreign = 8, 15, 10
	var readBack sync.Map // run → revisions not skipped
	seen := make(chan struct{})
	var n atomic.Int64
	var theirsSeen atomic.Uint64 // newest revision of the other replica's run not skipped
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			if !s.skip(e.Key(), e.Revision()) {
				v, _ := readBack.LoadOrStore(e.Key(), new(int))
				*v.(*int)++
				if e.Key() == "theirs" {
					theirsSeen.Store(e.Revision())
				}
			}
			n.Add(1)
			if e.Key() == "sentinel" {
				close(seen)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("run-%d", i)
			rev, _, err := s.create(ctx, id, runState(id, pipelines.StRunning), false)
			if err != nil {
				t.Error(err)
				return
			}
			s.keep(id, rev, nil, nil, false)
			for j := range writes {
				cur := s.take(id)
				if cur == nil {
					t.Errorf("%s: no cached copy after write %d", id, j)
					return
				}
				final := j == writes-1
				st := pipelines.StRunning
				if final {
					st = pipelines.StSucceeded
				}
				next, others, err := s.update(ctx, id, runState(id, st), cur.rev, final)
				if err != nil || others {
					t.Errorf("%s write %d: %v, others %v", id, j, err, others)
					return
				}
				s.keep(id, next, nil, nil, final)
			}
		}()
	}
	var theirsLast uint64
	for range foreign {
		rev, err := s.kv.Put(ctx, "theirs", runState("theirs", pipelines.StRunning))
		if err != nil {
			t.Fatal(err)
		}
		theirsLast = rev
	}
	wg.Wait()
	// The stream is in order: once the watcher sees this, it has seen every write above.
	if _, err := s.kv.Put(ctx, "sentinel", runState("sentinel", pipelines.StRunning)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	case <-ctx.Done():
		t.Fatalf("the watcher saw %d revisions, not the last", n.Load())
	}
	readBack.Delete("sentinel")
	readBack.Range(func(k, v any) bool {
		if k != "theirs" {
			t.Errorf("our own run %s read back %d times", k, *v.(*int))
		}
		return true
	})
	// The bucket keeps one revision per key, so a watcher that falls behind gets only the
	// newest of quick successive writes: at most foreign, and always the last.
	got := 0
	if v, ok := readBack.Load("theirs"); ok {
		got = *v.(*int)
	}
	if got < 1 || got > foreign || theirsSeen.Load() != theirsLast {
		t.Errorf("another replica's run read back %d times (newest revision %d), want 1..%d ending at its last write %d", got, theirsSeen.Load(), foreign, theirsLast)
	}
	if n := s.cached(); n != 0 {
		t.Fatalf("%d entries held after every run ended", n)
	}
}
