// Package ui is prflow's web UI: server-rendered pages (html/template, embedded) over the
// controller's state, with live run pages pushed by server-sent events from the runs KV watch.
//
// Routes (all under /ui/ except the redirect from /):
//
//	GET  /ui/                        runs (?pipeline=&status=&page=)
//	GET  /ui/runs/{id}               a run
//	GET  /ui/runs/{id}/events        the run's body re-rendered on every state change (SSE)
//	GET  /ui/runs/{id}/logs          the run's step log lines, live (SSE)
//	POST /ui/runs/{id}/cancel        cancel
//	POST /ui/runs/{id}/decide        approve or reject a parked approval
//	POST /ui/runs/{id}/intervene     decide a stage waiting for a manual intervention
//	GET  /ui/environments            every environment: desired beside live, drift, history
//	GET  /ui/environments/{name}     one environment with its whole history
//	GET  /ui/live/environments       the environments page's body on every model change (SSE; ?env=NAME: one)
//	GET  /ui/workers                 workers and agents
//	GET  /ui/events                  the newest webhook events: runs started, triggers that failed
//	POST /ui/runs/{id}/rerun         start the finished run again (same source and inputs)
//	POST /ui/runs/{id}/retry         retry the failed run from its failed stage
//	GET  /ui/promote                 start a run of a pipeline from a form of its typed inputs
//	                                 (?pipeline=NAME&env=ENV&in.NAME=VALUE prefill); POST starts it
//	GET  /ui/login, POST /ui/login   the API bearer token → session cookie; POST /ui/logout
//	GET  /ui/oidc/start              sign in with the OIDC provider (prflow server --oidc)
//	GET  /ui/oidc/callback           the provider's redirect back → sealed session cookie
//	GET  /ui/oidc/cli                the provider's issuer and CLI client ID for `prflow login`
//
// The scripts are static/app.js (EventSource and copy buttons) and static/envs.js (the
// environments page's EventSource); no Node build, no library.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/oidc"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// UI serves the web pages of one controller.
type UI struct {
	ctl  *controller.Controller
	auth *controller.Auth
	log  *slog.Logger
	tmpl *template.Template
	oidc *oidc.Provider // OIDC sign-in (prflow server --oidc); nil without
}

// SetOIDC offers sign-in with p's identity provider beside (or instead of) the token form.
func (u *UI) SetOIDC(p *oidc.Provider) { u.oidc = p }

// New returns the UI of ctl, authenticating callers with auth (the API's tokens).
func New(ctl *controller.Controller, auth *controller.Auth, log *slog.Logger) *UI {
	if log == nil {
		log = slog.Default()
	}
	return &UI{ctl: ctl, auth: auth, log: log, tmpl: template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))}
}

// Wrap serves the UI under /ui/ (and redirects / there) in front of api, the controller's
// HTTP API handler, which keeps every other path.
func Wrap(api http.Handler, u *UI) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.Handle("/ui/", u.Handler())
	return mux
}

// Handler serves the /ui/ routes.
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", u.loginForm)
	mux.HandleFunc("POST /ui/login", u.login)
	mux.HandleFunc("POST /ui/logout", u.logout)
	mux.HandleFunc("GET /ui/oidc/start", u.oidcStart)
	mux.HandleFunc("GET /ui/oidc/callback", u.oidcCallback)
	mux.HandleFunc("GET /ui/oidc/cli", u.oidcCLI)
	mux.Handle("GET /ui/{$}", u.page(u.runsPage))
	mux.Handle("GET /ui/runs/{id}", u.page(u.runPage))
	mux.Handle("GET /ui/runs/{id}/events", u.page(u.runEvents))
	mux.Handle("GET /ui/runs/{id}/logs", u.page(u.runLogs))
	mux.Handle("POST /ui/runs/{id}/cancel", u.action(u.cancel))
	mux.Handle("POST /ui/runs/{id}/decide", u.action(u.decide))
	mux.Handle("POST /ui/runs/{id}/intervene", u.action(u.intervene))
	mux.Handle("GET /ui/environments", u.page(u.envPage)) // envs.go
	mux.Handle("GET /ui/environments/{name}", u.page(u.envDetailPage))
	mux.Handle("GET /ui/live/environments", u.page(u.envEvents))
	mux.Handle("GET /ui/workers", u.page(u.workersPage))
	mux.Handle("GET /ui/events", u.page(u.eventsPage))
	mux.Handle("POST /ui/runs/{id}/rerun", u.action(u.rerun)) // actions.go
	mux.Handle("POST /ui/runs/{id}/retry", u.action(u.retry)) // actions.go
	mux.Handle("GET /ui/promote", u.page(u.promotePage))      // actions.go
	mux.Handle("POST /ui/promote", u.action(u.promote))       // actions.go
	return securityHeaders(mux)
}

