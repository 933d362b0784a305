// Package gitengine writes to Git remotes with go-git when a forge API cannot: it fetches only
// what an operation needs (Depth 1, single ref, no checkout) into a scratch bare repository on
// disk, builds trees and commits directly in the object store, and pushes with guarded,
// never-forced ref updates. A push that loses a race is re-done on the new head: the edits are
// re-applied, not rebased.
//
// Every operation works in its own temporary directory that is removed when the operation
// returns, whatever the outcome. Drivers use Engine.Commit and Engine.Revert; the local driver
// uses Workspace for lower-level work (trial merges, atomic multi-ref pushes).
package gitengine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/prflow/prflow/scm"
)

// Engine holds how to reach and write to remotes. It is safe for concurrent use; every call works
// in its own scratch directory.
type Engine struct {
	auth        transport.AuthMethod
	secrets     []string
	caBundle    []byte
	insecureTLS bool
	tempDir     string
	signer      git.Signer
	committer   scm.Signature
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	log         *slog.Logger
	now         func() time.Time
}

// Option configures an Engine.
type Option func(*Engine)

// WithBasicAuth authenticates over HTTP(S) with a username and a token. The username depends on
// the forge: any non-empty name for GitHub tokens (x-access-token), "oauth2" for GitLab,
// "x-token-auth" for Bitbucket access tokens. The token is also redacted from every error.
func WithBasicAuth(username, token string) Option {
	return func(e *Engine) {
		if token == "" {
			return
		}
		if username == "" {
			username = "x-access-token"
		}
		e.auth = &githttp.BasicAuth{Username: username, Password: token}
		e.secrets = append(e.secrets, token)
	}
}

// TokenUsername is the basic-auth user name that goes with an access token for git over HTTPS
// on each forge: GitHub ignores it (x-access-token by convention), GitLab expects "oauth2",
// Bitbucket access tokens "x-token-auth". Other providers get "git".
func TokenUsername(provider string) string {
	switch provider {
	case "github":
		return "x-access-token"
	case "gitlab":
		return "oauth2"
	case "bitbucket":
		return "x-token-auth"
	}
	return "git"
}

// WithAuth sets any go-git auth method (for example SSH keys). secrets are redacted from errors.
func WithAuth(auth transport.AuthMethod, secrets ...string) Option {
	return func(e *Engine) {
		e.auth = auth
		e.secrets = append(e.secrets, secrets...)
	}
}

// WithTLS adds a PEM CA bundle to the system pool and/or disables certificate checks.
func WithTLS(caBundle []byte, insecureSkipVerify bool) Option {
	return func(e *Engine) {
		e.caBundle = caBundle
		e.insecureTLS = insecureSkipVerify
	}
}

// WithTempDir sets the parent directory of the scratch repositories (default os.TempDir()).
func WithTempDir(dir string) Option { return func(e *Engine) { e.tempDir = dir } }

// WithSigner signs every commit the engine writes (see OpenPGPSigner and SSHSigner).
func WithSigner(s git.Signer) Option { return func(e *Engine) { e.signer = s } }

// WithOpenPGPKey signs every commit with an OpenPGP entity whose private key is decrypted.
func WithOpenPGPKey(key *openpgp.Entity) Option {
	return func(e *Engine) { e.signer = OpenPGPSigner(key) }
}

// WithCommitter sets the committer identity used when a request names none. The author of a
// request is used when neither is set.
func WithCommitter(sig scm.Signature) Option { return func(e *Engine) { e.committer = sig } }

// WithRetry bounds re-tries of rejected pushes: at most attempts tries in total, sleeping a
// jittered exponential backoff that starts at base and is capped at max.
func WithRetry(attempts int, base, max time.Duration) Option {
	return func(e *Engine) {
		if attempts > 0 {
			e.maxAttempts = attempts
		}
		if base > 0 {
			e.baseDelay = base
		}
		if max > 0 {
			e.maxDelay = max
		}
	}
}

// WithLogger sets the logger for retries (default: discard).
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithClock sets the time source for commit timestamps (tests).
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.now = now } }

// New returns an Engine.
func New(opts ...Option) *Engine {
	e := &Engine{
		maxAttempts: 10,
		baseDelay:   50 * time.Millisecond,
		maxDelay:    2 * time.Second,
		log:         slog.New(slog.DiscardHandler),
		now:         time.Now,
	}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Open creates a scratch workspace bound to the remote at url (HTTP(S) URL, ssh URL or local
// path of a repository). The caller must Close it; Close removes the directory.
func (e *Engine) Open(ctx context.Context, url string) (*Workspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if url == "" {
		return nil, fmt.Errorf("gitengine: open: empty remote URL")
	}
	dir, err := os.MkdirTemp(e.tempDir, "prflow-git-")
	if err != nil {
		return nil, fmt.Errorf("gitengine: create scratch dir: %w", err)
	}
	w, err := newWorkspace(e, dir, url)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return w, nil
}

// ListRefs returns the remote's refs (full name → commit SHA), like git ls-remote. An empty
// repository gives an empty map; a missing repository an error matching scm.ErrNotFound.
func (e *Engine) ListRefs(ctx context.Context, url string) (map[string]string, error) {
	w, err := e.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return w.ListRemote(ctx)
}

func (e *Engine) committerFor(author scm.Signature, committer scm.Signature) scm.Signature {
	if committer.Name != "" || committer.Email != "" {
		return committer
	}
	if e.committer.Name != "" || e.committer.Email != "" {
		return e.committer
	}
	return author
}
