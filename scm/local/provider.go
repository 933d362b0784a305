// Package local is prflow's driver for a plain git remote without a pull-request service: a
// bare repository on disk, or any smart-HTTP/SSH remote (used by `prflow dev` and by teams
// without a forge).
//
// A pull request is a record kept in the remote itself, so every worker on every machine sees
// the same PRs: refs/prflow/pulls/<n> points to a commit whose tree holds pr.json, and each
// change to the PR is a new commit on top of the previous one, pushed with a guarded
// (compare-and-swap, never forced) update. Numbers are allocated by creating the ref, which
// fails if another worker took the number first. While a PR is open,
// refs/prflow/open/<hash of base and head> also exists, so two workers cannot open two PRs for
// the same branches. A merge is a real merge commit (or squash commit, or rebased commits)
// made by prflow and pushed together with the record update in one atomic push, so a PR is
// never merged twice and never recorded as merged without its commit. Mergeability comes from
// a trial three-way merge. Comments are kept in the PR record; commit statuses in
// refs/prflow/statuses/<sha>.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
	"github.com/prflow/prflow/scm/transport"
)

// Name is the driver name in connector configuration.
const Name = "local"

// Provider implements scm.Provider and scm.Checker for plain git remotes.
type Provider struct {
	engine   *gitengine.Engine
	base     string
	repoURL  func(scm.Repo) (string, error)
	identity scm.Signature
	login    string
	attempts int
	delay    time.Duration
	log      *slog.Logger
	now      func() time.Time
	// ancestry keeps IsAncestor answers (immutable for a pair of SHAs).
	ancestry scm.AncestryCache
}

var (
	_ scm.Provider = (*Provider)(nil)
	_ scm.Checker  = (*Provider)(nil)
)

// Option configures a Provider.
type Option func(*Provider)

// WithEngine sets the git engine (auth, TLS, signing, scratch dir). Default: gitengine.New().
func WithEngine(e *gitengine.Engine) Option { return func(p *Provider) { p.engine = e } }

// WithIdentity sets who prflow is in merge commits and PR records (default "prflow").
func WithIdentity(sig scm.Signature) Option { return func(p *Provider) { p.identity = sig } }

// WithLogin sets the login reported by Whoami (default: the identity's name).
func WithLogin(login string) Option { return func(p *Provider) { p.login = login } }

// WithRepoURL overrides how a repo name becomes a remote URL (default: see New).
func WithRepoURL(fn func(scm.Repo) (string, error)) Option {
	return func(p *Provider) { p.repoURL = fn }
}

// WithRetry bounds the retries of record updates and merges that lost a race (default: no
// fixed cap, retry while the context lives; backoff from 20ms, jittered, capped at maxDelay).
func WithRetry(attempts int, base time.Duration) Option {
	return func(p *Provider) {
		if attempts > 0 {
			p.attempts = attempts
		}
		if base > 0 {
			p.delay = base
		}
	}
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(p *Provider) {
		if l != nil {
			p.log = l
		}
	}
}

// WithClock sets the time source for record timestamps (tests).
func WithClock(now func() time.Time) Option { return func(p *Provider) { p.now = now } }

// New returns a Provider for the repositories under base: an http(s):// or ssh:// URL, a
// file:// URL, or a directory. Repo "team/release" is the remote base + "/team/release.git"
// ("team/release.git" is used as given).
func New(base string, opts ...Option) (*Provider, error) {
	base = strings.TrimRight(strings.TrimSpace(base), "/")
	if base == "" {
		return nil, errors.New("local: base URL or directory is required")
	}
	if !strings.Contains(base, "://") {
		abs, err := filepath.Abs(base)
		if err != nil {
			return nil, fmt.Errorf("local: base directory %q: %w", base, err)
		}
		base = abs
	}
	p := &Provider{
		base:     base,
		identity: scm.Signature{Name: "prflow", Email: "prflow@localhost"},
		attempts: 0, // unbounded: a busy release repo must not fail a run, the context bounds it
		delay:    20 * time.Millisecond,
		log:      slog.New(slog.DiscardHandler),
		now:      time.Now,
	}
	p.repoURL = p.defaultRepoURL
	for _, o := range opts {
		o(p)
	}
	if p.engine == nil {
		p.engine = gitengine.New()
	}
	if p.identity.Name == "" || p.identity.Email == "" {
		return nil, errors.New("local: identity needs a name and an email")
	}
	if p.login == "" {
		p.login = p.identity.Name
	}
	return p, nil
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

func (p *Provider) defaultRepoURL(repo scm.Repo) (string, error) {
	r := string(repo)
	if r == "" || strings.HasPrefix(r, "/") || strings.HasSuffix(r, "/") || strings.Contains(r, "\\") {
		return "", fmt.Errorf("invalid repo name %q", r)
	}
	for _, seg := range strings.Split(r, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, "-") {
			return "", fmt.Errorf("invalid repo name %q", r)
		}
	}
	if !strings.HasSuffix(r, ".git") {
		r += ".git"
	}
	if strings.Contains(p.base, "://") {
		return p.base + "/" + r, nil
	}
	return filepath.Join(p.base, filepath.FromSlash(r)), nil
}

