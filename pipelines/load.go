package pipelines

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/duration"
	"github.com/prflow/prflow/steps/template"
	"github.com/prflow/prflow/yamlconf"
)

// FieldError is one problem in a pipeline file, with where it is.
type FieldError struct {
	File string
	Line int
	Col  int
	Path string // e.g. stages[1].steps[0].with.prNumber
	Msg  string
}

func (e FieldError) Error() string { return e.conf().Error() }

func (e FieldError) conf() *yamlconf.Error {
	return &yamlconf.Error{File: e.File, Line: e.Line, Column: e.Col, Field: e.Path, Msg: e.Msg}
}

// LoadError lists every problem found in one file.
type LoadError struct{ Errs []FieldError }

func (e *LoadError) Error() string {
	es := make(yamlconf.Errors, len(e.Errs))
	for i, fe := range e.Errs {
		es[i] = fe.conf()
	}
	return es.Error()
}

// MaxSource is the largest pipeline file accepted.
const MaxSource = 1 << 20

// LoadFile reads and loads a pipeline file.
func LoadFile(path string, reg *steps.Registry) (*Pipeline, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(path, src, reg)
}

// Load parses and validates a pipeline. All problems are reported together.
func Load(file string, src []byte, reg *steps.Registry) (*Pipeline, error) {
	if reg == nil {
		reg = steps.Default
	}
	l := &loader{file: file, reg: reg}
	// yamlconf parses (size limit, syntax errors at the mistake's line, one document); the
	// walk below is still this loader's own.
	d, err := yamlconf.Parse(file, src, yamlconf.MaxBytes(MaxSource))
	if err != nil {
		return nil, FromYAMLConf(err)
	}
	if d.Root == nil {
		return nil, &LoadError{[]FieldError{{File: file, Msg: "empty file"}}}
	}
	root := d.Root
	p := &Pipeline{File: file, Source: src}
	sum := sha256.Sum256(src)
	p.Hash = hex.EncodeToString(sum[:16])
	if root.Kind == yaml.MappingNode && findKey(root, "pipeline") != nil {
		l.errf(root, "", "this is a Harness pipeline (root key `pipeline:`): run it with --harness-map FILE (services, environments and GitOps clusters), or convert it with `prflow import harness FILE --harness-map MAP`")
		return nil, l.result()
	}
	l.pipeline(root, p)
	if err := l.result(); err != nil {
		return nil, err
	}
	return p, nil
}

var idRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

type loader struct {
	file string
	reg  *steps.Registry
	errs []FieldError
	text map[*yaml.Node]bool // scalars of string-typed step inputs: value() keeps their text
}

func (l *loader) errf(n *yaml.Node, path, format string, a ...any) {
	fe := FieldError{File: l.file, Path: path, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		fe.Line, fe.Col = n.Line, n.Column
	}
	l.errs = append(l.errs, fe)
}

func (l *loader) result() error {
	if len(l.errs) == 0 {
		return nil
	}
	sort.SliceStable(l.errs, func(i, j int) bool { return l.errs[i].Line < l.errs[j].Line })
	return &LoadError{Errs: l.errs}
}

type field struct {
	key *yaml.Node
	val *yaml.Node
}

// fields reads a mapping, reporting keys not in allowed and duplicate keys.
func (l *loader) fields(n *yaml.Node, path string, allowed ...string) map[string]field {
	out := map[string]field{}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		l.errf(n, path, "want a mapping, got %s", kindName(n))
		return out
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias // YAML anchors let stages share step lists
		}
		name := k.Value
		if _, dup := out[name]; dup {
			l.errf(k, join(path, name), "duplicate key")
			continue
		}
		if !ok[name] {
			l.errf(k, join(path, name), "unknown field (allowed: %s)", strings.Join(allowed, ", "))
			continue
		}
		out[name] = field{k, v}
	}
	return out
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "a scalar (" + strings.TrimPrefix(n.Tag, "!!") + ")"
	case yaml.AliasNode:
		return "an alias"
	}
	return "unknown"
}

func (l *loader) str(f field, path string) string {
	if f.val == nil {
		return ""
	}
	if f.val.Kind != yaml.ScalarNode || f.val.Tag == "!!null" {
		l.errf(f.val, path, "want a string, got %s", kindName(f.val))
		return ""
	}
	return f.val.Value
}

