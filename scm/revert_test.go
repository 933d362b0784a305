package scm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// tree is a commit's files; a missing key is a missing file.
type trees map[string]map[string]string

func (t trees) read(_ context.Context, commit, path string) ([]byte, bool, error) {
	files, ok := t[commit]
	if !ok {
		return nil, false, fmt.Errorf("unknown commit %s", commit)
	}
	v, ok := files[path]
	if !ok {
		return nil, false, nil
	}
	return []byte(v), true, nil
}

func TestPlanRevert(t *testing.T) {
	parent := map[string]string{"a": "a0", "b": "b0", "gone": "g0"}
	commit := map[string]string{"a": "a1", "b": "b0", "new": "n1"} // changed a, added new, deleted gone
	tests := []struct {
		name      string
		head      map[string]string
		want      string
		conflicts []string
	}{
		{name: "head still has the commit's versions", head: map[string]string{"a": "a1", "b": "b0", "new": "n1", "other": "x"},
			want: "[{a [97 48] false} {gone [103 48] false} {new [] true}]"},
		{name: "a file already back to the parent's version", head: map[string]string{"a": "a0", "b": "b0", "new": "n1"},
			want: "[{gone [103 48] false} {new [] true}]"},
		{name: "files changed again conflict", head: map[string]string{"a": "a2", "b": "b0", "gone": "g9"},
			conflicts: []string{"a", "gone"}}, // "new" is absent as in the parent: nothing to undo
		{name: "everything already reverted", head: map[string]string{"a": "a0", "b": "b0", "gone": "g0"}, want: "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := trees{"C": commit, "P": parent, "H": tc.head}
			got, err := PlanRevert(context.Background(), src.read, "C", "P", "H", []string{"new", "a", "gone", "a"})
			if tc.conflicts != nil {
				var ce *ConflictError
				if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || fmt.Sprint(ce.Files) != fmt.Sprint(tc.conflicts) || got != nil {
					t.Fatalf("got %v, %v; want conflicts %v", got, err, tc.conflicts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprint(got); s != tc.want && !(tc.want == "[]" && len(got) == 0) {
				t.Fatalf("plan = %s, want %s", s, tc.want)
			}
		})
	}
	if _, err := PlanRevert(context.Background(), trees{}.read, "C", "P", "H", []string{"a"}); err == nil {
		t.Fatal("read errors must be returned")
	}
}

func TestNotMergeableError(t *testing.T) {
	err := fmt.Errorf("merge PR #3: %w", &NotMergeableError{Files: []string{"envs/prod.yaml"}, Msg: "conflicts"})
	if !errors.Is(err, ErrNotMergeable) || errors.Is(err, ErrConflict) {
		t.Fatalf("Is: %v", err)
	}
	if got := err.Error(); got != "merge PR #3: not mergeable: conflicts in [envs/prod.yaml]: conflicts" {
		t.Fatalf("message %q", got)
	}
}

// branches is an in-memory BranchCommitter over trees: Commit applies the changes to the
// parent's files as a new commit, and the branch must not have moved.
type branches struct {
	mu      sync.Mutex
	files   trees
	heads   map[string]string
	commits []CommitInput
}

func (b *branches) Branch(_ context.Context, _ Repo, name string) (Ref, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sha, ok := b.heads[name]
	if !ok {
		return Ref{}, fmt.Errorf("branch %s: %w", name, ErrNotFound)
	}
	return Ref{Name: name, SHA: sha}, nil
}

func (b *branches) Commit(_ context.Context, _ Repo, in CommitInput) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.heads[in.Branch]; ok && cur != in.Parent {
		return "", &ConflictError{Msg: "branch moved"}
	}
	sha := fmt.Sprintf("R%d", len(b.commits)+1)
	files := map[string]string{}
	for k, v := range b.files[in.Parent] {
		files[k] = v
	}
	for _, c := range in.Changes {
		if c.Delete {
			delete(files, c.Path)
		} else {
			files[c.Path] = string(c.Content)
		}
	}
	b.files[sha] = files
	b.heads[in.Branch] = sha
	b.commits = append(b.commits, in)
	return sha, nil
}

func TestRevertFiles(t *testing.T) {
	ctx := context.Background()
	newRepo := func() *branches {
		return &branches{
			files: trees{
				"P": {"a": "1"},
				"C": {"a": "2", "new": "x"},
				"H": {"a": "2", "new": "x", "other": "y"},
			},
			heads: map[string]string{"main": "H"},
		}
	}
	rv := FileRevert{Commit: "C", Parent: "P", Message: "Bump a\n\nbody", Paths: []string{"a", "new"}}
	in := RevertInput{SHA: "C", Base: "main", Branch: "revert-C"}
	named := func(err error) error { return fmt.Errorf("fake: revert: %w", err) }

	b := newRepo()
	sha, err := RevertFiles(ctx, b, "o/r", b.files.read, in, rv, named)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.files[sha]; len(got) != 2 || got["a"] != "1" || got["other"] != "y" {
		t.Errorf("reverted tree = %v", got)
	}
	if msg := b.commits[0].Message; msg != "Revert \"Bump a\"\n\nThis reverts commit C." {
		t.Errorf("message = %q", msg)
	}

	// A redelivered job finds its branch already undoing the commit: the same head, no commit.
	again, err := RevertFiles(ctx, b, "o/r", b.files.read, in, rv, named)
	if err != nil || again != sha || len(b.commits) != 1 {
		t.Errorf("redelivery = %s, %v with %d commits", again, err, len(b.commits))
	}

	// The branch exists elsewhere: a conflict, named by the driver.
	b = newRepo()
	b.heads["revert-C"] = "H"
	_, err = RevertFiles(ctx, b, "o/r", b.files.read, in, rv, named)
	if !errors.Is(err, ErrConflict) || !strings.HasPrefix(err.Error(), "fake: revert: ") || !strings.Contains(err.Error(), "already exists at H") {
		t.Errorf("branch elsewhere: %v", err)
	}

	// The base already has the parent's files: nothing to revert is a conflict, no commit.
	b = newRepo()
	b.heads["main"] = "P"
	_, err = RevertFiles(ctx, b, "o/r", b.files.read, in, rv, named)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already reverted") || len(b.commits) != 0 {
		t.Errorf("already reverted: %v", err)
	}

	// A file changed again since: the planner's conflict lists it.
	b = newRepo()
	b.files["H"]["a"] = "3"
	_, err = RevertFiles(ctx, b, "o/r", b.files.read, in, rv, named)
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Files) != 1 || ce.Files[0] != "a" || len(b.commits) != 0 {
		t.Errorf("changed again: %v", err)
	}

	// A missing base is the branch read's own error, passed as it is.
	b = newRepo()
	_, err = RevertFiles(ctx, b, "o/r", b.files.read, RevertInput{SHA: "C", Base: "nope", Branch: "r"}, rv, named)
	if !errors.Is(err, ErrNotFound) || strings.HasPrefix(err.Error(), "fake:") {
		t.Errorf("missing base: %v", err)
	}

	// An explicit message is kept.
	b = newRepo()
	withMsg := in
	withMsg.Message = "undo the bump"
	if _, err := RevertFiles(ctx, b, "o/r", b.files.read, withMsg, rv, named); err != nil || b.commits[0].Message != "undo the bump" {
		t.Errorf("explicit message: %v, %+v", err, b.commits)
	}
}
