package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// Issue 32 B: an app deleted while GitOpsSync waits for it. The step fails at once saying
// the app was deleted and when (not a timeout claiming the agent's leader is missing), and
// the stage's rollback, whose GitOpsSync would meet Argo CD's 403 for the missing app,
// skips it and says so instead of failing the rollback.
func TestGitOpsSyncAppDeletedMidWaitFailsAtOnceAndRollbackSkipsIt(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	src := pipeline(strings.Replace(syncWeb, "timeout: 60s", "timeout: 10m", 1), true) + `    rollbackSteps:
      - id: resync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: web}]
`
	run := s.startParkedOnHealth("web", src)
	if err := s.argo.DeleteApp("web"); err != nil {
		t.Fatal(err)
	}
	r := s.wait(run.ID, 60*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || !strings.Contains(st.Error, "web (agent eu): app web was deleted at 20") ||
		!strings.Contains(st.Error, "DELETED") || strings.Contains(st.Error, "timed out") || strings.Contains(st.Error, "no status record") {
		t.Fatalf("run %s; sync step %q", r.Status, st.Error)
	}
	rb := r.Find("dev").Step("resync", true)
	if rb == nil || rb.Status != pipelines.StSucceeded {
		t.Fatalf("the rollback must skip the deleted app, not fail: %+v\n%s", rb, describeRun(r))
	}
	apps := appsOut(rb)
	if len(apps) != 1 || apps[0]["state"] != "skipped" || !strings.Contains(apps[0]["skipped"].(string), "app web was deleted at") {
		t.Fatalf("rollback outputs: %v", apps)
	}
	if n := len(s.syncRequests("web")); n != 1 {
		t.Fatalf("%d sync calls for web, want 1 (the rollback must not sync a deleted app)", n)
	}
}

// A rollback whose app went away without the agent ever writing a tombstone (deleted long
// ago, or between the record read and the sync): Argo CD answers 403, the agent NotFound,
// and the rollback skips the app rather than failing.
func TestRollbackSkipsAppArgoCDNoLongerHas(t *testing.T) {
	t.Parallel()
	s := newWebStack(t, stackOpts{})
	src := pipeline(`      - {id: boom, type: GitOpsSync, timeout: 60s, with: {applicationsList: [{agentId: eu, applicationName: ghost}]}}
`, false) + `    rollbackSteps:
      - id: resync
        type: GitOpsSync
        timeout: 60s
        with:
          applicationsList: [{agentId: eu, applicationName: ghost}, {agentId: eu, applicationName: web}]
`
	r := s.wait(s.start(src, nil).ID, 60*time.Second)
	if st := step(r, "dev", "boom"); st.Status != pipelines.StFailed || !strings.Contains(st.Error, "ghost") {
		t.Fatalf("a sync of a missing app outside a rollback must fail: %q", st.Error)
	}
	rb := r.Find("dev").Step("resync", true)
	if rb == nil || rb.Status != pipelines.StSucceeded {
		t.Fatalf("rollback: %+v\n%s", rb, describeRun(r))
	}
	byName := map[string]map[string]any{}
	for _, a := range appsOut(rb) {
		byName[a["name"].(string)] = a
	}
	if g := byName["ghost"]; g["state"] != "skipped" || !strings.Contains(g["skipped"].(string), "no longer exists in Argo CD") {
		t.Fatalf("ghost: %v", g)
	}
	if w := byName["web"]; w["state"] != "done" || w["sync"] != "Synced" {
		t.Fatalf("web must still be synced by the rollback: %v", w)
	}
}

func colorsAppSet(name string) argocdtest.ApplicationSet {
	return argocdtest.ApplicationSet{
		Metadata: argocdtest.ObjectMeta{Name: "web"},
		Spec: argocdtest.ApplicationSetSpec{
			Generators: []argocdtest.ApplicationSetGenerator{{List: &argocdtest.ListGenerator{Elements: []json.RawMessage{
				json.RawMessage(`{"env":"dev"}`)}}}},
			Template: argocdtest.ApplicationSetTemplate{
				Metadata: argocdtest.ApplicationSetTemplateMeta{Name: name,
					Labels: map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "{{env}}"}},
				Spec: argocdtest.ApplicationSpec{Project: "default",
					Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: "apps/web", TargetRevision: "main"},
					Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "{{env}}"}},
			},
		},
	}
}

