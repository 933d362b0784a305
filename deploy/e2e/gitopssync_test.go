package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

const syncWeb = `      - id: sync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
          waitTillHealthy: true
          syncOptions: {autoCreateNamespace: true, prunePropagationPolicy: background}
          retryStrategy: {limit: 2, baseBackoffDuration: 5s, increaseBackoffByFactor: 2, maxBackoffDuration: 1m}
`

func TestGitOpsSyncSucceedsOnMergedRevision(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	r := s.wait(s.start(pipeline(syncWeb, true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	st := step(r, "dev", "sync")
	apps := appsOut(st)
	if len(apps) != 1 || apps[0]["name"] != "web" || apps[0]["health"] != "Healthy" || apps[0]["sync"] != "Synced" ||
		apps[0]["syncedRevision"] != s.sha || apps[0]["phase"] != "Succeeded" || apps[0]["state"] != "done" {
		t.Fatalf("applications output: %v", apps)
	}
	reqs := s.syncRequests("web")
	if len(reqs) != 1 {
		t.Fatalf("%d sync calls, want exactly 1", len(reqs))
	}
	infos := fmt.Sprint(reqs[0]["infos"])
	if !strings.Contains(infos, "prflow.run value:"+r.ID) || !strings.Contains(infos, "dev/sync/1") {
		t.Fatalf("the operation is not tagged with the run: %s", infos)
	}
	if fmt.Sprint(reqs[0]["syncOptions"]) != "map[items:[CreateNamespace=true PrunePropagationPolicy=background]]" ||
		fmt.Sprint(reqs[0]["retryStrategy"]) != "map[backoff:map[duration:5s factor:2 maxDuration:1m] limit:2]" {
		t.Fatalf("options not passed to Argo CD: %v", reqs[0])
	}
}

func TestGitOpsSyncWakesOnStatusChangeNotPoll(t *testing.T) {
	t.Parallel()
	// The app syncs and stays Progressing. Once the step has been parked for a while (its poll
	// is a backstop minutes away), the app turns Healthy: the step must be resumed by that
	// change of its status key, at once, not by a poll tick.
	s := newWebStack(t, stackOpts{})
	if err := s.argo.ScriptSync("web", argocdtest.SyncScript{Progressing: -1}); err != nil {
		t.Fatal(err)
	}
	run := s.start(pipeline(syncWeb, true), map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "parked on Progressing with a long poll", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && time.Since(st.WaitSince) > 2*time.Second && st.Wait.Poll >= 4*time.Second && strings.Contains(st.Wait.Reason, "health Progressing") &&
			len(st.Wait.Keys) == 1 && st.Wait.Keys[0] == agent.StatusKey("eu", "web")
	})
	changed := time.Now()
	if err := s.argo.SetHealth("web", argocdtest.HealthHealthy, ""); err != nil {
		t.Fatal(err)
	}
	r := s.wait(run.ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StSucceeded || st.WakeReason != "key "+agent.StatusKey("eu", "web")+" changed" {
		t.Fatalf("run %s, last wake reason %q: want the app's key", r.Status, st.WakeReason)
	}
	t.Logf("status change → step finished: %s", st.Ended.Sub(changed))
}

func TestGitOpsSyncFailureCarriesArgoMessage(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	if err := s.argo.ScriptSync("web", argocdtest.SyncScript{FailAttempts: 1, FailMessage: "one or more objects failed to apply, reason: Deployment.apps \"web\" is invalid"}); err != nil {
		t.Fatal(err)
	}
	src := pipeline(strings.Replace(syncWeb, "          retryStrategy: {limit: 2, baseBackoffDuration: 5s, increaseBackoffByFactor: 2, maxBackoffDuration: 1m}\n", "", 1), true)
	r := s.wait(s.start(src, map[string]any{"commit": s.sha}).ID, 60*time.Second)
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "web (agent eu): sync Failed: one or more objects failed to apply, reason: Deployment.apps \"web\" is invalid") {
		t.Fatalf("run %s: %q", r.Status, r.Error)
	}
}

func TestGitOpsSyncDegradedStateTimeout(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	sha := s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "degraded")})
	s.addApp(app("web", "apps/web", nil))
	s.waitRecord("web")
	src := pipeline(syncBlind("          degradedStateTimeout: 1s\n"), true)
	r := s.wait(s.start(src, map[string]any{"commit": sha}).ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || !strings.Contains(st.Error, "Degraded for longer than degradedStateTimeout 1s") ||
		!strings.Contains(st.Error, "ConfigMap/") || !strings.Contains(st.Error, "web: data.simulate is degraded") {
		t.Fatalf("run %s: %q", r.Status, st.Error)
	}
}

