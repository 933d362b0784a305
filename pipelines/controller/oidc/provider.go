package oidc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/prflow/prflow/pipelines/controller"
)

// Cookie names. The session cookie is separate from the token sign-in's cookie so that the two
// ways of signing in do not read each other's format.
const (
	SessionCookie = "prflow_oidc"
	flowCookie    = "prflow_oidc_flow"
)

// flowTTL bounds how long a sign-in may sit on the provider's login page.
const flowTTL = 10 * time.Minute

// maxCookie is what browsers keep of one cookie (name, value and attributes).
const maxCookie = 4000

// Provider is one configured identity provider.
type Provider struct {
	cfg      *Config
	log      *slog.Logger
	provider *gooidc.Provider
	oauth    oauth2.Config
	idTokens *gooidc.IDTokenVerifier // the UI's: aud must be clientID
	bearer   *gooidc.IDTokenVerifier // the API's: aud checked against cfg.Audiences
	seal     *sealer
	secure   bool
	// endSession and deviceAuth are optional discovery fields.
	endSession string
	deviceAuth string
	// Now is the clock (tests move it); nil is time.Now.
	Now func() time.Time

	mu       sync.Mutex
	refreshd map[[32]byte]refreshResult // recent refreshes by refresh-token digest (see refresh)
}

type refreshResult struct {
	s   *Session
	d   *sessionData
	err error
	at  time.Time
}

// New discovers the provider (its /.well-known/openid-configuration) and returns it ready to
// sign people in.
func New(ctx context.Context, cfg *Config, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.Default()
	}
	gp, err := gooidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc: discovering the provider at %s: %w", cfg.Issuer, err)
	}
	var disc struct {
		EndSession string `json:"end_session_endpoint"`
		DeviceAuth string `json:"device_authorization_endpoint"`
	}
	_ = gp.Claims(&disc)
	s, err := newSealer(cfg.SessionKey.Value())
	if err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, log: log, provider: gp, seal: s, endSession: disc.EndSession, deviceAuth: disc.DeviceAuth,
		refreshd: map[[32]byte]refreshResult{}}
	p.oauth = oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret.Value(), Endpoint: gp.Endpoint(),
		RedirectURL: cfg.RedirectURL, Scopes: cfg.Scopes}
	now := func() time.Time { return p.now() }
	p.idTokens = gp.Verifier(&gooidc.Config{ClientID: cfg.ClientID, Now: now})
	p.bearer = gp.Verifier(&gooidc.Config{SkipClientIDCheck: true, Now: now})
	if u, err := url.Parse(cfg.RedirectURL); err == nil {
		p.secure = !isLoopback(u.Hostname())
	}
	return p, nil
}

func (p *Provider) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Name is the provider's name for the sign-in button.
func (p *Provider) Name() string { return p.cfg.Name }

// CLIConfig is what `prflow login` needs to sign in against this provider (public values only).
type CLIConfig struct {
	Issuer   string   `json:"issuer"`
	ClientID string   `json:"clientID"`
	Scopes   []string `json:"scopes"`
}

// CLI returns the configuration for `prflow login`, or false when no cliClientID is set.
func (p *Provider) CLI() (CLIConfig, bool) {
	if p.cfg.CLIClientID == "" {
		return CLIConfig{}, false
	}
	return CLIConfig{Issuer: p.cfg.Issuer, ClientID: p.cfg.CLIClientID, Scopes: p.cfg.Scopes}, true
}

// Session is a signed-in browser: who (User) and the CSRF token its forms carry.
type Session struct {
	User controller.User
	CSRF string
	// Expiry is when the ID token behind the session expires; after it the session is refreshed.
	Expiry time.Time
}

// sessionData is the sealed session cookie.
type sessionData struct {
	Sub     string   `json:"s"`
	Iss     string   `json:"i"`
	Name    string   `json:"n"`
	Groups  []string `json:"g,omitempty"`
	Exp     int64    `json:"e"`
	CSRF    string   `json:"c"`
	Refresh string   `json:"r,omitempty"` // the refresh token, encrypted with the rest
	IDToken string   `json:"h,omitempty"` // id_token_hint for the provider's logout, when it fits
}

