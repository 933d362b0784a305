package steps_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// failing opens a PR, then fails: its MergePR names a PR that does not exist.
const failing = `
name: failing
%s
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: replicas, type: Number, value: "9"}]}
      - {id: merge, type: MergePR, with: {connector: release, repo: acme/release, prNumber: 9999}}
`

// waiting opens a PR and parks on an approval nobody gives; the test cancels it.
const waiting = `
name: waiting
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: replicas, type: Number, value: "8"}]}
      - {id: hold, type: Approval, with: {approvers: [nobody]}}
      - {id: merge, type: MergePR}
`

// comments returns the comments of PR n, from the fake forge or the local driver's records.
func comments(t *testing.T, fg forge, n int) []string {
	t.Helper()
	var out []string
	if fg.f == nil {
		cs, err := fg.p.(*local.Provider).Comments(context.Background(), "acme/release", n)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			out = append(out, c.Body)
		}
		return out
	}
	prs, _ := fg.f.PullRequests("acme", "release")
	for _, pr := range prs {
		if pr.Number == n {
			for _, c := range pr.Comments {
				out = append(out, c.Body)
			}
		}
	}
	return out
}

// cleanedUp waits until the PR of run's update step is closed and its branch gone (or, with
// keep, checks a while that they stay).
func cleanedUp(t *testing.T, e *ctltest.Env, fg forge, r *pipelines.Run, keep bool, why string) {
	t.Helper()
	out := ctltest.Step(r, "s", "update").Outputs
	if out == nil { // parked (waitForMerge) steps have none; these pipelines do not use it
		t.Fatalf("update step has no outputs: %+v", ctltest.Step(r, "s", "update"))
	}
	n := 0
	fmt.Sscan(fmt.Sprint(out["prNumber"]), &n)
	branch, _ := out["ref"].(string)
	deadline := time.Now().Add(30 * time.Second)
	if keep {
		deadline = time.Now().Add(3 * time.Second)
	}
	for {
		pr, err := fg.p.GetPR(context.Background(), "acme/release", n)
		if err != nil {
			t.Fatal(err)
		}
		bs, _ := fg.branches()
		_, present := bs[branch]
		done := pr.State == scm.PRClosed && !present
		if time.Now().After(deadline) {
			if keep {
				if pr.State != scm.PROpen || !present {
					t.Fatalf("keepFailedPRs: PR #%d is %s, branch present %v", n, pr.State, present)
				}
				return
			}
			t.Fatalf("PR #%d of the %s run is %s, its branch %s present: %v\n%s", n, why, pr.State, branch, present, tail(e.Logs.String()))
		}
		if done && !keep {
			break
		}
		if done && keep {
			t.Fatalf("keepFailedPRs ignored: PR #%d closed", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cs := comments(t, fg, n)
	if len(cs) != 1 || !strings.Contains(cs[0], r.ID) || !strings.Contains(cs[0], why) {
		t.Fatalf("PR #%d comments %q: want one naming run %s and %q", n, cs, r.ID, why)
	}
}

// A run that fails or is cancelled leaves no open PR and no branch behind, on every forge; the
// PR gets a comment naming the run and the reason. cleanup.keepFailedPRs keeps them.
func TestFailedAndCancelledRunsLeaveNoDebris(t *testing.T) {
	t.Parallel()
	eachForge(t, func(t *testing.T, fg forge) {
		e := env(t, fg, 1)
		r := e.Wait(e.Start(fmt.Sprintf(failing, ""), nil).ID, 60*time.Second)
		if r.Status != pipelines.StFailed {
			t.Fatalf("run %s: %s", r.Status, r.Error)
		}
		cleanedUp(t, e, fg, r, false, "failed")

		started := e.Start(waiting, nil)
		deadline := time.Now().Add(30 * time.Second)
		for {
			cur, _ := e.Ctl.Get(context.Background(), started.ID)
			if st := ctltest.Step(cur, "s", "hold"); st != nil && st.Status == pipelines.StWaiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("approval never parked")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := e.Ctl.Cancel(context.Background(), started.ID, "tester"); err != nil {
			t.Fatal(err)
		}
		r = e.Wait(started.ID, 30*time.Second)
		if r.Status != pipelines.StCancelled {
			t.Fatalf("cancelled run: %s", r.Status)
		}
		cleanedUp(t, e, fg, r, false, "cancelled by tester")

		r = e.Wait(e.Start(fmt.Sprintf(failing, "cleanup: {keepFailedPRs: true}"), nil).ID, 60*time.Second)
		if r.Status != pipelines.StFailed {
			t.Fatalf("run %s: %s", r.Status, r.Error)
		}
		cleanedUp(t, e, fg, r, true, "failed")
	})
}

// A pipeline's cleanup block is checked at load: an unknown key is refused with its line.
func TestCleanupOptionIsChecked(t *testing.T) {
	_, err := pipelines.Load("p.yaml", []byte("name: p\ncleanup: {keepFailedPR: true}\nstages:\n  - id: s\n    steps:\n      - {id: n, type: Noop}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "cleanup.keepFailedPR") {
		t.Fatalf("want an error naming cleanup.keepFailedPR, got %v", err)
	}
	p, err := pipelines.Load("p.yaml", []byte("name: p\ncleanup: {keepFailedPRs: true}\nstages:\n  - id: s\n    steps:\n      - {id: n, type: Noop}\n"), nil)
	if err != nil || p.Cleanup == nil || !p.Cleanup.KeepFailedPRs {
		t.Fatalf("keepFailedPRs not loaded: %v %+v", err, p)
	}
}

// noPR pushes its branch and then cannot open its PR: the forge refuses it (422).
const noPR = `
name: nopr
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: replicas, type: Number, value: "7"}]}
`

// refusePRs makes the forge refuse every PR creation terminally. The local driver opens a PR
// with a push of its own after the branch's: the git server refuses the first push after the
// work branch appeared.
func refusePRs(t *testing.T, fg forge) {
	t.Helper()
	if fg.f != nil {
		if err := fg.f.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/(pulls|merge_requests|pullrequests)/?$`, Status: 422,
			Body: `{"message":"Validation Failed: refused by the test","error":{"message":"refused by the test"}}`}); err != nil {
			t.Fatal(err)
		}
		return
	}
	var once sync.Once
	cancel := fg.git.OnRefUpdate(func(u scmtest.RefUpdate) {
		if strings.HasPrefix(u.Ref, "refs/heads/prflow/nopr/") && u.After != "" {
			once.Do(func() {
				_ = fg.git.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `git-receive-pack$`, Status: 403, Times: 1, Body: "refused by the test"})
			})
		}
	})
	t.Cleanup(cancel)
}

// A run whose release step pushed its branch and failed before it opened a PR leaves no
// branch behind (invariant 5), on every forge; branches prflow did not push for this run
// (someone's feature branch, another run's work branch) stay.
func TestFailedRunBeforePRLeavesNoBranch(t *testing.T) {
	t.Parallel()
	eachForge(t, func(t *testing.T, fg forge) {
		e := env(t, fg, 1)
		bs, err := fg.branches()
		if err != nil {
			t.Fatal(err)
		}
		main := bs["main"]
		others := []string{"feature/keep-me", "prflow/nopr/r000000000000other/s-update"}
		for _, b := range others {
			if err := fg.p.CreateBranch(context.Background(), "acme/release", b, main); err != nil {
				t.Fatalf("create %s: %v", b, err)
			}
		}
		refusePRs(t, fg)
		r := e.Wait(e.Start(noPR, nil).ID, 60*time.Second)
		if r.Status != pipelines.StFailed {
			t.Fatalf("run %s: %s", r.Status, r.Error)
		}
		branch := steps.WorkBranch("UpdateReleaseRepo", r.Pipeline, r.ID, "s", "update")
		if !strings.Contains(r.Error, "open PR "+branch) {
			t.Fatalf("the run failed for another reason than the refused PR: %s", r.Error)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			bs, err := fg.branches()
			if err != nil {
				t.Fatal(err)
			}
			if _, present := bs[branch]; !present {
				for _, b := range others {
					if _, ok := bs[b]; !ok {
						t.Fatalf("cleanup deleted %s, which this run did not push", b)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the failed run's branch %s is still there: %v\n%s", branch, bs, tail(e.Logs.String()))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if fg.f != nil {
			if prs, _ := fg.f.PullRequests("acme", "release"); len(prs) != 0 {
				t.Errorf("PRs: %+v", prs)
			}
		}
	})
}

// The cleanup job deletes only branches under its own run's prefix: a job naming main,
// someone's branch or another run's work branch is refused and deletes nothing; a branch of
// its own run is deleted, and one already gone is nothing to do.
func TestCleanupDeletesOnlyItsRunsBranches(t *testing.T) {
	t.Parallel()
	fg := forges(t)[0]
	ctx := context.Background()
	bs, err := fg.branches()
	if err != nil {
		t.Fatal(err)
	}
	own := steps.WorkBranch("RevertPR", "p", "r1", "s", "revert")
	if !strings.HasPrefix(own, steps.RunBranchPrefix("p", "r1")) || !strings.HasSuffix(own, "-revert") {
		t.Fatalf("RevertPR work branch %q", own)
	}
	foreign := []string{"main", "feature/x", steps.WorkBranch("UpdateReleaseRepo", "p", "r10", "s", "u"), "prflow/p/r1", steps.RunBranchPrefix("p", "r1")}
	for _, b := range append([]string{own}, foreign[1:3]...) {
		if err := fg.p.CreateBranch(ctx, "acme/release", b, bs["main"]); err != nil {
			t.Fatalf("create %s: %v", b, err)
		}
	}
	def, ok := steps.Default.Lookup(steps.TypeCleanup)
	if !ok {
		t.Fatal("no Cleanup step")
	}
	run := func(branches ...string) (steps.Result, error) {
		var list []any
		for _, b := range branches {
			list = append(list, map[string]any{"connector": "release", "repo": "acme/release", "branch": b, "baseBranch": "main", "step": "s.revert"})
		}
		sc := &steps.Context{RunID: "r1", Pipeline: "p", Stage: pipelines.CleanupStage, StepID: "cleanup", Type: steps.TypeCleanup,
			Inputs: map[string]any{"branches": list, "reason": "failed"}, Log: slog.New(slog.DiscardHandler),
			Services: steps.NewServices(map[string]any{steps.ServiceSCM: connector.Static{"release": fg.p}})}
		return def.New().Run(ctx, sc)
	}
	for _, b := range foreign {
		res, err := run(b)
		if err != nil || res.Status != steps.Failed || !strings.Contains(res.Message, "is not a work branch of run r1") {
			t.Errorf("branch %q: %v %+v", b, err, res)
		}
	}
	after, _ := fg.branches()
	for _, b := range foreign[:3] {
		if _, ok := after[b]; !ok {
			t.Errorf("%s was deleted", b)
		}
	}
	res, err := run(own)
	if err != nil || res.Status != steps.Succeeded || fmt.Sprint(res.Outputs["deletedBranches"]) != "["+own+"]" {
		t.Fatalf("own branch: %v %+v", err, res)
	}
	if after, _ := fg.branches(); after[own] != "" {
		t.Fatalf("%s still there", own)
	}
	if res, err := run(own); err != nil || res.Status != steps.Succeeded || len(res.Outputs["deletedBranches"].([]any)) != 0 {
		t.Fatalf("again: %v %+v", err, res)
	}
	// A step that opened its PR and died before it said so: the PR found on its branch is
	// closed with a comment and the branch deleted.
	opened := steps.WorkBranch("UpdateReleaseRepo", "p", "r1", "s", "u")
	if err := fg.p.CreateBranch(ctx, "acme/release", opened, bs["main"]); err != nil {
		t.Fatal(err)
	}
	if _, err := fg.p.Commit(ctx, "acme/release", scm.CommitInput{Branch: opened, Parent: bs["main"], Message: "x",
		Changes: []scm.FileChange{{Path: "envs/prod/config.json", Content: []byte("{\"replicas\": 5}\n")}}}); err != nil {
		t.Fatal(err)
	}
	pr, err := fg.p.OpenPR(ctx, "acme/release", scm.NewPR{Title: "t", Head: opened, Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = run(opened)
	if err != nil || res.Status != steps.Succeeded || fmt.Sprint(res.Outputs["deletedBranches"]) != "["+opened+"]" {
		t.Fatalf("branch with an unreported PR: %v %+v", err, res)
	}
	if got, _ := fg.p.GetPR(ctx, "acme/release", pr.Number); got.State != scm.PRClosed {
		t.Errorf("PR #%d is %s", pr.Number, got.State)
	}
	if cs := comments(t, fg, pr.Number); len(cs) != 1 || !strings.Contains(cs[0], "prflow run r1") {
		t.Errorf("comments %q", cs)
	}
	if after, _ := fg.branches(); after[opened] != "" {
		t.Errorf("%s still there", opened)
	}
}

// TestCleanupRefusesMalformedJob: a cleanup job whose inputs have the wrong shape fails naming
// the input, rather than reporting success having cleared up nothing (prs not a list) or
// deleting what keepFailedPRs meant to keep (a flag that is not a boolean).
func TestCleanupRefusesMalformedJob(t *testing.T) {
	def, ok := steps.Default.Lookup(steps.TypeCleanup)
	if !ok {
		t.Fatal("no Cleanup step")
	}
	pr := map[string]any{"connector": "release", "repo": "acme/release", "prNumber": 1, "step": "s.u"}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"prs": "acme/release#1", "reason": "failed"}, "prs: want a list"},
		{map[string]any{"prs": []any{pr}, "keepFailedPRs": "maybe"}, "keepFailedPRs: want true or false"},
		{map[string]any{"prs": []any{pr}, "keepFailedPR": true}, "keepFailedPR: unknown input"},
	} {
		sc := &steps.Context{RunID: "r1", Pipeline: "p", Stage: pipelines.CleanupStage, StepID: "cleanup", Type: steps.TypeCleanup,
			Inputs: c.in, Log: slog.New(slog.DiscardHandler)}
		res, err := def.New().Run(t.Context(), sc)
		if err != nil || res.Status != steps.Failed || !strings.Contains(res.Message, c.want) {
			t.Errorf("%v: %v %+v, want a failure with %q", c.in, err, res, c.want)
		}
	}
}
