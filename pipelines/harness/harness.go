// Package harness converts Harness PR-pipeline YAML (root `pipeline:`) into prflow's native
// pipeline YAML, so teams can run their Harness pipelines unchanged. What Harness keeps in its
// SaaS (services, environments, GitOps clusters) comes from a mapping file (Map).
//
// The output is plain native YAML: runs store it, and a restarted controller reloads it with
// pipelines.Load without the map. Every construct the converter cannot carry over is reported
// with its Harness YAML path and line, all in one error; with AllowUnsupported they become
// warnings and the construct is left out.
package harness

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/spelling"
)

// Options control a conversion.
type Options struct {
	Map              *Map
	Inputs           map[string]any // runtime input values (--set): matrix axes over inputs expand with them
	AllowUnsupported bool           // report unsupported constructs as warnings and leave them out
	Registry         *steps.Registry
	// Validate expands matrix axes that need missing inputs to one placeholder combination
	// instead of failing (for `prflow validate`).
	Validate bool
}

// Result is a converted pipeline.
type Result struct {
	Native   []byte              // native prflow YAML
	Pipeline *pipelines.Pipeline // Native, loaded
	Warnings []pipelines.FieldError
}

// IsHarness reports whether src is a Harness pipeline (its root has a `pipeline:` key).
func IsHarness(src []byte) bool {
	var doc yaml.Node
	if yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc) != nil || len(doc.Content) == 0 {
		return false
	}
	return get(deref(doc.Content[0]), "pipeline") != nil
}

// harmless fields carry no behaviour; they are accepted anywhere.
var harmless = []string{"identifier", "name", "description", "tags", "orgIdentifier", "projectIdentifier"}

type conv struct {
	file     string
	o        Options
	errs     []pipelines.FieldError
	warns    []pipelines.FieldError
	inputs   *yaml.Node // native inputs mapping
	inNames  map[string]bool
	pvars    map[string]any // pipeline variable values, for matrix axes
	pvarErr  map[string]string
	envs     []string // native environment names, in first-use order
	envOut   map[string]*envOut
	svc      *ServiceMap
	stageSvc map[string]*ServiceMap // Harness stage identifier → its service
	notes    []string               // written at the top of the native YAML
	budget   int                    // nodes the conversion may still produce
	overrun  bool
	root     *yaml.Node      // the Harness document's root, for paths of native errors
	dropped  map[string]bool // native ids of stages and steps left out (refused)
	typos    map[typo]bool   // fields reported as misspelt, by mapping
}

// typo is a field a mapping (at line:col) lacks because it was misspelt there.
type typo struct {
	line, col int
	field     string
}

type envOut struct {
	m        *EnvMap
	clusters []string // cluster identifiers, in order
}

// stageCtx is what steps of one native stage see.
type stageCtx struct {
	id   string // native stage id
	svc  *ServiceMap
	path string
}

func (c *conv) problem(list *[]pipelines.FieldError, n *yaml.Node, path, format string, a ...any) {
	fe := pipelines.FieldError{File: c.file, Path: path, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		fe.Line, fe.Col = n.Line, n.Column
	}
	*list = append(*list, fe)
}

// bad is an error that --allow-unsupported does not waive (a missing map entry, a bad value).
func (c *conv) bad(n *yaml.Node, path, format string, a ...any) {
	c.problem(&c.errs, n, path, format, a...)
}

// unsupported is a construct prflow cannot carry over: an error, or a warning when allowed.
func (c *conv) unsupported(n *yaml.Node, path, format string, a ...any) {
	if c.o.AllowUnsupported {
		c.problem(&c.warns, n, path, "left out: "+format, a...)
		return
	}
	c.problem(&c.errs, n, path, "unsupported: "+format, a...)
}

func (c *conv) warn(n *yaml.Node, path, format string, a ...any) {
	c.problem(&c.warns, n, path, format, a...)
}

type hfield struct{ k, v *yaml.Node }

