package pipelines

import (
	"fmt"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/steps/duration"
	"github.com/prflow/prflow/steps/template"
	"github.com/prflow/prflow/yamlconf"
)

// A pipeline's `promotion:` section promotes values through the environments of an Argo CD
// ApplicationSet whose git files generator reads one config file per environment. The loader
// expands it, before anything else is read, into one ordinary stage per environment (appended
// to `stages:`), so the state machine, the API and `prflow status` see nothing new:
//
//	[approval] → update (UpdateReleaseRepo) → preview (DiffPreview) → merge (MergePR)
//	           → apps (FetchLinkedApps) → sync (GitOpsSync, waitTillHealthy) → [gate: soak]
//	rollbackSteps: revert (RevertPR of the merge commit) → mergeRevert (MergePR) → resync
//
// With `mergedBy: people` the update step waits for a person to merge its PR
// (waitForMerge) and there is no merge or preview step. `preview: false` leaves the preview
// out; `allowNoop: true` lets a PR that changes nothing deployed merge. The generated YAML nodes carry the line of the
// promotion entry they come from, so any error in them points into the promotion section.

// promotionDoc is the promotion: section as written (its fields in the order the schema
// lists them). The values copied into the generated stages are taken as their nodes (Doc.Node),
// so that a problem in a stage points into the promotion section.
type promotionDoc struct {
	ApplicationSet  string `yaml:"applicationSet"`
	AppSelector     string `yaml:"appSelector"`
	Connector       string
	Repo            string
	FilePath        string     `yaml:"filePath"`
	Set             *yaml.Node // checked by setMap
	Create          bool
	MergedBy        string `yaml:"mergedBy"`
	Preview         bool
	AllowNoop       bool         `yaml:"allowNoop"`
	MergeStrategy   string       `yaml:"mergeStrategy"`
	PrTitle         string       `yaml:"prTitle"`
	AppWaitTimeout  string       `yaml:"appWaitTimeout"`
	SyncTimeout     string       `yaml:"syncTimeout"`
	DegradedTimeout string       `yaml:"degradedTimeout"`
	Environments    []*yaml.Node `want:"a non-empty list of environments (names, or {name, clusters, approval, soak, set, timeout})"`
}

// promotionEnvDoc is an entry of promotion.environments written as a mapping.
type promotionEnvDoc struct {
	Name     string
	Clusters *yaml.Node // copied into environments:
	Set      *yaml.Node
	Create   bool
	Approval *yaml.Node // Approval step inputs plus a timeout
	Soak     string
	Timeout  string
}

// Step ids of a generated stage; pipelines refer to them as stages.<env>.steps.<id>.
const (
	promoApproval    = "approval"
	promoUpdate      = "update"
	promoPreview     = "preview"
	promoMerge       = "merge"
	promoApps        = "apps"
	promoSync        = "sync"
	promoRevert      = "revert"
	promoMergeRevert = "mergeRevert"
	promoResync      = "resync"
)

// soakCondition is what must keep holding while an environment soaks: no app turns Degraded
// or goes Missing. A pod restart or a scale-out (Progressing for a moment) is not a reason
// to roll back; a crash loop is, and fails the stage, which reverts its change.
const soakCondition = `${{ none(apps, .health in ["Degraded", "Missing"]) }}`

