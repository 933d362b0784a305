package steps

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

func TestGitOpsSyncInputs(t *testing.T) {
	cases := []struct {
		name string
		in   map[string]any
		err  string // "" = valid
	}{
		{"list", map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu", "applicationName": "web"}}}, ""},
		{"list with step agent", map[string]any{"agentId": "eu", "applicationsList": []any{map[string]any{"applicationName": "web"}}}, ""},
		{"regex", map[string]any{"applicationRegex": "^web-", "agentId": "eu"}, ""},
		{"labels", map[string]any{"applicationLabels": []any{"env:prod", "team=pay"}}, ""},
		{"nothing: uses FetchLinkedApps", map[string]any{}, ""},
		{"expression left for run time", map[string]any{"applicationRegex": "<+pipeline.variables.apps>", "waitTillHealthy": "${{ inputs.wait }}", "failOnTimeout": true}, ""},
		{"two selections", map[string]any{"applicationRegex": "x", "applicationLabels": []any{"a:b"}}, "give at most one"},
		{"bad regex", map[string]any{"applicationRegex": "web-("}, "applicationRegex: error parsing regexp"},
		{"list entry without name", map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu"}}}, "applicationsList[0].applicationName: required"},
		{"list not a list", map[string]any{"applicationsList": "web"}, "applicationsList: want a list"},
		{"bad label", map[string]any{"applicationLabels": []any{"a b c"}}, "applicationLabels:"},
		{"failOnTimeout alone", map[string]any{"failOnTimeout": true}, "failOnTimeout: needs waitTillHealthy: true"},
		{"degraded timeout alone", map[string]any{"degradedStateTimeout": "5m"}, "degradedStateTimeout: needs waitTillHealthy"},
		{"degraded timeout 0 alone", map[string]any{"degradedStateTimeout": "0"}, ""},
		{"bad degraded timeout", map[string]any{"waitTillHealthy": true, "degradedStateTimeout": "5 minutes"}, "degradedStateTimeout: bad duration"},
		{"bad bool", map[string]any{"prune": "yes"}, "prune: want true or false"},
		{"unknown sync option", map[string]any{"syncOptions": map[string]any{"autoCreateNamespaces": true}}, "syncOptions.autoCreateNamespaces: unknown option"},
		{"bad propagation", map[string]any{"syncOptions": map[string]any{"prunePropagationPolicy": "sideways"}}, "prunePropagationPolicy: \"sideways\""},
		{"retry without limit", map[string]any{"retryStrategy": map[string]any{"baseBackoffDuration": "5s"}}, "retryStrategy.limit: required"},
		{"retry bad duration", map[string]any{"retryStrategy": map[string]any{"limit": 2, "maxBackoffDuration": "3 min"}}, "retryStrategy.maxBackoffDuration"},
	}
	for _, c := range cases {
		_, err := syncConfigFrom(c.in, true)
		if c.err == "" && err != nil {
			t.Errorf("%s: unexpected error %v", c.name, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
		}
	}
	// At run time every list entry needs an agent.
	if _, err := syncConfigFrom(map[string]any{"applicationsList": []any{map[string]any{"applicationName": "web"}}}, false); err == nil ||
		!strings.Contains(err.Error(), "applicationsList[0] (web): agentId required") {
		t.Errorf("entry without agent: %v", err)
	}
}

func TestGitOpsSyncOptionMapping(t *testing.T) {
	in := map[string]any{
		"syncOptions": map[string]any{"skipSchemaValidation": true, "autoCreateNamespace": "true", "pruneResourcesAtLast": false,
			"applyOutOfSyncOnly": true, "replaceResources": false, "prunePropagationPolicy": "Foreground", "serverSideApply": true},
		"retryStrategy":     map[string]any{"limit": 3, "baseBackoffDuration": "5s", "increaseBackoffByFactor": 2, "maxBackoffDuration": "3m"},
		"applicationLabels": map[string]any{"env": "prod", "team": "pay"},
	}
	c, err := syncConfigFrom(in, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "Validate=false,CreateNamespace=true,PruneLast=false,ApplyOutOfSyncOnly=true,Replace=false,ServerSideApply=true,PrunePropagationPolicy=foreground"
	if got := strings.Join(c.SyncOptions, ","); got != want {
		t.Errorf("sync options\n got %s\nwant %s", got, want)
	}
	if r := c.RetryStrategy.RetryStrategy; r == nil || r.Limit != 3 || r.Backoff == nil || *r.Backoff != (agent.Backoff{Duration: "5s", Factor: 2, MaxDuration: "3m"}) {
		t.Errorf("retry strategy: %+v", r)
	}
	if string(c.ApplicationLabels) != "env=prod,team=pay" {
		t.Errorf("labels selector %q", string(c.ApplicationLabels))
	}
	// Argo CD items pass as given; options not set are not sent (the app's own stay).
	c, _ = syncConfigFrom(map[string]any{"syncOptions": []any{"CreateNamespace=true"}}, false)
	if strings.Join(c.SyncOptions, ",") != "CreateNamespace=true" {
		t.Errorf("item list: %v", c.SyncOptions)
	}
	c, _ = syncConfigFrom(map[string]any{}, false)
	if c.SyncOptions != nil || c.RetryStrategy.RetryStrategy != nil {
		t.Errorf("nothing set must send nothing: %v %+v", c.SyncOptions, c.RetryStrategy.RetryStrategy)
	}
}

func TestExpectedRevision(t *testing.T) {
	merge := Prior{ID: "merge", Type: "MergePR", Outputs: map[string]any{"commitId": "abc123"}}
	revert := Prior{ID: "merge2", Type: "MergePR", Outputs: map[string]any{"commitId": "def456"}}
	cases := []struct {
		name   string
		priors []Prior
		input  string
		want   string
	}{
		{"no merge", nil, "", ""},
		{"merge", []Prior{merge}, "", "abc123"},
		{"latest merge wins", []Prior{merge, {Type: "Noop"}, revert}, "", "def456"},
		{"explicit", []Prior{merge}, "fff", "fff"},
		{"any disables", []Prior{merge}, "any", ""},
	}
	for _, c := range cases {
		sc := &Context{Priors: c.priors}
		if got := expectedRevision(sc, &syncConfig{ExpectedRevision: c.input}); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSyncVerdicts runs the decision on the status records a parked step may see, in the
// orders Argo CD produces them.
func TestSyncVerdicts(t *testing.T) {
	const run, want, old = "run-1", "sha-new", "sha-old"
	requested := time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)
	ours := func(phase, synced string) *agent.Operation {
		return &agent.Operation{Phase: phase, RunID: run, Step: "dev/sync/1", Revision: want, SyncedRevision: synced,
			StartedAt: requested.Truncate(time.Second), Message: "msg " + phase}
	}
	rec := func(sync, rev, health string, op *agent.Operation) *agent.AppStatus {
		return &agent.AppStatus{Sync: sync, Revision: rev, Health: health, Operation: op}
	}
	cases := []struct {
		name    string
		st      *agent.AppStatus
		healthy bool
		prune   bool
		state   string // after
		fail    string
		waiting string
	}{
		{"no record yet", nil, true, false, appSyncing, "", "no status record"},
		{"record still shows the previous operation", rec(agent.SyncSynced, old, agent.HealthHealthy,
			&agent.Operation{Phase: agent.PhaseSucceeded, StartedAt: requested.Add(-time.Hour)}), true, false, appSyncing, "", "waiting for the agent to report"},
		{"requested, operationState still null", rec(agent.SyncOutOfSync, want, agent.HealthHealthy, ours(agent.PhasePending, "")), true, false, appSyncing, "", "sync pending"},
		{"running", rec(agent.SyncOutOfSync, want, agent.HealthHealthy, ours(agent.PhaseRunning, want)), true, false, appSyncing, "", "sync running"},
		{"failed", rec(agent.SyncOutOfSync, want, agent.HealthHealthy, ours(agent.PhaseFailed, "")), true, false, appSyncing, "sync Failed: msg Failed", ""},
		{"error", rec(agent.SyncOutOfSync, want, agent.HealthHealthy, ours(agent.PhaseError, "")), true, false, appSyncing, "sync Error", ""},
		{"Succeeded before sync status moved", rec(agent.SyncOutOfSync, want, agent.HealthHealthy, ours(agent.PhaseSucceeded, want)), true, false, appSyncing, "", "waiting for Synced at sha-new"},
		{"Succeeded, status still at the old revision", rec(agent.SyncSynced, old, agent.HealthHealthy, ours(agent.PhaseSucceeded, want)), true, false, appSyncing, "", "waiting for Synced"},
		{"Succeeded on a wrong revision: sync again", rec(agent.SyncSynced, "sha-bad", agent.HealthHealthy, ours(agent.PhaseSucceeded, "sha-bad")), true, false, appTodo, "", "syncing again"},
		{"Synced, Progressing", rec(agent.SyncSynced, want, agent.HealthProgressing, ours(agent.PhaseSucceeded, want)), true, false, appSyncing, "", "health Progressing"},
		{"Synced, Progressing, not waiting for health", rec(agent.SyncSynced, want, agent.HealthProgressing, ours(agent.PhaseSucceeded, want)), false, false, appDone, "", ""},
		{"Synced, Healthy", rec(agent.SyncSynced, want, agent.HealthHealthy, ours(agent.PhaseSucceeded, want)), true, false, appDone, "", ""},
		{"Degraded, within the timeout", rec(agent.SyncSynced, want, agent.HealthDegraded, ours(agent.PhaseSucceeded, want)), true, false, appSyncing, "", "Degraded"},
		{"OutOfSync only by leftovers, no prune", &agent.AppStatus{Sync: agent.SyncOutOfSync, Revision: want, Health: agent.HealthHealthy,
			Operation: ours(agent.PhaseSucceeded, want), Resources: agent.ResourceSummary{Total: 2, OutOfSync: 1, RequiresPruning: 1}}, true, false, appDone, "", ""},
		{"OutOfSync by leftovers, with prune: wait", &agent.AppStatus{Sync: agent.SyncOutOfSync, Revision: want, Health: agent.HealthHealthy,
			Operation: ours(agent.PhaseSucceeded, want), Resources: agent.ResourceSummary{Total: 2, OutOfSync: 1, RequiresPruning: 1}}, true, true, appSyncing, "", "waiting for Synced"},
		{"our sync followed by an auto-sync still running", rec(agent.SyncSynced, want, agent.HealthHealthy,
			&agent.Operation{Phase: agent.PhaseRunning, Automated: true, StartedAt: requested.Add(5 * time.Second)}), true, false, appSyncing, "", "followed by an operation of automated sync"},
		{"our sync followed by another, finished, app healthy at the revision", rec(agent.SyncSynced, want, agent.HealthHealthy,
			&agent.Operation{Phase: agent.PhaseSucceeded, InitiatedBy: "bob", StartedAt: requested.Add(5 * time.Second)}), true, false, appDone, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := &Context{RunID: run, Stage: "dev", StepID: "sync", Attempt: 1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			a := &syncApp{Agent: "eu", App: "web", State: appSyncing, Requested: requested, Revision: want}
			r := &syncRun{sc: sc, cfg: &syncConfig{WaitTillHealthy: c.healthy, Prune: c.prune, DegradedStateTimeout: time.Minute},
				m: &syncMemo{Expected: want, Apps: []syncApp{*a}}, tag: syncTag(sc), now: requested.Add(30 * time.Second)}
			v := r.evaluate(a, c.st)
			if v.fail != "" || c.fail != "" {
				if c.fail == "" || !strings.Contains(v.fail, c.fail) {
					t.Fatalf("fail = %q, want %q", v.fail, c.fail)
				}
				return
			}
			if a.State != c.state || !strings.Contains(a.Waiting, c.waiting) {
				t.Fatalf("state %s waiting %q; want %s, %q", a.State, a.Waiting, c.state, c.waiting)
			}
		})
	}
}

func TestSyncDegradedTimeoutCountsFromFirstSeen(t *testing.T) {
	sc := &Context{RunID: "r", Stage: "dev", StepID: "sync", Attempt: 1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	st := &agent.AppStatus{Sync: agent.SyncSynced, Revision: "x", Health: agent.HealthDegraded, HealthMessage: "CrashLoopBackOff",
		Operation: &agent.Operation{Phase: agent.PhaseSucceeded, RunID: "r", Step: "dev/sync/1", SyncedRevision: "x"}}
	a := &syncApp{State: appSyncing, Revision: "x"}
	t0 := time.Now()
	for i, c := range []struct {
		at   time.Duration
		fail bool
	}{{0, false}, {30 * time.Second, false}, {59 * time.Second, false}, {61 * time.Second, true}} {
		r := &syncRun{sc: sc, cfg: &syncConfig{WaitTillHealthy: true, DegradedStateTimeout: time.Minute}, m: &syncMemo{}, tag: syncTag(sc), now: t0.Add(c.at)}
		v := r.evaluate(a, st)
		if (v.fail != "") != c.fail {
			t.Fatalf("check %d at +%s: fail=%q", i, c.at, v.fail)
		}
		if c.fail && !strings.Contains(v.fail, "Degraded for longer than degradedStateTimeout 1m0s: CrashLoopBackOff") {
			t.Fatalf("message: %q", v.fail)
		}
	}
	// Healthy in between resets the clock.
	a = &syncApp{State: appSyncing, Revision: "x", DegradedSince: t0.Add(-time.Hour)}
	st.Health = agent.HealthProgressing
	(&syncRun{sc: sc, cfg: &syncConfig{WaitTillHealthy: true, DegradedStateTimeout: time.Minute}, m: &syncMemo{}, tag: syncTag(sc), now: t0}).evaluate(a, st)
	if !a.DegradedSince.IsZero() {
		t.Fatal("leaving Degraded must reset degradedSince")
	}
}

func TestGitOpsStepsNeedTheAgentClient(t *testing.T) {
	sc := &Context{Inputs: map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu", "applicationName": "web"}}},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for name, f := range map[string]StepFunc{"GitOpsSync": runGitOpsSync, "FetchLinkedApps": runFetchLinkedApps} {
		_, err := f(context.Background(), sc)
		if !IsTerminal(err) || !strings.Contains(err.Error(), `no GitOps agent client (service "gitops")`) {
			t.Errorf("%s without the service: %v", name, err)
		}
	}
}

// Our sync finished at the wanted revision and the app is OutOfSync there: within the grace
// Argo CD may not have compared yet (wait); after it the spec changed after our sync (sync
// again, up to syncMaxResyncs); a wait message never says a revision does not contain itself.
func TestSyncDriftAfterOurSyncResyncs(t *testing.T) {
	sc := &Context{RunID: "r", Stage: "dev", StepID: "sync", Attempt: 1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	st := &agent.AppStatus{Sync: agent.SyncOutOfSync, Revision: "x", Health: agent.HealthHealthy,
		Resources: agent.ResourceSummary{Total: 1, OutOfSync: 1},
		Operation: &agent.Operation{Phase: agent.PhaseSucceeded, RunID: "r", Step: "dev/sync/1", SyncedRevision: "x", StartedAt: t0}}
	a := &syncApp{Agent: "eu", App: "web", State: appSyncing, Requested: t0, Revision: "x"}
	r := &syncRun{sc: sc, cfg: &syncConfig{WaitTillHealthy: true}, m: &syncMemo{Expected: "x"}, tag: syncTag(sc), now: t0.Add(time.Second)}
	if v := r.evaluate(a, st); v.fail != "" || a.State != appSyncing || strings.Contains(a.Waiting, "does not contain") {
		t.Fatalf("within the grace: %+v %s %q", v, a.State, a.Waiting)
	}
	r.now = t0.Add(time.Second + syncDriftGrace)
	if v := r.evaluate(a, st); v.fail != "" || a.State != appTodo || a.Resyncs != 1 || !strings.Contains(a.Waiting, "syncing again") {
		t.Fatalf("after the grace: %+v %s %d %q", v, a.State, a.Resyncs, a.Waiting)
	}
	// Only resources awaiting pruning: not a changed spec, no re-sync.
	b := &syncApp{Agent: "eu", App: "web", State: appSyncing, Requested: t0, Revision: "x", DriftSince: t0}
	pr := *st
	pr.Resources = agent.ResourceSummary{Total: 2, OutOfSync: 1, RequiresPruning: 1}
	r.cfg.Prune = true
	if r.evaluate(b, &pr); b.State != appSyncing || b.Resyncs != 0 {
		t.Fatalf("pruning leftovers re-synced: %s %d", b.State, b.Resyncs)
	}
	// It keeps drifting: fail after syncMaxResyncs.
	r.cfg.Prune = false
	a.State, a.Resyncs, a.DriftSince = appSyncing, syncMaxResyncs, t0
	again := *st
	op := *st.Operation
	op.Step = r.appTag(a) // the last re-sync's operation
	again.Operation = &op
	if v := r.evaluate(a, &again); !strings.Contains(v.fail, "stays OutOfSync") {
		t.Fatalf("after %d re-syncs: %+v", syncMaxResyncs, v)
	}
}