// fields reads a Harness mapping. Keys in handled are returned; harmless metadata is accepted;
// every other key is reported as unsupported with its path.
func (c *conv) fields(n *yaml.Node, path string, handled ...string) map[string]hfield {
	out := map[string]hfield{}
	n = deref(n)
	if n == nil {
		return out
	}
	if n.Kind != yaml.MappingNode {
		c.bad(n, path, "want a mapping")
		return out
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if seen[k.Value] {
			// YAML keeps one of the two values: which one was meant is not known.
			c.bad(k, join(path, k.Value), "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		switch {
		case contains(handled, k.Value):
			out[k.Value] = hfield{k, v}
		case contains(harmless, k.Value):
		default:
			// A name close to a known one is a typo, not a Harness feature prflow lacks:
			// leaving it out (--allow-unsupported) would drop its value silently.
			if s := spelling.Closest(k.Value, append(append([]string{}, handled...), harmless...)); s != "" {
				c.bad(k, join(path, k.Value), "unknown field %q (did you mean %q?)", k.Value, s)
				c.typos[typo{n.Line, n.Column, s}] = true
				continue
			}
			c.unsupported(k, join(path, k.Value), "field %q is not supported here", k.Value)
		}
	}
	return out
}

func (c *conv) str(f hfield, path string) string {
	if f.v == nil {
		return ""
	}
	if !isScalar(f.v) {
		c.bad(f.v, path, "want a string")
		return ""
	}
	return f.v.Value
}

// Limits that keep a conversion small: YAML anchors and matrices multiply nodes.
const (
	maxNodes  = 200_000
	maxCombos = 256 // matrix combinations of one stage or step
)

// spend takes n nodes from the budget; false (and one error) when it is used up.
func (c *conv) spend(n int) bool {
	if c.budget -= n; c.budget >= 0 {
		return true
	}
	if !c.overrun {
		c.overrun = true
		c.bad(nil, "pipeline", "the pipeline is too large after expanding anchors and matrices (limit %d nodes)", maxNodes)
	}
	return false
}

// Convert turns a Harness pipeline into native prflow YAML and loads it. Errors are a
// *pipelines.LoadError listing every problem with the Harness path and file:line.
func Convert(file string, src []byte, o Options) (*Result, error) {
	if o.Registry == nil {
		o.Registry = steps.Default
	}
	c := &conv{file: file, o: o, inputs: mapNode(), inNames: map[string]bool{}, pvars: map[string]any{},
		pvarErr: map[string]string{}, envOut: map[string]*envOut{}, stageSvc: map[string]*ServiceMap{}, budget: maxNodes,
		dropped: map[string]bool{}, typos: map[typo]bool{}}
	if len(src) > pipelines.MaxSource {
		return nil, &pipelines.LoadError{Errs: []pipelines.FieldError{{File: file, Msg: fmt.Sprintf("file is %d bytes; the limit is %d", len(src), pipelines.MaxSource)}}}
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc); err != nil {
		return nil, pipelines.SyntaxError(file, src, err)
	}
	if len(doc.Content) == 0 {
		return nil, &pipelines.LoadError{Errs: []pipelines.FieldError{{File: file, Msg: "empty file"}}}
	}
	c.root = doc.Content[0]
	root := c.fields(doc.Content[0], "", "pipeline")
	pf := root["pipeline"]
	if pf.v == nil {
		return nil, &pipelines.LoadError{Errs: []pipelines.FieldError{{File: file, Line: doc.Content[0].Line, Msg: "not a Harness pipeline (no root key `pipeline:`)"}}}
	}
	out := c.pipeline(pf.v, "pipeline")
	if c.overrun {
		// Nothing useful can come of encoding a pipeline that hit the size limit.
		return &Result{Warnings: dedupe(c.warns)}, &pipelines.LoadError{Errs: dedupe(c.errs)}
	}
	native, err := encode(out)
	if err != nil {
		c.bad(pf.v, "pipeline", "encoding the native pipeline: %v", err)
	}
	res := &Result{Native: native}
	if native != nil {
		// The native loader runs even when the converter found problems, so that one
		// conversion reports every problem of the file, not one round at a time.
		clean := len(c.errs) == 0
		p, err := pipelines.Load(file, native, o.Registry)
		if err != nil {
			c.nativeErrors(out, native, err, clean)
		}
		if clean {
			res.Pipeline = p
		}
	}
	res.Warnings = dedupe(c.warns)
	if len(c.errs) > 0 {
		return res, &pipelines.LoadError{Errs: dedupe(c.errs)}
	}
	return res, nil
}

func dedupe(list []pipelines.FieldError) []pipelines.FieldError {
	seen := map[string]bool{}
	var out []pipelines.FieldError
	for _, e := range list {
		if k := e.Error(); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Col < out[j].Col
	})
	return out
}

