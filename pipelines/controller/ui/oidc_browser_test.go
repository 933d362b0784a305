package ui_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/controller/oidc"
	"github.com/prflow/prflow/pipelines/controller/oidc/oidctest"
	"github.com/prflow/prflow/pipelines/controller/ui"
)

// newOIDCUIEnv is a running prflow whose UI signs people in only through a real OIDC provider
// (zitadel/oidc's op on loopback, with its own login page).
func newOIDCUIEnv(t *testing.T, o ctltest.Options) (*uiEnv, *oidctest.Provider) {
	t.Helper()
	return newOIDCUIEnvWith(t, o, []oidctest.User{
		{ID: "u-alice", Username: "alice", Email: "alice@example.com", Groups: []string{"release", "dev"}},
	})
}

// newOIDCUIEnvWith is newOIDCUIEnv with the provider's users.
func newOIDCUIEnvWith(t *testing.T, o ctltest.Options, users []oidctest.User) (*uiEnv, *oidctest.Provider) {
	t.Helper()
	e := ctltest.New(t, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	idp := oidctest.Start(t, users, oidctest.Client{ID: "prflow-ui", Secret: "ui-secret-0123456789", Redirect: []string{base + oidc.CallbackPath},
		PostLogout: []string{base + "/ui/login?signed-out"}})
	dir := t.TempDir()
	// The secrets in files, not environment variables: the tests that use this run in parallel.
	file := filepath.Join(dir, "oidc.yaml")
	spec := fmt.Sprintf("issuer: %s\nname: Test IdP\nclientID: prflow-ui\nclientSecret: file:client-secret\nsessionKey: file:session-key\n", idp.Issuer)
	for name, v := range map[string]string{"client-secret": "ui-secret-0123456789", "session-key": strings.Repeat("k", 48), "oidc.yaml": spec} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := oidc.LoadConfig(file, base)
	if err != nil {
		t.Fatal(err)
	}
	p, err := oidc.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth := &controller.Auth{OIDC: p}
	web := ui.New(e.Ctl, auth, nil)
	web.SetOIDC(p)
	srv := httptest.NewUnstartedServer(ui.Wrap(e.Ctl.Handler(auth), web))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &uiEnv{Env: e, URL: base}, idp
}

// oidcSignIn follows "Sign in with Test IdP" through the provider's login page.
func oidcSignIn(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	run(t, ctx, "sign in with the provider", chromedp.Navigate(url), chromedp.WaitVisible(`#oidc-signin`, chromedp.ByID),
		chromedp.Click(`#oidc-signin`, chromedp.ByID), chromedp.WaitVisible(`#username`, chromedp.ByID))
	shot(t, ctx, "oidc-provider-login")
	run(t, ctx, "provider login", chromedp.SendKeys(`#username`, "alice", chromedp.ByID),
		chromedp.SendKeys(`#password`, oidctest.Password, chromedp.ByID), chromedp.Submit(`#password`, chromedp.ByID),
		chromedp.WaitVisible(`header.top`, chromedp.ByQuery))
	var loc string
	run(t, ctx, "location", chromedp.Location(&loc))
	if loc != url {
		t.Fatalf("after sign-in at %s, want %s", loc, url)
	}
}

// TestBrowserOIDCSignIn: Chromium signs in through the provider's login page and lands on the
// page it asked for as alice with her groups; an action is audited with her OIDC subject and
// groups; a tampered session cookie is refused with a page that says so; logout ends the
// session through the provider and shows the sign-in page again.
func TestBrowserOIDCSignIn(t *testing.T) {
	t.Parallel()
	e, _ := newOIDCUIEnv(t, ctltest.Options{Audit: true})
	e.RegisterAgent("sim")
	r := startParked(t, e, approvalPipeline, "prod", "approve")
	ctx := browser(t)
	runURL := e.URL + "/ui/runs/" + r.ID

	run(t, ctx, "login page", chromedp.Navigate(runURL), chromedp.WaitVisible(`#oidc-signin`, chromedp.ByID))
	shot(t, ctx, "oidc-login")
	if got := text(t, ctx, "#oidc-signin"); got != "Sign in with Test IdP" {
		t.Fatalf("sign-in button %q", got)
	}
	var forms int
	run(t, ctx, "token form", chromedp.Evaluate(`document.querySelectorAll("#login").length`, &forms))
	if forms != 0 {
		t.Fatal("token form shown without --tokens")
	}
	oidcSignIn(t, ctx, runURL)
	shot(t, ctx, "oidc-signed-in")
	var title string
	var ok bool
	run(t, ctx, "who", chromedp.AttributeValue(`#who`, "title", &title, &ok, chromedp.ByID))
	if got := text(t, ctx, "#who"); got != "alice" || title != "signed in via oidc; groups: release, dev" {
		t.Fatalf("header: %q (title %q), want alice with groups release, dev", got, title)
	}

	// An action from the signed-in page: its CSRF token works and the audit log says who.
	run(t, ctx, "cancel", chromedp.Submit(`#cancel button`, chromedp.ByQuery), chromedp.WaitVisible(`header.top`, chromedp.ByQuery))
	if got := e.Wait(r.ID, 30*time.Second); got.Status != pipelines.StCancelled {
		t.Fatalf("run after cancel: %s", got.Status)
	}
	log := &audit.Log{JS: e.Conn.JS}
	used, err := log.Query(context.Background(), audit.Filter{Actions: []string{audit.TokenUsed}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range used {
		if en.Actor == "alice" && strings.Contains(en.Detail, `sub "u-alice"`) && strings.Contains(en.Detail, "groups [release, dev]") && strings.Contains(en.Detail, "/cancel") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit entry with alice's OIDC subject and groups: %+v", used)
	}

	// A tampered session cookie: refused, with a page that says why.
	var cookies []*network.Cookie
	run(t, ctx, "cookies", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().Do(ctx)
		return err
	}))
	var sess *network.Cookie
	for _, c := range cookies {
		if c.Name == oidc.SessionCookie {
			sess = c
		}
	}
	if sess == nil || !sess.HTTPOnly || sess.SameSite != network.CookieSameSiteLax {
		t.Fatalf("session cookie %+v: want HttpOnly and SameSite=Lax", sess)
	}
	v := []byte(sess.Value)
	if v[10] == 'A' {
		v[10] = 'B'
	} else {
		v[10] = 'A'
	}
	run(t, ctx, "tamper", network.SetCookie(sess.Name, string(v)).WithDomain(sess.Domain).WithPath(sess.Path).WithHTTPOnly(true),
		chromedp.Navigate(runURL), chromedp.WaitVisible(`#error`, chromedp.ByID))
	shot(t, ctx, "oidc-tampered")
	if got := text(t, ctx, "#error"); !strings.Contains(got, "session cookie was altered") {
		t.Fatalf("tampered cookie page: %q", got)
	}

	// Sign in again, then out: through the provider's end_session back to the sign-in page.
	oidcSignIn(t, ctx, runURL)
	run(t, ctx, "sign out", chromedp.Click(`header form[action="/ui/logout"] button`, chromedp.ByQuery), chromedp.WaitVisible(`#notice`, chromedp.ByID))
	shot(t, ctx, "oidc-signed-out")
	if got := text(t, ctx, "#notice"); got != "You are signed out." {
		t.Fatalf("after sign-out: %q", got)
	}
	run(t, ctx, "run page after sign-out", chromedp.Navigate(runURL), chromedp.WaitVisible(`#oidc-signin`, chromedp.ByID))
}

// TestOIDCRefusalPages: a callback the server did not start, and a provider error, each get the
// sign-in page with a status and a message that says what happened.
func TestOIDCRefusalPages(t *testing.T) {
	t.Parallel()
	e, _ := newOIDCUIEnv(t, ctltest.Options{})
	for _, tc := range []struct{ query, want string }{
		{"?code=abc&state=xyz", "no sign-in is in progress in this browser"},
		{"?error=access_denied&error_description=user+said+no", "the identity provider refused the sign-in: access_denied user said no"},
	} {
		code, body := ctltest.CallAPI(t, "GET", e.URL+oidc.CallbackPath+tc.query, "", "")
		if code != http.StatusUnauthorized || !strings.Contains(body, tc.want) || !strings.Contains(body, `id="oidc-signin"`) {
			t.Fatalf("callback %s: HTTP %d, want 401 with %q and the sign-in button:\n%s", tc.query, code, tc.want, body)
		}
	}
}
