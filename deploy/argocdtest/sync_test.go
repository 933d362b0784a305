package argocdtest

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

const demoRepo = "https://git.example/demo.git"

func addDemo(t *testing.T, s *Server, opts ...AppOption) {
	t.Helper()
	if err := s.AddApp(demoApp("demo", demoRepo, "apps/demo"), opts...); err != nil {
		t.Fatal(err)
	}
}

func TestSyncTimelineMatchesRealArgoCD(t *testing.T) {
	s, _, sha := newFake(t)
	addDemo(t, s)
	st := openStream(t, s, "name=demo", "")
	added := st.next().Result
	if added.Type != EventAdded || state(added.Application) != "OutOfSync/Missing/-" || added.Application.Status.Sync.Revision != sha {
		t.Fatalf("first event = %s %s rev %s", added.Type, state(added.Application), added.Application.Status.Sync.Revision)
	}

	req := SyncRequest{
		Prune:         true,
		Infos:         []Info{{Name: "prflow.io/run", Value: "run-42"}},
		Strategy:      &SyncStrategy{Apply: &SyncStrategyApply{Force: true}},
		SyncOptions:   &SyncOptions{Items: []string{"CreateNamespace=true", "ApplyOutOfSyncOnly=true"}},
		RetryStrategy: &RetryStrategy{Limit: 2, Backoff: &Backoff{Duration: "5s"}},
	}
	r := call(t, s, "POST", "/api/v1/applications/demo/sync", req)
	if r.status != 200 {
		t.Fatalf("sync: %d %s", r.status, r.body)
	}
	var resp Application
	r.json(t, &resp)
	if resp.Operation == nil || resp.Status.OperationState != nil || resp.Operation.Sync.Revision != sha {
		t.Fatalf("sync answer must carry the new operation (revision resolved to the SHA) and a null operationState: %s", r.body)
	}

	evs := st.until(synced(sha, HealthHealthy))
	var got []string
	for _, ev := range evs {
		got = append(got, state(ev.Application))
	}
	want := []string{
		"OutOfSync/Missing/-", // operation set, operationState cleared
		"OutOfSync/Missing/Running", "OutOfSync/Missing/Running", "OutOfSync/Missing/Running",
		"OutOfSync/Missing/Succeeded", // phase done, sync/health not updated yet
		"Synced/Progressing/Succeeded",
		"Synced/Healthy/Succeeded",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("event sequence\n got %q\nwant %q", got, want)
	}
	if evs[0].Application.Operation == nil {
		t.Fatal("first event after the sync request must show .operation")
	}
	if evs[4].Application.Operation != nil || evs[4].Application.Status.OperationState.FinishedAt == nil {
		t.Fatal("when the phase is Succeeded, .operation is cleared and finishedAt set")
	}

	final := getApp(t, s, "demo")
	os := final.Status.OperationState
	if !reflect.DeepEqual(os.Operation.Info, req.Infos) {
		t.Fatalf("operation.info = %+v, want the request's infos %+v", os.Operation.Info, req.Infos)
	}
	if os.Operation.InitiatedBy.Username != "admin" || os.Operation.InitiatedBy.Automated {
		t.Fatalf("initiatedBy = %+v", os.Operation.InitiatedBy)
	}
	sync := os.Operation.Sync
	if !sync.Prune || sync.SyncStrategy == nil || !sync.SyncStrategy.Apply.Force ||
		!reflect.DeepEqual(sync.SyncOptions, req.SyncOptions.Items) || os.Operation.Retry.Limit != 2 {
		t.Fatalf("operation does not carry the request options: %+v retry %+v", sync, os.Operation.Retry)
	}
	if os.SyncResult.Revision != sha || os.Message != "successfully synced (all tasks run)" {
		t.Fatalf("syncResult %+v message %q", os.SyncResult, os.Message)
	}
	if len(os.SyncResult.Resources) != 1 || os.SyncResult.Resources[0].Message != "configmap/demo created" {
		t.Fatalf("syncResult.resources = %+v", os.SyncResult.Resources)
	}
	if len(final.Status.History) != 1 || final.Status.History[0].Revision != sha || final.Status.History[0].ID != 0 {
		t.Fatalf("history = %+v", final.Status.History)
	}
	// Timestamps have second precision on the wire.
	raw := string(call(t, s, "GET", "/api/v1/applications/demo", nil).body)
	if m := regexp.MustCompile(`"startedAt":"([^"]+)"`).FindStringSubmatch(raw); m == nil || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(m[1]) {
		t.Fatalf("startedAt not RFC 3339 with second precision in %s", raw)
	}

	// A second operation clears the previous operationState for one event.
	if r := call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{}); r.status != 200 {
		t.Fatalf("second sync: %d %s", r.status, r.body)
	}
	ev := st.next().Result
	if ev.Application.Status.OperationState != nil || ev.Application.Operation == nil {
		t.Fatalf("new operation should start with a null operationState, got %s", state(ev.Application))
	}
	st.until(func(ev ApplicationWatchEvent) bool {
		return ev.Application.Status.OperationState != nil && ev.Application.Status.OperationState.Phase == PhaseSucceeded
	})
}

