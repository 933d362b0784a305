package controller

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// refNames lists refs as "run/stage/step@key", sorted, for comparing.
func refNames(refs []parkRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.Run+"/"+r.Stage+"/"+r.Step+"@"+r.key)
	}
	sort.Strings(out)
	return out
}

// The index answers which parked steps a key, topic or agent prefix wakes, follows a run's
// revisions (newer replaces, older is ignored, the last clears), and keeps the parked count.
func TestParkIndex(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	sync1 := pipelines.Parked{Stage: "dev", Step: "sync", Keys: []string{"agent1.app-dev"}, Since: t0}
	appr := pipelines.Parked{Stage: "prod", Step: "ok", Topics: []string{"commit:github:acme/deploy@c0ffee"}, Since: t0}
	approval := pipelines.Parked{Stage: "prod", Step: "gate", Topics: []string{"approval"}, Since: t0}
	pr := pipelines.Parked{Stage: "dev", Step: "merge", Topics: []string{"pr:github:acme/deploy#1"}, Keys: []string{"agent2.app-x"}, Since: t0}
	type park struct {
		run    string
		rev    uint64
		final  bool
		parked []pipelines.Parked
		ok     bool // taken (not an older revision)
	}
	tests := []struct {
		name      string
		parks     []park
		unpark    []string
		key       string
		want      []string // woken(key)
		topic     string
		wantTopic []string // wokenByTopic(topic)
		prefix    string
		wantPref  []string // wokenByPrefix(prefix)
		steps     int
		runs      int
	}{
		{name: "nothing parked", key: "agent1.app-dev", steps: 0, runs: 0},
		{name: "one key",
			parks: []park{{"r1", 1, false, []pipelines.Parked{sync1}, true}},
			key:   "agent1.app-dev", want: []string{"r1/dev/sync@agent1.app-dev"},
			prefix: "agent1.", wantPref: []string{"r1/dev/sync@agent1.app-dev"},
			steps: 1, runs: 1},
		{name: "a key and a topic of one step, another run on the topic",
			parks: []park{{"r1", 3, false, []pipelines.Parked{pr, appr}, true}, {"r2", 4, false, []pipelines.Parked{appr}, true}},
			key:   "agent2.app-x", want: []string{"r1/dev/merge@agent2.app-x"},
			topic: "commit:github:acme/deploy@c0ffee", wantTopic: []string{"r1/prod/ok@commit:github:acme/deploy@c0ffee", "r2/prod/ok@commit:github:acme/deploy@c0ffee"},
			prefix: "agent2.", wantPref: []string{"r1/dev/merge@agent2.app-x"},
			steps: 3, runs: 2},
		{name: "a newer revision replaces the run's parks",
			parks: []park{{"r1", 1, false, []pipelines.Parked{sync1}, true}, {"r1", 2, false, []pipelines.Parked{appr}, true}},
			key:   "agent1.app-dev", want: nil,
			topic: "commit:github:acme/deploy@c0ffee", wantTopic: []string{"r1/prod/ok@commit:github:acme/deploy@c0ffee"},
			steps: 1, runs: 1},
		{name: "the same revision again is taken (a read-back of what we wrote)",
			parks: []park{{"r1", 2, false, []pipelines.Parked{sync1}, true}, {"r1", 2, false, []pipelines.Parked{sync1, appr}, true}},
			key:   "agent1.app-dev", want: []string{"r1/dev/sync@agent1.app-dev"},
			steps: 2, runs: 1},
		{name: "an older revision arriving late changes nothing",
			parks: []park{{"r1", 5, false, []pipelines.Parked{sync1}, true}, {"r1", 4, false, []pipelines.Parked{appr}, false}},
			key:   "agent1.app-dev", want: []string{"r1/dev/sync@agent1.app-dev"},
			topic: "commit:github:acme/deploy@c0ffee", wantTopic: nil,
			steps: 1, runs: 1},
		{name: "the run's last revision clears it",
			parks: []park{{"r1", 5, false, []pipelines.Parked{sync1, appr}, true}, {"r1", 6, true, nil, true}},
			key:   "agent1.app-dev", want: nil, topic: "commit:github:acme/deploy@c0ffee", wantTopic: nil,
			steps: 0, runs: 0},
		{name: "unpark drops one run, not another",
			parks:  []park{{"r1", 1, false, []pipelines.Parked{appr}, true}, {"r2", 2, false, []pipelines.Parked{appr, sync1}, true}},
			unpark: []string{"r1", "never-parked"},
			topic:  "commit:github:acme/deploy@c0ffee", wantTopic: []string{"r2/prod/ok@commit:github:acme/deploy@c0ffee"},
			key: "agent1.app-dev", want: []string{"r2/dev/sync@agent1.app-dev"},
			steps: 2, runs: 1},
		{name: "a parked approval counts but is under no topic (a decision comes as a signal to its run)",
			parks: []park{{"r1", 1, false, []pipelines.Parked{approval}, true}, {"r2", 2, false, []pipelines.Parked{approval, sync1}, true}},
			topic: "approval", wantTopic: nil,
			key: "agent1.app-dev", want: []string{"r2/dev/sync@agent1.app-dev"},
			steps: 3, runs: 2},
		{name: "a prefix is not a key: agent1. does not match agent10.",
			parks:  []park{{"r1", 1, false, []pipelines.Parked{{Stage: "s", Step: "x", Keys: []string{"agent10.app"}}}, true}},
			prefix: "agent1.", wantPref: nil,
			steps: 1, runs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gauge atomic.Int64
			x := newParkIndex(newChangeLog(time.Hour, 100), &gauge)
			for _, p := range tt.parks {
				then := false
				_, ok := x.park(p.run, p.rev, p.final, p.parked, func() { then = true })
				if ok != p.ok || then != p.ok {
					t.Fatalf("park %s rev %d: taken %v, then called %v; want %v", p.run, p.rev, ok, then, p.ok)
				}
			}
			for _, run := range tt.unpark {
				x.unpark(run, nil)
			}
			if got := refNames(x.woken(tt.key)); !slices.Equal(got, tt.want) && tt.key != "" {
				t.Errorf("woken(%q) = %v, want %v", tt.key, got, tt.want)
			}
			if got := refNames(x.wokenByTopic(tt.topic)); tt.topic != "" && !slices.Equal(got, tt.wantTopic) {
				t.Errorf("wokenByTopic(%q) = %v, want %v", tt.topic, got, tt.wantTopic)
			}
			if got := refNames(x.wokenByPrefix(tt.prefix)); tt.prefix != "" && !slices.Equal(got, tt.wantPref) {
				t.Errorf("wokenByPrefix(%q) = %v, want %v", tt.prefix, got, tt.wantPref)
			}
			if steps, runs := x.counts(); steps != tt.steps || runs != tt.runs {
				t.Errorf("counts = %d steps in %d runs, want %d in %d", steps, runs, tt.steps, tt.runs)
			}
			if gauge.Load() != int64(tt.steps) {
				t.Errorf("gauge %d, want %d", gauge.Load(), tt.steps)
			}
		})
	}
}

