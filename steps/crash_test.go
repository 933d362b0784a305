package steps_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
)

// lossy wraps a provider and loses the answer of chosen calls, as when the worker dies or the
// connection drops at that point: "open" fails before the PR is opened, "merge" merges and then
// loses the answer. It counts commits and keeps the merge it made.
type lossy struct {
	scm.Provider
	mu        sync.Mutex
	loseOpen  int
	loseMerge int
	commits   int
	merged    *scm.PullRequest
}

func lostAnswer(p scm.Provider, op string, repo scm.Repo) error {
	return &scm.Error{Provider: p.Name(), Op: op, Repo: repo, Status: 502, Err: errors.New("connection reset (injected)")}
}

func (l *lossy) Commit(ctx context.Context, repo scm.Repo, in scm.CommitInput) (string, error) {
	sha, err := l.Provider.Commit(ctx, repo, in)
	if err == nil {
		l.mu.Lock()
		l.commits++
		l.mu.Unlock()
	}
	return sha, err
}

func (l *lossy) OpenPR(ctx context.Context, repo scm.Repo, in scm.NewPR) (*scm.PullRequest, error) {
	l.mu.Lock()
	lose := l.loseOpen > 0
	l.loseOpen--
	l.mu.Unlock()
	if lose {
		return nil, lostAnswer(l, "open PR", repo)
	}
	return l.Provider.OpenPR(ctx, repo, in)
}

func (l *lossy) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	pr, err := l.Provider.MergePR(ctx, repo, number, in)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.loseMerge > 0 {
		l.loseMerge--
		l.merged = pr
		return nil, lostAnswer(l, "merge PR", repo)
	}
	return pr, err
}

// openedPRs returns the number of the newest PR from head into main (0: none), on every forge.
func openedPRs(t *testing.T, p scm.Provider, head string) int {
	t.Helper()
	pr, err := p.FindPR(context.Background(), "acme/release", head, "main")
	if errors.Is(err, scm.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	// FindPR returns the newest; a second PR for the same head would have a higher number
	// than the one the step reported, which the caller checks.
	return pr.Number
}

// replicasPipeline is a pipeline whose stage s sets replicas in envs/prod/config.json to n,
// then runs the steps in more.
func replicasPipeline(name string, n int, more string) string {
	return fmt.Sprintf(`
name: %s
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: replicas, type: Number, value: "%d"}]}%s
`, name, n, more)
}

// succeeds runs src on fg with one worker and wants the run to succeed.
func succeeds(t *testing.T, fg forge, src string) (*ctltest.Env, *pipelines.Run) {
	t.Helper()
	e := env(t, fg, 1)
	r := e.Wait(e.Start(src, nil).ID, 90*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("%s %s\n%s", r.Status, r.Error, e.Logs.String())
	}
	return e, r
}

// The PR call is lost after the commit (as if the worker died between the two): the
// redelivered job finds its branch and commit and opens exactly one PR, with no second commit.
func TestLostBetweenCommitAndPR(t *testing.T) {
	t.Parallel()
	eachForge(t, func(t *testing.T, fg forge) {
		l := &lossy{Provider: fg.p, loseOpen: 1}
		fg.p = l
		e, r := succeeds(t, fg, replicasPipeline("crash", 5, ""))
		out := ctltest.Step(r, "s", "update").Outputs
		newest := openedPRs(t, fg.p, out["ref"].(string))
		if n, _ := out["prNumber"].(float64); int(n) != newest || newest == 0 {
			t.Errorf("the step reports PR #%v, the newest PR of its branch is #%d", out["prNumber"], newest)
		}
		if fg.f != nil {
			if prs, _ := fg.f.PullRequests("acme", "release"); len(prs) != 1 {
				t.Errorf("%d PRs after redelivery, want 1", len(prs))
			}
		}
		pr, err := fg.p.GetPR(context.Background(), "acme/release", newest)
		if err != nil || pr.HeadSHA != out["commitId"] {
			t.Errorf("PR head %v (%v), the step reports commit %v", pr, err, out["commitId"])
		}
		if l.commits != 1 {
			t.Errorf("%d commits; want one (the retry reuses it)", l.commits)
		}
		if !strings.Contains(e.Logs.String(), "branch already holds the changes") {
			t.Error("the retry did not reuse the earlier commit")
		}
	})
}

// The PR was merged by someone (or by an earlier attempt that died before reporting) before
// MergePR runs: MergePR reports the existing merge and does not merge again.
func TestMergeAfterCrashDoesNotMergeTwice(t *testing.T) {
	t.Parallel()
	eachForge(t, func(t *testing.T, fg forge) {
		e := env(t, fg, 1)
		src := replicasPipeline("merged", 6, `
      - {id: hold, type: Approval, with: {approvers: [tester2]}}
      - id: merge
        type: MergePR`)
		id := e.Start(src, nil).ID
		var pr int
		deadline := time.Now().Add(60 * time.Second)
		for pr == 0 && time.Now().Before(deadline) {
			cur, _ := e.Ctl.Get(context.Background(), id)
			if st := ctltest.Step(cur, "s", "hold"); st.Status == pipelines.StWaiting {
				pr = int(ctltest.Step(cur, "s", "update").Outputs["prNumber"].(float64))
			}
			time.Sleep(20 * time.Millisecond)
		}
		first, err := fg.p.MergePR(context.Background(), "acme/release", pr, scm.MergeInput{Method: scm.MergeCommit})
		if err != nil {
			t.Fatal(err)
		}
		if err := approve(e, id, "s", "hold"); err != nil {
			t.Fatal(err)
		}
		r := e.Wait(id, 60*time.Second)
		if r.Status != pipelines.StSucceeded || ctltest.Step(r, "s", "merge").Outputs["commitId"] != first.MergeSHA {
			t.Fatalf("%s %s %v (want merge %s)", r.Status, r.Error, ctltest.Step(r, "s", "merge").Outputs, first.MergeSHA)
		}
		// The step may try the merge (its first try needs no PR read); the forge refuses it
		// and main stays at the first merge.
		if head, err := fg.p.Branch(context.Background(), "acme/release", "main"); err != nil || head.SHA != first.MergeSHA {
			t.Errorf("main is at %s (%v), want the first merge %s", head.SHA, err, first.MergeSHA)
		}
	})
}

// MergePR merges, then the answer is lost (a dropped connection, or the worker died right
// after): MergePR, or its redelivery, reads the PR, finds it merged and reports that merge;
// nothing is merged twice.
func TestLostMergeAnswerDoesNotMergeTwice(t *testing.T) {
	t.Parallel()
	eachForge(t, func(t *testing.T, fg forge) {
		l := &lossy{Provider: fg.p, loseMerge: 1}
		fg.p = l
		_, r := succeeds(t, fg, replicasPipeline("lost", 7, `
      - id: merge
        type: MergePR`))
		if l.merged == nil {
			t.Fatal("the merge whose answer was to be lost did not happen")
		}
		if got := ctltest.Step(r, "s", "merge").Outputs["commitId"]; got != l.merged.MergeSHA {
			t.Errorf("MergePR reports %v, the merge made was %s", got, l.merged.MergeSHA)
		}
		if head, err := fg.p.Branch(context.Background(), "acme/release", "main"); err != nil || head.SHA != l.merged.MergeSHA {
			t.Errorf("main is at %s (%v), want the one merge %s", head.SHA, err, l.merged.MergeSHA)
		}
		if st := ctltest.Step(r, "s", "merge"); st.Attempt != 1 {
			t.Errorf("attempt %d: the redelivery should finish the same attempt", st.Attempt)
		}
	})
}