func TestSyncWhileAnotherOperationRuns(t *testing.T) {
	s, _, sha := newFake(t)
	addDemo(t, s)
	if n := s.RunningOperations(); n != 0 {
		t.Fatalf("RunningOperations before any sync = %d, want 0", n)
	}
	if err := s.StartOperation("demo", "someone-else", SyncScript{Hang: true}); err != nil {
		t.Fatal(err)
	}
	running := waitApp(t, s, "demo", func(a Application) bool {
		return a.Status.OperationState != nil && a.Status.OperationState.Phase == PhaseRunning
	})
	if n := s.RunningOperations(); n != 1 {
		t.Fatalf("RunningOperations while a sync hangs = %d, want 1", n)
	}
	if u := running.Status.OperationState.Operation.InitiatedBy.Username; u != "someone-else" {
		t.Fatalf("foreign operation initiated by %q", u)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{}), 400, codeFailedPrecondition,
		"error setting app operation: another operation is already in progress")
	if err := s.StartOperation("demo", "third", SyncScript{}); err == nil {
		t.Fatal("StartOperation during an operation must fail")
	}
	if err := s.ReleaseOperation("demo"); err != nil {
		t.Fatal(err)
	}
	waitApp(t, s, "demo", func(a Application) bool {
		return state(a) == "Synced/Healthy/Succeeded" && a.Status.Sync.Revision == sha
	})
	if r := call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{}); r.status != 200 {
		t.Fatalf("sync after the foreign operation finished: %d %s", r.status, r.body)
	}
	waitApp(t, s, "demo", func(a Application) bool { return a.Operation == nil })
	if n := s.RunningOperations(); n != 0 {
		t.Fatalf("RunningOperations once the syncs finished = %d, want 0", n)
	}
}

func TestTerminateOperation(t *testing.T) {
	t.Run("refused before the controller picked the operation up", func(t *testing.T) {
		s, _, _ := newFake(t, WithTimeline(time.Hour, 1))
		addDemo(t, s)
		if r := call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{}); r.status != 200 {
			t.Fatalf("sync: %d %s", r.status, r.body)
		}
		wantError(t, call(t, s, "DELETE", "/api/v1/applications/demo/operation", nil), 400, codeInvalidArgument,
			"Unable to terminate operation. No operation is in progress")
	})
	t.Run("running operation", func(t *testing.T) {
		s, _, _ := newFake(t)
		addDemo(t, s)
		wantError(t, call(t, s, "DELETE", "/api/v1/applications/demo/operation", nil), 400, codeInvalidArgument,
			"Unable to terminate operation. No operation is in progress")
		st := openStream(t, s, "name=demo", "")
		st.next()
		if err := s.ScriptSync("demo", SyncScript{Hang: true}); err != nil {
			t.Fatal(err)
		}
		call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
		st.until(func(ev ApplicationWatchEvent) bool {
			os := ev.Application.Status.OperationState
			return os != nil && os.Phase == PhaseRunning
		})
		r := call(t, s, "DELETE", "/api/v1/applications/demo/operation", nil)
		if r.status != 200 || string(r.body) != "{}" {
			t.Fatalf("terminate: %d %s", r.status, r.body)
		}
		evs := st.until(func(ev ApplicationWatchEvent) bool {
			os := ev.Application.Status.OperationState
			return os != nil && os.Phase == PhaseFailed
		})
		sawTerminating := false
		for _, ev := range evs {
			if os := ev.Application.Status.OperationState; os != nil && os.Phase == PhaseTerminating {
				sawTerminating = true
			}
		}
		last := evs[len(evs)-1].Application
		if !sawTerminating || last.Status.OperationState.Message != "Operation terminated" || last.Operation != nil {
			t.Fatalf("terminating=%v final %s %q", sawTerminating, state(last), last.Status.OperationState.Message)
		}
		if last.Status.Sync.Status != SyncStatusOutOfSync {
			t.Fatalf("a terminated sync deploys nothing, got %s", state(last))
		}
	})
}

