package github

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	fake *scmtest.GitHub
	d    *Driver
	head string // main's head after setup
	logs *bytes.Buffer
}

func setup(t *testing.T, opts ...scmtest.Option) *fixture {
	t.Helper()
	g := scmtest.NewGitHub(t, opts...)
	head, err := g.CreateRepo("acme", "release", map[string]string{
		"apps/web/values.yaml": "image: v1\n", "apps/api/values.yaml": "image: a1\n", "README.md": "release repo\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hc, err := transport.NewClient(transport.WithProvider(Name, "test"), transport.WithRetries(4),
		transport.WithBackoff(time.Millisecond, 5*time.Millisecond), transport.WithSecrets(scmtest.DefaultToken),
		transport.WithLogger(log), transport.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(WithBaseURL(g.APIURL()), WithToken(scmtest.DefaultToken), WithHTTPClient(hc), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{fake: g, d: d, head: head, logs: logs}
}

func read(t *testing.T, f *fixture, ref, path string) string {
	t.Helper()
	b, err := f.fake.Git().ReadFile("acme", "release", ref, path)
	if err != nil {
		t.Fatalf("read %s@%s: %v", path, ref, err)
	}
	return string(b)
}

func TestNewValidatesCredentials(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		msg  string
	}{
		{"none", nil, "no credentials"},
		{"both", []Option{WithToken("t"), WithApp(1, 2, []byte("k"))}, "choose one"},
		{"app without key", []Option{WithApp(1, 2, nil)}, "private key"},
		{"app with bad key", []Option{WithApp(1, 2, []byte("not a pem"))}, "GitHub App 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.msg)
			}
		})
	}
}

