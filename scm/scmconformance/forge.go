package scmconformance

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

// ForgeEnv is the Env of driver d against fake, one of the scmtest fake forges (GitHub, GitLab,
// Bitbucket): it creates acme/release with two files on main and sets every hook the fakes
// serve alike. Callers add what differs by forge (FailEdits, Settle).
func ForgeEnv(t *testing.T, fake *scmtest.Forge, d scm.Provider) Env {
	t.Helper()
	files := map[string]string{"envs/dev/config.json": "{\"image\": \"v1\"}\n", "envs/prod/values.yaml": "image: v1\n"}
	if _, err := fake.CreateRepo("acme", "release", files); err != nil {
		t.Fatal(err)
	}
	env := Env{
		Provider: d, Repo: "acme/release", Base: "main", Files: files,
		CommentAs: func(t *testing.T, n int, body string) string {
			c, err := fake.AddComment("acme", "release", n, "someone-else", body)
			if err != nil {
				t.Fatal(err)
			}
			return strconv.FormatInt(c.ID, 10)
		},
		RefuseComments: func(t *testing.T, n int) {
			if err := fake.LockConversation("acme", "release", n, true); err != nil {
				t.Fatal(err)
			}
		},
		Comments: func(t *testing.T, n int) []string {
			out, err := fake.CommentBodies("acme", "release", n)
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
		Statuses: func(t *testing.T, sha string) []scm.Status {
			sts, err := fake.Statuses("acme", "release", sha)
			if err != nil {
				t.Fatal(err)
			}
			var out []scm.Status
			for _, s := range sts {
				out = append(out, scm.Status{Context: s.Context, State: scm.StatusState(s.State), Description: s.Description, TargetURL: s.TargetURL})
			}
			return out
		},
	}
	env.CommitVia(fake.Git())
	return env
}

// CommitVia sets CommitDirect and CommitOrphan to commit to the Env's Repo on srv, the git
// server behind the provider, as another user pushing would.
func (e *Env) CommitVia(srv *scmtest.GitServer) {
	owner, name, _ := strings.Cut(string(e.Repo), "/")
	e.CommitDirect = func(t *testing.T, branch string, files map[string]string, deletes []string) string {
		t.Helper()
		sha, err := srv.Commit(owner, name, branch, files, deletes, "direct commit")
		if err != nil {
			t.Fatal(err)
		}
		return sha
	}
	e.CommitOrphan = func(t *testing.T, branch string, files map[string]string) string {
		t.Helper()
		sha, err := srv.CommitOrphan(owner, name, branch, files, "unrelated history")
		if err != nil {
			t.Fatal(err)
		}
		return sha
	}
}

// SettleMergeability is a Settle for forges that compute mergeability in the background: it
// reads PR number through p until its mergeability is known or it is no longer open (50
// reads at most). what names a PR in the failure ("PR #" on GitHub, "MR !" on GitLab).
func SettleMergeability(p scm.Provider, repo scm.Repo, what string) func(t *testing.T, number int) {
	return func(t *testing.T, n int) {
		for range 50 {
			pr, err := p.GetPR(context.Background(), repo, n)
			if err != nil {
				t.Fatal(err)
			}
			if pr.Mergeability != scm.MergeUnknown || pr.State != scm.PROpen {
				return
			}
		}
		t.Fatalf("%s%d mergeability stayed unknown", what, n)
	}
}

// WantRefused checks err from a call the forge refused with status for good (a bad token, a
// missing repo, a bad request): a *scm.Error with that status, matching is (when set), naming
// the call as msg does, and not transient.
func WantRefused(t *testing.T, err error, status int, is error, msg string) {
	t.Helper()
	var se *scm.Error
	if !errors.As(err, &se) || se.Status != status {
		t.Fatalf("err = %v, want *scm.Error with status %d", err, status)
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("err = %v, want %v", err, is)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("err = %q, want it to contain %q", err, msg)
	}
	if scm.Transient(err) {
		t.Errorf("%v must not be transient", err)
	}
}

// WantSecretHidden checks what a driver said while its calls failed: no error in errs and no
// line of logs holds secret, and errs[0], a forge answer that echoed the secret, shows
// [REDACTED] in its place.
func WantSecretHidden(t *testing.T, secret string, errs []error, logs string) {
	t.Helper()
	for _, e := range errs {
		if strings.Contains(e.Error(), secret) {
			t.Errorf("error leaks the token: %v", e)
		}
	}
	if len(errs) > 0 && !strings.Contains(errs[0].Error(), "[REDACTED]") {
		t.Errorf("echoed token not redacted: %v", errs[0])
	}
	if strings.Contains(logs, secret) {
		t.Errorf("logs leak the token:\n%s", logs)
	}
}