// expandPromotion replaces the root's `promotion:` key by the stages (and environments) it
// stands for. It only reports problems in the promotion section itself; the generated stages
// are then checked by the ordinary stage loader.
func (l *loader) expandPromotion(root *yaml.Node) {
	if root.Kind != yaml.MappingNode {
		return
	}
	var key, val *yaml.Node
	kept := root.Content[:0:0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "promotion" {
			kept = append(kept, k, v)
			continue
		}
		if key != nil {
			l.errf(k, "promotion", "duplicate key")
			continue
		}
		key, val = k, deref(v)
	}
	if key == nil {
		return
	}
	root.Content = kept
	var pd promotionDoc
	l.d.Decode(val, "promotion", &pd)
	if val.Kind != yaml.MappingNode {
		return
	}
	// opt is a field's node for the generated stages: nil when absent or when it has a
	// problem, which is then reported once, here, not again per environment.
	dropped := map[string]bool{}
	opt := func(name string) *yaml.Node {
		p := "promotion." + name
		if dropped[name] || l.d.Bad(p) {
			return nil
		}
		return l.d.Node(p)
	}
	req := func(name, v string) string {
		p := "promotion." + name
		switch n := l.d.Node(p); {
		case n == nil:
			l.errf(val, p, "required")
		case v == "" && n.Kind == yaml.ScalarNode && n.Tag != "!!null":
			l.errf(n, p, "must not be empty")
		}
		return v
	}
	req("applicationSet", pd.ApplicationSet)
	req("connector", pd.Connector)
	req("repo", pd.Repo)
	if filePath := req("filePath", pd.FilePath); filePath != "" {
		if msg := badPathTemplate(filePath); msg != "" {
			l.errf(l.node("promotion.filePath"), "promotion.filePath", "%s", msg)
		}
	}
	if pd.Set == nil {
		l.errf(val, "promotion.set", "required: the keys to write in each environment's file, e.g. {image.tag: \"${{ inputs.tag }}\"}")
	} else {
		l.setMap(pd.Set, "promotion.set", false)
		l.setRefs(root, pd.Set, "promotion.set")
	}
	people := false
	switch pd.MergedBy {
	case "", "prflow":
	case "people":
		people = true
	default:
		l.errf(l.node("promotion.mergedBy"), "promotion.mergedBy", "want prflow (prflow merges each PR) or people (prflow waits until someone merges it), got %q", pd.MergedBy)
	}
	// Fields copied into every generated stage are checked here, once, with their promotion
	// path; a bad one is left out of the stages so it is not reported again per environment.
	for name, v := range map[string]string{"appWaitTimeout": pd.AppWaitTimeout, "syncTimeout": pd.SyncTimeout, "degradedTimeout": pd.DegradedTimeout} {
		if !l.durOK(v, "promotion."+name) {
			dropped[name] = true
		}
	}
	// Environments sharing a cluster: the ApplicationSet's apps there belong to several of
	// them, and a label selector (e.g. harness.io/envRef=<+env.name>) tells them apart.
	if sel := opt("appSelector"); sel != nil && !l.stepInputsOK("FetchLinkedApps", sel, "promotion.appSelector", "selector", sel) {
		dropped["appSelector"] = true
	}
	if people && opt("preview") != nil && pd.Preview {
		l.errf(opt("preview"), "promotion.preview", "mergedBy: people merges outside prflow; the preview runs before prflow's merge only")
	}
	if ms := opt("mergeStrategy"); ms != nil && !l.stepInputsOK("MergePR", ms, "promotion.mergeStrategy", "mergeStrategy", ms) {
		dropped["mergeStrategy"] = true
	}

	declared, envsNode := declaredEnvs(root)
	if en := l.d.Node("promotion.environments"); en == nil {
		// Discovering environments from the generator needs the release repo, which only
		// workers can read; the list is required instead.
		l.errf(val, "promotion.environments", "required: the environments to promote through, in order")
		return
	} else if en.Kind != yaml.SequenceNode {
		return // reported by the decode
	} else if len(pd.Environments) == 0 {
		l.errf(en, "promotion.environments", "want a non-empty list of environments (names, or {name, clusters, approval, soak, set, timeout})")
		return
	}
	stagesNode := findKey(root, "stages")
	if stagesNode == nil {
		stagesNode = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: key.Line, Column: key.Column}
		root.Content = append(root.Content, scalar(key.Line, "stages"), stagesNode)
	} else if stagesNode = deref(stagesNode); stagesNode.Kind != yaml.SequenceNode {
		return // the stage loader reports it
	}
	taken := map[string]int{} // ids of the pipeline's own stages
	for i, sn := range stagesNode.Content {
		sn = deref(sn)
		if v := findKey(sn, "id"); v != nil {
			taken[v.Value] = i
		} else if v := findKey(sn, "name"); v != nil {
			taken[slug(v.Value)] = i
		}
	}
	seen := map[string]bool{}
	for i, en := range pd.Environments {
		p := fmt.Sprintf("promotion.environments[%d]", i)
		e := l.promotionEnv(deref(en), p)
		if e.name == "" {
			continue
		}
		if seen[e.name] {
			l.errf(e.nameNode, p, "duplicate environment %q: each environment is promoted once", e.name)
			continue
		}
		seen[e.name] = true
		if !idRE.MatchString(e.name) {
			l.errf(e.nameNode, p+".name", "%q: environment names of a promotion become stage ids: use letters, digits, - and _ (start with a letter)", e.name)
			continue
		}
		if si, ok := taken[e.name]; ok {
			l.errf(e.nameNode, p, "stage id %q is taken by stages[%d]; a promotion's stages are named after their environments", e.name, si)
			continue
		}
		switch {
		case e.clusters != nil && declared[e.name]:
			l.errf(e.clusters, p+".clusters", "environment %q is already declared under environments:; give its clusters in one place", e.name)
		case e.clusters != nil:
			// The promotion declares the environment: add it to environments: for the loader.
			if envsNode == nil {
				envsNode = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: key.Line}
				root.Content = append(root.Content, scalar(key.Line, "environments"), envsNode)
			}
			envsNode.Content = append(envsNode.Content, mapping(e.line, "name", scalar(e.line, e.name), "clusters", e.clusters))
		case !declared[e.name]:
			l.errf(e.nameNode, p, "unknown environment %q (declare it under environments:, or give its clusters: here)", e.name)
			continue
		}
		stagesNode.Content = append(stagesNode.Content, promotionStage(opt, e, people))
	}
}

