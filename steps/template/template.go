package template

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser/utils"
	"github.com/expr-lang/expr/vm"
)

// Errors callers can branch on with errors.Is. They are wrapped in *Error.
var (
	// ErrMissing: a variable, map key or list index that a strict lookup read does not exist.
	ErrMissing = errors.New("missing value")
	// ErrNil: a nil value was about to be written into text.
	ErrNil = errors.New("value is nil")
	// ErrNotBool: a condition (or EvalBool) produced something other than a bool.
	ErrNotBool = errors.New("not a bool")
	// ErrRuntimeInput: the source contains Harness's <+input> marker, which the loader must resolve first.
	ErrRuntimeInput = errors.New("<+input> is a runtime input marker, not an expression; the loader must resolve it before compiling")
	// ErrMemoryBudget: evaluation exceeded the memory budget.
	ErrMemoryBudget = errors.New("memory budget exceeded")
	// ErrMaxNodes: the template has more expression nodes than allowed.
	ErrMaxNodes = errors.New("expression exceeds maximum allowed nodes")
	// ErrSyntax: the template or one of its expressions cannot be compiled.
	ErrSyntax = errors.New("invalid expression")
)

// Error locates a compile or evaluation failure in the template source so the
// caller can turn it into file:line:column.
type Error struct {
	Offset int    // byte offset in src where the failing expression starts (its opening delimiter)
	Pos    int    // byte offset in src of the failing token when known, else Offset
	Expr   string // the failing expression as written, delimiters included
	Err    error
}

