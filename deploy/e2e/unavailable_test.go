package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// Issue 32 A: Argo CD's repo-server is down when GitOpsSync asks for the sync. Argo CD answers
// HTTP 400 "error resolving repo revision: … code = Unavailable … connection refused"; that is
// Argo CD unable to work, not a verdict on the change.

// failedSyncs counts the sync calls Argo CD refused with status.
func (s *stack) failedSyncs(app string, status int) int {
	n := 0
	for _, r := range s.argo.Requests() {
		if r.Method == "POST" && r.Path == "/api/v1/applications/"+app+"/sync" && r.Status == status {
			n++
		}
	}
	return n
}

// The step parks saying Argo CD cannot sync and that it retries until its deadline, asks
// again, and passes once the repo-server is back — no rollback.
func TestRepoServerDownAtSyncParksAndPassesWhenBack(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	s.argo.SetRepoServerDown(true)
	run := s.start(pipeline(syncBlind(""), true)+withRollback, map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked on Argo CD being unavailable", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "Argo CD cannot sync 1 application(s) right now") &&
			strings.Contains(st.Wait.Reason, "retrying until the step's deadline") && strings.Contains(st.Wait.Reason, "code = Unavailable")
	})
	// It asks again (not only once), and the run stays up.
	deadline := time.Now().Add(20 * time.Second)
	for s.failedSyncs("web", 400) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the step did not ask again; refused syncs: %d", s.failedSyncs("web", 400))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cur := mustGet(t, s, run.ID); cur.Status.Terminal() {
		t.Fatalf("the run ended while Argo CD's repo-server was down: %s %s", cur.Status, cur.Error)
	}
	s.argo.SetRepoServerDown(false)
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if u := r.Find("dev").Step("undo", true); u == nil || u.Status != pipelines.StPending {
		t.Fatalf("rollback step ran: %+v", u)
	}
	apps := appsOut(step(r, "dev", "sync"))
	if len(apps) != 1 || apps[0]["health"] != "Healthy" || apps[0]["syncedRevision"] != s.sha {
		t.Fatalf("outputs: %v", apps)
	}
}

// Still down at the step's deadline: the stage fails without its rollback (a revert would need
// the same Argo CD to sync it), naming what Argo CD answered.
func TestRepoServerDownUntilDeadlineFailsWithoutRollback(t *testing.T) {
	s := newWebStack(t, stackOpts{})
	s.argo.SetRepoServerDown(true)
	src := pipeline(strings.Replace(syncBlind(""), "timeout: 60s", "timeout: 4s", 1), true) + withRollback
	r := s.wait(s.start(src, map[string]any{"commit": s.sha}).ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || !st.NoRollback || !strings.Contains(st.Error, "Argo CD could not work until the step's deadline") ||
		!strings.Contains(st.Error, "code = Unavailable") || !strings.Contains(st.Error, "refusing to roll back") {
		t.Fatalf("run %s %q; step %q (noRollback %v)", r.Status, r.Error, st.Error, st.NoRollback)
	}
	if u := r.Find("dev").Step("undo", true); u == nil || u.Status == pipelines.StSucceeded || u.Status == pipelines.StQueued {
		t.Fatalf("rollback step ran: %+v", u)
	}
	if r.RollbackFailed != "" {
		t.Fatalf("rollbackFailed: %s", r.RollbackFailed)
	}
}

// A 5xx of Argo CD's own is handled the same way: retried, no rollback.
func TestArgoCD5xxAtSyncIsRetried(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	s.argo.InjectFault(argocdtest.Fault{Method: "POST", Path: "/api/v1/applications/web/sync", Status: 500,
		Message: "error getting cached app state: redis: connection pool timeout", Times: 2})
	r := s.wait(s.start(pipeline(syncBlind(""), true)+withRollback, map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded || s.failedSyncs("web", 500) != 2 {
		t.Fatalf("run %s %q after %d refused syncs\n%s", r.Status, r.Error, s.failedSyncs("web", 500), describeRun(r))
	}
}

// The ending: the change fails (Degraded), the stage merges the revert, and the
// rollback's re-sync meets the repo-server outage. The re-sync waits instead of ending the run
// rollbackFailed, and finishes the rollback once the repo-server is back.
func TestRollbackResyncWaitsForRepoServer(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	s.waitRecord("web")
	bad := s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "degraded")})
	// The stand-in MergePR of the rollback merges nothing itself: the test commits the revert
	// on main; its commitId "" makes the re-sync expect what Argo CD resolves (the revert).
	src := pipeline(syncBlind("          degradedStateTimeout: 1s\n"), true) + `    rollbackSteps:
      - {id: mergeRevert, type: MergePR, with: {commit: ""}}
      - id: resync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
          waitTillHealthy: true
`
	run := s.start(src, map[string]any{"commit": bad})
	s.waitStep(run.ID, "dev", "sync", "Degraded", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "Degraded")
	})
	revert := s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy")})
	s.argo.SetRepoServerDown(true)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cur := mustGet(t, s, run.ID)
		st := cur.Find("dev").Step("resync", true)
		if st != nil && st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "Argo CD cannot sync 1 application(s) right now") &&
			strings.Contains(st.Wait.Reason, "code = Unavailable") {
			break
		}
		if time.Now().After(deadline) || cur.Status.Terminal() {
			t.Fatalf("the re-sync did not park on Argo CD being unavailable\n%s", describeRun(cur))
		}
	}
	time.Sleep(2 * time.Second) // the repo-server is back 2 s later, as in the incident
	if cur := mustGet(t, s, run.ID); cur.Status.Terminal() || cur.RollbackFailed != "" {
		t.Fatalf("the run ended while Argo CD's repo-server was down: %s %q (rollbackFailed %q)", cur.Status, cur.Error, cur.RollbackFailed)
	}
	s.argo.SetRepoServerDown(false)
	r := s.wait(run.ID, 60*time.Second)
	rs := r.Find("dev").Step("resync", true)
	if r.Status != pipelines.StFailed || r.RollbackFailed != "" || rs == nil || rs.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %q (rollbackFailed %q); resync %+v\n%s", r.Status, r.Error, r.RollbackFailed, rs, describeRun(r))
	}
	if apps := appsOut(rs); len(apps) != 1 || apps[0]["syncedRevision"] != revert || apps[0]["health"] != "Healthy" {
		t.Fatalf("resync outputs: %v", apps)
	}
}
