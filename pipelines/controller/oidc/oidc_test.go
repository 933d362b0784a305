package oidc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/prflow/prflow/pipelines/controller/oidc"
	"github.com/prflow/prflow/pipelines/controller/oidc/oidctest"
)

const (
	uiClient      = "prflow-ui"
	uiSecret      = "ui-client-secret-0123456789"
	sessionKey    = "session-key-0123456789-0123456789-abcdef"
	otherClient   = "other-app"
	otherSecret   = "other-app-secret-0123456789"
	cliClient     = "prflow-cli"
	otherCallback = "http://127.0.0.1:9/cb"
)

var users = []oidctest.User{
	{ID: "u-alice", Username: "alice", Email: "alice@example.com", Groups: []string{"release-managers", "devs"}},
	{ID: "u-bob", Username: "bob", Email: "bob@example.com", Groups: []string{"devs"}},
}

// syncBuf is a log sink the test reads while servers write to it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type env struct {
	idp  *oidctest.Provider
	p    *oidc.Provider
	base string // prflow's URL
	logs *syncBuf
}

// setup starts the identity provider and a prflow-side server with the sign-in routes and a
// /ui/whoami page that shows the session (or why there is none).
func setup(t *testing.T) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	idp := oidctest.Start(t, users,
		oidctest.Client{ID: uiClient, Secret: uiSecret, Redirect: []string{base + oidc.CallbackPath}, PostLogout: []string{base + "/ui/login?signed-out"}},
		oidctest.Client{ID: otherClient, Secret: otherSecret, Redirect: []string{otherCallback}},
		oidctest.Client{ID: cliClient},
	)
	dir := t.TempDir()
	t.Setenv("TEST_OIDC_SECRET", uiSecret)
	t.Setenv("TEST_SESSION_KEY", sessionKey)
	file := filepath.Join(dir, "oidc.yaml")
	writeFile(t, file, fmt.Sprintf("issuer: %s\nname: Test IdP\nclientID: %s\nclientSecret: env:TEST_OIDC_SECRET\ncliClientID: %s\nsessionKey: env:TEST_SESSION_KEY\n", idp.Issuer, uiClient, cliClient))
	cfg, err := oidc.LoadConfig(file, base)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	p, err := oidc.New(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/oidc/start", func(w http.ResponseWriter, r *http.Request) { p.BeginSignIn(w, r, r.URL.Query().Get("next")) })
	mux.HandleFunc("GET /ui/oidc/callback", func(w http.ResponseWriter, r *http.Request) {
		next, err := p.FinishSignIn(w, r)
		if err != nil {
			http.Error(w, "Sign-in refused: "+err.Error(), http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	})
	mux.HandleFunc("GET /ui/whoami", func(w http.ResponseWriter, r *http.Request) {
		s, err := p.Session(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "%s %s %v via %s sub %s", s.User.Name, strings.Join(s.User.Groups, ","), s.Expiry.Unix(), s.User.Via(), s.User.Subject)
	})
	mux.HandleFunc("POST /ui/logout", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, p.SignOut(w, r, "/ui/login?signed-out"), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /ui/login", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "sign-in page") })
	srv := httptest.NewUnstartedServer(mux)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &env{idp: idp, p: p, base: base, logs: logs}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}
}

// signIn goes through /ui/oidc/start and the provider's login page; it returns the callback
// URL the provider sent the browser to (not yet visited).
func (e *env) startSignIn(t *testing.T, c *http.Client, user string) *url.URL {
	t.Helper()
	noFollow := *c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(e.base + "/ui/oidc/start?next=/ui/runs/42")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	auth, err := resp.Location()
	if err != nil {
		t.Fatalf("start: no redirect to the provider (HTTP %d)", resp.StatusCode)
	}
	q := auth.Query()
	for _, k := range []string{"state", "nonce", "code_challenge"} {
		if q.Get(k) == "" {
			t.Fatalf("authorization URL lacks %s: %s", k, auth)
		}
	}
	if q.Get("code_challenge_method") != "S256" {
		t.Fatalf("PKCE method %q, want S256", q.Get("code_challenge_method"))
	}
	return e.idp.Login(t, c, auth.String(), user)
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	return send(t, c, req)
}

// getWith gets u with cookies only (no client's jar), as a forged or replayed request is sent.
func getWith(t *testing.T, u string, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for _, k := range cookies {
		req.AddCookie(k)
	}
	return send(t, http.DefaultClient, req)
}

func send(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) signIn(t *testing.T, c *http.Client, user string) {
	t.Helper()
	cb := e.startSignIn(t, c, user)
	resp, err := c.Get(cb.String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/runs/42" {
		// /ui/runs/42 is not served here (404) — the redirect itself is what counts.
		if resp.Request.URL.Path != "/ui/runs/42" {
			t.Fatalf("callback: landed on %s HTTP %d: %s", resp.Request.URL, resp.StatusCode, b)
		}
	}
}

func sessionCookie(t *testing.T, c *http.Client, base string) *http.Cookie {
	u, _ := url.Parse(base + "/ui/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == oidc.SessionCookie {
			return k
		}
	}
	t.Fatal("no session cookie")
	return nil
}

func TestSignInCodeFlowPKCE(t *testing.T) {
	e := setup(t)
	c := browser()
	cb := e.startSignIn(t, c, "alice")
	resp, err := c.Get(cb.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/runs/42" {
		t.Fatalf("after sign-in landed on %s, want the page asked for (/ui/runs/42)", resp.Request.URL)
	}
	// The session cookie's attributes as the browser got them.
	var set *http.Cookie
	for _, k := range resp.Request.Response.Cookies() {
		if k.Name == oidc.SessionCookie {
			set = k
		}
	}
	if set == nil || !set.HttpOnly || set.SameSite != http.SameSiteLaxMode || set.Secure || set.Path != "/ui/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Lax, not Secure on loopback, Path /ui/", set)
	}
	code, body := get(t, c, e.base+"/ui/whoami")
	if code != 200 || !strings.HasPrefix(body, "alice release-managers,devs ") || !strings.Contains(body, "via oidc sub u-alice") {
		t.Fatalf("whoami: HTTP %d %q, want alice with her groups, via oidc", code, body)
	}
	// bob in another browser is bob.
	c2 := browser()
	e.signIn(t, c2, "bob")
	if _, body := get(t, c2, e.base+"/ui/whoami"); !strings.HasPrefix(body, "bob devs ") {
		t.Fatalf("bob's whoami: %q", body)
	}
	// Logout clears the session and goes through the provider's end_session_endpoint back to
	// the sign-in page.
	resp, err = c.PostForm(e.base+"/ui/logout", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.String() != e.base+"/ui/login?signed-out" {
		t.Fatalf("after logout landed on %s", resp.Request.URL)
	}
	if len(resp.Request.Response.Request.URL.String()) == 0 || !strings.HasPrefix(resp.Request.Response.Request.URL.String(), e.idp.Issuer) {
		t.Fatalf("logout did not go through the provider (last hop %s)", resp.Request.Response.Request.URL)
	}
	if code, body := get(t, c, e.base+"/ui/whoami"); code != 401 || body != oidc.ErrNoSession.Error()+"\n" {
		t.Fatalf("after logout whoami: HTTP %d %q", code, body)
	}
	e.noSecretsInLogs(t)
}