type flowData struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"x"`
	At       int64  `json:"t"`
}

// Refusals the UI shows as they are: each says what happened and what to do.
var (
	ErrNoSession = errors.New("not signed in")
	ErrTampered  = errors.New("your session cookie was altered or sealed with another server key: sign in again")
	ErrExpired   = errors.New("your sign-in expired and the identity provider refused to renew it: sign in again")
)

// SignInError is a refused sign-in (callback); its message is for the person signing in and
// never holds a code, token or secret.
type SignInError struct{ Msg string }

func (e *SignInError) Error() string { return e.Msg }

func refused(format string, args ...any) error {
	return &SignInError{Msg: fmt.Sprintf(format, args...)}
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// BeginSignIn redirects the browser to the provider with a fresh state, nonce and PKCE
// challenge, which it keeps in a sealed flow cookie for the callback.
func (p *Provider) BeginSignIn(w http.ResponseWriter, r *http.Request, next string) {
	f := flowData{State: randomString(24), Nonce: randomString(24), Verifier: oauth2.GenerateVerifier(), Next: next, At: p.now().Unix()}
	v, err := p.seal.seal(flowCookie, f)
	if err != nil {
		http.Error(w, "sealing the sign-in state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	p.setCookie(w, flowCookie, v, "/ui/oidc/", int(flowTTL.Seconds()))
	to := p.oauth.AuthCodeURL(f.State, gooidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
	http.Redirect(w, r, to, http.StatusFound)
}

// setCookie writes one of our cookies. SameSite is Lax, not Strict: the provider sends the
// browser back to the callback by a cross-site redirect, and a Strict cookie would not come
// with it (nor with the redirect chain that follows it into the UI). Lax still keeps cookies
// off cross-site POSTs; the CSRF token guards the rest.
func (p *Provider) setCookie(w http.ResponseWriter, name, value, path string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteLaxMode})
}

// FinishSignIn handles the provider's redirect back: it checks the state against the flow
// cookie (which it clears: a state is good once), exchanges the code with the PKCE verifier,
// verifies the ID token (signature, iss, aud, exp, nonce) and sets the session cookie. It
// returns where to go next; a *SignInError says why a sign-in was refused.
func (p *Provider) FinishSignIn(w http.ResponseWriter, r *http.Request) (string, error) {
	q := r.URL.Query()
	c, err := r.Cookie(flowCookie)
	p.setCookie(w, flowCookie, "", "/ui/oidc/", -1)
	if e := q.Get("error"); e != "" {
		return "", refused("the identity provider refused the sign-in: %s %s", clip(e), clip(q.Get("error_description")))
	}
	if err != nil {
		return "", refused("no sign-in is in progress in this browser (it finished already, or took longer than %s, or cookies are blocked): start again", flowTTL)
	}
	var f flowData
	if err := p.seal.open(flowCookie, c.Value, &f); err != nil {
		return "", refused("the sign-in state cookie was altered or sealed with another server key: start again")
	}
	if p.now().Sub(time.Unix(f.At, 0)) > flowTTL {
		return "", refused("the sign-in took longer than %s: start again", flowTTL)
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1 {
		return "", refused("the sign-in answer's state does not match the one this browser started (a replayed or forged answer): start again")
	}
	if f.Verifier == "" {
		return "", refused("the sign-in state has no PKCE verifier: start again")
	}
	code := q.Get("code")
	if code == "" {
		return "", refused("the identity provider's answer has no code")
	}
	tok, err := p.oauth.Exchange(r.Context(), code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		p.log.Info("oidc sign-in: code exchange refused", "err", providerErr(err))
		return "", refused("the identity provider refused the sign-in code (%s): it may have been used already, have expired, or not match this sign-in's PKCE verifier; start again", providerErr(err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", refused("the identity provider's answer has no ID token (is the openid scope configured?)")
	}
	id, err := p.idTokens.Verify(r.Context(), raw)
	if err != nil {
		return "", refused("the ID token was refused: %s", verifyErr(err))
	}
	if subtle.ConstantTimeCompare([]byte(id.Nonce), []byte(f.Nonce)) != 1 {
		return "", refused("the ID token's nonce does not match this sign-in (a replayed token): start again")
	}
	s, err := p.newSession(id, raw, tok.RefreshToken, "")
	if err != nil {
		return "", refused("%v", err)
	}
	if err := p.writeSession(w, s); err != nil {
		return "", refused("%v", err)
	}
	p.log.Info("oidc sign-in", "user", s.Name, "sub", s.Sub, "groups", s.Groups)
	return f.Next, nil
}

func (p *Provider) newSession(id *gooidc.IDToken, raw, refresh, csrf string) (*sessionData, error) {
	u, err := p.user(id)
	if err != nil {
		return nil, err
	}
	if csrf == "" {
		csrf = randomString(24)
	}
	return &sessionData{Sub: id.Subject, Iss: id.Issuer, Name: u.Name, Groups: u.Groups, Exp: id.Expiry.Unix(),
		CSRF: csrf, Refresh: refresh, IDToken: raw}, nil
}

// user reads the name and groups claims of a verified ID token.
func (p *Provider) user(id *gooidc.IDToken) (controller.User, error) {
	var claims map[string]any
	if err := id.Claims(&claims); err != nil {
		return controller.User{}, fmt.Errorf("reading the ID token's claims: %w", err)
	}
	name := ""
	if p.cfg.UsernameClaim != "" {
		name, _ = claims[p.cfg.UsernameClaim].(string)
		if name == "" {
			return controller.User{}, fmt.Errorf("the ID token has no %q claim (usernameClaim in the --oidc file)", p.cfg.UsernameClaim)
		}
	} else {
		for _, k := range []string{"preferred_username", "email"} {
			if v, _ := claims[k].(string); v != "" {
				name = v
				break
			}
		}
		if name == "" {
			name = id.Subject
		}
	}
	var groups []string
	switch g := claims[p.cfg.GroupsClaim].(type) {
	case nil:
	case string: // some providers send a single group as a string
		groups = []string{g}
	case []any:
		for _, x := range g {
			if s, ok := x.(string); ok && s != "" {
				groups = append(groups, s)
			}
		}
	default:
		return controller.User{}, fmt.Errorf("the ID token's %q claim is a %T, want a list of group names (groupsClaim in the --oidc file)", p.cfg.GroupsClaim, g)
	}
	return controller.OIDCUser(name, groups, id.Issuer, id.Subject), nil
}

func (p *Provider) writeSession(w http.ResponseWriter, s *sessionData) error {
	v, err := p.seal.seal(SessionCookie, s)
	if err != nil {
		return err
	}
	if len(v) > maxCookie && s.IDToken != "" {
		// The hint only helps the provider's logout page; the session works without it.
		s.IDToken = ""
		v, err = p.seal.seal(SessionCookie, s)
		if err != nil {
			return err
		}
	}
	if len(v) > maxCookie {
		return fmt.Errorf("the session does not fit in a cookie (%d bytes, %d groups): have the provider send fewer groups in the %q claim", len(v), len(s.Groups), p.cfg.GroupsClaim)
	}
	// The cookie lives as long as the refresh token may; the ID token's expiry inside it
	// decides when it is refreshed.
	p.setCookie(w, SessionCookie, v, "/ui/", int((7 * 24 * time.Hour).Seconds()))
	return nil
}

// Session returns the browser's session: ErrNoSession without a cookie, ErrTampered for one
// that does not open, ErrExpired when its ID token expired and the provider refused the refresh
// token. A session past its expiry is refreshed and its cookie rewritten.
func (p *Provider) Session(w http.ResponseWriter, r *http.Request) (*Session, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil, ErrNoSession
	}
	var d sessionData
	if err := p.seal.open(SessionCookie, c.Value, &d); err != nil {
		return nil, ErrTampered
	}
	if d.Iss != p.cfg.Issuer {
		return nil, ErrTampered
	}
	if p.now().Before(time.Unix(d.Exp, 0)) {
		return d.session(), nil
	}
	if d.Refresh == "" {
		return nil, ErrExpired
	}
	s, err := p.refresh(r.Context(), w, &d)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *sessionData) session() *Session {
	return &Session{User: controller.OIDCUser(d.Name, d.Groups, d.Iss, d.Sub), CSRF: d.CSRF, Expiry: time.Unix(d.Exp, 0)}
}

// refresh renews an expired session with its refresh token. Pages load several requests at once
// (the page, its event streams) and providers that rotate refresh tokens accept each one once,
// so a refresh made in this process within the last minute is reused instead of repeated.
func (p *Provider) refresh(ctx context.Context, w http.ResponseWriter, d *sessionData) (*Session, error) {
	key := sha256.Sum256([]byte(d.Refresh))
	p.mu.Lock()
	defer p.mu.Unlock() // one refresh at a time: they are rare (once per ID token lifetime)
	for k, v := range p.refreshd {
		if p.now().Sub(v.at) > time.Minute {
			delete(p.refreshd, k)
		}
	}
	if v, ok := p.refreshd[key]; ok {
		if v.err != nil {
			return nil, ErrExpired
		}
		// This request also carried the old cookie: it gets the renewed one too.
		if err := p.writeSession(w, v.d); err != nil {
			return nil, err
		}
		return v.s, nil
	}
	s, nd, err := p.doRefresh(ctx, d)
	p.refreshd[key] = refreshResult{s: s, d: nd, err: err, at: p.now()}
	if err != nil {
		p.log.Info("oidc session refresh refused", "user", d.Name, "sub", d.Sub, "err", err)
		return nil, ErrExpired
	}
	if err := p.writeSession(w, nd); err != nil {
		return nil, err
	}
	p.log.Info("oidc session refreshed", "user", s.User.Name, "sub", d.Sub)
	return s, nil
}

func (p *Provider) doRefresh(ctx context.Context, d *sessionData) (*Session, *sessionData, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tok, err := p.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: d.Refresh, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return nil, nil, errors.New(providerErr(err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, nil, errors.New("the provider's refresh answer has no ID token")
	}
	id, err := p.idTokens.Verify(ctx, raw)
	if err != nil {
		return nil, nil, errors.New(verifyErr(err))
	}
	if id.Subject != d.Sub {
		return nil, nil, fmt.Errorf("the refreshed ID token is for another subject")
	}
	rt := tok.RefreshToken
	if rt == "" {
		rt = d.Refresh // providers that do not rotate refresh tokens keep the old one valid
	}
	nd, err := p.newSession(id, raw, rt, d.CSRF)
	if err != nil {
		return nil, nil, err
	}
	return nd.session(), nd, nil
}

// SignOut clears the session and returns where to send the browser: the provider's
// end_session_endpoint (back to after) when it has one, else after.
func (p *Provider) SignOut(w http.ResponseWriter, r *http.Request, after string) string {
	var d sessionData
	if c, err := r.Cookie(SessionCookie); err == nil {
		_ = p.seal.open(SessionCookie, c.Value, &d)
	}
	p.setCookie(w, SessionCookie, "", "/ui/", -1)
	if p.endSession == "" {
		return after
	}
	if strings.HasPrefix(after, "/") {
		after = strings.TrimSuffix(p.cfg.RedirectURL, CallbackPath) + after // the provider wants it absolute
	}
	q := url.Values{"client_id": {p.cfg.ClientID}, "post_logout_redirect_uri": {after}}
	if d.IDToken != "" {
		q.Set("id_token_hint", d.IDToken)
	}
	sep := "?"
	if strings.Contains(p.endSession, "?") {
		sep = "&"
	}
	return p.endSession + sep + q.Encode()
}

// VerifyBearer checks an API bearer token: an ID token of the configured issuer, signed by
// it, unexpired, for one of the allowed audiences (controller.BearerVerifier).
func (p *Provider) VerifyBearer(ctx context.Context, raw string) (controller.User, error) {
	u, err := p.verifyBearer(ctx, raw)
	if err != nil {
		p.log.Debug("oidc bearer token refused", "err", err)
	}
	return u, err
}

func (p *Provider) verifyBearer(ctx context.Context, raw string) (controller.User, error) {
	// The issuer first, for a message that names it (go-oidc checks the signature first, and
	// another provider's token fails there with a message that does not say why).
	if iss := unverifiedIssuer(raw); iss != "" && iss != p.cfg.Issuer {
		return controller.User{}, fmt.Errorf("OIDC token refused: issued by %q, not by this server's provider %q", clip(iss), p.cfg.Issuer)
	}
	id, err := p.bearer.Verify(ctx, raw)
	if err != nil {
		return controller.User{}, fmt.Errorf("OIDC token refused: %s", verifyErr(err))
	}
	if !slices.ContainsFunc(id.Audience, func(a string) bool { return slices.Contains(p.cfg.Audiences, a) }) {
		return controller.User{}, fmt.Errorf("OIDC token refused: its audience %q is not one this server accepts (audiences in the --oidc file: %q)", id.Audience, p.cfg.Audiences)
	}
	return p.user(id)
}

// unverifiedIssuer reads a JWT's iss claim without checking anything (for messages only).
func unverifiedIssuer(raw string) string {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.Iss
}

// verifyErr says why go-oidc refused a token, in words a person can act on. go-oidc's
// messages name the issuers and audiences, never the token.
func verifyErr(err error) string {
	var exp *gooidc.TokenExpiredError
	if errors.As(err, &exp) {
		return "the token expired at " + exp.Expiry.UTC().Format(time.RFC3339)
	}
	return strings.TrimPrefix(err.Error(), "oidc: ")
}

// providerErr is an OAuth error answer without its body (which a provider may fill with
// anything).
func providerErr(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := "the provider answered " + clip(re.ErrorCode)
		if re.ErrorDescription != "" {
			msg += ": " + clip(re.ErrorDescription)
		}
		if re.Response != nil && re.ErrorCode == "" {
			msg += fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		}
		return msg
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return "the provider could not be reached: " + ue.Err.Error()
	}
	return err.Error()
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