func TestGitOpsSyncWaitsOutAnotherOperation(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	if err := s.argo.StartOperation("web", "alice", argocdtest.SyncScript{Hang: true}); err != nil {
		t.Fatal(err)
	}
	run := s.start(pipeline(syncWeb, true), map[string]any{"commit": s.sha})
	s.waitStep(run.ID, "dev", "sync", "waiting for alice's operation", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "alice")
	})
	if n := len(s.syncRequests("web")); n != 0 {
		t.Fatalf("%d syncs accepted while alice's operation ran", n)
	}
	if err := s.argo.ReleaseOperation("web"); err != nil {
		t.Fatal(err)
	}
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	rec, err := s.client.Status(context.Background(), "eu", "web")
	if err != nil || !rec.Operation.Tagged(r.ID, "dev/sync/1") || len(s.syncRequests("web")) != 1 {
		t.Fatalf("our own sync must have run after alice's: %+v %v", rec.Operation, err)
	}
}

func TestGitOpsSyncWrongRevisionDoesNotPass(t *testing.T) {
	t.Parallel()
	wrong := strings.Repeat("d", 40)
	cases := []struct {
		name      string
		wrongOps  int // how many operations report the wrong revision
		wantOK    bool
		wantSyncs int
	}{
		{"one wrong report, then right after a re-sync", 1, true, 2},
		{"always wrong", 100, false, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newWebStack(t, stackOpts{argo: []argocdtest.Option{argocdtest.WithTimeline(10*time.Millisecond, 1)}})
			// Script every operation as soon as the previous one started (a script applies
			// to the next operation only).
			var scripted atomic.Int64
			script := func() {
				if int(scripted.Load()) < c.wrongOps {
					scripted.Add(1)
					_ = s.argo.ScriptSync("web", argocdtest.SyncScript{Revision: wrong})
				}
			}
			script()
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				seen := 0
				for {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					if n := len(s.syncRequests("web")); n > seen {
						seen = n
						script()
					}
				}
			}()
			r := s.wait(s.start(pipeline(syncWeb, true), map[string]any{"commit": s.sha}).ID, 60*time.Second)
			st := step(r, "dev", "sync")
			if got := len(s.syncRequests("web")); got != c.wantSyncs {
				t.Errorf("%d syncs, want %d", got, c.wantSyncs)
			}
			if c.wantOK {
				apps := appsOut(st)
				if r.Status != pipelines.StSucceeded || apps[0]["syncedRevision"] != s.sha || apps[0]["revision"] != s.sha {
					t.Fatalf("run %s %q, apps %v", r.Status, r.Error, apps)
				}
				return
			}
			want := fmt.Sprintf("synced revision %s, expected %s (after 2 re-syncs", wrong, s.sha)
			if r.Status != pipelines.StFailed || !strings.Contains(st.Error, want) {
				t.Fatalf("a wrong revision reported as synced passed the gate: run %s %q", r.Status, st.Error)
			}
		})
	}
}

