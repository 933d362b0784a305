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
//
// Package yamlconf decodes the file into the structs below (unknown and duplicate keys,
// values of the wrong kind), the loader checks what the values mean, and the file as written
// is checked against the generated JSON Schema (schema.json). A schema violation is reported
// only when nothing was reported at its field, inside it or around it: the decode and the
// loader say what is wrong in the pipeline's own words, the schema adds what they let through
// (a null where a value is wanted, say), and no mistake is reported twice.
func Load(file string, src []byte, reg *steps.Registry) (*Pipeline, error) {
	if reg == nil {
		reg = steps.Default
	}
	d, err := yamlconf.Parse(file, src, yamlconf.MaxBytes(MaxSource), yamlconf.UnknownField(unknownField))
	if err != nil {
		return nil, FromYAMLConf(err)
	}
	if d.Root == nil {
		return nil, &LoadError{[]FieldError{{File: file, Msg: "empty file"}}}
	}
	l := &loader{file: file, reg: reg, d: d}
	root := d.Root
	p := &Pipeline{File: file, Source: src}
	sum := sha256.Sum256(src)
	p.Hash = hex.EncodeToString(sum[:16])
	if root.Kind == yaml.MappingNode && findKey(root, "pipeline") != nil {
		l.errf(root, "", "this is a Harness pipeline (root key `pipeline:`): run it with --harness-map FILE (services, environments and GitOps clusters), or convert it with `prflow import harness FILE --harness-map MAP`")
		return nil, FromYAMLConf(d.Err())
	}
	if !d.Bounded() { // an alias bomb: the step inputs and variables are walked as nodes
		return nil, FromYAMLConf(d.Err())
	}
	sch, err := schemaFor(reg)
	if err != nil {
		return nil, err
	}
	violations := d.Violations(sch) // the file as written, before the promotion is expanded
	l.pipeline(root, p)
	d.AddUnrelated(violations)
	if err := d.Err(); err != nil {
		return nil, FromYAMLConf(err)
	}
	return p, nil
}

// unknownField words a key no field names as pipeline files always have: the allowed keys,
// then a likely typo.
func unknownField(key string, known []string) string {
	msg := "unknown field (allowed: " + strings.Join(known, ", ") + ")"
	if s := suggest(key, known); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return msg
}

var idRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// The pipeline file as written. Fields whose meaning depends on other fields (a step's
// `with:`, an input's default) or whose expressions need their node's line stay *yaml.Node.
type (
	pipelineDoc struct {
		Name          string
		Description   string
		Variables     yamlconf.Pairs[*yaml.Node] `want:"a mapping of name: value"`
		Inputs        yamlconf.Pairs[inputDoc]   `want:"a mapping of input name → {type, default, required, description}"`
		Environments  []environmentDoc           `want:"a list of environments"`
		Service       *serviceDoc
		Stages        []stageDoc `want:"a non-empty list of stages"`
		Timeout       string
		Promotion     *yaml.Node   // expanded into stages before the decode (promotion.go)
		Triggers      []triggerDoc `want:"a list of triggers"`
		Cleanup       *cleanupDoc
		Notifications []notifyDoc `want:"a list of rules ({on: [events], channel: name})"`
	}
	inputDoc struct {
		Type        string
		Default     *yaml.Node // of the input's type
		Required    bool
		Description string
		Allowed     *yaml.Node
	}
	environmentDoc struct {
		Name      string
		Group     string
		Clusters  []clusterDoc               `want:"a list of {name, agent}"`
		Variables yamlconf.Pairs[*yaml.Node] `want:"a mapping of name: value"`
		Overrides yamlconf.Pairs[*yaml.Node] `want:"a mapping of name: value"`
	}
	clusterDoc struct {
		Name  string
		Agent string
	}
	serviceDoc struct {
		Name      string
		Variables yamlconf.Pairs[*yaml.Node] `want:"a mapping of name: value"`
	}
	stageDoc struct {
		ID            string `yaml:"id"`
		Name          string
		Needs         yamlconf.Strings `want:"a list of stage ids"`
		Environment   string
		Clusters      yamlconf.Strings `want:"a list of cluster names"`
		When          string
		Timeout       string
		OnFailure     *failureDoc
		Variables     yamlconf.Pairs[*yaml.Node] `want:"a mapping of name: value"`
		Steps         []stepDoc                  `want:"a non-empty list of steps"`
		RollbackSteps []stepDoc                  `want:"a list of steps"`
		Gate          *gateDoc
	}
	stepDoc struct {
		ID        string `yaml:"id"`
		Name      string
		Type      string
		With      *yaml.Node // checked against the type's declared inputs (stepinputs.go)
		When      string
		Timeout   string
		Pool      string
		OnFailure *failureDoc
	}
	// failureDoc is `onFailure: ACTION` or the mapping below.
	failureDoc struct {
		Action  string
		Retries int `want:"a whole number ≥ 0"`
		Backoff string
		Then    string
		Manual  *manualDoc `want:"{timeout, onTimeout, approvers}"`
	}
	manualDoc struct {
		Timeout   string
		OnTimeout string
		Approvers yamlconf.Strings `want:"a list of user names and group:NAME"`
	}
	gateDoc struct {
		Condition          string
		Soak               string
		Timeout            string
		AgentOutageTimeout string
	}
	cleanupDoc struct {
		KeepFailedPRs bool `yaml:"keepFailedPRs"`
	}
)

