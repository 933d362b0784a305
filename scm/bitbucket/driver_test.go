package bitbucket

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
	fake *scmtest.Bitbucket
	d    *Driver
	head string
}

func newDriver(t *testing.T, b *scmtest.Bitbucket, token string, logs *bytes.Buffer) *Driver {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hc, err := transport.NewClient(transport.WithProvider(Name, "test"), transport.WithRetries(4),
		transport.WithBackoff(time.Millisecond, 5*time.Millisecond), transport.WithSecrets(token),
		transport.WithLogger(log), transport.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(WithBaseURL(b.APIURL()), WithToken(token), WithHTTPClient(hc), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func setup(t *testing.T, opts ...scmtest.Option) *fixture {
	t.Helper()
	b := scmtest.NewBitbucket(t, opts...)
	head, err := b.CreateRepo("acme", "release", map[string]string{
		"apps/web/values.yaml": "image: v1\n", "apps/api/values.yaml": "image: a1\n", "README.md": "release repo\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{fake: b, d: newDriver(t, b, scmtest.DefaultToken, &bytes.Buffer{}), head: head}
}

func TestNewOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		msg  string
	}{
		{"none", nil, "no credentials"},
		{"both", []Option{WithToken("t"), WithBasicAuth("u", "p")}, "choose one"},
		{"basic without user", []Option{WithBasicAuth("", "p")}, "email or username"},
		{"bad URL", []Option{WithToken("t"), WithBaseURL("ftp://x")}, "not an http(s) URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts...); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %q", err, tt.msg)
			}
		})
	}
	d, err := New(WithBasicAuth("me@example.com", "api-token"))
	if err != nil || d.BaseURL() != DefaultBaseURL {
		t.Fatalf("default = %v, %v", d, err)
	}
}

func TestBasicAuth(t *testing.T) {
	b := scmtest.NewBitbucket(t, scmtest.WithToken("api-token", "me"))
	if _, err := b.CreateRepo("acme", "release", map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	d, err := New(WithBaseURL(b.APIURL()), WithBasicAuth("me@example.com", "api-token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.RepoExists(context.Background(), testRepo); err != nil {
		t.Fatal(err)
	}
	// The direct requests (PR list) authenticate the same way as the library's.
	if _, err := d.FindPR(context.Background(), testRepo, "x", "main"); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("FindPR = %v, want ErrNotFound", err)
	}
}

// TestContextReachesTheLibrary checks that a cancelled context stops library calls, which
// go-bitbucket would otherwise send without it.
func TestContextReachesTheLibrary(t *testing.T) {
	f := setup(t)
	if err := f.fake.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "/refs/branches/", Delay: 10 * time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := f.d.Branch(ctx, testRepo, "main")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "get branch main in acme/release") {
		t.Errorf("error does not name the call: %v", err)
	}
}

func TestCommitParentsGuard(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	sha, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "main", Parent: f.head, Message: "m",
		Author:  scm.Signature{Name: "prflow", Email: "prflow@example.com"},
		Changes: []scm.FileChange{{Path: "message", Content: []byte("a file named like a form field\n")}, {Path: "README.md", Delete: true}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.fake.Git().GetCommit("acme", "release", sha)
	if err != nil || !slices.Equal(c.Parents, []string{f.head}) || c.Author.Email != "prflow@example.com" || c.Title() != "m" {
		t.Fatalf("commit %+v, %v", c, err)
	}
	if got, _ := f.fake.Git().ReadFile("acme", "release", sha, "message"); string(got) != "a file named like a form field\n" {
		t.Errorf("root file named message = %q", got)
	}
	// The parents field makes Bitbucket itself refuse a stale write even when our own head
	// check is bypassed.
	f.fake.ResetCalls()
	_, err = f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "main", Parent: f.head, Message: "stale",
		Changes: []scm.FileChange{{Path: "x", Content: []byte("x")}}})
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("stale: %v", err)
	}
	if _, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "main", Parent: f.head, Message: "m"}); !errors.Is(err, scm.ErrNotSupported) {
		t.Errorf("empty commit: %v", err)
	}
}

