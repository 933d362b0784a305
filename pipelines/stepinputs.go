package pipelines

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/duration"
	"github.com/prflow/prflow/steps/fileedit"
	"github.com/prflow/prflow/steps/spelling"
	"github.com/prflow/prflow/steps/template"
	"github.com/prflow/prflow/yamlconf"
)

// checkWith checks a step's `with:` mapping w (nil when absent) against the inputs its type
// declares: unknown keys (with a did-you-mean), literal values of the wrong type, values
// outside an enum, missing required inputs. Expressions are left to the step, which checks
// what they evaluate to. Scalars of string inputs are marked so that value() keeps their
// text. It reports whether nothing was wrong.
func (l *loader) checkWith(def *steps.Definition, stepNode, w *yaml.Node, path string) bool {
	if def.Inputs == nil {
		return true // a type that declares nothing (test doubles) takes any keys
	}
	before := l.d.Count()
	if w == nil || w.Kind != yaml.MappingNode {
		w = &yaml.Node{Kind: yaml.MappingNode, Line: stepNode.Line, Column: stepNode.Column}
	}
	l.checkObject(def.Inputs, w, path+".with", def.Type+" input")
	return l.d.Count() == before
}

// checkObject checks a mapping against declared fields; what names them in messages
// ("GitOpsSync input", "field").
func (l *loader) checkObject(fields []steps.Input, n *yaml.Node, path, what string) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var decl *steps.Input
		for j := range fields {
			if fields[j].Name == k.Value {
				decl = &fields[j]
			}
		}
		if decl == nil {
			names := make([]string, len(fields))
			for j, f := range fields {
				names[j] = f.Name
			}
			msg := fmt.Sprintf("unknown %s %q", what, k.Value)
			if s := suggest(k.Value, names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			l.errf(k, join(path, k.Value), "%s (allowed: %s)", msg, strings.Join(names, ", "))
			continue
		}
		seen[k.Value] = true
		l.checkInput(decl, v, join(path, k.Value), n)
	}
	for _, f := range fields {
		if f.Required && !seen[f.Name] {
			l.errf(n, join(path, f.Name), "required (%s)", orDefault(f.Doc, string(f.Type)))
		}
	}
}

// checkInput checks one value n against its declaration; parent is the mapping holding it
// (for TypedBy).
func (l *loader) checkInput(in *steps.Input, n *yaml.Node, path string, parent *yaml.Node) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		if in.Required {
			l.errf(n, path, "required, got null")
		}
		return
	}
	if isExpr(n) {
		return // checked once evaluated
	}
	if in.TypedBy != "" {
		l.checkTyped(in, n, path, parent)
		return
	}
	shape := in
	if !fits(shape.Type, n) {
		shape = nil
		for i := range in.Or {
			if fits(in.Or[i].Type, n) {
				shape = &in.Or[i]
				break
			}
		}
	}
	if shape == nil {
		want := []string{describe(in)}
		for i := range in.Or {
			want = append(want, describe(&in.Or[i]))
		}
		l.errf(n, path, "want %s, got %s", strings.Join(want, " or "), kindName(n))
		return
	}
	switch shape.Type {
	case steps.InputString:
		l.keepText(n)
		if len(shape.Enum) > 0 && !contains(shape.Enum, n.Value) {
			msg := fmt.Sprintf("%q is not one of %s", n.Value, strings.Join(shape.Enum, ", "))
			if s := suggest(n.Value, shape.Enum); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			l.errf(n, path, "%s", msg)
		}
	case steps.InputBool:
		if _, ok := boolText(n); !ok {
			l.errf(n, path, "want true or false, got %s %q", kindName(n), n.Value)
		}
	case steps.InputInt:
		if _, err := strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64); err != nil || (n.Tag != "!!int" && n.Tag != "!!str") {
			l.errf(n, path, "want a whole number, got %q", n.Value)
		}
	case steps.InputDuration:
		if s := strings.TrimSpace(n.Value); s != "0" {
			if _, err := duration.Parse(s); err != nil {
				l.errf(n, path, "%v", err)
			}
		}
		l.keepText(n)
	case steps.InputStrings:
		if n.Kind == yaml.ScalarNode {
			l.keepText(n)
			return
		}
		for i, c := range n.Content {
			l.checkInput(&steps.Input{Type: steps.InputString, Required: true}, c, fmt.Sprintf("%s[%d]", path, i), n)
		}
	case steps.InputMap:
		if shape.Items != nil {
			for i := 0; i+1 < len(n.Content); i += 2 {
				l.checkInput(shape.Items, n.Content[i+1], join(path, n.Content[i].Value), n)
			}
		}
	case steps.InputObject:
		l.checkObject(shape.Fields, n, path, "field")
	case steps.InputList:
		for i, c := range n.Content {
			l.checkInput(shape.Items, c, fmt.Sprintf("%s[%d]", path, i), n)
		}
	}
}

// checkTyped checks a value whose type a sibling field names (UpdateReleaseRepo's variables:
// {name, type, value}). A scalar keeps its text whatever the type: the step parses Number and
// Boolean from it, and String is the text as written (1.10, 0755, 2024-01-02).
func (l *loader) checkTyped(in *steps.Input, n *yaml.Node, path string, parent *yaml.Node) {
	typ := fileedit.TypeString
	if parent != nil {
		if t := findKey(parent, in.TypedBy); t != nil && t.Kind == yaml.ScalarNode && t.Tag != "!!null" {
			if isExpr(t) {
				typ = "" // known at run time
			} else {
				typ = t.Value
			}
		}
	}
	if n.Kind != yaml.ScalarNode {
		switch strings.ToLower(typ) {
		case "raw", "object", "":
		default:
			l.errf(n, path, "a %s value cannot be %s (use %s: Raw)", typ, kindName(n), in.TypedBy)
		}
		return
	}
	l.keepText(n)
	switch strings.ToLower(typ) {
	case "number", "boolean":
		if _, err := fileedit.ParseValue(typ, n.Value); err != nil {
			l.errf(n, path, "%v", err)
		}
	}
}

