package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/steps/template"
)

// stages converts the stage list. Harness runs `parallel:` blocks and matrix expansions side
// by side; natively that is `needs:` on the stages of the group and on the group after it.
func (c *conv) stages(n *yaml.Node, path string, out *yaml.Node) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		c.bad(n, path, "want a non-empty list of stages")
		return
	}
	var groups [][]*yaml.Node
	for i, item := range n.Content {
		p := itemPath(path, i)
		f := c.fields(item, p, "stage", "parallel")
		if f["stage"].v != nil && f["parallel"].v != nil {
			// YAML accepts both; Harness takes one, and the second would vanish here.
			c.bad(f["parallel"].k, p+".parallel", "an entry of stages holds one of stage, parallel (start a new entry with -)")
		}
		switch {
		case f["stage"].v != nil:
			groups = append(groups, c.stage(f["stage"].v, p+".stage")...)
		case f["parallel"].v != nil:
			pn := f["parallel"].v
			if pn.Kind != yaml.SequenceNode {
				c.bad(pn, p+".parallel", "want a list of stages")
				continue
			}
			var g []*yaml.Node
			for j, sub := range pn.Content {
				sp := itemPath(p+".parallel", j)
				sf := c.fields(sub, sp, "stage")
				if sf["stage"].v == nil {
					c.bad(sub, sp, "want {stage: …}")
					continue
				}
				for _, sg := range c.stage(sf["stage"].v, sp+".stage") {
					g = append(g, sg...)
				}
			}
			if len(g) > 0 {
				groups = append(groups, g)
			}
		}
	}
	prevIDs := []string{}
	prevMulti := false
	for _, g := range groups {
		multi := len(g) > 1
		for _, st := range g {
			if multi || prevMulti {
				needs := seqNode()
				needs.Style = yaml.FlowStyle
				for _, id := range prevIDs {
					needs.Content = append(needs.Content, strNode(id))
				}
				insertAfter(st, "name", "needs", needs)
			}
			out.Content = append(out.Content, st)
		}
		prevIDs = prevIDs[:0]
		for _, st := range g {
			prevIDs = append(prevIDs, get(st, "id").Value)
		}
		prevMulti = multi
	}
}

func insertAfter(m *yaml.Node, after, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == after {
			rest := append([]*yaml.Node{strNode(key), v}, m.Content[i+2:]...)
			m.Content = append(m.Content[:i+2], rest...)
			return
		}
	}
	put(m, key, v)
}

// stage converts one Harness stage into native stages: one, or one per matrix combination
// (a group that runs side by side, or one group each with maxConcurrency: 1).
func (c *conv) stage(n *yaml.Node, path string) [][]*yaml.Node {
	id := ""
	if x := get(n, "identifier"); isScalar(x) {
		id = nativeID(x.Value)
	} else if x := get(n, "name"); isScalar(x) {
		id = nativeID(x.Value)
	}
	if id == "" {
		c.bad(n, path+".identifier", "required")
		return nil
	}
	if c.template(n, path) {
		return nil
	}
	strat := deref(get(n, "strategy"))
	if strat == nil || get(strat, "matrix") == nil {
		if strat != nil {
			c.fields(strat, path+".strategy") // repeat, parallelism: reported as unsupported
		}
		if st := c.stageOne(n, path, id); st != nil {
			return [][]*yaml.Node{{st}}
		}
		return nil
	}
	combos, limit := c.matrix(strat, path+".strategy")
	// maxConcurrency N: waves of N stages side by side, each wave after the one before.
	var group []*yaml.Node
	var groups [][]*yaml.Node
	for i, combo := range combos {
		cp := c.clone(n, func(s string) string { return substMatrix(s, combo, i, len(combos)) })
		st := c.stageOne(cp, path, fmt.Sprintf("%s_%d", id, i))
		if st == nil {
			continue
		}
		if group = append(group, st); limit > 0 && len(group) == limit {
			groups, group = append(groups, group), nil
		}
	}
	if len(group) > 0 {
		groups = append(groups, group)
	}
	return groups
}

