package gitlab

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/scm/transport"
)

const testRepo scm.Repo = "acme/release"

type fixture struct {
	fake *scmtest.GitLab
	d    *Driver
	head string
	logs *bytes.Buffer
}

func newDriver(t *testing.T, g *scmtest.GitLab, token string, logs *bytes.Buffer) *Driver {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hc, err := transport.NewClient(transport.WithProvider(Name, "test"), transport.WithRetries(4),
		transport.WithBackoff(time.Millisecond, 5*time.Millisecond), transport.WithSecrets(token),
		transport.WithLogger(log), transport.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(WithBaseURL(g.APIURL()), WithToken(token), WithHTTPClient(hc), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func setup(t *testing.T, opts ...scmtest.Option) *fixture {
	t.Helper()
	g := scmtest.NewGitLab(t, opts...)
	head, err := g.CreateRepo("acme", "release", map[string]string{
		"apps/web/values.yaml": "image: v1\n", "apps/api/values.yaml": "image: a1\n", "README.md": "release repo\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	return &fixture{fake: g, d: newDriver(t, g, scmtest.DefaultToken, logs), head: head, logs: logs}
}

func read(t *testing.T, f *fixture, ref, path string) string {
	t.Helper()
	b, err := f.fake.Git().ReadFile("acme", "release", ref, path)
	if err != nil {
		t.Fatalf("read %s@%s: %v", path, ref, err)
	}
	return string(b)
}

func TestNewOptions(t *testing.T) {
	if _, err := New(); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("no token: %v", err)
	}
	d, err := New(WithToken("t"), WithBaseURL("https://gitlab.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.BaseURL(); got != "https://gitlab.example.com/api/v4/" {
		t.Errorf("self-managed BaseURL = %q", got)
	}
	d, err = New(WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.BaseURL(); got != "https://gitlab.com/api/v4/" {
		t.Errorf("default BaseURL = %q", got)
	}
	if _, err := projectID("nogroup"); err == nil {
		t.Error("a project path without a group was accepted")
	}
	if id, err := projectID("a/b/c"); err != nil || id != "a/b/c" {
		t.Errorf("subgroup path: %q, %v", id, err)
	}
}

// TestCommitGuards covers the two ways GitLab guards a commit: the head check before the write
// and the per-file last_commit_id that GitLab enforces itself.
func TestCommitGuards(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	sha, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "feature", Parent: f.head, Message: "first",
		Author:  scm.Signature{Name: "prflow", Email: "prflow@example.com"},
		Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte("image: v2\n")}, {Path: "bin/x", Content: []byte{0xff, 0x00}}, {Path: "README.md", Delete: true}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.fake.Git().GetCommit("acme", "release", sha)
	if err != nil || !slices.Equal(c.Parents, []string{f.head}) || c.Author.Name != "prflow" {
		t.Fatalf("commit = %+v, %v", c, err)
	}
	if got := read(t, f, sha, "bin/x"); got != "\xff\x00" {
		t.Errorf("binary content = %q", got)
	}
	// Deleting a file that is already absent is not an error; with nothing else it is an
	// empty commit, which GitLab cannot make.
	_, err = f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "feature", Parent: sha, Message: "noop", Changes: []scm.FileChange{{Path: "README.md", Delete: true}}})
	if !errors.Is(err, scm.ErrNotSupported) {
		t.Errorf("empty commit: %v", err)
	}
	// Stale parent: refused, nothing written (the commit first tries to create the branch,
	// which GitLab refuses because it exists; then the head is found not at the parent).
	f.fake.ResetCalls()
	_, err = f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "feature", Parent: f.head, Message: "stale",
		Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte("image: v9\n")}}})
	if !errors.Is(err, scm.ErrConflict) || !strings.Contains(err.Error(), "commit to feature in acme/release") {
		t.Fatalf("stale parent: %v", err)
	}
	for _, call := range f.fake.Calls() {
		if call.Method == http.MethodPost && call.Status < 300 {
			t.Errorf("a stale commit still wrote: %+v", call)
		}
	}
	if head, err := f.d.Branch(ctx, testRepo, "feature"); err != nil || head.SHA != sha {
		t.Errorf("feature moved to %s (%v) after a refused commit", head.SHA, err)
	}
	if got := read(t, f, "feature", "apps/web/values.yaml"); got != "image: v2\n" {
		t.Errorf("web = %q", got)
	}
}