func TestEnterpriseBaseURL(t *testing.T) {
	d, err := New(WithToken("t"), WithBaseURL("https://ghe.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.BaseURL(); got != "https://ghe.example.com/api/v3/" {
		t.Errorf("BaseURL = %q", got)
	}
	d, err = New(WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.BaseURL(); got != "https://api.github.com/" {
		t.Errorf("default BaseURL = %q", got)
	}
}

func TestCommitMultiFile(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	binary := []byte{0xff, 0xfe, 0x00, 0x01}
	sha, err := f.d.Commit(ctx, testRepo, scm.CommitInput{
		Branch: "prflow/run-1", Parent: f.head, Message: "bump web", Author: scm.Signature{Name: "prflow", Email: "prflow@example.com"},
		Changes: []scm.FileChange{
			{Path: "apps/web/values.yaml", Content: []byte("image: v2\n")},
			{Path: "apps/new/values.yaml", Content: []byte("image: n1\n")},
			{Path: "apps/bin/logo.bin", Content: binary},
			{Path: "apps/api/values.yaml", Delete: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.fake.Git().GetCommit("acme", "release", sha)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Parents, []string{f.head}) || c.Author.Name != "prflow" || c.Title() != "bump web" {
		t.Errorf("commit = %+v", c)
	}
	if got := read(t, f, "prflow/run-1", "apps/web/values.yaml"); got != "image: v2\n" {
		t.Errorf("web = %q", got)
	}
	if got := read(t, f, "prflow/run-1", "apps/bin/logo.bin"); got != string(binary) {
		t.Errorf("binary = %x", got)
	}
	if _, err := f.fake.Git().ReadFile("acme", "release", "prflow/run-1", "apps/api/values.yaml"); err == nil {
		t.Error("deleted file still present")
	}
	// main did not move
	if b, _ := f.d.Branch(ctx, testRepo, "main"); b.SHA != f.head {
		t.Errorf("main moved to %s", b.SHA)
	}
	// Reading back through the driver.
	got, err := f.d.ReadFile(ctx, testRepo, sha, "apps/new/values.yaml")
	if err != nil || string(got) != "image: n1\n" {
		t.Errorf("ReadFile = %q, %v", got, err)
	}
}

func TestCommitConflictWritesNothing(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	// Someone else moves main after we read it.
	moved, err := f.fake.Git().Commit("acme", "release", "main", map[string]string{"README.md": "changed\n"}, nil, "other")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.d.Commit(ctx, testRepo, scm.CommitInput{
		Branch: "main", Parent: f.head, Message: "mine",
		Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte("image: v9\n")}},
	})
	var ce *scm.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("err = %v, want ConflictError", err)
	}
	if !strings.Contains(err.Error(), "acme/release") || !strings.Contains(err.Error(), "commit to main") {
		t.Errorf("error does not name the call and repo: %v", err)
	}
	if b, _ := f.d.Branch(ctx, testRepo, "main"); b.SHA != moved {
		t.Errorf("main = %s, want %s", b.SHA, moved)
	}
}

func TestCommitRejectsBadInput(t *testing.T) {
	f := setup(t)
	for _, tt := range []struct {
		name string
		in   scm.CommitInput
		msg  string
	}{
		{"no parent", scm.CommitInput{Branch: "b", Message: "m"}, "Parent is empty"},
		{"no message", scm.CommitInput{Branch: "b", Parent: f.head}, "Message is empty"},
		{"bad branch", scm.CommitInput{Branch: "a..b", Parent: f.head, Message: "m"}, "invalid branch"},
		{"dotdot path", scm.CommitInput{Branch: "b", Parent: f.head, Message: "m", Changes: []scm.FileChange{{Path: "../etc/passwd"}}}, "Changes[0]"},
		{"duplicate", scm.CommitInput{Branch: "b", Parent: f.head, Message: "m", Changes: []scm.FileChange{{Path: "a"}, {Path: "a", Delete: true}}}, "changed twice"},
		{"half author", scm.CommitInput{Branch: "b", Parent: f.head, Message: "m", Author: scm.Signature{Name: "x"}}, "Author"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.fake.ResetCalls()
			_, err := f.d.Commit(context.Background(), testRepo, tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %q", err, tt.msg)
			}
			if n := len(f.fake.Calls()); n != 0 {
				t.Errorf("bad input made %d API calls", n)
			}
		})
	}
}

func TestBranches(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := f.d.CreateBranch(ctx, testRepo, "feature/x", f.head); err != nil {
		t.Fatal(err)
	}
	if err := f.d.CreateBranch(ctx, testRepo, "feature/x", f.head); err != nil {
		t.Fatalf("creating again at the same commit: %v", err)
	}
	other, err := f.fake.Git().Commit("acme", "release", "main", map[string]string{"x": "1"}, nil, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.d.CreateBranch(ctx, testRepo, "feature/x", other); !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("create at another commit: %v", err)
	}
	ref, err := f.d.Branch(ctx, testRepo, "feature/x")
	if err != nil || ref.SHA != f.head {
		t.Fatalf("Branch = %+v, %v", ref, err)
	}
	// A prefix of an existing branch is not that branch.
	if _, err := f.d.Branch(ctx, testRepo, "feature"); !errors.Is(err, scm.ErrNotFound) {
		t.Errorf("prefix lookup: %v", err)
	}
	if err := f.d.DeleteBranch(ctx, testRepo, "feature/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.Branch(ctx, testRepo, "feature/x"); !errors.Is(err, scm.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
	if err := f.d.DeleteBranch(ctx, testRepo, "feature/x"); !errors.Is(err, scm.ErrNotFound) {
		t.Errorf("delete missing: %v", err)
	}
}

func TestReadFileNotFound(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	_, err := f.d.ReadFile(ctx, testRepo, "main", "nope.yaml")
	if !errors.Is(err, scm.ErrNotFound) || !strings.Contains(err.Error(), "nope.yaml@main") {
		t.Fatalf("missing file: %v", err)
	}
	_, err = f.d.ReadFile(ctx, testRepo, "no-such-branch", "README.md")
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("missing ref: %v", err)
	}
	if _, ok, err := f.d.readFile(ctx, testRepo, "x", "no-such-branch", "README.md"); err == nil || ok {
		t.Errorf("a missing ref must be an error, not an absent file (ok=%v err=%v)", ok, err)
	}
	if _, err := f.d.ReadFile(ctx, testRepo, "main", "apps"); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
}

func TestPullRequestLifecycle(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	sha, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "prflow/run-2", Parent: f.head, Message: "bump",
		Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte("image: v3\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "Promote web", Body: "body", Head: "prflow/run-2", Base: "main",
		Labels: []string{"prflow", "env/prod"}, Reviewers: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number == 0 || pr.State != scm.PROpen || pr.HeadSHA != sha || !slices.Equal(pr.Labels, []string{"prflow", "env/prod"}) {
		t.Fatalf("opened %+v", pr)
	}
	if !strings.HasPrefix(pr.URL, f.fake.URL()) || !strings.HasSuffix(pr.URL, "/acme/release/pull/1") {
		t.Errorf("URL = %q, want the fake's html_url", pr.URL)
	}
	again, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "Promote web", Head: "prflow/run-2", Base: "main"})
	if err != nil || again.Number != pr.Number {
		t.Fatalf("re-open adopted %+v, %v", again, err)
	}
	found, err := f.d.FindPR(ctx, testRepo, "prflow/run-2", "main")
	if err != nil || found.Number != pr.Number {
		t.Fatalf("FindPR = %+v, %v", found, err)
	}
	if _, err := f.d.FindPR(ctx, testRepo, "prflow/none", "main"); !errors.Is(err, scm.ErrNotFound) {
		t.Errorf("FindPR none: %v", err)
	}
	files, err := f.d.ChangedFiles(ctx, testRepo, pr.Number)
	if err != nil || !slices.Equal(files, []string{"apps/web/values.yaml"}) {
		t.Errorf("ChangedFiles = %v, %v", files, err)
	}
	if err := f.d.Comment(ctx, testRepo, pr.Number, "deploying"); err != nil {
		t.Fatal(err)
	}
	// Stale guard.
	_, err = f.d.MergePR(ctx, testRepo, pr.Number, scm.MergeInput{Method: scm.Squash, SHA: f.head})
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("stale SHA: %v", err)
	}
	merged, err := f.d.MergePR(ctx, testRepo, pr.Number, scm.MergeInput{Method: scm.Squash, SHA: sha, Message: "Promote web\n\ndetails", DeleteBranch: true})
	if err != nil {
		t.Fatal(err)
	}
	if merged.State != scm.PRMerged || merged.MergeSHA == "" {
		t.Fatalf("merged = %+v", merged)
	}
	if got := read(t, f, "main", "apps/web/values.yaml"); got != "image: v3\n" {
		t.Errorf("main has %q", got)
	}
	if head, _ := f.d.Branch(ctx, testRepo, "main"); head.SHA != merged.MergeSHA {
		t.Errorf("main = %s, MergeSHA = %s", head.SHA, merged.MergeSHA)
	}
	if _, err := f.d.Branch(ctx, testRepo, "prflow/run-2"); !errors.Is(err, scm.ErrNotFound) {
		t.Errorf("source branch not deleted: %v", err)
	}
	// A redelivered merge is a success with the same result.
	again, err = f.d.MergePR(ctx, testRepo, pr.Number, scm.MergeInput{Method: scm.Squash, SHA: sha})
	if err != nil || again.MergeSHA != merged.MergeSHA {
		t.Fatalf("merge again = %+v, %v", again, err)
	}
}

