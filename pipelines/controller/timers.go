package controller

import (
	"sync"
	"time"
)

// timerScheduler wakes each run at the one time it is next due (a poll, a deadline, a soak's
// end): one time.AfterFunc per run, kept in the Go runtime's own timer heap. One heap of our
// own behind a single runtime timer measured cheaper (BenchmarkTimerScheduler, 10,000 runs
// scheduled, moved and cancelled, load 16: 1.8–2.6 µs and 55 B a change against 2.3–3.2 µs
// and 170 B), but that is under 1 µs against the ~600 µs of CPU a step costs on the whole
// path and about 1 MB at 10,000 parked runs: not worth a second heap, its expiry loop and
// its locking. It has its own lock.
type timerScheduler struct {
	mu     sync.Mutex
	timers map[string]*runTimer
	// fire is called, on a goroutine of its own, when run's due time due comes.
	fire func(run string, due time.Time)
}

type runTimer struct {
	due time.Time
	t   *time.Timer
}

func newTimerScheduler(fire func(run string, due time.Time)) *timerScheduler {
	return &timerScheduler{timers: map[string]*runTimer{}, fire: fire}
}

// schedule makes due run's one wake: a zero due cancels it, the time already set keeps the
// timer as it is, another time replaces it.
func (s *timerScheduler) schedule(run string, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.timers[run]
	if due.IsZero() {
		if old != nil {
			old.t.Stop()
			delete(s.timers, run)
		}
		return
	}
	if old != nil && old.due.Equal(due) {
		return
	}
	if old != nil {
		old.t.Stop()
	}
	s.timers[run] = &runTimer{due: due, t: time.AfterFunc(time.Until(due), func() { s.fire(run, due) })}
}

// cancel drops run's wake, if it has one.
func (s *timerScheduler) cancel(run string) { s.schedule(run, time.Time{}) }

// stopAll stops every timer: the controller is stopping.
func (s *timerScheduler) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.timers {
		t.t.Stop()
	}
}

// next is when run is next woken, if it is.
func (s *timerScheduler) next(run string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.timers[run]; t != nil {
		return t.due, true
	}
	return time.Time{}, false
}

func (s *timerScheduler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers)
}