// fail wraps err as the *scm.Error every driver returns.
func (p *Provider) fail(repo scm.Repo, op string, err error) error {
	if err == nil {
		return nil
	}
	var se *scm.Error
	if errors.As(err, &se) && se.Provider == Name {
		return err
	}
	return &scm.Error{Provider: Name, Op: op, Repo: repo, Err: err}
}

// open starts a scratch workspace for repo.
func (p *Provider) open(ctx context.Context, repo scm.Repo) (*gitengine.Workspace, error) {
	url, err := p.repoURL(repo)
	if err != nil {
		return nil, err
	}
	return p.engine.Open(ctx, url)
}

// openRemote opens a scratch workspace for repo and lists the remote's refs; the caller
// closes the workspace.
func (p *Provider) openRemote(ctx context.Context, repo scm.Repo) (*gitengine.Workspace, map[string]string, error) {
	w, err := p.open(ctx, repo)
	if err != nil {
		return nil, nil, err
	}
	refs, err := w.ListRemote(ctx)
	if err != nil {
		w.Close()
		return nil, nil, err
	}
	return w, refs, nil
}

// openRecord is openRemote that also loads PR n's record.
func (p *Provider) openRecord(ctx context.Context, repo scm.Repo, n int) (*gitengine.Workspace, map[string]string, stored, error) {
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return nil, nil, stored{}, err
	}
	st, err := p.loadRecord(ctx, w, refs, n)
	if err != nil {
		w.Close()
		return nil, nil, stored{}, err
	}
	return w, refs, st, nil
}

// webURL is what a PR's URL says: the remote without credentials plus #pr/<n>.
func (p *Provider) webURL(repo scm.Repo, n int) string {
	url, err := p.repoURL(repo)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s#pr/%d", transport.RedactURL(url), n)
}

// Whoami reports the configured identity; a plain git remote has no user accounts.
func (p *Provider) Whoami(context.Context) (scm.Identity, error) {
	return scm.Identity{Login: p.login, Name: p.identity.Name, Email: p.identity.Email}, nil
}

// RepoExists checks that the remote answers with the configured credentials.
func (p *Provider) RepoExists(ctx context.Context, repo scm.Repo) error {
	w, err := p.open(ctx, repo)
	if err != nil {
		return p.fail(repo, "check repository", err)
	}
	defer w.Close()
	_, err = w.ListRemote(ctx)
	return p.fail(repo, "check repository", err)
}

// maxDelay caps the wait between retries so that a worker that lost many races stays in the
// queue instead of sleeping for seconds while others take the ref.
const maxDelay = time.Second

// retry runs op again after a lost race (an error matching gitengine.ErrPushRejected), with
// jittered capped backoff, until it succeeds, fails otherwise, the context ends or (when set)
// p.attempts are spent.
func (p *Provider) retry(ctx context.Context, op func() error) error {
	var err error
	for attempt := 1; p.attempts <= 0 || attempt <= p.attempts; attempt++ {
		if err = op(); err == nil || !errors.Is(err, gitengine.ErrPushRejected) {
			return err
		}
		d := scm.Backoff(p.delay, maxDelay, attempt) // jittered: spreads racing workers
		p.log.DebugContext(ctx, "local: lost a race, retrying", "attempt", attempt, "wait", d)
		if serr := scm.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("%w (last error: %w)", serr, err)
		}
	}
	return fmt.Errorf("gave up after %d attempts: %w", p.attempts, err)
}