// promoEnv is one entry of promotion.environments.
type promoEnv struct {
	name     string
	nameNode *yaml.Node
	line     int
	clusters *yaml.Node
	set      *yaml.Node
	approval *yaml.Node
	soak     *yaml.Node
	timeout  *yaml.Node
	create   *yaml.Node // the environment's file or keys may be new
}

func (l *loader) promotionEnv(n *yaml.Node, p string) promoEnv {
	e := promoEnv{nameNode: n, line: n.Line}
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" || n.Value == "" {
			l.errf(n, p, "empty environment name")
			return e
		}
		e.name = n.Value
		return e
	}
	var ed promotionEnvDoc
	l.d.Decode(n, p, &ed)
	if n.Kind != yaml.MappingNode {
		return e
	}
	e.name = ed.Name
	if nn := l.d.Node(p + ".name"); nn != nil {
		e.nameNode = nn
	}
	if e.name == "" && !l.d.Bad(p+".name") {
		l.errf(n, p+".name", "required")
	}
	if template.Contains(e.name) {
		l.errf(e.nameNode, p+".name", "an environment name is fixed at load; it cannot be an expression")
		e.name = ""
	}
	if c := ed.Clusters; c != nil {
		if c.Kind != yaml.SequenceNode || len(c.Content) == 0 {
			l.errf(c, p+".clusters", "want a non-empty list of {name, agent}")
		} else {
			e.clusters = c
		}
	}
	if ed.Set != nil {
		l.setMap(ed.Set, p+".set", true)
		e.set = ed.Set
	}
	if !l.d.Bad(p + ".create") {
		e.create = l.d.Node(p + ".create")
	}
	if a := ed.Approval; a != nil {
		if a.Kind != yaml.MappingNode {
			l.errf(a, p+".approval", "want a mapping of Approval inputs, e.g. {approvers: {groups: [release-managers]}, timeout: 1d}")
		} else if l.approvalOK(a, p+".approval") {
			e.approval = a
		}
	}
	if l.dur(ed.Soak, p+".soak") > 0 {
		e.soak = l.d.Node(p + ".soak")
	}
	if ed.Timeout != "" && l.durOK(ed.Timeout, p+".timeout") {
		e.timeout = l.d.Node(p + ".timeout")
	}
	return e
}