// newColorsStack is a stack whose ApplicationSet web (colorsAppSet) generated web-dev, recorded by the agent.
func newColorsStack(t *testing.T) *stack {
	t.Helper()
	s := newStack(t, stackOpts{})
	if err := s.argo.AddApplicationSet(colorsAppSet("web-{{env}}")); err != nil {
		t.Fatal(err)
	}
	s.waitRecord("web-dev")
	return s
}

const linkedSync = `      - id: linked
        type: FetchLinkedApps
        timeout: 60s
        with: {applicationSet: web}
      - id: sync
        type: GitOpsSync
        timeout: 10m
        with: {waitTillHealthy: true}
`

// Issue 32 C: the app is deleted and created again by its ApplicationSet while GitOpsSync
// waits for it. The operation the step started went with the old app; the step sees the
// new uid, syncs the new app and judges it, instead of waiting for the vanished operation
// until its timeout and rolling back a change it never judged.
func TestGitOpsSyncSyncsAppRecreatedByItsAppSet(t *testing.T) {
	t.Parallel()
	s := newColorsStack(t)
	old, _ := s.client.Status(s.ctx, "eu", "web-dev")
	run := s.startParkedOnHealth("web-dev", pipeline(linkedSync, true))
	if err := s.argo.DeleteApp("web-dev"); err != nil { // the ApplicationSet creates it again
		t.Fatal(err)
	}
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	now, err := s.client.Status(s.ctx, "eu", "web-dev")
	if err != nil || now.UID == old.UID || now.UID == "" {
		t.Fatalf("the app was not created again: %+v %v (old uid %s)", now, err, old.UID)
	}
	apps := appsOut(step(r, "dev", "sync"))
	if len(apps) != 1 || apps[0]["name"] != "web-dev" || apps[0]["health"] != "Healthy" || apps[0]["syncedRevision"] != s.sha ||
		!strings.Contains(apps[0]["note"].(string), "deleted and created again") || !strings.Contains(apps[0]["note"].(string), now.UID) {
		t.Fatalf("sync output: %v", apps)
	}
	if n := len(s.syncRequests("web-dev")); n != 2 {
		t.Fatalf("%d sync calls for web-dev, want 2 (the old app, then the new one)", n)
	}
}

// Issue 32 B, ApplicationSet case: the app is renamed through its ApplicationSet's template
// while GitOpsSync waits, and the stage links its apps by that ApplicationSet: the step
// follows the ApplicationSet's new app, syncs and judges it.
func TestGitOpsSyncFollowsAppRenamedByItsAppSet(t *testing.T) {
	t.Parallel()
	s := newColorsStack(t)
	run := s.startParkedOnHealth("web-dev", pipeline(linkedSync, true))
	s.upsertAppSet(colorsAppSet("web-{{env}}-v2"))
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	apps := appsOut(step(r, "dev", "sync"))
	if len(apps) != 1 || apps[0]["name"] != "web-dev-v2" || apps[0]["health"] != "Healthy" || apps[0]["syncedRevision"] != s.sha ||
		!strings.Contains(apps[0]["note"].(string), "app web-dev was deleted at") || !strings.Contains(apps[0]["note"].(string), "following web-dev-v2") {
		t.Fatalf("sync output: %v", apps)
	}
	if _, err := s.client.Status(s.ctx, "eu", "web-dev"); !errorsIsDeleted(err) {
		t.Fatalf("the old name must read as deleted: %v", err)
	}
}