// securityHeaders keeps pages out of frames and scripts to our own files.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// The session cookie holds a CSRF token and the caller's bearer token:
// "<csrf>.<base64url(token)>". It is HttpOnly and SameSite=Strict; every request checks the
// token against the tokens file again, so a removed token ends its sessions at once, and any
// controller replica serves any session (no server-side session store).
const cookieName = "prflow_session"

type session struct {
	user  controller.User
	csrf  string
	token string
	oidc  bool // an OIDC sign-in (cookie oidc.SessionCookie)
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s
}

// errBadToken is the answer to a token no user has.
var errBadToken = errors.New("this token is not valid: no user of this server has it (the tokens come from the server's --tokens file)")

func (u *UI) authenticate(token string) (controller.User, bool) {
	if u.auth == nil {
		return controller.User{}, false
	}
	if u.auth.Anonymous == nil && token == "" {
		return controller.User{}, false
	}
	r := &http.Request{Header: http.Header{"Authorization": {"Bearer " + token}}}
	return u.auth.Authenticate(r)
}

// readSession returns the request's session: an OIDC sign-in (refreshed when its ID token
// expired; why it is refused comes back in refusal), or a cookie with a token still valid.
func (u *UI) readSession(w http.ResponseWriter, r *http.Request) (s *session, ok bool, refusal error) {
	if u.oidc != nil {
		o, err := u.oidc.Session(w, r)
		if err == nil {
			return &session{user: o.User, csrf: o.CSRF, oidc: true}, true, nil
		}
		if !errors.Is(err, oidc.ErrNoSession) {
			// Drop the bad cookie so the next page is the plain sign-in page.
			http.SetCookie(w, &http.Cookie{Name: oidc.SessionCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
			return nil, false, err
		}
	}
	s, ok = u.readTokenSession(r)
	return s, ok, nil
}

func (u *UI) readTokenSession(r *http.Request) (*session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil, false
	}
	csrf, enc, ok := strings.Cut(c.Value, ".")
	if !ok || len(csrf) < 20 {
		return nil, false
	}
	tok, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil, false
	}
	user, ok := u.authenticate(string(tok))
	if !ok {
		return nil, false
	}
	return &session{user: user, csrf: csrf, token: string(tok)}, true
}

func (u *UI) setSession(w http.ResponseWriter, r *http.Request, token string) *session {
	var b [24]byte
	_, _ = rand.Read(b[:])
	csrf := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: csrf + "." + base64.RawURLEncoding.EncodeToString([]byte(token)),
		Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: int((12 * time.Hour).Seconds())})
	return &session{csrf: csrf, token: token}
}