func TestScriptedFailureAndRetry(t *testing.T) {
	t.Run("failure without retry", func(t *testing.T) {
		s, _, _ := newFake(t)
		addDemo(t, s)
		if err := s.ScriptSync("demo", SyncScript{FailAttempts: 1, FailMessage: "one or more objects failed to apply, reason: quota exceeded"}); err != nil {
			t.Fatal(err)
		}
		call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
		a := waitApp(t, s, "demo", func(a Application) bool {
			return a.Status.OperationState != nil && a.Status.OperationState.Phase == PhaseFailed
		})
		if a.Status.OperationState.Message != "one or more objects failed to apply, reason: quota exceeded" || a.Operation != nil {
			t.Fatalf("failed op: %+v", a.Status.OperationState)
		}
		a = waitApp(t, s, "demo", func(a Application) bool { return a.Status.ReconciledAt != nil })
		if a.Status.Sync.Status != SyncStatusOutOfSync || a.Status.Health.Status != HealthMissing || len(a.Status.History) != 0 {
			t.Fatalf("a failed sync deploys nothing: %s history %d", state(a), len(a.Status.History))
		}
	})
	t.Run("failure then retry succeeds", func(t *testing.T) {
		s, _, sha := newFake(t)
		addDemo(t, s)
		st := openStream(t, s, "name=demo", "")
		st.next()
		if err := s.ScriptSync("demo", SyncScript{FailAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{RetryStrategy: &RetryStrategy{Limit: 1}})
		evs := st.until(synced(sha, HealthHealthy))
		retried := false
		for _, ev := range evs {
			os := ev.Application.Status.OperationState
			if os != nil && os.Phase == PhaseRunning && os.RetryCount == 1 && strings.Contains(os.Message, "Retrying attempt #1 at ") {
				retried = true
			}
		}
		if !retried {
			t.Fatal("no Running event with retryCount 1 and a 'Retrying attempt #1' message")
		}
		if a, _ := s.App("demo"); a.Status.OperationState.Phase != PhaseSucceeded {
			t.Fatalf("final phase %s", a.Status.OperationState.Phase)
		}
	})
}

func TestHealthScripts(t *testing.T) {
	healthEvents := func(evs []ApplicationWatchEvent) []string {
		var out []string
		seenSucceeded := false
		for _, ev := range evs {
			os := ev.Application.Status.OperationState
			if os != nil && os.Phase == PhaseSucceeded {
				if seenSucceeded {
					out = append(out, ev.Application.Status.Sync.Status+"/"+ev.Application.Status.Health.Status)
				}
				seenSucceeded = true
			}
		}
		return out
	}
	t.Run("longer progressing", func(t *testing.T) {
		s, _, sha := newFake(t)
		addDemo(t, s)
		st := openStream(t, s, "name=demo", "")
		st.next()
		_ = s.ScriptSync("demo", SyncScript{Progressing: 3})
		call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
		got := healthEvents(st.until(synced(sha, HealthHealthy)))
		want := []string{"Synced/Progressing", "Synced/Progressing", "Synced/Progressing", "Synced/Healthy"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %q want %q", got, want)
		}
	})
	t.Run("stuck progressing until SetHealth", func(t *testing.T) {
		s, _, sha := newFake(t)
		addDemo(t, s)
		_ = s.ScriptSync("demo", SyncScript{Progressing: -1})
		call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
		waitApp(t, s, "demo", func(a Application) bool { return state(a) == "Synced/Progressing/Succeeded" })
		s.Reconcile()
		if a, _ := s.App("demo"); state(a) != "Synced/Progressing/Succeeded" {
			t.Fatalf("a reconcile must not end a stuck Progressing: %s", state(a))
		}
		if err := s.SetHealth("demo", HealthHealthy, ""); err != nil {
			t.Fatal(err)
		}
		if a, _ := s.App("demo"); a.Status.Health.Status != HealthHealthy || a.Status.Sync.Revision != sha {
			t.Fatalf("SetHealth: %s", state(a))
		}
	})
	t.Run("momentarily healthy then degraded", func(t *testing.T) {
		s, _, sha := newFake(t)
		addDemo(t, s)
		st := openStream(t, s, "name=demo", "")
		st.next()
		_ = s.ScriptSync("demo", SyncScript{Health: []string{HealthHealthy, HealthDegraded}})
		call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
		got := healthEvents(st.until(synced(sha, HealthDegraded)))
		if want := []string{"Synced/Healthy", "Synced/Degraded"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("got %q want %q", got, want)
		}
		s.Reconcile()
		if a, _ := s.App("demo"); a.Status.Health.Status != HealthDegraded {
			t.Fatalf("scripted final health must stick: %s", state(a))
		}
	})
}

func TestDegradedCommitRefreshAndSync(t *testing.T) {
	s, mg, sha1 := newFake(t)
	addDemo(t, s, Deployed())
	if a, _ := s.App("demo"); state(a) != "Synced/Healthy/Succeeded" || a.Status.Sync.Revision != sha1 {
		t.Fatalf("Deployed app: %s at %s", state(a), a.Status.Sync.Revision)
	}
	sha2 := mg.Commit(demoRepo, "main", map[string]string{"apps/demo/cm.yaml": configMap("demo", "degraded")})

	// A plain GET does not look at git.
	if a := getApp(t, s, "demo"); a.Status.Sync.Revision != sha1 || a.Status.Sync.Status != SyncStatusSynced {
		t.Fatalf("GET without refresh changed: %s at %s", state(a), a.Status.Sync.Revision)
	}
	// ?refresh=normal returns the refreshed app: the NEW revision, OutOfSync,
	// still Healthy (nothing deployed yet), refresh annotation gone.
	a := getApp(t, s, "demo?refresh=normal")
	if a.Status.Sync.Status != SyncStatusOutOfSync || a.Status.Sync.Revision != sha2 || a.Status.Health.Status != HealthHealthy {
		t.Fatalf("after refresh: %s at %s", state(a), a.Status.Sync.Revision)
	}
	if _, ok := a.Metadata.Annotations[refreshAnnotation]; ok {
		t.Fatal("refresh annotation must be removed once refreshed")
	}
	if a.Status.History[len(a.Status.History)-1].Revision != sha1 {
		t.Fatal("history must still say sha1 is deployed")
	}

	call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
	a = waitApp(t, s, "demo", func(a Application) bool { return state(a) == "Synced/Degraded/Succeeded" })
	// Argo CD v3: the app's health has no message; the reason is on the resource.
	if a.Status.Sync.Revision != sha2 || a.Status.Health.Message != "" || len(a.Status.Resources) != 1 ||
		a.Status.Resources[0].Health == nil || *a.Status.Resources[0].Health != (HealthStatus{Status: HealthDegraded, Message: "data.simulate is degraded"}) {
		t.Fatalf("degraded app: rev %s health %+v resources %+v", a.Status.Sync.Revision, a.Status.Health, a.Status.Resources)
	}
	for _, rr := range a.Status.OperationState.SyncResult.Resources {
		if rr.Message != "configmap/demo configured" {
			t.Fatalf("resource result %+v", rr)
		}
	}
}

func TestWrongRevisionIsReportedAsSynced(t *testing.T) {
	s, _, sha := newFake(t)
	addDemo(t, s)
	wrong := strings.Repeat("ab", 20)
	_ = s.ScriptSync("demo", SyncScript{Revision: wrong})
	call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
	a := waitApp(t, s, "demo", func(a Application) bool { return state(a) == "Synced/Healthy/Succeeded" })
	if a.Status.Sync.Revision != wrong || a.Status.OperationState.SyncResult.Revision != wrong || a.Status.History[0].Revision != wrong {
		t.Fatalf("expected the scripted wrong revision everywhere, got sync %s result %s", a.Status.Sync.Revision, a.Status.OperationState.SyncResult.Revision)
	}
	if a.Status.OperationState.Operation.Sync.Revision != sha {
		t.Fatal("the operation itself asked for the real revision")
	}
	s.Reconcile()
	if a, _ := s.App("demo"); a.Status.Sync.Revision != wrong {
		t.Fatal("the wrong revision persists until the next operation")
	}
	call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
	waitApp(t, s, "demo", func(a Application) bool {
		return state(a) == "Synced/Healthy/Succeeded" && a.Status.Sync.Revision == sha && a.Operation == nil
	})
}

func TestInvalidManifests(t *testing.T) {
	s, mg, _ := newFake(t)
	addDemo(t, s, Deployed())
	mg.Commit(demoRepo, "main", map[string]string{"apps/demo/bad.yaml": "apiVersion: v1\nmetadata:\n  name: nokind\n"})
	a := getApp(t, s, "demo?refresh=hard")
	if a.Status.Sync.Status != SyncStatusUnknown || len(a.Status.Conditions) != 1 || a.Status.Conditions[0].Type != "ComparisonError" {
		t.Fatalf("refresh of invalid manifests: %s conditions %+v", state(a), a.Status.Conditions)
	}
	if msg := a.Status.Conditions[0].Message; !strings.HasPrefix(msg, "Failed to load target state: ") || !strings.Contains(msg, `"bad.yaml"`) || !strings.Contains(msg, "Kind") {
		t.Fatalf("condition message %q", msg)
	}
	call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
	a = waitApp(t, s, "demo", func(a Application) bool {
		return a.Status.OperationState != nil && a.Status.OperationState.Phase == PhaseError
	})
	if !strings.HasPrefix(a.Status.OperationState.Message, "ComparisonError: Failed to load target state") {
		t.Fatalf("op message %q", a.Status.OperationState.Message)
	}
	// Fixing git clears the condition.
	mg.Commit(demoRepo, "main", nil, "apps/demo/bad.yaml")
	if a := getApp(t, s, "demo?refresh=normal"); len(a.Status.Conditions) != 0 || a.Status.Sync.Status != SyncStatusSynced {
		t.Fatalf("after fix: %s %+v", state(a), a.Status.Conditions)
	}
}

func TestPruneAndRevisions(t *testing.T) {
	s, mg, _ := newFake(t)
	mg.Commit(demoRepo, "main", map[string]string{"apps/demo/extra.yaml": configMap("extra", "healthy")})
	addDemo(t, s, Deployed())
	mg.Tag(demoRepo, "v1", mustResolve(t, mg, "main"))
	sha3 := mg.Commit(demoRepo, "main", nil, "apps/demo/extra.yaml")
	call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{Prune: false})
	a := waitApp(t, s, "demo", func(a Application) bool {
		return a.Operation == nil && a.Status.Sync.Revision == sha3 && a.Status.Health.Status == HealthHealthy
	})
	if a.Status.Sync.Status != SyncStatusOutOfSync {
		t.Fatalf("without prune the removed object stays live: %s", state(a))
	}
	pruning := false
	for _, r := range a.Status.Resources {
		pruning = pruning || (r.Name == "extra" && r.RequiresPruning)
	}
	if !pruning {
		t.Fatalf("resources %+v should flag extra as requiresPruning", a.Status.Resources)
	}
	call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{Prune: true})
	waitApp(t, s, "demo", func(a Application) bool { return state(a) == "Synced/Healthy/Succeeded" && a.Operation == nil })

	// Revisions: a tag resolves to its commit; an unknown one is refused.
	r := call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{Revision: "v1"})
	var resp Application
	r.json(t, &resp)
	if resp.Operation == nil || resp.Operation.Sync.Revision != mustResolve(t, mg, "v1") {
		t.Fatalf("sync to a tag: %s", r.body)
	}
	waitApp(t, s, "demo", func(a Application) bool { return a.Operation == nil })
	r = call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{Revision: "no-such-branch"})
	if r.status != 400 || !strings.Contains(string(r.body), `"code":9`) ||
		!strings.Contains(string(r.body), "error resolving repo revision: rpc error: code = Unknown desc = Unable to resolve 'no-such-branch' to a commit SHA") {
		t.Fatalf("unknown revision: %d %s", r.status, r.body)
	}
}