// matrix returns the combinations of a `strategy.matrix` (axes in file order, the last axis
// changing fastest, excluded combinations dropped) and how many may run at once (its
// maxConcurrency; 0 for all).
func (c *conv) matrix(n *yaml.Node, path string) ([]map[string]string, int) {
	f := c.fields(n, path, "matrix")
	m := f["matrix"].v
	if m == nil {
		return []map[string]string{{}}, 1
	}
	if m.Kind != yaml.MappingNode {
		c.bad(m, path+".matrix", "want a mapping of axis: values")
		return []map[string]string{{}}, 1
	}
	type axis struct {
		name string
		vals []string
	}
	var axes []axis
	var exclude []map[string]string
	limit := 0
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], deref(m.Content[i+1])
		p := path + ".matrix." + k.Value
		switch k.Value {
		case "maxConcurrency":
			if isScalar(v) && strings.Contains(v.Value, "<+") {
				c.unsupported(v, p, "maxConcurrency as an expression")
			} else if x, err := strconv.Atoi(v.Value); err != nil || x < 1 || !isScalar(v) {
				c.bad(v, p, "want a whole number ≥ 1")
			} else {
				limit = x
			}
			continue
		case "nodeName":
			continue // display name only
		case "exclude":
			if v.Kind != yaml.SequenceNode {
				c.bad(v, p, "want a list of {axis: value}")
				continue
			}
			for j, e := range v.Content {
				if e = deref(e); e.Kind != yaml.MappingNode || len(e.Content) == 0 {
					// It would exclude nothing.
					c.bad(e, itemPath(p, j), "want {axis: value, …}: the combination to leave out")
					continue
				}
				ex := map[string]string{}
				for j := 0; j+1 < len(e.Content); j += 2 {
					ex[e.Content[j].Value] = e.Content[j+1].Value
				}
				exclude = append(exclude, ex)
			}
			continue
		}
		ax := axis{name: k.Value}
		reported := false // axisValues reports its own failure: one problem, one line
		switch {
		case v.Kind == yaml.SequenceNode:
			for _, x := range v.Content {
				if !isScalar(x) {
					c.unsupported(x, p, "matrix values that are not scalars")
					continue
				}
				ax.vals = append(ax.vals, x.Value)
			}
		case isScalar(v) && strings.Contains(v.Value, "<+"):
			n := len(c.errs)
			ax.vals = c.axisValues(v, p)
			reported = len(c.errs) > n
		default:
			c.bad(v, p, "want a list of values or an expression giving a list")
			reported = true
		}
		if len(ax.vals) == 0 {
			if !reported {
				c.bad(v, p, "matrix axis %q has no values", k.Value)
			}
			ax.vals = []string{""}
		}
		axes = append(axes, ax)
	}
	combos := []map[string]string{{}}
	for _, ax := range axes {
		if len(combos)*len(ax.vals) > 4*maxCombos {
			c.bad(m, path+".matrix", "more than %d combinations", maxCombos)
			return []map[string]string{{}}, 1
		}
		var next []map[string]string
		for _, base := range combos {
			for _, val := range ax.vals {
				cm := map[string]string{}
				for k, v := range base {
					cm[k] = v
				}
				cm[ax.name] = val
				next = append(next, cm)
			}
		}
		combos = next
	}
	var out []map[string]string
	for _, cm := range combos {
		if len(out) == maxCombos {
			c.bad(m, path+".matrix", "more than %d combinations", maxCombos)
			break
		}
		skip := false
		for _, ex := range exclude {
			all := len(ex) > 0
			for k, v := range ex {
				all = all && cm[k] == v
			}
			skip = skip || all
		}
		if !skip {
			out = append(out, cm)
		}
	}
	if len(out) == 0 {
		c.bad(n, path+".matrix", "every combination is excluded")
		out = []map[string]string{{}}
	}
	return out, limit
}

