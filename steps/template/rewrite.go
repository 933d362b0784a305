package template

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser/utils"
	"github.com/expr-lang/expr/vm"
)

// Names of the functions the rewriter calls. They contain ':' so no
// expression can spell them.
const (
	fnPath           = "prflow:path"   // (state, modes, prefix, base, keys...): a chain of strict lookups
	fnAdd            = "prflow:add"    // (state, a, b)
	fnAcct           = "prflow:acct"   // (state, value): counts the value's deep size against the budget
	fnIter           = "prflow:iter"   // (state, collection): counts a predicate's iterations
	fnWalk           = "prflow:walk"   // (state, value): counts a traversal of the value
	fnEq             = "prflow:eq"     // (state, a, b): == with element comparisons counted
	fnIn             = "prflow:in"     // (state, needle, haystack): in with comparisons counted
	fnStatus         = "prflow:status" // (state, name): success(), failure(), cancelled(), always()
	fnMethodPrefix   = "prflow:m:"     // (state, mode, receiver, displayCall, args...)
	fnOverridePrefix = "prflow:f:"     // (state, args...)
	envIdent         = "$env"          // the evaluation state, passed as expr's env

	// Argument positions. A path whose base is $env starts at a variable.
	argPathModes, argPathPrefix, argPathBase, argPathKeys = 1, 2, 3, 4
	argMethodMode, argMethodRecv, argMethodCall           = 1, 2, 3

	// Lookup modes, one per path link (a byte of the modes string).
	modeStrict    = '0' // missing or nil is an error
	modeOptional  = '1' // ?. and the left of ??: nil base or missing key gives nil
	modePropagate = '2' // after ?. in one chain: nil base gives nil, missing key is an error
)

// allocatingBuiltins are expr builtins whose result may be large; their
// result is counted against the memory budget. reverse, sort and sortBy are
// not here: expr's VM counts the list they build against the same budget
// (vm.MemoryBudget), and their elements are shared with their argument, which
// was counted when it was built.
var allocatingBuiltins = map[string]bool{
	"trim": true, "trimPrefix": true, "trimSuffix": true, "upper": true, "lower": true,
	"split": true, "splitAfter": true, "fromJSON": true, "toBase64": true, "fromBase64": true,
	"take": true, "keys": true, "values": true, "toPairs": true, "fromPairs": true,
	"uniq": true, "map": true, "filter": true, "groupBy": true,
}

// traversingBuiltins walk nested lists in their arguments; the arguments'
// size is counted against the budget on every call.
var traversingBuiltins = map[string]bool{"max": true, "min": true, "mean": true, "median": true}

// compileExpr compiles one expression source with the strict-lookup rewrite.
// It returns the program, the variable paths read and the number of syntax nodes.
func compileExpr(src string, cfg *config, maxNodes uint, asBool bool) (*vm.Program, []string, []string, uint, error) {
	rw := &rewriter{cfg: cfg}
	rc := &refCollector{}
	opts := []expr.Option{
		func(c *conf.Config) { installFunctions(c, cfg) },
		expr.MaxNodes(maxNodes),
		expr.Patch(rw),
		expr.Patch(rc),
	}
	prog, err := safeCompile(src, opts)
	if rw.err != nil {
		return nil, nil, nil, 0, rw.err
	}
	if err != nil {
		return nil, nil, nil, 0, err
	}
	if asBool {
		// Reject conditions whose type is known and not bool; others are
		// checked when evaluated.
		if t := prog.Node().Type(); t != nil && t.Kind() != reflect.Interface && t.Kind() != reflect.Bool {
			return nil, nil, nil, 0, &posError{from: 0, err: fmt.Errorf("%w: condition is %s, want bool", ErrNotBool, t)}
		}
	}
	return prog, rc.refs, rw.status, rw.nodes, nil
}

func safeCompile(src string, opts []expr.Option) (p *vm.Program, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("%w: cannot compile: %v", ErrSyntax, r)
		}
	}()
	return expr.Compile(src, opts...)
}