func (l *loader) boolean(f field, path string) bool {
	if f.val == nil {
		return false
	}
	var b bool
	if f.val.Kind != yaml.ScalarNode || f.val.Decode(&b) != nil {
		l.errf(f.val, path, "want true or false, got %q", f.val.Value)
	}
	return b
}

func (l *loader) integer(f field, path string) int {
	if f.val == nil {
		return 0
	}
	var i int
	if f.val.Kind != yaml.ScalarNode || f.val.Decode(&i) != nil || i < 0 {
		l.errf(f.val, path, "want a whole number ≥ 0, got %q", f.val.Value)
	}
	return i
}

func (l *loader) dur(f field, path string) int64 {
	s := l.str(f, path)
	if s == "" {
		return 0
	}
	d, err := duration.Parse(s)
	if err != nil {
		l.errf(f.val, path, "%v", err)
	}
	return int64(d)
}

func (l *loader) strList(f field, path string) []string {
	if f.val == nil {
		return nil
	}
	if f.val.Kind == yaml.ScalarNode && f.val.Tag != "!!null" {
		return []string{f.val.Value}
	}
	if f.val.Kind != yaml.SequenceNode {
		l.errf(f.val, path, "want a list of strings, got %s", kindName(f.val))
		return nil
	}
	out := []string{}
	for i, c := range f.val.Content {
		out = append(out, l.str(field{val: c}, fmt.Sprintf("%s[%d]", path, i)))
	}
	return out
}

func (l *loader) cond(f field, path string, opts ...template.Option) *template.Template {
	if f.val == nil {
		return nil
	}
	if f.val.Kind == yaml.ScalarNode && f.val.Tag == "!!bool" {
		s := f.val.Value
		t, _ := template.CompileCondition(s)
		return t
	}
	s := l.str(f, path)
	if s == "" {
		return nil
	}
	t, err := template.CompileCondition(s, opts...)
	if err != nil {
		l.exprErr(f.val, path, err)
		return nil
	}
	return t
}

func (l *loader) exprErr(n *yaml.Node, path string, err error) {
	var te *template.Error
	col := 0
	if errors.As(err, &te) && n.Style == 0 && n.Kind == yaml.ScalarNode {
		col = te.Offset // plain scalars on one line: the offset maps to a column
	}
	fe := FieldError{File: l.file, Line: n.Line, Col: n.Column + col, Path: path, Msg: err.Error()}
	l.errs = append(l.errs, fe)
}

// value converts a YAML node into a Value, compiling expressions in strings.
func (l *loader) value(n *yaml.Node, path string) *Value {
	v := &Value{Line: n.Line}
	switch n.Kind {
	case yaml.AliasNode:
		return l.value(n.Alias, path)
	case yaml.MappingNode:
		v.Map = map[string]*Value{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if _, dup := v.Map[k]; dup {
				l.errf(n.Content[i], join(path, k), "duplicate key")
				continue
			}
			v.Keys = append(v.Keys, k)
			v.Map[k] = l.value(n.Content[i+1], join(path, k))
		}
	case yaml.SequenceNode:
		v.List = []*Value{}
		for i, c := range n.Content {
			v.List = append(v.List, l.value(c, fmt.Sprintf("%s[%d]", path, i)))
		}
	case yaml.ScalarNode:
		if n.Tag == "!!str" && template.Contains(n.Value) {
			t, err := template.Compile(n.Value)
			if err != nil {
				l.exprErr(n, path, err)
				return v
			}
			v.Tmpl = t
			return v
		}
		if l.text[n] || n.Tag == "!!timestamp" {
			// A string input's value is its text as written: 1.10 stays "1.10", 0755 stays
			// "0755". A date is never wanted as a time (it would come back reformatted).
			v.Lit = n.Value
			if n.Tag == "!!str" {
				v.Lit = template.Unescape(n.Value) // an escaped delimiter alone is literal text too
			}
			return v
		}
		if n.Tag == "!!str" {
			v.Lit = template.Unescape(n.Value)
			return v
		}
		var x any
		if err := n.Decode(&x); err != nil {
			l.errf(n, path, "%v", err)
		}
		v.Lit = x
	}
	return v
}

