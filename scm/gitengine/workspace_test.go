package gitengine

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/prflow/prflow/scm"
)

func TestMergeBaseNeedsHistoryAndFindsForkPoint(t *testing.T) {
	f := newFixture(t, seed)
	fork := f.head(t, "main")
	f.commit(t, "topic", scm.FileChange{Path: "a.txt", Content: []byte("a")})
	f.commit(t, "topic", scm.FileChange{Path: "b.txt", Content: []byte("b")})
	f.commit(t, "main", scm.FileChange{Path: "c.txt", Content: []byte("c")})
	f.commit(t, "main", scm.FileChange{Path: "d.txt", Content: []byte("d")})

	ctx := ctxT(t)
	w, err := f.engine.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	refs := []string{"refs/heads/main", "refs/heads/topic"}
	if err := w.Fetch(ctx, 1, refs...); err != nil {
		t.Fatal(err)
	}
	m, _ := w.Ref(refs[0])
	tp, _ := w.Ref(refs[1])
	if _, err := w.MergeBase(m, tp); !errors.Is(err, ErrShallow) {
		t.Fatalf("shallow merge base: %v", err)
	}
	var got string
	err = w.FetchHistory(ctx, refs, func() (bool, error) {
		got, err = w.MergeBase(m, tp)
		return err == nil, err
	})
	if err != nil || got != fork {
		t.Fatalf("merge base = %s (%v), want %s", got, err, fork)
	}
	if ok, err := w.IsAncestor(fork, m); !ok || err != nil {
		t.Fatalf("fork is ancestor of main: %v %v", ok, err)
	}
	if ok, err := w.IsAncestor(tp, m); ok || err != nil {
		t.Fatalf("topic is not an ancestor of main: %v %v", ok, err)
	}
	paths, err := w.ChangedPaths(fork, tp)
	if err != nil || fmt.Sprint(paths) != "[a.txt b.txt]" {
		t.Fatalf("changed = %v %v", paths, err)
	}
	commits, err := w.FirstParentRange(fork, tp)
	if err != nil || len(commits) != 2 || commits[1].Hash.String() != tp {
		t.Fatalf("range = %v %v", commits, err)
	}
}

