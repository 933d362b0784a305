package gitengine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

var seed = map[string]string{
	"envs/dev/config.json":  "{\n  \"image\": \"v1\"\n}\n",
	"envs/prod/config.json": "{\n  \"image\": \"v1\"\n}\n",
	"README.md":             "release repo\n",
	"bin/deploy.sh":         "#!/bin/sh\necho deploy\n",
}

func TestCommitWritesChangesOnExistingBranch(t *testing.T) {
	f := newFixture(t, seed)
	ctx := ctxT(t)
	before := f.head(t, "main")
	res, err := f.engine.Commit(ctx, f.url, CommitRequest{
		Branch: "main", Message: "bump dev", Author: bot,
		Changes: []scm.FileChange{
			{Path: "envs/dev/config.json", Content: []byte("{\n  \"image\": \"v2\"\n}\n")},
			{Path: "envs/stage/config.json", Content: []byte("{}\n")},
			{Path: "README.md", Delete: true},
			{Path: "missing.txt", Delete: true}, // deleting what is not there is a no-op
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Parent != before || res.SHA != f.head(t, "main") || res.Created || res.NoChange || res.Attempts != 1 {
		t.Fatalf("result %+v; head before %s after %s", res, before, f.head(t, "main"))
	}
	wantChanged := []string{"README.md", "envs/dev/config.json", "envs/stage/config.json"}
	if fmt.Sprint(res.Changed) != fmt.Sprint(wantChanged) {
		t.Fatalf("changed = %v, want %v", res.Changed, wantChanged)
	}
	if got := f.read(t, "main", "envs/dev/config.json"); !strings.Contains(got, "v2") {
		t.Fatalf("dev config = %q", got)
	}
	if got := f.read(t, "main", "envs/stage/config.json"); got != "{}\n" {
		t.Fatalf("stage config = %q", got)
	}
	if _, err := f.srv.ReadFile("acme", "deploy", "main", "README.md"); err == nil {
		t.Fatal("README.md still exists")
	}
	c, err := f.srv.GetCommit("acme", "deploy", res.SHA)
	if err != nil {
		t.Fatal(err)
	}
	if c.Author.Name != bot.Name || c.Author.Email != bot.Email || c.Message != "bump dev" ||
		len(c.Parents) != 1 || c.Parents[0] != before {
		t.Fatalf("commit %+v", c)
	}
	f.fsck(t) // the trees we wrote are well-formed (sorted, valid modes)
	f.assertNoScratchLeft(t)
}

func TestCommitKeepsExecutableModeOfRewrittenFile(t *testing.T) {
	f := newFixture(t, seed)
	dir := f.srv.Dir("acme", "deploy")
	// Make bin/deploy.sh executable on main with plumbing, then rewrite it through the engine.
	blob := gitCLI(t, dir, "rev-parse", "main:bin/deploy.sh")
	idx := t.TempDir() + "/index"
	run := func(args ...string) string {
		t.Helper()
		return gitEnv(t, dir, []string{"GIT_INDEX_FILE=" + idx}, args...)
	}
	run("read-tree", "main")
	run("update-index", "--cacheinfo", "100755,"+blob+",bin/deploy.sh")
	newTree := run("write-tree")
	commit := run("-c", "user.name=x", "-c", "user.email=x@y", "commit-tree", newTree, "-p", "main", "-m", "chmod")
	run("update-ref", "refs/heads/main", commit)

	_, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "edit script", Author: bot,
		Changes: []scm.FileChange{{Path: "bin/deploy.sh", Content: []byte("#!/bin/sh\necho v2\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := gitCLI(t, dir, "ls-tree", "main", "bin/deploy.sh"); !strings.HasPrefix(got, "100755 ") {
		t.Fatalf("mode lost: %q", got)
	}
}

func TestCommitCreatesBranchFromBaseWithEdit(t *testing.T) {
	f := newFixture(t, seed)
	base := f.head(t, "main")
	calls := 0
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{
		Branch: "prflow/run-1", Base: "main", Message: "bump prod", Author: bot,
		Edit: func(_ context.Context, tree fs.FS) ([]scm.FileChange, error) {
			calls++
			old, err := fs.ReadFile(tree, "envs/prod/config.json")
			if err != nil {
				return nil, err
			}
			ents, err := fs.ReadDir(tree, "envs")
			if err != nil || len(ents) != 2 || !ents[0].IsDir() {
				return nil, fmt.Errorf("readdir envs: %v %v", ents, err)
			}
			return []scm.FileChange{{Path: "envs/prod/config.json", Content: []byte(strings.ReplaceAll(string(old), "v1", "v9"))}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Parent != base || calls != 1 {
		t.Fatalf("result %+v, edit calls %d", res, calls)
	}
	if got := f.read(t, "prflow/run-1", "envs/prod/config.json"); got != "{\n  \"image\": \"v9\"\n}\n" {
		t.Fatalf("prod = %q", got)
	}
	f.assertMainAtAndClean(t, base)
}

func TestCommitWithoutChangesPushesNothing(t *testing.T) {
	f := newFixture(t, seed)
	head := f.head(t, "main")
	f.srv.ResetCalls()
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "noop", Author: bot,
		Changes: []scm.FileChange{{Path: "README.md", Content: []byte(seed["README.md"])}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.NoChange || res.SHA != head || len(res.Changed) != 0 {
		t.Fatalf("result %+v", res)
	}
	for _, c := range f.srv.Calls() {
		if strings.Contains(c.Path, "receive-pack") {
			t.Fatalf("pushed although nothing changed: %+v", c)
		}
	}
	// AllowEmpty makes the commit anyway.
	res, err = f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "empty", Author: bot, AllowEmpty: true})
	if err != nil || res.NoChange || res.SHA == head || f.head(t, "main") != res.SHA {
		t.Fatalf("allow empty: %+v %v", res, err)
	}
}

func TestCommitStaleParentIsConflictAndWritesNothing(t *testing.T) {
	f := newFixture(t, seed)
	old := f.head(t, "main")
	moved, err := f.srv.Commit("acme", "deploy", "main", map[string]string{"other.txt": "x"}, nil, "someone else")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Parent: old, Message: "m", Author: bot,
		Changes: []scm.FileChange{{Path: "README.md", Content: []byte("mine\n")}}})
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if f.head(t, "main") != moved || f.read(t, "main", "README.md") != seed["README.md"] {
		t.Fatal("branch changed")
	}
	f.assertNoScratchLeft(t)
}

func TestCommitParentPinsHeadAndCreatesBranch(t *testing.T) {
	f := newFixture(t, seed)
	head := f.head(t, "main")
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "feature", Parent: head, Message: "m", Author: bot,
		Changes: []scm.FileChange{{Path: "a.txt", Content: []byte("a")}}})
	if err != nil || !res.Created || res.Parent != head {
		t.Fatalf("%+v %v", res, err)
	}
	// A parent that is not on any branch cannot be found.
	_, err = f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "other", Parent: strings.Repeat("ab", 20), Message: "m", Author: bot,
		Changes: []scm.FileChange{{Path: "a.txt", Content: []byte("a")}}})
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("unknown parent: %v", err)
	}
}