func (l *loader) pipeline(root *yaml.Node, p *Pipeline) {
	l.expandPromotion(root) // promotion: becomes ordinary stages (promotion.go)
	f := l.fields(root, "", "name", "description", "variables", "inputs", "environments", "service", "stages", "timeout", "promotion", "triggers", "cleanup", "notifications")
	p.Name = l.str(f["name"], "name")
	if p.Name == "" {
		l.errf(root, "name", "required")
	} else if !idRE.MatchString(p.Name) {
		l.errf(f["name"].val, "name", "%q: use letters, digits, - and _ (start with a letter, ≤ 63 chars)", p.Name)
	}
	p.Description = l.str(f["description"], "description")
	p.Timeout = timeDur(l.dur(f["timeout"], "timeout"))
	p.Variables = l.variables(f["variables"], "variables")
	if fv := f["inputs"]; fv.val != nil {
		l.inputs(fv.val, p)
	}
	if fv := f["environments"]; fv.val != nil {
		l.environments(fv.val, p)
	}
	if fv := f["service"]; fv.val != nil {
		sf := l.fields(fv.val, "service", "name", "variables")
		p.Service = &Service{Name: l.str(sf["name"], "service.name"), Variables: l.variables(sf["variables"], "service.variables")}
	}
	p.Triggers = l.triggers(f["triggers"], p)
	p.Cleanup = l.cleanup(f["cleanup"])
	p.Notifications = l.notifications(f["notifications"])
	st := f["stages"]
	if st.val == nil {
		l.errf(root, "stages", "required: a pipeline needs at least one stage")
		return
	}
	if st.val.Kind != yaml.SequenceNode || len(st.val.Content) == 0 {
		l.errf(st.val, "stages", "want a non-empty list of stages")
		return
	}
	seen := map[string]bool{}
	for i, sn := range st.val.Content {
		s := l.stage(sn, fmt.Sprintf("stages[%d]", i), p)
		if s == nil {
			continue
		}
		if seen[s.ID] {
			l.errf(sn, fmt.Sprintf("stages[%d].id", i), "duplicate stage id %q", s.ID)
		}
		seen[s.ID] = true
		p.Stages = append(p.Stages, s)
	}
	l.checkNeeds(p, st.val)
	l.checkRefs(p)
	l.checkNotifyStages(p, f["notifications"])
}

func (l *loader) variables(f field, path string) []Variable {
	if f.val == nil {
		return nil
	}
	var out []Variable
	switch f.val.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(f.val.Content); i += 2 {
			k := f.val.Content[i]
			if !idRE.MatchString(k.Value) {
				l.errf(k, join(path, k.Value), "variable names use letters, digits, - and _")
			}
			out = append(out, Variable{Name: k.Value, Value: l.value(f.val.Content[i+1], join(path, k.Value))})
		}
	default:
		l.errf(f.val, path, "want a mapping of name: value, got %s", kindName(f.val))
	}
	return out
}

func (l *loader) inputs(n *yaml.Node, p *Pipeline) {
	if n.Kind != yaml.MappingNode {
		l.errf(n, "inputs", "want a mapping of input name → {type, default, required, description}")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "inputs." + k.Value
		in := Input{Name: k.Value, Type: "string"}
		if !idRE.MatchString(k.Value) {
			l.errf(k, path, "input names use letters, digits, - and _")
		}
		f := l.fields(v, path, "type", "default", "required", "description", "allowed")
		if t := l.str(f["type"], path+".type"); t != "" {
			if t != "string" && t != "number" && t != "boolean" {
				l.errf(f["type"].val, path+".type", "want string, number or boolean, got %q", t)
			}
			in.Type = t
		}
		if d := f["default"]; d.val != nil {
			_ = d.val.Decode(&in.Default)
			if in.Type == "string" && d.val.Kind == yaml.ScalarNode && d.val.Tag != "!!null" {
				in.Default = d.val.Value // as written: a default of 1.10 is "1.10"
			}
		}
		if a := f["allowed"]; a.val != nil {
			if a.val.Decode(&in.Allowed) != nil || a.val.Kind != yaml.SequenceNode {
				l.errf(a.val, path+".allowed", "want a list of values")
			} else if in.Type == "string" {
				for i, c := range a.val.Content {
					if c.Kind == yaml.ScalarNode && c.Tag != "!!null" && i < len(in.Allowed) {
						in.Allowed[i] = c.Value
					}
				}
			}
		}
		in.Required = l.boolean(f["required"], path+".required")
		in.Description = l.str(f["description"], path+".description")
		p.Inputs = append(p.Inputs, in)
	}
}