func encode(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	_ = enc.Close()
	return b.Bytes(), nil
}

// Every native stage and step carries a comment naming the Harness construct it came from;
// native load errors are reported at that place.
var markerRE = regexp.MustCompile(`#\s*from (\S+) line (\d+)\s*$`)

func marker(path string, line int) string { return fmt.Sprintf("from %s line %d", path, line) }

// nativeErrors reports the native loader's problems in the converted pipeline at the Harness
// field they come from. Native nodes copied from the Harness file (values, and the ids, types,
// conditions and timeouts built from Harness nodes) keep that node's line and column: an error
// there is reported at the Harness field itself. Other errors are reported at the Harness stage
// or step the native one came from (its marker comment), unless the converter already found
// problems (clean false): a pipeline with constructs left out may fail only for that reason.
func (c *conv) nativeErrors(out *yaml.Node, native []byte, err error, clean bool) {
	le, ok := err.(*pipelines.LoadError)
	if !ok {
		c.errs = append(c.errs, pipelines.FieldError{File: c.file, Msg: err.Error()})
		return
	}
	lines := strings.Split(string(native), "\n")
	at := make([]mark, len(lines)+2)
	cur := mark{path: "pipeline", line: 1}
	for i, l := range lines {
		if m := markerRE.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[2])
			cur = mark{m[1], n}
		}
		at[i+1] = cur
	}
	origin, onLine := originIndex(out, native)
	paths := pathIndex(c.root)
	reported := map[[2]int]bool{}
	for _, e := range c.errs {
		reported[[2]int{e.Line, e.Col}] = true
	}
	for _, fe := range le.Errs {
		src := origin[[2]int{fe.Line, fe.Col}]
		if src == nil && fe.Col == 0 {
			src = onLine[fe.Line]
		}
		field := fe.Path[strings.LastIndex(fe.Path, ".")+1:]
		if src != nil && src.Kind == yaml.MappingNode {
			// An error about a mapping's field (stages[0].steps[1].id) is at that field
			// when it came from Harness.
			if v := get(src, field); v != nil && v.Line > 0 {
				src = v
			}
		}
		if src != nil {
			pos := [2]int{src.Line, src.Column}
			if reported[pos] || !clean && c.namesDropped(fe.Msg) || c.typos[typo{src.Line, src.Column, field}] {
				continue // the converter's own report covers it
			}
			path, msg := paths[posKind{src.Line, src.Column, src.Kind}], fe.Msg
			switch _, w, ok := strings.Cut(fe.Path, ".with."); {
			case path == "":
				path = markAt(at, fe.Line).path
				msg += " (in the converted pipeline at " + fe.Path + ")"
			case strings.HasSuffix(path, "."+field) || strings.HasSuffix(path, "]"+field):
			case (ok || field == "with") && strings.Contains(path[max(strings.LastIndex(path, ".step"), 0):], ".spec."):
				// a step input's value: the Harness path is the more exact one
			case ok && strings.HasSuffix(path, ".step"):
				path += ".spec." + w // a step input that is missing: the Harness spec field
			case ok && strings.HasSuffix(path, ".spec"):
				path += "." + w
			default:
				msg += " (in the converted pipeline at " + fe.Path + ")"
			}
			c.errs = append(c.errs, pipelines.FieldError{File: c.file, Line: src.Line, Col: src.Column, Path: path, Msg: msg})
			continue
		}
		if !clean {
			continue
		}
		m := markAt(at, fe.Line)
		msg := fe.Msg
		if fe.Path != "" {
			msg = fe.Msg + " (in the converted pipeline at " + fe.Path + ")"
		}
		c.errs = append(c.errs, pipelines.FieldError{File: c.file, Line: m.line, Path: m.path, Msg: msg})
	}
}

type mark struct {
	path string
	line int
}

// markAt is the Harness stage or step the native line came from.
func markAt(at []mark, line int) mark {
	if line > 0 && line < len(at) {
		return at[line]
	}
	return mark{path: "pipeline", line: 1}
}

