package controller

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestAppStatusesFollowChanges: the app list handed to stage policies is reused while
// prflow-apps is unchanged, and rebuilt when a record changes, appears or goes.
func TestAppStatusesFollowChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	health := func(v any) map[string]string {
		t.Helper()
		arr, ok := v.(*ast.Array)
		if !ok {
			t.Fatalf("app list is %T, want an OPA array", v)
		}
		out := map[string]string{}
		arr.Foreach(func(x *ast.Term) {
			j, _ := ast.JSON(x.Value)
			m := j.(map[string]any)
			out[m["key"].(string)] = m["health"].(string)
		})
		return out
	}
	put := func(key, h string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"name": key, "health": h})
		if _, err := e.ctl.b.Apps.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := e.ctl.appStatuses(ctx); err != nil || len(health(v)) != 0 {
		t.Fatalf("no apps: %v %v", v, err)
	}
	put("sim.web-staging", "Healthy")
	put("sim.web-prod", "Healthy")
	first, err := e.ctl.appStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := e.ctl.appStatuses(ctx)
	if first != again {
		t.Error("an unchanged prflow-apps built the list again")
	}
	put("sim.web-staging", "Degraded")
	v, _ := e.ctl.appStatuses(ctx)
	if h := health(v); h["sim.web-staging"] != "Degraded" || h["sim.web-prod"] != "Healthy" || len(h) != 2 {
		t.Fatalf("after a change: %v", h)
	}
	if err := e.ctl.b.Apps.Delete(ctx, "sim.web-prod"); err != nil {
		t.Fatal(err)
	}
	put("sim.web-dev", "Progressing")
	v, _ = e.ctl.appStatuses(ctx)
	if h := health(v); len(h) != 2 || h["sim.web-dev"] != "Progressing" || h["sim.web-prod"] != "" {
		t.Fatalf("after a delete and an add: %v", h)
	}
	// A deleted app's tombstone is no app, read directly or through the watcher.
	tomb, _ := json.Marshal(map[string]any{"v": 1, "name": "web-dev", "deleted": map[string]any{"at": "2026-11-28T01:00:00Z", "reason": "DELETED"}})
	if _, err := e.ctl.b.Apps.Put(ctx, "sim.web-dev", tomb); err != nil {
		t.Fatal(err)
	}
	v, _ = e.ctl.appStatuses(ctx)
	if h := health(v); len(h) != 1 || h["sim.web-staging"] != "Degraded" {
		t.Fatalf("a tombstone counted as an app: %v", h)
	}
	recs := map[string]any{}
	aw := newAppWatch()
	aw.log = e.ctl.log
	for _, k := range []string{"sim.web-staging", "sim.web-dev"} {
		ent, err := e.ctl.b.Apps.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		aw.apply(recs, ent)
	}
	if h := health(appRecords(recs)); len(h) != 1 || h["sim.web-staging"] != "Degraded" {
		t.Fatalf("the watcher counted a tombstone as an app: %v", h)
	}
}