func TestSignInRefusals(t *testing.T) {
	e := setup(t)

	t.Run("tampered cookie", func(t *testing.T) {
		c := browser()
		e.signIn(t, c, "alice")
		k := sessionCookie(t, c, e.base)
		v := []byte(k.Value)
		i := len(v) / 2
		v[i] ^= 1
		if v[i] == '-' || v[i] == '_' || (v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') {
		} else {
			v[i] = 'A'
		}
		code, b := getWith(t, e.base+"/ui/whoami", &http.Cookie{Name: oidc.SessionCookie, Value: string(v)})
		if code != 401 || !strings.Contains(b, "altered") {
			t.Fatalf("tampered cookie: HTTP %d %q", code, b)
		}
	})

	t.Run("replayed state and code", func(t *testing.T) {
		c := browser()
		cb := e.startSignIn(t, c, "alice")
		u, _ := url.Parse(e.base + "/ui/oidc/")
		var flow []*http.Cookie
		flow = append(flow, c.Jar.Cookies(u)...)
		if code, _ := get(t, c, cb.String()); code == 401 {
			t.Fatal("first use of the callback refused")
		}
		// The same browser again: its flow cookie is gone.
		code, body := get(t, c, cb.String())
		if code != 401 || !strings.Contains(body, "no sign-in is in progress") {
			t.Fatalf("replayed callback: HTTP %d %q", code, body)
		}
		// An attacker who kept the flow cookie too: the provider refuses the used code.
		code, body = getWith(t, cb.String(), flow...)
		if code != 401 || !strings.Contains(body, "refused the sign-in code") {
			t.Fatalf("replayed code with its cookie: HTTP %d %q", code, body)
		}
	})

	t.Run("state of another browser", func(t *testing.T) {
		victim, attacker := browser(), browser()
		cb := e.startSignIn(t, attacker, "bob")
		// The victim has a sign-in of their own in progress; the attacker's answer must not
		// sign them in as bob.
		e.startSignIn(t, victim, "alice")
		code, body := get(t, victim, cb.String())
		if code != 401 || !strings.Contains(body, "state does not match") {
			t.Fatalf("forged callback: HTTP %d %q", code, body)
		}
	})

	t.Run("missing PKCE verifier", func(t *testing.T) {
		c := browser()
		cb := e.startSignIn(t, c, "alice")
		code, b := getWith(t, cb.String(), e.p.ForgeFlowCookie(cb.Query().Get("state"), ""))
		if code != 401 || !strings.Contains(b, "no PKCE verifier") {
			t.Fatalf("no verifier: HTTP %d %q", code, b)
		}
		// A wrong verifier reaches the provider, which refuses the code.
		cb = e.startSignIn(t, browser(), "alice")
		code, b = getWith(t, cb.String(), e.p.ForgeFlowCookie(cb.Query().Get("state"), oauth2.GenerateVerifier()))
		if code != 401 || !strings.Contains(b, "refused the sign-in code") {
			t.Fatalf("wrong verifier: HTTP %d %q", code, b)
		}
	})
	e.noSecretsInLogs(t)
}

