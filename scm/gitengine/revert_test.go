package gitengine

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
)

func (f *fixture) commit(t *testing.T, branch string, changes ...scm.FileChange) string {
	t.Helper()
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: branch, Base: "main", Message: "change " + branch, Author: bot, Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	return res.SHA
}

func (f *fixture) tree(t *testing.T, ref string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range strings.Fields(gitCLI(t, f.srv.Dir(f.owner, f.name), "ls-tree", "-r", "--name-only", ref)) {
		out[p] = f.read(t, ref, p)
	}
	return out
}

func TestRevertPlainCommitRestoresFiles(t *testing.T) {
	f := newFixture(t, seed)
	before := f.tree(t, "main")
	c := f.commit(t, "main",
		scm.FileChange{Path: "envs/dev/config.json", Content: []byte("{\n  \"image\": \"v2\"\n}\n")},
		scm.FileChange{Path: "envs/new/config.json", Content: []byte("{}\n")},
		scm.FileChange{Path: "README.md", Delete: true})
	// An unrelated later change must survive the revert.
	f.commit(t, "main", scm.FileChange{Path: "envs/prod/config.json", Content: []byte("prod v5\n")})

	res, err := f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: c, Base: "main", Branch: "revert-1", Author: bot})
	if err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(before)
	want["envs/prod/config.json"] = "prod v5\n"
	if got := f.tree(t, "revert-1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after revert:\n%v\nwant\n%v", got, want)
	}
	if fmt.Sprint(res.Changed) != "[README.md envs/dev/config.json envs/new/config.json]" || !res.Created {
		t.Fatalf("result %+v", res)
	}
	rc, err := f.srv.GetCommit("acme", "deploy", res.SHA)
	if err != nil || !strings.Contains(rc.Message, "This reverts commit "+c+".") || !strings.HasPrefix(rc.Message, `Revert "change main"`) {
		t.Fatalf("message %q (%v)", rc.Message, err)
	}

	// A redelivered request finds its own branch instead of failing or committing twice.
	again, err := f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: c, Base: "main", Branch: "revert-1", Author: bot})
	if err != nil || again.SHA != res.SHA || f.head(t, "revert-1") != res.SHA {
		t.Fatalf("second revert: %+v %v", again, err)
	}
	// A branch with that name holding something else is a conflict.
	f.commit(t, "unrelated", scm.FileChange{Path: "x", Content: []byte("x")})
	_, err = f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: c, Base: "main", Branch: "unrelated", Author: bot})
	if !errors.Is(err, scm.ErrConflict) || !strings.Contains(err.Error(), "unrelated") {
		t.Fatalf("existing branch: %v", err)
	}
	f.fsck(t)
	f.assertNoScratchLeft(t)
}

func TestRevertMergeCommitAgainstMainline(t *testing.T) {
	f := newFixture(t, seed)
	before := f.tree(t, "main")
	f.commit(t, "feature",
		scm.FileChange{Path: "envs/prod/config.json", Content: []byte("{\n  \"image\": \"v7\"\n}\n")},
		scm.FileChange{Path: "added.txt", Content: []byte("added\n")})
	// main moves on independently, then the feature is merged with a real merge commit.
	f.commit(t, "main", scm.FileChange{Path: "envs/dev/config.json", Content: []byte("dev moved\n")})
	merge := f.mergeBranch(t, "feature", "main")

	res, err := f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: merge, Mainline: 1, Base: "main", Author: bot})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created || f.head(t, "main") != res.SHA {
		t.Fatalf("revert onto base: %+v", res)
	}
	want := maps.Clone(before)
	want["envs/dev/config.json"] = "dev moved\n"
	if got := f.tree(t, "main"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after revert:\n%v\nwant\n%v", got, want)
	}
	// Reverting it again finds nothing left to undo.
	_, err = f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: merge, Base: "main", Branch: "again", Author: bot})
	if !errors.Is(err, scm.ErrConflict) || !strings.Contains(err.Error(), "already") {
		t.Fatalf("second revert: %v", err)
	}
	_, err = f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: merge, Mainline: 3, Base: "main", Branch: "m3", Author: bot})
	if err == nil || !strings.Contains(err.Error(), "mainline 3") {
		t.Fatalf("bad mainline: %v", err)
	}
}

// mergeBranch merges head into base with a merge commit made by the workspace and returns it.
func (f *fixture) mergeBranch(t *testing.T, head, base string) string {
	t.Helper()
	ctx := ctxT(t)
	w, err := f.engine.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	refs := []string{"refs/heads/" + base, "refs/heads/" + head}
	var mb string
	if err := w.FetchHistory(ctx, refs, func() (bool, error) {
		b, _ := w.Ref(refs[0])
		h, _ := w.Ref(refs[1])
		mb, err = w.MergeBase(b, h)
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	b, _ := w.Ref(refs[0])
	h, _ := w.Ref(refs[1])
	tree, conflicts, err := w.MergeCommits(mb, b, h)
	if err != nil || len(conflicts) > 0 {
		t.Fatalf("merge: %v %v", conflicts, err)
	}
	sha, err := w.WriteCommit(CommitSpec{Tree: tree, Parents: []string{b, h}, Message: "Merge " + head, Author: bot})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push(ctx, RefUpdate{Name: refs[0], Old: b, New: sha}); err != nil {
		t.Fatal(err)
	}
	return sha
}

func TestRevertConflictListsFilesAndPushesNothing(t *testing.T) {
	f := newFixture(t, seed)
	c := f.commit(t, "main",
		scm.FileChange{Path: "envs/prod/config.json", Content: []byte("v2\n")},
		scm.FileChange{Path: "envs/dev/config.json", Content: []byte("v2\n")})
	f.commit(t, "main", scm.FileChange{Path: "envs/prod/config.json", Content: []byte("v3\n")})
	head := f.head(t, "main")
	_, err := f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: c, Base: "main", Branch: "revert-c", Author: bot})
	var ce *scm.ConflictError
	if !errors.As(err, &ce) || fmt.Sprint(ce.Files) != "[envs/prod/config.json]" || !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("err = %v", err)
	}
	if b, _ := f.srv.Branches("acme", "deploy"); b["revert-c"] != "" || b["main"] != head {
		t.Fatalf("branches changed: %v", b)
	}
	f.assertNoScratchLeft(t)
}

func TestRevertFetchesDeeperHistory(t *testing.T) {
	saved := historyDepths
	historyDepths = []int{2, 4, 0}
	t.Cleanup(func() { historyDepths = saved })
	f := newFixture(t, seed)
	c := f.commit(t, "main", scm.FileChange{Path: "README.md", Content: []byte("old change\n")})
	for i := range 6 {
		if _, err := f.srv.Commit("acme", "deploy", "main", map[string]string{"log.txt": fmt.Sprint(i)}, nil, "filler"); err != nil {
			t.Fatal(err)
		}
	}
	res, err := f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: c, Base: "main", Branch: "r", Author: bot})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "r", "README.md"); got != seed["README.md"] || res.SHA != f.head(t, "r") {
		t.Fatalf("README = %q", got)
	}
	// A commit that is on no branch's history cannot be reverted.
	_, err = f.engine.Revert(ctxT(t), f.url, RevertRequest{Commit: strings.Repeat("1", 40), Base: "main", Branch: "r2", Author: bot})
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("unknown commit: %v", err)
	}
	f.assertNoScratchLeft(t)
}
