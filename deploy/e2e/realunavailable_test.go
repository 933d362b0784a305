package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/steps"
)

// heldPromotion is the promotion's stage for env (update → merge → apps → sync, rollback
// revert → mergeRevert → resync) written out, with an Approval "hold" between FetchLinkedApps
// and GitOpsSync, so a test can break Argo CD exactly before the sync is asked for.
func (r *realEnv) heldPromotion(env string) string {
	return fmt.Sprintf(`name: %[1]s
inputs:
  tag: {type: string, required: true}
service: {name: %[1]s}
environments:
  - name: %[2]s
    clusters: [{name: in-cluster, agent: real}]
stages:
  - id: %[2]s
    environment: %[2]s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: %[3]s
          filePath: "envs/<+env.name>/config.json"
          variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}]
      - {id: merge, type: MergePR, with: {connector: release, repo: %[3]s, mergeStrategy: merge, deleteSourceBranch: true}}
      - {id: apps, type: FetchLinkedApps, with: {applicationSet: %[4]s}}
      - {id: hold, type: Approval, timeout: 5m, with: {approvers: {users: [alice]}}}
      - {id: sync, type: GitOpsSync, timeout: 4m, with: {waitTillHealthy: true, failOnTimeout: true}}
    rollbackSteps:
      - id: revert
        type: RevertPR
        when: '${{ steps.merge.status == "succeeded" }}'
        with: {connector: release, repo: %[3]s, commitId: "${{ steps.merge.outputs.commitId }}"}
      - id: mergeRevert
        type: MergePR
        when: '${{ steps.revert.status == "succeeded" }}'
        with: {connector: release, repo: %[3]s, mergeStrategy: merge}
      - id: resync
        type: GitOpsSync
        timeout: 4m
        when: '${{ steps.mergeRevert.status == "succeeded" }}'
        with: {waitTillHealthy: true, failOnTimeout: true}
`, r.id, env, r.repo, r.set)
}

// Issue 32 A on the real Argo CD: the repo-server is stopped right before GitOpsSync asks for
// the sync. Argo CD answers the sync with HTTP 400 "error resolving repo revision: … code =
// Unavailable … connection refused" (or does not answer within the agent's timeout while its
// hard refresh waits for the controller); the step parks saying Argo CD cannot sync and that
// it retries until its deadline. The repo-server is started again with the command line and
// environment up.sh gave it (read from /proc before it was stopped; the new PID is appended
// to $REALENV/pids so down.sh stops it), and the run passes: no revert, no rollbackFailed.
func TestRealRepoServerDownAtSync(t *testing.T) {
	r := realSetupAgent(t, "dev")
	before := r.file("envs/dev/config.json")
	run := r.e.Start(r.heldPromotion("dev"), map[string]any{"tag": "8.0.0"})
	r.waitStep(run.ID, "dev", "hold", 3*time.Minute, func(st *pipelines.StepRun) bool { return st.Status == pipelines.StWaiting })
	repo := r.proc("argocd-repo-server")
	t0 := time.Now()
	r.stopProc(repo)
	restarted := false
	t.Cleanup(func() {
		if !restarted { // leave the realenv as it was for the next test
			r.startProc(repo)
		}
	})
	if err := r.e.Ctl.Signal(context.Background(), run.ID, "dev", "hold", steps.Signal{Kind: "approval", User: "alice", Approve: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cur := r.waitStep(run.ID, "dev", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Argo CD cannot sync 1 application(s) right now") &&
			strings.Contains(st.Wait.Reason, "retrying until the step's deadline")
	})
	reason := ctltest.Step(cur, "dev", "sync").Wait.Reason
	t.Logf("REALTIME parked %.1fs after the repo-server stopped: %s", time.Since(t0).Seconds(), reason)
	if !strings.Contains(reason, "code = Unavailable") && !strings.Contains(reason, "did not answer") {
		t.Errorf("the wait reason does not say what Argo CD answered: %s", reason)
	}
	time.Sleep(6 * time.Second) // at least one more attempt while it is down
	cur, _ = r.e.Ctl.Get(context.Background(), run.ID)
	if cur.Status.Terminal() {
		t.Fatalf("the run ended while the repo-server was down: %s %s\n%s", cur.Status, cur.Error, describeRun(cur))
	}
	if rv := cur.Find("dev").Step("revert", true); rv != nil && rv.Status != pipelines.StPending {
		t.Fatalf("a revert started while the repo-server was down: %+v", rv)
	}
	r.startProc(repo)
	restarted = true
	t1 := time.Now()
	final := r.e.Wait(run.ID, 4*time.Minute)
	stageTimes(t, "repo-server-down", final)
	if final.Status != pipelines.StSucceeded || final.RollbackFailed != "" {
		t.Fatalf("run %s %q (rollbackFailed %q)\n%s", final.Status, final.Error, final.RollbackFailed, describeRun(final))
	}
	t.Logf("REALTIME repo-server down %.1fs; run passed %.1fs after it was started again", t1.Sub(t0).Seconds(), time.Since(t1).Seconds())
	if got := r.file("envs/dev/config.json"); got == before || !strings.Contains(got, `"tag": "8.0.0"`) {
		t.Errorf("dev's config.json: %s", got)
	}
	if rv := final.Find("dev").Step("revert", true); rv != nil && rv.Status == pipelines.StSucceeded {
		t.Errorf("the change was reverted: %+v", rv)
	}
	r.deployed("dev", "8.0.0")
}