func mustResolve(t *testing.T, g GitReader, rev string) string {
	t.Helper()
	sha, err := g.Resolve(t.Context(), demoRepo, rev)
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

func TestAutoSync(t *testing.T) {
	s, mg, sha1 := newFake(t)
	app := demoApp("auto", demoRepo, "apps/demo")
	app.Spec.SyncPolicy = &SyncPolicy{Automated: &SyncPolicyAutomated{Prune: true}, SyncOptions: []string{"CreateNamespace=true"}}
	if err := s.AddApp(app, Deployed()); err != nil {
		t.Fatal(err)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applications/auto/sync", SyncRequest{Revision: sha1}), 400, codeFailedPrecondition,
		"Cannot sync to "+sha1+": auto-sync currently set to main")

	sha2 := mg.Commit(demoRepo, "main", map[string]string{"apps/demo/cm.yaml": configMap("demo", "progressing")})
	if a, _ := s.App("auto"); a.Status.Sync.Revision != sha1 {
		t.Fatal("nothing happens before a reconciliation")
	}
	s.Reconcile()
	a := waitApp(t, s, "auto", func(a Application) bool {
		return a.Status.Sync.Status == SyncStatusSynced && a.Status.Sync.Revision == sha2 && a.Operation == nil &&
			a.Status.OperationState.Phase == PhaseSucceeded
	})
	os := a.Status.OperationState
	if !os.Operation.InitiatedBy.Automated || os.Operation.InitiatedBy.Username != "" || !os.Operation.Sync.Prune ||
		!reflect.DeepEqual(os.Operation.Sync.SyncOptions, []string{"CreateNamespace=true"}) {
		t.Fatalf("auto-sync operation %+v", os.Operation)
	}
	a = waitApp(t, s, "auto", func(a Application) bool {
		return a.Status.Health.Status == HealthProgressing && len(a.Status.History) == 2
	})
	started := a.Status.OperationState.StartedAt
	s.Reconcile()
	if a, _ := s.App("auto"); len(a.Status.History) != 2 || a.Status.OperationState.StartedAt != started {
		t.Fatal("an in-sync app must not be auto-synced again")
	}
}

func TestTimeMarshalling(t *testing.T) {
	ts := NewTime(time.Date(2026, 1, 2, 3, 4, 5, 987654321, time.FixedZone("x", 3600)))
	b, _ := json.Marshal(ts)
	if string(b) != `"2026-01-02T02:04:05Z"` {
		t.Fatalf("got %s", b)
	}
	var zero Time
	if b, _ := json.Marshal(zero); string(b) != "null" {
		t.Fatalf("zero time = %s", b)
	}
	var back Time
	if err := json.Unmarshal([]byte(`"2026-01-02T02:04:05Z"`), &back); err != nil || !back.Equal(ts.Time) {
		t.Fatalf("round trip: %v %v", back, err)
	}
}

func TestDryRunDeploysNothing(t *testing.T) {
	s, _, _ := newFake(t)
	addDemo(t, s)
	call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{DryRun: true})
	a := waitApp(t, s, "demo", func(a Application) bool {
		return a.Operation == nil && a.Status.OperationState != nil && a.Status.OperationState.Phase == PhaseSucceeded
	})
	if !a.Status.OperationState.Operation.Sync.DryRun || a.Status.OperationState.SyncResult.Resources[0].Message != "configmap/demo created (dry run)" {
		t.Fatalf("dry run result %+v", a.Status.OperationState.SyncResult)
	}
	s.Reconcile()
	if a, _ := s.App("demo"); state(a) != "OutOfSync/Missing/Succeeded" || len(a.Status.History) != 0 {
		t.Fatalf("a dry run must not deploy: %s history %d", state(a), len(a.Status.History))
	}
}

