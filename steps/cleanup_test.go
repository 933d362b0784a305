package steps_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/local"
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
func cleanedUp(t *testing.T, fg forge, r *pipelines.Run, keep bool, why string) {
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
			t.Fatalf("PR #%d of the %s run is %s, its branch %s present: %v\n%s", n, why, pr.State, branch, present, tail(logsOf(t)))
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

var logsOf = func(*testing.T) string { return "" }

// A run that fails or is cancelled leaves no open PR and no branch behind, on every forge; the
// PR gets a comment naming the run and the reason. cleanup.keepFailedPRs keeps them.
func TestFailedAndCancelledRunsLeaveNoDebris(t *testing.T) {
	for _, fg := range forges(t) {
		t.Run(fg.name, func(t *testing.T) {
			e := env(t, fg, 1)
			logsOf = func(*testing.T) string { return e.Logs.String() }
			r := e.Wait(e.Start(fmt.Sprintf(failing, ""), nil).ID, 60*time.Second)
			if r.Status != pipelines.StFailed {
				t.Fatalf("run %s: %s", r.Status, r.Error)
			}
			cleanedUp(t, fg, r, false, "failed")

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
			cleanedUp(t, fg, r, false, "cancelled by tester")

			r = e.Wait(e.Start(fmt.Sprintf(failing, "cleanup: {keepFailedPRs: true}"), nil).ID, 60*time.Second)
			if r.Status != pipelines.StFailed {
				t.Fatalf("run %s: %s", r.Status, r.Error)
			}
			cleanedUp(t, fg, r, true, "failed")
		})
	}
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