func (l *loader) environments(n *yaml.Node, p *Pipeline) {
	if n.Kind != yaml.SequenceNode {
		l.errf(n, "environments", "want a list of environments")
		return
	}
	for i, en := range n.Content {
		path := fmt.Sprintf("environments[%d]", i)
		f := l.fields(en, path, "name", "group", "clusters", "variables", "overrides")
		e := Environment{Name: l.str(f["name"], path+".name"), Group: l.str(f["group"], path+".group"),
			Variables: l.variables(f["variables"], path+".variables"), Overrides: l.variables(f["overrides"], path+".overrides")}
		if e.Name == "" {
			l.errf(en, path+".name", "required")
		} else if p.Env(e.Name) != nil {
			l.errf(f["name"].val, path+".name", "duplicate environment %q", e.Name)
		}
		if c := f["clusters"]; c.val != nil {
			if c.val.Kind != yaml.SequenceNode {
				l.errf(c.val, path+".clusters", "want a list of {name, agent}")
			} else {
				for j, cn := range c.val.Content {
					cp := fmt.Sprintf("%s.clusters[%d]", path, j)
					cf := l.fields(cn, cp, "name", "agent")
					cl := Cluster{Name: l.str(cf["name"], cp+".name"), Agent: l.str(cf["agent"], cp+".agent")}
					if cl.Name == "" {
						l.errf(cn, cp+".name", "required")
					}
					e.Clusters = append(e.Clusters, cl)
				}
			}
		}
		p.Environments = append(p.Environments, e)
	}
}

func (l *loader) failure(f field, path string) *FailureStrategy {
	if f.val == nil {
		return nil
	}
	fs := &FailureStrategy{}
	if f.val.Kind == yaml.ScalarNode {
		fs.Action = f.val.Value
	} else {
		m := l.fields(f.val, path, "action", "retries", "backoff", "then", "manual")
		fs.Action = l.str(m["action"], path+".action")
		fs.Retries = l.integer(m["retries"], path+".retries")
		fs.Backoff = timeDur(l.dur(m["backoff"], path+".backoff"))
		fs.Then = l.str(m["then"], path+".then")
		if mf := m["manual"]; mf.val != nil {
			if fs.Action != "" && fs.Action != ActManual {
				l.errf(mf.val, path+".manual", "manual decides instead of action %q: give one of them", fs.Action)
			}
			fs.Action, fs.Manual = ActManual, l.manual(mf, path+".manual")
		}
	}
	valid := map[string]bool{ActFail: true, ActIgnore: true, ActRetry: true, ActRollbackStage: true, ActRollbackPipeline: true}
	switch {
	case fs.Action == ActManual && fs.Manual == nil:
		fs.Manual = &ManualStrategy{Timeout: DefaultManualTimeout} // onFailure: manual
	case !valid[fs.Action] && fs.Action != ActManual:
		l.errf(f.val, path+".action", "unknown action %q (want fail, ignore, retry, rollbackStage, rollbackPipeline or manual)", fs.Action)
	}
	if fs.Action == ActRetry && fs.Retries == 0 {
		fs.Retries = 1
	}
	if fs.Then != "" && (!valid[fs.Then] || fs.Then == ActRetry) {
		l.errf(f.val, path+".then", "unknown action %q (want fail, ignore, rollbackStage or rollbackPipeline)", fs.Then)
	}
	if fs.Backoff == 0 {
		fs.Backoff = timeDur(int64(1e9))
	}
	return fs
}

// DefaultManualTimeout is how long a manual intervention waits when its timeout is not given.
const DefaultManualTimeout = 24 * time.Hour