func TestMergeRefusals(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	open := func(branch, content string) *scm.PullRequest {
		t.Helper()
		if _, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: branch, Parent: f.head, Message: branch,
			Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte(content)}}}); err != nil {
			t.Fatal(err)
		}
		pr, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: branch, Head: branch, Base: "main"})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	a := open("a", "image: a\n")
	b := open("b", "image: b\n")

	f.fake.InjectBaseModified(1)
	_, err := f.d.MergePR(ctx, testRepo, a.Number, scm.MergeInput{SHA: a.HeadSHA})
	var se *scm.Error
	var tr interface{ Transient() bool }
	if !errors.Is(err, ErrBaseBranchModified) || !errors.As(err, &se) || se.Status != http.StatusMethodNotAllowed ||
		!errors.As(err, &tr) || !tr.Transient() {
		t.Fatalf("base modified: %v", err)
	}
	if errors.Is(err, scm.ErrNotMergeable) {
		t.Error("base-modified must not read as not mergeable")
	}
	if _, err := f.d.MergePR(ctx, testRepo, a.Number, scm.MergeInput{SHA: a.HeadSHA}); err != nil {
		t.Fatalf("retry after base modified: %v", err)
	}
	// b now conflicts with main.
	_, err = f.d.MergePR(ctx, testRepo, b.Number, scm.MergeInput{SHA: b.HeadSHA})
	var nm *scm.NotMergeableError
	if !errors.As(err, &nm) || !errors.Is(err, scm.ErrNotMergeable) {
		t.Fatalf("conflicting merge: %v", err)
	}
	if !slices.Equal(nm.Files, []string{"apps/web/values.yaml"}) {
		t.Errorf("conflict files = %v", nm.Files)
	}
	got, err := f.d.GetPR(ctx, testRepo, b.Number)
	if err != nil {
		t.Fatal(err)
	}
	for got.Mergeability == scm.MergeUnknown {
		if got, err = f.d.GetPR(ctx, testRepo, b.Number); err != nil {
			t.Fatal(err)
		}
	}
	if got.Mergeability != scm.MergeDirty {
		t.Errorf("Mergeability = %s, want dirty", got.Mergeability)
	}
	if err := f.d.ClosePR(ctx, testRepo, b.Number); err != nil {
		t.Fatal(err)
	}
	_, err = f.d.MergePR(ctx, testRepo, b.Number, scm.MergeInput{})
	if !errors.As(err, &nm) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("merge closed PR: %v", err)
	}
	if _, err := f.d.MergePR(ctx, testRepo, b.Number, scm.MergeInput{Method: "fast"}); err == nil || !strings.Contains(err.Error(), "unknown merge method") {
		t.Errorf("bad method: %v", err)
	}
}

