package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// withRollback adds a stage rollback step that must not run when the stage fails blind.
const withRollback = "    rollbackSteps:\n      - {id: undo, type: Noop}\n"

// syncBlind is a GitOpsSync of app web that waits till healthy, with extra under its with:
// (the outage, sync window and autosync tests).
func syncBlind(extra string) string {
	return `      - id: sync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
          waitTillHealthy: true
` + extra
}

// Issue 20 #1: the agent's token is revoked while GitOpsSync waits for health and Argo CD
// has the app Healthy meanwhile. The step must not judge the last seen "Progressing": it parks
// naming the outage and passes once the agent sees Argo CD again; nothing is rolled back.
func TestTokenRevokedMidWaitParksAndPassesWhenFreshAgain(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	run := s.startParkedOnHealth("web", pipeline(syncBlind(""), true)+withRollback)
	s.argo.RevokeToken(s.argo.Token())
	if err := s.argo.SetHealth("web", argocdtest.HealthHealthy, ""); err != nil {
		t.Fatal(err)
	}
	s.waitStep(run.ID, "dev", "sync", "parked on the stale view", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "waiting: agent eu cannot see Argo CD since") &&
			strings.Contains(st.Wait.Reason, "token was rejected")
	})
	if st, _ := s.client.Status(s.ctx, "eu", "web"); st == nil || st.Stale == nil || st.Health != agent.HealthProgressing {
		t.Fatalf("the record must keep the last seen health and be marked stale: %+v", st)
	}
	s.argo.RestoreToken(s.argo.Token())
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if u := r.Find("dev").Step("undo", true); u == nil || u.Status != pipelines.StPending {
		t.Fatalf("rollback step ran: %+v", u)
	}
	if apps := appsOut(step(r, "dev", "sync")); len(apps) != 1 || apps[0]["health"] != "Healthy" {
		t.Fatalf("outputs: %v", apps)
	}
}

// An outage longer than agentOutageTimeout fails the stage without its rollback, says so, and
// keeps the per-app outputs.
func TestOutageLongerThanAgentOutageTimeoutFailsWithoutRollback(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	run := s.startParkedOnHealth("web", pipeline(syncBlind("          agentOutageTimeout: 2s\n"), true)+withRollback)
	s.argo.RevokeToken(s.argo.Token())
	r := s.wait(run.ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || !st.NoRollback || !strings.Contains(st.Error, "refusing to roll back blind") ||
		!strings.Contains(st.Error, "agent eu cannot see Argo CD since") || !strings.Contains(st.Error, "longer than agentOutageTimeout 2s") ||
		!strings.Contains(r.Error, "not rolled back") {
		t.Fatalf("run %s %q; step %q (noRollback %v)", r.Status, r.Error, st.Error, st.NoRollback)
	}
	if u := r.Find("dev").Step("undo", true); u == nil || u.Status == pipelines.StSucceeded || u.Status == pipelines.StQueued {
		t.Fatalf("rollback step ran: %+v", u)
	}
	apps := appsOut(st)
	if len(apps) != 1 || apps[0]["name"] != "web" || apps[0]["stale"] == nil || !strings.Contains(apps[0]["waiting"].(string), "cannot see Argo CD") {
		t.Fatalf("a failed GitOpsSync must keep its per-app outputs: %v", apps)
	}
}

// A timeout while the view is fresh keeps its meaning: the stage fails and rolls back.
func TestTimeoutWithFreshViewStillRollsBack(t *testing.T) {
	s := newWebStack(t, stackOpts{})
	if err := s.argo.ScriptSync("web", argocdtest.SyncScript{Hang: true}); err != nil {
		t.Fatal(err)
	}
	src := pipeline(strings.Replace(syncBlind(""), "timeout: 60s", "timeout: 2s", 1), true) + withRollback
	r := s.wait(s.start(src, map[string]any{"commit": s.sha}).ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || st.NoRollback || !strings.Contains(st.Error, "timed out with the sync not finished") {
		t.Fatalf("run %s: step %q (noRollback %v)", r.Status, st.Error, st.NoRollback)
	}
	if u := r.Find("dev").Step("undo", true); u == nil || u.Status != pipelines.StSucceeded {
		t.Fatalf("the rollback must run on a timeout seen with a fresh view: %+v", u)
	}
}

// Issue 20 #2: the agent is down when FetchLinkedApps starts. The step parks (holding no
// worker) instead of failing after a few retries, and succeeds once the agent is back.
func TestFetchLinkedAppsWaitsForAnOfflineAgent(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{noAgent: true})
	s.addApp(app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}))
	src := pipeline(`      - id: linked
        type: FetchLinkedApps
        timeout: 60s
      - id: sync
        type: GitOpsSync
        timeout: 60s
        with: {waitTillHealthy: true}
`, true) + withRollback
	run := s.start(src, map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "linked", "parked on the offline agent", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "waiting: agent eu cannot see Argo CD") &&
			strings.Contains(st.Wait.Reason, "offline")
	})
	time.Sleep(8 * time.Second) // longer than the old 5 attempts in 7.5s
	// A poll may have the step queued or running for a moment (a busy machine makes that
	// moment long): judge it once that wake is over.
	r := s.waitStep(run.ID, "dev", "linked", "its poll to end", func(st *pipelines.StepRun) bool {
		return st.Status != pipelines.StQueued && st.Status != pipelines.StRunning
	})
	if st := step(r, "dev", "linked"); st.Status != pipelines.StWaiting {
		t.Fatalf("the step did not keep waiting: %+v", st)
	}
	s.startAgent("r1")
	r = s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if list, _ := step(r, "dev", "linked").Outputs["apps"].([]any); len(list) != 1 {
		t.Fatalf("linked: %v", list)
	}
}