// UnmarshalYAMLConf reads the short form `onFailure: retry` and the mapping.
func (f *failureDoc) UnmarshalYAMLConf(d *yamlconf.Doc, n *yaml.Node, path string) {
	if n.Kind == yaml.ScalarNode {
		f.Action = n.Value
		return
	}
	type plain failureDoc // without this method
	d.Decode(n, path, (*plain)(f))
}

type loader struct {
	file string
	reg  *steps.Registry
	d    *yamlconf.Doc
	text map[*yaml.Node]bool // scalars of string-typed step inputs: value() keeps their text
}

func (l *loader) errf(n *yaml.Node, path, format string, a ...any) {
	l.d.ErrorAt(n, path, format, a...)
}

// errLine records a problem known by its line only (a stage or step as a whole).
func (l *loader) errLine(line int, path, format string, a ...any) {
	l.d.ErrorAt(&yaml.Node{Line: line}, path, format, a...)
}

// node is the value node of path (for a field the file does not set, the closest enclosing
// one), to report a problem at.
func (l *loader) node(path string) *yaml.Node { return l.d.Near(path) }

// dur parses the duration s read at path ("" is none).
func (l *loader) dur(s, path string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := duration.Parse(s)
	if err != nil {
		l.errf(l.node(path), path, "%v", err)
	}
	return d
}

