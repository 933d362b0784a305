package connector

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// Deps are the process-wide things a driver may use to build a provider.
type Deps struct {
	Logger  *slog.Logger
	Metrics *transport.Metrics // nil: no metrics
	TempDir string             // parent of scratch git repositories ("" = os.TempDir())
}

func (d Deps) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Logger
}

// Factory builds a provider for one connector.
type Factory func(Config, Deps) (scm.Provider, error)

// Registry maps provider names (github, gitlab, bitbucket, local) to factories.
type Registry struct {
	mu sync.RWMutex
	m  map[string]Factory
}

// NewRegistry returns an empty registry (tests); drivers register in the default one.
func NewRegistry() *Registry { return &Registry{m: map[string]Factory{}} }

// Register adds a factory. Registering a name twice, an empty name or a nil factory is a
// programming error in a driver's init and panics, as database/sql.Register does.
func (r *Registry) Register(provider string, f Factory) {
	if provider == "" || f == nil {
		panic("connector: Register needs a provider name and a factory")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[provider]; dup {
		panic(fmt.Sprintf("connector: provider %q registered twice", provider))
	}
	r.m[provider] = f
}

// Lookup returns the factory for provider.
func (r *Registry) Lookup(provider string) (Factory, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f, ok := r.m[provider]
	return f, ok
}

// Providers lists the registered provider names, sorted.
func (r *Registry) Providers() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.m))
	for k := range r.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// defaultRegistry is filled by the drivers' init functions; the binary links the drivers it
// supports with blank imports.
var defaultRegistry = NewRegistry()

// Register adds a driver to the default registry; drivers call it from init.
func Register(provider string, f Factory) { defaultRegistry.Register(provider, f) }

// Registered lists the providers in the default registry.
func Registered() []string { return defaultRegistry.Providers() }
