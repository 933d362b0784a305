package controller

import (
	"container/heap"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// firings records what a scheduler fired.
type firings struct {
	mu  sync.Mutex
	got []string
}

func (f *firings) fire(run string, due time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, fmt.Sprintf("%s@%s", run, due.Format("15:04:05")))
}

func (f *firings) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// Each run is woken once, at the time it was last given: a new time replaces the old one, the
// same time keeps the timer, a zero time or cancel drops it, stopAll stops them all. The clock
// is synctest's, so an hour passes at once.
func TestTimerScheduler(t *testing.T) {
	type op struct {
		run    string
		in     time.Duration // due this long from the start; 0: cancel
		cancel bool          // cancel instead of schedule
		stop   bool          // stopAll
	}
	tests := []struct {
		name string
		ops  []op
		want []string // fired within two hours, in order
		left int      // timers known after the ops
	}{
		{name: "one run", ops: []op{{run: "a", in: time.Minute}}, want: []string{"a@10:01:00"}, left: 1},
		{name: "runs fire in due order", ops: []op{{run: "a", in: 30 * time.Minute}, {run: "b", in: time.Minute}}, want: []string{"b@10:01:00", "a@10:30:00"}, left: 2},
		{name: "a new time replaces the old", ops: []op{{run: "a", in: time.Minute}, {run: "a", in: 5 * time.Minute}}, want: []string{"a@10:05:00"}, left: 1},
		{name: "an earlier time replaces a later one", ops: []op{{run: "a", in: time.Hour}, {run: "a", in: 2 * time.Minute}}, want: []string{"a@10:02:00"}, left: 1},
		{name: "the same time keeps one timer", ops: []op{{run: "a", in: time.Minute}, {run: "a", in: time.Minute}, {run: "a", in: time.Minute}}, want: []string{"a@10:01:00"}, left: 1},
		{name: "a zero time cancels", ops: []op{{run: "a", in: time.Minute}, {run: "a", in: 0}}, want: nil, left: 0},
		{name: "cancel drops one run only", ops: []op{{run: "a", in: time.Minute}, {run: "b", in: 2 * time.Minute}, {run: "a", cancel: true}}, want: []string{"b@10:02:00"}, left: 1},
		{name: "cancel of an unknown run", ops: []op{{run: "x", cancel: true}}, want: nil, left: 0},
		{name: "stopAll stops every timer", ops: []op{{run: "a", in: time.Minute}, {run: "b", in: time.Hour}, {stop: true}}, want: nil, left: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// synctest's clock starts at 2000-01-01 00:00 UTC: move to 10:00.
				time.Sleep(10 * time.Hour)
				start := time.Now()
				var f firings
				s := newTimerScheduler(f.fire)
				for _, o := range tt.ops {
					switch {
					case o.stop:
						s.stopAll()
					case o.cancel:
						s.cancel(o.run)
					case o.in == 0:
						s.schedule(o.run, time.Time{})
					default:
						s.schedule(o.run, start.Add(o.in))
					}
				}
				if n := s.len(); n != tt.left {
					t.Errorf("%d timers known, want %d", n, tt.left)
				}
				time.Sleep(2 * time.Hour)
				synctest.Wait()
				if got := f.list(); !slices.Equal(got, tt.want) {
					t.Errorf("fired %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// next reports the time a run is due, and nothing once cancelled.
func TestTimerSchedulerNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTimerScheduler(func(string, time.Time) {})
		due := time.Now().Add(time.Minute)
		s.schedule("a", due)
		if got, ok := s.next("a"); !ok || !got.Equal(due) {
			t.Fatalf("next = %v, %v; want %v", got, ok, due)
		}
		s.cancel("a")
		if _, ok := s.next("a"); ok {
			t.Fatal("a cancelled run still due")
		}
	})
}

// Runs rescheduled from many goroutines at once (as shards and the runs watcher do): each
// fires once, at its last time, and -race finds nothing.
func TestTimerSchedulerConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f firings
		s := newTimerScheduler(f.fire)
		start := time.Now()
		const runs = 64
		var wg sync.WaitGroup
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run := fmt.Sprintf("r%02d", i)
				for j := range 20 {
					s.schedule(run, start.Add(time.Duration(20-j)*time.Minute+time.Duration(i)*time.Second))
					if j%7 == 0 {
						s.cancel(run)
					}
				}
			}()
		}
		wg.Wait()
		if s.len() != runs {
			t.Fatalf("%d timers, want %d", s.len(), runs)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		got := f.list()
		if len(got) != runs {
			t.Fatalf("%d fired, want %d: %v", len(got), runs, got)
		}
		for i := range runs {
			want := fmt.Sprintf("r%02d@%s", i, start.Add(time.Minute+time.Duration(i)*time.Second).Format("15:04:05"))
			if !slices.Contains(got, want) {
				t.Errorf("%s did not fire (fired %v)", want, got)
			}
		}
	})
}