// namesDropped reports whether msg names a stage or step the converter left out (a reference
// to it fails only because it was left out).
func (c *conv) namesDropped(msg string) bool {
	for id := range c.dropped {
		if strings.Contains(msg, strconv.Quote(id)) {
			return true
		}
	}
	return false
}

type posKind struct {
	line, col int
	kind      yaml.Kind
}

// originIndex parses the native text again and walks it beside the tree it was encoded from:
// for each native line:column, the tree's node when that node carries a Harness position,
// and for each native line the first such node on it.
func originIndex(out *yaml.Node, native []byte) (map[[2]int]*yaml.Node, map[int]*yaml.Node) {
	byPos, byLine := map[[2]int]*yaml.Node{}, map[int]*yaml.Node{}
	var doc yaml.Node
	if yaml.Unmarshal(native, &doc) != nil {
		return byPos, byLine
	}
	var walk func(o, n *yaml.Node)
	walk = func(o, n *yaml.Node) {
		if o == nil || n == nil || o.Kind != n.Kind {
			return
		}
		if o.Line > 0 {
			if k := [2]int{n.Line, n.Column}; byPos[k] == nil {
				byPos[k] = o
			}
			if byLine[n.Line] == nil {
				byLine[n.Line] = o
			}
		}
		if len(o.Content) != len(n.Content) {
			return
		}
		for i := range o.Content {
			walk(o.Content[i], n.Content[i])
		}
	}
	walk(out, &doc)
	return byPos, byLine
}

// pathIndex gives the Harness path (pipeline.stages[0].stage.spec…) of each node of the
// Harness document by position and kind (a mapping starts where its first key does).
func pathIndex(root *yaml.Node) map[posKind]string {
	out := map[posKind]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n == nil || len(out) > maxNodes {
			return
		}
		if k := (posKind{n.Line, n.Column, n.Kind}); out[k] == "" {
			out[k] = path
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := join(path, n.Content[i].Value)
				if k := (posKind{n.Content[i].Line, n.Content[i].Column, n.Content[i].Kind}); out[k] == "" {
					out[k] = p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, x := range n.Content {
				walk(x, itemPath(path, i))
			}
		}
	}
	walk(root, "")
	return out
}

func (c *conv) pipeline(n *yaml.Node, path string) *yaml.Node {
	out := mapNode()
	if c.template(n, path) {
		return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{out}}
	}
	f := c.fields(n, path, "variables", "stages", "timeout", "notificationRules")
	name := "harness"
	if id := get(n, "identifier"); isScalar(id) {
		name = nativeID(id.Value)
	} else if nm := get(n, "name"); isScalar(nm) {
		name = nativeID(nm.Value)
	}
	put(out, "name", strNode(name))
	if d := get(n, "description"); isScalar(d) {
		put(out, "description", strNode(d.Value))
	}
	if t := f["timeout"]; t.v != nil {
		put(out, "timeout", c.timeout(t.v, path+".timeout"))
	}
	vars := c.variables(f["variables"].v, path+".variables", "")
	stages := seqNode()
	if st := f["stages"]; st.v != nil {
		c.stages(st.v, path+".stages", stages)
	} else {
		c.bad(n, path+".stages", "required")
	}
	if len(c.inputs.Content) > 0 {
		put(out, "inputs", c.inputs)
	}
	if len(vars.Content) > 0 {
		put(out, "variables", vars)
	}
	if c.svc != nil {
		s := mapNode()
		put(s, "name", strNode(c.svc.Ref))
		if len(c.svc.Variables) > 0 {
			put(s, "variables", c.namedValues(c.svc.Variables, c.o.Map.File))
		}
		put(out, "service", s)
	}
	if len(c.envs) > 0 {
		envs := seqNode()
		for _, name := range c.envs {
			envs.Content = append(envs.Content, c.environment(c.envOut[name]))
		}
		put(out, "environments", envs)
	}
	put(out, "stages", stages)
	var stageIDs []string
	for _, st := range stages.Content {
		if id := get(st, "id"); isScalar(id) {
			stageIDs = append(stageIDs, id.Value)
		}
	}
	if rules := c.notificationRules(f["notificationRules"], path+".notificationRules", stageIDs); rules != nil {
		put(out, "notifications", rules)
	}
	head := []string{"converted from Harness pipeline " + c.file}
	for _, n := range c.notes {
		if !contains(head, n) {
			head = append(head, n)
		}
	}
	out.HeadComment = strings.Join(head, "\n")
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{out}}
}

