package argocdtest

import (
	"strings"
	"testing"
)

// A project that permits no kind refuses every sync as v3.2.11 does (checked on realenv): the
// operation fails before applying anything, each resource SyncFailed "not permitted"; with a
// deny window the sync call itself is refused. GET project returns the rules.
func TestProjectResourceRulesRefuseSync(t *testing.T) {
	s, _, _ := newFake(t)
	s.SetProjectResources("locked", ProjectResources{NamespaceBlacklist: []GroupKind{{Group: "*", Kind: "*"}}})
	a := demoApp("locked-app", "https://git.example/demo.git", "apps/demo")
	a.Spec.Project = "locked"
	if r := call(t, s, "POST", "/api/v1/applications", a); r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := call(t, s, "POST", "/api/v1/applications/locked-app/sync", map[string]any{}); r.status != 200 {
		t.Fatalf("sync call: %d %s", r.status, r.body)
	}
	waitFor(t, "the sync to end", func() bool {
		app, _ := s.App("locked-app")
		return app.Status.OperationState != nil && app.Status.OperationState.FinishedAt != nil
	})
	app, _ := s.App("locked-app")
	op := app.Status.OperationState
	if op.Phase != PhaseFailed || op.Message != "one or more synchronization tasks are not valid" || op.SyncResult == nil || len(op.SyncResult.Resources) != 1 ||
		op.SyncResult.Resources[0].Status != "SyncFailed" || op.SyncResult.Resources[0].Message != "resource :ConfigMap is not permitted in project locked" {
		t.Fatalf("sync in a project that permits nothing: %+v %+v", op, op.SyncResult)
	}
	if len(app.Status.History) != 0 {
		t.Fatalf("a refused sync deployed: %+v", app.Status.History)
	}
	var p AppProject
	call(t, s, "GET", "/api/v1/projects/locked", nil).json(t, &p)
	if len(p.Spec.NamespaceResourceBlacklist) != 1 || p.Spec.NamespaceResourceBlacklist[0].Kind != "*" || len(p.Spec.ClusterResourceWhitelist) != 0 {
		t.Fatalf("project: %+v", p.Spec)
	}
	// The rules stay when the windows change; a deny window refuses the call.
	if err := s.SetSyncWindows("locked", SyncWindow{Kind: "deny", Schedule: "* * * * *", Duration: "24h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applications/locked-app/sync", map[string]any{}), 403, codePermissionDenied, "cannot sync: blocked by sync window")
	call(t, s, "GET", "/api/v1/projects/locked", nil).json(t, &p)
	if len(p.Spec.NamespaceResourceBlacklist) != 1 || len(p.Spec.SyncWindows) != 1 {
		t.Fatalf("project after SetSyncWindows: %+v", p.Spec)
	}
}

// A multi-source app renders every source; sourcePositions/revisions pin the given ones, and a
// position out of range is refused as v3.2.11 does.
func TestManifestsMultiSource(t *testing.T) {
	s, mg, _ := newFake(t)
	const other = "https://git.example/base.git"
	mg.Commit(other, "main", map[string]string{"base/cm.yaml": configMap("base", "healthy")})
	a := demoApp("multi", "", "")
	a.Spec.Source = nil
	a.Spec.Sources = []ApplicationSource{{RepoURL: "https://git.example/demo.git", Path: "apps/demo", TargetRevision: "main"},
		{RepoURL: other, Path: "base", TargetRevision: "main"}}
	if err := s.AddApp(a); err != nil {
		t.Fatal(err)
	}
	head := mg.Commit("https://git.example/demo.git", "pr", map[string]string{"apps/demo/cm.yaml": configMap("demo", "degraded")})
	r := call(t, s, "GET", "/api/v1/applications/multi/manifests?sourcePositions=1&revisions="+head, nil)
	if r.status != 200 || !strings.Contains(string(r.body), "degraded") || !strings.Contains(string(r.body), `\"name\":\"base\"`) {
		t.Fatalf("pinned: %d %s", r.status, r.body)
	}
	r = call(t, s, "GET", "/api/v1/applications/multi/manifests", nil)
	if r.status != 200 || strings.Contains(string(r.body), "degraded") {
		t.Fatalf("unpinned: %d %s", r.status, r.body)
	}
	wantError(t, call(t, s, "GET", "/api/v1/applications/multi/manifests?sourcePositions=3&revisions="+head, nil), 500, codeUnknown, "source position is out of range")
}
