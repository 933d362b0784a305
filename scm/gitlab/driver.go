// Package gitlab is prflow's GitLab (SaaS and self-managed) driver, built on
// gitlab.com/gitlab-org/api/client-go.
//
// Commits use the multi-file commit-actions API, merges the accept API with the head-SHA guard,
// and reverts GitLab's native revert onto a fresh branch. The client library's own retry loop
// (which would replay non-idempotent POSTs) and its self-configuring rate limiter are switched
// off: retries and rate limits belong to the HTTP client passed in (scm/transport).
package gitlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go"
	"golang.org/x/time/rate"

	"github.com/prflow/prflow/scm"
)

// Name is the driver name used in connector configuration.
const Name = "gitlab"

// Driver talks to one GitLab instance with one identity. It is safe for concurrent use.
type Driver struct {
	client  *gl.Client
	secrets []string
	log     *slog.Logger
	metas   metaCache // files seen at commits, for commit actions
	// ancestry keeps IsAncestor answers (immutable for a pair of SHAs).
	ancestry scm.AncestryCache
}

var _ scm.Forge = (*Driver)(nil)

type config struct {
	scm.ClientOptions
	baseURL string
	token   string
	oauth   bool
}

// Option configures New.
type Option func(*config)

// WithBaseURL points the driver at a self-managed instance, e.g. "https://gitlab.example.com"
// (the /api/v4 suffix is added when missing). Empty means gitlab.com.
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = u } }

// WithToken authenticates with a personal, group or project access token (PRIVATE-TOKEN).
func WithToken(token string) Option { return func(c *config) { c.token, c.oauth = token, false } }

// WithOAuthToken authenticates with an OAuth2 access token (Authorization: Bearer).
func WithOAuthToken(token string) Option { return func(c *config) { c.token, c.oauth = token, true } }

// WithHTTPClient sets scm.ClientOptions.HTTPClient (default: one with scm.DefaultTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.HTTPClient = hc } }

// WithLogger sets scm.ClientOptions.Logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// New builds a driver; a token is required.
func New(opts ...Option) (*Driver, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.token == "" {
		return nil, errors.New("gitlab: no token configured")
	}
	hc := c.Client()
	d := &Driver{log: c.Log(), secrets: []string{c.token}}
	copts := []gl.ClientOptionFunc{
		gl.WithHTTPClient(hc),
		// A replayed POST (commit, accept, revert) is not idempotent; the transport retries
		// only what is safe.
		gl.WithoutRetries(),
		// The transport owns rate limiting; the library's auto-limiter would throttle twice.
		gl.WithCustomLimiter(rate.NewLimiter(rate.Inf, 0)),
		gl.WithURLWarningLogger(d.log),
	}
	if c.baseURL != "" {
		copts = append(copts, gl.WithBaseURL(c.baseURL))
	}
	var err error
	if c.oauth {
		d.client, err = gl.NewOAuthClient(c.token, copts...)
	} else {
		d.client, err = gl.NewClient(c.token, copts...)
	}
	if err != nil {
		return nil, fmt.Errorf("gitlab: base URL %q: %w", c.baseURL, d.redact(err))
	}
	return d, nil
}

// Name returns "gitlab".
func (d *Driver) Name() string { return Name }

// BaseURL is the REST API root the driver calls.
func (d *Driver) BaseURL() string { return d.client.BaseURL().String() }

// Whoami returns the token's user.
func (d *Driver) Whoami(ctx context.Context) (scm.Identity, error) {
	u, resp, err := d.client.Users.CurrentUser(gl.WithContext(ctx))
	if err != nil {
		return scm.Identity{}, d.wrap("get current user", "", resp, err)
	}
	email := u.Email
	if email == "" {
		email = u.PublicEmail
	}
	return scm.Identity{Login: u.Username, Name: u.Name, Email: email}, nil
}

// RepoExists fails with ErrNotFound when the project does not exist or is not visible.
func (d *Driver) RepoExists(ctx context.Context, repo scm.Repo) error {
	pid, err := projectID(repo)
	if err != nil {
		return d.wrap("get project", repo, nil, err)
	}
	_, resp, err := d.client.Projects.GetProject(pid, nil, gl.WithContext(ctx))
	return d.wrap("get project", repo, resp, err)
}

// projectID validates "group/sub/project" (or a numeric id); client-go escapes it. Its error
// is a bad name, else the first failed check of the call's arguments.
func projectID(repo scm.Repo, checks ...error) (string, error) {
	s := string(repo)
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return s, scm.FirstError(checks...)
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 {
		return "", fmt.Errorf("invalid project path %q: want group/project", s)
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, " \t\n?#%") {
			return "", fmt.Errorf("invalid project path %q: want group/project", s)
		}
	}
	return s, scm.FirstError(checks...)
}

func (d *Driver) redact(err error) error { return scm.RedactError(err, d.secrets...) }

// wrap turns a client-go or transport error into an *scm.Error naming the call and repo.
func (d *Driver) wrap(op string, repo scm.Repo, resp *gl.Response, err error) error {
	if err == nil || scm.Wrapped(err) {
		return err
	}
	e := &scm.Error{Provider: Name, Op: op, Repo: repo}
	var hr *http.Response
	if resp != nil && resp.Response != nil {
		hr = resp.Response
		e.Status = hr.StatusCode
	}
	var er *gl.ErrorResponse
	switch {
	case errors.Is(err, gl.ErrNotFound):
		e.Status = http.StatusNotFound
		e.Err = fmt.Errorf("%w: 404 Not Found", scm.ErrNotFound)
	case errors.As(err, &er) && er.Response != nil:
		e.Status = er.Response.StatusCode
		e.Err = statusError(er.Response, d.message(er))
	default:
		e.Err = d.redact(err)
	}
	d.log.Debug("gitlab call failed", "op", op, "repo", string(repo), "status", e.Status, "err", e.Err.Error())
	return e
}

// message is GitLab's error text without the request URL, with secrets removed (a proxy may
// echo a token back).
func (d *Driver) message(er *gl.ErrorResponse) string {
	if er.Message != "" {
		return d.redactString(er.Message)
	}
	return http.StatusText(er.Response.StatusCode)
}

func (d *Driver) redactString(s string) string { return scm.RedactString(s, d.secrets...) }

// statusError maps an HTTP status to the scm sentinel it means; GitLab names its rate-limit
// reset time in RateLimit-Reset.
func statusError(resp *http.Response, msg string) error {
	return scm.HTTPError(resp.StatusCode, resp.Header, msg, "RateLimit-Reset")
}

// plainError wraps an error that did not come from client-go.
func (d *Driver) plainError(op string, repo scm.Repo, err error) error {
	return scm.PlainError(Name, op, repo, err, d.secrets...)
}

func ptr[T any](v T) *T { return &v }
