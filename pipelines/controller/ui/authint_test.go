package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/oauth2"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/controller/oidc"
	"github.com/prflow/prflow/pipelines/controller/oidc/oidctest"
)

// authIntPolicy is the worked example of docs/security.md: release managers may cancel,
// approve and roll back anywhere (prod included); developers may do anything in dev; everyone
// signed in may read.
const authIntPolicy = `policy.default: role:readonly
policy.csv: |
  p, role:release-manager, runs, *, */*, allow
  p, role:release-manager, approvals, approve, */*, allow
  p, role:release-manager, environments, rollback, */*, allow
  p, role:developer, *, *, */dev, allow
  g, release, role:release-manager
  g, dev, role:developer
`

// devHoldPipeline waits in dev for a developer's approval, so that it is still running
// when bob cancels it.
const devHoldPipeline = `
name: api
environments: [{name: dev, clusters: [{name: dev-eu, agent: sim}]}]
stages:
  - id: dev
    environment: dev
    steps:
      - {id: hold, type: Approval, timeout: 5m, with: {approvers: {groups: [dev], minimumCount: 1}, message: Hold in dev}}
`

// authIntEnv is a server as `prflow server --oidc FILE --rbac FILE` builds it: sign-in only
// through a real OIDC provider (alice in release, bob in dev) and the policy above.
type authIntEnv struct {
	*uiEnv
	idp *oidctest.Provider
}

func newAuthIntEnv(t *testing.T) *authIntEnv {
	t.Helper()
	opt, _ := rbacOption(t, authIntPolicy)
	env, idp := newOIDCUIEnvWith(t, ctltest.Options{Audit: true, Controller: []controller.Option{opt}}, []oidctest.User{
		{ID: "u-alice", Username: "alice", Email: "alice@example.com", Groups: []string{"release"}},
		{ID: "u-bob", Username: "bob", Email: "bob@example.com", Groups: []string{"dev"}},
	})
	env.RegisterAgent("sim")
	return &authIntEnv{uiEnv: env, idp: idp}
}

// signInAs follows "Sign in with Test IdP" through the provider's login page as user.
func signInAs(t *testing.T, ctx context.Context, url, user string) {
	t.Helper()
	run(t, ctx, "sign in with the provider", chromedp.Navigate(url), chromedp.WaitVisible(`#oidc-signin`, chromedp.ByID),
		chromedp.Click(`#oidc-signin`, chromedp.ByID), chromedp.WaitVisible(`#username`, chromedp.ByID))
	run(t, ctx, "provider login as "+user, chromedp.SendKeys(`#username`, user, chromedp.ByID),
		chromedp.SendKeys(`#password`, oidctest.Password, chromedp.ByID), chromedp.Submit(`#password`, chromedp.ByID),
		chromedp.WaitVisible(`header.top`, chromedp.ByQuery))
	if got := text(t, ctx, "#who"); got != user {
		t.Fatalf("signed in as %q, want %s", got, user)
	}
}

// bearer gets an ID token for user from the provider (the token `prflow login` stores).
func (e *authIntEnv) bearer(t *testing.T, user string) string {
	t.Helper()
	cfg := oauth2.Config{ClientID: "prflow-ui", ClientSecret: "ui-secret-0123456789", RedirectURL: e.URL + oidc.CallbackPath,
		Scopes: []string{"openid", "profile", "email", "groups"}, Endpoint: oauth2.Endpoint{AuthURL: e.idp.Issuer + "/auth", TokenURL: e.idp.Issuer + "/oauth/token"}}
	v := oauth2.GenerateVerifier()
	c := client(t)
	c.CheckRedirect = nil // follow the provider's own redirects; Login stops at ours
	cb := e.idp.Login(t, c, cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(v)), user)
	tok, err := cfg.Exchange(context.Background(), cb.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		t.Fatal("provider gave no id_token")
	}
	return raw
}

func apiPost(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	return ctltest.Send(t, req)
}