// durOK reports whether the duration s read at path is absent or valid (reporting it when not).
func (l *loader) durOK(s, path string) bool {
	n := l.d.Count()
	l.dur(s, path)
	return l.d.Count() == n
}

// approvalOK checks an environment's approval: the Approval step's inputs plus a timeout.
func (l *loader) approvalOK(n *yaml.Node, p string) bool {
	var kv []any
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "timeout" {
			if v.Kind != yaml.ScalarNode {
				l.errf(v, p+".timeout", "want a duration such as 1d, got %s", yamlconf.Kind(v))
				return false
			}
			if _, err := duration.Parse(v.Value); err != nil {
				l.errf(v, p+".timeout", "%v", err)
				return false
			}
			continue
		}
		kv = append(kv, k.Value, v)
	}
	return l.stepInputsOK("Approval", n, p, kv...)
}

// stepInputsOK runs a step type's load-time validation over inputs given as key, node pairs,
// reporting a problem at node n under path p.
func (l *loader) stepInputsOK(typ string, n *yaml.Node, p string, kv ...any) bool {
	def, ok := l.reg.Lookup(typ)
	if !ok || def.Validate == nil {
		return true
	}
	// A scratch loader: expression errors in the inputs are reported by the stage loader.
	d, _ := yamlconf.Parse(l.file, nil)
	scratch := &loader{file: l.file, reg: l.reg, d: d}
	if err := def.Validate(scratch.value(mapping(n.Line, kv...), p).Static()); err != nil {
		l.errf(n, p, "%v", err)
		return false
	}
	return true
}

// setMap checks a `set:` mapping: dotted keys (with [i] list indexes) → values.
func (l *loader) setMap(n *yaml.Node, p string, allowEmpty bool) {
	if n.Kind != yaml.MappingNode {
		l.errf(n, p, "want a mapping of key → value (dotted keys such as image.tag), got %s", yamlconf.Kind(n))
		return
	}
	if len(n.Content) == 0 && !allowEmpty {
		l.errf(n, p, "want at least one key to write")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			l.errf(k, join(p, k.Value), "duplicate key")
		}
		seen[k.Value] = true
		if k.Value == "" || strings.HasPrefix(k.Value, ".") || strings.HasSuffix(k.Value, ".") || strings.Contains(k.Value, "..") {
			l.errf(k, join(p, k.Value), "want a dotted key such as image.tag")
		}
	}
}

// setRefs reports, once and at their promotion path, set: values that read an input or a
// pipeline variable the pipeline does not declare; the stage loader would otherwise report
// them once per environment. A bad value is blanked so it is not reported again.
func (l *loader) setRefs(root, set *yaml.Node, p string) {
	if set.Kind != yaml.MappingNode {
		return
	}
	names := func(key string) map[string]bool {
		out := map[string]bool{}
		if n := deref(findKey(root, key)); n != nil && n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				out[n.Content[i].Value] = true
			}
		}
		return out
	}
	inputs, vars := names("inputs"), names("variables")
	for i := 0; i+1 < len(set.Content); i += 2 {
		k, v := set.Content[i], deref(set.Content[i+1])
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || !template.Contains(v.Value) {
			continue
		}
		t, err := template.Compile(v.Value)
		if err != nil {
			l.exprErr(v, join(p, k.Value), err)
			*v = *scalar(v.Line, "")
			continue
		}
		for _, ref := range t.Refs() {
			if msg := refProblem(ref, inputs, vars, vars, nil, ""); msg != "" && !strings.HasPrefix(ref, "steps.") && !strings.HasPrefix(ref, "stages.") {
				l.errf(v, join(p, k.Value), "%s", msg)
				*v = *scalar(v.Line, "")
				break
			}
		}
	}
}

