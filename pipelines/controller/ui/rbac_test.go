package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/rbac"
)

// rbacPolicy: release managers (alice) are admins; developers (bob) may do anything in dev
// and only read elsewhere.
const rbacPolicy = `policy.default: role:readonly
policy.csv: |
  g, release, role:admin
  p, role:dev, *, *, */dev, allow
  g, dev, role:dev
`

// devProdPipeline waits for an approval in prod that both groups are listed for, so that
// only RBAC tells bob from alice.
const devProdPipeline = `
name: web
environments:
  - {name: dev, clusters: [{name: dev-eu, agent: sim}]}
  - {name: prod, clusters: [{name: prod-eu, agent: sim}]}
stages:
  - id: dev
    environment: dev
    steps: [{id: a, type: Noop}]
  - id: prod
    environment: prod
    steps:
      - id: approve
        type: Approval
        timeout: 5m
        with:
          approvers: {groups: [release, dev], minimumCount: 1}
          message: Promote to prod?
`

// newRBACUIEnv is newUIEnv (with an audit log and agent sim) under policy, from a file whose
// path it returns: the controller reloads it when a test edits it.
func newRBACUIEnv(t *testing.T, policy string) (*uiEnv, string) {
	t.Helper()
	opt, path := rbacOption(t, policy)
	e := newUIEnv(t, ctltest.Options{Audit: true, Controller: []controller.Option{opt}}, nil)
	e.RegisterAgent("sim")
	return e, path
}

// rbacOption writes policy to a file and opens it as the controller's RBAC policy.
func rbacOption(t *testing.T, policy string) (controller.Option, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := rbac.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return controller.WithRBAC(f), path
}

// startWebAsAlice starts devProdPipeline as alice (group release) and waits until its prod
// approval is parked.
func startWebAsAlice(t *testing.T, e *uiEnv) *pipelines.Run {
	t.Helper()
	r, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "web.yaml", Source: []byte(devProdPipeline), Executor: "alice", Groups: []string{"release"}})
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, e, r.ID, "prod", "approve")
	return r
}

// bobMayNotDecide checks the page of devProdPipeline's parked run as bob sees it: no Cancel
// button, no approval form, and an approval card that says which permission he lacks.
func bobMayNotDecide(t *testing.T, ctx context.Context) {
	t.Helper()
	var cancels, forms int
	run(t, ctx, "count buttons", chromedp.Evaluate(`document.querySelectorAll('#cancel').length`, &cancels),
		chromedp.Evaluate(`document.querySelectorAll('form.decide').length`, &forms))
	if cancels != 0 || forms != 0 {
		t.Fatalf("bob sees %d Cancel buttons and %d approval forms on the prod run, want none", cancels, forms)
	}
	if got := text(t, ctx, `[data-approval="prod.approve"]`); !strings.Contains(got, "bob (groups dev) may not approve approvals web/prod") {
		t.Errorf("bob's approval card does not say why: %q", got)
	}
}

// signInHTTP signs in with token on a cookie-keeping client and returns the session's CSRF
// token (from its cookie: a page without forms has none, and a forger has his own cookie) and
// page.
func signInHTTP(t *testing.T, e *uiEnv, token, page string) (*http.Client, string, string) {
	t.Helper()
	c := signedIn(t, e, token)
	_, _, body := do(t, c, "GET", e.URL+page, nil, nil)
	base, _ := url.Parse(e.URL + "/ui/")
	for _, ck := range c.Jar.Cookies(base) {
		if csrf, _, ok := strings.Cut(ck.Value, "."); ok && ck.Name == "prflow_session" {
			return c, csrf, body
		}
	}
	t.Fatal("no session cookie")
	return nil, "", ""
}