// page runs h for a signed-in caller; others go to the login form (or, open on loopback
// with an anonymous user, get a session at once: actions still need its CSRF token).
func (u *UI) page(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok, refusal := u.readSession(w, r)
		if !ok && u.auth != nil && u.auth.Anonymous != nil {
			s = u.setSession(w, r, "")
			s.user, ok = *u.auth.Anonymous, true
		}
		if !ok {
			if r.Header.Get("Accept") == "text/event-stream" {
				http.Error(w, "not signed in", http.StatusUnauthorized)
				return
			}
			if refusal != nil {
				u.signInPage(w, r, http.StatusUnauthorized, safeNext(r.URL.RequestURI()), refusal.Error())
				return
			}
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// action runs h for a POST from one of our own pages: a valid session, a same-origin request
// and the session's CSRF token in the form.
func (u *UI) action(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		s, ok, refusal := u.readSession(w, r)
		if refusal != nil {
			u.fail(w, r, http.StatusUnauthorized, refusal.Error())
			return
		}
		if !ok {
			u.fail(w, r, http.StatusUnauthorized, "not signed in (or the token was removed): sign in again")
			return
		}
		if !sameOrigin(r) {
			u.fail(w, r, http.StatusForbidden, "cross-site request refused (Origin "+r.Header.Get("Origin")+")")
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
			u.fail(w, r, http.StatusForbidden, "the form's CSRF token does not match this session: reload the page and try again")
			return
		}
		u.ctl.RecordTokenUse(r, s.user) // an action changes something: audited like the API's
		h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// sameOrigin refuses a request whose Origin (sent by browsers on POST) is another site.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true // not a browser, or an old one: SameSite and the CSRF token still hold
	}
	ou, err := url.Parse(o)
	return err == nil && ou.Host == r.Host
}

func (u *UI) loginForm(w http.ResponseWriter, r *http.Request) {
	data := u.loginData(safeNext(r.URL.Query().Get("next")), "")
	if r.URL.Query().Has("signed-out") {
		data["Notice"] = "You are signed out."
	}
	u.render(w, r, http.StatusOK, "login", data)
}

// loginData is the sign-in page: the provider's button with --oidc, the token form with --tokens.
func (u *UI) loginData(next, errMsg string) map[string]any {
	d := map[string]any{"Title": "Sign in", "Next": next, "Tokens": u.oidc == nil || (u.auth != nil && u.auth.HasTokens())}
	if u.oidc != nil {
		d["OIDC"] = u.oidc.Name()
	}
	if errMsg != "" {
		d["Error"] = errMsg
	}
	return d
}

func (u *UI) signInPage(w http.ResponseWriter, r *http.Request, code int, next, errMsg string) {
	u.render(w, r, code, "login", u.loginData(next, errMsg))
}

func (u *UI) oidcStart(w http.ResponseWriter, r *http.Request) {
	if u.oidc == nil {
		u.fail(w, r, http.StatusNotFound, "this server has no OIDC sign-in (prflow server --oidc)")
		return
	}
	u.oidc.BeginSignIn(w, r, safeNext(r.URL.Query().Get("next")))
}

func (u *UI) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if u.oidc == nil {
		u.fail(w, r, http.StatusNotFound, "this server has no OIDC sign-in (prflow server --oidc)")
		return
	}
	next, err := u.oidc.FinishSignIn(w, r)
	if err != nil {
		u.log.Info("ui oidc sign-in refused", "remote", r.RemoteAddr, "err", err)
		u.ctl.RecordAuthFailure(r, "OIDC sign-in refused: "+err.Error())
		u.signInPage(w, r, http.StatusUnauthorized, "/ui/", "Sign-in refused: "+err.Error())
		return
	}
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
}

// oidcCLI tells `prflow login` which provider and public client to sign in with.
func (u *UI) oidcCLI(w http.ResponseWriter, r *http.Request) {
	c, ok := (oidc.CLIConfig{}), false
	if u.oidc != nil {
		c, ok = u.oidc.CLI()
	}
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "this server has no OIDC client for the CLI (cliClientID in the server's --oidc file)"})
		return
	}
	_ = json.NewEncoder(w).Encode(c)
}

func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	next := safeNext(r.PostFormValue("next"))
	if !sameOrigin(r) {
		u.render(w, r, http.StatusForbidden, "login", u.loginData(next, "cross-site sign-in refused"))
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" {
		u.render(w, r, http.StatusBadRequest, "login", u.loginData(next, "enter your API bearer token"))
		return
	}
	if _, ok := u.authenticate(tok); !ok {
		u.log.Info("ui sign-in refused: unknown token", "remote", r.RemoteAddr)
		u.ctl.RecordAuthFailure(r, "UI sign-in with an unknown token")
		u.render(w, r, http.StatusUnauthorized, "login", u.loginData(next, errBadToken.Error()))
		return
	}
	u.setSession(w, r, tok)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	if u.oidc != nil {
		// Also ends the provider's session when it has an end_session_endpoint, which sends
		// the browser back to our sign-in page. Not by a redirect: the form's POST may only
		// lead to this site (CSP form-action 'self'), so a page sends the browser on.
		to := u.oidc.SignOut(w, r, "/ui/login?signed-out")
		if strings.HasPrefix(to, "/") {
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		u.render(w, r, http.StatusOK, "signout", map[string]any{"Title": "Signing out", "Refresh": to, "To": to, "Provider": u.oidc.Name()})
		return
	}
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on this site's UI.
func safeNext(n string) string {
	if !strings.HasPrefix(n, "/ui/") || strings.HasPrefix(n, "//") || strings.Contains(n, "\\") {
		return "/ui/"
	}
	return n
}

// fail shows an error page (the message is the whole explanation; nothing is swallowed).
func (u *UI) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	u.render(w, r, code, "error", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg})
}

func (u *UI) render(w http.ResponseWriter, r *http.Request, code int, name string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	if s := sessionFrom(r.Context()); s != nil {
		data["User"] = s.user
		data["CSRF"] = s.csrf
		data["SignedIn"] = s.token != "" || s.oidc
	}
	var b strings.Builder
	if err := u.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		u.log.Error("ui template", "template", name, "err", err)
		http.Error(w, "rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// secure reports whether the browser reached us over https (directly or through a proxy
// that says so): the session cookie is then Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}
