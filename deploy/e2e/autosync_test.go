package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// Issue 32 D: with automated sync, Argo CD deploys the merge commit by itself, usually before
// GitOpsSync asks. GitOpsSync then judges the app instead of running a second sync — but only
// on the evidence of Argo CD's last operation.

func autoApp(name, path string) argocdtest.Application {
	a := app(name, path, nil)
	a.Spec.SyncPolicy = &argocdtest.SyncPolicy{Automated: &argocdtest.SyncPolicyAutomated{}}
	return a
}

// waitAutoSynced waits until Argo CD's automated sync deployed rev to the app (as the agent
// reports it).
func (s *stack) waitAutoSynced(name, rev string) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := s.client.Status(context.Background(), "eu", name)
		if st != nil && st.Sync == agent.SyncSynced && st.Health == agent.HealthHealthy && st.Revision == rev &&
			st.Operation != nil && st.Operation.Automated && st.Operation.Phase == agent.PhaseSucceeded {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s was not auto-synced to %s: %+v", name, rev, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAutoSyncedMergeIsJudgedNotSyncedAgain(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(autoApp("web", "apps/web"))
	s.waitRecord("web")
	s.argo.Reconcile() // the merge is seen: automated sync deploys it
	s.waitAutoSynced("web", s.sha)
	r := s.wait(s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if n := len(s.syncRequests("web")); n != 0 {
		t.Fatalf("GitOpsSync synced %d time(s) an app Argo CD had already synced at the merge", n)
	}
	apps := appsOut(step(r, "dev", "sync"))
	if len(apps) != 1 || apps[0]["health"] != "Healthy" || apps[0]["supersededBy"] != "automated sync" ||
		!strings.Contains(apps[0]["note"].(string), "not synced again: automated sync already deployed") {
		t.Fatalf("outputs: %v", apps)
	}
}

// The app is Synced at the merge commit, but only because the merge did not change it: Argo
// CD's last operation deployed an older commit. That old operation is no evidence: sync.
func TestAutoSyncedOlderOperationIsNotTakenForTheMerge(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(autoApp("web", "apps/web"))
	s.waitRecord("web")
	s.argo.Reconcile()
	s.waitAutoSynced("web", s.sha)
	merge := s.git.Commit(repoURL, "main", map[string]string{"apps/other/cm.yaml": configMap("other", "healthy")})
	s.argo.Reconcile()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := s.client.Status(context.Background(), "eu", "web")
		if st != nil && st.Revision == merge && st.Sync == agent.SyncSynced {
			if st.Operation == nil || st.Operation.SyncedRevision != s.sha {
				t.Fatalf("setup: the last operation should be the old one: %+v", st.Operation)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: web not Synced at %s: %+v", merge, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := s.wait(s.start(pipeline(syncBlind(""), true), map[string]any{"commit": merge}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if n := len(s.syncRequests("web")); n != 1 {
		t.Fatalf("GitOpsSync synced %d time(s); want 1 (the last operation deployed an older commit)", n)
	}
	if apps := appsOut(step(r, "dev", "sync")); len(apps) != 1 || apps[0]["supersededBy"] != nil || apps[0]["syncedRevision"] != merge {
		t.Fatalf("outputs: %v", apps)
	}
}

// heldAutoSync starts Argo CD's automated sync of a new app with script (Hold or Hang keeps it
// running) and returns once the agent reports it running. The app starts without automated
// sync: AddApp reconciles at once, and an automated app would start its sync there, before
// the script could hold it. Turning automated sync on afterwards starts the held sync.
func (s *stack) heldAutoSync(name string, script argocdtest.SyncScript) {
	s.t.Helper()
	s.addApp(app(name, "apps/"+name, nil))
	s.waitRecord(name)
	if err := s.argo.ScriptSync(name, script); err != nil {
		s.t.Fatal(err)
	}
	if err := s.argo.UpdateApp(autoApp(name, "apps/"+name)); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := s.client.Status(context.Background(), "eu", name)
		if st != nil && st.Operation != nil && st.Operation.Automated && st.Operation.Phase == agent.PhaseRunning {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("setup: the automated sync is not reported running: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Argo CD turns an operation Succeeded before its next comparison updates the sync status: a
// step woken by the finished automated sync sees it Succeeded with the merge while the app
// is still OutOfSync. That is the automated sync deploying the merge, not a reason to sync
// again: the step waits for the comparison (a flaky test showed the second sync under load).
func TestAutoSyncFinishedBeforeItsComparisonIsNotSyncedAgain(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.heldAutoSync("web", argocdtest.SyncScript{Hold: time.Second, CompareAfter: 2 * time.Second})
	r := s.wait(s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded || len(s.syncRequests("web")) != 0 {
		t.Fatalf("run %s %q with %d sync(s) by prflow; want none\n%s", r.Status, r.Error, len(s.syncRequests("web")), describeRun(r))
	}
	apps := appsOut(step(r, "dev", "sync"))
	if len(apps) != 1 || apps[0]["supersededBy"] != "automated sync" || apps[0]["sync"] != "Synced" || apps[0]["health"] != "Healthy" {
		t.Fatalf("the finished automated sync was not judged as the deployment: %v", apps)
	}
}

// The wait for the comparison is bounded: an app still OutOfSync well after Argo CD's
// automated sync finished with the merge is synced by the step, as before.
func TestAutoSyncFinishedButStillOutOfSyncIsSynced(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.heldAutoSync("web", argocdtest.SyncScript{Hold: time.Second, CompareAfter: time.Minute})
	r := s.wait(s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded || len(s.syncRequests("web")) != 1 {
		t.Fatalf("run %s %q with %d sync(s) by prflow; want one once the wait for Synced is over\n%s", r.Status, r.Error, len(s.syncRequests("web")), describeRun(r))
	}
	if apps := appsOut(step(r, "dev", "sync")); len(apps) != 1 || apps[0]["supersededBy"] != nil || apps[0]["sync"] != "Synced" {
		t.Fatalf("outputs: %v", apps)
	}
}

// An automated sync still running at the merge is waited for, then judged: no second sync.
// One that fails leaves the app OutOfSync, and GitOpsSync syncs itself.
func TestAutoSyncRunningThenJudgedFailedThenSynced(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.heldAutoSync("web", argocdtest.SyncScript{Hold: 2 * time.Second})
	r := s.wait(s.start(pipeline(syncBlind(""), true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded || len(s.syncRequests("web")) != 0 {
		t.Fatalf("run %s %q with %d sync(s) by prflow\n%s", r.Status, r.Error, len(s.syncRequests("web")), describeRun(r))
	}
	if apps := appsOut(step(r, "dev", "sync")); len(apps) != 1 || apps[0]["supersededBy"] != "automated sync" {
		t.Fatalf("the running automated sync was not judged as the deployment: %v", apps)
	}

	merge := s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy") + "  v: \"2\"\n"})
	if err := s.argo.ScriptSync("web", argocdtest.SyncScript{FailAttempts: 1, FailMessage: "one or more objects failed to apply"}); err != nil {
		t.Fatal(err)
	}
	s.argo.Reconcile()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := s.client.Status(context.Background(), "eu", "web")
		if st != nil && st.Operation != nil && st.Operation.Automated && st.Operation.Phase == agent.PhaseFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: the automated sync did not fail: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r = s.wait(s.start(pipeline(syncBlind(""), true), map[string]any{"commit": merge}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded || len(s.syncRequests("web")) != 1 {
		t.Fatalf("run %s %q with %d sync(s) by prflow; want one after the failed automated sync\n%s", r.Status, r.Error, len(s.syncRequests("web")), describeRun(r))
	}
}
