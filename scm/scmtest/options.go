package scmtest

import (
	"log/slog"
	"strings"
	"sync"
)

// DefaultToken is accepted by every server built without WithToken, for user DefaultUser.
const (
	DefaultToken = "scmtest-token"
	DefaultUser  = "scmtest-bot"
)

// DefaultBackend is Debian's git smart-HTTP CGI program.
const DefaultBackend = "/usr/lib/git-core/git-http-backend"

// Option configures a GitServer or a fake forge; options that do not apply are ignored.
type Option func(*settings)

type tokenSpec struct {
	token, user string
	repos       []string
}

type settings struct {
	tokens        []tokenSpec
	logger        *slog.Logger
	backend       string
	defaultBranch string
	git           *GitServer
	webBase       string
	unknownPolls  int
	rateLimit     int
	webhookURL    string
	webhookSecret string
	committer     Signature
}

func newSettings(opts []Option) *settings {
	s := &settings{
		backend:       DefaultBackend,
		defaultBranch: "main",
		unknownPolls:  1,
		logger:        slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if len(s.tokens) == 0 {
		s.tokens = []tokenSpec{{token: DefaultToken, user: DefaultUser}}
	}
	return s
}

// WithToken accepts token for user; with repos ("owner/name") the token sees only those repos
// and gets 404 for the others, as forges answer for repos a token cannot see.
// The first WithToken replaces DefaultToken.
func WithToken(token, user string, repos ...string) Option {
	return func(s *settings) { s.tokens = append(s.tokens, tokenSpec{token: token, user: user, repos: repos}) }
}

// WithLogger sends the server's debug logs (requests, git backend stderr) to l.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) {
		if l != nil {
			s.logger = l
		}
	}
}

// WithBackend overrides the path of git-http-backend.
func WithBackend(path string) Option { return func(s *settings) { s.backend = path } }

// WithDefaultBranch names the branch CreateRepo commits to (default "main").
func WithDefaultBranch(b string) Option { return func(s *settings) { s.defaultBranch = b } }

// WithGitServer makes a fake forge serve its repos from gs instead of creating its own.
func WithGitServer(gs *GitServer) Option { return func(s *settings) { s.git = gs } }

// WithWebBase sets the base of html_url/web_url/links.html (default: the fake's own URL).
func WithWebBase(u string) Option { return func(s *settings) { s.webBase = strings.TrimRight(u, "/") } }

// WithMergeabilityPolls sets how many reads of a PR answer "unknown" (GitHub mergeable:null,
// GitLab detailed_merge_status "checking") after its head or base changed; default 1, 0 = never.
func WithMergeabilityPolls(n int) Option {
	return func(s *settings) {
		if n >= 0 {
			s.unknownPolls = n
		}
	}
}

// WithRateLimit sets the limit reported in rate-limit headers (GitHub per hour, GitLab per minute,
// Bitbucket per hour). Limits are reported, not enforced: use RateLimitNext to answer with limits.
func WithRateLimit(limit int) Option { return func(s *settings) { s.rateLimit = limit } }

// WithWebhook makes the fake deliver signed webhooks for its events to url.
func WithWebhook(url, secret string) Option {
	return func(s *settings) { s.webhookURL, s.webhookSecret = url, secret }
}

// WithCommitter sets the identity the fake uses for commits it creates (merges, API commits).
func WithCommitter(name, email string) Option {
	return func(s *settings) { s.committer = Signature{Name: name, Email: email} }
}

// tokenInfo is what a token grants.
type tokenInfo struct {
	user  string
	repos map[string]bool // nil: every repo
}

func (t tokenInfo) canSee(repo string) bool { return t.repos == nil || t.repos[repo] }

// tokenStore holds the accepted tokens; shared by a GitServer and the forges on top of it.
type tokenStore struct {
	mu sync.RWMutex
	m  map[string]tokenInfo
}

func newTokenStore() *tokenStore { return &tokenStore{m: map[string]tokenInfo{}} }

func (s *tokenStore) add(token, user string, repos []string) {
	ti := tokenInfo{user: user}
	if len(repos) > 0 {
		ti.repos = map[string]bool{}
		for _, r := range repos {
			ti.repos[strings.Trim(r, "/")] = true
		}
	}
	s.mu.Lock()
	s.m[token] = ti
	s.mu.Unlock()
}

func (s *tokenStore) lookup(token string) (tokenInfo, bool) {
	if token == "" {
		return tokenInfo{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ti, ok := s.m[token]
	return ti, ok
}
