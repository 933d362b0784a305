package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
)

const repo scm.Repo = "acme/release"

var me = scm.Signature{Name: "dev", Email: "dev@example.com"}

type rig struct {
	srv  *scmtest.GitServer
	tmp  string
	base string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	srv := scmtest.NewGitServer(t)
	if _, err := srv.CreateRepo("acme", "release", seedFiles); err != nil {
		t.Fatal(err)
	}
	return &rig{srv: srv, tmp: t.TempDir(), base: srv.URL()}
}

// worker is one prflow worker process: its own provider and engine, sharing only the remote.
func (r *rig) worker(t *testing.T, opts ...gitengine.Option) *local.Provider {
	t.Helper()
	eng := gitengine.New(append([]gitengine.Option{gitengine.WithBasicAuth("bot", scmtest.DefaultToken), gitengine.WithTempDir(r.tmp)}, opts...)...)
	p, err := local.New(r.base, local.WithEngine(eng), local.WithIdentity(scm.Signature{Name: "prflow", Email: "prflow@example.com"}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// branchWithChange creates branch from main with one commit and returns its head.
func branchWithChange(t *testing.T, p *local.Provider, branch, path, content string) string {
	t.Helper()
	main, err := p.Branch(ctx(t), repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	sha, err := p.Commit(ctx(t), repo, scm.CommitInput{Branch: branch, Parent: main.SHA, Message: "change " + path, Author: me,
		Changes: []scm.FileChange{{Path: path, Content: []byte(content)}}})
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

func (r *rig) refs(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", r.srv.Dir("acme", "release"), "for-each-ref", "--format=%(refname)", prefix).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

func (r *rig) assertNoScratchLeft(t *testing.T) {
	t.Helper()
	ents, _ := os.ReadDir(r.tmp)
	if len(ents) != 0 {
		t.Fatalf("%d scratch dirs left behind", len(ents))
	}
}

// TestWorkersNeverShareAPRNumber opens PRs from several workers at once: every PR gets its own
// number, and a fresh worker sees all of them.
func TestWorkersNeverShareAPRNumber(t *testing.T) {
	r := newRig(t)
	const n = 5
	setup := r.worker(t)
	for i := range n {
		branchWithChange(t, setup, fmt.Sprintf("feature-%d", i), fmt.Sprintf("f%d.txt", i), "x\n")
	}
	got := inParallel(t, n, func(i int) (int, error) {
		pr, err := r.worker(t).OpenPR(ctx(t), repo, scm.NewPR{Title: fmt.Sprintf("PR %d", i), Head: fmt.Sprintf("feature-%d", i), Base: "main"})
		if err != nil {
			return 0, err
		}
		return pr.Number, nil
	})
	sort.Ints(got)
	if fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("numbers = %v", got)
	}
	fresh := r.worker(t)
	for i := range n {
		pr, err := fresh.FindPR(ctx(t), repo, fmt.Sprintf("feature-%d", i), "main")
		if err != nil || pr.Title != fmt.Sprintf("PR %d", i) {
			t.Fatalf("feature-%d: %+v %v", i, pr, err)
		}
		if want := fmt.Sprintf("%s/acme/release.git#pr/%d", r.srv.URL(), pr.Number); pr.URL != want {
			t.Fatalf("URL = %q, want %q", pr.URL, want)
		}
	}
	if refs := r.refs(t, "refs/prflow/pulls/"); len(refs) != n {
		t.Fatalf("PR records in the remote: %v", refs)
	}
	r.assertNoScratchLeft(t)
}

// TestOnlyOneOpenPRPerBranchPair races workers opening the same PR: one wins, the others are
// told it exists.
func TestOnlyOneOpenPRPerBranchPair(t *testing.T) {
	r := newRig(t)
	branchWithChange(t, r.worker(t), "feature", "f.txt", "x\n")
	const n = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, conflicts int
	for range n {
		wg.Go(func() {
			_, err := r.worker(t).OpenPR(ctx(t), repo, scm.NewPR{Title: "same", Head: "feature", Base: "main"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, scm.ErrConflict) && strings.Contains(err.Error(), "already open"):
				conflicts++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok != 1 || conflicts != n-1 {
		t.Fatalf("%d opened, %d refused", ok, conflicts)
	}
	// Once it is closed, a new PR for the same branches may be opened.
	p := r.worker(t)
	pr, err := p.FindPR(ctx(t), repo, "feature", "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ClosePR(ctx(t), repo, pr.Number); err != nil {
		t.Fatal(err)
	}
	again, err := p.OpenPR(ctx(t), repo, scm.NewPR{Title: "again", Head: "feature", Base: "main"})
	if err != nil || again.Number == pr.Number {
		t.Fatalf("reopen: %+v %v", again, err)
	}
	if found, _ := p.FindPR(ctx(t), repo, "feature", "main"); found.Number != again.Number {
		t.Fatalf("FindPR returns #%d, want the newest #%d", found.Number, again.Number)
	}
}

// TestConcurrentMergesMergeOnce: workers merging the same PR at once produce one merge commit
// and all report the same merge SHA.
func TestConcurrentMergesMergeOnce(t *testing.T) {
	r := newRig(t)
	head := branchWithChange(t, r.worker(t), "feature", "f.txt", "x\n")
	pr, err := r.worker(t).OpenPR(ctx(t), repo, scm.NewPR{Title: "merge me", Head: "feature", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := r.srv.Log("acme", "release", "main")
	const n = 3
	shas := inParallel(t, n, func(int) (string, error) {
		got, err := r.worker(t).MergePR(ctx(t), repo, pr.Number, scm.MergeInput{Method: scm.MergeCommit, SHA: head})
		if err != nil {
			return "", err
		}
		return got.MergeSHA, nil
	})
	var first string
	for _, s := range shas {
		if first == "" {
			first = s
		}
		if s != first {
			t.Fatalf("different merge SHAs: %s and %s", first, s)
		}
	}
	after, _ := r.srv.Log("acme", "release", "main")
	if len(after) != len(before)+2 { // the merge commit and the PR's own commit
		t.Fatalf("main grew by %d commits, want 2", len(after)-len(before))
	}
	c, err := r.srv.GetCommit("acme", "release", first)
	if err != nil || len(c.Parents) != 2 || c.Parents[1] != head || c.Committer.Email != "prflow@example.com" {
		t.Fatalf("merge commit %+v %v", c, err)
	}
	if refs := r.refs(t, "refs/prflow/open/"); len(refs) != 0 {
		t.Fatalf("open marker left after merge: %v", refs)
	}
}

func TestMergeShapes(t *testing.T) {
	r := newRig(t)
	p := r.worker(t)
	// A PR with two commits by another author.
	branchWithChange(t, p, "squashed", "s1.txt", "1\n")
	h, _ := p.Branch(ctx(t), repo, "squashed")
	if _, err := p.Commit(ctx(t), repo, scm.CommitInput{Branch: "squashed", Parent: h.SHA, Message: "second", Author: me,
		Changes: []scm.FileChange{{Path: "s2.txt", Content: []byte("2\n")}}}); err != nil {
		t.Fatal(err)
	}
	sq, _ := p.OpenPR(ctx(t), repo, scm.NewPR{Title: "Squash me", Body: "why", Head: "squashed", Base: "main"})
	merged, err := p.MergePR(ctx(t), repo, sq.Number, scm.MergeInput{Method: scm.Squash})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := r.srv.GetCommit("acme", "release", merged.MergeSHA)
	if len(c.Parents) != 1 || !strings.HasPrefix(c.Message, fmt.Sprintf("Squash me (#%d)", sq.Number)) {
		t.Fatalf("squash commit %+v", c)
	}
	files, err := p.ChangedFiles(ctx(t), repo, sq.Number)
	if err != nil || fmt.Sprint(files) != "[s1.txt s2.txt]" {
		t.Fatalf("changed files of the merged PR: %v %v", files, err)
	}

	branchWithChange(t, p, "rebased", "r1.txt", "1\n")
	rb, _ := p.OpenPR(ctx(t), repo, scm.NewPR{Title: "Rebase me", Head: "rebased", Base: "main"})
	merged, err = p.MergePR(ctx(t), repo, rb.Number, scm.MergeInput{Method: scm.Rebase})
	if err != nil {
		t.Fatal(err)
	}
	c, _ = r.srv.GetCommit("acme", "release", merged.MergeSHA)
	if len(c.Parents) != 1 || c.Author.Email != me.Email || c.Committer.Email != "prflow@example.com" || c.Message != "change r1.txt" {
		t.Fatalf("rebased commit keeps its author and message: %+v", c)
	}

	// Closed PRs cannot be merged; merged ones cannot be closed.
	branchWithChange(t, p, "closed", "c.txt", "c\n")
	cl, _ := p.OpenPR(ctx(t), repo, scm.NewPR{Title: "close", Head: "closed", Base: "main"})
	if err := p.ClosePR(ctx(t), repo, cl.Number); err != nil {
		t.Fatal(err)
	}
	if err := p.ClosePR(ctx(t), repo, cl.Number); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
	if _, err := p.MergePR(ctx(t), repo, cl.Number, scm.MergeInput{}); !errors.Is(err, scm.ErrNotMergeable) {
		t.Fatalf("merge closed PR: %v", err)
	}
	if err := p.ClosePR(ctx(t), repo, rb.Number); !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("close merged PR: %v", err)
	}
	if _, err := p.MergePR(ctx(t), repo, cl.Number, scm.MergeInput{Method: "fast-forward"}); err == nil || !strings.Contains(err.Error(), "unknown merge method") {
		t.Fatalf("bad method: %v", err)
	}
	r.assertNoScratchLeft(t)
}

func TestErrorsNameRepoAndMapToSentinels(t *testing.T) {
	r := newRig(t)
	p := r.worker(t)
	_, err := p.GetPR(ctx(t), "acme/missing", 1)
	var se *scm.Error
	if !errors.Is(err, scm.ErrNotFound) || !errors.As(err, &se) || se.Provider != "local" || se.Repo != "acme/missing" || se.Op != "get PR #1" {
		t.Fatalf("missing repo: %v", err)
	}
	bad := r.worker(t, gitengine.WithBasicAuth("bot", "wrong-token-0000"))
	err = bad.RepoExists(ctx(t), repo)
	if !errors.Is(err, scm.ErrUnauthorized) || strings.Contains(err.Error(), "wrong-token-0000") {
		t.Fatalf("bad token: %v", err)
	}
	for _, name := range []scm.Repo{"../etc", "/abs", "a//b", ""} {
		if _, err := p.Branch(ctx(t), name, "main"); err == nil || !strings.Contains(err.Error(), "invalid repo name") {
			t.Fatalf("repo %q: %v", name, err)
		}
	}
	if err := p.DeleteBranch(ctx(t), repo, "never-existed"); err != nil {
		t.Fatalf("deleting a missing branch: %v", err)
	}
	if err := p.SetStatus(ctx(t), repo, strings.Repeat("a", 40), scm.Status{Context: "c", State: scm.StatusSuccess}); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("status on an unknown commit: %v", err)
	}
	if err := p.SetStatus(ctx(t), repo, strings.Repeat("a", 40), scm.Status{Context: "c", State: "green"}); err == nil || !strings.Contains(err.Error(), `"green"`) {
		t.Fatalf("bad state: %v", err)
	}
	if _, err := local.New(""); err == nil {
		t.Fatal("empty base accepted")
	}
}

// inParallel makes n calls at once and returns the results of those that succeeded, in the
// order they finished; each failure is a test error.
func inParallel[T any](t *testing.T, n int, call func(i int) (T, error)) []T {
	t.Helper()
	results := make(chan T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, err := call(i)
			if err != nil {
				t.Error(err)
				return
			}
			results <- v
		})
	}
	wg.Wait()
	close(results)
	var out []T
	for v := range results {
		out = append(out, v)
	}
	return out
}