// axisValues evaluates a matrix axis expression such as <+pipeline.variables.apps.split(',')>
// over the pipeline variables (and so the runtime inputs) known now.
func (c *conv) axisValues(v *yaml.Node, path string) (out []string) {
	src, probs := rewriteExpr(v.Value)
	for _, p := range probs {
		c.unsupported(v, path, "%s", p)
	}
	r := c.evalNow(src)
	if r.err != "" {
		if c.o.Validate {
			return []string{"<" + path + ">"}
		}
		c.bad(v, path, "matrix axis %s cannot be expanded: %s", v.Value, r.err)
		return nil
	}
	defer func() {
		c.notes = append(c.notes, fmt.Sprintf("%s: %s expanded to %v at conversion; convert again for other inputs", path, v.Value, out))
	}()
	switch x := r.v.(type) {
	case []any:
		for _, e := range x {
			s, err := template.Format(e)
			if err != nil {
				c.bad(v, path, "matrix value %v: %v", e, err)
				continue
			}
			out = append(out, strings.TrimSpace(s))
		}
		return out
	case []string:
		out = x
		return out
	}
	c.bad(v, path, "matrix axis %s gives %T, want a list", v.Value, r.v)
	return nil
}

// evalNow evaluates an expression over pipeline variables and inputs known at conversion time.
func (c *conv) evalNow(src string) resolved {
	t, err := template.Compile(src)
	if err != nil {
		return resolved{err: err.Error()}
	}
	for _, ref := range t.Refs() {
		parts := strings.Split(ref, ".")
		if len(parts) >= 3 && parts[0] == "pipeline" && parts[1] == "variables" {
			if e, ok := c.pvarErr[parts[2]]; ok {
				return resolved{err: e}
			}
		}
		if parts[0] == "inputs" && len(parts) > 1 {
			if _, ok := c.o.Inputs[parts[1]]; !ok {
				return resolved{err: fmt.Sprintf("input %q has no value: give it with --set %s=…", parts[1], parts[1])}
			}
		}
	}
	env := map[string]any{"pipeline": map[string]any{"variables": c.pvars}, "variables": c.pvars, "inputs": c.o.Inputs}
	v, err := t.Eval(context.Background(), env)
	if err != nil {
		return resolved{err: err.Error()}
	}
	return resolved{v: v}
}

// stageOne converts one (matrix-expanded) Harness stage.
func (c *conv) stageOne(n *yaml.Node, path, id string) *yaml.Node {
	if !c.spend(1) {
		return nil
	}
	f := c.fields(n, path, "type", "spec", "failureStrategies", "when", "variables", "strategy", "timeout", "gitOpsEnabled")
	if g := f["gitOpsEnabled"].v; g != nil && g.Value != "true" {
		// The UI repeats spec.gitOpsEnabled at the stage: true is a no-op.
		c.unsupported(g, path+".gitOpsEnabled", "gitOpsEnabled: %s (only GitOps PR pipelines: gitOpsEnabled: true)", g.Value)
	}
	out := at(mapNode(), n)
	out.HeadComment = marker(path, n.Line)
	idNode := get(n, "identifier")
	if !isScalar(idNode) {
		idNode = get(n, "name")
	}
	put(out, "id", at(strNode(id), idNode))
	if x := get(n, "name"); isScalar(x) {
		put(out, "name", at(strNode(x.Value), x))
	}
	sc := &stageCtx{id: id, path: path}
	typ := c.str(f["type"], path+".type")
	spec := f["spec"].v
	sf := map[string]hfield{}
	switch typ {
	case "Deployment":
		sf = c.fields(spec, path+".spec", "deploymentType", "gitOpsEnabled", "service", "environment", "execution")
		if dt := c.str(sf["deploymentType"], path+".spec.deploymentType"); dt != "Kubernetes" {
			c.unsupported(sf["deploymentType"].v, path+".spec.deploymentType", "deploymentType %q (only Kubernetes GitOps stages)", dt)
		}
		if g := sf["gitOpsEnabled"].v; g == nil || g.Value != "true" {
			c.unsupported(spec, path+".spec.gitOpsEnabled", "a Deployment stage without gitOpsEnabled: true (only GitOps PR pipelines)")
		}
	case "Approval", "Custom":
		sf = c.fields(spec, path+".spec", "execution", "environment")
	case "":
		c.bad(n, path+".type", "required")
	default:
		c.unsupported(f["type"].k, path+".type", "stage type %q (supported: Deployment with gitOpsEnabled, Approval, Custom)", typ)
		c.dropped[id] = true
		return nil
	}
	if s := sf["service"].v; s != nil {
		sc.svc = c.service(s, path+".spec.service")
	}
	if hid := get(n, "identifier"); isScalar(hid) {
		c.stageSvc[hid.Value] = sc.svc
	}
	if e := sf["environment"].v; e != nil {
		name, clusters := c.stageEnv(e, path+".spec.environment")
		if name != "" {
			put(out, "environment", strNode(name))
			if len(clusters) > 0 {
				cl := seqNode()
				cl.Style = yaml.FlowStyle
				for _, x := range clusters {
					cl.Content = append(cl.Content, strNode(x))
				}
				put(out, "clusters", cl)
			}
		}
	}
	if w := f["when"].v; w != nil {
		put(out, "when", c.when(w, path+".when", "pipelineStatus"))
	}
	if t := f["timeout"].v; t != nil {
		put(out, "timeout", c.timeout(t, path+".timeout"))
	}
	if fs := f["failureStrategies"].v; fs != nil {
		put(out, "onFailure", c.failure(fs, path+".failureStrategies"))
	}
	if v := f["variables"].v; v != nil {
		if vars := c.variables(v, path+".variables", id); len(vars.Content) > 0 {
			put(out, "variables", vars)
		}
	}
	ex := c.fields(sf["execution"].v, path+".spec.execution", "steps", "rollbackSteps")
	if ex["steps"].v == nil {
		c.bad(spec, path+".spec.execution.steps", "required: a stage needs at least one step")
	} else {
		put(out, "steps", c.steps(ex["steps"].v, path+".spec.execution.steps", sc, nil))
	}
	if rb := ex["rollbackSteps"].v; rb != nil && len(rb.Content) > 0 {
		put(out, "rollbackSteps", c.steps(rb, path+".spec.execution.rollbackSteps", sc, nil))
	}
	return out
}

