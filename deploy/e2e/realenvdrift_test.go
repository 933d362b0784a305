package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/environments"
)

// TestRealEnvironmentDrift: after a promotion dev is "synced" in the environments model; a
// hand commit to dev's config (replicas) makes the real Argo CD report the app OutOfSync (its
// apps do not sync automatically), and the model shows dev drifted with that reason. Syncing
// the app in Argo CD clears the drift. It logs (REALTIME) how long after Argo CD first
// reported OutOfSync the model showed the drift.
func TestRealEnvironmentDrift(t *testing.T) {
	r := realSetupAgent(t, "dev")
	run := r.e.Wait(r.e.Start(r.promotion([]string{"dev"}, []string{"dev"}, ""), map[string]any{"tag": "1.5.0"}).ID, 5*time.Minute)
	if run.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", run.Status, run.Error, describeRun(run))
	}
	model := r.e.Ctl.Environments()
	env := func() *environments.Environment {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e, err := model.Get(ctx, "dev")
		if err != nil {
			t.Fatalf("model: %v", err)
		}
		return e
	}
	waitState := func(state string, d time.Duration) *environments.Environment {
		t.Helper()
		var e *environments.Environment
		for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
			if e = env(); e.State == state {
				return e
			}
			if time.Now().After(end) {
				b, _ := json.MarshalIndent(e, "", "  ")
				t.Fatalf("dev is %q, want %q:\n%s", e.State, state, b)
			}
		}
	}
	waitState("synced", time.Minute)

	// A person changes dev's replicas on main; the ApplicationSet regenerates the app with the
	// new argument and Argo CD, which does not sync it, reports it OutOfSync.
	r.setConfig("dev", "replicas", "5")
	r.pushEvent()
	var argoAt time.Time
	for end := time.Now().Add(3 * time.Minute); argoAt.IsZero(); time.Sleep(50 * time.Millisecond) {
		code, body := r.api("GET", "/api/v1/applications/"+r.id+"-dev", nil)
		var a struct {
			Status struct {
				Sync struct{ Status string } `json:"sync"`
			} `json:"status"`
		}
		if code == 200 && json.Unmarshal(body, &a) == nil && a.Status.Sync.Status == "OutOfSync" {
			argoAt = time.Now()
		}
		if time.Now().After(end) {
			t.Fatalf("Argo CD never reported %s-dev OutOfSync after the hand commit: %d %s", r.id, code, tail(string(body), 400))
		}
	}
	e := waitState("drifted", 30*time.Second)
	lag := time.Since(argoAt)
	t.Logf("REALTIME drift shown %.2fs after Argo CD reported OutOfSync", lag.Seconds())
	if e.Drift == nil || !strings.Contains(strings.Join(e.Drift.Reasons, "; "), "OutOfSync") || e.Drift.Since.IsZero() {
		t.Errorf("drift of dev: %+v", e.Drift)
	}

	// Argo CD syncs the app to what git says: the drift clears.
	if code, body := r.api("POST", "/api/v1/applications/"+r.id+"-dev/sync", map[string]any{}); code != 200 {
		t.Fatalf("sync: %d %s", code, tail(string(body), 400))
	}
	r.waitHealthy("dev")
	if e := waitState("synced", time.Minute); e.Drift != nil {
		t.Errorf("dev synced but drift kept: %+v", e.Drift)
	}
}