// manual reads onFailure.manual: {timeout, onTimeout, approvers}.
func (l *loader) manual(f field, path string) *ManualStrategy {
	ms := &ManualStrategy{Timeout: DefaultManualTimeout}
	if f.val.Kind != yaml.MappingNode {
		l.errf(f.val, path, "want {timeout, onTimeout, approvers}, got %s", kindName(f.val))
		return ms
	}
	m := l.fields(f.val, path, "timeout", "onTimeout", "approvers")
	if d := timeDur(l.dur(m["timeout"], path+".timeout")); d > 0 {
		ms.Timeout = d
	} else if m["timeout"].val != nil {
		l.errf(m["timeout"].val, path+".timeout", "want a duration > 0 (e.g. 2h), got %q", m["timeout"].val.Value)
	}
	ms.OnTimeout = l.str(m["onTimeout"], path+".onTimeout")
	switch ms.OnTimeout {
	case "", ActFail, ActIgnore, ActRollbackStage, ActRollbackPipeline:
	default:
		l.errf(m["onTimeout"].val, path+".onTimeout", "unknown action %q (want fail, ignore, rollbackStage or rollbackPipeline)", ms.OnTimeout)
	}
	if a := m["approvers"]; a.val != nil {
		ms.Approvers = &steps.Approvers{}
		for i, who := range l.strList(a, path+".approvers") {
			switch g, isGroup := strings.CutPrefix(who, "group:"); {
			case strings.TrimSpace(g) == "":
				l.errf(a.val, fmt.Sprintf("%s.approvers[%d]", path, i), "want a user name or group:NAME, got %q", who)
			case isGroup:
				ms.Approvers.Groups = append(ms.Approvers.Groups, g)
			default:
				ms.Approvers.Users = append(ms.Approvers.Users, who)
			}
		}
		if len(ms.Approvers.Users)+len(ms.Approvers.Groups) == 0 {
			l.errf(a.val, path+".approvers", "empty: nobody could decide (leave approvers out to let anyone authenticated decide)")
		}
	}
	return ms
}

func (l *loader) stage(n *yaml.Node, path string, p *Pipeline) *Stage {
	f := l.fields(n, path, "id", "name", "needs", "environment", "clusters", "when", "timeout", "onFailure", "variables", "steps", "rollbackSteps", "gate")
	s := &Stage{Line: n.Line}
	s.ID = l.str(f["id"], path+".id")
	s.Name = l.str(f["name"], path+".name")
	if s.ID == "" {
		s.ID = slug(s.Name)
	}
	if s.ID == "" {
		l.errf(n, path+".id", "required (or give a name)")
		return nil
	}
	if !idRE.MatchString(s.ID) {
		l.errf(n, path+".id", "%q: use letters, digits, - and _ (start with a letter)", s.ID)
	}
	if s.Name == "" {
		s.Name = s.ID
	}
	if nf := f["needs"]; nf.val != nil {
		s.NeedsSet = true
		s.Needs = l.strList(nf, path+".needs")
	}
	s.Environment = l.str(f["environment"], path+".environment")
	if s.Environment != "" && !template.Contains(s.Environment) && p.Env(s.Environment) == nil {
		l.errf(f["environment"].val, path+".environment", "unknown environment %q (declare it under environments:)", s.Environment)
	}
	s.Clusters = l.strList(f["clusters"], path+".clusters")
	if env := p.Env(s.Environment); env != nil {
		for i, c := range s.Clusters {
			found := false
			for _, ec := range env.Clusters {
				found = found || ec.Name == c
			}
			if !found {
				l.errf(f["clusters"].val, fmt.Sprintf("%s.clusters[%d]", path, i), "environment %q has no cluster %q", s.Environment, c)
			}
		}
	}
	s.When = l.cond(f["when"], path+".when", template.WithStatusFunctions())
	s.Timeout = timeDur(l.dur(f["timeout"], path+".timeout"))
	s.OnFailure = l.failure(f["onFailure"], path+".onFailure")
	s.Variables = l.variables(f["variables"], path+".variables")
	s.Steps = l.stepList(f["steps"], path+".steps", true)
	s.Rollback = l.stepList(f["rollbackSteps"], path+".rollbackSteps", false)
	if g := f["gate"]; g.val != nil {
		if st := l.gate(g, path+".gate"); st != nil {
			s.Steps = append(s.Steps, st)
		}
	}
	l.checkLinkedApps(s, p, path)
	ids := map[string]bool{}
	for _, list := range [][]*Step{s.Steps, s.Rollback} {
		for _, st := range list {
			if ids[st.ID] {
				l.errs = append(l.errs, FieldError{File: l.file, Line: st.Line, Path: path, Msg: fmt.Sprintf("duplicate step id %q in stage %q", st.ID, s.ID)})
			}
			ids[st.ID] = true
		}
	}
	return s
}