func TestRevert(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	bump, err := f.fake.Git().Commit("acme", "release", "main", map[string]string{"apps/web/values.yaml": "image: v2\n", "apps/added.yaml": "x\n"},
		[]string{"README.md"}, "bump web")
	if err != nil {
		t.Fatal(err)
	}
	sha, err := f.d.Revert(ctx, testRepo, scm.RevertInput{SHA: bump, Base: "main", Branch: "revert-bump"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.fake.Git().GetCommit("acme", "release", sha)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Parents, []string{bump}) || !strings.Contains(c.Message, "This reverts commit "+bump) {
		t.Errorf("revert commit = %+v", c)
	}
	if got := read(t, f, "revert-bump", "apps/web/values.yaml"); got != "image: v1\n" {
		t.Errorf("web = %q", got)
	}
	if got := read(t, f, "revert-bump", "README.md"); got != "release repo\n" {
		t.Errorf("README = %q", got)
	}
	if _, err := f.fake.Git().ReadFile("acme", "release", "revert-bump", "apps/added.yaml"); err == nil {
		t.Error("added file not removed")
	}
	// Redelivered: the existing branch already reverts the commit.
	again, err := f.d.Revert(ctx, testRepo, scm.RevertInput{SHA: bump, Base: "main", Branch: "revert-bump"})
	if err != nil || again != sha {
		t.Fatalf("revert again = %s, %v", again, err)
	}
	// A later change to the same file makes the revert conflict, listing the file.
	if _, err := f.fake.Git().Commit("acme", "release", "main", map[string]string{"apps/web/values.yaml": "image: v3\n"}, nil, "later"); err != nil {
		t.Fatal(err)
	}
	_, err = f.d.Revert(ctx, testRepo, scm.RevertInput{SHA: bump, Base: "main", Branch: "revert-2"})
	var ce *scm.ConflictError
	if !errors.As(err, &ce) || !slices.Equal(ce.Files, []string{"apps/web/values.yaml"}) {
		t.Fatalf("conflicting revert: %v", err)
	}
	if _, err := f.d.Branch(ctx, testRepo, "revert-2"); !errors.Is(err, scm.ErrNotFound) {
		t.Errorf("conflicting revert left a branch: %v", err)
	}
}

func TestSetStatus(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	long := strings.Repeat("é", 200)
	if err := f.d.SetStatus(ctx, testRepo, f.head, scm.Status{Context: "prflow/deploy", State: scm.StatusPending, Description: long, TargetURL: "https://ci.example.com/1"}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.SetStatus(ctx, testRepo, f.head, scm.Status{Context: "prflow/deploy", State: scm.StatusSuccess}); err != nil {
		t.Fatal(err)
	}
	sts, err := f.fake.Statuses("acme", "release", f.head)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) == 0 || sts[len(sts)-1].State != "success" || sts[0].Context != "prflow/deploy" {
		t.Fatalf("statuses = %+v", sts)
	}
	if n := len([]rune(sts[0].Description)); n > maxStatusDescription {
		t.Errorf("description of %d runes sent", n)
	}
	if err := f.d.SetStatus(ctx, testRepo, f.head, scm.Status{Context: "x", State: "weird"}); err == nil {
		t.Error("unknown state accepted")
	}
}

func TestErrorsFailFastAndNameTheCall(t *testing.T) {
	f := setup(t, scmtest.WithToken(scmtest.DefaultToken, scmtest.DefaultUser, "acme/release"))
	ctx := context.Background()
	bad, err := New(WithBaseURL(f.fake.APIURL()), WithToken("wrong-token-value"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		call   func() error
		is     error
		status int
		msg    string
	}{
		{"401", func() error { _, err := bad.ReadFile(ctx, testRepo, "main", "README.md"); return err }, scm.ErrUnauthorized, 401, "read file README.md@main in acme/release"},
		{"401 whoami", func() error { _, err := bad.Whoami(ctx); return err }, scm.ErrUnauthorized, 401, "get authenticated user"},
		{"404 invisible repo", func() error { return f.d.RepoExists(ctx, "other/secret") }, scm.ErrNotFound, 404, "get repository in other/secret"},
		{"404 PR", func() error { _, err := f.d.GetPR(ctx, testRepo, 999); return err }, scm.ErrNotFound, 404, "get PR #999 in acme/release"},
		{"422 PR without commits", func() error {
			_, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "t", Head: "main", Base: "main"})
			return err
		}, nil, 422, "open PR main into main in acme/release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fake.ResetCalls()
			scmconformance.WantRefused(t, tt.call(), tt.status, tt.is, tt.msg)
			for _, c := range f.fake.Calls() {
				if c.Status == tt.status && c.Faulted {
					t.Errorf("unexpected fault %+v", c)
				}
			}
			if n := scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Status == tt.status }); n > 1 {
				t.Errorf("a %d was retried: %d calls", tt.status, n)
			}
		})
	}
}

