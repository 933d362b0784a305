package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// Issue 32 B and C on the real Argo CD: apps deleted, created again by their ApplicationSet,
// or renamed through it while GitOpsSync waits for them.

// realAppMeta is the part of an Application these tests read.
type realAppMeta struct {
	Metadata struct {
		UID string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		OperationState *struct {
			Operation struct {
				Info []struct{ Name, Value string } `json:"info"`
			} `json:"operation"`
		} `json:"operationState"`
	} `json:"status"`
	Operation *struct {
		Info []struct{ Name, Value string } `json:"info"`
	} `json:"operation"`
}

// app reads an Application with the admin token; ok is false while Argo CD answers 403 (no
// such app).
func (r *realEnv) app(name string) (realAppMeta, bool) {
	r.t.Helper()
	var a realAppMeta
	code, body := r.api("GET", "/api/v1/applications/"+name, nil)
	if code != 200 {
		return a, false
	}
	if err := json.Unmarshal(body, &a); err != nil {
		r.t.Fatalf("application %s: %v", name, err)
	}
	return a, true
}

// runTagged reports whether the app's current or last operation was started by run.
func (a realAppMeta) runTagged(run string) bool {
	var infos []struct{ Name, Value string }
	if a.Operation != nil {
		infos = a.Operation.Info
	} else if a.Status.OperationState != nil {
		infos = a.Status.OperationState.Operation.Info
	}
	for _, i := range infos {
		if i.Name == "prflow.run" && i.Value == run {
			return true
		}
	}
	return false
}

// waitAppUntil polls the app until cond holds.
func (r *realEnv) waitAppUntil(name, what string, d time.Duration, cond func(a realAppMeta, ok bool) bool) realAppMeta {
	r.t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		a, ok := r.app(name)
		if cond(a, ok) {
			return a
		}
		if time.Now().After(end) {
			r.t.Fatalf("application %s: timed out waiting for %s", name, what)
		}
	}
}

// B: a plain app (no ApplicationSet) is deleted while GitOpsSync waits for its health. The
// step fails at once saying the app was deleted and when, and the rollback's GitOpsSync,
// which Argo CD would answer with 403, skips the app and says so.
func TestRealAppDeletedMidWait(t *testing.T) {
	r := realSetup(t)
	name := r.id + "-solo"
	jsonnet := map[string]any{"include": "*.jsonnet", "jsonnet": map[string]any{"tlas": []any{
		map[string]any{"name": "env", "value": "solo"},
		map[string]any{"name": "image", "value": realImage + "1.4.1"},
		map[string]any{"name": "replicas", "value": "2"},
		map[string]any{"name": "simulate", "value": "progressing"},
	}}}
	app := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "argocd"},
		"spec": map[string]any{"project": "default",
			"source":      map[string]any{"repoURL": r.url, "targetRevision": "main", "path": "manifests/web", "directory": jsonnet},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": name},
			"syncPolicy":  map[string]any{"syncOptions": []any{"CreateNamespace=true"}}},
	}
	if code, body := r.api("POST", "/api/v1/applications", app); code != 200 {
		t.Fatalf("create application: %d %s", code, body)
	}
	t.Cleanup(func() { r.api("DELETE", "/api/v1/applications/"+name+"?cascade=true", nil) })
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	src := fmt.Sprintf(`name: %[1]s
service: {name: %[1]s}
environments:
  - name: solo
    clusters: [{name: in-cluster, agent: real}]
stages:
  - id: solo
    environment: solo
    steps:
      - id: sync
        type: GitOpsSync
        timeout: 5m
        with:
          applicationsList: [{agentId: real, applicationName: %[2]s}]
          waitTillHealthy: true
    rollbackSteps:
      - id: resync
        type: GitOpsSync
        timeout: 2m
        with:
          applicationsList: [{agentId: real, applicationName: %[2]s}]
`, r.id, name)
	run := r.e.Start(src, nil)
	r.waitStep(run.ID, "solo", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Progressing")
	})
	t0 := time.Now()
	if code, body := r.api("DELETE", "/api/v1/applications/"+name+"?cascade=true", nil); code != 200 {
		t.Fatalf("delete application: %d %s", code, body)
	}
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "app-deleted", final)
	st := ctltest.Step(final, "solo", "sync")
	if final.Status != pipelines.StFailed || !strings.Contains(st.Error, "app "+name+" was deleted at") ||
		strings.Contains(st.Error, "timed out") || strings.Contains(st.Error, "no status record") {
		t.Fatalf("run %s; sync step %q\n%s", final.Status, st.Error, describeRun(final))
	}
	t.Logf("REALTIME the step failed %.1fs after the DELETE: %s", st.Ended.Sub(t0).Seconds(), st.Error)
	rb := final.Find("solo").Step("resync", true)
	if rb == nil || rb.Status != pipelines.StSucceeded {
		t.Fatalf("the rollback must skip the deleted app: %+v\n%s", rb, describeRun(final))
	}
	if apps := appsOut(rb); len(apps) != 1 || apps[0]["state"] != "skipped" || !strings.Contains(fmt.Sprint(apps[0]["skipped"]), "was deleted at") {
		t.Fatalf("rollback outputs: %v", apps)
	}
}

