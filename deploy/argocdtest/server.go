package argocdtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Version is what GET /api/version reports: the Argo CD release whose
// behaviour the fake reproduces.
const Version = "v3.2.11+argocdtest"

// defaultNamespace is the namespace Argo CD runs in and keeps its
// Applications in unless apps-in-any-namespace is configured.
const defaultNamespace = "argocd"

// Server is an in-memory Argo CD: REST API, application controller,
// repo-server (through a GitReader) and ApplicationSet controller in one
// process. Create it with New; it serves on a loopback httptest server until
// Close.
type Server struct {
	srv    *httptest.Server
	log    *slog.Logger
	now    func() time.Time
	git    GitReader
	ownGit *GitCLI
	signer *tokenSigner
	health HealthFunc

	step             time.Duration
	progressingSteps int
	reconcileEvery   time.Duration
	keepalive        time.Duration
	appsetPoll       time.Duration
	webhookSecret    string
	hookOnce         sync.Once
	hook             *httptest.Server // the ApplicationSet controller's webhook listener

	staticTokens map[string]string // token -> username
	accounts     map[string]string // username -> password
	adminToken   string
	projects     map[string]bool
	projectSpecs map[string]*projectState // AppProjects with sync windows (SetSyncWindows)
	namespaces   map[string]bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	rv          int64
	seq         int64
	apps        map[string]*appState    // "namespace/name"
	appsets     map[string]*appsetState // "namespace/name"
	subs        map[*subscriber]struct{}
	reqs        []Request
	faults      []*Fault
	streamDelay time.Duration
	watch       watchTuning     // buffer size, held streams and dropped events (stream.go)
	revoked     map[string]bool // tokens refused (RevokeToken)
	denied      map[string]bool // "resource/action" refused to every token (Deny)
	down        bool            // connections are closed unanswered (SetDown, Restart)
	repoDown    atomic.Bool     // the repo-server is stopped (SetRepoServerDown)
	hang        chan struct{}   // non-nil while unresponsive; closed when answering again

	appsetRefreshes int // generations asked for by the refresh annotation
	webhookEvents   int // push events the ApplicationSet webhook accepted
}

// Option configures New.
type Option func(*config)

type config struct {
	tokens           []string
	accounts         map[string]string
	git              GitReader
	health           HealthFunc
	step             time.Duration
	progressingSteps int
	reconcileEvery   time.Duration
	keepalive        time.Duration
	now              func() time.Time
	log              *slog.Logger
	projects         []string
	namespaces       []string
	listener         net.Listener
	creds            []repoCred
	appsetPoll       time.Duration
	webhookSecret    string
}

// WithToken makes token an accepted bearer token for user "admin", in
// addition to the JWT returned by Server.Token. Unlike the real server, a
// static token need not be a JWT (convenient for `prflow dev` configs).
func WithToken(token string) Option {
	return func(c *config) { c.tokens = append(c.tokens, token) }
}

// WithAccount adds a local user that can log in with POST /api/v1/session.
// User "admin" always exists; WithAccount("admin", pw) sets its password.
func WithAccount(username, password string) Option {
	return func(c *config) { c.accounts[username] = password }
}

// WithRepoCredentials gives the default git CLI reader basic-auth
// credentials for repository URLs starting with prefix (see
// GitCLI.SetCredentials); ignored with WithGitReader.
func WithRepoCredentials(prefix, username, password string) Option {
	return func(c *config) { c.creds = append(c.creds, repoCred{prefix, username, password}) }
}

// WithGitReader replaces the default git CLI reader, e.g. with a MemGit.
func WithGitReader(g GitReader) Option { return func(c *config) { c.git = g } }

// WithHealthFunc replaces DefaultHealth.
func WithHealthFunc(f HealthFunc) Option { return func(c *config) { c.health = f } }