func TestTransientFaultsAreRetried(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault scmtest.Fault
	}{
		{"503", scmtest.Fault{Status: 503, Times: 2, Body: `{"message":"Service Unavailable"}`}},
		{"502 on a guarded POST", scmtest.Fault{Method: "POST", PathPattern: `/git/trees$`, Status: 502, Times: 2}},
		{"429", scmtest.Fault{Status: 429, Times: 2, Header: map[string]string{"Retry-After": "0"}, Body: `{"message":"slow down"}`}},
		{"dropped connection", scmtest.Fault{Method: "GET", Drop: true, Times: 1}},
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
				t.Error("commit content wrong")
			}
			if scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Faulted }) == 0 {
				t.Error("the fault was never hit")
			}
		})
	}
}

func TestRateLimitErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		kind scmtest.RateLimitKind
	}{
		{"primary", scmtest.PrimaryRateLimit},
		{"secondary", scmtest.SecondaryRateLimit},
		{"secondary 429", scmtest.SecondaryRateLimit429},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := scmtest.NewGitHub(t)
			if _, err := g.CreateRepo("acme", "release", map[string]string{"a": "b"}); err != nil {
				t.Fatal(err)
			}
			// No transport: the driver itself must classify the answer.
			d, err := New(WithBaseURL(g.APIURL()), WithToken(scmtest.DefaultToken))
			if err != nil {
				t.Fatal(err)
			}
			if err := g.RateLimitNext(1, tt.kind, 90*time.Second); err != nil {
				t.Fatal(err)
			}
			_, err = d.ReadFile(context.Background(), testRepo, "main", "a")
			var rl *scm.RateLimitError
			if !errors.As(err, &rl) || !errors.Is(err, scm.ErrRateLimited) || !scm.Transient(err) {
				t.Fatalf("err = %v, want a RateLimitError", err)
			}
			if rl.RetryAfter < 60*time.Second || rl.RetryAfter > 91*time.Second {
				t.Errorf("RetryAfter = %s, want about 90s", rl.RetryAfter)
			}
		})
	}
}