// Without the ApplicationSet link the step does not guess a successor: an app its
// ApplicationSet stops generating fails the step once the grace for a re-creation is over,
// saying it was deleted.
func TestGitOpsSyncAppSetAppGoneFailsAfterGrace(t *testing.T) {
	t.Parallel()
	s := newColorsStack(t)
	src := pipeline(`      - id: sync
        type: GitOpsSync
        timeout: 10m
        with: {applicationsList: [{agentId: eu, applicationName: web-dev}], waitTillHealthy: true}
`, true)
	run := s.startParkedOnHealth("web-dev", src)
	s.upsertAppSet(colorsAppSet("web-{{env}}-v2"))
	s.waitStep(run.ID, "dev", "sync", "waiting for the ApplicationSet", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "app web-dev was deleted at") &&
			strings.Contains(st.Wait.Reason, "for its ApplicationSet web to create it again")
	})
	r := s.wait(run.ID, 90*time.Second)
	st := step(r, "dev", "sync")
	if r.Status != pipelines.StFailed || !strings.Contains(st.Error, "app web-dev was deleted at") ||
		!strings.Contains(st.Error, "did not create it again within 30s") {
		t.Fatalf("run %s; step %q", r.Status, st.Error)
	}
	if n := len(s.syncRequests("web-dev-v2")); n != 0 {
		t.Fatal("the step synced an app it was not linked to")
	}
}

func errorsIsDeleted(err error) bool { return errors.Is(err, agent.ErrDeleted) }

// upsertAppSet replaces an ApplicationSet's spec through Argo CD's API, as a person editing
// it would (POST /api/v1/applicationsets?upsert=true).
func (s *stack) upsertAppSet(as argocdtest.ApplicationSet) {
	s.t.Helper()
	body, _ := json.Marshal(as)
	req, _ := http.NewRequest(http.MethodPost, s.argo.URL()+"/api/v1/applicationsets?upsert=true", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.argo.Token())
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		s.t.Fatalf("upsert ApplicationSet %s: %d %s", as.Metadata.Name, res.StatusCode, b)
	}
}

// The rollback follows a renamed app too: the stage's change went to the app under its new
// name, so the rollback's resync (whose apps come from FetchLinkedApps, under the old name)
// syncs the new app rather than skipping the old one.
func TestRollbackFollowsAppRenamedByItsAppSet(t *testing.T) {
	t.Parallel()
	s := newColorsStack(t)
	src := pipeline(linkedSync+`      - {id: boom, type: GitOpsSync, timeout: 60s, with: {applicationsList: [{agentId: eu, applicationName: ghost}]}}
`, true) + `    rollbackSteps:
      - {id: resync, type: GitOpsSync, timeout: 60s}
`
	run := s.startParkedOnHealth("web-dev", src)
	s.upsertAppSet(colorsAppSet("web-{{env}}-v2"))
	r := s.wait(run.ID, 60*time.Second)
	if st := step(r, "dev", "sync"); st.Status != pipelines.StSucceeded {
		t.Fatalf("sync: %s %q", st.Status, st.Error)
	}
	rb := r.Find("dev").Step("resync", true)
	if r.Status != pipelines.StFailed || rb == nil || rb.Status != pipelines.StSucceeded {
		t.Fatalf("run %s; rollback %+v\n%s", r.Status, rb, describeRun(r))
	}
	apps := appsOut(rb)
	if len(apps) != 1 || apps[0]["name"] != "web-dev-v2" || apps[0]["state"] != "done" || !strings.Contains(fmt.Sprint(apps[0]["note"]), "following web-dev-v2") {
		t.Fatalf("rollback outputs: %v", apps)
	}
	// GitOpsSync syncs the stage's linked apps besides its own list, so "boom" syncs the
	// renamed app too; the rollback's resync is the last.
	reqs := s.syncRequests("web-dev-v2")
	if len(reqs) == 0 || !strings.Contains(fmt.Sprint(reqs[len(reqs)-1]["infos"]), "dev/resync/1") {
		t.Fatalf("the rollback did not sync web-dev-v2: %v", reqs)
	}
}
