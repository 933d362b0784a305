// Package github is prflow's GitHub and GitHub Enterprise driver, built on go-github.
//
// File writes go through the Git Data API (one commit for any number of files, no clone), PRs
// through the REST pulls API with a head-SHA guard on merge, and reverts through the shared
// file-level planner scm.PlanRevert because GitHub's REST API has no revert.
package github

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
)

// Name is the driver name used in connector configuration.
const Name = "github"

// Driver talks to one GitHub or GitHub Enterprise host with one identity. It is safe for
// concurrent use.
type Driver struct {
	client  *gh.Client
	app     *ghinstallation.Transport // nil with token auth
	secrets []string
	log     *slog.Logger
	trees   treeCache // commit SHA → tree SHA of commits seen
	// ancestry keeps IsAncestor answers (immutable for a pair of SHAs).
	ancestry scm.AncestryCache
}

var _ scm.Forge = (*Driver)(nil)

type config struct {
	scm.ClientOptions
	baseURL   string
	uploadURL string
	token     string
	appID     int64
	installID int64
	appKey    []byte
}

// Option configures New.
type Option func(*config)

// WithBaseURL points the driver at GitHub Enterprise Server, e.g. "https://ghe.example.com/"
// or ".../api/v3/"; the upload URL is derived. Empty means api.github.com.
func WithBaseURL(apiURL string) Option { return func(c *config) { c.baseURL = apiURL } }

// WithUploadURL overrides the derived GitHub Enterprise upload URL.
func WithUploadURL(u string) Option { return func(c *config) { c.uploadURL = u } }

// WithToken authenticates with a personal access token (classic or fine-grained).
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithApp authenticates as a GitHub App installation; privateKeyPEM is the App's RSA key.
// Installation tokens are minted and refreshed by ghinstallation.
func WithApp(appID, installationID int64, privateKeyPEM []byte) Option {
	return func(c *config) {
		c.appID, c.installID, c.appKey = appID, installationID, privateKeyPEM
	}
}

// WithHTTPClient sets scm.ClientOptions.HTTPClient (default: one with scm.DefaultTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.HTTPClient = hc } }

// WithLogger sets scm.ClientOptions.Logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// New builds a driver. Exactly one of WithToken and WithApp is required.
func New(opts ...Option) (*Driver, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	hasApp := c.appID != 0 || c.installID != 0 || len(c.appKey) > 0
	switch {
	case c.token == "" && !hasApp:
		return nil, errors.New("github: no credentials: set a token or a GitHub App")
	case c.token != "" && hasApp:
		return nil, errors.New("github: both a token and a GitHub App are set; choose one")
	}
	hc := c.Client()
	d := &Driver{log: c.Log()}
	if hasApp {
		if c.appID == 0 || c.installID == 0 || len(c.appKey) == 0 {
			return nil, errors.New("github: GitHub App auth needs the app id, the installation id and the private key")
		}
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		itr, err := ghinstallation.New(base, c.appID, c.installID, c.appKey)
		if err != nil {
			// The key parser's message never contains the key itself.
			return nil, fmt.Errorf("github: GitHub App %d: %w", c.appID, err)
		}
		if c.baseURL != "" {
			u, err := enterpriseAPI(c.baseURL)
			if err != nil {
				return nil, err
			}
			itr.BaseURL = strings.TrimSuffix(u, "/")
		}
		d.app = itr
		hc = &http.Client{Transport: itr, Timeout: hc.Timeout, Jar: hc.Jar, CheckRedirect: hc.CheckRedirect}
	}
	client := gh.NewClient(hc)
	if c.token != "" {
		client = client.WithAuthToken(c.token)
		d.secrets = append(d.secrets, c.token)
	}
	if c.baseURL != "" && !isDotCom(c.baseURL) {
		upload := c.uploadURL
		if upload == "" {
			upload = c.baseURL
		}
		var err error
		if client, err = client.WithEnterpriseURLs(c.baseURL, upload); err != nil {
			return nil, fmt.Errorf("github: base URL %q: %w", c.baseURL, err)
		}
	}
	d.client = client
	return d, nil
}

// Name returns "github".
func (d *Driver) Name() string { return Name }

// BaseURL is the REST API root the driver calls.
func (d *Driver) BaseURL() string { return d.client.BaseURL.String() }

// Whoami returns the token's user, or the App installation when authenticated as an App
// (installation tokens cannot read /user).
func (d *Driver) Whoami(ctx context.Context) (scm.Identity, error) {
	if d.app != nil {
		if _, err := d.app.Token(ctx); err != nil {
			return scm.Identity{}, d.wrap("mint installation token", "", nil, err)
		}
		login := fmt.Sprintf("app/%d (installation %d)", d.app.AppID(), d.app.InstallationID())
		return scm.Identity{Login: login, Name: login}, nil
	}
	u, resp, err := d.client.Users.Get(ctx, "")
	if err != nil {
		return scm.Identity{}, d.wrap("get authenticated user", "", resp, err)
	}
	return scm.Identity{Login: u.GetLogin(), Name: u.GetName(), Email: u.GetEmail()}, nil
}

// RepoExists fails with ErrNotFound when the repo does not exist or the identity cannot see it.
func (d *Driver) RepoExists(ctx context.Context, repo scm.Repo) error {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return d.wrap("get repository", repo, nil, err)
	}
	_, resp, err := d.client.Repositories.Get(ctx, owner, name)
	if err != nil {
		return d.wrap("get repository", repo, resp, err)
	}
	return nil
}