func (c *conv) needMap(n *yaml.Node, path, what string) bool {
	if c.o.Map == nil {
		c.bad(n, path, "%s is kept in Harness; give a mapping file with --harness-map", what)
		return false
	}
	return true
}

func (c *conv) service(n *yaml.Node, path string) *ServiceMap {
	f := c.fields(n, path, "serviceRef", "useFromStage", "serviceInputs")
	defer func(si hfield) {
		if si.v != nil {
			c.serviceInputs(si.v, path+".serviceInputs", c.stageService(f))
		}
	}(f["serviceInputs"])
	if u := f["useFromStage"].v; u != nil {
		uf := c.fields(u, path+".useFromStage", "stage")
		st := c.str(uf["stage"], path+".useFromStage.stage")
		s, ok := c.stageSvc[st]
		if !ok {
			c.bad(u, path+".useFromStage.stage", "no earlier stage %q with a service", st)
		}
		return s
	}
	ref := c.str(f["serviceRef"], path+".serviceRef")
	if ref == "" {
		c.bad(n, path+".serviceRef", "required")
		return nil
	}
	if strings.Contains(ref, "<+") {
		c.unsupported(f["serviceRef"].v, path+".serviceRef", "a service given as an expression or runtime input")
		return nil
	}
	if !c.needMap(f["serviceRef"].v, path+".serviceRef", "service "+ref) {
		return nil
	}
	s, ok := c.o.Map.Services[ref]
	if !ok {
		c.bad(f["serviceRef"].v, path+".serviceRef", "service %q is not in the mapping file %s (add it under services:)", ref, c.o.Map.File)
		return nil
	}
	switch {
	case c.svc == nil:
		c.svc = s
	case c.svc != s && len(s.Variables) > 0 && len(c.svc.Variables) > 0:
		c.unsupported(f["serviceRef"].v, path+".serviceRef", "a second service with variables (%q after %q): prflow has one service per pipeline", ref, c.svc.Ref)
	}
	return s
}

