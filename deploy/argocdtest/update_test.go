package argocdtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// PATCH /api/v1/applications/{name} behaves like Argo CD's: a JSON patch may test the
// resourceVersion (a stale one fails with upstream's message, HTTP 500, nothing written), a
// merge patch works too, the result is validated, a missing app is 403, an unknown patch
// type 400; a changed target or Helm value makes a deployed app OutOfSync and nothing syncs.
func TestPatchApplication(t *testing.T) {
	s, mg, _ := newFake(t)
	repo := "https://git.example/demo.git"
	mg.Commit(repo, "v2", map[string]string{"apps/demo/cm.yaml": strings.Replace(configMapHealthy, "name: ", "name: v2-", 1)})
	if err := s.AddApp(demoApp("demo", repo, "apps/demo"), Deployed()); err != nil {
		t.Fatal(err)
	}
	waitApp(t, s, "demo", func(a Application) bool { return a.Status.Sync.Status == SyncStatusSynced })
	patch := func(name, typ, p string) resp {
		return call(t, s, "PATCH", "/api/v1/applications/"+name, ApplicationPatchRequest{Name: name, Patch: p, PatchType: typ})
	}
	cur := getApp(t, s, "demo")
	rv := cur.Metadata.ResourceVersion

	// A stale resourceVersion: the test op fails, the app is unchanged.
	r := patch("demo", "json", `[{"op":"test","path":"/metadata/resourceVersion","value":"1"},{"op":"replace","path":"/spec/source/targetRevision","value":"v2"}]`)
	wantError(t, r, 500, codeUnknown, "error applying patch: testing value /metadata/resourceVersion failed: test failed")
	if a := getApp(t, s, "demo"); a.Spec.Source.TargetRevision != "main" {
		t.Fatalf("a failed patch was written: %q", a.Spec.Source.TargetRevision)
	}
	// A revision that does not resolve is refused by validation.
	r = patch("demo", "json", `[{"op":"replace","path":"/spec/source/targetRevision","value":"nope"}]`)
	if r.status != 400 || !strings.Contains(string(r.body), "InvalidSpecError: Unable to generate manifests in apps/demo") {
		t.Fatalf("unresolvable revision: %d %s", r.status, r.body)
	}
	// Two source types at once are refused.
	r = patch("demo", "merge", `{"spec":{"source":{"helm":{"parameters":[{"name":"a","value":"1"}]},"kustomize":{"images":["x:1"]}}}}`)
	if r.status != 400 || !strings.Contains(string(r.body), "multiple application sources defined: Helm,Kustomize") {
		t.Fatalf("two source types: %d %s", r.status, r.body)
	}
	// The current resourceVersion: written, no operation, OutOfSync once reconciled.
	r = patch("demo", "", `[{"op":"test","path":"/metadata/resourceVersion","value":"`+rv+`"},{"op":"replace","path":"/spec/source/targetRevision","value":"v2"}]`)
	if r.status != 200 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	var got Application
	r.json(t, &got)
	if got.Spec.Source.TargetRevision != "v2" || got.Metadata.ResourceVersion == rv || got.Operation != nil {
		t.Fatalf("patched app %+v", got)
	}
	waitApp(t, s, "demo", func(a Application) bool { return a.Status.Sync.Status == SyncStatusOutOfSync })
	// Back to main (Synced again), then a Helm value through a merge patch: OutOfSync again,
	// though the fake renders the same objects.
	if r = patch("demo", "merge", `{"spec":{"source":{"targetRevision":"main"}}}`); r.status != 200 {
		t.Fatalf("merge patch: %d %s", r.status, r.body)
	}
	waitApp(t, s, "demo", func(a Application) bool { return a.Status.Sync.Status == SyncStatusSynced })
	if r = patch("demo", "merge", `{"spec":{"source":{"helm":{"parameters":[{"name":"image.tag","value":"2"}]}}}}`); r.status != 200 {
		t.Fatalf("merge patch: %d %s", r.status, r.body)
	}
	a := waitApp(t, s, "demo", func(a Application) bool { return a.Status.Sync.Status == SyncStatusOutOfSync })
	var h map[string]any
	if err := json.Unmarshal(a.Spec.Source.Helm, &h); err != nil || len(h["parameters"].([]any)) != 1 || a.Operation != nil {
		t.Errorf("helm %s (%v), operation %+v", a.Spec.Source.Helm, err, a.Operation)
	}
	// Errors of the request itself.
	wantError(t, patch("ghost", "json", `[]`), 403, codePermissionDenied, "permission denied")
	r = call(t, s, "PATCH", "/api/v1/applications/ghost", ApplicationPatchRequest{Name: "ghost", Patch: `[]`, Project: "default"})
	wantError(t, r, 404, codeNotFound, `applications.argoproj.io "ghost" not found`)
	wantError(t, patch("demo", "strategic", `{}`), 400, codeInvalidArgument, "Patch type 'strategic' is not supported")
	if r = patch("demo", "json", `{"op":"replace"}`); r.status != 500 || !strings.Contains(string(r.body), "error decoding json patch") {
		t.Errorf("malformed JSON patch: %d %s", r.status, r.body)
	}
	if r = call(t, s, "PATCH", "/api/v1/applications/demo", `{}`, "Content-Type", "text/plain"); r.status != 415 {
		t.Errorf("PATCH without JSON content type: %d", r.status)
	}
}