// badPathTemplate says what is wrong with a promotion's file path template, or "".
func badPathTemplate(s string) string {
	if strings.Contains(s, "*") || strings.ContainsAny(s, "?[") {
		return fmt.Sprintf("%q is a generator glob; write the one file of an environment, with <+env.name> where the glob has * (e.g. envs/<+env.name>/config.json)", s)
	}
	if !strings.Contains(strings.ReplaceAll(s, " ", ""), "env.name") {
		return fmt.Sprintf("%q does not name the environment: every environment would write the same file (use <+env.name>, e.g. envs/<+env.name>/config.json)", s)
	}
	if _, err := template.Compile(s); err != nil {
		return err.Error()
	}
	if strings.HasPrefix(s, "/") || strings.Contains("/"+s+"/", "/../") {
		return fmt.Sprintf("%q: want a path relative to the repo root, without ..", s)
	}
	switch strings.ToLower(path.Ext(s)) {
	case ".json", ".yaml", ".yml":
	default:
		return fmt.Sprintf("%q: want a .json, .yaml or .yml config file", s)
	}
	return ""
}

// declaredEnvs returns the names under the root's environments: list (and that list).
func declaredEnvs(root *yaml.Node) (map[string]bool, *yaml.Node) {
	out := map[string]bool{}
	n := findKey(root, "environments")
	if n == nil {
		return out, nil
	}
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		return out, nil // the environments loader reports it
	}
	for _, en := range n.Content {
		if v := findKey(deref(en), "name"); v != nil && v.Kind == yaml.ScalarNode {
			out[v.Value] = true
		}
	}
	return out, n
}

