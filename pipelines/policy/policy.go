// Package policy evaluates Rego policies (Open Policy Agent) at three points of a pipeline's
// life, following Conftest's convention: package prflow.pipeline when a pipeline is loaded or
// validated, prflow.run when a run starts, prflow.stage before each stage; each package's
// `deny` and `warn` rules are sets of messages. A deny stops there with every message.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Point is where a policy is evaluated; it names the Rego package prflow.<point>.
type Point string

const (
	Pipeline Point = "pipeline" // input: the loaded pipeline
	Run      Point = "run"      // input: pipeline, inputs, trigger, caller
	Stage    Point = "stage"    // input: stage, environment, run so far, live app status
)

var points = []Point{Pipeline, Run, Stage}

// ErrDenied matches every DeniedError.
var ErrDenied = errors.New("denied by policy")

// ErrPolicy means a policy set did not load or an evaluation failed.
var ErrPolicy = errors.New("policy")

// Decision is what the deny and warn rules of one package said, each sorted.
type Decision struct {
	Deny []string `json:"deny,omitempty"`
	Warn []string `json:"warn,omitempty"`
}

// Err is a DeniedError when anything denied, else nil.
func (d Decision) Err(p Point) error {
	if len(d.Deny) == 0 {
		return nil
	}
	return &DeniedError{Point: p, Messages: d.Deny}
}

// DeniedError carries every deny message of one evaluation.
type DeniedError struct {
	Point    Point
	Messages []string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("denied by policy prflow.%s: %s", e.Point, strings.Join(e.Messages, "; "))
}

// Is makes a DeniedError match ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Evaluator is what the controller calls. Has is false for a point no policy covers, so the
// caller skips building that point's input.
type Evaluator interface {
	Has(p Point) bool
	Evaluate(ctx context.Context, p Point, input any) (Decision, error)
}

// Set is one loaded, compiled set of policies: a prepared query per point a package covers.
// It is immutable and safe for concurrent use.
type Set struct {
	Files   []string // the policy files, relative to the directory
	queries map[Point]rego.PreparedEvalQuery
}

// Has reports whether any policy file declares package prflow.<p>.
func (s *Set) Has(p Point) bool {
	if s == nil {
		return false
	}
	_, ok := s.queries[p]
	return ok
}

// Evaluate runs point p's deny and warn rules on input (JSON-like values: maps, slices,
// strings, numbers, bools, and parts already converted with Converted). No policy for p is
// an empty decision.
func (s *Set) Evaluate(ctx context.Context, p Point, input any) (Decision, error) {
	if s == nil {
		return Decision{}, nil
	}
	q, ok := s.queries[p]
	if !ok {
		return Decision{}, nil
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("%w: prflow.%s not evaluated: %w", ErrPolicy, p, err)
	}
	v, err := ast.InterfaceToValue(input)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: prflow.%s input: %w", ErrPolicy, p, err)
	}
	// OPA's defaults cost every evaluation a goroutine that waits for ctx, a fresh metrics
	// registry and a conversion of the results to generic JSON: allocations whose GC pauses
	// make the tail. A cancel flag set only when ctx ends, no metrics, and messages read
	// straight from the result terms do the same work.
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	rs, err := q.Eval(ctx, rego.EvalParsedInput(v), rego.EvalMetrics(noMetrics), rego.EvalExternalCancel(cancel),
		rego.EvalGenerateJSON(termMessages))
	if err != nil {
		return Decision{}, fmt.Errorf("%w: evaluating prflow.%s: %w", ErrPolicy, p, err)
	}
	var d Decision
	if len(rs) == 0 || len(rs[0].Expressions) != 2 {
		return d, nil
	}
	d.Deny, _ = rs[0].Expressions[0].Value.([]string)
	d.Warn, _ = rs[0].Expressions[1].Value.([]string)
	return d, nil
}

var noMetrics = metrics.NoOp()

// termMessages turns a deny/warn result (an array of messages) into sorted strings: a string
// as is, an object's "msg" (Conftest's structured form), anything else as JSON. A nil slice
// for no message.
func termMessages(t *ast.Term, _ *rego.EvalContext) (any, error) {
	arr, ok := t.Value.(*ast.Array)
	if !ok || arr.Len() == 0 {
		return []string(nil), nil
	}
	out := make([]string, 0, arr.Len())
	for i := range arr.Len() {
		switch x := arr.Elem(i).Value.(type) {
		case ast.String:
			out = append(out, string(x))
			continue
		case ast.Object:
			if mt := x.Get(ast.InternedTerm("msg")); mt != nil {
				if m, ok := mt.Value.(ast.String); ok {
					out = append(out, string(m))
					continue
				}
			}
		}
		j, err := ast.JSON(arr.Elem(i).Value)
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(j)
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out, nil
}

// PolicyFiles lists dir's *.rego files (not *_test.rego), sorted, relative to dir.
func PolicyFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".rego") || strings.HasSuffix(path, "_test.rego") {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	sort.Strings(files)
	return files, nil
}

// Load reads and compiles every policy file of dir (Rego v1 syntax). Errors name the file
// and line. A directory with no policy file is an error: --policies was given for a reason.
func Load(ctx context.Context, dir string) (*Set, error) {
	files, err := PolicyFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s: no .rego policy files", ErrPolicy, dir)
	}
	modules := map[string]*ast.Module{}
	covered := map[Point]bool{}
	var errs []string
	for _, f := range files {
		path := filepath.Join(dir, f)
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
		}
		m, err := ast.ParseModuleWithOpts(path, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			errs = append(errs, locErrors(err)...)
			continue
		}
		modules[path] = m
		for _, p := range points {
			if m.Package.Path.String() == "data.prflow."+string(p) {
				covered[p] = true
			}
		}
	}
	if len(errs) == 0 {
		c := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1)
		if c.Compile(modules); c.Failed() {
			errs = append(errs, locErrors(c.Errors)...)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrPolicy, strings.Join(errs, "; "))
	}
	s := &Set{Files: files, queries: map[Point]rego.PreparedEvalQuery{}}
	for p := range covered {
		opts := []func(*rego.Rego){rego.Query(fmt.Sprintf(
			"[m | some m in data.prflow.%[1]s.deny]; [m | some m in data.prflow.%[1]s.warn]", p))}
		for _, m := range modules {
			opts = append(opts, rego.ParsedModule(m))
		}
		q, err := rego.New(opts...).PrepareForEval(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: preparing prflow.%s: %s", ErrPolicy, p, strings.Join(locErrors(err), "; "))
		}
		s.queries[p] = q
	}
	return s, nil
}

// locErrors spells OPA's errors as file:line:col: message.
func locErrors(err error) []string {
	var list ast.Errors
	if errors.As(err, &list) {
		out := make([]string, 0, len(list))
		for _, e := range list {
			if e.Location != nil {
				out = append(out, fmt.Sprintf("%s:%d:%d: %s", e.Location.File, e.Location.Row, e.Location.Col, e.Message))
			} else {
				out = append(out, e.Message)
			}
		}
		return out
	}
	return []string{err.Error()}
}