func TestGitOpsSyncSucceededBeforeSyncStatusIsNotDone(t *testing.T) {
	t.Parallel()
	// web is deployed and Healthy at the first commit; the merge adds a second one. Operation
	// Succeeded arrives while the sync status is still the one from before the sync (OutOfSync
	// against the merge, health still Healthy from the old deployment) for a full 300ms step.
	// That is not done.
	s := newStack(t, stackOpts{argo: []argocdtest.Option{argocdtest.WithTimeline(300*time.Millisecond, 1)}})
	s.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	s.waitRecord("web")
	sha2 := s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy") + "  version: \"2\"\n"})
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
`, true)
	var sawStale atomic.Bool
	run := s.start(src, map[string]any{"commit": sha2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Watch the records the step sees: there must be one with Succeeded + stale Synced.
	kw, _ := s.b.Apps.Watch(ctx, agent.StatusKey("eu", "web"))
	go func() {
		for e := range kw.Updates() {
			if e == nil {
				continue
			}
			var st agent.AppStatus
			if agent.DecodeStatus(e.Value(), &st) == nil && st.Operation != nil && st.Operation.Tagged(run.ID, "") &&
				st.Operation.Phase == agent.PhaseSucceeded && (st.Sync != agent.SyncSynced || st.Revision != sha2) {
				sawStale.Store(true)
			}
		}
	}()
	r := s.wait(run.ID, 60*time.Second)
	_ = kw.Stop()
	apps := appsOut(step(r, "dev", "sync"))
	if r.Status != pipelines.StSucceeded || apps[0]["revision"] != sha2 || apps[0]["sync"] != "Synced" {
		t.Fatalf("run %s %q: the step passed on a stale status: %v", r.Status, r.Error, apps)
	}
	if !sawStale.Load() {
		t.Fatal("the fake never showed Succeeded with a stale sync status: the test does not test the quirk")
	}
}

func TestGitOpsSyncResourcesLeftWithoutPrune(t *testing.T) {
	t.Parallel()
	// The merge renames the ConfigMap: without prune the old one stays live and Argo CD keeps
	// the app OutOfSync after a successful sync. That does not hold the step; with prune the
	// app ends Synced.
	for _, prune := range []bool{false, true} {
		t.Run(fmt.Sprintf("prune=%v", prune), func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOpts{})
			s.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
			s.waitRecord("web")
			sha2 := s.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": configMap("web-renamed", "healthy")})
			src := pipeline(fmt.Sprintf(`      - id: sync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
          waitTillHealthy: true
          prune: %v
`, prune), true)
			r := s.wait(s.start(src, map[string]any{"commit": sha2}).ID, 60*time.Second)
			apps := appsOut(step(r, "dev", "sync"))
			if r.Status != pipelines.StSucceeded || apps[0]["syncedRevision"] != sha2 {
				t.Fatalf("run %s %q: %v", r.Status, r.Error, apps)
			}
			wantSync, note := "Synced", ""
			if !prune {
				wantSync, note = "OutOfSync", "1 resource(s) removed from git are still live (prune: false)"
			}
			if apps[0]["sync"] != wantSync || fmt.Sprint(apps[0]["note"]) != fmt.Sprint(map[bool]any{true: nil, false: note}[prune]) {
				t.Fatalf("sync %v note %v", apps[0]["sync"], apps[0]["note"])
			}
		})
	}
}

func TestGitOpsSyncTimeoutSemantics(t *testing.T) {
	cases := []struct {
		name   string
		with   string
		script argocdtest.SyncScript
		ok     bool
		msg    string
	}{
		{"unhealthy, failOnTimeout", "waitTillHealthy: true\n          failOnTimeout: true", argocdtest.SyncScript{Progressing: -1}, false, "timed out waiting for Healthy (failOnTimeout)"},
		{"unhealthy, no failOnTimeout", "waitTillHealthy: true", argocdtest.SyncScript{Progressing: -1}, true, ""},
		{"sync still running", "waitTillHealthy: false", argocdtest.SyncScript{Hang: true}, false, "timed out with the sync not finished for web (agent eu): sync running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newWebStack(t, stackOpts{})
			if err := s.argo.ScriptSync("web", c.script); err != nil {
				t.Fatal(err)
			}
			src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 2s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
          `+c.with+"\n", false)
			r := s.wait(s.start(src, nil).ID, 60*time.Second)
			st := step(r, "dev", "sync")
			if c.ok {
				apps := appsOut(st)
				if r.Status != pipelines.StSucceeded || apps[0]["health"] != "Progressing" || apps[0]["sync"] != "Synced" {
					t.Fatalf("run %s %q: %v", r.Status, r.Error, apps)
				}
				return
			}
			if r.Status != pipelines.StFailed || !strings.Contains(st.Error, c.msg) {
				t.Fatalf("run %s: %q, want %q", r.Status, st.Error, c.msg)
			}
		})
	}
}

