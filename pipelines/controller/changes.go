package controller

import (
	"sync"
	"time"
)

// Bounds of changeLog: a change is remembered to wake a step that parks on it just after (its
// job ran while it happened), which takes seconds; an hour is ample, and the size bound keeps a
// flood of distinct keys from growing the map without end.
const (
	changeMaxAge  = time.Hour
	changeMaxKeys = 100_000
)

// changeLog remembers when keys (prflow-apps keys, merge-queue turns, webhook topics) last
// changed, bounded by age and by size. Entries are also kept in arrival order, so pruning
// drops the oldest from the front instead of scanning the map: each set costs O(1) amortized,
// whatever the number of keys. It has its own lock: the watchers that note changes and the
// park index that reads them share it.
type changeLog struct {
	mu     sync.Mutex
	at     map[string]time.Time
	order  []change // arrival order; an entry whose time no longer matches at[key] is stale
	head   int      // order[:head] are dropped
	maxAge time.Duration
	max    int
}

type change struct {
	key string
	at  time.Time
}

func newChangeLog(maxAge time.Duration, maxKeys int) *changeLog {
	return &changeLog{at: map[string]time.Time{}, maxAge: maxAge, max: maxKeys}
}

// set records that key changed at t, and drops what the bounds no longer allow (measured
// from now).
func (l *changeLog) set(key string, t, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at[key] = t
	l.order = append(l.order, change{key, t})
	l.prune(now)
}

// get is when key last changed, if that is still remembered.
func (l *changeLog) get(key string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.at[key]
	return t, ok
}

func (l *changeLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

func (l *changeLog) prune(now time.Time) {
	cut := now.Add(-l.maxAge)
	// The queue may hold several entries of one key: it is bounded too (twice the keys).
	for l.head < len(l.order) {
		e := l.order[l.head]
		if !e.at.Before(cut) && len(l.at) <= l.max && len(l.order)-l.head <= 2*l.max {
			break
		}
		if t, ok := l.at[e.key]; ok && t.Equal(e.at) {
			delete(l.at, e.key)
		}
		l.order[l.head] = change{}
		l.head++
	}
	// Reclaim the dropped front once it is most of the slice.
	if l.head > 1024 && l.head*2 > len(l.order) {
		l.order = append(l.order[:0:0], l.order[l.head:]...)
		l.head = 0
	}
}