func isDotCom(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Host == "api.github.com" || p.Host == "github.com")
}

// enterpriseAPI returns the /api/v3/ root of a GitHub Enterprise URL.
func enterpriseAPI(base string) (string, error) {
	c, err := gh.NewClient(nil).WithEnterpriseURLs(base, base)
	if err != nil {
		return "", fmt.Errorf("github: base URL %q: %w", base, err)
	}
	return c.BaseURL.String(), nil
}

// splitRepo parses "owner/name"; its error is a bad name, else the first failed check of
// the call's arguments.
func splitRepo(repo scm.Repo, checks ...error) (string, string, error) {
	owner, name, ok := strings.Cut(string(repo), "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") || strings.ContainsAny(string(repo), " \t\n?#") {
		return "", "", fmt.Errorf("invalid repository name %q: want owner/name", string(repo))
	}
	return owner, name, scm.FirstError(checks...)
}

// ErrBaseBranchModified is GitHub's 405 "Base branch was modified" on merge: the base moved
// while GitHub checked the merge. Retrying the merge shortly succeeds, so it is transient.
var ErrBaseBranchModified = errors.New("base branch was modified")

// transientError marks an error that a retry of the same call may clear even though its HTTP
// status is below 500. Callers detect it with errors.As on interface{ Transient() bool }.
type transientError struct {
	msg  string
	base error
}

func (e *transientError) Error() string        { return e.msg }
func (e *transientError) Transient() bool      { return true }
func (e *transientError) Is(target error) bool { return target == e.base }

func (d *Driver) redact(err error) error { return scm.RedactError(err, d.secrets...) }

// wrap turns any go-github or transport error into an *scm.Error naming the call and repo,
// with the sentinel that callers branch on (ErrNotFound, ErrUnauthorized, ErrConflict,
// ErrRateLimited via *scm.RateLimitError).
func (d *Driver) wrap(op string, repo scm.Repo, resp *gh.Response, err error) error {
	if err == nil || scm.Wrapped(err) {
		return err
	}
	e := &scm.Error{Provider: Name, Op: op, Repo: repo}
	if resp != nil && resp.Response != nil {
		e.Status = resp.StatusCode
	}
	var rl *gh.RateLimitError
	var abuse *gh.AbuseRateLimitError
	var er *gh.ErrorResponse
	var appErr *ghinstallation.HTTPError
	switch {
	case errors.As(err, &rl):
		e.Status = http.StatusForbidden
		e.Err = &scm.RateLimitError{RetryAfter: untilReset(rl.Rate.Reset.Time), Msg: rl.Message}
	case errors.As(err, &abuse):
		if abuse.Response != nil {
			e.Status = abuse.Response.StatusCode
		}
		wait := time.Minute // GitHub's advice when a secondary limit names no delay
		if abuse.RetryAfter != nil {
			wait = *abuse.RetryAfter
		}
		e.Err = &scm.RateLimitError{RetryAfter: wait, Msg: abuse.Message}
	case errors.As(err, &er) && er.Response != nil:
		e.Status = er.Response.StatusCode
		e.Err = statusError(er.Response, d.describe(er))
	case errors.As(err, &appErr) && appErr.Response != nil:
		// The App's installation token could not be minted (bad key, app uninstalled).
		e.Status = appErr.Response.StatusCode
		e.Err = statusError(appErr.Response, d.redactString(appErr.Message))
	default:
		e.Err = d.redact(err)
	}
	d.log.Debug("github call failed", "op", op, "repo", string(repo), "status", e.Status, "err", e.Err.Error())
	return e
}

// statusError maps an HTTP status to the scm sentinel it means (scm.HTTPError); GitHub
// also rate-limits with 403 and Retry-After (secondary limits).
func statusError(resp *http.Response, msg string) error {
	if resp.StatusCode == http.StatusForbidden && resp.Header.Get("Retry-After") != "" {
		return &scm.RateLimitError{RetryAfter: scm.RetryAfter(resp.Header, resetHeader), Msg: msg}
	}
	return scm.HTTPError(resp.StatusCode, resp.Header, msg, resetHeader)
}

// resetHeader is the Unix time GitHub's primary rate limit resets at.
const resetHeader = "X-RateLimit-Reset"

// describe renders GitHub's message plus its per-field errors without the request URL, with
// secrets removed (a proxy may echo a token back).
func (d *Driver) describe(er *gh.ErrorResponse) string {
	msg := er.Message
	if msg == "" {
		msg = http.StatusText(er.Response.StatusCode)
	}
	for _, fe := range er.Errors {
		switch {
		case fe.Message != "":
			msg += "; " + fe.Message
		case fe.Code != "":
			msg += fmt.Sprintf("; %s %s.%s", fe.Code, fe.Resource, fe.Field)
		}
	}
	return d.redactString(msg)
}

func (d *Driver) redactString(s string) string { return scm.RedactString(s, d.secrets...) }

func untilReset(t time.Time) time.Duration {
	if t.IsZero() {
		return time.Minute
	}
	if d := time.Until(t); d > 0 {
		return d
	}
	return 0
}

// Ptr-free helpers keep call sites short.
func str(s string) *string { return &s }