// A change newer than a step's park is a wake it missed: park returns it, missedWakes finds it
// later; a change before the park, or a park of unknown time, is not one. wokenBefore picks the
// steps a change seen after a restart concerns.
func TestParkIndexMissedChanges(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		since    time.Time // when the step parked (zero: unknown)
		changed  time.Time // when its key changed (zero: never)
		missed   bool
		atChange bool // wokenBefore(key, changed) holds it
	}{
		{name: "changed after the park", since: t0, changed: t0.Add(time.Second), missed: true, atChange: true},
		{name: "changed before the park", since: t0, changed: t0.Add(-time.Second), missed: false, atChange: false},
		{name: "changed at the park", since: t0, changed: t0, missed: false, atChange: false},
		{name: "park time unknown", changed: t0, missed: false, atChange: true},
		{name: "never changed", since: t0, missed: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes := newChangeLog(time.Hour, 100)
			x := newParkIndex(changes, nil)
			if !tt.changed.IsZero() {
				changes.set("k", tt.changed, tt.changed)
				changes.set("pr:t", tt.changed, tt.changed)
			}
			missed, _ := x.park("r", 1, false, []pipelines.Parked{{Stage: "s", Step: "x", Keys: []string{"k"}, Topics: []string{"pr:t"}, Since: tt.since}}, nil)
			want := 0
			if tt.missed {
				want = 2 // its key and its topic
			}
			if len(missed) != want {
				t.Errorf("park returned %d missed, want %d", len(missed), want)
			}
			if got := len(x.missedWakes()); got != want {
				t.Errorf("missedWakes = %d, want %d", got, want)
			}
			if !tt.changed.IsZero() {
				if got := len(x.wokenBefore("k", tt.changed)) == 1; got != tt.atChange {
					t.Errorf("wokenBefore(change) holds it: %v, want %v", got, tt.atChange)
				}
				if len(x.wokenBefore("k", tt.since.Add(time.Nanosecond))) != 1 {
					t.Error("a change just after the park does not concern the step")
				}
			}
		})
	}
}

// Runs park, move on and end from many goroutines while watchers look keys up and note
// changes: the index ends empty, the gauge at zero, and -race finds nothing.
func TestParkIndexConcurrent(t *testing.T) {
	var gauge atomic.Int64
	changes := newChangeLog(time.Hour, 1000)
	x := newParkIndex(changes, &gauge)
	const runs, revs = 32, 50
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("r%d", i)
			for rev := uint64(1); rev <= revs; rev++ {
				p := pipelines.Parked{Stage: "s", Step: "x", Wake: int(rev), Keys: []string{fmt.Sprintf("agent%d.app", i%4)}, Topics: []string{"pr:github:acme/deploy#1"}, Since: time.Now()}
				if _, ok := x.park(run, rev, false, []pipelines.Parked{p, p}, nil); !ok {
					t.Errorf("%s rev %d refused", run, rev)
				}
				// The same run's older revision, late: refused.
				if _, ok := x.park(run, rev-1, false, nil, nil); ok && rev > 1 {
					t.Errorf("%s: older rev %d taken after %d", run, rev-1, rev)
				}
			}
			if i%2 == 0 {
				x.park(run, revs+1, true, nil, nil)
			} else {
				x.unpark(run, nil)
			}
		}()
	}
	var readers sync.WaitGroup
	for g := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("agent%d.app", g)
				changes.set(key, time.Now(), time.Now())
				_ = x.woken(key)
				_ = x.wokenByTopic("pr:github:acme/deploy#1")
				_ = x.wokenByPrefix("agent")
				_ = x.missedWakes()
				if steps, _ := x.counts(); steps < 0 || steps > 2*runs {
					t.Errorf("%d steps parked with %d runs of 2", steps, runs)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if steps, n := x.counts(); steps != 0 || n != 0 || gauge.Load() != 0 {
		t.Fatalf("after every run ended: %d steps in %d runs, gauge %d", steps, n, gauge.Load())
	}
	if len(x.byKey)+len(x.byTopic)+len(x.parkedOf) != 0 {
		t.Fatalf("index keeps %d keys, %d topics, %d runs", len(x.byKey), len(x.byTopic), len(x.parkedOf))
	}
}
