// Package verify holds what the Verify step asks metrics backends: the Query and Result it
// exchanges with them, the Provider interface each backend implements (Prometheus in
// verify/prometheus, Datadog in verify/datadog), how their errors are classified (a bad
// query is terminal, an unreachable or overloaded backend is transient), and the worker-side
// metrics connectors file that names each backend and resolves its credentials.
//
// A new backend is a package with a Factory registered under its provider name and a blank
// import in cmd/prflow; the step itself needs no change.
package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// Query is one measurement's question. At set and Start zero: an instant query at At
// (Prometheus /api/v1/query). Start set: a range from Start to At sampled every Step
// (Prometheus /api/v1/query_range; Datadog always answers a range and uses Start..At).
type Query struct {
	Expr  string
	At    time.Time
	Start time.Time
	Step  time.Duration
}

// Point is one sample.
type Point struct {
	T time.Time
	V float64
}

// Series is one labelled time series of a result.
type Series struct {
	Labels map[string]string
	Points []Point
}

// Result is what a backend answered. No series (or only NaN samples) is "no data".
type Result struct {
	Series []Series
}

// Provider answers queries. Its errors are *Error values when it can say whether retrying may
// help; any other error counts as transient.
type Provider interface {
	Query(ctx context.Context, q Query) (Result, error)
}

// Error is a backend's refusal or failure, classified for the step.
type Error struct {
	Provider string        // prometheus, datadog
	Call     string        // the API call, e.g. "GET /api/v1/query"
	Status   int           // HTTP status (0: no answer)
	Msg      string        // the backend's own error text, or what went wrong
	Terminal bool          // retrying cannot help: a bad query, bad credentials
	Retry    time.Duration // when the backend said how long to wait (429 reset)
}

func (e *Error) Error() string {
	s := e.Provider + " " + e.Call
	if e.Status != 0 {
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	return s + ": " + e.Msg
}

// IsTerminal reports whether err says retrying cannot help.
func IsTerminal(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Terminal
}

// RetryAfter is the delay a backend asked for (0: none said).
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.Retry
	}
	return 0
}

// ErrNoData says a query returned no samples.
var ErrNoData = errors.New("the query returned no data")

// ErrManySeries says a query returned more than one series where one value is needed.
var ErrManySeries = errors.New("the query returned more than one series; aggregate it (sum, avg, max) to one")

// Value reduces a result to one number: the last non-NaN sample of its only series. A
// result with no samples is ErrNoData; one with several series is ErrManySeries.
func (r Result) Value() (float64, error) {
	s, err := r.only()
	if err != nil {
		return 0, err
	}
	for i := len(s.Points) - 1; i >= 0; i-- {
		if v := s.Points[i].V; !math.IsNaN(v) && !math.IsInf(v, 0) {
			return v, nil
		}
	}
	return 0, ErrNoData
}

// Mean reduces a result to the mean of its only series' samples (NaN skipped).
func (r Result) Mean() (float64, error) {
	s, err := r.only()
	if err != nil {
		return 0, err
	}
	sum, n := 0.0, 0
	for _, p := range s.Points {
		if !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
			sum += p.V
			n++
		}
	}
	if n == 0 {
		return 0, ErrNoData
	}
	return sum / float64(n), nil
}

func (r Result) only() (Series, error) {
	var with []Series
	for _, s := range r.Series {
		if len(s.Points) > 0 {
			with = append(with, s)
		}
	}
	switch len(with) {
	case 0:
		return Series{}, ErrNoData
	case 1:
		return with[0], nil
	}
	return Series{}, fmt.Errorf("%w (got %d)", ErrManySeries, len(with))
}

// Factory builds a provider for one metrics connector.
type Factory func(c Config) (Provider, error)

var (
	regMu     sync.RWMutex
	factories = map[string]Factory{}
)

// Register adds a backend; backends call it from init. A name registered twice panics.
func Register(provider string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if provider == "" || f == nil {
		panic("verify: Register needs a provider name and a factory")
	}
	if _, dup := factories[provider]; dup {
		panic(fmt.Sprintf("verify: provider %q registered twice", provider))
	}
	factories[provider] = f
}

func lookup(provider string) (Factory, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	f, ok := factories[provider]
	return f, ok
}

// Registered lists the registered backends, sorted.
func Registered() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(factories))
	for k := range factories {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