// stageEnv resolves a stage's environment and selected GitOps clusters through the map.
func (c *conv) stageEnv(n *yaml.Node, path string) (string, []string) {
	f := c.fields(n, path, "environmentRef", "deployToAll", "gitOpsClusters", "environmentInputs")
	if ei := f["environmentInputs"]; ei.v != nil {
		c.unsupported(ei.k, path+".environmentInputs", "environment runtime inputs (set the values in the mapping file)")
	}
	ref := c.str(f["environmentRef"], path+".environmentRef")
	if ref == "" {
		c.bad(n, path+".environmentRef", "required")
		return "", nil
	}
	if strings.Contains(ref, "<+") {
		c.unsupported(f["environmentRef"].v, path+".environmentRef", "an environment given as an expression or runtime input")
		return "", nil
	}
	if !c.needMap(f["environmentRef"].v, path+".environmentRef", "environment "+ref) {
		return "", nil
	}
	em, ok := c.o.Map.Environments[ref]
	if !ok {
		c.bad(f["environmentRef"].v, path+".environmentRef", "environment %q is not in the mapping file %s (add it under environments:)", ref, c.o.Map.File)
		return "", nil
	}
	eo := c.envOut[em.Name]
	if eo == nil {
		eo = &envOut{m: em, clusters: append([]string{}, em.Clusters...)}
		c.envOut[em.Name] = eo
		c.envs = append(c.envs, em.Name)
	}
	all := false
	if d := f["deployToAll"].v; d != nil {
		switch {
		case isScalar(d) && (d.Value == "true" || d.Value == "false"):
			all = d.Value == "true"
		case isScalar(d) && strings.Contains(d.Value, "<+"):
			c.unsupported(d, path+".deployToAll", "deployToAll given as an expression or runtime input (the clusters are chosen at conversion)")
		default:
			c.bad(d, path+".deployToAll", "want true or false")
		}
	}
	var names []string
	if g := f["gitOpsClusters"].v; g != nil && !all {
		if g.Kind != yaml.SequenceNode {
			c.bad(g, path+".gitOpsClusters", "want a list of {identifier}")
			return em.Name, nil
		}
		for i, cn := range g.Content {
			cp := itemPath(path+".gitOpsClusters", i)
			cf := c.fields(cn, cp, "agentIdentifier")
			idn := get(cn, "identifier")
			if !isScalar(idn) {
				c.bad(cn, cp+".identifier", "required")
				continue
			}
			cm, ok := c.o.Map.Clusters[idn.Value]
			if !ok {
				c.bad(idn, cp+".identifier", "GitOps cluster %q is not in the mapping file %s (add it under gitOpsClusters:)", idn.Value, c.o.Map.File)
				continue
			}
			if a := cf["agentIdentifier"].v; isScalar(a) && !strings.Contains(a.Value, "<+") {
				// The map's cluster entry names the prflow agent; say so when it is not the
				// agent the pipeline names (through agents: when mapped).
				if mapped, via := c.o.Map.agent(a.Value); mapped != cm.Agent {
					how := ""
					if via {
						how = fmt.Sprintf(" (agents: maps it to %q)", mapped)
					}
					c.warn(a, cp+".agentIdentifier", "the mapping file %s overrides this: cluster %q runs on agent %q there, not on agent %q%s",
						c.o.Map.File, idn.Value, cm.Agent, a.Value, how)
				}
			}
			if !contains(eo.clusters, idn.Value) {
				eo.clusters = append(eo.clusters, idn.Value)
			}
			names = append(names, cm.Name)
		}
	}
	return em.Name, names
}

// when converts {stageStatus|pipelineStatus, condition}. Success (the default) runs only when
// everything before succeeded; Failure and All become failure() and always(), which prflow
// evaluates even after a failure.
func (c *conv) when(n *yaml.Node, path, statusKey string) *yaml.Node {
	f := c.fields(n, path, statusKey, "condition")
	status := ""
	switch st := c.str(f[statusKey], path+"."+statusKey); st {
	case "", "Success":
	case "Failure":
		status = "failure()"
	case "All":
		status = "always()"
	default:
		c.unsupported(f[statusKey].v, path+"."+statusKey, "%s: %s (supported: Success, Failure, All)", statusKey, st)
	}
	cond := f["condition"].v
	if cond == nil {
		if status == "" {
			return nil
		}
		return at(strNode(status), f[statusKey].v)
	}
	if !isScalar(cond) {
		c.bad(cond, path+".condition", "want a condition string")
		return nil
	}
	expr := c.expr(cond.Value, cond, path+".condition")
	if status != "" {
		expr = status + " && (" + expr + ")"
	}
	return at(strNode(expr), cond)
}