// idToken gets an ID token for a client through the provider's login page.
func idToken(t *testing.T, idp *oidctest.Provider, clientID, secret, redirect, user string) (string, *oauth2.Token) {
	t.Helper()
	ctx := context.Background()
	cfg := oauth2.Config{ClientID: clientID, ClientSecret: secret, RedirectURL: redirect, Scopes: []string{"openid", "profile", "offline_access"},
		Endpoint: oauth2.Endpoint{AuthURL: idp.Issuer + "/auth", TokenURL: idp.Issuer + "/oauth/token"}}
	v := oauth2.GenerateVerifier()
	cb := idp.Login(t, browser(), cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(v)), user)
	tok, err := cfg.Exchange(ctx, cb.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		t.Fatal("no id_token")
	}
	return raw, tok
}

func TestVerifyBearer(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	good, _ := idToken(t, e.idp, uiClient, uiSecret, e.base+oidc.CallbackPath, "alice")
	u, err := e.p.VerifyBearer(ctx, good)
	if err != nil || u.Name != "alice" || u.Subject != "u-alice" || len(u.Groups) != 2 || u.Via() != "oidc" {
		t.Fatalf("good token: %+v %v", u, err)
	}
	// Another client's token (its audience is other-app).
	other, _ := idToken(t, e.idp, otherClient, otherSecret, otherCallback, "alice")
	if _, err := e.p.VerifyBearer(ctx, other); err == nil || !strings.Contains(err.Error(), `audience ["other-app"] is not one this server accepts`) {
		t.Fatalf("wrong audience: %v", err)
	}
	// The same client ID at another provider: wrong issuer.
	idp2 := oidctest.Start(t, users, oidctest.Client{ID: uiClient, Secret: uiSecret, Redirect: []string{otherCallback}})
	foreign, _ := idToken(t, idp2, uiClient, uiSecret, otherCallback, "alice")
	if _, err := e.p.VerifyBearer(ctx, foreign); err == nil || !strings.Contains(err.Error(), "not by this server's provider") {
		t.Fatalf("wrong issuer: %v", err)
	}
	// A token whose signature is not the provider's (payload altered).
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + parts[1] + "x." + parts[2]
	if _, err := e.p.VerifyBearer(ctx, forged); err == nil {
		t.Fatal("altered token accepted")
	}
	// Expired: the provider's clock says now, ours two hours later.
	e.p.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	_, err = e.p.VerifyBearer(ctx, good)
	e.p.Now = nil
	if err == nil || !strings.Contains(err.Error(), "the token expired at") {
		t.Fatalf("expired: %v", err)
	}
	for _, tok := range []string{good, other, foreign} {
		for _, part := range strings.Split(tok, ".") {
			if strings.Contains(err.Error(), part) {
				t.Fatal("error holds the token")
			}
		}
	}
	e.noSecretsInLogs(t, good, other, foreign)
}