// TestCommitRetriesLostRaceByReapplyingEdits moves the branch while the first attempt is being
// prepared; the push is rejected and the edit runs again on the new head, keeping both changes.
func TestCommitRetriesLostRaceByReapplyingEdits(t *testing.T) {
	f := newFixture(t, seed)
	calls := 0
	var raced string
	res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "append", Author: bot,
		Edit: func(_ context.Context, tree fs.FS) ([]scm.FileChange, error) {
			calls++
			if calls == 1 {
				// Another worker lands three commits meanwhile: the in-place re-fetch must
				// bridge more than one commit past the shallow boundary.
				for i := range 3 {
					content := map[string]string{"other.txt": fmt.Sprint(i)}
					if i == 2 {
						content = map[string]string{"README.md": "changed by another worker\n"}
					}
					sha, err := f.srv.Commit("acme", "deploy", "main", content, nil, "race")
					if err != nil {
						return nil, err
					}
					raced = sha
				}
			}
			old, err := fs.ReadFile(tree, "README.md")
			if err != nil {
				return nil, err
			}
			return []scm.FileChange{{Path: "README.md", Content: append(old, "appended\n"...)}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || res.Attempts != 2 || res.Parent != raced {
		t.Fatalf("calls %d, result %+v, raced %s", calls, res, raced)
	}
	if got := f.read(t, "main", "README.md"); got != "changed by another worker\nappended\n" {
		t.Fatalf("README = %q", got)
	}
	f.assertNoScratchLeft(t)
}

func TestCommitGivesUpAfterMaxAttempts(t *testing.T) {
	f := newFixture(t, seed)
	f.engine = New(WithBasicAuth("u", scmtest.DefaultToken), WithTempDir(f.tmp), WithRetry(3, 1, 2))
	n := 0
	_, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "m", Author: bot,
		Edit: func(context.Context, fs.FS) ([]scm.FileChange, error) {
			n++
			if _, err := f.srv.Commit("acme", "deploy", "main", map[string]string{"x": fmt.Sprint(n)}, nil, "race"); err != nil {
				return nil, err
			}
			return []scm.FileChange{{Path: "y", Content: []byte("y")}}, nil
		}})
	if !errors.Is(err, ErrPushRejected) || !errors.Is(err, scm.ErrConflict) || n != 3 {
		t.Fatalf("err = %v after %d edits", err, n)
	}
	f.assertNoScratchLeft(t)
}