func (l *loader) stepList(f field, path string, required bool) []*Step {
	if f.val == nil {
		if required {
			l.errf(f.key, path, "required: a stage needs at least one step")
		}
		return nil
	}
	if f.val.Kind != yaml.SequenceNode || (required && len(f.val.Content) == 0) {
		l.errf(f.val, path, "want a non-empty list of steps")
		return nil
	}
	var out []*Step
	for i, sn := range f.val.Content {
		if st := l.step(sn, fmt.Sprintf("%s[%d]", path, i)); st != nil {
			out = append(out, st)
		}
	}
	return out
}

func (l *loader) step(n *yaml.Node, path string) *Step {
	f := l.fields(n, path, "id", "name", "type", "with", "when", "timeout", "pool", "onFailure")
	st := &Step{Line: n.Line}
	st.ID = l.str(f["id"], path+".id")
	st.Name = l.str(f["name"], path+".name")
	if st.ID == "" {
		st.ID = slug(st.Name)
	}
	if st.ID == "" {
		l.errf(n, path+".id", "required (or give a name)")
		return nil
	}
	if !idRE.MatchString(st.ID) {
		l.errf(n, path+".id", "%q: use letters, digits, - and _ (start with a letter)", st.ID)
	}
	typ := l.str(f["type"], path+".type")
	def, ok := l.reg.Lookup(typ)
	switch {
	case typ == "":
		l.errf(n, path+".type", "required (one of %s)", strings.Join(userTypes(l.reg), ", "))
	case !ok:
		msg := fmt.Sprintf("unknown step type %q", typ)
		if s := suggest(typ, userTypes(l.reg)); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		l.errf(f["type"].val, path+".type", "%s (known: %s)", msg, strings.Join(userTypes(l.reg), ", "))
	case def.Internal:
		l.errf(f["type"].val, path+".type", "step type %q is internal to prflow and cannot be used in a pipeline%s (known: %s)",
			typ, internalHint(def.Type), strings.Join(userTypes(l.reg), ", "))
		ok = false
	default:
		st.Type = def.Type
	}
	inputsOK := true
	if ok {
		inputsOK = l.checkWith(def, n, f["with"].val, path)
	}
	if w := f["with"]; w.val != nil {
		if w.val.Kind != yaml.MappingNode {
			l.errf(w.val, path+".with", "want a mapping of inputs, got %s", kindName(w.val))
		} else {
			st.With = l.value(w.val, path+".with")
		}
	}
	if ok && inputsOK && def.Validate != nil {
		if err := def.Validate(st.With.Static()); err != nil {
			line, at := n, path+".with"
			if w := f["with"]; w.val != nil {
				line = w.val
			}
			// An error about one input points at that input.
			var ie *steps.InputError
			if errors.As(err, &ie) {
				if fn := nodeAt(line, ie.Field); fn != nil {
					line, at, err = fn, at+"."+ie.Field, ie.Err
				}
			}
			l.errf(line, at, "%v", err)
		}
	}
	st.When = l.cond(f["when"], path+".when", template.WithStatusFunctions())
	st.Timeout = timeDur(l.dur(f["timeout"], path+".timeout"))
	st.Pool = l.str(f["pool"], path+".pool")
	st.OnFailure = l.failure(f["onFailure"], path+".onFailure")
	return st
}

// gate turns a stage's `gate: {condition, soak, timeout}` into its last step, a StageGate.
// The condition is evaluated on the worker over the apps' live status (`apps`), so it is kept
// as text here and only checked for syntax.
func (l *loader) gate(f field, path string) *Step {
	m := l.fields(f.val, path, "condition", "soak", "timeout", "agentOutageTimeout")
	cond := l.str(m["condition"], path+".condition")
	soak := l.str(m["soak"], path+".soak")
	if cond == "" && soak == "" {
		l.errf(f.val, path, "give a condition, a soak time or both")
		return nil
	}
	if cond != "" {
		if _, err := template.CompileCondition(cond); err != nil {
			l.exprErr(m["condition"].val, path+".condition", err)
		}
	}
	if soak != "" {
		if _, err := duration.Parse(soak); err != nil {
			l.errf(m["soak"].val, path+".soak", "%v", err)
		}
	}
	outage := l.str(m["agentOutageTimeout"], path+".agentOutageTimeout")
	if outage != "" {
		if _, err := duration.Parse(outage); err != nil {
			l.errf(m["agentOutageTimeout"].val, path+".agentOutageTimeout", "%v", err)
		}
	}
	with := &Value{Map: map[string]*Value{}, Line: f.val.Line}
	for k, v := range map[string]string{"condition": cond, "soak": soak, "agentOutageTimeout": outage} {
		if v != "" {
			with.Keys = append(with.Keys, k)
			with.Map[k] = &Value{Lit: v, Line: f.val.Line}
		}
	}
	sort.Strings(with.Keys)
	typ := "StageGate"
	if _, ok := l.reg.Lookup(typ); !ok {
		l.errf(f.val, path, "this build has no StageGate step")
		return nil
	}
	return &Step{ID: "gate", Name: "stage gate", Type: typ, With: with, Timeout: timeDur(l.dur(m["timeout"], path+".timeout")), Line: f.val.Line}
}