func (l *loader) cond(s, path string, opts ...template.Option) *template.Template {
	n := l.d.Node(path)
	if n == nil || s == "" {
		return nil
	}
	if n.Tag == "!!bool" {
		t, _ := template.CompileCondition(s)
		return t
	}
	t, err := template.CompileCondition(s, opts...)
	if err != nil {
		l.exprErr(n, path, err)
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
	l.errf(&yaml.Node{Line: n.Line, Column: n.Column + col}, path, "%s", err.Error())
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

func join(path, name string) string { return yamlconf.Join(path, name) }

func (l *loader) pipeline(root *yaml.Node, p *Pipeline) {
	l.expandPromotion(root) // promotion: becomes ordinary stages (promotion.go)
	var doc pipelineDoc
	l.d.Decode(root, "", &doc)
	p.Name = doc.Name
	if p.Name == "" {
		if !l.d.Bad("name") {
			l.errf(root, "name", "required")
		}
	} else if !idRE.MatchString(p.Name) {
		l.errf(l.node("name"), "name", "%q: use letters, digits, - and _ (start with a letter, ≤ 63 chars)", p.Name)
	}
	p.Description = doc.Description
	p.Timeout = l.dur(doc.Timeout, "timeout")
	p.Variables = l.variables(doc.Variables, "variables")
	l.inputs(doc.Inputs, p)
	l.environments(doc.Environments, p)
	if sv := doc.Service; sv != nil {
		p.Service = &Service{Name: sv.Name, Variables: l.variables(sv.Variables, "service.variables")}
	}
	p.Triggers = l.triggers(doc.Triggers, p)
	if doc.Cleanup != nil {
		p.Cleanup = &CleanupSpec{KeepFailedPRs: doc.Cleanup.KeepFailedPRs}
	}
	p.Notifications = l.notifications(doc.Notifications)
	switch sn := l.d.Node("stages"); {
	case sn == nil:
		l.errf(root, "stages", "required: a pipeline needs at least one stage")
		return
	case sn.Kind != yaml.SequenceNode:
		return // reported by the decode
	case len(doc.Stages) == 0:
		l.errf(l.node("stages"), "stages", "want a non-empty list of stages")
		return
	}
	seen := map[string]bool{}
	for i := range doc.Stages {
		path := yamlconf.Index("stages", i)
		s := l.stage(&doc.Stages[i], path, p)
		if s == nil {
			continue
		}
		if seen[s.ID] {
			l.errf(l.node(path), path+".id", "duplicate stage id %q", s.ID)
		}
		seen[s.ID] = true
		p.Stages = append(p.Stages, s)
	}
	l.checkNeeds(p)
	l.checkRefs(p)
	l.checkNotifyStages(p)
}

func (l *loader) variables(vars yamlconf.Pairs[*yaml.Node], path string) []Variable {
	var out []Variable
	for _, v := range vars {
		if !idRE.MatchString(v.Key) {
			l.errf(v.KeyNode, join(path, v.Key), "variable names use letters, digits, - and _")
		}
		out = append(out, Variable{Name: v.Key, Value: l.value(v.Value, join(path, v.Key))})
	}
	return out
}

func (l *loader) inputs(ins yamlconf.Pairs[inputDoc], p *Pipeline) {
	for _, kv := range ins {
		path := "inputs." + kv.Key
		d := kv.Value
		in := Input{Name: kv.Key, Type: "string", Required: d.Required, Description: d.Description}
		if !idRE.MatchString(kv.Key) {
			l.errf(kv.KeyNode, path, "input names use letters, digits, - and _")
		}
		if t := d.Type; t != "" {
			if t != "string" && t != "number" && t != "boolean" {
				l.errf(l.node(path+".type"), path+".type", "want string, number or boolean, got %q", t)
			}
			in.Type = t
		}
		if dv := d.Default; dv != nil {
			_ = dv.Decode(&in.Default)
			if in.Type == "string" && dv.Kind == yaml.ScalarNode && dv.Tag != "!!null" {
				in.Default = dv.Value // as written: a default of 1.10 is "1.10"
			}
		}
		if a := d.Allowed; a != nil {
			if a.Decode(&in.Allowed) != nil || a.Kind != yaml.SequenceNode {
				l.errf(a, path+".allowed", "want a list of values")
			} else if in.Type == "string" {
				for i, c := range a.Content {
					if c.Kind == yaml.ScalarNode && c.Tag != "!!null" && i < len(in.Allowed) {
						in.Allowed[i] = c.Value
					}
				}
			}
		}
		p.Inputs = append(p.Inputs, in)
	}
}

func (l *loader) environments(envs []environmentDoc, p *Pipeline) {
	for i, ed := range envs {
		path := yamlconf.Index("environments", i)
		e := Environment{Name: ed.Name, Group: ed.Group,
			Variables: l.variables(ed.Variables, path+".variables"), Overrides: l.variables(ed.Overrides, path+".overrides")}
		if e.Name == "" {
			if !l.d.Bad(path+".name") && !l.d.Bad(path) {
				l.errf(l.node(path), path+".name", "required")
			}
		} else if p.Env(e.Name) != nil {
			l.errf(l.node(path+".name"), path+".name", "duplicate environment %q", e.Name)
		}
		for j, cd := range ed.Clusters {
			cp := yamlconf.Index(path+".clusters", j)
			if cd.Name == "" && !l.d.Bad(cp+".name") && !l.d.Bad(cp) {
				l.errf(l.node(cp), cp+".name", "required")
			}
			e.Clusters = append(e.Clusters, Cluster(cd))
		}
		p.Environments = append(p.Environments, e)
	}
}

var failureActions = map[string]bool{ActFail: true, ActIgnore: true, ActRetry: true, ActRollbackStage: true, ActRollbackPipeline: true}

func (l *loader) failure(fd *failureDoc, path string) *FailureStrategy {
	if fd == nil {
		return nil
	}
	fs := &FailureStrategy{Action: fd.Action, Retries: fd.Retries, Backoff: l.dur(fd.Backoff, path+".backoff"), Then: fd.Then}
	if fs.Retries < 0 {
		l.errf(l.node(path+".retries"), path+".retries", "want a whole number ≥ 0, got %q", strconv.Itoa(fs.Retries))
	}
	if fd.Manual != nil {
		if fs.Action != "" && fs.Action != ActManual {
			l.errf(l.node(path+".manual"), path+".manual", "manual decides instead of action %q: give one of them", fs.Action)
		}
		fs.Action, fs.Manual = ActManual, l.manual(fd.Manual, path+".manual")
	}
	switch {
	case fs.Action == ActManual && fs.Manual == nil:
		fs.Manual = &ManualStrategy{Timeout: DefaultManualTimeout} // onFailure: manual
	case !failureActions[fs.Action] && fs.Action != ActManual && !l.d.Bad(path) && !l.d.Bad(path+".manual"):
		l.errf(l.d.Node(path), path+".action", "unknown action %q (want fail, ignore, retry, rollbackStage, rollbackPipeline or manual)", fs.Action)
	}
	if fs.Action == ActRetry && fs.Retries == 0 {
		fs.Retries = 1
	}
	if fs.Then != "" && (!failureActions[fs.Then] || fs.Then == ActRetry) {
		l.errf(l.d.Node(path), path+".then", "unknown action %q (want fail, ignore, rollbackStage or rollbackPipeline)", fs.Then)
	}
	if fs.Backoff == 0 {
		fs.Backoff = time.Second
	}
	return fs
}

// DefaultManualTimeout is how long a manual intervention waits when its timeout is not given.
const DefaultManualTimeout = 24 * time.Hour

// manual reads onFailure.manual: {timeout, onTimeout, approvers}.
func (l *loader) manual(md *manualDoc, path string) *ManualStrategy {
	ms := &ManualStrategy{Timeout: DefaultManualTimeout, OnTimeout: md.OnTimeout}
	if md.Timeout != "" {
		n := l.d.Count()
		if d := l.dur(md.Timeout, path+".timeout"); d > 0 {
			ms.Timeout = d
		} else if l.d.Count() == n {
			l.errf(l.node(path+".timeout"), path+".timeout", "want a duration > 0 (e.g. 2h), got %q", md.Timeout)
		}
	}
	switch ms.OnTimeout {
	case "", ActFail, ActIgnore, ActRollbackStage, ActRollbackPipeline:
	default:
		l.errf(l.node(path+".onTimeout"), path+".onTimeout", "unknown action %q (want fail, ignore, rollbackStage or rollbackPipeline)", ms.OnTimeout)
	}
	if l.d.Has(path + ".approvers") {
		ap := path + ".approvers"
		ms.Approvers = &steps.Approvers{}
		for i, who := range md.Approvers {
			if l.d.Bad(yamlconf.Index(ap, i)) {
				continue // a null, reported by the decode
			}
			switch g, isGroup := strings.CutPrefix(who, "group:"); {
			case strings.TrimSpace(g) == "":
				l.errf(l.node(ap), yamlconf.Index(ap, i), "want a user name or group:NAME, got %q", who)
			case isGroup:
				ms.Approvers.Groups = append(ms.Approvers.Groups, g)
			default:
				ms.Approvers.Users = append(ms.Approvers.Users, who)
			}
		}
		if len(ms.Approvers.Users)+len(ms.Approvers.Groups) == 0 && !l.d.Bad(ap) {
			l.errf(l.node(ap), ap, "empty: nobody could decide (leave approvers out to let anyone authenticated decide)")
		}
	}
	return ms
}

// id is a stage's or step's id: the one written, else its name's slug. Neither is reported
// at path (unless its entry is already reported as bad) and gives ""; characters an id may
// not hold are reported too.
func (l *loader) id(n *yaml.Node, path, id, name string) string {
	if id == "" {
		id = slug(name)
	}
	if id == "" {
		if !l.d.Bad(path) {
			l.errf(n, path+".id", "required (or give a name)")
		}
		return ""
	}
	if !idRE.MatchString(id) {
		l.errf(n, path+".id", "%q: use letters, digits, - and _ (start with a letter)", id)
	}
	return id
}

func (l *loader) stage(sd *stageDoc, path string, p *Pipeline) *Stage {
	n := l.node(path)
	s := &Stage{Line: n.Line, ID: l.id(n, path, sd.ID, sd.Name), Name: sd.Name}
	if s.ID == "" {
		return nil
	}
	if s.Name == "" {
		s.Name = s.ID
	}
	if l.d.Has(path + ".needs") {
		s.NeedsSet = true
		s.Needs = sd.Needs
	}
	s.Environment = sd.Environment
	if s.Environment != "" && !template.Contains(s.Environment) && p.Env(s.Environment) == nil {
		l.errf(l.node(path+".environment"), path+".environment", "unknown environment %q (declare it under environments:)", s.Environment)
	}
	s.Clusters = sd.Clusters
	if env := p.Env(s.Environment); env != nil {
		for i, c := range s.Clusters {
			found := false
			for _, ec := range env.Clusters {
				found = found || ec.Name == c
			}
			if !found {
				l.errf(l.node(path+".clusters"), yamlconf.Index(path+".clusters", i), "environment %q has no cluster %q", s.Environment, c)
			}
		}
	}
	s.When = l.cond(sd.When, path+".when", template.WithStatusFunctions())
	s.Timeout = l.dur(sd.Timeout, path+".timeout")
	s.OnFailure = l.failure(sd.OnFailure, path+".onFailure")
	s.Variables = l.variables(sd.Variables, path+".variables")
	s.Steps = l.stepList(sd.Steps, path+".steps", true)
	s.Rollback = l.stepList(sd.RollbackSteps, path+".rollbackSteps", false)
	if sd.Gate != nil {
		if st := l.gate(sd.Gate, path+".gate"); st != nil {
			s.Steps = append(s.Steps, st)
		}
	}
	l.checkLinkedApps(s, p, path)
	ids := map[string]bool{}
	for _, list := range [][]*Step{s.Steps, s.Rollback} {
		for _, st := range list {
			if ids[st.ID] {
				l.errLine(st.Line, path, "duplicate step id %q in stage %q", st.ID, s.ID)
			}
			ids[st.ID] = true
		}
	}
	return s
}

func (l *loader) stepList(list []stepDoc, path string, required bool) []*Step {
	switch n := l.d.Node(path); {
	case n == nil:
		if required {
			l.errf(l.node(path), path, "required: a stage needs at least one step")
		}
		return nil
	case n.Kind != yaml.SequenceNode:
		return nil // reported by the decode
	case required && len(list) == 0:
		l.errf(l.node(path), path, "want a non-empty list of steps")
		return nil
	}
	var out []*Step
	for i := range list {
		if st := l.step(&list[i], yamlconf.Index(path, i)); st != nil {
			out = append(out, st)
		}
	}
	return out
}

func (l *loader) step(sd *stepDoc, path string) *Step {
	n := l.node(path)
	st := &Step{Line: n.Line, ID: l.id(n, path, sd.ID, sd.Name), Name: sd.Name}
	if st.ID == "" {
		return nil
	}
	typ := sd.Type
	def, ok := l.reg.Lookup(typ)
	switch {
	case typ == "":
		if !l.d.Bad(path + ".type") {
			l.errf(n, path+".type", "required (one of %s)", strings.Join(userTypes(l.reg), ", "))
		}
	case !ok:
		msg := fmt.Sprintf("unknown step type %q", typ)
		if s := suggest(typ, userTypes(l.reg)); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		l.errf(l.node(path+".type"), path+".type", "%s (known: %s)", msg, strings.Join(userTypes(l.reg), ", "))
	case def.Internal:
		l.errf(l.node(path+".type"), path+".type", "step type %q is internal to prflow and cannot be used in a pipeline%s (known: %s)",
			typ, internalHint(def.Type), strings.Join(userTypes(l.reg), ", "))
		ok = false
	default:
		st.Type = def.Type
	}
	inputsOK := true
	if ok {
		inputsOK = l.checkWith(def, n, sd.With, path)
	}
	if w := sd.With; w != nil {
		if w.Kind != yaml.MappingNode {
			l.errf(w, path+".with", "want a mapping of inputs, got %s", kindName(w))
		} else {
			st.With = l.value(w, path+".with")
		}
	}
	if ok && inputsOK && def.Validate != nil {
		if err := def.Validate(st.With.Static()); err != nil {
			line, at := n, path+".with"
			if w := sd.With; w != nil {
				line = w
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
	st.When = l.cond(sd.When, path+".when", template.WithStatusFunctions())
	st.Timeout = l.dur(sd.Timeout, path+".timeout")
	st.Pool = sd.Pool
	st.OnFailure = l.failure(sd.OnFailure, path+".onFailure")
	return st
}

// gate turns a stage's `gate: {condition, soak, timeout}` into its last step, a StageGate.
// The condition is evaluated on the worker over the apps' live status (`apps`), so it is kept
// as text here and only checked for syntax.
func (l *loader) gate(g *gateDoc, path string) *Step {
	n := l.node(path)
	if g.Condition == "" && g.Soak == "" {
		if !l.d.Bad(path+".condition") && !l.d.Bad(path+".soak") {
			l.errf(n, path, "give a condition, a soak time or both")
		}
		return nil
	}
	if g.Condition != "" {
		if _, err := template.CompileCondition(g.Condition); err != nil {
			l.exprErr(l.node(path+".condition"), path+".condition", err)
		}
	}
	l.dur(g.Soak, path+".soak")
	l.dur(g.AgentOutageTimeout, path+".agentOutageTimeout")
	with := &Value{Map: map[string]*Value{}, Line: n.Line}
	for k, v := range map[string]string{"condition": g.Condition, "soak": g.Soak, "agentOutageTimeout": g.AgentOutageTimeout} {
		if v != "" {
			with.Keys = append(with.Keys, k)
			with.Map[k] = &Value{Lit: v, Line: n.Line}
		}
	}
	sort.Strings(with.Keys)
	typ := "StageGate"
	if _, ok := l.reg.Lookup(typ); !ok {
		l.errf(n, path, "this build has no StageGate step")
		return nil
	}
	return &Step{ID: "gate", Name: "stage gate", Type: typ, With: with, Timeout: l.dur(g.Timeout, path+".timeout"), Line: n.Line}
}

func (l *loader) checkNeeds(p *Pipeline) {
	idx := map[string]int{}
	for i, s := range p.Stages {
		idx[s.ID] = i
	}
	for i, s := range p.Stages {
		for _, n := range s.Needs {
			if _, ok := idx[n]; !ok {
				l.errLine(s.Line, fmt.Sprintf("stages[%d].needs", i), "unknown stage %q", n)
			} else if n == s.ID {
				l.errLine(s.Line, fmt.Sprintf("stages[%d].needs", i), "a stage cannot need itself")
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
			l.errLine(p.Stages[i].Line, fmt.Sprintf("stages[%d].needs", i), "stages need each other in a cycle")
			return
		}
	}
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
					l.errLine(line, path, "%s", msg)
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
					l.errLine(line, "variables."+v.Name, "%s: pipeline variables cannot read step outputs (use a stage variable)", ref)
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