// keepText marks a literal scalar so that value() takes its source text, not its YAML type.
func (l *loader) keepText(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!str" && n.Tag != "!!null" {
		if l.text == nil {
			l.text = map[*yaml.Node]bool{}
		}
		l.text[n] = true
	}
}

// kindName names what a node is in messages about step inputs: a scalar by its YAML type,
// as these messages always have (`got a scalar (int) "1"`).
func kindName(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		return "a scalar (" + strings.TrimPrefix(n.Tag, "!!") + ")"
	}
	return yamlconf.Kind(n)
}

func isExpr(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!str" && template.Contains(n.Value)
}

func boolText(n *yaml.Node) (bool, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!bool" && n.Tag != "!!str") {
		return false, false
	}
	switch strings.ToLower(strings.TrimSpace(n.Value)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// fits reports whether a node's kind can be a value of type t.
func fits(t steps.InputType, n *yaml.Node) bool {
	switch t {
	case steps.InputAny:
		return true
	case steps.InputStrings:
		return n.Kind == yaml.ScalarNode || n.Kind == yaml.SequenceNode
	case steps.InputMap, steps.InputObject:
		return n.Kind == yaml.MappingNode
	case steps.InputList:
		return n.Kind == yaml.SequenceNode
	}
	return n.Kind == yaml.ScalarNode
}

func describe(in *steps.Input) string {
	switch in.Type {
	case steps.InputString:
		return "a string"
	case steps.InputBool:
		return "true or false"
	case steps.InputInt:
		return "a whole number"
	case steps.InputDuration:
		return "a duration such as 10m"
	case steps.InputStrings:
		return "a list of strings"
	case steps.InputMap:
		return "a mapping"
	case steps.InputObject:
		names := make([]string, len(in.Fields))
		for i, f := range in.Fields {
			names[i] = f.Name
		}
		return "{" + strings.Join(names, ", ") + "}"
	case steps.InputList:
		return "a list"
	}
	return "a value"
}

// suggest returns the candidate closest to s when it is close enough to be a likely typo.
func suggest(s string, candidates []string) string { return spelling.Closest(s, candidates) }

// userTypes lists the step types a pipeline may name (internal ones excluded), sorted.
func userTypes(reg *steps.Registry) []string {
	var out []string
	for _, t := range reg.Types() {
		if d, ok := reg.Lookup(t); ok && !d.Internal {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// checkLinkedApps: a step that looks apps up by the service (FetchLinkedApps without an
// ApplicationSet or selector) needs the pipeline's service and the stage's environment, and a
// GitOpsSync without its own app list needs a FetchLinkedApps before it in the stage. Found at
// load, not after dev's PR was merged.
func (l *loader) checkLinkedApps(s *Stage, p *Pipeline, path string) {
	for _, list := range []struct {
		name  string
		steps []*Step
	}{{"steps", s.Steps}, {"rollbackSteps", s.Rollback}} {
		fetched := false
		if list.name == "rollbackSteps" {
			for _, st := range s.Steps {
				fetched = fetched || st.Type == "FetchLinkedApps" || st.Type == "UpdateGitOpsApp"
			}
		}
		var updatedBy string // the list's UpdateGitOpsApp step: at most one per list, as in Harness
		for i, st := range list.steps {
			in := st.With.Static()
			given := func(keys ...string) bool {
				for _, k := range keys {
					if v, ok := in[k]; ok && v != nil && v != "" {
						return true
					}
				}
				return false
			}
			where := fmt.Sprintf("%s.%s[%d]", path, list.name, i)
			msgf := func(format string, a ...any) {
				l.errLine(st.Line, where, "%s", fmt.Sprintf("stage %q, step %q (%s): ", s.ID, st.ID, st.Type)+fmt.Sprintf(format, a...))
			}
			switch st.Type {
			case "UpdateGitOpsApp":
				fetched = true // a GitOpsSync after it syncs the app it changed
				if updatedBy != "" {
					msgf("a stage's %s may hold one UpdateGitOpsApp (step %q is one already); update each app in a stage of its own", list.name, updatedBy)
				}
				updatedBy = st.ID
			case "FetchLinkedApps":
				fetched = true
				if given("applicationSet", "selector", "labels") {
					continue
				}
				byEnv, _ := in["filterByServiceEnvCluster"].(bool)
				if s, ok := in["filterByServiceEnvCluster"].(string); ok {
					if template.Contains(s) {
						continue // known at run time; the step says what is missing then
					}
					byEnv = strings.EqualFold(strings.TrimSpace(s), "true")
				}
				if byEnv {
					if s.Environment == "" {
						msgf("filterByServiceEnvCluster needs the stage's environment:")
					}
					continue
				}
				if p.Service == nil || p.Service.Name == "" || s.Environment == "" {
					msgf("no way to find the apps: give applicationSet, selector or labels, or declare the pipeline's service: and the stage's environment: (apps are then matched by %s and %s)",
						steps.LabelServiceRef, steps.LabelEnvRef)
				}
			case "GitOpsSync":
				if !fetched && !given("applicationsList", "applicationRegex", "applicationLabels") {
					msgf("no apps to sync: give applicationsList, applicationRegex or applicationLabels, or put a FetchLinkedApps or UpdateGitOpsApp step before it")
				}
			}
		}
	}
}