// installFunctions registers the rewriter's functions, the budget-aware
// replacements of amplifying builtins and the caller's functions.
func installFunctions(c *conf.Config, cfg *config) {
	for name, f := range internalFuncs {
		c.Functions[name] = f
	}
	for name := range overrides {
		// Registering the public name makes the parser produce a CallNode,
		// which the rewriter redirects to the budget-aware version.
		c.Functions[name] = &builtin.Function{Name: name, Func: unreachable}
	}
	for name, fn := range cfg.funcs {
		c.Functions[name] = &builtin.Function{Name: name, Func: fn}
	}
}

func unreachable(...any) (any, error) {
	return nil, fmt.Errorf("template: internal error: call was not rewritten")
}

// rewriter is an expr patch visitor (post-order). It turns variable and
// member reads into strict path lookups (one call per chain of constant
// keys), Harness method calls into function calls, and operators that can
// build or compare large values into budget-aware calls.
type rewriter struct {
	cfg    *config
	nodes  uint
	err    error
	status []string // status functions called
}

// statusFuncs are the `when` functions that read how the stage or steps before ended.
var statusFuncs = map[string]bool{"success": true, "failure": true, "cancelled": true, "always": true}

func (r *rewriter) fail(loc file.Location, format string, args ...any) {
	if r.err == nil {
		r.err = &posError{from: loc.From, err: fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, args...)...)}
	}
}

func (r *rewriter) Visit(node *ast.Node) {
	if r.err != nil || *node == nil {
		return
	}
	r.nodes++
	loc := (*node).Location()
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		if n.Value == envIdent {
			r.fail(loc, "%s is not available; start a path with a variable name such as steps or pipeline", envIdent)
			return
		}
		*node = newPath(loc, modeStrict, "", envNode(loc), strNode(loc, n.Value))
	case *ast.MemberNode:
		if n.Method {
			return // rewritten with its CallNode
		}
		mode := memberMode(n.Optional, n.Node)
		if p, ok := n.Node.(*ast.CallNode); ok && calleeName(p) == fnPath && isConstKey(n.Property) {
			// Extend the chain: a.b.c is one lookup call.
			modes := p.Arguments[argPathModes].(*ast.StringNode)
			modes.Value += string(mode)
			p.Arguments = append(p.Arguments, n.Property)
			*node = p
			return
		}
		*node = newPath(loc, mode, display(n.Node), n.Node, n.Property)
	case *ast.ChainNode:
		// ?. is implemented by the lookup modes; the chain wrapper is not needed.
		*node = n.Node
	case *ast.CallNode:
		r.callNode(node, n, loc)
	case *ast.BuiltinNode:
		if _, ok := predicateNames[n.Name]; ok && len(n.Arguments) > 0 {
			n.Arguments[0] = newCall(loc, fnIter, envNode(loc), n.Arguments[0])
		}
		if traversingBuiltins[n.Name] {
			for i, a := range n.Arguments {
				if !isLiteral(a) {
					n.Arguments[i] = newCall(loc, fnWalk, envNode(loc), a)
				}
			}
		}
		if allocatingBuiltins[n.Name] {
			*node = newCall(loc, fnAcct, envNode(loc), n)
		}
	case *ast.ArrayNode, *ast.MapNode:
		// A literal holding other values can share them (let a = [b, b]);
		// its deep size is counted so no value outgrows the budget.
		if !isLiteral(n) {
			*node = newCall(loc, fnAcct, envNode(loc), n)
		}
	case *ast.BinaryNode:
		switch n.Operator {
		case "??":
			lenient(n.Left)
		case "+":
			if !isNumber(n.Left) && !isNumber(n.Right) {
				*node = newCall(loc, fnAdd, envNode(loc), n.Left, n.Right)
			}
		case "==", "!=":
			if !isScalarLiteral(n.Left) && !isScalarLiteral(n.Right) {
				var c ast.Node = newCall(loc, fnEq, envNode(loc), n.Left, n.Right)
				if n.Operator == "!=" {
					c = &ast.UnaryNode{Operator: "!", Node: c}
					c.SetLocation(loc)
				}
				*node = c
			}
		case "in":
			if !isLiteral(n.Right) {
				*node = newCall(loc, fnIn, envNode(loc), n.Left, n.Right)
			}
		}
	case *ast.VariableDeclaratorNode:
		ast.Walk(&n.Expr, unbinder(n.Name))
	}
}