func TestNoTokenInErrorsOrLogs(t *testing.T) {
	const secret = "ghp_SuperSecretTokenValue1234567890"
	g := scmtest.NewGitHub(t, scmtest.WithToken(secret, "bot", "acme/release"))
	head, err := g.CreateRepo("acme", "release", map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hc, err := transport.NewClient(transport.WithRetries(2), transport.WithBackoff(time.Millisecond, 2*time.Millisecond),
		transport.WithSecrets(secret), transport.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(WithBaseURL(g.APIURL()), WithToken(secret), WithHTTPClient(hc), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	// Echo the token back in error bodies, as a misbehaving proxy might.
	if err := g.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "/contents/", Status: 400, Times: 1,
		Body: `{"message":"bad request for token ` + secret + `"}`}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var errs []error
	collect := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	_, err = d.ReadFile(ctx, testRepo, "main", "a")
	collect(err)
	_, err = d.ReadFile(ctx, "other/repo", "main", "a")
	collect(err)
	_, err = d.GetPR(ctx, testRepo, 42)
	collect(err)
	_, err = d.Commit(ctx, testRepo, scm.CommitInput{Branch: "main", Parent: "0000000000000000000000000000000000000000", Message: "m"})
	collect(err)
	_, err = d.MergePR(ctx, testRepo, 7, scm.MergeInput{SHA: head})
	collect(err)
	if err := g.InjectFault(scmtest.Fault{Drop: true, Times: 10}); err != nil {
		t.Fatal(err)
	}
	collect(d.RepoExists(ctx, testRepo))
	if len(errs) < 5 {
		t.Fatalf("expected errors from every call, got %d: %v", len(errs), errs)
	}
	scmconformance.WantSecretHidden(t, secret, errs, logs.String())
}

// TestChangedBetweenTruncated: GitHub's compare lists at most 300 files and says nothing when
// it cuts; a comparison listing 300 comes with scm.ErrTruncated (and the files it listed), so
// a path check does not decide "no match" on part of a push. 299 files are a whole list.
func TestChangedBetweenTruncated(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	for _, n := range []int{299, 301} {
		var changes []scm.FileChange
		for i := range n {
			changes = append(changes, scm.FileChange{Path: fmt.Sprintf("many%d/f%03d.txt", n, i), Content: []byte("x\n")})
		}
		head, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: fmt.Sprintf("many%d", n), Parent: f.head, Message: "many", Changes: changes})
		if err != nil {
			t.Fatal(err)
		}
		files, err := f.d.ChangedBetween(ctx, testRepo, f.head, head)
		switch {
		case n < maxCompareFiles && (err != nil || len(files) != n):
			t.Errorf("%d files: got %d, %v", n, len(files), err)
		case n > maxCompareFiles && (!errors.Is(err, scm.ErrTruncated) || len(files) != maxCompareFiles || !strings.Contains(err.Error(), "at most 300 files")):
			t.Errorf("%d files: got %d, %v; want the first 300 and ErrTruncated", n, len(files), err)
		}
	}
}

// TestCommentRefusalIsNotARateLimit: GitHub answers 403 both to a token that may not comment
// and to a spent rate limit; the first is ErrForbidden (the step warns and goes on), the
// second a RateLimitError (the job waits and retries), never the other way round.
func TestCommentRefusalIsNotARateLimit(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.fake.Git().Commit("acme", "release", "feature", map[string]string{"x.txt": "x\n"}, nil, "x"); err != nil {
		t.Fatal(err)
	}
	pr, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "t", Head: "feature", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.fake.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/issues/\d+/comments$`, Status: 403, Times: 1,
		Body: `{"message":"Resource not accessible by integration","documentation_url":"https://docs.github.com/rest/issues/comments#create-an-issue-comment","status":"403"}`}); err != nil {
		t.Fatal(err)
	}
	err = f.d.Comment(ctx, testRepo, pr.Number, "hello")
	if !errors.Is(err, scm.ErrForbidden) || errors.Is(err, scm.ErrRateLimited) || scm.Transient(err) ||
		!strings.Contains(err.Error(), "Resource not accessible by integration") || !strings.Contains(err.Error(), "comment on PR #") {
		t.Fatalf("403 without rate-limit headers: %v, want ErrForbidden naming the call", err)
	}
	// No transport (it would wait the limit out): the driver itself must classify the answer.
	bare, err := New(WithBaseURL(f.fake.APIURL()), WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.fake.RateLimitNext(1, scmtest.PrimaryRateLimit, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err = scm.UpsertComment(ctx, bare, testRepo, pr.Number, "k", "hello")
	if !errors.Is(err, scm.ErrRateLimited) || errors.Is(err, scm.ErrForbidden) {
		t.Fatalf("403 of a spent rate limit: %v, want ErrRateLimited", err)
	}
}
