package gitengine

import (
	"os"
	"path/filepath"
	"testing"
)

// Commits made within one second carry equal dates, so the newest-first walk meets them in no
// particular order. Two PRs merged one after the other, all in the same second (as tests and
// busy bots do): every PR head and the earlier merge are ancestors of the later merge, and the
// merge base of an ancestor with its descendant is the ancestor itself. A walk that took the
// first common commit it met as the answer called the PR head "not an ancestor" (a GitOps gate
// then waits for a revision it already has).
func TestMergeBaseWithEqualCommitDates(t *testing.T) {
	f := newFixture(t, seed)
	work := t.TempDir()
	env := []string{"GIT_AUTHOR_DATE=2030-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2030-01-01T00:00:00Z",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@prflow.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@prflow.test"}
	git := func(args ...string) string { t.Helper(); return gitEnv(t, work, env, args...) }
	git("clone", "-q", f.srv.Dir(f.owner, f.name), ".")
	// The fork point too is from that second.
	if err := os.WriteFile(filepath.Join(work, "base.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "base.txt")
	git("commit", "-q", "-m", "base")
	// branchOff commits <name>.txt on a new branch name off main and goes back to main.
	branchOff := func(name string) string {
		t.Helper()
		git("checkout", "-q", "-b", name)
		if err := os.WriteFile(filepath.Join(work, name+".txt"), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", name+".txt")
		git("commit", "-q", "-m", name)
		sha := git("rev-parse", "HEAD")
		git("checkout", "-q", "main")
		return sha
	}
	one := branchOff("one")
	two := branchOff("two")
	git("merge", "-q", "--no-ff", "-m", "merge one", "one")
	m1 := git("rev-parse", "HEAD")
	git("merge", "-q", "--no-ff", "-m", "merge two", "two")
	m2 := git("rev-parse", "HEAD")
	git("push", "-q", "origin", "main", "one", "two")

	ctx := ctxT(t)
	w, err := f.engine.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Fetch(ctx, 0, "refs/heads/main", "refs/heads/one", "refs/heads/two"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                 string
		ancestor, descendant string
		want                 bool
	}{
		{"first merge in second", m1, m2, true},
		{"first PR head in second merge", one, m2, true},
		{"second PR head in second merge", two, m2, true},
		{"first PR head in first merge", one, m1, true},
		{"second merge not in first", m2, m1, false},
		{"second PR head not in first merge", two, m1, false},
		{"PR heads unrelated", one, two, false},
	} {
		// Both orders of the walk's start: the answer must not depend on it.
		got, err := w.IsAncestor(tc.ancestor, tc.descendant)
		if err != nil || got != tc.want {
			t.Errorf("%s: IsAncestor = %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if tc.want {
			for _, pair := range [][2]string{{tc.ancestor, tc.descendant}, {tc.descendant, tc.ancestor}} {
				if mb, err := w.MergeBase(pair[0], pair[1]); err != nil || mb != tc.ancestor {
					t.Errorf("%s: MergeBase(%.7s, %.7s) = %.7s, %v; want %.7s", tc.name, pair[0], pair[1], mb, err, tc.ancestor)
				}
			}
		}
	}
}
