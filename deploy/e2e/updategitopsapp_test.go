package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// webHelm is web-dev of the stage's service and environment, deployed, with Helm settings.
func webHelm() argocdtest.Application {
	a := app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"})
	a.Spec.Source.Helm = json.RawMessage(`{"values":"replicas: 1\n","parameters":[{"name":"image.tag","value":"1.0"},{"name":"port","value":"80"}]}`)
	return a
}

func helmOf(t *testing.T, s *stack, name string) string {
	t.Helper()
	a, ok := s.argo.App(name)
	if !ok {
		t.Fatalf("app %s is gone", name)
	}
	return string(a.Spec.Source.Helm)
}

// UpdateGitOpsApp changes the app's Helm parameter (merged with the others) without syncing;
// the GitOpsSync after it syncs that app without being told which; GetAppDetails reads it
// through the update's output.
func TestUpdateGitOpsAppThenSync(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.addApp(webHelm(), argocdtest.Deployed())
	s.waitRecord("web-dev")
	before, _ := s.argo.App("web-dev")
	r := s.wait(s.start(pipeline(`      - id: upd
        type: UpdateGitOpsApp
        with: {applicationName: web-dev, helm: {parameters: [{name: image.tag, value: "2.0"}]}}
      - id: sync
        type: GitOpsSync
        timeout: 60s
        with: {waitTillHealthy: true}
      - id: details
        type: GitOpsGetAppDetails
        with: {applicationName: "${{ steps.upd.outputs.application.name }}"}
`, false), nil).ID, 90*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	upd := step(r, "dev", "upd").Outputs
	app := upd["application"].(map[string]any)
	if app["name"] != "web-dev" || app["agent"] != "eu" || app["agentIdentifier"] != "eu" || upd["changed"] != true {
		t.Errorf("upd outputs %v", upd)
	}
	// The outputs hold what the step changed, not the app's other values (which may be secret).
	if b, a := fmt.Sprint(upd["sourceBefore"]), fmt.Sprint(upd["sourceAfter"]); !strings.Contains(b, "value:1.0") || !strings.Contains(a, "value:2.0") ||
		strings.Contains(a, "port") || strings.Contains(b, "replicas: 1") || !strings.Contains(a, "targetRevision:main") {
		t.Errorf("sourceBefore %s\nsourceAfter %s", b, a)
	}
	if h := helmOf(t, s, "web-dev"); !strings.Contains(h, `{"name":"image.tag","value":"2.0"}`) || !strings.Contains(h, `"port"`) || !strings.Contains(h, `"values"`) {
		t.Errorf("helm in Argo CD: %s", h)
	}
	synced := appsOut(step(r, "dev", "sync"))
	if len(synced) != 1 || synced[0]["name"] != "web-dev" {
		t.Errorf("GitOpsSync synced %v, want the updated app", synced)
	}
	if reqs := s.syncRequests("web-dev"); len(reqs) != 1 {
		t.Errorf("%d sync requests, want 1 (from GitOpsSync; the update itself never syncs)", len(reqs))
	}
	after, _ := s.argo.App("web-dev")
	if len(after.Status.History) != len(before.Status.History)+1 || after.Status.Sync.Status != "Synced" {
		t.Errorf("after the run: sync %s, %d deployments (before %d)", after.Status.Sync.Status, len(after.Status.History), len(before.Status.History))
	}
	if d := appsOut(step(r, "dev", "details")); len(d) != 1 || d[0]["name"] != "web-dev" {
		t.Errorf("details %v", d)
	}
}

// The stage fails after its update: the rollback's UpdateGitOpsApp (rollback: true) puts back
// the target revision and the Helm parameter it changed — and only those — and the rollback's
// GitOpsSync syncs the app again.
func TestUpdateGitOpsAppRollback(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.git.Commit(repoURL, "release-2", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy") + "  version: \"2\"\n"})
	s.addApp(webHelm(), argocdtest.Deployed())
	s.waitRecord("web-dev")
	src := pipeline(`      - id: upd
        type: UpdateGitOpsApp
        with: {applicationName: web-dev, targetRevision: release-2, helm: {parameters: [{name: image.tag, value: "2.0"}, {name: debug, value: "true"}]}}
      - id: sync
        type: GitOpsSync
        timeout: 60s
      - id: check
        type: GitOpsGetAppDetails
        with: {applicationsList: [{applicationName: ghost, agentId: eu}]}
    rollbackSteps:
      - id: revert
        type: UpdateGitOpsApp
        with: {rollback: true}
      - id: resync
        type: GitOpsSync
        timeout: 60s
`, false)
	r := s.wait(s.start(src, nil).ID, 90*time.Second)
	if r.Status == pipelines.StSucceeded {
		t.Fatalf("the run succeeded; check must fail")
	}
	rv := step(r, "dev", "revert")
	if rv == nil || rv.Status != pipelines.StSucceeded || rv.Outputs["rollback"] != true || rv.Outputs["changed"] != true {
		t.Fatalf("revert: %+v\n%s", rv, describeRun(r))
	}
	a, _ := s.argo.App("web-dev")
	if a.Spec.Source.TargetRevision != "main" {
		t.Errorf("targetRevision after rollback: %q, want main", a.Spec.Source.TargetRevision)
	}
	h := string(a.Spec.Source.Helm)
	if !strings.Contains(h, `{"name":"image.tag","value":"1.0"}`) || strings.Contains(h, "debug") || !strings.Contains(h, `"port"`) || !strings.Contains(h, `"values"`) {
		t.Errorf("helm after rollback: %s", h)
	}
	if rs := step(r, "dev", "resync"); rs == nil || rs.Status != pipelines.StSucceeded || len(appsOut(rs)) != 1 {
		t.Errorf("resync: %+v", rs)
	}
	if reqs := s.syncRequests("web-dev"); len(reqs) != 2 {
		t.Errorf("%d sync requests, want 2 (the stage's and the rollback's)", len(reqs))
	}
}

// An app the agent does not have, or one of another environment, fails the step before
// anything is changed.
func TestUpdateGitOpsAppRefusesAppsOutsideTheStage(t *testing.T) {
	s := newStack(t, stackOpts{})
	prod := app("web-prod", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "prod"})
	s.addApp(prod)
	s.waitRecord("web-prod")
	for _, c := range []struct{ app, want string }{
		{"ghost", "application ghost not found on agent eu"},
		{"web-prod", "does not belong to this stage: label harness.io/envRef=prod, the stage's environment is dev"},
	} {
		r := s.wait(s.start(pipeline("      - {id: upd, type: UpdateGitOpsApp, with: {applicationName: "+c.app+", targetRevision: v9}}\n", false), nil).ID, 60*time.Second)
		st := step(r, "dev", "upd")
		if r.Status != pipelines.StFailed || !strings.Contains(st.Error, c.want) {
			t.Errorf("%s: %s %q, want %q", c.app, r.Status, st.Error, c.want)
		}
	}
	if a, _ := s.argo.App("web-prod"); a.Spec.Source.TargetRevision != "main" {
		t.Errorf("web-prod changed: %q", a.Spec.Source.TargetRevision)
	}
}