func TestCommitStopsRetryingWhenContextEnds(t *testing.T) {
	f := newFixture(t, seed)
	ctx, cancel := context.WithCancel(ctxT(t))
	// The engine logs before it sleeps between attempts; cancel right then. The backoff is
	// hours long, so only a context-aware wait lets the test finish.
	logger := slog.New(&hookHandler{onMessage: func(msg string) {
		if strings.Contains(msg, "retrying") {
			cancel()
		}
	}})
	f.engine = New(WithBasicAuth("u", scmtest.DefaultToken), WithTempDir(f.tmp), WithRetry(100, time.Hour, time.Hour), WithLogger(logger))
	_, err := f.engine.Commit(ctx, f.url, CommitRequest{Branch: "main", Message: "m", Author: bot,
		Edit: func(context.Context, fs.FS) ([]scm.FileChange, error) {
			if _, err := f.srv.Commit("acme", "deploy", "main", map[string]string{"x": "1"}, nil, "race"); err != nil {
				return nil, err
			}
			return []scm.FileChange{{Path: "y", Content: []byte("y")}}, nil
		}})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrPushRejected) {
		t.Fatalf("err = %v", err)
	}
	f.assertNoScratchLeft(t)
}

// hookHandler is a slog handler that reports every message (tests hook into log points).
type hookHandler struct{ onMessage func(string) }

func (h *hookHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *hookHandler) Handle(_ context.Context, r slog.Record) error {
	h.onMessage(r.Message)
	return nil
}
func (h *hookHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *hookHandler) WithGroup(string) slog.Handler      { return h }

// TestConcurrentCommitsAllLand runs writers that race on one branch; every edit must land once.
func TestConcurrentCommitsAllLand(t *testing.T) {
	f := newFixture(t, seed)
	const writers = 6
	var wg sync.WaitGroup
	var retried atomic.Int32
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			res, err := f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: fmt.Sprintf("writer %d", i), Author: bot,
				Edit: func(_ context.Context, tree fs.FS) ([]scm.FileChange, error) {
					old, err := fs.ReadFile(tree, "README.md")
					if err != nil {
						return nil, err
					}
					return []scm.FileChange{{Path: "README.md", Content: append(old, fmt.Sprintf("writer %d\n", i)...)}}, nil
				}})
			if res.Attempts > 1 {
				retried.Add(1)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := f.read(t, "main", "README.md")
	for i := range writers {
		if strings.Count(got, fmt.Sprintf("writer %d\n", i)) != 1 {
			t.Fatalf("writer %d missing or doubled in %q", i, got)
		}
	}
	log, err := f.srv.Log("acme", "deploy", "main")
	if err != nil || len(log) != writers+1 {
		t.Fatalf("history has %d commits (%v), want %d", len(log), err, writers+1)
	}
	f.fsck(t)
	f.assertNoScratchLeft(t)
}

func TestCommitErrors(t *testing.T) {
	f := newFixture(t, seed)
	ctx := ctxT(t)
	okReq := CommitRequest{Branch: "main", Message: "m", Author: bot, Changes: []scm.FileChange{{Path: "a", Content: []byte("a")}}}
	tests := []struct {
		name   string
		engine *Engine
		url    string
		req    func(CommitRequest) CommitRequest
		is     error
		substr string
	}{
		{name: "bad token", engine: New(WithBasicAuth("u", "wrong-secret-token"), WithTempDir(f.tmp)), url: f.url,
			req: func(r CommitRequest) CommitRequest { return r }, is: scm.ErrUnauthorized},
		{name: "missing repo", engine: f.engine, url: f.srv.CloneURL("acme", "nope"),
			req: func(r CommitRequest) CommitRequest { return r }, is: scm.ErrNotFound},
		{name: "missing branch without base", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest { r.Branch = "nope"; return r }, is: scm.ErrNotFound, substr: "nope"},
		{name: "missing base", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest { r.Branch, r.Base = "new", "gone"; return r }, is: scm.ErrNotFound, substr: "gone"},
		{name: "escaping path", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest {
				r.Changes = []scm.FileChange{{Path: "../etc/passwd", Content: []byte("x")}}
				return r
			}, is: ErrBadPath, substr: "../etc/passwd"},
		{name: "dot git path", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest {
				r.Changes = []scm.FileChange{{Path: "a/.git/config", Content: []byte("x")}}
				return r
			}, is: ErrBadPath},
		{name: "file over directory", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest {
				r.Changes = []scm.FileChange{{Path: "envs", Content: []byte("x")}}
				return r
			}, is: ErrBadPath, substr: "is a directory"},
		{name: "bad branch name", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest { r.Branch = "a..b"; return r }, substr: "invalid branch name"},
		{name: "edit fails", engine: f.engine, url: f.url,
			req: func(r CommitRequest) CommitRequest {
				r.Edit = func(context.Context, fs.FS) ([]scm.FileChange, error) { return nil, fs.ErrPermission }
				return r
			}, is: fs.ErrPermission},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.head(t, "main")
			_, err := tc.engine.Commit(ctx, tc.url, tc.req(okReq))
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("err %q does not mention %q", err, tc.substr)
			}
			if strings.Contains(err.Error(), "wrong-secret-token") || strings.Contains(err.Error(), scmtest.DefaultToken) {
				t.Fatalf("token leaked: %v", err)
			}
			f.assertMainAtAndClean(t, before)
		})
	}
}