// The same outage, longer than agentOutageTimeout: the stage fails without rollback.
func TestFetchLinkedAppsOutageTimeoutNoRollback(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{noAgent: true})
	src := pipeline(`      - id: linked
        type: FetchLinkedApps
        timeout: 60s
        with: {agentOutageTimeout: 2s}
`, true) + withRollback
	failedBlind(t, s.wait(s.start(src, map[string]any{"commit": s.sha}).ID, 60*time.Second), "linked")
}

// Issue 20 #3: the leading agent replica crashes mid-wait; another replica takes over within
// seconds and the step finishes.
func TestAgentCrashOtherReplicaTakesOver(t *testing.T) {
	s := newWebStack(t, stackOpts{})
	_, stop2 := s.startAgentFollower("r2")
	defer stop2()
	run := s.startParkedOnHealth("web", pipeline(syncBlind(""), true)+withRollback)
	s.crashAgent()
	crashed := time.Now()
	if err := s.argo.SetHealth("web", argocdtest.HealthHealthy, ""); err != nil {
		t.Fatal(err)
	}
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	t.Logf("run finished %s after the crash", time.Since(crashed).Round(time.Millisecond))
	if time.Since(crashed) > 20*time.Second {
		t.Fatalf("took %s after the crash; failover should take under 10s", time.Since(crashed))
	}
}

// failedBlind checks that run r failed at step dev.stepID, which refused to roll back blind,
// and that the stage's rollback (undo) did not run; it returns the step.
func failedBlind(t *testing.T, r *pipelines.Run, stepID string) *pipelines.StepRun {
	t.Helper()
	st := step(r, "dev", stepID)
	if r.Status != pipelines.StFailed || !st.NoRollback || !strings.Contains(st.Error, "refusing to roll back blind") {
		t.Fatalf("run %s: step %s %q (noRollback %v), want failed refusing to roll back blind", r.Status, stepID, st.Error, st.NoRollback)
	}
	if u := r.Find("dev").Step("undo", true); u == nil || u.Status == pipelines.StSucceeded {
		t.Fatalf("rollback step ran: %+v", u)
	}
	return st
}

func mustGet(t *testing.T, s *stack, id string) *pipelines.Run {
	t.Helper()
	r, err := s.ctl.Get(s.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A stage gate soaking on the apps' health neither counts the soak nor fails on a stale view:
// the view recovers → the gate passes; an outage longer than agentOutageTimeout → the stage
// fails without rollback.
func TestStageGateOnStaleView(t *testing.T) {
	for _, c := range []struct {
		name    string
		recover bool
	}{{"recovers", true}, {"outage too long", false}} {
		t.Run(c.name, func(t *testing.T) {
			s := newWebStack(t, stackOpts{})
			src := pipeline(syncBlind("")+`    gate:
      condition: 'all(apps, .health == "Healthy")'
      soak: 3s
      timeout: 60s
      agentOutageTimeout: 2s
`, true) + withRollback
			run := s.start(src, map[string]any{"commit": s.sha})
			s.waitStep(run.ID, "dev", "gate", "soaking", func(st *pipelines.StepRun) bool {
				return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "soaking")
			})
			s.argo.RevokeToken(s.argo.Token())
			if c.recover {
				s.waitStep(run.ID, "dev", "gate", "parked on the stale view", func(st *pipelines.StepRun) bool {
					return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "waiting: agent eu cannot see Argo CD since")
				})
				s.argo.RestoreToken(s.argo.Token())
				r := s.wait(run.ID, 60*time.Second)
				if r.Status != pipelines.StSucceeded {
					t.Fatalf("run %s: %s", r.Status, r.Error)
				}
				return
			}
			failedBlind(t, s.wait(run.ID, 60*time.Second), "gate")
		})
	}
}

// GitOpsSync selecting its apps by label through an agent that is down waits for the agent
// instead of failing into a rollback.
func TestGitOpsSyncSelectionWaitsForAnOfflineAgent(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{noAgent: true})
	s.addApp(app("web", "apps/web", map[string]string{"tier": "web"}))
	run := s.start(pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 60s
        with: {agentId: eu, applicationLabels: {tier: web}, waitTillHealthy: true}
`, true)+withRollback, map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked on the offline agent", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "waiting: agent eu cannot see Argo CD")
	})
	s.startAgent("r1")
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if apps := appsOut(step(r, "dev", "sync")); len(apps) != 1 || apps[0]["name"] != "web" || apps[0]["health"] != "Healthy" {
		t.Fatalf("outputs: %v", apps)
	}
}

// The step's deadline arriving while the view is stale does not time out into a rollback:
// the stage fails without it, and the message says the deadline came during the outage.
func TestDeadlineDuringOutageFailsWithoutRollback(t *testing.T) {
	s := newWebStack(t, stackOpts{})
	src := pipeline(strings.Replace(syncBlind(""), "timeout: 60s", "timeout: 4s", 1), true) + withRollback
	run := s.startParkedOnHealth("web", src)
	s.argo.RevokeToken(s.argo.Token())
	if st := failedBlind(t, s.wait(run.ID, 60*time.Second), "sync"); !strings.Contains(st.Error, "until the step's deadline") {
		t.Fatalf("step %q: want the deadline named", st.Error)
	}
}
