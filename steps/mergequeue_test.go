package steps_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
)

// gated holds every merge until open is closed, and records the order of merges.
type gated struct {
	scm.Provider
	open    chan struct{}
	mu      sync.Mutex
	inMerge int
	order   []int
}

func (g *gated) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	g.mu.Lock()
	g.inMerge++
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	pr, err := g.Provider.MergePR(ctx, repo, number, in)
	g.mu.Lock()
	g.inMerge--
	if err == nil {
		g.order = append(g.order, number)
	}
	g.mu.Unlock()
	return pr, err
}

func (g *gated) merging() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inMerge
}

const sharedBranch = `
name: shared
inputs: {key: {type: string}}
stages:
  - id: s
    steps:
` + updateStep + `
          filePath: "envs/${{ inputs.key }}/config.json"
          create: true
          variables: [{name: replicas, type: Number, value: "3"}]
      - id: merge
        type: MergePR
`

// While one merge holds a branch, the other merges of that branch wait parked in its merge
// queue (Waiting in the run state, no worker slot held), and go one after the other, in the
// order they queued, once it is done. Before the queue they sat in worker slots on the lease.
func TestWaitingMergesParkInTheBranchQueue(t *testing.T) {
	t.Parallel()
	fg := forges(t)[0] // github
	g := &gated{Provider: fg.p, open: make(chan struct{})}
	fg.p = g
	e := env(t, fg, 1)
	const n = 5
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.Start(sharedBranch, map[string]any{"key": fmt.Sprintf("k%d", i)}).ID
	}
	// One merge is inside the forge call; every other one must be parked in the queue.
	deadline := time.Now().Add(60 * time.Second)
	for {
		parked := 0
		for _, id := range ids {
			r, _ := e.Ctl.Get(context.Background(), id)
			if st := ctltest.Step(r, "s", "merge"); st != nil && st.Status == pipelines.StWaiting &&
				st.Wait != nil && strings.Contains(st.Wait.Reason, "merge queue") {
				parked++
			}
		}
		if parked == n-1 && g.merging() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d merges parked in the queue, %d in a forge merge call\n%s", parked, n-1, g.merging(), tail(e.Logs.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(g.open)
	for _, id := range ids {
		if r := e.Wait(id, 2*time.Minute); r.Status != pipelines.StSucceeded {
			t.Fatalf("run %s: %s %s", id, r.Status, r.Error)
		}
	}
	if len(g.order) != n {
		t.Fatalf("%d merges, want %d", len(g.order), n)
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}