func (c *conv) namedValues(list []NamedValue, _ string) *yaml.Node {
	m := mapNode()
	for _, v := range list {
		put(m, v.Name, noPos(c.clone(v.Value, func(s string) string { r, _ := rewriteExpr(s); return r })))
	}
	return m
}

func (c *conv) environment(e *envOut) *yaml.Node {
	m := mapNode()
	put(m, "name", strNode(e.m.Name))
	if e.m.Group != "" {
		put(m, "group", strNode(e.m.Group))
	}
	cl := seqNode()
	for _, id := range e.clusters {
		cm := c.o.Map.Clusters[id]
		x := mapNode()
		put(x, "name", strNode(cm.Name))
		put(x, "agent", strNode(cm.Agent))
		x.Style = yaml.FlowStyle
		cl.Content = append(cl.Content, x)
	}
	if len(cl.Content) > 0 {
		put(m, "clusters", cl)
	}
	if len(e.m.Variables) > 0 {
		put(m, "variables", c.namedValues(e.m.Variables, ""))
	}
	if len(e.m.Overrides) > 0 {
		put(m, "overrides", c.namedValues(e.m.Overrides, ""))
	}
	return m
}

// variables converts a Harness variable list ({name, type, value}) into a native mapping.
// Runtime inputs become native inputs; stage is "" for pipeline variables.
func (c *conv) variables(n *yaml.Node, path, stage string) *yaml.Node {
	out := mapNode()
	n = deref(n)
	if n == nil {
		return out
	}
	if n.Kind != yaml.SequenceNode {
		c.bad(n, path, "want a list of {name, type, value}")
		return out
	}
	for i, vn := range n.Content {
		p := itemPath(path, i)
		f := c.fields(vn, p, "name", "type", "value", "default", "required")
		name := c.str(f["name"], p+".name")
		if name == "" {
			c.bad(vn, p+".name", "required")
			continue
		}
		typ := c.str(f["type"], p+".type")
		switch typ {
		case "", "String", "Number":
		case "Secret":
			c.unsupported(f["type"].v, p+".type", "Secret variables (prflow keeps secrets on workers: use a connector)")
			continue
		default:
			c.unsupported(f["type"].v, p+".type", "variable type %q", typ)
			continue
		}
		val := f["value"].v
		if d := f["default"].v; val == nil {
			val = d
		} else if isScalar(d) && isScalar(val) && strings.TrimSpace(val.Value) == "<+input>" {
			// A variable's separate `default:` is its runtime input's default.
			cp := *val
			cp.Value = "<+input>.default(" + strconv.Quote(d.Value) + ")"
			val = &cp
		}
		if val == nil {
			val = strNode("")
		}
		in := inputName(name)
		if stage != "" {
			in = inputName(stage, name)
		}
		vt := typ
		if vt == "" {
			vt = "String" // Harness's default variable type
		}
		nv, lit := c.value(val, p+".value", in, vt)
		put(out, name, nv)
		if stage == "" && (f["value"].v != nil || f["default"].v != nil) {
			if lit.err != "" {
				c.pvarErr[name] = lit.err
			} else {
				c.pvars[name] = lit.v
			}
		}
	}
	return out
}

type resolved struct {
	v   any
	err string // why the value is not known at conversion time
}