func (r *rewriter) callNode(node *ast.Node, n *ast.CallNode, loc file.Location) {
	switch callee := n.Callee.(type) {
	case *ast.MemberNode:
		prop, ok := callee.Property.(*ast.StringNode)
		if !ok {
			r.fail(loc, "expression is not callable")
			return
		}
		name := prop.Value
		spec, ok := methods[name]
		if !ok {
			r.fail(loc, "unknown method %q (supported: %s)", name, strings.Join(methodNames(), ", "))
			return
		}
		if len(n.Arguments) < spec.min || len(n.Arguments) > spec.max {
			r.fail(loc, "method %s takes %s, got %d", name, arity(spec.min, spec.max), len(n.Arguments))
			return
		}
		mode := memberMode(callee.Optional, callee.Node)
		call := name + "()"
		if p := display(callee.Node); p != "" {
			call = p + "." + call
		}
		args := append([]ast.Node{envNode(loc), intNode(loc, int(mode)), callee.Node, strNode(loc, call)}, n.Arguments...)
		*node = newCall(loc, fnMethodPrefix+name, args...)
	case *ast.CallNode:
		name, ok := varName(callee)
		if !ok {
			r.fail(loc, "expression is not callable")
			return
		}
		if _, ok := r.cfg.funcs[name]; ok {
			id := &ast.IdentifierNode{Value: name}
			id.SetLocation(callee.Location())
			n.Callee = id
			*node = newCall(loc, fnAcct, envNode(loc), n)
			return
		}
		if statusFuncs[name] && r.cfg.status {
			if len(n.Arguments) != 0 {
				r.fail(loc, "%s takes no arguments, got %d", name, len(n.Arguments))
				return
			}
			if !containsString(r.status, name) {
				r.status = append(r.status, name)
			}
			*node = newCall(loc, fnStatus, envNode(loc), strNode(loc, name))
			return
		}
		if spec, ok := overrides[name]; ok {
			if len(n.Arguments) < spec.min || (spec.max >= 0 && len(n.Arguments) > spec.max) {
				r.fail(loc, "%s takes %s, got %d", name, arity(spec.min, spec.max), len(n.Arguments))
				return
			}
			args := append([]ast.Node{envNode(loc)}, n.Arguments...)
			*node = newCall(loc, fnOverridePrefix+name, args...)
			return
		}
		if statusFuncs[name] {
			r.fail(loc, "%s() is only available in a stage's or step's when", name)
			return
		}
		r.fail(loc, "unknown function %s", name)
	default:
		r.fail(loc, "expression is not callable")
	}
}

// lenient makes the lookups of the left operand of ?? return nil for
// anything missing.
func lenient(n ast.Node) {
	for n != nil {
		switch c := n.(type) {
		case *ast.CallNode:
			name := calleeName(c)
			switch {
			case name == fnPath:
				modes := c.Arguments[argPathModes].(*ast.StringNode)
				modes.Value = strings.Repeat(string(rune(modeOptional)), len(modes.Value))
				n = c.Arguments[argPathBase]
			case strings.HasPrefix(name, fnMethodPrefix):
				setMethodMode(c, modeOptional)
				n = c.Arguments[argMethodRecv]
			default:
				return
			}
		case *ast.BinaryNode:
			if c.Operator == "??" {
				lenient(c.Left)
				lenient(c.Right)
			}
			return
		default:
			return
		}
	}
}

