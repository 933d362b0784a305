// Package bitbucket is prflow's Bitbucket Cloud driver, built on ktrysmt/go-bitbucket.
//
// go-bitbucket builds its requests without the caller's context, so the driver gives every
// call its own short-lived library client whose transport attaches the call's context:
// cancellation and deadlines work, and the shared HTTP client (scm/transport) still does rate
// limiting and retries. Two requests go straight to the REST API with that same client because
// the library cannot express them: POST /src with the "parents" guard, and listing pull
// requests in several states at once.
package bitbucket

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	bb "github.com/ktrysmt/go-bitbucket"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// Name is the driver name used in connector configuration.
const Name = "bitbucket"

// DefaultBaseURL is Bitbucket Cloud's REST API root.
const DefaultBaseURL = "https://api.bitbucket.org/2.0"

// pageLen is the page size asked for on every paginated call (Bitbucket's maximum for
// pull requests is 50; the library default of 10 multiplies requests).
const pageLen = 50

// Driver talks to Bitbucket Cloud with one identity. It is safe for concurrent use.
type Driver struct {
	baseURL  string
	bearer   string
	user     string
	password string
	hc       *http.Client
	log      *slog.Logger
	// ancestry keeps IsAncestor answers (immutable for a pair of SHAs).
	ancestry scm.AncestryCache
}

var _ scm.Forge = (*Driver)(nil)

type config struct {
	scm.ClientOptions
	baseURL  string
	bearer   string
	user     string
	password string
}

// Option configures New.
type Option func(*config)

// WithBaseURL sets the REST API root (default DefaultBaseURL), e.g. for a test server.
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = u } }

// WithToken authenticates with a repository, project or workspace access token (Bearer).
func WithToken(token string) Option { return func(c *config) { c.bearer = token } }

// WithBasicAuth authenticates with an Atlassian account email and API token (or a legacy
// username and app password).
func WithBasicAuth(user, secret string) Option {
	return func(c *config) { c.user, c.password = user, secret }
}

// WithHTTPClient sets scm.ClientOptions.HTTPClient (default: one with scm.DefaultTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.HTTPClient = hc } }

// WithLogger sets scm.ClientOptions.Logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// New builds a driver. One of WithToken and WithBasicAuth is required.
func New(opts ...Option) (*Driver, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.bearer == "" && c.password == "":
		return nil, errors.New("bitbucket: no credentials: set an access token or an email and API token")
	case c.bearer != "" && c.password != "":
		return nil, errors.New("bitbucket: both an access token and basic auth are set; choose one")
	case c.password != "" && c.user == "":
		return nil, errors.New("bitbucket: basic auth needs the account email or username")
	}
	base := strings.TrimSuffix(c.baseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bitbucket: base URL %q is not an http(s) URL", c.baseURL)
	}
	d := &Driver{baseURL: base, bearer: c.bearer, user: c.user, password: c.password, hc: c.Client(), log: c.Log()}
	return d, nil
}

// Name returns "bitbucket".
func (d *Driver) Name() string { return Name }

// BaseURL is the REST API root the driver calls.
func (d *Driver) BaseURL() string { return d.baseURL }

// ctxTransport attaches a call's context to the library's context-less requests and keeps the
// last response's headers (Retry-After) for error mapping.
type ctxTransport struct {
	ctx    context.Context
	base   http.RoundTripper
	header http.Header
}

func (t *ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r.WithContext(t.ctx))
	if resp != nil {
		t.header = resp.Header
	}
	return resp, err
}

// call is one API operation: a library client bound to the operation's context.
type call struct {
	c  *bb.Client
	rt *ctxTransport
}

// call binds a library client to ctx; guarded marks its POSTs as safe to replay.
func (d *Driver) call(ctx context.Context, guarded bool) (*call, error) {
	var c *bb.Client
	var err error
	if d.bearer != "" {
		c, err = bb.NewOAuthbearerTokenWithBaseUrlStr(d.bearer, d.baseURL)
	} else {
		c, err = bb.NewBasicAuthWithBaseUrlStr(d.user, d.password, d.baseURL)
	}
	if err != nil {
		return nil, d.redact(err)
	}
	base := d.hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if guarded {
		ctx = transport.Guarded(ctx)
	}
	rt := &ctxTransport{ctx: ctx, base: base}
	c.HttpClient = &http.Client{Transport: rt, Timeout: d.hc.Timeout, CheckRedirect: d.hc.CheckRedirect, Jar: d.hc.Jar}
	c.Pagelen = pageLen
	return &call{c: c, rt: rt}, nil
}

// statusError is a non-2xx answer to a request the driver sent itself.
type statusError struct {
	code   int
	body   []byte
	header http.Header
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

// send makes a request the library cannot express, with the driver's credentials and client.
func (d *Driver) send(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string) (*http.Response, []byte, error) {
	u := d.baseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	if d.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+d.bearer)
	} else {
		req.SetBasicAuth(d.user, d.password)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return resp, nil, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, data, &statusError{code: resp.StatusCode, body: data, header: resp.Header}
	}
	return resp, data, nil
}

