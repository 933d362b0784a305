package connector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/prflow/prflow/scm"
)

// Set is a loaded connectors file. It is safe for concurrent use.
type Set struct {
	source  string
	configs []Config
	reg     *Registry
	deps    Deps

	mu        sync.Mutex
	providers map[string]scm.Provider
}

// LoadOption configures Load and Parse.
type LoadOption func(*loadSettings)

type loadSettings struct {
	lookup  func(string) (string, bool)
	reg     *Registry
	deps    Deps
	baseDir string
}

// WithLookupEnv replaces os.LookupEnv for env: secrets (tests, or a secrets manager shim).
func WithLookupEnv(fn func(string) (string, bool)) LoadOption {
	return func(s *loadSettings) { s.lookup = fn }
}

// WithRegistry uses r instead of the default driver registry.
func WithRegistry(r *Registry) LoadOption { return func(s *loadSettings) { s.reg = r } }

// WithDeps passes logger, metrics and scratch dir to the drivers.
func WithDeps(d Deps) LoadOption { return func(s *loadSettings) { s.deps = d } }

// WithBaseDir resolves relative file: and caFile paths against dir (Load uses the file's
// directory).
func WithBaseDir(dir string) LoadOption { return func(s *loadSettings) { s.baseDir = dir } }

// Load reads and validates a connectors file and resolves its secrets. Every problem is
// reported, each as a *LoadError naming file:line:column and the field, joined with
// errors.Join.
func Load(path string, opts ...LoadOption) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("connectors file: %w", err)
	}
	opts = append([]LoadOption{WithBaseDir(filepath.Dir(path))}, opts...)
	return Parse(data, path, opts...)
}

// Parse is Load for data already read; source names it in errors.
func Parse(data []byte, source string, opts ...LoadOption) (*Set, error) {
	s := loadSettings{lookup: os.LookupEnv, reg: defaultRegistry}
	for _, o := range opts {
		o(&s)
	}
	p := &parser{baseDir: s.baseDir, lookup: s.lookup}
	configs, err := p.parse(source, data)
	if err != nil {
		return nil, err
	}
	return &Set{source: source, configs: configs, reg: s.reg, deps: s.deps, providers: map[string]scm.Provider{}}, nil
}

// String names the file and connectors, never their settings.
func (s *Set) String() string { return fmt.Sprintf("connectors %s %v", s.source, s.Names()) }

// Names lists the connectors in file order.
func (s *Set) Names() []string {
	out := make([]string, len(s.configs))
	for i, c := range s.configs {
		out[i] = c.Name
	}
	return out
}

// Config returns a connector's configuration.
func (s *Set) Config(name string) (Config, bool) {
	for _, c := range s.configs {
		if c.Name == name {
			return c, true
		}
	}
	return Config{}, false
}

// Secrets lists every credential value, for masking logs and step output.
func (s *Set) Secrets() []string {
	var out []string
	for _, c := range s.configs {
		out = append(out, c.Secrets()...)
	}
	return out
}

// ErrUnknownConnector is returned for a connector name the file does not define.
var ErrUnknownConnector = errors.New("unknown connector")

// Provider returns the connector's provider, building it on first use. A driver that is not
// linked into the binary is an error naming the registered ones.
func (s *Set) Provider(ctx context.Context, name string) (scm.Provider, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, ok := s.Config(name)
	if !ok {
		return nil, fmt.Errorf("connector %q: %w (defined in %s: %v)", name, ErrUnknownConnector, s.source, s.Names())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.providers[name]; ok {
		return p, nil
	}
	f, ok := s.reg.Lookup(c.Provider)
	if !ok {
		return nil, fmt.Errorf("connector %q (%s): provider %q is not available in this binary (have %v)", name, c.Source, c.Provider, s.reg.Providers())
	}
	p, err := f(c, s.deps)
	if err != nil {
		return nil, fmt.Errorf("connector %q (%s): %w", name, c.Source, err)
	}
	s.providers[name] = p
	return p, nil
}

// CheckResult is what `prflow connectors check` prints for one connector.
type CheckResult struct {
	Connector string
	Provider  string
	Identity  scm.Identity // who the credentials are, when Err is nil
	Err       error        // building the provider or authenticating failed
	Repos     []RepoCheck
}

// RepoCheck says whether one repository is visible with the connector's credentials.
type RepoCheck struct {
	Repo scm.Repo
	Err  error
}

// OK reports whether authentication and every repo check passed.
func (r CheckResult) OK() bool {
	if r.Err != nil {
		return false
	}
	for _, rc := range r.Repos {
		if rc.Err != nil {
			return false
		}
	}
	return true
}

// Check verifies every connector (authentication via scm.Checker.Whoami) and, for those named
// in repos, that each repo is visible. Connectors named in repos but not defined get a result
// with ErrUnknownConnector. Results come in file order, unknown names last (sorted).
func (s *Set) Check(ctx context.Context, repos map[string][]scm.Repo) []CheckResult {
	var out []CheckResult
	for _, c := range s.configs {
		out = append(out, s.check(ctx, c, repos[c.Name]))
	}
	var unknown []string
	for name := range repos {
		if _, ok := s.Config(name); !ok {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		out = append(out, CheckResult{Connector: name, Err: fmt.Errorf("connector %q: %w", name, ErrUnknownConnector)})
	}
	return out
}

func (s *Set) check(ctx context.Context, c Config, repos []scm.Repo) CheckResult {
	r := CheckResult{Connector: c.Name, Provider: c.Provider}
	p, err := s.Provider(ctx, c.Name)
	if err != nil {
		r.Err = err
		return r
	}
	ch, ok := p.(scm.Checker)
	if !ok {
		r.Err = fmt.Errorf("connector %q: the %s driver cannot check credentials: %w", c.Name, c.Provider, scm.ErrNotSupported)
		return r
	}
	id, err := ch.Whoami(ctx)
	if err != nil {
		r.Err = fmt.Errorf("connector %q: authenticate: %w", c.Name, err)
		return r
	}
	r.Identity = id
	for _, repo := range repos {
		rc := RepoCheck{Repo: repo}
		if err := ch.RepoExists(ctx, repo); err != nil {
			rc.Err = fmt.Errorf("connector %q: repo %s: %w", c.Name, repo, err)
		}
		r.Repos = append(r.Repos, rc)
	}
	return r
}

// Static serves a fixed set of providers by connector name, for the dev sandbox and tests,
// where no connectors file is loaded.
type Static map[string]scm.Provider

// Provider returns the provider of connector name.
func (s Static) Provider(_ context.Context, name string) (scm.Provider, error) {
	if p, ok := s[name]; ok {
		return p, nil
	}
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("no connector %q (have: %v)", name, names)
}
