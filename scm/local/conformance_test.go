package local_test

import (
	"slices"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmconformance"
	"github.com/prflow/prflow/scm/scmtest"
)

var seedFiles = map[string]string{
	"envs/dev/config.json":  "{\n  \"image\": \"v1\"\n}\n",
	"envs/prod/config.json": "{\n  \"image\": \"v1\"\n}\n",
	"README.md":             "release repo\n",
}

// newEnv serves acme/release over smart HTTP; overHTTP=false points the driver at the bare
// repositories on disk instead.
func newEnv(t *testing.T, overHTTP bool) scmconformance.Env {
	srv := scmtest.NewGitServer(t)
	if _, err := srv.CreateRepo("acme", "release", seedFiles); err != nil {
		t.Fatal(err)
	}
	eng := gitengine.New(gitengine.WithBasicAuth("x-access-token", scmtest.DefaultToken), gitengine.WithTempDir(t.TempDir()))
	base := srv.URL()
	if !overHTTP {
		base = srv.Root()
	}
	p, err := local.New(base, local.WithEngine(eng), local.WithIdentity(scm.Signature{Name: "prflow", Email: "prflow@example.com"}))
	if err != nil {
		t.Fatal(err)
	}
	// other comments on the same repositories as another user.
	other, err := local.New(base, local.WithEngine(eng), local.WithIdentity(scm.Signature{Name: "someone-else", Email: "else@example.com"}))
	if err != nil {
		t.Fatal(err)
	}
	env := scmconformance.Env{
		Provider: p, Repo: "acme/release", Base: "main", Files: seedFiles,
		Comments: func(t *testing.T, n int) []string {
			t.Helper()
			cs, err := p.Comments(t.Context(), "acme/release", n)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, c := range cs {
				out = append(out, c.Body)
			}
			return out
		},
		Statuses: func(t *testing.T, sha string) []scm.Status {
			t.Helper()
			st, err := p.Statuses(t.Context(), "acme/release", sha)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		CommentAs: func(t *testing.T, n int, body string) string {
			t.Helper()
			if err := other.Comment(t.Context(), "acme/release", n, body); err != nil {
				t.Fatal(err)
			}
			cs, err := other.ListComments(t.Context(), "acme/release", n)
			if err != nil {
				t.Fatal(err)
			}
			return cs[len(cs)-1].ID
		},
	}
	env.CommitVia(srv)
	if overHTTP {
		// The record of every PR is pushed; a failing push fails the edit.
		env.FailEdits = func(t *testing.T) {
			if err := srv.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/git-receive-pack$`, Status: 500}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return env
}

// TestConformanceOverHTTP runs the full suite but CommentRefused: the local driver keeps no
// permissions, so nothing refuses a comment.
func TestConformanceOverHTTP(t *testing.T) {
	cases := slices.DeleteFunc(scmconformance.Cases(), func(c string) bool { return c == "CommentRefused" })
	scmconformance.RunCases(t, func(t *testing.T) scmconformance.Env { return newEnv(t, true) }, cases...)
}

// TestConformanceOnDisk runs representative cases against the bare repositories as a
// directory (go-git's file transport); the full suite runs over HTTP above.
func TestConformanceOnDisk(t *testing.T) {
	scmconformance.RunCases(t, func(t *testing.T) scmconformance.Env { return newEnv(t, false) },
		"ReadFile", "CreateBranch", "CommitMultiFile", "CommitStaleParent", "OpenGetFindPR",
		"MergeMethods", "MergeConflict", "RevertMergeCommit", "Status")
}