func TestLastCommitIDGuardIsSent(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	// The branch moves between our head check and the write: GitLab itself refuses the stale
	// file update because of last_commit_id.
	parent := f.head
	moved, err := f.fake.Git().Commit("acme", "release", "main", map[string]string{"apps/web/values.yaml": "image: theirs\n"}, nil, "theirs")
	if err != nil {
		t.Fatal(err)
	}
	// Call the write path directly with the old parent but with the head check passing, as if
	// the head had been read just before the other commit landed.
	_, err = f.d.commitActions(ctx, testRepo, scm.CommitInput{Branch: "main", Parent: parent, Message: "ours",
		Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte("image: ours\n")}}}, true)
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("stale last_commit_id: %v", err)
	}
	if b, _ := f.d.Branch(ctx, testRepo, "main"); b.SHA != moved {
		t.Errorf("main = %s, want %s", b.SHA, moved)
	}
	if got := read(t, f, "main", "apps/web/values.yaml"); got != "image: theirs\n" {
		t.Errorf("their change was overwritten: %q", got)
	}
}

func TestMergeAndRevertSpecifics(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "b", Parent: f.head, Message: "b",
		Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte("image: b\n")}}}); err != nil {
		t.Fatal(err)
	}
	pr, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "B", Head: "b", Base: "main", Draft: true})
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Draft || !strings.HasPrefix(pr.URL, f.fake.URL()) || !strings.Contains(pr.URL, "/merge_requests/") {
		t.Errorf("opened %+v", pr)
	}
	again, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "B", Head: "b", Base: "main"})
	if err != nil || again.Number != pr.Number {
		t.Fatalf("second open = %+v, %v", again, err)
	}
	if _, err := f.d.MergePR(ctx, testRepo, pr.Number, scm.MergeInput{Method: scm.Rebase}); !errors.Is(err, scm.ErrNotSupported) {
		t.Errorf("rebase: %v", err)
	}
	if _, err := f.d.Revert(ctx, testRepo, scm.RevertInput{SHA: f.head, Base: "main", Branch: "r"}); !errors.Is(err, scm.ErrNotSupported) {
		t.Errorf("revert of the root commit: %v", err)
	}
	if _, err := f.d.Revert(ctx, testRepo, scm.RevertInput{SHA: f.head, Mainline: 2, Base: "main", Branch: "r"}); err == nil {
		t.Error("mainline 2 of a one-parent commit accepted")
	}
}

func TestSetStatusIdempotent(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	st := scm.Status{Context: "prflow/deploy", State: scm.StatusPending, TargetURL: "https://ci.example.com/1"}
	for range 2 {
		if err := f.d.SetStatus(ctx, testRepo, f.head, st); err != nil {
			t.Fatalf("setting the same state twice: %v", err)
		}
	}
	st.State = scm.StatusError
	if err := f.d.SetStatus(ctx, testRepo, f.head, st); err != nil {
		t.Fatal(err)
	}
	sts, err := f.fake.Statuses("acme", "release", f.head)
	if err != nil {
		t.Fatal(err)
	}
	if last := sts[len(sts)-1]; last.Native != "failed" {
		t.Errorf("error state sent as %q, want failed", last.Native)
	}
}

func TestErrorsFailFastAndNameTheCall(t *testing.T) {
	f := setup(t, scmtest.WithToken(scmtest.DefaultToken, scmtest.DefaultUser, "acme/release"))
	ctx := context.Background()
	bad := newDriver(t, f.fake, "wrong-token-value", &bytes.Buffer{})
	tests := []struct {
		name   string
		call   func() error
		is     error
		status int
		msg    string
	}{
		{"401", func() error { _, err := bad.ReadFile(ctx, testRepo, "main", "README.md"); return err }, scm.ErrUnauthorized, 401, "read file README.md@main in acme/release"},
		{"401 whoami", func() error { _, err := bad.Whoami(ctx); return err }, scm.ErrUnauthorized, 401, "get current user"},
		{"404 invisible project", func() error { return f.d.RepoExists(ctx, "other/secret") }, scm.ErrNotFound, 404, "get project in other/secret"},
		{"404 MR", func() error { _, err := f.d.GetPR(ctx, testRepo, 999); return err }, scm.ErrNotFound, 404, "get MR !999 in acme/release"},
		{"400 bad branch ref", func() error { return f.d.CreateBranch(ctx, testRepo, "x", "0000000000000000000000000000000000000001") }, nil, 400, "create branch x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fake.ResetCalls()
			scmconformance.WantRefused(t, tt.call(), tt.status, tt.is, tt.msg)
			if n := scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Status == tt.status }); n != 1 {
				t.Errorf("%d answers with status %d, want exactly 1 (no retry)", n, tt.status)
			}
		})
	}
}

