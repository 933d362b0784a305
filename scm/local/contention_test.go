package local_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
)

// branches makes n branches feature-0..n-1 in the remote, all at one commit that changes main.
func (r *rig) branches(t *testing.T, n int) {
	t.Helper()
	head := branchWithChange(t, r.worker(t), "feature-0", "f.txt", "x\n")
	for i := 1; i < n; i++ {
		out, err := exec.Command("git", "--git-dir", r.srv.Dir("acme", "release"), "update-ref",
			fmt.Sprintf("refs/heads/feature-%d", i), head).CombinedOutput()
		if err != nil {
			t.Fatalf("update-ref: %v: %s", err, out)
		}
	}
}

// TestFiftyWorkersOpenPRsAtOnce: 50 worker processes (each its own provider and engine) open
// PRs at the same moment, plus a second open of ten of the same heads. Every head gets exactly
// one PR, the numbers are distinct and dense, and a repeated open is told the PR exists.
// Before the number allocation was fixed this failed with "gave up after 8 attempts".
func TestFiftyWorkersOpenPRsAtOnce(t *testing.T) {
	r := newRig(t)
	const n, dups = 50, 10
	r.branches(t, n)
	// The remote takes pushes one at a time, so 60 racing opens need many serial pushes; the
	// deadline is generous for a loaded CI machine (it is the bound, not a speed target).
	c, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	byHead := map[string][]int{}
	conflicts := 0
	for i := range n + dups {
		head := fmt.Sprintf("feature-%d", i%n)
		p := r.worker(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			pr, err := p.OpenPR(c, repo, scm.NewPR{Title: "PR " + head, Head: head, Base: "main"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				byHead[head] = append(byHead[head], pr.Number)
			case errors.Is(err, scm.ErrConflict) && strings.Contains(err.Error(), "already open"):
				conflicts++
			default:
				t.Errorf("open %s: %v", head, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var numbers []int
	for h, ns := range byHead {
		if len(ns) != 1 {
			t.Errorf("%s has PRs %v, want exactly one", h, ns)
		}
		numbers = append(numbers, ns...)
	}
	sort.Ints(numbers)
	if len(byHead) != n || conflicts != dups {
		t.Fatalf("%d heads opened, %d refused; want %d and %d", len(byHead), conflicts, n, dups)
	}
	for i, x := range numbers {
		if x != i+1 {
			t.Fatalf("numbers are not 1..%d: %v", n, numbers)
		}
	}
	if refs := r.refs(t, "refs/prflow/pulls/"); len(refs) != n {
		t.Fatalf("%d PR records in the remote, want %d", len(refs), n)
	}
	if refs := r.refs(t, "refs/prflow/open/"); len(refs) != n {
		t.Fatalf("%d open markers in the remote, want %d", len(refs), n)
	}
	r.assertNoScratchLeft(t)
}