func TestSessionRefresh(t *testing.T) {
	e := setup(t)
	e.idp.SetIDTokenLifetime(uiClient, 2*time.Second)
	c := browser()
	e.signIn(t, c, "alice")
	_, first := get(t, c, e.base+"/ui/whoami")
	old := sessionCookie(t, c, e.base).Value
	time.Sleep(3 * time.Second) // the ID token expires (the provider's real clock)
	// Concurrent requests of one page after expiry: all of them stay signed in.
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", e.base+"/ui/whoami", nil)
			req.AddCookie(&http.Cookie{Name: oidc.SessionCookie, Value: old})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "alice ") {
				errs <- fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("concurrent refresh: %s", e)
	}
	code, second := get(t, c, e.base+"/ui/whoami")
	if code != 200 || second == first || !strings.HasPrefix(second, "alice release-managers,devs ") {
		t.Fatalf("after expiry: HTTP %d %q (before %q): want a refreshed session with a later expiry", code, second, first)
	}
	if sessionCookie(t, c, e.base).Value == old {
		t.Fatal("refresh did not rewrite the session cookie")
	}
	// The provider stops renewing (account disabled): once the ID token expires, back to sign-in.
	e.idp.RevokeRefreshTokens("u-alice")
	time.Sleep(3 * time.Second)
	code, body := get(t, c, e.base+"/ui/whoami")
	if code != 401 || body != oidc.ErrExpired.Error()+"\n" {
		t.Fatalf("refused refresh: HTTP %d %q", code, body)
	}
	e.noSecretsInLogs(t)
}

// noSecretsInLogs checks that neither the client secret, the session key, nor any token or
// code reached the logs.
func (e *env) noSecretsInLogs(t *testing.T, more ...string) {
	t.Helper()
	logs := e.logs.String()
	if !strings.Contains(logs, "oidc") {
		t.Fatalf("no oidc log lines at all: %q", logs)
	}
	for _, s := range append([]string{uiSecret, sessionKey, otherSecret}, more...) {
		if s != "" && strings.Contains(logs, s) {
			t.Fatalf("a secret reached the logs:\n%s", logs)
		}
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "eyJ") { // a JWT
			t.Fatalf("a token reached the logs: %s", l)
		}
	}
}
