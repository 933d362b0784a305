package github

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/scm/transport"
)

func TestConformance(t *testing.T) {
	scmconformance.Run(t, func(t *testing.T) scmconformance.Env {
		files := map[string]string{"envs/dev/config.json": "{\"image\": \"v1\"}\n", "envs/prod/values.yaml": "image: v1\n"}
		g := scmtest.NewGitHub(t)
		if _, err := g.CreateRepo("acme", "release", files); err != nil {
			t.Fatal(err)
		}
		hc, err := transport.NewClient(transport.WithProvider(Name, "conformance"), transport.WithSecrets(scmtest.DefaultToken),
			transport.WithBackoff(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(WithBaseURL(g.APIURL()), WithToken(scmtest.DefaultToken), WithHTTPClient(hc))
		if err != nil {
			t.Fatal(err)
		}
		return scmconformance.Env{
			Provider: d, Repo: testRepo, Base: "main", Files: files,
			CommitDirect: func(t *testing.T, branch string, files map[string]string, deletes []string) string {
				sha, err := g.Git().Commit("acme", "release", branch, files, deletes, "direct commit")
				if err != nil {
					t.Fatal(err)
				}
				return sha
			},
			CommitOrphan: func(t *testing.T, branch string, files map[string]string) string {
				sha, err := g.Git().CommitOrphan("acme", "release", branch, files, "unrelated history")
				if err != nil {
					t.Fatal(err)
				}
				return sha
			},
			Settle: func(t *testing.T, n int) {
				for range 50 {
					pr, err := d.GetPR(context.Background(), testRepo, n)
					if err != nil {
						t.Fatal(err)
					}
					if pr.Mergeability != scm.MergeUnknown || pr.State != scm.PROpen {
						return
					}
				}
				t.Fatalf("PR #%d mergeability stayed unknown", n)
			},
			CommentAs: func(t *testing.T, n int, body string) string {
				c, err := g.AddComment("acme", "release", n, "someone-else", body)
				if err != nil {
					t.Fatal(err)
				}
				return strconv.FormatInt(c.ID, 10)
			},
			RefuseComments: func(t *testing.T, n int) {
				if err := g.LockConversation("acme", "release", n, true); err != nil {
					t.Fatal(err)
				}
			},
			FailEdits: func(t *testing.T) {
				if err := g.InjectFault(scmtest.Fault{Method: "PATCH", PathPattern: `/issues/comments/\d+$`, Status: 422,
					Body: `{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"custom","message":"body could not be saved"}]}`}); err != nil {
					t.Fatal(err)
				}
			},
			Comments: func(t *testing.T, n int) []string {
				pr, err := g.PullRequest("acme", "release", n)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, c := range pr.Comments {
					out = append(out, c.Body)
				}
				return out
			},
			Statuses: func(t *testing.T, sha string) []scm.Status {
				sts, err := g.Statuses("acme", "release", sha)
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
	})
}