// A commit that does not touch the app's path moves status.sync.revision
// without any operation (the app stays Synced): a gate waiting for "an
// operation at revision X" would wait forever (GitOps Promoter #1319/#1541).
func TestCommitElsewhereMovesRevisionWithoutOperation(t *testing.T) {
	s, mg, sha1 := newFake(t)
	addDemo(t, s, Deployed())
	sha2 := mg.Commit(demoRepo, "main", map[string]string{"apps/other/cm.yaml": configMap("other", "degraded")})
	// Reformatting the app's own file does not change its objects either.
	sha3 := mg.Commit(demoRepo, "main", map[string]string{"apps/demo/cm.yaml": "# comment\n" + strings.ReplaceAll(configMapHealthy, "  ", "    ")})
	if sha2 == sha3 {
		t.Fatal("distinct commits expected")
	}
	a := getApp(t, s, "demo?refresh=normal")
	if state(a) != "Synced/Healthy/Succeeded" || a.Status.Sync.Revision != sha3 {
		t.Fatalf("after unrelated commits: %s at %s", state(a), a.Status.Sync.Revision)
	}
	if a.Status.OperationState.SyncResult.Revision != sha1 || len(a.Status.History) != 1 {
		t.Fatal("no operation ran: the last sync result and history still name the first revision")
	}
}

