package steps

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
	"github.com/prflow/prflow/scm/scmtest"
)

// promotionCalls runs one fresh UpdateReleaseRepo (one key in one file) and its MergePR
// against a forge fake and returns the API calls each made, as "METHOD path" with the repo
// prefix, SHAs and the work branch replaced by placeholders.
func promotionCalls(t *testing.T, f *scmtest.Forge, p scm.Provider) (update, merge []string) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	services := NewServices(map[string]any{ServiceSCM: oneSCM{p}})
	f.ResetCalls()
	sc := &Context{RunID: "r1", Pipeline: "p", Stage: "s", StepID: "u", Attempt: 1, Delivery: 1, Log: log, Services: services,
		Inputs: map[string]any{"connector": "c", "repo": "acme/release", "filePath": "envs/prod/config.json",
			"variables": []any{map[string]any{"name": "replicas", "type": "Number", "value": "3"}}}}
	res, err := runUpdateReleaseRepo(ctx, sc)
	if err != nil || res.Status != Succeeded {
		t.Fatalf("UpdateReleaseRepo: %v %+v", err, res)
	}
	update = normalise(f.Calls())
	f.ResetCalls()
	sc = &Context{RunID: "r1", Pipeline: "p", Stage: "s", StepID: "m", Attempt: 1, Delivery: 1, Log: log, Services: services,
		Inputs: map[string]any{}, Priors: []Prior{{ID: "u", Type: "UpdateReleaseRepo", Outputs: res.Outputs}}}
	res2, err := runMergePR(ctx, sc)
	if err != nil || res2.Status != Succeeded {
		t.Fatalf("MergePR: %v %+v", err, res2)
	}
	merge = normalise(f.Calls())
	got, err := p.ReadFile(ctx, "acme/release", fmt.Sprint(res2.Outputs["commitId"]), "envs/prod/config.json")
	if err != nil || !strings.Contains(string(got), `"replicas": 3`) {
		t.Fatalf("merge commit %v does not hold the change: %v %s", res2.Outputs["commitId"], err, got)
	}
	return update, merge
}

var (
	shaRe    = regexp.MustCompile(`[0-9a-f]{40}|[0-9a-f]{12}(\.\.[0-9a-f]{12})?`)
	repoPart = regexp.MustCompile(`^/(api/v3/repos|api/v4/projects|2\.0/repositories)/acme(/|%2F)release`)
)

func normalise(calls []scmtest.Call) []string {
	out := make([]string, 0, len(calls))
	for _, c := range calls {
		p, err := url.PathUnescape(c.Path)
		if err != nil {
			p = c.Path
		}
		p = repoPart.ReplaceAllString(p, "")
		p = strings.ReplaceAll(p, "prflow/p/r1/s-u", "BRANCH")
		p = shaRe.ReplaceAllString(p, "SHA")
		out = append(out, c.Method+" "+p)
	}
	return out
}

func fakeRepo(t *testing.T, f *scmtest.Forge) {
	t.Helper()
	if _, err := f.CreateRepo("acme", "release", map[string]string{"envs/prod/config.json": "{\n  \"replicas\": 2\n}\n"}); err != nil {
		t.Fatal(err)
	}
}

// TestPromotionAPICalls is the regression guard for the cost of a fresh promotion
// (UpdateReleaseRepo + MergePR) on each forge: the exact calls, in order.
func TestPromotionAPICalls(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		setup         func(t *testing.T) (*scmtest.Forge, scm.Provider)
		update, merge []string
	}{
		{"github", func(t *testing.T) (*scmtest.Forge, scm.Provider) {
			gh := scmtest.NewGitHub(t)
			fakeRepo(t, gh.Forge)
			p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
			if err != nil {
				t.Fatal(err)
			}
			return gh.Forge, p
		}, []string{
			"GET /branches/main",                  // base head and its tree
			"GET /contents/envs/prod/config.json", // the file, at the base head
			"POST /git/trees",                     // new tree on the base tree
			"POST /git/commits",                   // the commit
			"POST /git/refs",                      // the work branch, created at the commit
			"POST /pulls",                         // the PR
		}, []string{
			"PUT /pulls/1/merge", // guarded by the head SHA UpdateReleaseRepo reported
		}},
		{"gitlab", func(t *testing.T) (*scmtest.Forge, scm.Provider) {
			gl := scmtest.NewGitLab(t)
			fakeRepo(t, gl.Forge)
			p, err := gitlab.New(gitlab.WithBaseURL(gl.APIURL()), gitlab.WithToken(scmtest.DefaultToken))
			if err != nil {
				t.Fatal(err)
			}
			return gl.Forge, p
		}, []string{
			"GET /repository/branches/main",
			"GET /repository/files/envs/prod/config.json", // also tells the commit create or update
			"POST /repository/commits",                    // creates the work branch from start_sha
			"POST /merge_requests",
		}, []string{
			"PUT /merge_requests/1/merge",
		}},
		{"bitbucket", func(t *testing.T) (*scmtest.Forge, scm.Provider) {
			bb := scmtest.NewBitbucket(t)
			fakeRepo(t, bb.Forge)
			p, err := bitbucket.New(bitbucket.WithBaseURL(bb.APIURL()), bitbucket.WithToken(scmtest.DefaultToken))
			if err != nil {
				t.Fatal(err)
			}
			return bb.Forge, p
		}, []string{
			"GET /refs/branches/main",
			"GET /src/SHA/envs/prod/config.json",
			"POST /src", // creates the work branch at parents=base
			"POST /pullrequests/",
			"GET /commit/SHA", // the full head SHA (Bitbucket answers with 12 characters)
		}, []string{
			"GET /pullrequests/1", // head-SHA guard (the merge API has none)
			"POST /pullrequests/1/merge",
			"GET /commit/SHA", // the full merge SHA
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, p := c.setup(t)
			update, merge := promotionCalls(t, f, p)
			t.Logf("%s: %d calls\n  UpdateReleaseRepo:\n    %s\n  MergePR:\n    %s", c.name, len(update)+len(merge),
				strings.Join(update, "\n    "), strings.Join(merge, "\n    "))
			if strings.Join(update, "\n") != strings.Join(c.update, "\n") || strings.Join(merge, "\n") != strings.Join(c.merge, "\n") {
				t.Errorf("calls changed:\n  update %q\n  merge  %q\nwant\n  update %q\n  merge  %q", update, merge, c.update, c.merge)
			}
			if len(update)+len(merge) > 8 {
				t.Errorf("a %s promotion costs %d API calls; the budget is 8", c.name, len(update)+len(merge))
			}
		})
	}
}