func (e *Error) Error() string {
	expr := e.Expr
	if len(expr) > 80 {
		cut := 77
		for cut > 0 && !utf8.RuneStart(expr[cut]) {
			cut--
		}
		expr = expr[:cut] + "..."
	}
	if expr == "" {
		return fmt.Sprintf("offset %d: %v", e.Offset, e.Err)
	}
	return fmt.Sprintf("%s (offset %d): %v", expr, e.Offset, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Func is a function made available to expressions with WithFunction. It
// must be pure: no I/O, no mutation of its arguments.
type Func func(args ...any) (any, error)

// Option configures Compile and CompileCondition.
type Option func(*config)

type config struct {
	funcs        map[string]Func
	memoryBudget uint
	maxNodes     uint
	status       bool
}

// Defaults for the evaluation limits.
const (
	DefaultMemoryBudget uint = 1e6
	DefaultMaxNodes     uint = 1e4
)

// WithFunction makes fn callable as name(...) in expressions. A name equal to
// an expr builtin replaces the builtin.
func WithFunction(name string, fn Func) Option {
	return func(c *config) {
		if c.funcs == nil {
			c.funcs = map[string]Func{}
		}
		c.funcs[name] = fn
	}
}

// WithStatusFunctions makes success(), failure(), cancelled() and always() callable, as in a
// stage's or step's `when`. They read the map under StatusKey in the evaluation env:
// {"success": bool, "failure": bool, "cancelled": bool}; always() is true.
func WithStatusFunctions() Option {
	return func(c *config) { c.status = true }
}

// StatusKey is the env key the status functions read.
const StatusKey = "$status"

// WithMemoryBudget sets the memory budget of each expression evaluation
// (expr's units: list elements, map entries, and string bytes built by
// template functions). 0 means DefaultMemoryBudget.
func WithMemoryBudget(n uint) Option {
	return func(c *config) { c.memoryBudget = n }
}

// WithMaxNodes limits the number of syntax nodes across all expressions of a
// template. 0 means DefaultMaxNodes.
func WithMaxNodes(n uint) Option {
	return func(c *config) { c.maxNodes = n }
}

func newConfig(opts []Option) (*config, error) {
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.memoryBudget == 0 {
		c.memoryBudget = DefaultMemoryBudget
	}
	if c.maxNodes == 0 {
		c.maxNodes = DefaultMaxNodes
	}
	for name, fn := range c.funcs {
		if !utils.IsValidIdentifier(name) || name == "$env" {
			return nil, fmt.Errorf("template: function name %q is not a valid identifier", name)
		}
		if fn == nil {
			return nil, fmt.Errorf("template: function %q is nil", name)
		}
		if _, ok := predicateNames[name]; ok {
			return nil, fmt.Errorf("template: function name %q is an expr predicate builtin and cannot be replaced", name)
		}
	}
	return c, nil
}

// predicateNames are expr builtins parsed specially (their second argument is
// a predicate), so they cannot be replaced by plain functions.
var predicateNames = map[string]struct{}{
	"all": {}, "none": {}, "any": {}, "one": {}, "filter": {}, "map": {}, "count": {}, "sum": {},
	"find": {}, "findIndex": {}, "findLast": {}, "findLastIndex": {}, "groupBy": {}, "sortBy": {}, "reduce": {},
}

// Template is a compiled string. It is immutable and safe for concurrent use.
type Template struct {
	src     string
	literal bool
	text    string // the value of a literal template
	whole   bool   // exactly one expression and no text: Eval returns its typed value
	cond    bool
	parts   []part
	refs    []string
	status  []string // status functions called (success, failure, cancelled, always)
	budget  uint
	runners sync.Pool // *runner: VMs keep their stacks between evaluations
}

// runner is the per-evaluation state, pooled per template.
type runner struct {
	vm vm.VM
	st evalState
}

// part is either text or one compiled expression.
type part struct {
	text      string
	prog      *vm.Program
	start     int    // offset of the opening delimiter in src
	end       int    // offset just past the closing delimiter
	bodyStart int    // offset in src of exprSrc[0]
	exprSrc   string // source handed to expr (same byte length as src[bodyStart:...])
	operands  []operand
}

// Compile compiles every expression embedded in src once.
func Compile(src string, opts ...Option) (*Template, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	segs, err := splitTemplate(src)
	if err != nil {
		return nil, err
	}
	t := &Template{src: src, budget: cfg.memoryBudget}
	nodesLeft := cfg.maxNodes
	var text strings.Builder
	nExpr := 0
	for _, s := range segs {
		if s.expr == nil {
			text.WriteString(s.text)
			t.parts = append(t.parts, part{text: s.text})
			continue
		}
		nExpr++
		p := part{start: s.expr.start, end: s.expr.end, bodyStart: s.expr.bodyStart, exprSrc: s.expr.body}
		if err := t.compilePart(&p, cfg, &nodesLeft, false); err != nil {
			return nil, err
		}
		t.parts = append(t.parts, p)
	}
	switch {
	case nExpr == 0:
		t.literal = true
		t.text = text.String()
		t.parts = nil
	case nExpr == 1 && len(t.parts) == 1:
		t.whole = true
	}
	return t, nil
}

// CompileCondition compiles a `when` condition: the whole string is one
// boolean expression. It may be wrapped in ${{ }} or use <+...> operands, e.g.
// `<+pipeline.variables.env> == "prod" && <+stage.variables.x> != ""`.
func CompileCondition(src string, opts ...Option) (*Template, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	body, operands, err := translateCondition(src)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(body) == "" {
		return nil, &Error{Offset: 0, Pos: 0, Expr: src, Err: fmt.Errorf("%w: empty condition", ErrSyntax)}
	}
	t := &Template{src: src, budget: cfg.memoryBudget, cond: true}
	p := part{start: 0, end: len(src), bodyStart: 0, exprSrc: body, operands: operands}
	nodesLeft := cfg.maxNodes
	if err := t.compilePart(&p, cfg, &nodesLeft, true); err != nil {
		return nil, err
	}
	t.parts = []part{p}
	return t, nil
}

func (t *Template) compilePart(p *part, cfg *config, nodesLeft *uint, asBool bool) error {
	if *nodesLeft == 0 {
		return t.errorAt(p, p.bodyStart, fmt.Errorf("%w (limit %d)", ErrMaxNodes, cfg.maxNodes))
	}
	prog, refs, status, used, err := compileExpr(p.exprSrc, cfg, *nodesLeft, asBool)
	if err != nil {
		return t.wrap(p, err, cfg.maxNodes)
	}
	if used >= *nodesLeft {
		*nodesLeft = 0
	} else {
		*nodesLeft -= used
	}
	p.prog = prog
	for _, f := range status {
		if !containsString(t.status, f) {
			t.status = append(t.status, f)
		}
	}
	for _, r := range refs {
		if !containsString(t.refs, r) {
			t.refs = append(t.refs, r)
		}
	}
	return nil
}

// Contains reports whether src has an (unescaped) expression opener.
func Contains(src string) bool {
	if !strings.Contains(src, nativeOpen) && !strings.Contains(src, harnessOpen) {
		return false
	}
	for i := 0; i < len(src); {
		j, open := nextOpener(src, i)
		if j < 0 {
			return false
		}
		if backslashesBefore(src, i, j)%2 == 0 {
			return true
		}
		i = j + len(open)
	}
	return false
}

// Unescape returns the text a string without a live expression (Contains is
// false) stands for: every escaped opener loses its escaping backslash (\<+x>
// gives <+x>, \\\${{ x }} gives \${{ x }}), as Compile and Eval would give it.
// Callers that keep such strings as literals instead of compiling them must
// use it, so that an escape works alone and not only next to an expression.
// For a string with a live expression it returns src unchanged: compile it.
func Unescape(src string) string {
	if Contains(src) || !strings.Contains(src, `\`) {
		return src
	}
	segs, err := splitTemplate(src)
	if err != nil || len(segs) > 1 || (len(segs) == 1 && segs[0].expr != nil) {
		return src
	}
	if len(segs) == 0 {
		return ""
	}
	return segs[0].text
}

// Literal reports whether the template has no expression (Eval returns the
// unescaped text).
func (t *Template) Literal() bool { return t.literal }

// Source returns the string the template was compiled from.
func (t *Template) Source() string { return t.src }

// Refs returns the dotted variable paths the template reads, in order of
// first appearance, e.g. "steps.update.outputs.prNumber". Constant indexes
// appear as [0] or ["key"]; a path stops before a computed index. Paths read
// under ?. or ?? are included.
func (t *Template) Refs() []string {
	return append([]string(nil), t.refs...)
}

// RunsAfterFailure reports whether the condition calls failure(), cancelled() or always():
// such a `when` is evaluated even after something before it failed. Any other condition
// applies only when everything before succeeded.
func (t *Template) RunsAfterFailure() bool {
	for _, f := range t.status {
		if f != "success" {
			return true
		}
	}
	return false
}

// Eval evaluates the template against env: a literal gives its text, a whole
// expression its typed value, mixed text a string.
func (t *Template) Eval(ctx context.Context, env map[string]any) (any, error) {
	if t.literal {
		return t.text, nil
	}
	r, _ := t.runners.Get().(*runner)
	if r == nil {
		r = &runner{}
	}
	defer t.release(r)
	r.vm.MemoryBudget = t.budget
	r.st = evalState{ctx: ctx, root: env, budget: t.budget}
	st, m := &r.st, &r.vm
	if t.whole || t.cond {
		v, err := t.run(m, st, &t.parts[0])
		if err != nil {
			return nil, err
		}
		if t.cond {
			if _, ok := v.(bool); !ok {
				return nil, t.errorAt(&t.parts[0], t.parts[0].bodyStart, fmt.Errorf("%w: condition evaluated to %s, want bool", ErrNotBool, typeName(v)))
			}
		}
		return v, nil
	}
	var b strings.Builder
	for i := range t.parts {
		p := &t.parts[i]
		if p.prog == nil {
			b.WriteString(p.text)
			continue
		}
		v, err := t.run(m, st, p)
		if err != nil {
			return nil, err
		}
		if err := appendValue(&b, v, t.budget); err != nil {
			return nil, t.errorAt(p, p.start, err)
		}
	}
	return b.String(), nil
}

// EvalString evaluates the template and formats the result as text (see Format).
func (t *Template) EvalString(ctx context.Context, env map[string]any) (string, error) {
	v, err := t.Eval(ctx, env)
	if err != nil {
		return "", err
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	var b strings.Builder
	if err := appendValue(&b, v, t.budget); err != nil {
		p := &part{start: 0, end: len(t.src), bodyStart: 0}
		if len(t.parts) > 0 {
			p = &t.parts[0]
		}
		return "", t.errorAt(p, p.start, err)
	}
	return b.String(), nil
}

// EvalBool evaluates the template and requires a bool result.
func (t *Template) EvalBool(ctx context.Context, env map[string]any) (bool, error) {
	v, err := t.Eval(ctx, env)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		p := &part{start: 0, end: len(t.src)}
		if len(t.parts) > 0 {
			p = &t.parts[0]
		}
		return false, t.errorAt(p, p.start, fmt.Errorf("%w: got %s", ErrNotBool, typeName(v)))
	}
	return b, nil
}

// release drops the references a runner holds into env and returns it to the pool.
func (t *Template) release(r *runner) {
	clear(r.vm.Stack[:cap(r.vm.Stack)])
	clear(r.vm.Variables)
	r.st = evalState{}
	t.runners.Put(r)
}

func (t *Template) run(m *vm.VM, st *evalState, p *part) (any, error) {
	if st.ctx != nil {
		if err := st.ctx.Err(); err != nil {
			return nil, t.errorAt(p, p.start, err)
		}
	}
	st.used = 0
	out, err := m.Run(p.prog, st)
	if err != nil {
		return nil, t.wrap(p, err, 0)
	}
	return out, nil
}

// wrap turns an expr (or scanner/rewriter) error into *Error with source positions.
func (t *Template) wrap(p *part, err error, maxNodes uint) error {
	var te *Error
	if errors.As(err, &te) {
		return err
	}
	pos := p.start
	inner := err
	var pe *posError
	var fe *file.Error
	switch {
	case errors.As(err, &pe):
		pos = p.bodyStart + runeToByte(p.exprSrc, pe.from)
		inner = pe.err
	case errors.As(err, &fe):
		pos = p.bodyStart + runeToByte(p.exprSrc, fe.From)
		inner = classify(fe, maxNodes, p.prog == nil)
	}
	return t.errorAt(p, pos, inner)
}

// classify maps an expr error to the package's errors; compile reports
// whether it came from compiling (a syntax or type error) or from running.
func classify(fe *file.Error, maxNodes uint, compile bool) error {
	switch {
	case fe.Prev != nil:
		return fe.Prev
	case fe.Message == "memory budget exceeded":
		return ErrMemoryBudget
	case strings.Contains(fe.Message, "exceeds maximum allowed nodes"):
		if maxNodes > 0 {
			return fmt.Errorf("%w (limit %d)", ErrMaxNodes, maxNodes)
		}
		return ErrMaxNodes
	case !compile:
		return errors.New(fe.Message)
	}
	return fmt.Errorf("%w: %s", ErrSyntax, fe.Message)
}

// errorAt builds an *Error for part p with the failing token at pos. In a
// condition the expression reported is the innermost delimited operand
// containing pos, or the whole condition.
func (t *Template) errorAt(p *part, pos int, err error) *Error {
	start, end := p.start, p.end
	if t.cond {
		for _, o := range p.operands {
			if pos >= o.start && pos < o.end && o.start >= start {
				start, end = o.start, o.end
			}
		}
	}
	if end > len(t.src) {
		end = len(t.src)
	}
	if start > end {
		start = end
	}
	return &Error{Offset: start, Pos: pos, Expr: t.src[start:end], Err: err}
}

// posError is an error at a rune offset of an expression source.
type posError struct {
	from int
	err  error
}

func (e *posError) Error() string { return e.err.Error() }
func (e *posError) Unwrap() error { return e.err }

func runeToByte(s string, n int) int {
	if n <= 0 {
		return 0
	}
	i := 0
	for b := range s {
		if i == n {
			return b
		}
		i++
	}
	return len(s)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
