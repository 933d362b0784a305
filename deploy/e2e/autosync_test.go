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

// An automated sync still running at the merge is waited for, then judged: no second sync.
// One that fails leaves the app OutOfSync, and GitOpsSync syncs itself.
func TestAutoSyncRunningThenJudgedFailedThenSynced(t *testing.T) {
	s := newStack(t, stackOpts{})
	// The app starts without automated sync: AddApp reconciles at once, and an automated app
	// would start its sync there, before the script below could hold it. Turning automated
	// sync on afterwards starts the held sync.
	s.addApp(app("web", "apps/web", nil))
	s.waitRecord("web")
	if err := s.argo.ScriptSync("web", argocdtest.SyncScript{Hold: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.argo.UpdateApp(autoApp("web", "apps/web")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // start the run only once the agent reports the automated sync running
		st, _ := s.client.Status(context.Background(), "eu", "web")
		if st != nil && st.Operation != nil && st.Operation.Automated && st.Operation.Phase == agent.PhaseRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: the automated sync is not reported running: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	deadline = time.Now().Add(10 * time.Second)
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
