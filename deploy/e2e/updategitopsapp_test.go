package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
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
	t.Parallel()
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
	t.Parallel()
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
	rv := r.Find("dev").Step("revert", true)
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
	if rs := r.Find("dev").Step("resync", true); rs == nil || rs.Status != pipelines.StSucceeded || len(appsOut(rs)) != 1 {
		t.Errorf("resync: %+v", rs)
	}
	if reqs := s.syncRequests("web-dev"); len(reqs) != 2 {
		t.Errorf("%d sync requests, want 2 (the stage's and the rollback's)", len(reqs))
	}
}

// An app the agent does not have, or one of another environment, fails the step before
// anything is changed.
func TestUpdateGitOpsAppRefusesAppsOutsideTheStage(t *testing.T) {
	t.Parallel()
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

// One pipeline per case, each against the fake Argo CD through the real agent: what the step
// writes into the app, or how it fails.
func TestUpdateGitOpsAppCases(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.git.Commit(repoURL, "release-2", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy")})
	labels := map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}
	s.addApp(webHelm())
	kust := app("api-dev", "apps/web", labels)
	kust.Spec.Source.Kustomize = json.RawMessage(`{"images":["nginx=reg/nginx:1","redis:6"],"commonLabels":{"team":"pay"}}`)
	s.addApp(kust)
	s.waitRecord("web-dev")
	s.waitRecord("api-dev")
	source := func(name string) string {
		a, _ := s.argo.App(name)
		b, _ := json.Marshal(a.Spec.Source)
		return string(b)
	}
	for _, c := range []struct {
		name, with string
		app        string
		want       []string // in the app's source after the run
		fail       string   // the step's error, when it must fail
	}{
		{name: "helm parameters merged by name", app: "web-dev",
			with: `{applicationName: web-dev, helm: {parameters: [{name: image.tag, value: "3.0"}, {name: debug, value: "true"}]}}`,
			want: []string{`{"name":"image.tag","value":"3.0"}`, `{"name":"port","value":"80"}`, `{"name":"debug","value":"true"}`, `"values":"replicas: 1\n"`}},
		{name: "kustomize images merged by image name, labels by key", app: "api-dev",
			with: `{applicationName: api-dev, kustomize: {images: ["nginx:1.25"], commonLabels: {env: dev}}}`,
			want: []string{`"images":["nginx:1.25","redis:6"]`, `"commonLabels":{"env":"dev","team":"pay"}`}},
		{name: "targetRevision", app: "web-dev", with: `{applicationName: web-dev, targetRevision: release-2}`,
			want: []string{`"targetRevision":"release-2"`}},
		{name: "a revision Argo CD cannot resolve", app: "web-dev", with: `{applicationName: web-dev, targetRevision: nope}`,
			fail: "InvalidSpecError"},
		{name: "unknown app", app: "ghost", with: `{applicationName: ghost, targetRevision: main}`,
			fail: "application ghost not found on agent eu"},
		{name: "Kustomize values on a Helm app", app: "web-dev", with: `{applicationName: web-dev, kustomize: {images: ["x:1"]}}`,
			fail: "multiple application sources defined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := source(c.app)
			r := s.wait(s.start(pipeline("      - {id: upd, type: UpdateGitOpsApp, with: "+c.with+"}\n", false), nil).ID, 60*time.Second)
			st := step(r, "dev", "upd")
			if c.fail != "" {
				if r.Status != pipelines.StFailed || !strings.Contains(st.Error, c.fail) {
					t.Fatalf("%s %q, want a failure with %q", r.Status, st.Error, c.fail)
				}
				if after := source(c.app); after != before {
					t.Errorf("a failed update changed the app:\n%s\n%s", before, after)
				}
				return
			}
			if r.Status != pipelines.StSucceeded {
				t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
			}
			got := source(c.app)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("source lacks %s:\n%s", w, got)
				}
			}
		})
	}
	// A typo'd field never starts a run.
	_, err := s.ctl.Start(context.Background(), controller.StartRequest{File: "typo.yaml", Executor: "tester",
		Source: []byte(pipeline("      - {id: upd, type: UpdateGitOpsApp, with: {applicationName: web-dev, helm: {paramters: [{name: a, value: b}]}}}\n", false))})
	if err == nil || !strings.Contains(err.Error(), `unknown field "paramters"; did you mean "parameters"?`) {
		t.Errorf("typo'd field: %v", err)
	}
}

// Three runs update one app at the same time (slow Argo CD writes widen the window between
// the agent's read and its write): every change is there at the end. (A change made outside
// prflow between the read and the write is covered in deploy/argocd.)
func TestUpdateGitOpsAppConcurrentRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(webHelm())
	s.waitRecord("web-dev")
	s.argo.InjectFault(argocdtest.Fault{Method: "PATCH", Path: "/api/v1/applications/web-dev", Delay: 150 * time.Millisecond, Times: -1})
	var ids []string
	for _, p := range []string{"a", "b", "c"} {
		ids = append(ids, s.start(pipeline("      - {id: upd, type: UpdateGitOpsApp, with: {applicationName: web-dev, helm: {parameters: [{name: "+p+", value: \""+p+"\"}]}}}\n", false), nil).ID)
	}
	for _, id := range ids {
		if r := s.wait(id, 60*time.Second); r.Status != pipelines.StSucceeded {
			t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
		}
	}
	a, _ := s.argo.App("web-dev")
	h := string(a.Spec.Source.Helm)
	for _, p := range []string{"a", "b", "c", "image.tag", "port"} {
		if !strings.Contains(h, `"name":"`+p+`"`) {
			t.Errorf("parameter %s lost: %s", p, h)
		}
	}
}