// TestBrowserRBACCancelAndApprove: a run alice started waits for its prod approval. Bob, a
// developer, sees the run but neither the Cancel button nor the approval form (the card says
// why); his forged POSTs get a 403 page naming what he lacks, change nothing, and are in the
// audit log with his groups. Alice sees both and cancels.
func TestBrowserRBACCancelAndApprove(t *testing.T) {
	t.Parallel()
	e, _ := newRBACUIEnv(t, rbacPolicy)
	r := startWebAsAlice(t, e)
	runURL := e.URL + "/ui/runs/" + r.ID

	ctx := signedInTab(t, runURL, bobToken)
	run(t, ctx, "bob's run page", chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery), chromedp.WaitVisible(`.runhead`, chromedp.ByQuery))
	bobMayNotDecide(t, ctx)
	shot(t, ctx, "rbac-bob-run")
	run(t, ctx, "narrow", chromedp.EmulateViewport(400, 900))
	shot(t, ctx, "rbac-bob-run-400")
	run(t, ctx, "wide", chromedp.EmulateViewport(1400, 900))

	// Forged forms with bob's own valid session and CSRF token.
	c, csrf, _ := signInHTTP(t, e, bobToken, "/ui/runs/"+r.ID)
	code, _, body := do(t, c, "POST", runURL+"/cancel", url.Values{"csrf": {csrf}}, map[string]string{"Origin": e.URL})
	if code != http.StatusForbidden || !strings.Contains(body, "bob (groups dev) may not cancel runs web/prod") {
		t.Fatalf("bob's forged cancel: %d %.2000s", code, body)
	}
	code, _, body = do(t, c, "POST", runURL+"/decide", url.Values{"csrf": {csrf}, "stage": {"prod"}, "step": {"approve"}, "decision": {"approve"}}, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "may not approve approvals web/prod") {
		t.Fatalf("bob's forged approval: %d %.2000s", code, body)
	}
	if cur, _ := e.Ctl.Get(context.Background(), r.ID); cur.Status.Terminal() || len(ctltest.Step(cur, "prod", "approve").Signals) != 0 {
		t.Fatalf("a refused form changed the run: %s", cur.Status)
	}
	// Bob is refused promote starts through prod too, with the reason on the form.
	code, _, body = do(t, c, "POST", e.URL+"/ui/promote", url.Values{"csrf": {csrf}, "pipeline": {"web"}}, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "may not start runs web/prod") {
		t.Fatalf("bob's promote: %d %.2000s", code, body)
	}
	// The audit log has each refusal with bob's groups (read as alice through the API).
	_, b := ctltest.CallAPI(t, "GET", e.URL+"/api/v1/audit?action=rbac.denied&actor=bob", aliceToken, "")
	for _, want := range []string{"may not cancel runs web/prod", "may not approve approvals web/prod", "may not start runs web/prod", "bob (groups dev)"} {
		if !strings.Contains(b, want) {
			t.Errorf("audit log lacks %q:\n%s", want, b)
		}
	}

	// Alice sees both and cancels from the page.
	ctx = signedInTab(t, runURL, aliceToken)
	run(t, ctx, "alice's run page", chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery), chromedp.WaitVisible(`#cancel button`, chromedp.ByQuery),
		chromedp.WaitVisible(`form.decide`, chromedp.ByQuery))
	shot(t, ctx, "rbac-alice-run")
	run(t, ctx, "cancel", chromedp.Click(`#cancel button`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	if final := e.Wait(r.ID, 30*time.Second); final.Status != pipelines.StCancelled {
		t.Fatalf("after alice's cancel: %s", final.Status)
	}
	// Finished: alice may re-run and retry; bob (no start or retry in prod) sees neither.
	run(t, ctx, "alice's buttons", chromedp.WaitVisible(`#rerun`, chromedp.ByID), chromedp.WaitVisible(`#retry`, chromedp.ByID))
	_, _, body = do(t, c, "GET", runURL, nil, nil)
	if strings.Contains(body, `id="rerun"`) || strings.Contains(body, `id="retry"`) || strings.Contains(body, `id="cancel"`) {
		t.Error("bob sees Re-run or Retry on a run through prod")
	}
	for _, action := range []string{"rerun", "retry"} {
		code, _, body = do(t, c, "POST", runURL+"/"+action, url.Values{"csrf": {csrf}}, nil)
		if code != http.StatusForbidden || !strings.Contains(body, "web/prod") {
			t.Errorf("bob's forged %s: %d %.1500s", action, code, body)
		}
	}
	// Roll back from an environment's history needs environments rollback there.
	code, _, body = do(t, c, "POST", runURL+"/rerun", url.Values{"csrf": {csrf}, "rollback": {"prod"}}, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "may not rollback environments web/prod") {
		t.Errorf("bob's forged roll back: %d %.1500s", code, body)
	}
	code, _, body = do(t, c, "POST", runURL+"/rerun", url.Values{"csrf": {csrf}, "rollback": {"qa"}}, nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "did not deploy to environment qa") {
		t.Errorf("roll back to an environment the run never touched: %d %.1500s", code, body)
	}
}

// TestRBACPagesFilter: bob's runs page lists his dev run and not alice's prod run, her run's
// page is a 403 for him, and the Environments page offers him Promote only in dev.
func TestRBACPagesFilter(t *testing.T) {
	t.Parallel()
	e, path := newRBACUIEnv(t, rbacPolicy)
	devOnly := "name: api\nenvironments: [{name: dev, clusters: [{name: dev-eu, agent: sim}]}]\nstages:\n  - {id: dev, environment: dev, steps: [{id: a, type: Noop}]}\n"
	mine, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "api.yaml", Source: []byte(devOnly), Executor: "bob", Groups: []string{"dev"}})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "web.yaml", Source: []byte(devProdPipeline), Executor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, e, theirs.ID, "prod", "approve")
	e.Wait(mine.ID, 30*time.Second)
	c, _, _ := signInHTTP(t, e, bobToken, "/ui/")
	// With role:readonly bob sees both; the Promote link of prod is not offered to him.
	_, _, list := do(t, c, "GET", e.URL+"/ui/", nil, nil)
	if !strings.Contains(list, mine.ID) || !strings.Contains(list, theirs.ID) {
		t.Fatalf("readonly bob's runs page lacks a run")
	}
	envs := waitPage(t, c, e.URL+"/ui/environments", func(p string) bool {
		return strings.Contains(p, `data-promote="dev"`) && strings.Contains(p, `id="env-prod"`) // both cards there
	})
	if strings.Contains(envs, `data-promote="prod"`) {
		t.Errorf("bob's Promote links: want dev only")
	}
	if code, _, _ := do(t, c, "GET", e.URL+"/ui/workers", nil, nil); code != 200 {
		t.Errorf("readonly workers page: %d", code)
	}
	// The policy file edited (hot reload) to drop the default role: he sees his dev run only.
	restricted := strings.Replace(rbacPolicy, "policy.default: role:readonly\n", "", 1)
	if err := os.WriteFile(path, []byte(restricted), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, list = do(t, c, "GET", e.URL+"/ui/", nil, nil)
	if !strings.Contains(list, mine.ID) || strings.Contains(list, theirs.ID) {
		t.Errorf("bob's runs page: want %s only", mine.ID)
	}
	if code, _, body := do(t, c, "GET", e.URL+"/ui/runs/"+theirs.ID, nil, nil); code != http.StatusForbidden || !strings.Contains(body, "may not get runs web/") {
		t.Errorf("bob on alice's prod run: %d", code)
	}
	if code, _, _ := do(t, c, "GET", e.URL+"/ui/runs/"+theirs.ID+"/events", nil, map[string]string{"Accept": "text/event-stream"}); code != http.StatusForbidden {
		t.Errorf("bob on alice's run events: %d", code)
	}
	if code, _, _ := do(t, c, "GET", e.URL+"/ui/environments/prod", nil, nil); code != http.StatusForbidden {
		t.Errorf("bob on prod's page: %d", code)
	}
	if code, _, _ := do(t, c, "GET", e.URL+"/ui/workers", nil, nil); code != http.StatusForbidden {
		t.Errorf("workers page without pipelines get *: %d", code)
	}
}