func TestGitOpsSyncHundredApps(t *testing.T) {
	s := newStack(t, stackOpts{concurrency: 4})
	for i := 0; i < 100; i++ {
		s.addApp(app(fmt.Sprintf("shop-%03d", i), "apps/web", map[string]string{"team": "shop"}))
	}
	s.addApp(app("other", "apps/web", map[string]string{"team": "other"}))
	s.waitRecord("shop-099")
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 120s
        with:
          agentId: eu
          applicationLabels: ["team:shop"]
          waitTillHealthy: true
`, true)
	r := s.wait(s.start(src, map[string]any{"commit": s.sha}).ID, 120*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	apps := appsOut(step(r, "dev", "sync"))
	healthy := 0
	for _, a := range apps {
		if a["health"] == "Healthy" && a["syncedRevision"] == s.sha && strings.HasPrefix(a["name"].(string), "shop-") {
			healthy++
		}
	}
	if len(apps) != 100 || healthy != 100 {
		t.Fatalf("%d apps in the output, %d healthy at the merged revision; want 100", len(apps), healthy)
	}
	if n := len(s.syncRequests("other")); n != 0 {
		t.Fatal("an app outside the label selection was synced")
	}
}

func TestFetchLinkedAppsWaitsForAppSetThenSyncs(t *testing.T) {
	t.Parallel()
	// Refresh off: the app appears only when the ApplicationSet controller polls (Reconcile
	// below); refresh_test.go has the refreshed case.
	s := newStack(t, stackOpts{appsetRefresh: argocd.AppSetRefreshOptions{Mode: argocd.RefreshOff}})
	s.git.Commit(repoURL, "main", map[string]string{"envs/dev/config.json": `{"env": "dev"}`})
	if err := s.argo.AddApplicationSet(envAppSet()); err != nil {
		t.Fatal(err)
	}
	s.waitRecord("web-dev")
	src := strings.Replace(newEnvPipeline, ", with: {appWaitTimeout: WAIT}", "", 1) // appWaitTimeout's default
	// The environment's config file is merged; the ApplicationSet has not generated web-prod.
	sha := s.git.Commit(repoURL, "main", map[string]string{"envs/prod/config.json": `{"env": "prod"}`})
	run := s.start(src, map[string]any{"commit": sha})
	s.waitStep(run.ID, "prod", "linked", "parked, waiting for the app", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "harness.io/serviceRef=web, harness.io/envRef=prod")
	})
	s.argo.Reconcile() // the ApplicationSet controller picks the new file up
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	linked := step(r, "prod", "linked")
	list, _ := linked.Outputs["apps"].([]any)
	if len(list) != 1 || linked.WakeReason != "key "+agent.InventoryKey("eu")+" changed" {
		t.Fatalf("linked apps %v, woken by %q", list, linked.WakeReason)
	}
	a := list[0].(map[string]any)
	if a["name"] != "web-prod" || a["agent"] != "eu" || a["cluster"] != "in-cluster" || a["namespace"] != "prod" || a["applicationSet"] != "web" {
		t.Fatalf("linked app: %v", a)
	}
	apps := appsOut(step(r, "prod", "sync"))
	if len(apps) != 1 || apps[0]["name"] != "web-prod" || apps[0]["health"] != "Healthy" || apps[0]["syncedRevision"] != sha {
		t.Fatalf("sync output: %v", apps)
	}
	if len(s.syncRequests("web-dev")) != 0 {
		t.Fatal("the dev app was synced by the prod stage")
	}
}

func TestFetchLinkedAppsNoneFound(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}))
	s.waitRecord("web-dev")
	mk := func(extra string) string {
		return pipeline("      - id: linked\n        type: FetchLinkedApps\n        timeout: 30s\n        with: {appWaitTimeout: 1s"+extra+"}\n", false)
	}
	// The dev stage finds web-dev by its labels.
	r := s.wait(s.start(mk(""), nil).ID, 30*time.Second)
	list, _ := step(r, "dev", "linked").Outputs["apps"].([]any)
	if r.Status != pipelines.StSucceeded || len(list) != 1 {
		t.Fatalf("labels: %s %v", r.Status, list)
	}
	// Selecting by a selector nothing matches fails after the wait, naming what it looked for…
	r = s.wait(s.start(mk(", selector: \"tier=none\""), nil).ID, 30*time.Second)
	if st := step(r, "dev", "linked"); r.Status != pipelines.StFailed || !strings.Contains(st.Error, "no app (selector tier=none) on cluster in-cluster (agent eu)") {
		t.Fatalf("none found: %s %q", r.Status, st.Error)
	}
	// …unless allowEmpty.
	r = s.wait(s.start(mk(", selector: \"tier=none\", allowEmpty: true"), nil).ID, 30*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("allowEmpty: %s %s", r.Status, r.Error)
	}
}

func TestGitOpsSyncRedeliveredRunFindsItsOperation(t *testing.T) {
	t.Parallel()
	// A worker dies after asking for the sync but before its result is recorded: the job is
	// delivered again with no memo. The step must find the operation it started (by its
	// run/step tag) instead of starting a second one.
	s := newWebStack(t, stackOpts{argo: []argocdtest.Option{argocdtest.WithTimeline(30*time.Millisecond, 1)}})
	def, _ := registry().Lookup("GitOpsSync")
	sc := func(memo []byte, wake int) *steps.Context {
		return &steps.Context{RunID: "run-redeliver", Stage: "dev", StepID: "sync", Type: "GitOpsSync", Attempt: 1, Wake: wake,
			Inputs: map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu", "applicationName": "web"}}, "waitTillHealthy": true},
			Priors: []steps.Prior{{ID: "merge", Type: "MergePR", Outputs: map[string]any{"commitId": s.sha}}},
			Memo:   memo, Deadline: time.Now().Add(time.Minute), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Services: steps.NewServices(map[string]any{steps.ServiceGitOps: s.client})}
	}
	ctx := context.Background()
	first, err := def.New().Run(ctx, sc(nil, 0))
	if err != nil || first.Status != steps.Waiting {
		t.Fatalf("first delivery: %+v %v", first, err)
	}
	// The operation finishes while no step runs; then the job is redelivered: same run, step
	// and attempt, memo lost.
	for stop := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rec, err := s.client.Status(ctx, "eu", "web")
		if err == nil && rec.Health == agent.HealthHealthy && rec.Operation.Finished() {
			break
		}
		if time.Now().After(stop) {
			t.Fatal("the first operation never finished")
		}
	}
	var res steps.Result
	memo, wake := []byte(nil), 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err = def.New().Run(ctx, sc(memo, wake))
		if err != nil || res.Status != steps.Waiting || time.Now().After(deadline) {
			break
		}
		memo, wake = res.Memo, wake+1
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || res.Status != steps.Succeeded {
		t.Fatalf("redelivered run: %+v %v", res, err)
	}
	if n := len(s.syncRequests("web")); n != 1 {
		t.Fatalf("%d syncs: the redelivered job started its own again", n)
	}
}

// The app's desired state changes after our sync finished, at the same commit (on a real Argo
// CD: its ApplicationSet re-rendered it from the merged config a little later, because the
// refresh after the merge could not be passed on). The app is then OutOfSync at a revision
// that has our merge: the step syncs it again instead of waiting for a Synced that nobody
// will make (it used to sit there until the timeout, saying "X does not contain X").
func TestGitOpsSyncResyncsWhenTheSpecChangesAfterItsSync(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.git.Commit(repoURL, "main", map[string]string{"apps/web2/cm.yaml": configMap("web2", "healthy"), "apps/web/cm.yaml": configMap("web", "progressing")})
	s.addApp(app("web", "apps/web", nil))
	s.waitRecord("web")
	sha := s.git.Commit(repoURL, "main", map[string]string{"README": "x"})
	// prune: the new path no longer has the old ConfigMap; Synced needs it gone.
	run := s.start(pipeline(strings.Replace(syncWeb, "waitTillHealthy: true", "waitTillHealthy: true\n          prune: true", 1), true), map[string]any{"commit": sha})
	s.waitStep(run.ID, "dev", "sync", "waiting on health after the sync", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "health Progressing")
	})
	a, _ := s.argo.App("web")
	a.Spec.Source.Path = "apps/web2"
	if err := s.argo.UpdateApp(a); err != nil {
		t.Fatal(err)
	}
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if n := len(s.syncRequests("web")); n != 2 {
		t.Errorf("%d sync calls, want 2 (ours, then once more for the changed spec)", n)
	}
	if apps := appsOut(step(r, "dev", "sync")); len(apps) != 1 || apps[0]["health"] != "Healthy" || apps[0]["sync"] != "Synced" {
		t.Errorf("applications output: %v", apps)
	}
}