func (l *loader) checkNeeds(p *Pipeline, stagesNode *yaml.Node) {
	idx := map[string]int{}
	for i, s := range p.Stages {
		idx[s.ID] = i
	}
	for i, s := range p.Stages {
		for _, n := range s.Needs {
			if _, ok := idx[n]; !ok {
				l.errs = append(l.errs, FieldError{File: l.file, Line: s.Line, Path: fmt.Sprintf("stages[%d].needs", i), Msg: fmt.Sprintf("unknown stage %q", n)})
			} else if n == s.ID {
				l.errs = append(l.errs, FieldError{File: l.file, Line: s.Line, Path: fmt.Sprintf("stages[%d].needs", i), Msg: "a stage cannot need itself"})
			}
		}
	}
	// Cycles: depth-first search over the needs graph.
	state := make([]int, len(p.Stages))
	var visit func(i int) bool
	visit = func(i int) bool {
		if state[i] == 1 {
			return true
		}
		if state[i] == 2 {
			return false
		}
		state[i] = 1
		for _, d := range p.Deps(i) {
			if visit(d) {
				return true
			}
		}
		state[i] = 2
		return false
	}
	for i := range p.Stages {
		if visit(i) {
			l.errs = append(l.errs, FieldError{File: l.file, Line: p.Stages[i].Line, Path: fmt.Sprintf("stages[%d].needs", i), Msg: "stages need each other in a cycle"})
			return
		}
	}
	_ = stagesNode
}

// Deps returns the indexes of the stages stage i waits for.
func (p *Pipeline) Deps(i int) []int {
	s := p.Stages[i]
	if !s.NeedsSet {
		if i == 0 {
			return nil
		}
		return []int{i - 1}
	}
	var out []int
	for _, n := range s.Needs {
		for j, o := range p.Stages {
			if o.ID == n {
				out = append(out, j)
			}
		}
	}
	return out
}

// checkRefs verifies that expressions refer to inputs, variables and steps that exist, so a
// typo fails at load instead of halfway through a run.
func (l *loader) checkRefs(p *Pipeline) {
	inputs := map[string]bool{}
	for _, in := range p.Inputs {
		inputs[in.Name] = true
	}
	pvars := map[string]bool{}
	for _, v := range p.Variables {
		pvars[v.Name] = true
	}
	stageSteps := map[string]map[string]bool{}
	for _, s := range p.Stages {
		m := map[string]bool{}
		for _, st := range append(append([]*Step{}, s.Steps...), s.Rollback...) {
			m[st.ID] = true
		}
		stageSteps[s.ID] = m
	}
	for si, s := range p.Stages {
		svars := map[string]bool{}
		for k := range pvars {
			svars[k] = true
		}
		for _, v := range s.Variables {
			svars[v.Name] = true
		}
		check := func(t *template.Template, line int, path string) {
			if t == nil {
				return
			}
			for _, ref := range t.Refs() {
				if msg := refProblem(ref, inputs, pvars, svars, stageSteps, s.ID); msg != "" {
					l.errs = append(l.errs, FieldError{File: l.file, Line: line, Path: path, Msg: msg})
				}
			}
		}
		sp := fmt.Sprintf("stages[%d]", si)
		check(s.When, s.Line, sp+".when")
		for _, v := range s.Variables {
			v.Value.walk(func(t *template.Template, line int) { check(t, line, sp+".variables."+v.Name) })
		}
		for _, list := range []struct {
			name  string
			steps []*Step
		}{{"steps", s.Steps}, {"rollbackSteps", s.Rollback}} {
			for i, st := range list.steps {
				path := fmt.Sprintf("%s.%s[%d]", sp, list.name, i)
				check(st.When, st.Line, path+".when")
				st.With.walk(func(t *template.Template, line int) { check(t, line, path+".with") })
			}
		}
	}
	for _, v := range p.Variables {
		v.Value.walk(func(t *template.Template, line int) {
			for _, ref := range t.Refs() {
				root := strings.SplitN(ref, ".", 2)[0]
				if root == "steps" || root == "stages" || root == "stage" {
					l.errs = append(l.errs, FieldError{File: l.file, Line: line, Path: "variables." + v.Name, Msg: ref + ": pipeline variables cannot read step outputs (use a stage variable)"})
				}
			}
		})
	}
}

