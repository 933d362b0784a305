package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/controller/oidc"
	"github.com/prflow/prflow/pipelines/controller/oidc/oidctest"
)

// TestLoginDeviceFlow: prflow login against a real OIDC provider (zitadel/oidc's op on
// loopback) by the device flow, approved through the provider's device pages; the stored
// token (mode 0600) then authenticates client commands against a server started with --oidc,
// and prflow logout removes it.
func TestLoginDeviceFlow(t *testing.T) {
	dir := t.TempDir()
	base, idp := startOIDCServer(t, dir, oidctest.User{ID: "u-carol", Username: "carol", Email: "carol@example.com", Groups: []string{"ops"}})

	if _, err := run(t, "runs", "--server", base); err == nil || !strings.Contains(err.Error(), "prflow login") {
		t.Fatalf("runs before login: want a hint at prflow login, got %v", err)
	}
	out := loginByDevice(t, base, idp, "carol")
	if !strings.Contains(out.String(), "signed in to "+base+" as carol") {
		t.Fatalf("login output: %s", out)
	}
	path := filepath.Join(dir, "config", "login.json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored login: %v mode %v, want 0600", err, st)
	}
	var l storedLogin
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &l); err != nil || l.IDToken == "" || l.Issuer != idp.Issuer || l.User != "carol" {
		t.Fatalf("stored login: %v %+v", err, l)
	}
	if strings.Contains(out.String(), l.IDToken) {
		t.Fatal("login printed the token")
	}
	// A client command without --token uses it: the server accepts the provider's ID token.
	if o, err := run(t, "runs", "--server", base); err != nil {
		t.Fatalf("runs after login: %v %s", err, o)
	}
	// A token edited in the file is refused by the server, and the hint says to sign in again.
	l2 := l
	l2.IDToken = l.IDToken[:len(l.IDToken)-4] + "AAAA"
	b2, _ := json.Marshal(l2)
	_ = os.WriteFile(path, b2, 0o600)
	if _, err := run(t, "runs", "--server", base); err == nil || !strings.Contains(err.Error(), "run prflow login again") {
		t.Fatalf("runs with an altered token: %v", err)
	}
	o, err := run(t, "logout")
	if err != nil || !strings.Contains(o, "signed out: removed "+path) {
		t.Fatalf("logout: %v %s", err, o)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("logout left %s", path)
	}
	if o, _ := run(t, "logout"); !strings.Contains(o, "not signed in: nothing to remove") {
		t.Fatalf("second logout: %s", o)
	}
}

// TestLoginLoopbackRedirect: prflow login --browser signs in by the authorization code flow
// with PKCE and a redirect to a loopback port; a forged answer (wrong state) is refused.
func TestLoginLoopbackRedirect(t *testing.T) {
	dir := t.TempDir()
	idp := oidctest.Start(t, []oidctest.User{{ID: "u-dave", Username: "dave", Email: "dave@example.com", Groups: []string{"dev"}}},
		oidctest.Client{ID: "prflow-cli"})
	t.Setenv("PRFLOW_CONFIG_DIR", filepath.Join(dir, "config"))
	server := "http://" + freeAddr(t) // not contacted: --issuer and --client-id are given
	login := func() (*lockedBuffer, chan error) {
		return goCmd(context.Background(), "login", "--browser", "--server", server, "--issuer", idp.Issuer, "--client-id", "prflow-cli")
	}
	authURL := regexp.MustCompile(`(?m)^(http://\S+/auth\?\S+)$`)
	waitURL := func(out *lockedBuffer) string { return waitOutput(t, out, authURL, "login printed no URL")[1] }
	out, done := login()
	u := waitURL(out)
	cb := idp.Login(t, &http.Client{}, u, "dave")
	if cb.Hostname() != "127.0.0.1" || cb.Query().Get("code") == "" {
		t.Fatalf("provider redirected to %s", cb)
	}
	// A forged answer first: another state.
	q := cb.Query()
	q.Set("state", "forged")
	bad := *cb
	bad.RawQuery = q.Encode()
	if resp, err := http.Get(bad.String()); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("forged answer: %v %v", err, resp)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "state does not match") {
		t.Fatalf("login with a forged answer: %v", err)
	}
	// Again, properly.
	out, done = login()
	cb = idp.Login(t, &http.Client{}, waitURL(out), "dave")
	resp, err := http.Get(cb.String())
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("callback: %v %v", err, resp)
	}
	if err := <-done; err != nil || !strings.Contains(out.String(), "as dave") {
		t.Fatalf("login: %v %s", err, out)
	}
	if st, err := os.Stat(filepath.Join(dir, "config", "login.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored login: %v %v", err, st)
	}
}

// startOIDCServer starts an OIDC provider that knows user and the clients prflow-ui (the
// server's) and prflow-cli, and a server signing in there (--oidc) with the server flags
// extra; the CLI keeps its sign-in below dir/config. It returns the server's URL.
func startOIDCServer(t *testing.T, dir string, user oidctest.User, extra ...string) (string, *oidctest.Provider) {
	t.Helper()
	addr := freeAddr(t)
	base := "http://" + addr
	idp := oidctest.Start(t, []oidctest.User{user},
		oidctest.Client{ID: "prflow-ui", Secret: "ui-secret-0123456789", Redirect: []string{base + oidc.CallbackPath}},
		oidctest.Client{ID: "prflow-cli"})
	t.Setenv("T_OIDC_SECRET", "ui-secret-0123456789")
	t.Setenv("T_SESSION_KEY", strings.Repeat("s", 40))
	t.Setenv("PRFLOW_CONFIG_DIR", filepath.Join(dir, "config"))
	t.Setenv("PRFLOW_TOKEN", "")
	cfg := writeFile(t, dir, "oidc.yaml", fmt.Sprintf("issuer: %s\nclientID: prflow-ui\nclientSecret: env:T_OIDC_SECRET\ncliClientID: prflow-cli\nsessionKey: env:T_SESSION_KEY\n", idp.Issuer))
	args := append([]string{"--oidc", cfg}, extra...)
	t.Cleanup(startServerAt(t, addr, append(args, "--external-url", base, "--data-dir", filepath.Join(dir, "nats"))...))
	return base, idp
}

// loginByDevice runs `prflow login --server base` (the device flow), approves its user code at
// idp as user and waits until it succeeded; it returns login's output.
func loginByDevice(t *testing.T, base string, idp *oidctest.Provider, user string) *lockedBuffer {
	t.Helper()
	out, done := goCmd(context.Background(), "login", "--server", base)
	m := waitOutput(t, out, regexp.MustCompile(`enter the code ([^\s)]+)`), "login printed no user code")
	idp.ApproveDevice(t, m[1], user)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("login: %v\n%s", err, out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("login did not finish after approval: %s", out)
	}
	return out
}