// optionalBase makes the lookup left of ?. lenient: a?.b means "a may be
// missing or nil".
// memberMode is how a member access or method call treats a nil base: ?. makes it (and the
// chain below it) optional; a base that already passes nil on propagates it; else nil is an
// error.
func memberMode(optional bool, base ast.Node) byte {
	if optional {
		optionalBase(base)
		return modeOptional
	}
	if nilPropagating(base) {
		return modePropagate
	}
	return modeStrict
}

func optionalBase(n ast.Node) {
	if c, ok := n.(*ast.CallNode); ok && calleeName(c) == fnPath {
		modes := c.Arguments[argPathModes].(*ast.StringNode)
		modes.Value = modes.Value[:len(modes.Value)-1] + string(rune(modeOptional))
	}
}

// nilPropagating reports whether n is a lookup that follows a ?. in its chain.
func nilPropagating(n ast.Node) bool {
	c, ok := n.(*ast.CallNode)
	if !ok {
		return false
	}
	switch name := calleeName(c); {
	case name == fnPath:
		modes := c.Arguments[argPathModes].(*ast.StringNode).Value
		return modes[len(modes)-1] != modeStrict
	case strings.HasPrefix(name, fnMethodPrefix):
		m, ok := c.Arguments[argMethodMode].(*ast.IntegerNode)
		return ok && m.Value != modeStrict
	}
	return false
}

func setMethodMode(c *ast.CallNode, mode int) {
	if m, ok := c.Arguments[argMethodMode].(*ast.IntegerNode); ok {
		m.Value = mode
	}
}

// unbinder turns paths that start at a let-variable into lookups on the variable.
type unbinder string

func (u unbinder) Visit(node *ast.Node) {
	c, ok := (*node).(*ast.CallNode)
	if !ok {
		return
	}
	if name, ok := rootName(c); !ok || name != string(u) {
		return
	}
	id := &ast.IdentifierNode{Value: string(u)}
	id.SetLocation(c.Location())
	keys := c.Arguments[argPathKeys+1:]
	if len(keys) == 0 {
		*node = id
		return
	}
	modes := c.Arguments[argPathModes].(*ast.StringNode)
	modes.Value = modes.Value[1:]
	c.Arguments[argPathPrefix].(*ast.StringNode).Value = string(u)
	c.Arguments[argPathBase] = id
	c.Arguments = append(c.Arguments[:argPathKeys], keys...)
}

// refCollector records the dotted paths read by the rewritten tree: every
// path lookup that starts at a variable, up to its first computed key.
type refCollector struct {
	refs []string
}

func (rc *refCollector) Visit(node *ast.Node) {
	c, ok := (*node).(*ast.CallNode)
	if !ok {
		return
	}
	if _, ok := rootName(c); !ok {
		return
	}
	path := ""
	for _, k := range c.Arguments[argPathKeys:] {
		key, ok := constKey(k)
		if !ok {
			break
		}
		if path == "" {
			path = key.(string)
		} else {
			path = joinPath(path, key)
		}
	}
	if !containsString(rc.refs, path) {
		rc.refs = append(rc.refs, path)
	}
}

func calleeName(c *ast.CallNode) string {
	if id, ok := c.Callee.(*ast.IdentifierNode); ok {
		return id.Value
	}
	return ""
}

// rootName returns the variable a path lookup starts at.
func rootName(c *ast.CallNode) (string, bool) {
	if calleeName(c) != fnPath || len(c.Arguments) <= argPathKeys {
		return "", false
	}
	if id, ok := c.Arguments[argPathBase].(*ast.IdentifierNode); !ok || id.Value != envIdent {
		return "", false
	}
	s, ok := c.Arguments[argPathKeys].(*ast.StringNode)
	if !ok {
		return "", false
	}
	return s.Value, true
}

// varName returns the name of a path that is just a variable (a call's callee).
func varName(c *ast.CallNode) (string, bool) {
	name, ok := rootName(c)
	if !ok || len(c.Arguments) != argPathKeys+1 {
		return "", false
	}
	return name, true
}