func refProblem(ref string, inputs, pvars, svars map[string]bool, stageSteps map[string]map[string]bool, stage string) string {
	parts := strings.Split(ref, ".")
	get := func(i int) string {
		if i < len(parts) {
			return parts[i]
		}
		return ""
	}
	switch parts[0] {
	case "inputs":
		if n := get(1); n != "" && !inputs[n] {
			return fmt.Sprintf("%s: no input %q declared under inputs:", ref, n)
		}
	case "variables":
		if n := get(1); n != "" && !svars[n] {
			return fmt.Sprintf("%s: no variable %q", ref, n)
		}
	case "pipeline":
		if get(1) == "variables" {
			if n := get(2); n != "" && !pvars[n] {
				return fmt.Sprintf("%s: no pipeline variable %q", ref, n)
			}
		}
	case "steps":
		if n := get(1); n != "" && !stageSteps[stage][n] {
			return fmt.Sprintf("%s: no step %q in stage %q", ref, n, stage)
		}
	case "stages":
		if n := get(1); n != "" {
			ss, ok := stageSteps[n]
			if !ok {
				return fmt.Sprintf("%s: no stage %q", ref, n)
			}
			if get(2) == "steps" {
				if sn := get(3); sn != "" && !ss[sn] {
					return fmt.Sprintf("%s: no step %q in stage %q", ref, sn, n)
				}
			}
		}
	}
	return ""
}

func (v *Value) walk(fn func(t *template.Template, line int)) {
	if v == nil {
		return
	}
	if v.Tmpl != nil {
		fn(v.Tmpl, v.Line)
	}
	for _, k := range v.Keys {
		v.Map[k].walk(fn)
	}
	for _, c := range v.List {
		c.walk(fn)
	}
}

// Static returns the value with expressions left as their source text, for load-time checks.
func (v *Value) Static() map[string]any {
	if v == nil || v.Map == nil {
		return map[string]any{}
	}
	m, _ := v.static().(map[string]any)
	return m
}

func (v *Value) static() any {
	switch {
	case v.Tmpl != nil:
		return v.Tmpl.Source()
	case v.Map != nil:
		m := make(map[string]any, len(v.Map))
		for k, c := range v.Map {
			m[k] = c.static()
		}
		return m
	case v.List != nil:
		l := make([]any, len(v.List))
		for i, c := range v.List {
			l[i] = c.static()
		}
		return l
	}
	return v.Lit
}

func findKey(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ' || r == '.':
			b.WriteByte('_')
		}
	}
	return b.String()
}

func internalHint(typ string) string {
	if typ == "StageGate" {
		return " (give the stage a gate: {condition, soak} instead)"
	}
	return " (the controller runs it for triggers and commit statuses)"
}

// nodeAt finds the node at field (a.b[1].c) below mapping n, or nil.
func nodeAt(n *yaml.Node, field string) *yaml.Node {
	for _, part := range strings.Split(field, ".") {
		name, idx := part, []int{}
		if i := strings.IndexByte(part, '['); i >= 0 {
			name = part[:i]
			for _, x := range strings.Split(strings.TrimSuffix(part[i+1:], "]"), "][") {
				k, err := strconv.Atoi(x)
				if err != nil {
					return nil
				}
				idx = append(idx, k)
			}
		}
		if n = deref(n); n == nil {
			return nil
		}
		if name != "" {
			if n.Kind != yaml.MappingNode {
				return nil
			}
			if n = findKey(n, name); n == nil {
				return nil
			}
		}
		for _, k := range idx {
			if n = deref(n); n == nil || n.Kind != yaml.SequenceNode || k >= len(n.Content) {
				return nil
			}
			n = n.Content[k]
		}
	}
	return n
}