func TestScratchDirRemovedWhenEditPanics(t *testing.T) {
	f := newFixture(t, seed)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		_, _ = f.engine.Commit(ctxT(t), f.url, CommitRequest{Branch: "main", Message: "m", Author: bot,
			Edit: func(context.Context, fs.FS) ([]scm.FileChange, error) { panic("edit bug") }})
	}()
	f.assertNoScratchLeft(t)
}

func TestCommitToLocalPathRemote(t *testing.T) {
	f := newFixture(t, seed)
	res, err := f.engine.Commit(ctxT(t), f.srv.Dir("acme", "deploy"), CommitRequest{Branch: "main", Message: "local", Author: bot,
		Changes: []scm.FileChange{{Path: "README.md", Content: []byte("via file path\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	if f.head(t, "main") != res.SHA || f.read(t, "main", "README.md") != "via file path\n" {
		t.Fatal("not written")
	}
	f.assertNoScratchLeft(t)
}

func TestCommitFirstCommitOfEmptyRepository(t *testing.T) {
	f := newFixture(t, seed)
	dir := t.TempDir() + "/empty.git"
	gitCLI(t, t.TempDir(), "init", "--bare", "-q", dir)
	res, err := f.engine.Commit(ctxT(t), dir, CommitRequest{Branch: "main", Message: "first", Author: bot,
		Changes: []scm.FileChange{{Path: "a/b.txt", Content: []byte("b")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := gitCLI(t, dir, "show", "main:a/b.txt"); got != "b" || res.Parent != "" || !res.Created {
		t.Fatalf("got %q, %+v", got, res)
	}
}

// TestCommitReplaceMovesBranchOffItsHistory rebuilds a feature branch on a main that moved: the
// branch ends at a commit whose only parent is the new main head (no fast-forward), and only
// while it still is at the commit to replace.
func TestCommitReplaceMovesBranchOffItsHistory(t *testing.T) {
	f := newFixture(t, seed)
	ctx := ctxT(t)
	base := f.head(t, "main")
	first, err := f.engine.Commit(ctx, f.url, CommitRequest{Branch: "feature", Parent: base, Message: "mine", Author: bot,
		Changes: []scm.FileChange{{Path: "envs/dev/config.json", Content: []byte("{\n  \"image\": \"v2\"\n}\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := f.srv.Commit("acme", "deploy", "main", map[string]string{"other.txt": "x"}, nil, "someone else")
	if err != nil {
		t.Fatal(err)
	}
	req := CommitRequest{Branch: "feature", Parent: moved, Replace: first.SHA, Message: "mine, rebuilt", Author: bot,
		Changes: []scm.FileChange{{Path: "envs/dev/config.json", Content: []byte("{\n  \"image\": \"v3\"\n}\n")}}}
	res, err := f.engine.Commit(ctx, f.url, req)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.srv.GetCommit("acme", "deploy", res.SHA)
	if err != nil {
		t.Fatal(err)
	}
	if f.head(t, "feature") != res.SHA || len(c.Parents) != 1 || c.Parents[0] != moved {
		t.Fatalf("feature at %s (want %s) with parents %v (want [%s])", f.head(t, "feature"), res.SHA, c.Parents, moved)
	}
	if f.read(t, "feature", "other.txt") != "x" || !strings.Contains(f.read(t, "feature", "envs/dev/config.json"), "v3") {
		t.Fatal("rebuilt branch lacks the new base or the edit")
	}
	// The same request again: the branch is no longer at first.SHA, so nothing is replaced.
	req.Changes[0].Content = []byte("{\n  \"image\": \"v4\"\n}\n")
	if _, err := f.engine.Commit(ctx, f.url, req); !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("replace of a moved branch: %v, want ErrConflict", err)
	}
	if f.head(t, "feature") != res.SHA {
		t.Fatal("a stale replace moved the branch")
	}
	if _, err := f.engine.Commit(ctx, f.url, CommitRequest{Branch: "feature", Replace: res.SHA, Message: "m", Author: bot,
		Changes: req.Changes}); err == nil || !strings.Contains(err.Error(), "replace needs the parent") {
		t.Fatalf("replace without parent: %v", err)
	}
}