// display is the path shown in errors for a value computed by n.
func display(n ast.Node) string {
	switch x := n.(type) {
	case *ast.PointerNode:
		return "#" + x.Name
	case *ast.IdentifierNode:
		return x.Value
	case *ast.CallNode:
		name := calleeName(x)
		switch {
		case name == fnPath:
			path := x.Arguments[argPathPrefix].(*ast.StringNode).Value
			for _, k := range x.Arguments[argPathKeys:] {
				key, ok := constKey(k)
				switch {
				case !ok:
					path += "[...]"
				case path == "":
					path = fmt.Sprint(key)
				default:
					path = joinPath(path, key)
				}
			}
			return path
		case strings.HasPrefix(name, fnMethodPrefix):
			if c, ok := x.Arguments[argMethodCall].(*ast.StringNode); ok {
				return c.Value
			}
		}
	}
	return ""
}

func newPath(loc file.Location, mode byte, prefix string, base, key ast.Node) *ast.CallNode {
	return newCall(loc, fnPath, envNode(loc), strNode(loc, string(rune(mode))), strNode(loc, prefix), base, key)
}

func isConstKey(n ast.Node) bool {
	_, ok := constKey(n)
	return ok
}

func constKey(n ast.Node) (any, bool) {
	switch k := n.(type) {
	case *ast.StringNode:
		return k.Value, true
	case *ast.IntegerNode:
		return k.Value, true
	}
	return nil, false
}

// joinPath appends key to a display path: .name for identifier keys,
// ["key"] for other strings and [n] for indexes.
func joinPath(prefix string, key any) string {
	switch k := key.(type) {
	case string:
		if utils.IsValidIdentifier(k) {
			return prefix + "." + k
		}
		return prefix + "[" + strconv.Quote(k) + "]"
	case int:
		return prefix + "[" + strconv.Itoa(k) + "]"
	}
	return prefix + "[" + fmt.Sprint(key) + "]"
}

// isScalarLiteral reports whether n is a constant string, number, bool or nil.
func isScalarLiteral(n ast.Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NilNode:
		return true
	}
	return false
}

// isLiteral reports whether n is a scalar literal or a list/map literal made
// only of literals (it cannot share another value).
func isLiteral(n ast.Node) bool {
	switch x := n.(type) {
	case *ast.ArrayNode:
		for _, e := range x.Nodes {
			if !isLiteral(e) {
				return false
			}
		}
		return true
	case *ast.MapNode:
		for _, p := range x.Pairs {
			pair, ok := p.(*ast.PairNode)
			if !ok || !isLiteral(pair.Key) || !isLiteral(pair.Value) {
				return false
			}
		}
		return true
	}
	return isScalarLiteral(n)
}

func isNumber(n ast.Node) bool {
	switch n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		return true
	}
	t := n.Type()
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func newCall(loc file.Location, name string, args ...ast.Node) *ast.CallNode {
	callee := &ast.IdentifierNode{Value: name}
	callee.SetLocation(loc)
	c := &ast.CallNode{Callee: callee, Arguments: args}
	c.SetLocation(loc)
	return c
}

func envNode(loc file.Location) ast.Node {
	n := &ast.IdentifierNode{Value: envIdent}
	n.SetLocation(loc)
	return n
}

func intNode(loc file.Location, v int) ast.Node {
	n := &ast.IntegerNode{Value: v}
	n.SetLocation(loc)
	return n
}

func strNode(loc file.Location, v string) ast.Node {
	n := &ast.StringNode{Value: v}
	n.SetLocation(loc)
	return n
}

func arity(min, max int) string {
	switch {
	case max < 0:
		return fmt.Sprintf("at least %d argument(s)", min)
	case min == max && min == 1:
		return "1 argument"
	case min == max:
		return fmt.Sprintf("%d arguments", min)
	}
	return fmt.Sprintf("%d to %d arguments", min, max)
}

func methodNames() []string {
	names := make([]string, 0, len(methods))
	for n := range methods {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