// BenchmarkTimerScheduler: 10,000 parked runs each scheduled, moved once (an event changed
// its due time) and cancelled (it ended), with one time.AfterFunc per run (timerScheduler)
// against one heap of our own behind one runtime timer (heapScheduler).
func BenchmarkTimerScheduler(b *testing.B) {
	const runs = 10_000
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%d", i)
	}
	type sched interface {
		schedule(string, time.Time)
		cancel(string)
	}
	for _, impl := range []struct {
		name string
		new  func() sched
	}{
		{"afterfunc", func() sched { return newTimerScheduler(func(string, time.Time) {}) }},
		{"heap", func() sched { return newHeapScheduler(func(string, time.Time) {}) }},
	} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			now := time.Now()
			for b.Loop() {
				s := impl.new()
				for i, id := range ids {
					s.schedule(id, now.Add(time.Hour+time.Duration(i)*time.Millisecond))
				}
				for i, id := range ids {
					s.schedule(id, now.Add(2*time.Hour+time.Duration(i)*time.Millisecond))
				}
				for _, id := range ids {
					s.cancel(id)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3*runs), "ns/change")
		})
	}
}

// heapScheduler is the alternative BenchmarkTimerScheduler measures: every due time in one
// heap, one runtime timer set to the earliest.
type heapScheduler struct {
	mu    sync.Mutex
	items map[string]*heapItem
	h     dueHeap
	t     *time.Timer
	fire  func(string, time.Time)
}

type heapItem struct {
	run string
	due time.Time
	i   int
}

type dueHeap []*heapItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = i; h[j].i = j }
func (h *dueHeap) Push(x any)        { it := x.(*heapItem); it.i = len(*h); *h = append(*h, it) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newHeapScheduler(fire func(string, time.Time)) *heapScheduler {
	s := &heapScheduler{items: map[string]*heapItem{}, fire: fire}
	s.t = time.AfterFunc(time.Hour, s.expire)
	s.t.Stop()
	return s
}

func (s *heapScheduler) schedule(run string, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items[run]; it != nil {
		if due.IsZero() {
			heap.Remove(&s.h, it.i)
			delete(s.items, run)
		} else {
			it.due = due
			heap.Fix(&s.h, it.i)
		}
	} else if !due.IsZero() {
		it := &heapItem{run: run, due: due}
		s.items[run] = it
		heap.Push(&s.h, it)
	}
	s.resetLocked()
}

func (s *heapScheduler) cancel(run string) { s.schedule(run, time.Time{}) }

func (s *heapScheduler) resetLocked() {
	if len(s.h) == 0 {
		s.t.Stop()
		return
	}
	s.t.Reset(time.Until(s.h[0].due))
}

func (s *heapScheduler) expire() {
	s.mu.Lock()
	var due []*heapItem
	for len(s.h) > 0 && !s.h[0].due.After(time.Now()) {
		it := heap.Pop(&s.h).(*heapItem)
		delete(s.items, it.run)
		due = append(due, it)
	}
	s.resetLocked()
	s.mu.Unlock()
	for _, it := range due {
		go s.fire(it.run, it.due)
	}
}
