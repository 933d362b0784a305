package controller

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// parkRef is one parked step under one key or topic it waits on.
type parkRef struct {
	Run, Stage, Step string
	Rollback         bool
	Wake             int
	key              string
	since            time.Time // when the job that parked was dispatched (changes after it wake the step)
}

// parkIndex knows which parked step waits on which prflow-apps key (or merge-queue turn) and
// which event topic, so that a change wakes exactly those steps. It has its own lock: the
// watchers that look up keys do not wait on run state, timers or Wait calls.
type parkIndex struct {
	mu       sync.Mutex
	byKey    map[string]map[parkRef]struct{} // prflow-apps key → parked steps
	byTopic  map[string]map[parkRef]struct{} // event topic → parked steps
	parkedOf map[string][]parkRef            // run → its parked refs (to unindex)
	waiting  map[string]int                  // run → number of parked steps
	total    int                             // sum of waiting
	revs     map[string]uint64               // run → revision the index reflects
	// changes says when keys and topics last changed (shared with the watchers that note
	// them): a change newer than a step's park is a wake it missed.
	changes *changeLog
	// gauge gets total on every change (the parked-steps metric); nil: none.
	gauge *atomic.Int64
}

// approvalTopic marks a parked Approval. A decision reaches its step as a signal to its run
// (EvSignal), never as a topic wake, so the index leaves it out: under one topic, every parked
// approval would share one set as large as all of them (~250 B per parked run) that nothing
// ever looks up.
const approvalTopic = "approval"

func newParkIndex(changes *changeLog, gauge *atomic.Int64) *parkIndex {
	return &parkIndex{byKey: map[string]map[parkRef]struct{}{}, byTopic: map[string]map[parkRef]struct{}{},
		parkedOf: map[string][]parkRef{}, waiting: map[string]int{}, revs: map[string]uint64{},
		changes: changes, gauge: gauge}
}

// park replaces run's parked steps with those of its revision rev (none when the run ended
// or nothing waits). A revision older than one already indexed changes nothing and returns
// ok false (it arrived late: the watcher against our own update). then, when not nil, runs
// under the index's lock once the revision is taken, so that whatever else follows a run's
// revisions (its timer, its metrics) sees them in order too. missed are the refs whose key
// or topic changed after their step's job went out but before this park: no watcher will
// wake them, so the caller must.
func (x *parkIndex) park(run string, rev uint64, final bool, parked []pipelines.Parked, then func()) (missed []parkRef, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rev < x.revs[run] {
		return nil, false
	}
	if final {
		delete(x.revs, run)
	} else {
		x.revs[run] = rev
	}
	x.unindexLocked(run)
	x.setWaitingLocked(run, len(parked))
	var refs []parkRef
	add := func(idx map[string]map[parkRef]struct{}, k string, p pipelines.Parked) {
		ref := parkRef{Run: run, Stage: p.Stage, Step: p.Step, Rollback: p.Rollback, Wake: p.Wake, key: k, since: p.Since}
		if t, ok := x.changes.get(k); ok && !p.Since.IsZero() && t.After(p.Since) {
			missed = append(missed, ref)
		}
		if idx[k] == nil {
			idx[k] = map[parkRef]struct{}{}
		}
		idx[k][ref] = struct{}{}
		refs = append(refs, ref)
	}
	for _, p := range parked {
		for _, k := range p.Keys {
			add(x.byKey, k, p)
		}
		for _, t := range p.Topics {
			if t == approvalTopic {
				continue // see approvalTopic
			}
			add(x.byTopic, t, p)
		}
	}
	if len(refs) > 0 {
		x.parkedOf[run] = refs
	}
	if then != nil {
		then()
	}
	return missed, true
}

// unpark drops run from the index (it was deleted); then as in park.
func (x *parkIndex) unpark(run string, then func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unindexLocked(run)
	x.setWaitingLocked(run, 0)
	if then != nil {
		then()
	}
}

func (x *parkIndex) unindexLocked(run string) {
	for _, ref := range x.parkedOf[run] {
		for _, idx := range []map[string]map[parkRef]struct{}{x.byKey, x.byTopic} {
			if set := idx[ref.key]; set != nil {
				delete(set, ref)
				if len(set) == 0 {
					delete(idx, ref.key)
				}
			}
		}
	}
	delete(x.parkedOf, run)
}

// setWaitingLocked records how many of run's steps are parked, keeping the total for the
// parked-steps metric (summing the map on every event cost time linear in the parked runs).
func (x *parkIndex) setWaitingLocked(run string, n int) {
	x.total += n - x.waiting[run]
	if n > 0 {
		x.waiting[run] = n
	} else {
		delete(x.waiting, run)
	}
	if x.gauge != nil {
		x.gauge.Store(int64(x.total))
	}
}

// woken are the steps parked on prflow-apps key (or merge-queue turn) key.
func (x *parkIndex) woken(key string) []parkRef { return x.refs(x.byKey, key) }

// wokenByTopic are the steps parked on an event topic.
func (x *parkIndex) wokenByTopic(topic string) []parkRef { return x.refs(x.byTopic, topic) }

func (x *parkIndex) refs(idx map[string]map[parkRef]struct{}, key string) []parkRef {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []parkRef
	for ref := range idx[key] {
		out = append(out, ref)
	}
	return out
}

// wokenBefore are the steps parked on key that parked before at (or whose park time is
// unknown): those a change of key at at concerns.
func (x *parkIndex) wokenBefore(key string, at time.Time) []parkRef {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []parkRef
	for ref := range x.byKey[key] {
		if ref.since.IsZero() || ref.since.Before(at) {
			out = append(out, ref)
		}
	}
	return out
}

// wokenByPrefix are the steps parked on a key that starts with prefix (an agent's records).
func (x *parkIndex) wokenByPrefix(prefix string) []parkRef {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []parkRef
	for k, set := range x.byKey {
		if strings.HasPrefix(k, prefix) {
			for ref := range set {
				out = append(out, ref)
			}
		}
	}
	return out
}

// missedWakes are the parked steps whose key or topic changed after they parked.
func (x *parkIndex) missedWakes() []parkRef {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []parkRef
	for _, idx := range []map[string]map[parkRef]struct{}{x.byKey, x.byTopic} {
		for k, set := range idx {
			t, ok := x.changes.get(k)
			if !ok {
				continue
			}
			for ref := range set {
				if !ref.since.IsZero() && t.After(ref.since) {
					out = append(out, ref)
				}
			}
		}
	}
	return out
}

// counts are the parked steps in all and the runs that have any.
func (x *parkIndex) counts() (steps, runs int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.total, len(x.waiting)
}