func TestMergeCommitsReportsConflictingFiles(t *testing.T) {
	f := newFixture(t, seed)
	f.commit(t, "topic",
		scm.FileChange{Path: "envs/prod/config.json", Content: []byte("{\n  \"image\": \"topic\"\n}\n")},
		scm.FileChange{Path: "envs/dev/config.json", Content: []byte("{\n  \"image\": \"topic\"\n}\n")},
		scm.FileChange{Path: "only-topic.txt", Content: []byte("t")})
	f.commit(t, "main",
		scm.FileChange{Path: "envs/prod/config.json", Content: []byte("{\n  \"image\": \"main\"\n}\n")},
		scm.FileChange{Path: "README.md", Delete: true})
	ctx := ctxT(t)
	w, err := f.engine.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Fetch(ctx, 0, "refs/heads/main", "refs/heads/topic"); err != nil {
		t.Fatal(err)
	}
	m, _ := w.Ref("refs/heads/main")
	tp, _ := w.Ref("refs/heads/topic")
	base, err := w.MergeBase(m, tp)
	if err != nil {
		t.Fatal(err)
	}
	tree, conflicts, err := w.MergeCommits(base, m, tp)
	if err != nil || tree != "" || fmt.Sprint(conflicts) != "[envs/prod/config.json]" {
		t.Fatalf("tree %q conflicts %v err %v", tree, conflicts, err)
	}
	// Without the conflicting file the rest merges: deletions and additions from both sides.
	f.commit(t, "topic", scm.FileChange{Path: "envs/prod/config.json", Content: []byte("{\n  \"image\": \"main\"\n}\n")})
	if err := w.Fetch(ctx, 0, "refs/heads/topic"); err != nil {
		t.Fatal(err)
	}
	tp, _ = w.Ref("refs/heads/topic")
	tree, conflicts, err = w.MergeCommits(base, m, tp)
	if err != nil || len(conflicts) != 0 {
		t.Fatalf("conflicts %v err %v", conflicts, err)
	}
	sha, err := w.WriteCommit(CommitSpec{Tree: tree, Parents: []string{m, tp}, Message: "merge", Author: bot})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := w.FileAt(ctx, sha, "README.md"); ok {
		t.Fatal("README.md deleted on main came back")
	}
	if d, _ := w.ReadFile(sha, "only-topic.txt"); string(d) != "t" {
		t.Fatal("topic's file missing")
	}
	if d, _ := w.ReadFile(sha, "envs/dev/config.json"); !strings.Contains(string(d), "topic") {
		t.Fatal("topic's dev change missing")
	}
	if _, err := w.ReadFile(sha, "nope"); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestPushIsAtomicAndGuarded(t *testing.T) {
	f := newFixture(t, seed)
	ctx := ctxT(t)
	w, err := f.engine.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Fetch(ctx, 1, "refs/heads/main"); err != nil {
		t.Fatal(err)
	}
	head, _ := w.Ref("refs/heads/main")
	tree, _, err := w.ApplyChanges(head, []scm.FileChange{{Path: "n.txt", Content: []byte("n")}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.WriteCommit(CommitSpec{Tree: tree, Parents: []string{head}, Message: "n", Author: bot})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := f.srv.Commit("acme", "deploy", "main", map[string]string{"z": "z"}, nil, "moved")
	if err != nil {
		t.Fatal(err)
	}
	// One stale update sinks the whole push: the new ref is not created either.
	err = w.Push(ctx, RefUpdate{Name: "refs/prflow/x", New: c}, RefUpdate{Name: "refs/heads/main", Old: head, New: c})
	if !errors.Is(err, ErrPushRejected) || !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("err = %v", err)
	}
	refs, err := w.ListRemote(ctx)
	if err != nil || refs["refs/prflow/x"] != "" || refs["refs/heads/main"] != moved {
		t.Fatalf("refs after rejected push: %v %v", refs, err)
	}
	// Creating a ref that exists is rejected even when it would fast-forward.
	if err := w.Push(ctx, RefUpdate{Name: "refs/heads/feature", New: head}); err != nil {
		t.Fatal(err)
	}
	if err := w.Push(ctx, RefUpdate{Name: "refs/heads/feature", New: c}); !errors.Is(err, ErrPushRejected) {
		t.Fatalf("create over existing: %v", err)
	}
	// Guarded update and delete succeed with the right old values, together.
	if err := w.Push(ctx, RefUpdate{Name: "refs/heads/feature", Old: head, New: c}, RefUpdate{Name: "refs/heads/main", Old: moved}); err != nil {
		t.Fatal(err)
	}
	refs, _ = w.ListRemote(ctx)
	if refs["refs/heads/feature"] != c || refs["refs/heads/main"] != "" {
		t.Fatalf("refs: %v", refs)
	}
}

func TestValidatePath(t *testing.T) {
	for _, p := range []string{"a", "a/b.yaml", "envs/prod-1/values.yaml", ".github/workflows/x.yml", "a/.gitignore"} {
		if err := ValidatePath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "/etc/passwd", "a/../b", "../a", "./a", "a//b", "a/", ".git/config", "x/.GIT/hooks", "a\\b", "a\x00b", "."} {
		if err := ValidatePath(p); !errors.Is(err, ErrBadPath) {
			t.Errorf("%q accepted (%v)", p, err)
		}
	}
}

func TestApplyChangesRemovesEmptiedDirectories(t *testing.T) {
	s := memory.NewStorage()
	root, _, err := applyChanges(s, plumbing.ZeroHash, []scm.FileChange{
		{Path: "a/b/c.txt", Content: []byte("c")}, {Path: "a/d.txt", Content: []byte("d")}, {Path: "e.txt", Content: []byte("e")},
	})
	if err != nil {
		t.Fatal(err)
	}
	root2, changed, err := applyChanges(s, root, []scm.FileChange{{Path: "a/b/c.txt", Delete: true}, {Path: "a/d.txt", Delete: true}})
	if err != nil || fmt.Sprint(changed) != "[a/b/c.txt a/d.txt]" {
		t.Fatalf("changed %v err %v", changed, err)
	}
	ents, err := treeEntries(s, root2)
	if err != nil || len(ents) != 1 || ents["e.txt"].Name != "e.txt" {
		t.Fatalf("entries after deleting all of a/: %v %v", ents, err)
	}
	var diff []string
	err = diffTrees(s, root, root2, "", &diff)
	sort.Strings(diff)
	if err != nil || fmt.Sprint(diff) != "[a/b/c.txt a/d.txt]" {
		t.Fatalf("diff %v %v", diff, err)
	}
	for _, bad := range [][]scm.FileChange{
		{{Path: "x", Content: []byte("1")}, {Path: "x", Content: []byte("2")}},
		{{Path: "x", Content: []byte("1")}, {Path: "x/y", Content: []byte("2")}},
		{{Path: "e.txt/f", Content: []byte("1")}},
	} {
		if _, _, err := applyChanges(s, root2, bad); !errors.Is(err, ErrBadPath) {
			t.Errorf("%v accepted: %v", bad, err)
		}
	}
}