// promotionStage builds one environment's stage as the YAML a person would have written.
func promotionStage(opt func(name string) *yaml.Node, e promoEnv, people bool) *yaml.Node {
	ln := e.line
	s := func(v string) *yaml.Node { return scalar(ln, v) }
	var steps []*yaml.Node
	if e.approval != nil {
		var with []any
		var timeout *yaml.Node
		for i := 0; i+1 < len(e.approval.Content); i += 2 {
			k, v := e.approval.Content[i], e.approval.Content[i+1]
			if k.Value == "timeout" {
				timeout = v // a step field, not an Approval input
				continue
			}
			with = append(with, k.Value, v)
		}
		steps = append(steps, mapping(ln, "id", s(promoApproval), "type", s("Approval"), "timeout", timeout, "with", mapping(e.approval.Line, with...)))
	}
	// Variables: the promotion's set, then the environment's own (later keys win in the step).
	var vars []*yaml.Node
	for _, set := range []*yaml.Node{opt("set"), e.set} {
		if set == nil || set.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(set.Content); i += 2 {
			k, v := set.Content[i], deref(set.Content[i+1])
			vars = append(vars, mapping(k.Line, "name", scalar(k.Line, k.Value), "type", scalar(k.Line, valueType(v)), "value", v))
		}
	}
	create := opt("create")
	if e.create != nil {
		create = e.create
	}
	update := []any{"connector", opt("connector"), "repo", opt("repo"), "filePath", opt("filePath"),
		"prTitle", opt("prTitle"), "create", create, "variables", seq(ln, vars...)}
	if people {
		update = append(update, "waitForMerge", boolean(ln, true))
	}
	steps = append(steps, mapping(ln, "id", s(promoUpdate), "type", s("UpdateReleaseRepo"), "with", mapping(ln, update...)))
	// The commit the environment's apps must reach, and the one a rollback reverts.
	merged := promoMerge
	if people {
		merged = promoUpdate
	} else {
		// What the PR would deploy, before it merges: a PR that changes nothing fails here,
		// and the stage policy sees the diff (input.diff). An already promoted environment
		// opened no PR, and its preview passes with nothing to show.
		if p := opt("preview"); p == nil || isTrue(p) {
			steps = append(steps, mapping(ln, "id", s(promoPreview), "type", s("DiffPreview"), "with",
				mapping(ln, "applicationSet", opt("applicationSet"), "selector", opt("appSelector"), "allowNoop", opt("allowNoop"))))
		}
		steps = append(steps, mapping(ln, "id", s(promoMerge), "type", s("MergePR"), "with",
			mapping(ln, "connector", opt("connector"), "repo", opt("repo"), "mergeStrategy", opt("mergeStrategy"), "deleteSourceBranch", boolean(ln, true))))
	}
	steps = append(steps, mapping(ln, "id", s(promoApps), "type", s("FetchLinkedApps"), "with",
		mapping(ln, "applicationSet", opt("applicationSet"), "selector", opt("appSelector"), "appWaitTimeout", opt("appWaitTimeout"))))
	syncTimeout := opt("syncTimeout")
	if syncTimeout == nil {
		syncTimeout = s("10m")
	}
	sync := []any{"waitTillHealthy", boolean(ln, true), "failOnTimeout", boolean(ln, true), "degradedStateTimeout", opt("degradedTimeout")}
	if people {
		// An environment already promoted merges nothing: its apps must reach the revision
		// that already held the values.
		sync = append(sync, "expectedRevision", s("${{ steps."+promoUpdate+".outputs.revision ?? steps."+promoUpdate+".outputs.commitId }}"))
	}
	steps = append(steps, mapping(ln, "id", s(promoSync), "type", s("GitOpsSync"), "timeout", syncTimeout, "with", mapping(ln, sync...)))

	// Rollback: only what was merged is reverted (an approval rejected, an update that
	// failed before its merge, or an environment already promoted leaves nothing to undo).
	rollback := []*yaml.Node{
		mapping(ln, "id", s(promoRevert), "type", s("RevertPR"),
			"when", s(`${{ steps.`+merged+`.status == "succeeded" && steps.`+merged+`.outputs.commitId != "" }}`),
			"with", mapping(ln, "connector", opt("connector"), "repo", opt("repo"), "commitId", s("${{ steps."+merged+".outputs.commitId }}"))),
		mapping(ln, "id", s(promoMergeRevert), "type", s("MergePR"),
			"when", s(`${{ steps.`+promoRevert+`.status == "succeeded" }}`),
			"with", mapping(ln, "connector", opt("connector"), "repo", opt("repo"), "mergeStrategy", opt("mergeStrategy"))),
		mapping(ln, "id", s(promoResync), "type", s("GitOpsSync"), "timeout", syncTimeout,
			"when", s(`${{ steps.`+promoMergeRevert+`.status == "succeeded" && steps.`+promoApps+`.status == "succeeded" }}`),
			"with", mapping(ln, "waitTillHealthy", boolean(ln, true), "failOnTimeout", boolean(ln, true))),
	}
	var gate *yaml.Node
	if e.soak != nil {
		gate = mapping(ln, "condition", s(soakCondition), "soak", e.soak)
	}
	return mapping(ln, "id", s(e.name), "environment", s(e.name), "timeout", e.timeout, "gate", gate,
		"steps", seq(ln, steps...), "rollbackSteps", seq(ln, rollback...))
}

// isTrue reports whether a checked boolean field says true.
func isTrue(n *yaml.Node) bool {
	var b bool
	return n != nil && n.Decode(&b) == nil && b
}

// valueType is the UpdateReleaseRepo variable type that keeps a YAML value's kind in the file.
func valueType(v *yaml.Node) string {
	switch {
	case v.Kind != yaml.ScalarNode:
		return "Raw"
	case v.Tag == "!!int" || v.Tag == "!!float":
		return "Number"
	case v.Tag == "!!bool":
		return "Boolean"
	}
	return "String"
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func scalar(line int, v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Line: line}
}

func boolean(line int, b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(b), Line: line}
}

func seq(line int, items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items, Line: line}
}

// mapping builds a mapping from key, value pairs; a nil value leaves its key out.
func mapping(line int, kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line}
	for i := 0; i+1 < len(kv); i += 2 {
		v, _ := kv[i+1].(*yaml.Node)
		if v == nil {
			continue
		}
		n.Content = append(n.Content, scalar(line, kv[i].(string)), v)
	}
	return n
}