func TestTransientFaultsAreRetried(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault scmtest.Fault
	}{
		{"503 on GET", scmtest.Fault{Method: "GET", Status: 503, Times: 2, Body: `{"message":"503 Service Unavailable"}`}},
		{"429", scmtest.Fault{Method: "GET", Status: 429, Times: 2, Header: map[string]string{"Retry-After": "0"}, Body: `{"message":"Retry later"}`}},
		{"dropped GET", scmtest.Fault{Method: "GET", Drop: true, Times: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t)
			if err := f.fake.InjectFault(tt.fault); err != nil {
				t.Fatal(err)
			}
			sha, err := f.d.Commit(context.Background(), testRepo, scm.CommitInput{Branch: "b", Parent: f.head, Message: "m",
				Changes: []scm.FileChange{{Path: "f.txt", Content: []byte("x")}}})
			if err != nil {
				t.Fatalf("commit through faults: %v", err)
			}
			if read(t, f, sha, "f.txt") != "x" {
				t.Error("content")
			}
			if scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Faulted }) == 0 {
				t.Error("fault never hit")
			}
		})
	}
	t.Run("POST commit is never replayed", func(t *testing.T) {
		f := setup(t)
		if err := f.fake.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/repository/commits$`, Status: 502, Times: 1}); err != nil {
			t.Fatal(err)
		}
		_, err := f.d.Commit(context.Background(), testRepo, scm.CommitInput{Branch: "b", Parent: f.head, Message: "m",
			Changes: []scm.FileChange{{Path: "f.txt", Content: []byte("x")}}})
		var se *scm.Error
		if !errors.As(err, &se) || se.Status != 502 || !scm.Transient(err) {
			t.Fatalf("err = %v, want the 502 reported as transient", err)
		}
		if posts := scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Method == "POST" }); posts != 1 {
			t.Errorf("commit POST sent %d times", posts)
		}
	})
}

func TestRateLimitError(t *testing.T) {
	g := scmtest.NewGitLab(t)
	if _, err := g.CreateRepo("acme", "release", map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	d, err := New(WithBaseURL(g.APIURL()), WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RateLimitNext(1, 45*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = d.ReadFile(context.Background(), testRepo, "main", "a")
	var rl *scm.RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter < 40*time.Second || rl.RetryAfter > 46*time.Second {
		t.Fatalf("err = %v, want RateLimitError of about 45s", err)
	}
	if calls := scmtest.CountCalls(g.Calls(), func(c scmtest.Call) bool { return c.Status == 429 }); calls != 1 {
		t.Errorf("client-go retried the 429 itself: %d calls", calls)
	}
}

func TestNoTokenInErrorsOrLogs(t *testing.T) {
	const secret = "glpat-SuperSecretTokenValue123"
	g := scmtest.NewGitLab(t, scmtest.WithToken(secret, "bot", "acme/release"))
	if _, err := g.CreateRepo("acme", "release", map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	d := newDriver(t, g, secret, logs)
	if err := g.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "/repository/files/", Status: 400, Times: 1,
		Body: `{"message":"bad token ` + secret + `"}`}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	_, err := d.ReadFile(ctx, testRepo, "main", "a")
	add(err)
	_, err = d.ReadFile(ctx, "other/repo", "main", "a")
	add(err)
	_, err = d.GetPR(ctx, testRepo, 3)
	add(err)
	_, err = d.MergePR(ctx, testRepo, 3, scm.MergeInput{})
	add(err)
	if err := g.InjectFault(scmtest.Fault{Drop: true, Times: 10}); err != nil {
		t.Fatal(err)
	}
	add(d.RepoExists(ctx, testRepo))
	if len(errs) != 5 {
		t.Fatalf("want 5 errors, got %v", errs)
	}
	scmconformance.WantSecretHidden(t, secret, errs, logs.String())
}

func TestConformance(t *testing.T) {
	scmconformance.Run(t, func(t *testing.T) scmconformance.Env {
		g := scmtest.NewGitLab(t)
		d := newDriver(t, g, scmtest.DefaultToken, &bytes.Buffer{})
		env := scmconformance.ForgeEnv(t, g.Forge, d)
		env.Settle = scmconformance.SettleMergeability(d, testRepo, "MR !")
		env.FailEdits = func(t *testing.T) {
			if err := g.InjectFault(scmtest.Fault{Method: "PUT", PathPattern: `/notes/\d+$`, Status: 400,
				Body: `{"message":"400 Bad request - note could not be saved"}`}); err != nil {
				t.Fatal(err)
			}
		}
		return env
	})
}