// value converts one Harness scalar value: <+input> markers become native inputs named in,
// expressions are rewritten. It also returns the value as known now (for matrix axes).
func (c *conv) value(n *yaml.Node, path, in, typ string) (*yaml.Node, resolved) {
	n = deref(n)
	if !isScalar(n) {
		out := c.clone(n, func(s string) string { return c.expr(s, n, path) })
		if out == nil {
			out = strNode("")
		}
		return out, resolved{err: "not a scalar"}
	}
	if ri, ok := parseInput(n.Value); ok {
		for _, p := range ri.probs {
			c.unsupported(n, path, "%s", p)
		}
		c.declareInput(in, typ, ri)
		if v, ok := c.o.Inputs[in]; ok {
			return strNode("<+inputs." + in + ">"), resolved{v: v}
		}
		if ri.def != nil {
			return strNode("<+inputs." + in + ">"), resolved{v: *ri.def}
		}
		return strNode("<+inputs." + in + ">"), resolved{err: fmt.Sprintf("input %q has no value: give it with --set %s=…", in, in)}
	}
	out := c.clone(n, func(s string) string { return c.expr(s, n, path) })
	if out == nil {
		return strNode(""), resolved{err: "too large"}
	}
	if typ == "String" && out.Tag != "!!str" {
		// A String variable is its text as written: 1.10, 0755 and 2024-01-02 must not come
		// back as 1.1, 493 and a timestamp. Tagged !!str, the native YAML quotes it.
		out.Tag, out.Style = "!!str", yaml.DoubleQuotedStyle
		return out, resolved{v: out.Value}
	}
	if out.Tag == "!!str" && strings.Contains(out.Value, "<+") {
		return out, c.evalNow(out.Value)
	}
	var v any
	_ = n.Decode(&v)
	return out, resolved{v: v}
}

// expr rewrites Harness expression paths in s, reporting what cannot be carried over.
func (c *conv) expr(s string, n *yaml.Node, path string) string {
	if strings.Contains(s, "<+input>") {
		c.unsupported(n, path, "<+input> is supported only as a whole value of a variable or step field")
		return s
	}
	out, probs := rewriteExpr(s)
	for _, p := range probs {
		c.unsupported(n, path, "%s", p)
	}
	return out
}

func (c *conv) declareInput(name, typ string, ri *runtimeInput) {
	if c.inNames[name] {
		return
	}
	c.inNames[name] = true
	d := mapNode()
	d.Style = yaml.FlowStyle
	t := "string"
	if typ == "Number" {
		t = "number"
	}
	put(d, "type", strNode(t))
	if ri.def != nil {
		put(d, "default", typedScalar(*ri.def, t))
	} else {
		put(d, "required", boolNode(true))
	}
	if len(ri.allowed) > 0 {
		a := seqNode()
		a.Style = yaml.FlowStyle
		for _, x := range ri.allowed {
			a.Content = append(a.Content, typedScalar(x, t))
		}
		put(d, "allowed", a)
	}
	put(c.inputs, name, d)
}

func typedScalar(s, typ string) *yaml.Node {
	if typ == "number" {
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return &yaml.Node{Kind: yaml.ScalarNode, Value: s}
		}
	}
	return strNode(s)
}

func (c *conv) timeout(n *yaml.Node, path string) *yaml.Node {
	if !isScalar(n) {
		c.bad(n, path, "want a duration such as 10m")
		return nil
	}
	if strings.Contains(n.Value, "<+") {
		c.unsupported(n, path, "a timeout given as an expression or runtime input")
		return nil
	}
	return at(strNode(n.Value), n)
}

// Converter returns a function for controller.WithSourceConverter: Harness sources are
// converted with the map and the run's inputs (warnings are logged), native ones pass through.
func Converter(m *Map, reg *steps.Registry, allowUnsupported bool, log *slog.Logger) func(file string, src []byte, inputs map[string]any) ([]byte, error) {
	return func(file string, src []byte, inputs map[string]any) ([]byte, error) {
		if !IsHarness(src) {
			return src, nil
		}
		res, err := Convert(file, src, Options{Map: m, Inputs: inputs, AllowUnsupported: allowUnsupported, Registry: reg})
		if err != nil {
			return nil, err
		}
		for _, w := range res.Warnings {
			log.Warn("Harness pipeline", "warning", w.Error())
		}
		return res.Native, nil
	}
}

// template reports a stage, step, step group or pipeline that uses a Harness template
// (template.templateRef): the template's body lives in Harness, so prflow cannot convert it.
func (c *conv) template(n *yaml.Node, path string) bool {
	t := deref(get(n, "template"))
	if t == nil {
		return false
	}
	at, ref, ver := t, "", ""
	if r := get(t, "templateRef"); isScalar(r) {
		at, ref = r, r.Value
	}
	if v := get(t, "versionLabel"); isScalar(v) {
		ver = ", versionLabel " + strconv.Quote(v.Value)
	}
	c.unsupported(at, path+".template", "templates are not supported: inline it (templateRef %q%s is kept in Harness; paste the template's YAML here in its place)", ref, ver)
	return true
}
