package scmtest

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

// gitCLI runs the git binary isolated from the user's configuration.
func gitCLI(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Tester", "-c", "user.email=tester@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitCLI(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// authURL puts basic-auth credentials into a clone URL.
func authURL(t *testing.T, raw, user, token string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, token)
	return u.String()
}

func TestGitServerCloneAndPushWithGitCLI(t *testing.T) {
	gs := NewGitServer(t)
	head, err := gs.CreateRepo("acme", "release", map[string]string{"apps/web/values.yaml": "image: v1\n", "README.md": "hi\n"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var updates []RefUpdate
	gs.OnRefUpdate(func(u RefUpdate) { mu.Lock(); updates = append(updates, u); mu.Unlock() })

	dir := t.TempDir()
	mustGit(t, dir, "clone", "--quiet", authURL(t, gs.CloneURL("acme", "release"), "x-access-token", DefaultToken), "w")
	w := filepath.Join(dir, "w")
	if got := mustGit(t, w, "rev-parse", "HEAD"); got != head {
		t.Fatalf("cloned HEAD = %s, want %s", got, head)
	}
	data, err := os.ReadFile(filepath.Join(w, "apps/web/values.yaml"))
	if err != nil || string(data) != "image: v1\n" {
		t.Fatalf("cloned file = %q, %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(w, "apps/web/values.yaml"), []byte("image: v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustGit(t, w, "commit", "-qam", "bump web to v2")
	pushed := mustGit(t, w, "rev-parse", "HEAD")
	mustGit(t, w, "push", "--quiet", "origin", "main", "main:refs/heads/feature/x")

	got, err := gs.ReadFile("acme", "release", "main", "apps/web/values.yaml")
	if err != nil || string(got) != "image: v2\n" {
		t.Fatalf("server file after push = %q, %v", got, err)
	}
	log, err := gs.Log("acme", "release", "main")
	if err != nil || len(log) != 2 || log[0].SHA != pushed || log[0].Parents[0] != head || log[0].Title() != "bump web to v2" {
		t.Fatalf("server log after push = %+v, %v", log, err)
	}
	branches, err := gs.Branches("acme", "release")
	if err != nil || branches["main"] != pushed || branches["feature/x"] != pushed || len(branches) != 2 {
		t.Fatalf("branches = %v, %v", branches, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(updates) != 2 {
		t.Fatalf("ref updates = %+v, want 2 (main and feature/x)", updates)
	}
	for _, u := range updates {
		if !u.Push || u.User != DefaultUser || u.After != pushed {
			t.Errorf("ref update %+v: want push by %s to %s", u, DefaultUser, pushed)
		}
	}
	if updates[0].Ref != "refs/heads/feature/x" || updates[0].Before != "" || updates[1].Ref != "refs/heads/main" || updates[1].Before != head {
		t.Errorf("ref updates = %+v", updates)
	}
}

func TestGitServerAuth(t *testing.T) {
	gs := NewGitServer(t, WithToken("full", "alice"), WithToken("scoped", "bob", "acme/visible"))
	for _, n := range []string{"visible", "hidden"} {
		if _, err := gs.CreateRepo("acme", n, map[string]string{"a": "1"}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, user, pass, repo string
		want                   int
	}{
		{"no credentials", "", "", "visible", http.StatusUnauthorized},
		{"wrong token", "x", "nope", "visible", http.StatusUnauthorized},
		{"default token disabled by WithToken", "x", DefaultToken, "visible", http.StatusUnauthorized},
		{"full token", "x", "full", "hidden", http.StatusOK},
		{"scoped token on its repo", "oauth2", "scoped", "visible", http.StatusOK},
		{"scoped token elsewhere", "oauth2", "scoped", "hidden", http.StatusNotFound},
		{"unknown repo", "x", "full", "missing", http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", gs.CloneURL("acme", tc.repo)+"/info/refs?service=git-upload-pack", nil)
			if tc.pass != "" {
				req.SetBasicAuth(tc.user, tc.pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
				t.Errorf("401 without Basic WWW-Authenticate: %q", resp.Header.Get("WWW-Authenticate"))
			}
			if tc.want == http.StatusOK && resp.Header.Get("Content-Type") != "application/x-git-upload-pack-advertisement" {
				t.Errorf("content type = %q", resp.Header.Get("Content-Type"))
			}
		})
	}
	// The git CLI must fail to clone without credentials.
	if out, err := gitCLI(t, t.TempDir(), "clone", "--quiet", gs.CloneURL("acme", "visible"), "w"); err == nil {
		t.Fatalf("unauthenticated clone succeeded: %s", out)
	}
}

func TestGitServerGoGitShallowCloneAndPush(t *testing.T) {
	gs := NewGitServer(t)
	var head string
	var err error
	if head, err = gs.CreateRepo("acme", "release", map[string]string{"env/prod.yaml": "replicas: 1\n"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if head, err = gs.Commit("acme", "release", "main", map[string]string{"n.txt": strings.Repeat("x", i)}, nil, "history"); err != nil {
			t.Fatal(err)
		}
	}
	auth := &githttp.BasicAuth{Username: "x-access-token", Password: DefaultToken}
	fs := memfs.New()
	repo, err := git.Clone(memory.NewStorage(), fs, &git.CloneOptions{
		URL: gs.CloneURL("acme", "release"), Auth: auth, Depth: 1, SingleBranch: true,
		ReferenceName: plumbing.NewBranchReferenceName("main"), Tags: git.NoTags,
	})
	if err != nil {
		t.Fatalf("shallow clone: %v", err)
	}
	ref, err := repo.Head()
	if err != nil || ref.Hash().String() != head {
		t.Fatalf("head = %v, %v; want %s", ref, err, head)
	}
	wt, _ := repo.Worktree()
	if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName("prflow/bump"), Create: true}); err != nil {
		t.Fatal(err)
	}
	f, _ := fs.Create("env/prod.yaml")
	_, _ = f.Write([]byte("replicas: 3\n"))
	f.Close()
	if _, err := wt.Add("env/prod.yaml"); err != nil {
		t.Fatal(err)
	}
	c, err := wt.Commit("scale prod", &git.CommitOptions{Author: &object.Signature{Name: "bot", Email: "bot@example.com", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	err = repo.Push(&git.PushOptions{Auth: auth, RefSpecs: []config.RefSpec{"refs/heads/prflow/bump:refs/heads/prflow/bump"}})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	got, err := gs.ReadFile("acme", "release", "prflow/bump", "env/prod.yaml")
	if err != nil || string(got) != "replicas: 3\n" {
		t.Fatalf("pushed file = %q, %v", got, err)
	}
	pc, err := gs.GetCommit("acme", "release", "prflow/bump")
	if err != nil || pc.SHA != c.String() || pc.Parents[0] != head || pc.Author.Name != "bot" {
		t.Fatalf("pushed commit = %+v, %v", pc, err)
	}
	// A push with a stale parent is rejected by the server, not silently applied.
	if _, err := gs.Commit("acme", "release", "prflow/bump", map[string]string{"other": "1"}, nil, "moves the branch"); err != nil {
		t.Fatal(err)
	}
	f, _ = fs.Create("env/prod.yaml")
	_, _ = f.Write([]byte("replicas: 4\n"))
	f.Close()
	_, _ = wt.Add("env/prod.yaml")
	if _, err := wt.Commit("scale again", &git.CommitOptions{Author: &object.Signature{Name: "bot", Email: "bot@example.com", When: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if err := repo.Push(&git.PushOptions{Auth: auth, RefSpecs: []config.RefSpec{"refs/heads/prflow/bump:refs/heads/prflow/bump"}}); err == nil {
		t.Fatal("non-fast-forward push succeeded")
	}
	if got, _ := gs.ReadFile("acme", "release", "prflow/bump", "env/prod.yaml"); string(got) != "replicas: 3\n" {
		t.Fatalf("rejected push changed the file: %q", got)
	}
}

func TestGitServerCommitHelperIsGuarded(t *testing.T) {
	gs := NewGitServer(t)
	if _, err := gs.CreateRepo("acme", "r", map[string]string{"keep": "k", "old": "o"}); err != nil {
		t.Fatal(err)
	}
	sha, err := gs.Commit("acme", "r", "topic", map[string]string{"a/b/c.txt": "c", "keep": "k2"}, []string{"old"}, "multi")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"a/b/c.txt": "c", "keep": "k2"} {
		if got, err := gs.ReadFile("acme", "r", sha, path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := gs.ReadFile("acme", "r", "topic", "old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted file read: %v, want ErrNotFound", err)
	}
	if _, err := gs.ReadFile("acme", "r", "main", "old"); err != nil {
		t.Errorf("main lost a file: %v", err)
	}

	// Concurrent commits to one branch: each lands or reports ErrRefConflict; none is lost.
	const n = 10
	var wg sync.WaitGroup
	results := make([]string, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = gs.Commit("acme", "r", "main", map[string]string{"f" + string(rune('a'+i)): "x"}, nil, "c")
		}(i)
	}
	wg.Wait()
	log, err := gs.Log("acme", "r", "main")
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]bool{}
	for _, c := range log {
		inLog[c.SHA] = true
	}
	landed := 0
	for i := 0; i < n; i++ {
		switch {
		case errs[i] == nil:
			landed++
			if !inLog[results[i]] {
				t.Errorf("commit %d reported success but is not on main", i)
			}
		case !errors.Is(errs[i], ErrRefConflict):
			t.Errorf("commit %d: %v, want ErrRefConflict", i, errs[i])
		}
	}
	if landed == 0 || len(log) != 1+landed {
		t.Fatalf("landed %d, main has %d commits (want initial + landed)", landed, len(log))
	}
}

func TestOpenGitServerServesExistingRepos(t *testing.T) {
	root := t.TempDir()
	first, err := OpenGitServer(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.CreateRepo("group/sub", "proj", map[string]string{"x": "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.CreateRepo("group/sub", "proj", nil); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreateRepo: %v, want ErrExists", err)
	}
	_ = first.Close()
	second, err := OpenGitServer(root)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if got, err := second.ReadFile("group/sub", "proj", "main", "x"); err != nil || string(got) != "1" {
		t.Fatalf("ReadFile via reopened server = %q, %v", got, err)
	}
	for _, bad := range [][2]string{{"", "r"}, {"a/../b", "r"}, {"a", "r.git"}, {"a", ".hidden"}} {
		if _, err := second.CreateRepo(bad[0], bad[1], nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateRepo(%q, %q) = %v, want ErrInvalid", bad[0], bad[1], err)
		}
	}
	if _, err := OpenGitServer(root, WithBackend("/nonexistent/git-http-backend")); err == nil {
		t.Error("missing backend accepted")
	}
}

func TestGitServerFaults(t *testing.T) {
	gs := NewGitServer(t)
	if _, err := gs.CreateRepo("acme", "r", map[string]string{"x": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := gs.InjectFault(Fault{PathPattern: `/info/refs$`, Status: 503, Body: "maintenance", Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := gs.InjectFault(Fault{PathPattern: `(`}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad regexp accepted: %v", err)
	}
	u := authURL(t, gs.CloneURL("acme", "r"), "x", DefaultToken)
	if _, err := gitCLI(t, t.TempDir(), "clone", "--quiet", u, "w"); err == nil {
		t.Fatal("clone succeeded through an injected 503")
	}
	if out, err := gitCLI(t, t.TempDir(), "clone", "--quiet", u, "w"); err != nil {
		t.Fatalf("clone after the fault was used up: %v\n%s", err, out)
	}
	calls := gs.Calls()
	if len(calls) < 3 || calls[0].Status != 503 || !calls[0].Faulted {
		t.Fatalf("calls = %+v", calls)
	}
	faulted := 0
	for _, c := range calls {
		if c.Faulted {
			faulted++
		}
	}
	if faulted != 1 || calls[len(calls)-1].Status != http.StatusOK {
		t.Fatalf("want exactly one faulted call and a successful last call: %+v", calls)
	}
}

func TestGitServerRevertMergeCommitUsesMainline1(t *testing.T) {
	gs := NewGitServer(t)
	if _, err := gs.CreateRepo("acme", "r", map[string]string{"values.yaml": "image: v1\n", "other": "o\n"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustGit(t, dir, "clone", "-q", authURL(t, gs.CloneURL("acme", "r"), "x", DefaultToken), "w")
	w := filepath.Join(dir, "w")
	mustGit(t, w, "checkout", "-q", "-b", "feature")
	if err := os.WriteFile(filepath.Join(w, "values.yaml"), []byte("image: v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustGit(t, w, "commit", "-qam", "v2")
	mustGit(t, w, "checkout", "-q", "main")
	if err := os.WriteFile(filepath.Join(w, "other"), []byte("o2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustGit(t, w, "commit", "-qam", "other")
	mustGit(t, w, "merge", "-q", "--no-ff", "-m", "Merge feature", "feature")
	mustGit(t, w, "push", "-q", "origin", "main")
	mergeSHA := mustGit(t, w, "rev-parse", "HEAD")

	rev, err := gs.Revert("acme", "r", "main", mergeSHA)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gs.GetCommit("acme", "r", rev)
	if err != nil || c.Parents[0] != mergeSHA || c.Title() != `Revert "Merge feature"` {
		t.Fatalf("revert commit = %+v, %v", c, err)
	}
	// Relative to parent 1 the merge brought in v2; reverting restores v1 and keeps main's own change.
	if got, _ := gs.ReadFile("acme", "r", "main", "values.yaml"); string(got) != "image: v1\n" {
		t.Errorf("values.yaml = %q", got)
	}
	if got, _ := gs.ReadFile("acme", "r", "main", "other"); string(got) != "o2\n" {
		t.Errorf("other = %q", got)
	}
	// Reverting a change that later commits rewrote is a conflict naming the file.
	v3, err := gs.Commit("acme", "r", "main", map[string]string{"values.yaml": "image: v3\n"}, nil, "v3")
	if err != nil {
		t.Fatal(err)
	}
	_, err = gs.Revert("acme", "r", "main", mergeSHA)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrMergeConflict) || len(ce.Files) != 1 || ce.Files[0] != "values.yaml" {
		t.Fatalf("conflicting revert: %v", err)
	}
	if b, _ := gs.Branches("acme", "r"); b["main"] != v3 {
		t.Errorf("failed revert moved main")
	}
}