// failure converts failureStrategies into a native onFailure: the AllErrors entry, or the
// entries of a Verify step's two kinds of failure (Verification: the metrics were bad;
// Unknown: no verdict). prflow has one strategy per step: the first entry's action applies to
// every failure, and a later entry asking for something else is reported (a warning).
func (c *conv) failure(n *yaml.Node, path string) *yaml.Node {
	if n.Kind != yaml.SequenceNode {
		c.bad(n, path, "want a list of {onFailure: {errors, action}}")
		return nil
	}
	var out *yaml.Node
	outPath, all := "", false
	for i, item := range n.Content {
		p := itemPath(path, i)
		f := c.fields(item, p, "onFailure")
		of := c.fields(f["onFailure"].v, p+".onFailure", "errors", "action")
		isAll, verify, other := false, false, ""
		if e := of["errors"].v; e != nil {
			for _, x := range e.Content {
				switch x.Value {
				case "AllErrors":
					isAll = true
				case "Verification", "Unknown":
					verify = true
				default:
					other = x.Value
				}
			}
		}
		if !isAll && (!verify || other != "") {
			c.unsupported(of["errors"].v, p+".onFailure.errors", "failure strategies for specific error types (prflow has one strategy for all errors: use AllErrors; a Verify step may list Verification and Unknown)")
			continue
		}
		if out != nil {
			if isAll && all {
				c.unsupported(item, p, "a second AllErrors failure strategy")
				continue
			}
			if next := c.action(of["action"].v, p+".onFailure.action", true); next != nil && nodeText(next) != nodeText(out) {
				c.warn(item, p, "prflow has one failure strategy per step: %s applies to every failure, not %s", outPath, strings.TrimSpace(nodeText(next)))
			}
			continue
		}
		out, outPath, all = c.action(of["action"].v, p+".onFailure.action", true), p, isAll
	}
	return out
}

// nodeText is n as YAML, to compare converted nodes.
func nodeText(n *yaml.Node) string {
	b, _ := yaml.Marshal(n)
	return string(b)
}

var actions = map[string]string{"StageRollback": "rollbackStage", "PipelineRollback": "rollbackPipeline", "Ignore": "ignore",
	"MarkAsSuccess": "ignore", "Abort": "fail", "MarkAsFailure": "fail"}

func (c *conv) action(n *yaml.Node, path string, retryOK bool) *yaml.Node {
	f := c.fields(n, path, "type", "spec")
	typ := c.str(f["type"], path+".type")
	if a, ok := actions[typ]; ok {
		return strNode(a)
	}
	if typ == "ManualIntervention" && retryOK {
		return c.manual(f["spec"].v, path+".spec")
	}
	if typ != "Retry" || !retryOK {
		c.unsupported(f["type"].v, path+".type", "failure action %q (supported: StageRollback, PipelineRollback, Ignore, MarkAsSuccess, Abort, MarkAsFailure, Retry, ManualIntervention)", typ)
		return nil
	}
	sf := c.fields(f["spec"].v, path+".spec", "retryCount", "retryIntervals", "onRetryFailure")
	m := mapNode()
	m.Style = yaml.FlowStyle
	put(m, "action", strNode("retry"))
	if rc := sf["retryCount"].v; isScalar(rc) {
		put(m, "retries", at(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: rc.Value}, rc))
	} else if rc != nil {
		c.bad(rc, path+".spec.retryCount", "want a whole number")
	}
	if ri := sf["retryIntervals"].v; ri != nil && len(ri.Content) > 0 {
		put(m, "backoff", strNode(ri.Content[0].Value))
		if len(ri.Content) > 1 {
			c.warn(ri, path+".spec.retryIntervals", "prflow waits the first interval (%s) and doubles it on each retry", ri.Content[0].Value)
		}
	}
	if orf := sf["onRetryFailure"].v; orf != nil {
		of := c.fields(orf, path+".spec.onRetryFailure", "action")
		if then := c.action(of["action"].v, path+".spec.onRetryFailure.action", false); then != nil {
			put(m, "then", then)
		}
	}
	return m
}