// Whoami returns the authenticated account (GET /user).
func (d *Driver) Whoami(ctx context.Context) (scm.Identity, error) {
	const op = "get current user"
	cl, err := d.call(ctx, false)
	if err != nil {
		return scm.Identity{}, d.wrap(op, "", nil, err)
	}
	u, err := cl.c.User.Profile()
	if err != nil {
		return scm.Identity{}, d.wrap(op, "", cl, err)
	}
	login := u.Username
	if login == "" {
		login = u.Nickname
	}
	return scm.Identity{Login: login, Name: u.DisplayName}, nil
}

// RepoExists fails with ErrNotFound when the repository does not exist or is not visible.
func (d *Driver) RepoExists(ctx context.Context, repo scm.Repo) error {
	const op = "get repository"
	ws, slug, cl, err := d.callRepo(ctx, repo, false)
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, err = cl.c.Repositories.Repository.Get(&bb.RepositoryOptions{Owner: ws, RepoSlug: slug})
	return d.wrap(op, repo, cl, err)
}

// callRepo is splitRepo (with checks) and then call: the repo's workspace and slug and a
// client for one call (guarded as call says).
func (d *Driver) callRepo(ctx context.Context, repo scm.Repo, guarded bool, checks ...error) (ws, slug string, cl *call, err error) {
	if ws, slug, err = splitRepo(repo, checks...); err != nil {
		return "", "", nil, err
	}
	cl, err = d.call(ctx, guarded)
	return ws, slug, cl, err
}

// splitRepo parses "workspace/slug"; its error is a bad name, else the first failed check of
// the call's arguments.
func splitRepo(repo scm.Repo, checks ...error) (string, string, error) {
	ws, slug, ok := strings.Cut(string(repo), "/")
	if !ok || ws == "" || slug == "" || strings.Contains(slug, "/") || strings.ContainsAny(string(repo), " \t\n?#%") {
		return "", "", fmt.Errorf("invalid repository name %q: want workspace/slug", string(repo))
	}
	return ws, slug, scm.FirstError(checks...)
}

func (d *Driver) redact(err error) error { return scm.RedactError(err, d.bearer, d.password) }

// plainError wraps an error that did not come from go-bitbucket or the REST API.
func (d *Driver) plainError(op string, repo scm.Repo, err error) error {
	return scm.PlainError(Name, op, repo, err, d.bearer, d.password)
}

// wrap turns a library, driver or transport error into an *scm.Error naming the call and repo.
func (d *Driver) wrap(op string, repo scm.Repo, cl *call, err error) error {
	if err == nil || scm.Wrapped(err) {
		return err
	}
	e := &scm.Error{Provider: Name, Op: op, Repo: repo}
	var ue *bb.UnexpectedResponseStatusError
	var st *statusError
	switch {
	case errors.As(err, &ue):
		var h http.Header
		if cl != nil {
			h = cl.rt.header
		}
		e.Status = ue.StatusCode
		e.Err = statusErr(ue.StatusCode, d.bodyMessage(ue.StatusCode, ue.Body), h)
	case errors.As(err, &st):
		e.Status = st.code
		e.Err = statusErr(st.code, d.bodyMessage(st.code, st.body), st.header)
	default:
		e.Err = d.redact(err)
	}
	d.log.Debug("bitbucket call failed", "op", op, "repo", string(repo), "status", e.Status, "err", e.Err.Error())
	return e
}

// bodyMessage extracts {"error":{"message","detail"}} from an error body.
func (d *Driver) bodyMessage(code int, body []byte) string {
	var eb struct {
		Error struct {
			Message string `json:"message"`
			Detail  any    `json:"detail"`
		} `json:"error"`
	}
	msg := ""
	if json.Unmarshal(body, &eb) == nil && eb.Error.Message != "" {
		msg = eb.Error.Message
		if s, ok := eb.Error.Detail.(string); ok && s != "" {
			msg += ": " + s
		}
	} else if b := strings.TrimSpace(string(body)); b != "" && !strings.HasPrefix(b, "<") {
		if len(b) > 200 {
			b = b[:200] + "…"
		}
		msg = b
	}
	if msg == "" {
		msg = http.StatusText(code)
	}
	return d.redact(errors.New(msg)).Error()
}

// statusErr maps an HTTP status to the scm sentinel it means; Bitbucket says when to retry
// in Retry-After only.
func statusErr(code int, msg string, h http.Header) error { return scm.HTTPError(code, h, msg, "") }

// decode converts the library's untyped JSON (map[string]any) into a typed struct.
func decode(v any, out any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	return dec.Decode(out)
}

// transientError marks an error that a retry of the same call may clear.
type transientError struct{ msg string }

func (e *transientError) Error() string   { return e.msg }
func (e *transientError) Transient() bool { return true }