// WithTimeline sets the delay between two consecutive controller updates of
// an application (default 20ms; the real controller takes ~0.1s per step)
// and how many Progressing events separate Synced from the final health after
// a successful sync (default 1).
func WithTimeline(step time.Duration, progressingSteps int) Option {
	return func(c *config) {
		if step > 0 {
			c.step = step
		}
		if progressingSteps >= 0 {
			c.progressingSteps = progressingSteps
		}
	}
}

// WithReconcileInterval makes the application controller reconcile every app
// every d, like Argo CD's timeout.reconciliation (real default 120s): new
// commits show up as OutOfSync and auto-sync apps sync. It does not regenerate
// ApplicationSets (see WithAppSetPollInterval). 0, the default, disables it:
// tests call Reconcile or refresh explicitly.
func WithReconcileInterval(d time.Duration) Option {
	return func(c *config) { c.reconcileEvery = d }
}

// WithKeepalive sets the interval of the ":" keepalive lines on SSE streams
// (the real server uses 15s, the default here too).
func WithKeepalive(d time.Duration) Option { return func(c *config) { c.keepalive = d } }

// WithClock sets the clock used for timestamps (not for delays).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithProjects declares AppProjects besides "default". Creating an app in an
// unknown project is refused with 403 like the real server.
func WithProjects(names ...string) Option {
	return func(c *config) { c.projects = append(c.projects, names...) }
}

// WithAppNamespaces enables apps-in-any-namespace for these namespaces
// (besides "argocd").
func WithAppNamespaces(namespaces ...string) Option {
	return func(c *config) { c.namespaces = append(c.namespaces, namespaces...) }
}

// WithListener serves on l instead of a random loopback port (for
// `prflow dev`, which wants a fixed address).
func WithListener(l net.Listener) Option { return func(c *config) { c.listener = l } }

// New starts a fake Argo CD. Without WithGitReader it reads git through the
// git CLI (see GitCLI).
func New(opts ...Option) *Server {
	c := config{
		accounts:         map[string]string{},
		step:             20 * time.Millisecond,
		progressingSteps: 1,
		keepalive:        15 * time.Second,
		now:              time.Now,
		appsetPoll:       DefaultAppSetPoll,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.health == nil {
		c.health = DefaultHealth
	}
	s := &Server{
		log: c.log, now: c.now, health: c.health, git: c.git,
		step: c.step, progressingSteps: c.progressingSteps, reconcileEvery: c.reconcileEvery, keepalive: c.keepalive,
		appsetPoll: c.appsetPoll, webhookSecret: c.webhookSecret,
		staticTokens: map[string]string{}, accounts: map[string]string{"admin": randomHex(12)},
		projects: map[string]bool{"default": true}, namespaces: map[string]bool{defaultNamespace: true},
		apps: map[string]*appState{}, appsets: map[string]*appsetState{}, subs: map[*subscriber]struct{}{},
	}
	for u, p := range c.accounts {
		s.accounts[u] = p
	}
	for _, t := range c.tokens {
		s.staticTokens[t] = "admin"
	}
	for _, p := range c.projects {
		s.projects[p] = true
	}
	for _, n := range c.namespaces {
		s.namespaces[n] = true
	}
	if s.git == nil {
		g, err := NewGitCLI("", s.log)
		if err != nil {
			s.log.Error("argocdtest: no git reader available", "err", err)
			s.git = brokenGit{err}
		} else {
			for _, cr := range c.creds {
				g.SetCredentials(cr.prefix, cr.username, cr.password)
			}
			s.git, s.ownGit = g, g
		}
	}
	s.git = repoServer{GitReader: s.git, down: &s.repoDown}
	signer, err := newTokenSigner()
	if err != nil {
		s.log.Error("argocdtest: token signer", "err", err)
		signer = &tokenSigner{key: []byte("argocdtest-fallback-key")}
	}
	s.signer = signer
	s.adminToken, _ = s.signer.mint("admin", s.now(), 0)
	s.ctx, s.cancel = context.WithCancel(context.Background())

	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	if c.listener != nil {
		_ = s.srv.Listener.Close()
		s.srv.Listener = c.listener
	}
	s.srv.Start()
	if s.reconcileEvery > 0 {
		s.wg.Add(1)
		go s.every(s.reconcileEvery, s.reconcileApps)
	}
	if s.appsetPoll > 0 {
		s.wg.Add(1)
		go s.every(s.appsetPoll, s.pollAppSets)
	}
	return s
}

// brokenGit is used when the git CLI is missing: every read fails clearly.
type brokenGit struct{ err error }

func (b brokenGit) Resolve(context.Context, string, string) (string, error) { return "", b.err }
func (b brokenGit) ReadTree(context.Context, string, string, string) (map[string][]byte, error) {
	return nil, b.err
}

// URL is the base URL of the API, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return s.srv.URL }

// Token returns a valid bearer token (an HS256 JWT) for user "admin".
func (s *Server) Token() string { return s.adminToken }

// AdminPassword returns admin's password for POST /api/v1/session.
func (s *Server) AdminPassword() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accounts["admin"]
}