func TestUpdateAppRetargets(t *testing.T) {
	s, mg, _ := newFake(t)
	addDemo(t, s, Deployed())
	shaBranch := mg.Commit(demoRepo, "release-1", map[string]string{"apps/demo/cm.yaml": configMap("demo", "healthy"), "apps/demo/more.yaml": configMap("more", "healthy")})
	a, _ := s.App("demo")
	a.Spec.Source.TargetRevision = "release-1"
	if err := s.UpdateApp(a); err != nil {
		t.Fatal(err)
	}
	a, _ = s.App("demo")
	if a.Status.Sync.Revision != shaBranch || a.Status.Sync.Status != SyncStatusOutOfSync || a.Metadata.Generation != 2 {
		t.Fatalf("after retarget: %s at %s gen %d", state(a), a.Status.Sync.Revision, a.Metadata.Generation)
	}
	if err := s.UpdateApp(demoApp("ghost", demoRepo, "apps/demo")); !errors.Is(err, ErrAppNotFound) {
		t.Fatalf("UpdateApp of unknown app: %v", err)
	}
}

func TestDirectoryIncludeExcludeGlobs(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"config.json", "config.json", true},
		{"config.json", "sub/config.json", false},
		{"*.yaml", "a.yaml", true},
		{"*.yaml", "sub/a.yaml", true}, // no separators: '*' crosses '/'
		{"*.yaml", "a.json", false},
		{"{*.yml,*.yaml}", "a.yml", true},
		{"{*.yml,*.yaml}", "a.yaml", true},
		{"{*.yml,*.yaml}", "a.json", false},
		{"{config.json,env-usw2/*}", "env-usw2/x.yaml", true},
		{"some-directory/*", "some-directory/x.yaml", true},
		{"some-directory/*", "other/x.yaml", false},
		{"[ab].yaml", "b.yaml", true},
		{"[!ab].yaml", "b.yaml", false},
		{"a?.json", "ab.json", true},
		{`\*.json`, "*.json", true},
		{`\*.json`, "a.json", false},
		{"{a.json", "a.json", false}, // does not compile: matches nothing
		{"[a.json", "a.json", false},
	} {
		if got := globMatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// A release repo keeps its generator's config.json next to the manifests: Argo CD refuses it
// as a manifest ("Object 'Kind' is missing") unless directory.exclude (or include) leaves it
// out, and so does the fake.
func TestDirectoryExcludeSkipsConfigFiles(t *testing.T) {
	files := map[string][]byte{
		"config.json":    []byte(`{"image": {"tag": "1.0"}}`),
		"configmap.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n"),
		"sub/extra.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n"),
	}
	for _, tc := range []struct {
		name, directory string
		want            []string // object names; nil = an error naming config.json
	}{
		{"no directory options", ``, nil},
		{"exclude", `{"exclude": "config.json"}`, []string{"web"}},
		{"include yaml", `{"include": "*.yaml"}`, []string{"web"}},
		{"include yaml, recurse", `{"include": "*.yaml", "recurse": true}`, []string{"extra", "web"}},
		{"exclude a list, recurse", `{"exclude": "{config.json,sub/*}", "recurse": true}`, []string{"web"}},
		{"exclude wins over include", `{"include": "*", "exclude": "*.json"}`, []string{"web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := ApplicationSource{Path: "envs/dev"}
			if tc.directory != "" {
				src.Directory = json.RawMessage(tc.directory)
			}
			objs, err := parseManifests(src, "web-dev", files)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), `"config.json"`) || !strings.Contains(err.Error(), "Kind") {
					t.Fatalf("err = %v, want Argo CD's missing-Kind error for config.json", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range objs {
				names = append(names, o.Name)
			}
			sort.Strings(names)
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("objects %v, want %v", names, tc.want)
			}
		})
	}
}
