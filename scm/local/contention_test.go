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

// TestManyWorkersOpenPRsAtOnce: 12 worker processes (the chaos suite's count; each its own
// provider and engine) open PRs at the same moment, plus a second open of four of the heads. Every head gets exactly
// one PR, the numbers are distinct and dense, and a repeated open is told the PR exists.
// Before the number allocation was fixed this failed with "gave up after 8 attempts".
func TestManyWorkersOpenPRsAtOnce(t *testing.T) {
	r := newRig(t)
	const n, dups = 12, 4
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
		wg.Go(func() {
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
		})
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

// TestConcurrentRecordWrites: many workers comment on one PR and set statuses on one commit at
// the same time. Each write is a compare-and-swap on one ref, so all but one lose every round;
// none may give up while the context lives and no write may be lost. Before, the retry gave
// up after 8 attempts.
func TestConcurrentRecordWrites(t *testing.T) {
	r := newRig(t)
	head := branchWithChange(t, r.worker(t), "feature", "f.txt", "x\n")
	pr, err := r.worker(t).OpenPR(ctx(t), repo, scm.NewPR{Title: "t", Head: "feature", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	c, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		comments, statuses := r.worker(t), r.worker(t)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if err := comments.Comment(c, repo, pr.Number, fmt.Sprintf("comment %d", i)); err != nil {
				t.Errorf("comment %d: %v", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			st := scm.Status{Context: fmt.Sprintf("check-%d", i), State: scm.StatusSuccess}
			if err := statuses.SetStatus(c, repo, head, st); err != nil {
				t.Errorf("status %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fresh := r.worker(t)
	got, err := fresh.Comments(ctx(t), repo, pr.Number)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, cm := range got {
		seen[cm.Body] = true
	}
	sts, err := fresh.Statuses(ctx(t), repo, head)
	if err != nil {
		t.Fatal(err)
	}
	ctxs := map[string]bool{}
	for _, s := range sts {
		ctxs[s.Context] = true
	}
	for i := range n {
		if !seen[fmt.Sprintf("comment %d", i)] {
			t.Errorf("comment %d lost (have %d comments)", i, len(got))
		}
		if !ctxs[fmt.Sprintf("check-%d", i)] {
			t.Errorf("status check-%d lost (have %d)", i, len(sts))
		}
	}
	if len(got) != n || len(sts) != n {
		t.Fatalf("%d comments, %d statuses; want %d each", len(got), len(sts), n)
	}
	r.assertNoScratchLeft(t)
}

// TestGetPRWhileItsBranchIsDeleted: a reader polls an open PR while its head branch is deleted
// and made again and again (a failed run's cleanup deletes the branch of a PR it closes). The
// branch can go between the reader listing the refs and fetching them; the read must then look
// again, never fail with "couldn't find remote ref" (seen under load in steps
// TestFailedAndCancelledRunsLeaveNoDebris).
func TestGetPRWhileItsBranchIsDeleted(t *testing.T) {
	r := newRig(t)
	r.branches(t, 1)
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pr, err := r.worker(t).OpenPR(c, repo, scm.NewPR{Title: "flip", Head: "feature-0", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "--git-dir", r.srv.Dir("acme", "release"), "rev-parse", "refs/heads/feature-0").Output()
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(string(out))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // delete and recreate the branch straight in the bare repo, every few ms
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			args := []string{"update-ref", "-d", "refs/heads/feature-0"}
			if i%2 == 1 {
				args = []string{"update-ref", "refs/heads/feature-0", head}
			}
			if out, err := exec.Command("git", append([]string{"--git-dir", r.srv.Dir("acme", "release")}, args...)...).CombinedOutput(); err != nil {
				t.Errorf("%v: %v %s", args, err, out)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	reader := r.worker(t)
	reads := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); reads++ {
		if _, err := reader.GetPR(c, repo, pr.Number); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("read %d of PR #%d while its branch comes and goes: %v", reads+1, pr.Number, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads", reads)
}
