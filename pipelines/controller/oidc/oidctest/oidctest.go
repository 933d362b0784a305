// Package oidctest runs a real OpenID provider on loopback for tests: zitadel/oidc's op (an
// OpenID-certified provider library) with its example in-memory storage and login pages, plus
// test users that have groups, and clients whose ID token lifetime a test chooses.
package oidctest

import (
	"context"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

// Password is every test user's password.
const Password = "verysecure-test"

// User is a test user.
type User struct {
	ID, Username, Email string
	Groups              []string
}

// Client is a client the provider knows.
type Client struct {
	ID       string
	Secret   string // "" for a public client (PKCE, device flow)
	Redirect []string
	// IDTokenLifetime is how long its ID tokens live (default one hour).
	IDTokenLifetime time.Duration
	// PostLogout are the URIs the provider may send a browser to after logout.
	PostLogout []string
}

// Provider is a running provider.
type Provider struct {
	Issuer string
	server *httptest.Server
	store  *store
}

// Start runs a provider on a loopback port until the test ends.
func Start(t testing.TB, users []User, clients ...Client) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	us := userStore{users: map[string]*storage.User{}, groups: map[string][]string{}}
	for _, u := range users {
		us.users[u.ID] = &storage.User{ID: u.ID, Username: u.Username, Password: Password, FirstName: u.Username, Email: u.Email, EmailVerified: true}
		us.groups[u.ID] = u.Groups
	}
	cs := map[string]*storage.Client{}
	st := &store{users: us, clients: map[string]Client{}, revoked: map[string]bool{}}
	for _, c := range clients {
		if c.Secret != "" {
			cs[c.ID] = storage.WebClient(c.ID, c.Secret, c.Redirect...)
		} else {
			redirects := c.Redirect
			if len(redirects) == 0 {
				redirects = []string{"http://127.0.0.1/callback"}
			}
			cs[c.ID] = storage.NativeClient(c.ID, redirects...)
		}
		st.clients[c.ID] = c
	}
	st.Storage = storage.NewStorageWithClients(us, cs)
	router := exampleop.SetupServer(issuer, st, nil, false)
	srv := httptest.NewUnstartedServer(router)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &Provider{Issuer: issuer, server: srv, store: st}
}

// SetIDTokenLifetime changes a client's ID token lifetime from now on.
func (p *Provider) SetIDTokenLifetime(clientID string, d time.Duration) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	c := p.store.clients[clientID]
	c.IDTokenLifetime = d
	p.store.clients[clientID] = c
}

// RevokeRefreshTokens makes the provider refuse every refresh token of a user from now on
// (an administrator disabled the account).
func (p *Provider) RevokeRefreshTokens(userID string) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	p.store.revoked[userID] = true
}

// Login signs a user in on the provider's login page from an authorization URL the client
// redirected to, with c (which keeps cookies), and returns the client's redirect URI with the
// code and state, without following it.
func (p *Provider) Login(t testing.TB, c *http.Client, authURL, username string) *url.URL {
	t.Helper()
	noFollow := *c
	noFollow.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !strings.HasPrefix(req.URL.String(), p.Issuer) {
			return http.ErrUseLastResponse // the redirect back to the client
		}
		return nil
	}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("provider did not show its login page for %s (landed on %s, HTTP %d)", authURL, resp.Request.URL, resp.StatusCode)
	}
	resp, err = noFollow.PostForm(p.Issuer+"/login/username", url.Values{"id": {id}, "username": {username}, "password": {Password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		t.Fatalf("login of %s: no redirect back to the client (HTTP %d at %s)", username, resp.StatusCode, resp.Request.URL)
	}
	return loc
}

// ApproveDevice approves a device code's user code as a user, through the provider's device
// pages (user code → username and password → allow).
func (p *Provider) ApproveDevice(t testing.TB, userCode, username string) {
	t.Helper()
	jar := newJar()
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(p.Issuer+"/device/login", url.Values{"user_code": {userCode}, "username": {username}, "password": {Password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = c.PostForm(p.Issuer+"/device/confirm", url.Values{"action": {"allowed"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/device/confirm" {
		t.Fatalf("approving device code: HTTP %d at %s", resp.StatusCode, resp.Request.URL)
	}
}

// store is the example storage with groups in ID tokens, per-client ID token lifetimes and
// revocable refresh tokens.
type store struct {
	*storage.Storage
	users   userStore
	mu      sync.Mutex
	clients map[string]Client
	revoked map[string]bool
}

type client struct {
	op.Client
	life       time.Duration
	postLogout []string
	public     bool
}

func (c client) IDTokenLifetime() time.Duration   { return c.life }
func (c client) IsScopeAllowed(string) bool       { return true } // groups
func (c client) PostLogoutRedirectURIs() []string { return c.postLogout }
func (c client) GrantTypes() []zoidc.GrantType {
	g := c.Client.GrantTypes()
	if c.public && !slices.Contains(g, zoidc.GrantTypeDeviceCode) {
		g = append(slices.Clone(g), zoidc.GrantTypeDeviceCode)
	}
	return g
}

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	oc, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[id]
	life := c.IDTokenLifetime
	if life == 0 {
		life = time.Hour
	}
	return client{Client: oc, life: life, postLogout: c.PostLogout, public: c.Secret == ""}, nil
}

// SetUserinfoFromRequest puts the user's name, e-mail and groups in every ID token.
func (s *store) SetUserinfoFromRequest(ctx context.Context, ui *zoidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	u := s.users.GetUserByID(req.GetSubject())
	if u == nil {
		u = s.users.GetUserByUsername(req.GetSubject()) // the device flow's subject is the username
	}
	if u == nil {
		return zoidc.ErrInvalidRequest().WithDescription("unknown user")
	}
	ui.Subject = req.GetSubject()
	ui.PreferredUsername = u.Username
	ui.Email = u.Email
	ui.AppendClaims("groups", s.users.groups[u.ID])
	return nil
}

func (s *store) TokenRequestByRefreshToken(ctx context.Context, rt string) (op.RefreshTokenRequest, error) {
	req, err := s.Storage.TokenRequestByRefreshToken(ctx, rt)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked[req.GetSubject()] {
		return nil, zoidc.ErrInvalidGrant().WithDescription("refresh token revoked")
	}
	return req, nil
}

type userStore struct {
	users  map[string]*storage.User
	groups map[string][]string
}

func (u userStore) GetUserByID(id string) *storage.User { return u.users[id] }
func (u userStore) GetUserByUsername(name string) *storage.User {
	for _, x := range u.users {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (u userStore) ExampleClientID() string { return "service" }

func newJar() http.CookieJar {
	j, _ := cookiejar.New(nil)
	return j
}