// Close stops background work, ends open streams and shuts the server down.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.srv.Close()
	s.hookOnce.Do(func() {})
	if s.hook != nil {
		s.hook.Close()
	}
	if s.ownGit != nil {
		_ = s.ownGit.Close()
	}
}

// every runs f each period until Close; the caller has counted it in s.wg.
func (s *Server) every(period time.Duration, f func()) {
	defer s.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// goBackground runs f tracked by Close; it reports false after Close.
func (s *Server) goBackground(f func()) bool {
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// sleep waits d or until Close; false means the server is closing.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- request log and fault injection ----

// Request is one request the server answered, for tests that count calls.
type Request struct {
	Method string
	Path   string
	Query  string // raw query
	Status int
	User   string // authenticated user; "" when unauthenticated
	Body   []byte // request body (nil for GET; redacted for session logins)
	At     time.Time
}

// Requests returns the requests answered so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// ResetRequests clears the request log.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = nil
}

// Fault makes matching requests fail or answer slowly, as a proxy or an
// overloaded server would, before any other processing (auth included).
type Fault struct {
	Method  string        // "" matches any method
	Path    string        // exact URL path, or a prefix when it ends in "*"
	Status  int           // HTTP status to answer with; 0 = answer normally (after Delay)
	Message string        // error message in the body (default: the status text)
	Code    int           // gRPC code in the body (default: the one grpc-gateway maps Status from)
	Delay   time.Duration // wait before answering
	Times   int           // how many requests it applies to; 0 means 1, negative means until ClearFaults
}

func (f *Fault) matches(r *http.Request) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, r.Method) {
		return false
	}
	if p, ok := strings.CutSuffix(f.Path, "*"); ok {
		return strings.HasPrefix(r.URL.Path, p)
	}
	return r.URL.Path == f.Path
}

// InjectFault adds a fault; faults are matched in the order added.
func (s *Server) InjectFault(f Fault) {
	if f.Times == 0 {
		f.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// FailNext makes the next request to path (any method) answer status.
func (s *Server) FailNext(path string, status int) {
	s.InjectFault(Fault{Path: path, Status: status})
}

// ClearFaults removes all faults.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

func (s *Server) takeFault(r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if !f.matches(r) {
			continue
		}
		out := *f
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return &out
	}
	return nil
}

// ---- HTTP plumbing ----

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type ctxKey int

const userKey ctxKey = 0

// requestInfo lets handlers report the authenticated user to the log.
type requestInfo struct{ user string }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Method != http.MethodGet && r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err == nil {
			body = b
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	logged := body
	if r.URL.Path == "/api/v1/session" {
		logged = []byte(`{"password":"<redacted>"}`) // never keep credentials in the log
	}
	info := &requestInfo{}
	r = r.WithContext(context.WithValue(r.Context(), userKey, info))
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: rec.status,
			User: info.user, Body: logged, At: s.now(),
		})
		s.mu.Unlock()
	}()

	if s.isDown() {
		// Down (restarting): the connection is cut before any answer.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	if !s.waitAnswering(r.Context()) {
		return
	}
	if f := s.takeFault(r); f != nil {
		if f.Delay > 0 && !s.sleepCtx(r.Context(), f.Delay) {
			return
		}
		if f.Status != 0 {
			msg := f.Message
			if msg == "" {
				msg = http.StatusText(f.Status)
			}
			code := f.Code
			if code == 0 {
				code = grpcCodeForHTTP(f.Status)
			}
			writeJSON(rec, f.Status, ErrorBody{Error: msg, Code: code, Message: msg})
			return
		}
	}
	s.route(rec, r)
}

