package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
)

// runStore reads and writes run states in prflow-runs: each write revision-checked, the last
// state this controller wrote kept in memory for the run's next event, and its own writes
// noted so that the runs watcher skips them. Its parts have their own locks.
type runStore struct {
	kv    jetstream.KeyValue
	cache sync.Map  // run id → *cachedRun: saves a KV read and a decode per event
	own   ownWrites // our writes to prflow-runs, which the runs watcher skips
}

// cachedRun is the last revision of a run this controller wrote, raw and (once an event was
// applied) decoded. A stale copy is harmless: the revision-checked Update fails and the run is
// read again. Only the shard that owns the run touches run, so handle may change it in place.
type cachedRun struct {
	rev  uint64
	data []byte
	run  *pipelines.Run
}

// take removes and returns the cached copy of run id (nil if none): the caller changes it
// and keeps it again once written.
func (s *runStore) take(id string) *cachedRun {
	v, ok := s.cache.LoadAndDelete(id)
	if !ok {
		return nil
	}
	return v.(*cachedRun)
}

// read is run id as stored, raw (jetstream.ErrKeyNotFound when there is none).
func (s *runStore) read(ctx context.Context, id string) (*cachedRun, error) {
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &cachedRun{rev: e.Revision(), data: e.Value()}, nil
}

// get is run id as stored, decoded, and its revision.
func (s *runStore) get(ctx context.Context, id string) (*pipelines.Run, uint64, error) {
	cr, err := s.read(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	r, err := cr.decode(id)
	return r, cr.rev, err
}

// decode is the run itself: the decoded copy, or the stored bytes decoded.
func (cr *cachedRun) decode(id string) (*pipelines.Run, error) {
	if cr.run != nil {
		return cr.run, nil
	}
	r := &pipelines.Run{}
	if err := json.Unmarshal(cr.data, r); err != nil {
		return nil, fmt.Errorf("run %s state: %w", id, err)
	}
	return r, nil
}

// create stores a new run as this controller's own write (see write).
func (s *runStore) create(ctx context.Context, id string, data []byte, final bool) (uint64, bool, error) {
	return s.write(id, final, func() (uint64, error) { return s.kv.Create(ctx, id, data) })
}

// update stores run id's state over revision rev as this controller's own write (see write);
// jetstream.ErrKeyRevisionMismatch when the run moved on meanwhile.
func (s *runStore) update(ctx context.Context, id string, data []byte, rev uint64, final bool) (uint64, bool, error) {
	return s.write(id, final, func() (uint64, error) { return s.kv.Update(ctx, id, data, rev) })
}

// write stores a state of run id with put (a Create or a revision-checked Update) as this
// controller's own write, which the runs watcher then skips. others reports revisions of
// other replicas the watcher saw meanwhile: the caller must read the run back. final: the
// state is the run's last.
func (s *runStore) write(id string, final bool, put func() (uint64, error)) (rev uint64, others bool, err error) {
	s.own.begin(id)
	rev, err = put()
	others = s.own.end(id, rev, err == nil, final)
	return rev, others, err
}

// keep caches revision rev of a run this controller just wrote, for the run's next event,
// with run, the decoded state only the run's shard may change, or nil. A run that ended is
// not kept.
func (s *runStore) keep(id string, rev uint64, data []byte, run *pipelines.Run, final bool) {
	if !final {
		if cap(data)-len(data) > len(data)/4 {
			// Encoded into a buffer with room to grow: one copy is kept per live run, so keep
			// the bytes only (the room was a third of it for a parked Approval).
			data = bytes.Clone(data)
		}
		s.cache.Store(id, &cachedRun{rev: rev, data: data, run: run})
	}
}

// skip reports whether the runs watcher can pass over revision rev of run id (our own write).
func (s *runStore) skip(id string, rev uint64) bool { return s.own.skip(id, rev) }

// seen takes in revision rev of run id that another replica wrote: a cached copy older than
// it is dropped (and would otherwise stay in memory for good if the other replica ended the
// run).
func (s *runStore) seen(id string, rev uint64) {
	if v, ok := s.cache.Load(id); ok && v.(*cachedRun).rev < rev {
		s.cache.CompareAndDelete(id, v)
	}
}

// ended forgets our writes to run id, which ended in a revision another replica wrote.
func (s *runStore) ended(id string) { s.own.forget(id) }

// drop forgets run id (it was deleted).
func (s *runStore) drop(id string) {
	s.own.forget(id)
	s.cache.Delete(id)
}

// cached counts the runs held in memory: copies and notes of our writes.
func (s *runStore) cached() int {
	n := 0
	s.cache.Range(func(_, _ any) bool { n++; return true })
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	return n + len(s.own.done) + len(s.own.inflight)
}

// ownWrites tracks this controller's writes to prflow-runs so that the runs watcher, which
// sees revisions but no values, skips them, including one it sees before the write returns.
type ownWrites struct {
	mu       sync.Mutex
	done     map[string]ownRev   // run → newest revision we wrote and indexed
	inflight map[string][]uint64 // run → revisions seen while our write was under way
}

type ownRev struct {
	rev   uint64
	final bool // the run ended: forgotten once the watcher has passed it
}

// begin marks a write to run as under way.
func (o *ownWrites) begin(run string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight == nil {
		o.inflight, o.done = map[string][]uint64{}, map[string]ownRev{}
	}
	o.inflight[run] = nil
}

// end records how the write went (revision rev if ok) and reports whether the watcher saw
// revisions meanwhile that were not ours and are newer than what we know: then the run
// must be read back.
func (o *ownWrites) end(run string, rev uint64, ok, final bool) (others bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.inflight[run]
	delete(o.inflight, run)
	passed := false
	for _, s := range seen {
		switch {
		case ok && s == rev:
			passed = true
		case !ok || s > rev:
			others = true
		}
	}
	if ok {
		if final && passed {
			delete(o.done, run)
		} else {
			o.done[run] = ownRev{rev: rev, final: final}
		}
	}
	return others
}

// skip reports whether the watcher can pass over revision rev of run: ours and indexed, or
// ours still being written (end then decides).
func (o *ownWrites) skip(run string, rev uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.done[run]; ok && d.rev >= rev {
		if d.final && d.rev == rev {
			delete(o.done, run)
		}
		return true
	}
	if seen, ok := o.inflight[run]; ok {
		o.inflight[run] = append(seen, rev)
		return true
	}
	return false
}

func (o *ownWrites) forget(run string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.done, run)
}