func TestMergeSpecifics(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	mk := func(branch, content string) *scm.PullRequest {
		t.Helper()
		if _, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: branch, Parent: f.head, Message: branch,
			Changes: []scm.FileChange{{Path: "apps/web/values.yaml", Content: []byte(content)}}}); err != nil {
			t.Fatal(err)
		}
		pr, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: branch, Body: "body", Head: branch, Base: "main", Labels: []string{"prflow", "env/dev"}})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	a := mk("a", "image: a\n")
	b := mk("b", "image: b\n")
	if a.Body != "body" || !slices.Equal(a.Labels, []string{"prflow", "env/dev"}) || len(a.HeadSHA) != 40 {
		t.Fatalf("opened %+v", a)
	}
	if _, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "x", Head: "a", Base: "main", Labels: []string{"a,b"}}); err == nil {
		t.Error("label with a comma accepted")
	}
	// 409 from Bitbucket during merge: transient, not a stale head.
	if err := f.fake.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/merge$`, Status: 409, Times: 1,
		Body: `{"type":"error","error":{"message":"The destination branch was updated while merging; try again."}}`}); err != nil {
		t.Fatal(err)
	}
	_, err := f.d.MergePR(ctx, testRepo, a.Number, scm.MergeInput{SHA: a.HeadSHA})
	var tr interface{ Transient() bool }
	if !errors.As(err, &tr) || errors.Is(err, scm.ErrConflict) || errors.Is(err, scm.ErrNotMergeable) {
		t.Fatalf("409 during merge: %v", err)
	}
	merged, err := f.d.MergePR(ctx, testRepo, a.Number, scm.MergeInput{SHA: a.HeadSHA})
	if err != nil || merged.State != scm.PRMerged || len(merged.MergeSHA) != 40 {
		t.Fatalf("merge = %+v, %v", merged, err)
	}
	got, err := f.d.GetPR(ctx, testRepo, b.Number)
	if err != nil || got.Mergeability != scm.MergeDirty {
		t.Fatalf("b after a merged: %+v, %v", got, err)
	}
	_, err = f.d.MergePR(ctx, testRepo, b.Number, scm.MergeInput{SHA: b.HeadSHA})
	var nm *scm.NotMergeableError
	if !errors.As(err, &nm) || !slices.Equal(nm.Files, []string{"apps/web/values.yaml"}) {
		t.Fatalf("conflicting merge: %v", err)
	}
	if err := f.d.ClosePR(ctx, testRepo, b.Number); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.MergePR(ctx, testRepo, b.Number, scm.MergeInput{}); !errors.Is(err, scm.ErrNotMergeable) {
		t.Errorf("merge declined PR: %v", err)
	}
}

// TestAsyncMerge: Bitbucket may answer a merge with 202 and a task-status link while it
// merges in the background (the fault answers 202 without merging, as at that moment).
func TestAsyncMerge(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.d.Commit(ctx, testRepo, scm.CommitInput{Branch: "a", Parent: f.head, Message: "a",
		Changes: []scm.FileChange{{Path: "a.txt", Content: []byte("a")}}}); err != nil {
		t.Fatal(err)
	}
	pr, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "a", Head: "a", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.fake.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/merge$`, Status: 202, Times: 1,
		Header: map[string]string{"Location": f.fake.APIURL() + "/repositories/acme/release/pullrequests/1/merge/task-status/t1"},
		Body:   `{"task_status":"PENDING","links":{"self":{"href":"task"}}}`}); err != nil {
		t.Fatal(err)
	}
	_, err = f.d.MergePR(ctx, testRepo, pr.Number, scm.MergeInput{SHA: pr.HeadSHA})
	var tr interface{ Transient() bool }
	var se *scm.Error
	if !errors.As(err, &tr) || !errors.As(err, &se) || se.Status != http.StatusAccepted {
		t.Fatalf("202 merge = %v, want a transient error", err)
	}
	got, err := f.d.MergePR(ctx, testRepo, pr.Number, scm.MergeInput{SHA: pr.HeadSHA})
	if err != nil || got.State != scm.PRMerged {
		t.Fatalf("asking again = %+v, %v", got, err)
	}
}

