package environments_test

import (
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/environments"
)

// TestCostlyRebuildsAreSpacedByTheirCost: with many runs a rebuild of every environment gets
// costly, and changes that keep coming (a burst of starts) would have the model rebuild back
// to back, 50 ms apart, taking most of a core away from the runs themselves. Rebuilds are
// spaced by their own cost too, so they take at most about a quarter of the time however
// costly they get, while a change is still built.
func TestCostlyRebuildsAreSpacedByTheirCost(t *testing.T) {
	const cost = 40 * time.Millisecond // a rebuild of many runs on a loaded machine
	var mu sync.Mutex
	var busy time.Duration
	rebuilds := 0
	measuring := false
	t.Cleanup(func() { *environments.RebuildHook = nil })
	*environments.RebuildHook = func() {
		t0 := time.Now()
		time.Sleep(cost)
		mu.Lock()
		defer mu.Unlock()
		if measuring {
			rebuilds++
			busy += time.Since(t0)
		}
	}
	e := ctltest.New(t, ctltest.Options{})
	m, ok := e.Ctl.Environments().(*environments.Model)
	if !ok {
		t.Fatalf("the controller's environments reader is a %T, want *environments.Model", e.Ctl.Environments())
	}
	select {
	case <-m.Ready():
	case <-time.After(time.Minute):
		t.Fatal("environments model not ready")
	}
	// A change every 5 ms for 3 s, as during a burst of starts.
	mu.Lock()
	measuring = true
	mu.Unlock()
	t0 := time.Now()
	for time.Since(t0) < 3*time.Second {
		m.Nudge()
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	measuring = false
	share, n := float64(busy)/float64(time.Since(t0)), rebuilds
	mu.Unlock()
	t.Logf("%d rebuilds in 3 s, rebuilding %.0f %% of the time", n, 100*share)
	if n == 0 {
		t.Fatal("no rebuild while changes kept coming")
	}
	if share > 0.4 {
		t.Fatalf("rebuilding %.0f %% of the time (%d rebuilds of %s in 3 s), want at most about a quarter", 100*share, n, cost)
	}
}
