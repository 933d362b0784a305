package gitengine

import (
	"errors"
	"testing"

	"github.com/prflow/prflow/scm"
)

// Issue 14: a commit listed as a branch head must still be fetched when the branch moves
// between the listing and the fetch. The served repo answers wants by SHA (the scmtest
// default, like GitHub) or only by ref name (plain git without uploadpack.allow*SHA1InWant);
// both must work.
func TestFetchCommitAfterTheRefMoved(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shaWants bool
	}{
		{"server allows SHA wants", true},
		{"server allows only ref wants", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a.txt": "1\n"})
			if !tc.shaWants {
				gitCLI(t, f.srv.Dir(f.owner, f.name), "config", "--unset", "uploadpack.allowReachableSHA1InWant")
			}
			ctx := ctxT(t)
			w, err := f.engine.Open(ctx, f.url)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			refs, err := w.ListRemote(ctx)
			if err != nil {
				t.Fatal(err)
			}
			listed := refs["refs/heads/main"]
			// main moves on (two commits, so the listed head is not the new tip's parent only
			// by chance of depth) after the listing and before the fetch.
			for _, v := range []string{"2\n", "3\n"} {
				if _, err := f.srv.Commit(f.owner, f.name, "main", map[string]string{"a.txt": v}, nil, "move"); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.FetchCommit(ctx, refs, listed); err != nil {
				t.Fatalf("FetchCommit(%s) after main moved: %v", short(listed), err)
			}
			// With SHA wants the commit came alone, by SHA; without, from main's history.
			if got, _ := w.Ref("refs/prflow/fetched/" + listed); (got == listed) != tc.shaWants {
				t.Errorf("fetched by SHA: %v, want %v", got == listed, tc.shaWants)
			}
			b, err := w.ReadFile(listed, "a.txt")
			if err != nil || string(b) != "1\n" {
				t.Fatalf("a.txt at the listed head: %q, %v", b, err)
			}
		})
	}
}

// A SHA that is on no branch (never pushed, or gone) is still ErrNotFound, after looking.
func TestFetchCommitUnknownSHA(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "1\n"})
	ctx := ctxT(t)
	w, err := f.engine.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.FetchCommit(ctx, nil, "0123456789abcdef0123456789abcdef01234567")
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}