func TestSetStatusStates(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	for _, tt := range []struct {
		state  scm.StatusState
		native string
	}{{scm.StatusPending, "INPROGRESS"}, {scm.StatusSuccess, "SUCCESSFUL"}, {scm.StatusFailure, "FAILED"}, {scm.StatusError, "FAILED"}} {
		if err := f.d.SetStatus(ctx, testRepo, f.head, scm.Status{Context: "prflow/" + string(tt.state), State: tt.state}); err != nil {
			t.Fatal(err)
		}
		sts, err := f.fake.Statuses("acme", "release", f.head)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(sts, func(s scmtest.Status) bool { return s.Context == "prflow/"+string(tt.state) })
		if i < 0 || sts[i].Native != tt.native || sts[i].TargetURL == "" {
			t.Errorf("%s: statuses = %+v", tt.state, sts)
		}
	}
	if err := f.d.SetStatus(ctx, testRepo, f.head, scm.Status{Context: strings.Repeat("k", 41), State: scm.StatusPending}); err == nil {
		t.Error("over-long key accepted")
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
		{"401 direct request", func() error { _, err := bad.FindPR(ctx, testRepo, "a", "main"); return err }, scm.ErrUnauthorized, 401, "find PR a into main in acme/release"},
		{"404 invisible repo", func() error { return f.d.RepoExists(ctx, "other/secret") }, scm.ErrNotFound, 404, "get repository in other/secret"},
		{"404 PR", func() error { _, err := f.d.GetPR(ctx, testRepo, 999); return err }, scm.ErrNotFound, 404, "get PR #999 in acme/release"},
		{"400 PR without branch", func() error {
			_, err := f.d.OpenPR(ctx, testRepo, scm.NewPR{Title: "t", Head: "no-such", Base: "main"})
			return err
		}, nil, 400, "open PR no-such into main in acme/release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fake.ResetCalls()
			scmconformance.WantRefused(t, tt.call(), tt.status, tt.is, tt.msg)
			if n := scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Status == tt.status }); n != 1 {
				t.Errorf("%d answers with status %d, want 1", n, tt.status)
			}
		})
	}
}

func TestTransientFaultsAreRetried(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault scmtest.Fault
	}{
		{"503", scmtest.Fault{Method: "GET", Status: 503, Times: 2}},
		{"429", scmtest.Fault{Method: "GET", Status: 429, Times: 2, Header: map[string]string{"Retry-After": "0"}}},
		{"dropped", scmtest.Fault{Method: "GET", Drop: true, Times: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t)
			if err := f.fake.InjectFault(tt.fault); err != nil {
				t.Fatal(err)
			}
			got, err := f.d.ReadFile(context.Background(), testRepo, "main", "README.md")
			if err != nil || string(got) != "release repo\n" {
				t.Fatalf("ReadFile through faults = %q, %v", got, err)
			}
		})
	}
	t.Run("429 longer than the transport waits", func(t *testing.T) {
		f := setup(t)
		hc, err := transport.NewClient(transport.WithMaxWait(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(WithBaseURL(f.fake.APIURL()), WithToken(scmtest.DefaultToken), WithHTTPClient(hc))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.fake.RateLimitNext(1, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		_, err = d.ReadFile(context.Background(), testRepo, "main", "README.md")
		var rl *scm.RateLimitError
		if !errors.As(err, &rl) || rl.RetryAfter < 25*time.Second || rl.RetryAfter > 31*time.Second {
			t.Fatalf("err = %v, want a RateLimitError with RetryAfter of about 30s", err)
		}
	})
	t.Run("POST /src is never replayed", func(t *testing.T) {
		f := setup(t)
		if err := f.fake.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/src$`, Status: 502, Times: 1}); err != nil {
			t.Fatal(err)
		}
		_, err := f.d.Commit(context.Background(), testRepo, scm.CommitInput{Branch: "main", Parent: f.head, Message: "m",
			Changes: []scm.FileChange{{Path: "x", Content: []byte("x")}}})
		if !scm.Transient(err) {
			t.Fatalf("err = %v, want a transient 502", err)
		}
		if posts := scmtest.CountCalls(f.fake.Calls(), func(c scmtest.Call) bool { return c.Method == http.MethodPost }); posts != 1 {
			t.Errorf("POST /src sent %d times", posts)
		}
	})
}

func TestNoTokenInErrorsOrLogs(t *testing.T) {
	const secret = "ATCTT3xFfGN0SuperSecretAccessToken"
	b := scmtest.NewBitbucket(t, scmtest.WithToken(secret, "bot", "acme/release"))
	if _, err := b.CreateRepo("acme", "release", map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	d := newDriver(t, b, secret, logs)
	if err := b.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "/src/", Status: 400, Times: 1,
		Body: `{"type":"error","error":{"message":"bad token ` + secret + `"}}`}); err != nil {
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
	_, err = d.FindPR(ctx, "other/repo", "a", "main")
	add(err)
	if err := b.InjectFault(scmtest.Fault{Drop: true, Times: 10}); err != nil {
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
		b := scmtest.NewBitbucket(t)
		env := scmconformance.ForgeEnv(t, b.Forge, newDriver(t, b, scmtest.DefaultToken, &bytes.Buffer{}))
		env.FailEdits = func(t *testing.T) {
			if err := b.InjectFault(scmtest.Fault{Method: "PUT", PathPattern: `/comments/\d+$`, Status: 400,
				Body: `{"type":"error","error":{"message":"comment could not be saved"}}`}); err != nil {
				t.Fatal(err)
			}
		}
		return env
	})
}