// C: prod's app is deleted while GitOpsSync waits for its health, and Argo CD's
// ApplicationSet controller creates it again (a new uid). The step syncs the new app and
// judges it: the run passes once the app is healthy, instead of waiting for the operation
// that went with the old app until the timeout and reverting.
func TestRealAppRecreatedMidWait(t *testing.T) {
	r := realSetupAgent(t, "prod")
	name := r.id + "-prod"
	run := r.e.Start(r.promotion([]string{"prod"}, []string{progressingProd}, ""), map[string]any{"tag": "7.0.0"})
	r.waitStep(run.ID, "prod", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Progressing")
	})
	old, _ := r.app(name)
	t0 := time.Now()
	if code, body := r.api("DELETE", "/api/v1/applications/"+name+"?cascade=true", nil); code != 200 {
		t.Fatalf("delete application: %d %s", code, body)
	}
	back := r.waitAppUntil(name, "the ApplicationSet controller to create it again", time.Minute, func(a realAppMeta, ok bool) bool {
		return ok && a.Metadata.UID != "" && a.Metadata.UID != old.Metadata.UID
	})
	t.Logf("REALTIME the ApplicationSet created %s again %.1fs after the DELETE (uid %s, was %s)", name, time.Since(t0).Seconds(), back.Metadata.UID, old.Metadata.UID)
	r.waitAppUntil(name, "a sync of the new app by the run", 2*time.Minute, func(a realAppMeta, ok bool) bool {
		return ok && a.Metadata.UID == back.Metadata.UID && a.runTagged(run.ID)
	})
	t.Logf("REALTIME the step synced the new app %.1fs after the DELETE", time.Since(t0).Seconds())
	if cur, _ := r.e.Ctl.Get(context.Background(), run.ID); cur.Status.Terminal() {
		t.Fatalf("the run ended on the recreated app: %s %s\n%s", cur.Status, cur.Error, describeRun(cur))
	}
	r.setConfig("prod", "simulate", "healthy")
	r.pushEvent()
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "app-recreated", final)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %s\n%s", final.Status, final.Error, describeRun(final))
	}
	apps := appsOut(ctltest.Step(final, "prod", "sync"))
	if len(apps) != 1 || apps[0]["name"] != name || apps[0]["health"] != "Healthy" ||
		!strings.Contains(fmt.Sprint(apps[0]["note"]), "deleted and created again") {
		t.Fatalf("sync outputs: %v", apps)
	}
	r.deployed("prod", "7.0.0")
}

// B, ApplicationSet case: the ApplicationSet's template is changed so prod's app gets a new
// name while GitOpsSync waits for it (the controller creates the new app and deletes the
// old). The stage links its apps by that ApplicationSet, so the step follows the new app,
// syncs and judges it.
func TestRealAppRenamedMidWait(t *testing.T) {
	r := realSetupAgent(t, "prod")
	run := r.e.Start(r.promotion([]string{"prod"}, []string{progressingProd}, ""), map[string]any{"tag": "8.0.0"})
	r.waitStep(run.ID, "prod", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Progressing")
	})
	code, body := r.api("GET", "/api/v1/applicationsets/"+r.set, nil)
	if code != 200 {
		t.Fatalf("get ApplicationSet: %d %s", code, body)
	}
	var as map[string]any
	if err := json.Unmarshal(body, &as); err != nil {
		t.Fatal(err)
	}
	delete(as, "status")
	// Argo CD's upsert creates first: a create carrying the read object's resourceVersion (or
	// uid) is refused by the kube-apiserver.
	if meta, ok := as["metadata"].(map[string]any); ok {
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"} {
			delete(meta, k)
		}
	}
	tmeta := as["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
	tmeta["name"] = r.id + "-{{path.basename}}-v2"
	t0 := time.Now()
	if code, body := r.api("POST", "/api/v1/applicationsets?upsert=true", as); code != 200 {
		t.Fatalf("rename through the ApplicationSet: %d %s", code, body)
	}
	renamed := r.id + "-prod-v2"
	r.waitAppUntil(r.id+"-prod", "the old app to be deleted", time.Minute, func(_ realAppMeta, ok bool) bool { return !ok })
	r.waitAppUntil(renamed, "a sync of the renamed app by the run", 2*time.Minute, func(a realAppMeta, ok bool) bool {
		return ok && a.runTagged(run.ID)
	})
	t.Logf("REALTIME the step synced %s %.1fs after the rename", renamed, time.Since(t0).Seconds())
	r.setConfig("prod", "simulate", "healthy")
	r.pushEvent()
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "app-renamed", final)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %s\n%s", final.Status, final.Error, describeRun(final))
	}
	apps := appsOut(ctltest.Step(final, "prod", "sync"))
	if len(apps) != 1 || apps[0]["name"] != renamed || apps[0]["health"] != "Healthy" ||
		!strings.Contains(fmt.Sprint(apps[0]["note"]), "following "+renamed) {
		t.Fatalf("sync outputs: %v", apps)
	}
	r.deployed("prod", "8.0.0")
}