// manual converts a ManualIntervention spec {timeout, onTimeout: {action: {type}}} into
// onFailure: {manual: {timeout, onTimeout}}: the stage waits for a person (prflow intervene).
func (c *conv) manual(spec *yaml.Node, path string) *yaml.Node {
	sf := c.fields(spec, path, "timeout", "onTimeout")
	mm := mapNode()
	mm.Style = yaml.FlowStyle
	if t := sf["timeout"].v; t != nil {
		put(mm, "timeout", c.timeout(t, path+".timeout"))
	}
	if ot := sf["onTimeout"].v; ot != nil {
		of := c.fields(ot, path+".onTimeout", "action")
		af := c.fields(of["action"].v, path+".onTimeout.action", "type", "spec")
		typ := c.str(af["type"], path+".onTimeout.action.type")
		if a, ok := actions[typ]; ok {
			put(mm, "onTimeout", at(strNode(a), af["type"].v))
		} else if typ != "" {
			c.unsupported(af["type"].v, path+".onTimeout.action.type", "on timeout %q (supported: StageRollback, PipelineRollback, Ignore, MarkAsSuccess, Abort, MarkAsFailure)", typ)
		}
	}
	m := mapNode()
	m.Style = yaml.FlowStyle
	put(m, "manual", mm)
	return m
}

// stageService is the map's service a stage's serviceRef names (nil when unknown).
func (c *conv) stageService(f map[string]hfield) *ServiceMap {
	if c.o.Map == nil || f["serviceRef"].v == nil {
		return nil
	}
	return c.o.Map.Services[f["serviceRef"].v.Value]
}

// serviceInputs accepts what the Harness UI writes for a service's runtime inputs: the
// definition type and the artifact fields (primaryArtifactRef, sources, a source's tag). An
// artifact <+input> becomes an optional native input <service>_<field> whose default is the
// map's services.<ref>.artifacts.<field>: prflow deploys what the release repo says, so the
// artifact chooses nothing, but its value is kept with the run (<+inputs.web_primaryArtifactRef>).
// Other runtime inputs (service variables, manifests) change what is deployed and are refused.
func (c *conv) serviceInputs(n *yaml.Node, path string, svc *ServiceMap) {
	if isScalar(n) && strings.TrimSpace(n.Value) == "<+input>" {
		return // the whole service input asked at run time: nothing in it is known, nothing to carry
	}
	sd := c.fields(n, path, "serviceDefinition")["serviceDefinition"]
	df := c.fields(sd.v, path+".serviceDefinition", "type", "spec")
	if t := df["type"].v; t != nil && t.Value != "Kubernetes" && !strings.Contains(t.Value, "<+") {
		c.unsupported(t, path+".serviceDefinition.type", "service definition type %q (only Kubernetes GitOps services)", t.Value)
	}
	sp := df["spec"].v
	if sp == nil {
		return
	}
	for i := 0; i+1 < len(deref(sp).Content); i += 2 {
		k, v := deref(sp).Content[i], deref(deref(sp).Content[i+1])
		p := path + ".serviceDefinition.spec." + k.Value
		if k.Value != "artifacts" {
			c.unsupported(k, p, "service runtime inputs other than artifacts (give service variables their values in the mapping file, services.<ref>.variables)")
			continue
		}
		c.artifactInputs(v, p, k.Value, svc)
	}
}

func (c *conv) artifactInputs(n *yaml.Node, path, key string, svc *ServiceMap) {
	n = deref(n)
	switch {
	case n == nil:
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.artifactInputs(n.Content[i+1], path+"."+n.Content[i].Value, n.Content[i].Value, svc)
		}
	case n.Kind == yaml.SequenceNode:
		for i, x := range n.Content {
			c.artifactInputs(x, itemPath(path, i), key, svc)
		}
	case isScalar(n):
		ri, ok := parseInput(n.Value)
		if !ok {
			return // a fixed artifact value: chooses nothing in prflow
		}
		for _, p := range ri.probs {
			c.unsupported(n, path, "%s", p)
		}
		ref := "service"
		if svc != nil {
			ref = svc.Ref
			if v, ok := svc.Artifacts[key]; ok && ri.def == nil {
				ri.def = &v
			}
		}
		if ri.def == nil {
			empty := ""
			ri.def = &empty
		}
		c.declareInput(inputName(ref, key), "String", ri)
	}
}