// TestFirstDeliveryFindsEarlierBranch: a job that looks like a first delivery (a controller
// re-sent it after a crash, so the queue's delivery count starts again) while an earlier run
// already committed to the work branch. The commit conflicts on the branch, the step finds the
// earlier commit and opens exactly one PR with it, on every forge fake.
func TestFirstDeliveryFindsEarlierBranch(t *testing.T) {
	t.Parallel()
	setups := map[string]func(t *testing.T) (*scmtest.Forge, scm.Provider){
		"github": func(t *testing.T) (*scmtest.Forge, scm.Provider) {
			gh := scmtest.NewGitHub(t)
			fakeRepo(t, gh.Forge)
			p, _ := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
			return gh.Forge, p
		},
		"gitlab": func(t *testing.T) (*scmtest.Forge, scm.Provider) {
			gl := scmtest.NewGitLab(t)
			fakeRepo(t, gl.Forge)
			p, _ := gitlab.New(gitlab.WithBaseURL(gl.APIURL()), gitlab.WithToken(scmtest.DefaultToken))
			return gl.Forge, p
		},
		"bitbucket": func(t *testing.T) (*scmtest.Forge, scm.Provider) {
			bb := scmtest.NewBitbucket(t)
			fakeRepo(t, bb.Forge)
			p, _ := bitbucket.New(bitbucket.WithBaseURL(bb.APIURL()), bitbucket.WithToken(scmtest.DefaultToken))
			return bb.Forge, p
		},
	}
	for _, name := range []string{"github", "gitlab", "bitbucket"} {
		t.Run(name, func(t *testing.T) {
			f, p := setups[name](t)
			ctx := context.Background()
			var logs strings.Builder
			log := slog.New(slog.NewTextHandler(&logs, nil))
			base, err := p.Branch(ctx, "acme/release", "main")
			if err != nil {
				t.Fatal(err)
			}
			// The earlier run's commit: the same edit, on the work branch.
			earlier, err := p.Commit(ctx, "acme/release", scm.CommitInput{Branch: "prflow/p/r1/s-u", Parent: base.SHA, Message: "earlier",
				Changes: []scm.FileChange{{Path: "envs/prod/config.json", Content: []byte("{\n  \"replicas\": 3\n}\n")}}})
			if err != nil {
				t.Fatal(err)
			}
			// main moves on meanwhile, so a fresh commit would differ from the earlier one.
			if _, err := p.Commit(ctx, "acme/release", scm.CommitInput{Branch: "main", Parent: base.SHA, Message: "other",
				Changes: []scm.FileChange{{Path: "README.md", Content: []byte("moved\n")}}}); err != nil {
				t.Fatal(err)
			}
			sc := &Context{RunID: "r1", Pipeline: "p", Stage: "s", StepID: "u", Attempt: 1, Delivery: 1, Log: log,
				Services: NewServices(map[string]any{ServiceSCM: oneSCM{p}}),
				Inputs: map[string]any{"connector": "c", "repo": "acme/release", "filePath": "envs/prod/config.json",
					"variables": []any{map[string]any{"name": "replicas", "type": "Number", "value": "3"}}}}
			res, err := runUpdateReleaseRepo(ctx, sc)
			if err != nil || res.Status != Succeeded {
				t.Fatalf("%v %+v\n%s", err, res, logs.String())
			}
			if res.Outputs["commitId"] != earlier {
				t.Errorf("commitId %v, want the earlier commit %s", res.Outputs["commitId"], earlier)
			}
			if head, _ := p.Branch(ctx, "acme/release", "prflow/p/r1/s-u"); head.SHA != earlier {
				t.Errorf("work branch moved to %s", head.SHA)
			}
			prs, _ := f.PullRequests("acme", "release")
			if len(prs) != 1 || prs[0].HeadSHA != earlier {
				t.Errorf("PRs %+v, want one, at the earlier commit", prs)
			}
			if !strings.Contains(logs.String(), "the work branch exists already") {
				t.Errorf("the step did not take the recovering path:\n%s", logs.String())
			}
		})
	}
}
