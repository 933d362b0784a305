package steps_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

// The PR call's connection drops after the commit (as if the worker died between the two):
// the redelivered job finds its branch and commit and opens exactly one PR.
func TestLostBetweenCommitAndPR(t *testing.T) {
	fg := forges(t)[0]
	if err := fg.f.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/pulls$`, Drop: true, Times: 1}); err != nil {
		t.Fatal(err)
	}
	e := env(t, fg, 1)
	src := `
name: crash
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: replicas, type: Number, value: "5"}]}
`
	r := e.Wait(e.Start(src, nil).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("%s %s", r.Status, r.Error)
	}
	prs, _ := fg.f.PullRequests("acme", "release")
	if len(prs) != 1 {
		t.Fatalf("%d PRs after redelivery, want 1", len(prs))
	}
	commits, pulls := 0, 0
	for _, c := range fg.f.Calls() {
		if c.Method == "POST" && strings.HasSuffix(c.Path, "/git/commits") {
			commits++
		}
		if c.Method == "POST" && strings.HasSuffix(c.Path, "/pulls") {
			pulls++
		}
	}
	if commits != 1 || pulls != 2 {
		t.Errorf("commits=%d PR calls=%d; want one commit, and the PR call retried once", commits, pulls)
	}
	if !strings.Contains(e.Logs.String(), "branch already holds the changes") {
		t.Error("the retry did not reuse the earlier commit")
	}
}

// The PR was merged by an earlier attempt that died before reporting: MergePR reports the
// existing merge and does not merge again.
func TestMergeAfterCrashDoesNotMergeTwice(t *testing.T) {
	fg := forges(t)[0]
	e := env(t, fg, 1)
	src := `
name: merged
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: replicas, type: Number, value: "6"}]}
      - {id: hold, type: Approval, with: {approvers: [tester2]}}
      - id: merge
        type: MergePR
`
	id := e.Start(src, nil).ID
	var pr int
	deadline := time.Now().Add(30 * time.Second)
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
	fg.f.ResetCalls()
	if err := approve(e, id, "s", "hold"); err != nil {
		t.Fatal(err)
	}
	r := e.Wait(id, 30*time.Second)
	if r.Status != pipelines.StSucceeded || ctltest.Step(r, "s", "merge").Outputs["commitId"] != first.MergeSHA {
		t.Fatalf("%s %s %v (want merge %s)", r.Status, r.Error, ctltest.Step(r, "s", "merge").Outputs, first.MergeSHA)
	}
	// The step may try the merge (its first try needs no PR read); the forge must refuse it
	// and main must still be at the first merge.
	for _, c := range fg.f.Calls() {
		if c.Method == "PUT" && strings.HasSuffix(c.Path, "/merge") && c.Status < 300 {
			t.Errorf("merged a second time: %s %s → %d", c.Method, c.Path, c.Status)
		}
	}
	if head, err := fg.p.Branch(context.Background(), "acme/release", "main"); err != nil || head.SHA != first.MergeSHA {
		t.Errorf("main is at %s (%v), want the first merge %s", head.SHA, err, first.MergeSHA)
	}
}