// TestBrowserOIDCWithRBAC: sign-in and permissions together. Bob (group dev, signed in
// through the provider's login page) sees alice's prod run without Cancel or Approve; a
// forged cancel with his own session's CSRF token gets a 403 page, changes nothing and is
// audited with his OIDC subject and groups; he cancels his dev run. Alice (group release)
// signs in and approves prod. The API decides the same for the provider's ID tokens.
func TestBrowserOIDCWithRBAC(t *testing.T) {
	t.Parallel()
	e := newAuthIntEnv(t)
	ctx0 := context.Background()
	prod := startWebAsAlice(t, e.uiEnv)
	dev, err := e.Ctl.Start(ctx0, controller.StartRequest{File: "api.yaml", Source: []byte(devHoldPipeline), Executor: "bob", Groups: []string{"dev"}})
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, e.uiEnv, dev.ID, "dev", "hold")
	prodURL, devURL := e.URL+"/ui/runs/"+prod.ID, e.URL+"/ui/runs/"+dev.ID

	ctx := browser(t)
	run(t, ctx, "wide", chromedp.EmulateViewport(1400, 900))
	run(t, ctx, "sign-in page", chromedp.Navigate(prodURL), chromedp.WaitVisible(`#oidc-signin`, chromedp.ByID))
	shot(t, ctx, "authint-signin-1400")
	run(t, ctx, "narrow", chromedp.EmulateViewport(400, 900))
	shot(t, ctx, "authint-signin-400")
	run(t, ctx, "wide", chromedp.EmulateViewport(1400, 900))
	signInAs(t, ctx, prodURL, "bob")
	run(t, ctx, "bob's prod run", chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery), chromedp.WaitVisible(`.runhead`, chromedp.ByQuery))
	var title string
	var ok bool
	run(t, ctx, "who", chromedp.AttributeValue(`#who`, "title", &title, &ok, chromedp.ByID))
	if title != "signed in via oidc; groups: dev" {
		t.Errorf("header title %q, want bob's groups", title)
	}
	bobMayNotDecide(t, ctx)
	// The header shows his groups (what permissions are decided on), and the step card does
	// not send him to decide what he may not.
	if got := textNow(t, ctx, "#who-groups"); got != "dev" {
		t.Errorf("header groups %q, want dev", got)
	}
	if got := textNow(t, ctx, `[data-step="prod.approve"] a[href^="#approval-"]`); got != "see the approval card" {
		t.Errorf("bob's step card link %q, want 'see the approval card'", got)
	}
	shot(t, ctx, "authint-bob-prod-1400")
	run(t, ctx, "narrow", chromedp.EmulateViewport(400, 900))
	shot(t, ctx, "authint-bob-prod-400")
	run(t, ctx, "wide", chromedp.EmulateViewport(1400, 900))

	// His own dev run offers Cancel; its CSRF token is his session's, which a forger would use.
	var csrf string
	run(t, ctx, "bob's dev run", chromedp.Navigate(devURL), chromedp.WaitVisible(`#cancel button`, chromedp.ByQuery),
		chromedp.Value(`#cancel input[name=csrf]`, &csrf, chromedp.ByQuery))
	if csrf == "" {
		t.Fatal("no CSRF token in bob's cancel form")
	}
	// A forged cancel of the prod run from his signed-in browser.
	forge := fmt.Sprintf(`(() => { const f = document.createElement("form"); f.method = "post"; f.action = %q;
		const i = document.createElement("input"); i.type = "hidden"; i.name = "csrf"; i.value = %q; f.appendChild(i);
		document.body.appendChild(f); f.submit(); return true })()`, "/ui/runs/"+prod.ID+"/cancel", csrf)
	var submitted bool
	run(t, ctx, "forged cancel", chromedp.Evaluate(forge, &submitted), chromedp.WaitVisible(`#error`, chromedp.ByID))
	shot(t, ctx, "authint-bob-forged-403")
	if got := text(t, ctx, "#error"); !strings.Contains(got, "bob (groups dev) may not cancel runs web/prod") {
		t.Fatalf("forged cancel page: %q", got)
	}
	if got := text(t, ctx, "h1"); !strings.Contains(got, "403") {
		t.Errorf("forged cancel page heading %q, want 403", got)
	}
	if cur, _ := e.Ctl.Get(ctx0, prod.ID); cur.Status.Terminal() {
		t.Fatalf("a refused cancel ended the prod run: %s", cur.Status)
	}
	log := &audit.Log{JS: e.Conn.JS}
	denied, err := log.Query(ctx0, audit.Filter{Actions: []string{audit.RBACDenied}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range denied {
		if en.Actor == "bob" && en.Run == prod.ID && strings.Contains(en.Detail, "may not cancel runs web/prod") &&
			strings.Contains(en.Detail, `sub "u-bob"`) && strings.Contains(en.Detail, "groups [dev]") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no rbac.denied entry with bob's OIDC subject and groups for the prod cancel: %+v", denied)
	}

	// His dev run he may cancel.
	run(t, ctx, "bob cancels dev", chromedp.Navigate(devURL), chromedp.WaitVisible(`#cancel button`, chromedp.ByQuery),
		chromedp.Click(`#cancel button`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	if got := e.Wait(dev.ID, 30*time.Second); got.Status != pipelines.StCancelled {
		t.Fatalf("bob's dev run after his cancel: %s", got.Status)
	}

	// The API: the provider's ID tokens decided by the same policy.
	bobTok, aliceTok := e.bearer(t, "bob"), e.bearer(t, "alice")
	if code, body := apiPost(t, e.URL+"/api/v1/runs/"+prod.ID+"/cancel", bobTok); code != http.StatusForbidden || !strings.Contains(body, "bob (groups dev) may not cancel runs web/prod") {
		t.Fatalf("bob's API cancel of prod: %d %s", code, body)
	}
	if cur, _ := e.Ctl.Get(ctx0, prod.ID); cur.Status.Terminal() {
		t.Fatalf("a refused API cancel ended the prod run: %s", cur.Status)
	}

	// Alice signs in (another browser) and approves prod.
	ctx = browser(t)
	run(t, ctx, "wide", chromedp.EmulateViewport(1400, 900))
	signInAs(t, ctx, prodURL, "alice")
	run(t, ctx, "alice's prod run", chromedp.WaitVisible(`#cancel button`, chromedp.ByQuery), chromedp.WaitVisible(`form.decide`, chromedp.ByQuery))
	if got := textNow(t, ctx, `[data-step="prod.approve"] a[href^="#approval-"]`); got != "decide in the approval card" {
		t.Errorf("alice's step card link %q", got)
	}
	if got := textNow(t, ctx, "#who-groups"); got != "release" {
		t.Errorf("alice's header groups %q", got)
	}
	shot(t, ctx, "authint-alice-prod-1400")
	run(t, ctx, "approve", chromedp.Click(`form.decide button[value="approve"]`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	if got := e.Wait(prod.ID, 30*time.Second); got.Status != pipelines.StSucceeded {
		t.Fatalf("prod run after alice's approval: %s", got.Status)
	}
	if st := ctltest.Step(mustGet(t, e, prod.ID), "prod", "approve"); st == nil || len(st.Signals) == 0 || st.Signals[0].User != "alice" || !st.Signals[0].Approve {
		t.Fatalf("approval not recorded as alice's: %+v", st)
	}
	// Alice's bearer token may cancel what bob's may not: a fresh run, cancelled through the API.
	again := startWebAsAlice(t, e.uiEnv)
	if code, body := apiPost(t, e.URL+"/api/v1/runs/"+again.ID+"/cancel", bobTok); code != http.StatusForbidden {
		t.Fatalf("bob's API cancel: %d %s", code, body)
	}
	if code, body := apiPost(t, e.URL+"/api/v1/runs/"+again.ID+"/cancel", aliceTok); code/100 != 2 {
		t.Fatalf("alice's API cancel: %d %s", code, body)
	}
	if got := e.Wait(again.ID, 30*time.Second); got.Status != pipelines.StCancelled {
		t.Fatalf("after alice's API cancel: %s", got.Status)
	}

	// Signing out ends the session: the signed-out page, then the sign-in page again.
	run(t, ctx, "sign out", chromedp.Navigate(e.URL+"/ui/"), chromedp.WaitVisible(`header form[action="/ui/logout"] button`, chromedp.ByQuery),
		chromedp.Click(`header form[action="/ui/logout"] button`, chromedp.ByQuery), chromedp.WaitVisible(`#notice`, chromedp.ByID))
	shot(t, ctx, "authint-signed-out-1400")
	run(t, ctx, "narrow", chromedp.EmulateViewport(400, 900))
	shot(t, ctx, "authint-signed-out-400")
}

func mustGet(t *testing.T, e *authIntEnv, id string) *pipelines.Run {
	t.Helper()
	r, err := e.Ctl.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// textNow is the text of the first element matching sel, "" when there is none (no waiting).
func textNow(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	run(t, ctx, "text of "+sel, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel), &s))
	return strings.TrimSpace(s)
}

// TestSecurityDocPolicy: the policy of docs/security.md's worked example is the one
// TestBrowserOIDCWithRBAC runs, so the example stays what was tested.
func TestSecurityDocPolicy(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "`rbac.yaml`:\n\n```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/security.md has no rbac.yaml example block")
	}
	if block != authIntPolicy {
		t.Fatalf("docs/security.md's policy differs from the tested one:\n%s\nwant:\n%s", block, authIntPolicy)
	}
}