func (s *Server) sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.ctx.Done():
		return false
	}
}

type handler func(w http.ResponseWriter, r *http.Request, params []string)

type route struct {
	method  string
	pattern []string // segments; "{}" is a parameter
	handle  handler
}

// signedIn runs h only for a caller with a valid session, as the API server's
// auth interceptor does; any other caller gets the Unauthenticated error.
// requestUser tells h who the caller is.
func (s *Server) signedIn(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, params []string) {
		if _, e := s.authenticate(r); e != nil {
			writeAPIError(w, e)
			return
		}
		h(w, r, params)
	}
}

func (s *Server) routes() []route {
	return []route{
		{"GET", []string{"api", "version"}, s.handleVersion},
		{"POST", []string{"api", "v1", "session"}, s.handleSessionCreate},
		{"DELETE", []string{"api", "v1", "session"}, s.handleSessionDelete},
		{"GET", []string{"api", "v1", "session", "userinfo"}, s.handleUserInfo},
		{"GET", []string{"api", "v1", "applications"}, s.signedIn(s.handleListApps)},
		{"POST", []string{"api", "v1", "applications"}, s.signedIn(s.handleCreateApp)},
		{"GET", []string{"api", "v1", "applications", "{}"}, s.signedIn(s.handleGetApp)},
		{"DELETE", []string{"api", "v1", "applications", "{}"}, s.signedIn(s.handleDeleteApp)},
		{"PATCH", []string{"api", "v1", "applications", "{}"}, s.signedIn(s.handlePatchApp)},
		{"POST", []string{"api", "v1", "applications", "{}", "sync"}, s.signedIn(s.handleSync)},
		{"GET", []string{"api", "v1", "applications", "{}", "manifests"}, s.signedIn(s.handleManifests)},
		{"GET", []string{"api", "v1", "applications", "{}", "managed-resources"}, s.signedIn(s.handleManagedResources)},
		{"GET", []string{"api", "v1", "applications", "{}", "syncwindows"}, s.signedIn(s.handleAppSyncWindows)},
		{"GET", []string{"api", "v1", "projects", "{}"}, s.signedIn(s.handleGetProject)},
		{"DELETE", []string{"api", "v1", "applications", "{}", "operation"}, s.signedIn(s.handleTerminate)},
		{"GET", []string{"api", "v1", "applicationsets"}, s.signedIn(s.handleListAppSets)},
		{"GET", []string{"api", "v1", "applicationsets", "{}"}, s.signedIn(s.handleGetAppSet)},
		{"POST", []string{"api", "v1", "applicationsets"}, s.signedIn(s.handleCreateAppSet)},
		{"POST", []string{"api", "v1", "applicationsets", "generate"}, s.signedIn(s.handleGenerateAppSet)},
		{"GET", []string{"api", "v1", "stream", "applications"}, s.handleWatch},
	}
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	// Argo CD wraps its whole REST gateway in a Content-Type check (CSRF
	// protection): any non-GET request without exactly application/json is
	// refused before routing and before authentication, DELETE included.
	if strings.HasPrefix(r.URL.Path, "/api/") && r.Method != http.MethodGet &&
		strings.ToLower(r.Header.Get("Content-Type")) != "application/json" {
		http.Error(w, "Invalid content type", http.StatusUnsupportedMediaType)
		return
	}
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	methodMismatch := false
	for _, rt := range s.routes() {
		params, ok := matchRoute(rt.pattern, segs)
		if !ok {
			continue
		}
		if rt.method != r.Method {
			methodMismatch = true
			continue
		}
		rt.handle(w, r, params)
		return
	}
	if methodMismatch {
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	http.Error(w, http.StatusText(http.StatusNotFound), http.StatusNotFound)
}

func matchRoute(pattern, segs []string) ([]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	var params []string
	for i, p := range pattern {
		if p == "{}" {
			if segs[i] == "" {
				return nil, false
			}
			params = append(params, segs[i])
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}

// ---- errors in the grpc-gateway v1 shape ----

// gRPC status codes used by the real server.
const (
	codeUnknown            = 2
	codeInvalidArgument    = 3
	codeDeadlineExceeded   = 4
	codeNotFound           = 5
	codeAlreadyExists      = 6
	codePermissionDenied   = 7
	codeResourceExhausted  = 8
	codeFailedPrecondition = 9
	codeAborted            = 10
	codeUnimplemented      = 12
	codeInternal           = 13
	codeUnavailable        = 14
	codeUnauthenticated    = 16
)

// apiError is a gRPC status as the handlers of the real server return it.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errf(code int, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// wrapErr prefixes an error message the way fmt.Errorf("...: %w") does on the
// real server, keeping the gRPC code.
func wrapErr(prefix string, e *apiError) *apiError {
	return &apiError{code: e.code, msg: prefix + ": " + e.msg}
}

var errPermissionDenied = &apiError{code: codePermissionDenied, msg: "permission denied"}

// httpStatus maps gRPC codes to HTTP like grpc-gateway v1's HTTPStatusFromCode.
func httpStatus(code int) int {
	switch code {
	case 0:
		return http.StatusOK
	case 1:
		return http.StatusRequestTimeout
	case codeInvalidArgument, codeFailedPrecondition, 11:
		return http.StatusBadRequest
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case codeNotFound:
		return http.StatusNotFound
	case codeAlreadyExists, codeAborted:
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeUnauthenticated:
		return http.StatusUnauthorized
	case codeResourceExhausted:
		return http.StatusTooManyRequests
	case codeUnimplemented:
		return http.StatusNotImplemented
	case codeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func grpcCodeForHTTP(status int) int {
	switch status {
	case http.StatusBadRequest:
		return codeInvalidArgument
	case http.StatusUnauthorized:
		return codeUnauthenticated
	case http.StatusForbidden:
		return codePermissionDenied
	case http.StatusNotFound:
		return codeNotFound
	case http.StatusConflict:
		return codeAborted
	case http.StatusTooManyRequests:
		return codeResourceExhausted
	case http.StatusNotImplemented:
		return codeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return codeUnavailable
	case http.StatusGatewayTimeout:
		return codeDeadlineExceeded
	default:
		return codeInternal
	}
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, httpStatus(e.code), ErrorBody{Error: e.msg, Code: e.code, Message: e.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: err.Error(), Code: codeInternal, Message: err.Error()})
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Grpc-Metadata-Content-Type", "application/grpc")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// reply writes a unary answer, honouring Argo CD's ?fields= filter.
func reply(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeAPIError(w, errf(codeInternal, "marshal response: %v", err))
		return
	}
	if fields, exclude, ok := fieldsParam(r); ok {
		if fb, err := filterFields(b, fields, exclude); err == nil {
			b = fb
		}
	}
	writeRaw(w, http.StatusOK, b)
}

// decodeBody decodes a JSON request body like the gateway: an empty body is
// the zero message, malformed JSON is InvalidArgument.
func decodeBody(r *http.Request, v any) *apiError {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return errf(codeInvalidArgument, "%v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errf(codeInvalidArgument, "%v", err)
	}
	return nil
}

// ---- authentication ----

func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	tok := ""
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		cand := strings.TrimPrefix(h, "Bearer ")
		s.mu.Lock()
		if s.revoked[cand] {
			s.mu.Unlock()
			return "", s.revokedErr(cand)
		}
		for st, user := range s.staticTokens {
			if constantTimeEqual(st, cand) {
				s.mu.Unlock()
				setUser(r, user)
				return user, nil
			}
		}
		s.mu.Unlock()
		if looksLikeJWT(cand) {
			tok = cand
		}
	}
	if tok == "" {
		if c, err := r.Cookie("argocd.token"); err == nil && looksLikeJWT(c.Value) {
			tok = c.Value
		}
	}
	if tok == "" {
		return "", &apiError{code: codeUnauthenticated, msg: errNoSession.Error()}
	}
	user, err := s.signer.verify(tok, s.now())
	if err != nil {
		return "", errf(codeUnauthenticated, "invalid session: %v", err)
	}
	setUser(r, user)
	return user, nil
}

func setUser(r *http.Request, user string) {
	if info, ok := r.Context().Value(userKey).(*requestInfo); ok {
		info.user = user
	}
}

// requestUser is the user authenticate found for r ("" before it ran).
func requestUser(r *http.Request) string {
	if info, ok := r.Context().Value(userKey).(*requestInfo); ok {
		return info.user
	}
	return ""
}

// ---- version and session ----

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request, _ []string) {
	// The version service skips the auth interceptor; without a valid token
	// it answers with the version only.
	if _, err := s.authenticate(r); err != nil {
		reply(w, r, VersionMessage{Version: Version})
		return
	}
	reply(w, r, VersionMessage{
		Version: Version, BuildDate: "2025-12-17T14:00:45Z", GitCommit: "argocdtest", GitTag: "v3.2.11",
		GitTreeState: "clean", GoVersion: "go1.25", Compiler: "gc", Platform: "linux/amd64",
		KustomizeVersion: "v5.7.0", HelmVersion: "v3.18.4", KubectlVersion: "v0.34.0", JsonnetVersion: "v0.21.0",
	})
}

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request, _ []string) {
	var req struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Token    string `json:"token"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeAPIError(w, e)
		return
	}
	if req.Token != "" {
		user, err := s.signer.verify(req.Token, s.now())
		if err != nil {
			writeAPIError(w, errf(codeUnauthenticated, "invalid session: %v", err))
			return
		}
		req.Username = user
	} else {
		if req.Username == "" || req.Password == "" {
			writeAPIError(w, errf(codeUnauthenticated, "no credentials supplied"))
			return
		}
		s.mu.Lock()
		pw, ok := s.accounts[req.Username]
		s.mu.Unlock()
		if !ok || !constantTimeEqual(pw, req.Password) {
			writeAPIError(w, errf(codeUnauthenticated, "Invalid username or password"))
			return
		}
	}
	tok, err := s.signer.mint(req.Username, s.now(), 24*time.Hour)
	if err != nil {
		writeAPIError(w, errf(codeInternal, "failed to create session: %v", err))
		return
	}
	setUser(r, req.Username)
	http.SetCookie(w, &http.Cookie{Name: "argocd.token", Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	reply(w, r, map[string]string{"token": tok})
}

// The session service authenticates but ignores failures (it is what you
// call when you have no credentials yet).
func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request, _ []string) {
	_, _ = s.authenticate(r)
	http.SetCookie(w, &http.Cookie{Name: "argocd.token", Value: "", Path: "/", MaxAge: -1})
	reply(w, r, map[string]string{"token": ""})
}

func (s *Server) handleUserInfo(w http.ResponseWriter, r *http.Request, _ []string) {
	user, e := s.authenticate(r)
	if e != nil {
		reply(w, r, map[string]any{"loggedIn": false})
		return
	}
	reply(w, r, map[string]any{"loggedIn": true, "username": user, "iss": tokenIssuer})
}

// ---- misc helpers ----

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func firstNonEmpty(vals ...string) string { return cmp.Or(vals...) }

var errClosed = errors.New("argocdtest: server closed")
