package harness

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// group is what a step group passes down to its steps.
type group struct {
	prefix    string     // G_ (G1_G2_ when nested): flattened ids, matching rewriteExpr
	when      *yaml.Node // the group's condition, ANDed with each step's
	onFailure *yaml.Node // the group's failure strategy, for steps without their own
}

// steps converts a step list, flattening step groups (ids G_X) and matrix steps (X_0, X_1…).
func (c *conv) steps(n *yaml.Node, path string, sc *stageCtx, g *group) *yaml.Node {
	out := seqNode()
	if n.Kind != yaml.SequenceNode {
		c.bad(n, path, "want a list of steps")
		return out
	}
	if g == nil {
		g = &group{}
	}
	for i, item := range n.Content {
		p := itemPath(path, i)
		f := c.fields(item, p, "step", "stepGroup", "parallel")
		if kinds := f["step"].v != nil && (f["stepGroup"].v != nil || f["parallel"].v != nil) ||
			f["stepGroup"].v != nil && f["parallel"].v != nil; kinds {
			// Only the first of them would be converted.
			second := f["parallel"]
			if f["step"].v != nil && f["stepGroup"].v != nil {
				second = f["stepGroup"]
			}
			c.bad(second.k, p+"."+second.k.Value, "an entry of steps holds one of step, stepGroup, parallel (start a new entry with -)")
		}
		switch {
		case f["step"].v != nil:
			out.Content = append(out.Content, c.stepMatrix(f["step"].v, p+".step", sc, g)...)
		case f["stepGroup"].v != nil:
			out.Content = append(out.Content, c.stepGroup(f["stepGroup"].v, p+".stepGroup", sc, g).Content...)
		case f["parallel"].v != nil:
			c.warn(f["parallel"].k, p+".parallel", "prflow runs these steps one after another")
			out.Content = append(out.Content, c.steps(f["parallel"].v, p+".parallel", sc, g).Content...)
		}
	}
	return out
}

func (c *conv) stepGroup(n *yaml.Node, path string, sc *stageCtx, parent *group) *yaml.Node {
	if c.template(n, path) {
		return seqNode()
	}
	f := c.fields(n, path, "steps", "when", "failureStrategies")
	idn := get(n, "identifier")
	if !isScalar(idn) {
		c.bad(n, path+".identifier", "required")
		return seqNode()
	}
	g := &group{prefix: parent.prefix + nativeID(idn.Value) + "_", when: parent.when, onFailure: parent.onFailure}
	if w := f["when"].v; w != nil {
		g.when = andWhen(parent.when, c.when(w, path+".when", "stageStatus"))
	}
	if fs := f["failureStrategies"].v; fs != nil {
		g.onFailure = c.failure(fs, path+".failureStrategies")
	}
	if f["steps"].v == nil {
		c.bad(n, path+".steps", "required")
		return seqNode()
	}
	return c.steps(f["steps"].v, path+".steps", sc, g)
}

func andWhen(a, b *yaml.Node) *yaml.Node {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return strNode("(" + a.Value + ") && (" + b.Value + ")")
}

// stepMatrix expands a step's strategy.matrix (run one after another in prflow).
func (c *conv) stepMatrix(n *yaml.Node, path string, sc *stageCtx, g *group) []*yaml.Node {
	idn := get(n, "identifier")
	if !isScalar(idn) {
		c.bad(n, path+".identifier", "required")
		return nil
	}
	id := g.prefix + nativeID(idn.Value)
	if c.template(n, path) {
		return nil
	}
	strat := deref(get(n, "strategy"))
	if strat == nil || get(strat, "matrix") == nil {
		if strat != nil {
			c.fields(strat, path+".strategy") // repeat, parallelism: reported as unsupported
		}
		if st := c.step(n, path, sc, g, id); st != nil {
			return []*yaml.Node{st}
		}
		return nil
	}
	combos, limit := c.matrix(strat, path+".strategy")
	if limit != 1 && len(combos) > 1 {
		c.warn(strat, path+".strategy.matrix", "prflow runs the %d matrix steps one after another", len(combos))
	}
	var out []*yaml.Node
	for i, combo := range combos {
		cp := c.clone(n, func(s string) string { return substMatrix(s, combo, i, len(combos)) })
		if st := c.step(cp, path, sc, g, fmt.Sprintf("%s_%d", id, i)); st != nil {
			out = append(out, st)
		}
	}
	return out
}

// Supported step types and their native names.
var stepTypes = map[string]string{"GitOpsUpdateReleaseRepo": "UpdateReleaseRepo", "MergePR": "MergePR", "RevertPR": "RevertPR",
	"GitOpsFetchLinkedApps": "FetchLinkedApps", "GitOpsSync": "GitOpsSync", "GitOpsGetAppDetails": "GetAppDetails",
	"UpdateGitOpsApp": "UpdateGitOpsApp", "HarnessApproval": "Approval", "Wait": "Wait", "Verify": "Verify"}

// refusedSteps are Harness step types prflow knows and cannot run, with why (none today).
var refusedSteps = map[string]string{}

func (c *conv) step(n *yaml.Node, path string, sc *stageCtx, g *group, id string) *yaml.Node {
	if !c.spend(1) {
		return nil
	}
	f := c.fields(n, path, "type", "spec", "timeout", "failureStrategies", "when", "strategy")
	typ := c.str(f["type"], path+".type")
	native, ok := stepTypes[typ]
	if !ok {
		c.dropped[id] = true
		switch why, known := refusedSteps[typ]; {
		case typ == "":
			c.bad(n, path+".type", "required")
		case known:
			c.unsupported(f["type"].v, path+".type", "step type %q: %s", typ, why)
		default:
			c.unsupported(f["type"].v, path+".type", "step type %q (supported: GitOpsUpdateReleaseRepo, MergePR, RevertPR, GitOpsFetchLinkedApps, GitOpsSync, GitOpsGetAppDetails, UpdateGitOpsApp, HarnessApproval, Wait, Verify)", typ)
		}
		return nil
	}
	out := at(mapNode(), n)
	out.HeadComment = marker(path, n.Line)
	put(out, "id", at(strNode(id), get(n, "identifier")))
	if x := get(n, "name"); isScalar(x) {
		put(out, "name", at(strNode(x.Value), x))
	}
	put(out, "type", at(strNode(native), f["type"].v))
	with, pool := c.stepSpec(typ, f["spec"].v, path+".spec", sc, id)
	if len(with.Content) > 0 {
		put(out, "with", with)
	} else if sp := deref(f["spec"].v); sp != nil {
		// No with: a native "required" is reported at the step; a misspelt spec field covers it.
		for t := range c.typos {
			if t.line == sp.Line && t.col == sp.Column {
				c.typos[typo{n.Line, n.Column, t.field}] = true
			}
		}
	}
	when := g.when
	if w := f["when"].v; w != nil {
		when = andWhen(g.when, c.when(w, path+".when", "stageStatus"))
	}
	put(out, "when", when)
	if t := f["timeout"].v; t != nil {
		put(out, "timeout", c.timeout(t, path+".timeout"))
	}
	if pool != "" {
		put(out, "pool", at(strNode(pool), f["spec"].v))
	}
	onf := g.onFailure
	if fs := f["failureStrategies"].v; fs != nil {
		onf = c.failure(fs, path+".failureStrategies")
	}
	put(out, "onFailure", onf)
	return out
}

// specFields: per step type, Harness spec fields copied as is (the native steps take the
// same names), fields that carry no behaviour, and fields handled specially.
var specFields = map[string]struct{ copy, harmless []string }{
	"GitOpsUpdateReleaseRepo": {copy: []string{"variables", "prTitle", "allowEmptyCommit", "allowNoFilesChanged", "ignoreMissingFiles",
		"ignoreMissingValues", "skipPipelineVariables", "waitForMerge"}, harmless: []string{"disableGitRestraint"}},
	"MergePR":               {copy: []string{"deleteSourceBranch", "mergeStrategy"}, harmless: []string{"disableGitRestraint"}},
	"RevertPR":              {copy: []string{"commitId", "prTitle"}, harmless: []string{"disableGitRestraint"}},
	"GitOpsFetchLinkedApps": {},
	"GitOpsSync": {copy: []string{"applicationsList", "applicationRegex", "applicationLabels", "prune", "dryRun", "applyOnly", "forceApply",
		"waitTillHealthy", "failOnTimeout", "degradedStateTimeout", "syncOptions", "retryStrategy"}, harmless: []string{"showResourceProgress"}},
	"GitOpsGetAppDetails": {copy: []string{"hardRefresh", "applicationsList", "applicationRegex", "applicationName", "agentId"}},
	"UpdateGitOpsApp":     {copy: []string{"agentId", "applicationName", "targetRevision", "helm", "kustomize"}},
	"HarnessApproval":     {harmless: []string{"includePipelineExecutionHistory"}},
	"Wait":                {copy: []string{"duration"}},
}

// stepSpec converts a step's spec into native `with` inputs and a worker pool.
func (c *conv) stepSpec(typ string, spec *yaml.Node, path string, sc *stageCtx, id string) (*yaml.Node, string) {
	with := mapNode()
	sf := specFields[typ]
	handled := append(append([]string{"delegateSelectors"}, sf.copy...), sf.harmless...)
	switch typ {
	case "HarnessApproval":
		handled = append(handled, "approvalMessage", "approvers", "isAutoRejectEnabled", "approverInputs")
	case "MergePR":
		handled = append(handled, "variables")
	case "GitOpsSync":
		handled = append(handled, "retry")
	case "UpdateGitOpsApp":
		handled = append(handled, "sources")
	case "Verify":
		handled = append(handled, "type", "monitoredService", "spec", "isMultiServicesOrEnvs")
	}
	spec = deref(spec)
	if spec == nil {
		spec = mapNode()
	}
	at(with, spec)
	f := c.fields(spec, path, handled...)
	pool := ""
	if ds := f["delegateSelectors"].v; ds != nil && typ != "GitOpsSync" {
		switch {
		case ds.Kind == yaml.SequenceNode && len(ds.Content) == 1 && isScalar(ds.Content[0]) && !strings.Contains(ds.Content[0].Value, "<+"):
			pool = ds.Content[0].Value // one selector = the worker pool that runs the step
		case ds.Kind == yaml.SequenceNode && len(ds.Content) == 0:
		default:
			c.unsupported(ds, path+".delegateSelectors", "several delegate selectors or an expression (prflow sends a step to one worker pool)")
		}
	}
	svcNeeded := func(what string) *ServiceMap {
		if sc.svc == nil {
			c.bad(spec, path, "%s needs the stage's service (spec.service.serviceRef) and its %s in the mapping file", typ, what)
		}
		return sc.svc
	}
	switch typ {
	case "GitOpsUpdateReleaseRepo", "RevertPR":
		if s := svcNeeded("releaseRepo"); s != nil {
			if s.ReleaseRepo == nil {
				c.bad(spec, path, "service %q has no releaseRepo in the mapping file %s", s.Ref, c.o.Map.File)
			} else {
				put(with, "connector", strNode(s.ReleaseRepo.Connector))
				put(with, "repo", strNode(s.ReleaseRepo.Repo))
				if s.ReleaseRepo.Branch != "" {
					put(with, "baseBranch", strNode(s.ReleaseRepo.Branch))
				}
				if typ == "GitOpsUpdateReleaseRepo" {
					p, probs := rewriteExpr(c.serviceVars(s, s.ReleaseRepo.Path, path))
					for _, pr := range probs {
						c.bad(spec, path, "release repo path of service %q in %s: %s", s.Ref, c.o.Map.File, pr)
					}
					put(with, "filePath", strNode(p))
					// Harness creates missing files and keys; the import keeps that, reported.
					put(with, "harnessCreate", boolNode(true))
				}
			}
		}
	case "GitOpsFetchLinkedApps":
		if s := svcNeeded("deploymentRepo"); s != nil {
			if s.AppSet == "" && s.AppSelector == "" {
				c.bad(spec, path, "service %q has no deploymentRepo (applicationSet or selector) in the mapping file %s", s.Ref, c.o.Map.File)
			}
			if s.AppSet != "" {
				put(with, "applicationSet", strNode(s.AppSet))
			}
			if s.AppSelector != "" {
				put(with, "selector", strNode(s.AppSelector))
			}
		}
	case "UpdateGitOpsApp":
		if s := f["sources"].v; s != nil && (s.Kind != yaml.SequenceNode || len(s.Content) > 0) {
			c.unsupported(f["sources"].k, path+".sources", "sources (multi-source apps): give the source to change with the native step's `source:` (its name or index) instead")
		}
		// On the Rollback tab the step takes no configuration and reverts the app: that is the
		// native step's rollback mode, which undoes what the stage's UpdateGitOpsApp changed.
		if strings.Contains(path, ".rollbackSteps") && f["applicationName"].v == nil && f["targetRevision"].v == nil &&
			f["helm"].v == nil && f["kustomize"].v == nil {
			put(with, "rollback", boolNode(true))
		}
	case "Verify":
		c.verify(f, spec, with, path, sc)
	case "GitOpsSync":
		if r := f["retry"].v; r != nil && r.Value != "false" {
			c.unsupported(r, path+".retry", "retry: %s (use retryStrategy)", r.Value)
		}
	case "MergePR":
		// The UI writes variables: [] on every Merge PR step.
		if v := f["variables"]; v.v != nil && (v.v.Kind != yaml.SequenceNode || len(v.v.Content) > 0) {
			c.unsupported(v.k, path+".variables", "Merge PR variables (Harness passes them to the Azure Repos merge call only; prflow has no Azure Repos driver)")
		}
	case "HarnessApproval":
		if v := f["approverInputs"]; v.v != nil && (v.v.Kind != yaml.SequenceNode || len(v.v.Content) > 0) {
			c.unsupported(v.k, path+".approverInputs", "approver inputs (values asked from the approver; a prflow approval takes a comment only)")
		}
		if m := f["approvalMessage"].v; m != nil {
			put(with, "message", c.clone(m, func(s string) string { return c.expr(s, m, path+".approvalMessage") }))
		}
		if r := f["isAutoRejectEnabled"].v; r != nil && r.Value != "false" {
			c.unsupported(r, path+".isAutoRejectEnabled", "automatic rejection")
		}
		ap := c.fields(f["approvers"].v, path+".approvers", "userGroups", "minimumCount", "disallowPipelineExecutor")
		if f["approvers"].v == nil {
			c.bad(spec, path+".approvers", "required")
		}
		a := mapNode()
		if ug := ap["userGroups"].v; ug != nil && ug.Kind != yaml.SequenceNode {
			c.unsupported(ug, path+".approvers.userGroups", "user groups given as an expression or runtime input (list them)")
		} else if ug != nil {
			gs := seqNode()
			gs.Style = yaml.FlowStyle
			for j, x := range ug.Content {
				if !isScalar(x) {
					c.bad(x, itemPath(path+".approvers.userGroups", j), "want a user group name")
					continue
				}
				// Harness scopes groups (account.x, org.x); prflow groups come from its tokens file.
				name := x.Value
				for _, pre := range []string{"account.", "org."} {
					name = strings.TrimPrefix(name, pre)
				}
				gs.Content = append(gs.Content, at(strNode(name), x))
			}
			put(a, "groups", gs)
		}
		for _, k := range []string{"minimumCount", "disallowPipelineExecutor"} {
			if v := ap[k].v; v != nil {
				put(a, k, c.clone(v, nil))
			}
		}
		put(with, "approvers", a)
	}
	for _, k := range sf.copy {
		v := f[k].v
		if v == nil {
			continue
		}
		if k == "retryStrategy" && v.Kind == yaml.MappingNode && len(v.Content) == 0 {
			continue // the UI writes retryStrategy: {} for "no retry"
		}
		hint := inputName(sc.id, id, k) // <+input> names: stage_step_field, stage_step_variable
		if k == "variables" {
			hint = inputName(sc.id, id)
		}
		with.Content = append(with.Content, at(strNode(k), f[k].k), c.copyInputs(v, path+"."+k, hint))
	}
	if typ == "UpdateGitOpsApp" {
		dropEmpty(with, "helm", "kustomize")
	}
	c.mapAgents(with)
	return with, pool
}

// dropEmpty removes the empty lists and mappings the UI writes for fields left blank
// (fileParameters: [], valueFiles: []) from the named mappings of with, and those mappings
// when nothing is left: in Harness a blank field changes nothing, while a native empty list
// (valueFiles: []) would clear the app's.
func dropEmpty(with *yaml.Node, keys ...string) {
	empty := func(n *yaml.Node) bool {
		return n == nil || (n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode) && len(n.Content) == 0
	}
	var kept []*yaml.Node
	for i := 0; i+1 < len(with.Content); i += 2 {
		k, v := with.Content[i], with.Content[i+1]
		if contains(keys, k.Value) && v.Kind == yaml.MappingNode {
			var inner []*yaml.Node
			for j := 0; j+1 < len(v.Content); j += 2 {
				if !empty(v.Content[j+1]) {
					inner = append(inner, v.Content[j], v.Content[j+1])
				}
			}
			v.Content = inner
			if len(inner) == 0 {
				continue
			}
		}
		kept = append(kept, k, v)
	}
	with.Content = kept
}

// copyInputs copies a nested spec value, turning <+input> leaves into native inputs (named
// after the variable or key they belong to) and rewriting expressions.
func (c *conv) copyInputs(n *yaml.Node, path, hint string) *yaml.Node {
	n = deref(n)
	if n == nil || !c.spend(1) {
		return strNode("")
	}
	switch n.Kind {
	case yaml.ScalarNode:
		v, _ := c.value(n, path, hint, "")
		return v
	case yaml.MappingNode:
		m := at(mapNode(), n)
		m.Style = n.Style
		nameHint := hint
		if nm := get(n, "name"); isScalar(nm) {
			nameHint = inputName(hint, nm.Value)
		}
		typ := ""
		if t := get(n, "type"); isScalar(t) {
			typ = t.Value
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			h := inputName(hint, k.Value)
			if k.Value == "value" {
				h = nameHint
				if isScalar(deref(v)) {
					nv, _ := c.value(v, path+"."+k.Value, h, typ)
					m.Content = append(m.Content, at(strNode(k.Value), k), nv)
					continue
				}
			}
			m.Content = append(m.Content, at(strNode(k.Value), k), c.copyInputs(v, path+"."+k.Value, h))
		}
		return m
	case yaml.SequenceNode:
		s := at(seqNode(), n)
		s.Style = n.Style
		for i, x := range n.Content {
			s.Content = append(s.Content, c.copyInputs(x, itemPath(path, i), hint))
		}
		return s
	}
	if out := c.clone(n, nil); out != nil {
		return out
	}
	return strNode("")
}

var serviceVarRE = regexp.MustCompile(`<\+serviceVariables\.([A-Za-z_][A-Za-z0-9_]*)>`)

// serviceVars inlines <+serviceVariables.x> (Harness path templates use them) with the
// service variable's value from the map: its text, or its expression.
func (c *conv) serviceVars(s *ServiceMap, text, path string) string {
	return serviceVarRE.ReplaceAllStringFunc(text, func(m string) string {
		name := serviceVarRE.FindStringSubmatch(m)[1]
		for _, v := range s.Variables {
			if v.Name == name && isScalar(v.Value) {
				return v.Value.Value
			}
		}
		c.bad(nil, path, "service %q has no variable %q in %s (used as <+serviceVariables.%s>)", s.Ref, name, c.o.Map.File, name)
		return m
	})
}

// mapAgents turns the Harness agent identifiers a step names (applicationsList[].agentId,
// agentId) into prflow agent ids through the map's agents:.
func (c *conv) mapAgents(with *yaml.Node) {
	if c.o.Map == nil || len(c.o.Map.Agents) == 0 {
		return
	}
	fix := func(m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			switch v := m.Content[i+1]; m.Content[i].Value {
			case "agentId", "agentIdentifier", "agent":
				if isScalar(v) {
					if a, ok := c.o.Map.agent(v.Value); ok {
						v.Value = a
					}
				}
			}
		}
	}
	fix(with)
	if l := get(with, "applicationsList"); l != nil && l.Kind == yaml.SequenceNode {
		for _, e := range l.Content {
			if e.Kind == yaml.MappingNode {
				fix(e)
			}
		}
	}
}

// verifySensitivity is the failureLimit a Verify sensitivity gives a metric the map leaves it
// out of: how many bad measurements it tolerates.
var verifySensitivity = map[string]int{"HIGH": 0, "MEDIUM": 1, "LOW": 2}

// verify converts a Verify step: its monitored service's health source comes from the map
// (monitoredServices), the spec's duration, baseline, failOnNoAnalysis and sensitivity fill
// in what each metric leaves out.
func (c *conv) verify(f map[string]hfield, spec, with *yaml.Node, path string, sc *stageCtx) {
	switch t := f["type"].v; {
	case t == nil:
	case t.Value == "Auto" || t.Value == "Rolling" || t.Value == "LoadTest":
	default:
		c.unsupported(t, path+".type", "verification type %q: prflow measures the whole service, not canary or blue-green hosts against the rest (supported: Auto, Rolling, LoadTest)", t.Value)
	}
	if m := f["isMultiServicesOrEnvs"].v; m != nil && m.Value != "false" {
		c.unsupported(m, path+".isMultiServicesOrEnvs", "verifying several services or environments in one step")
	}
	ref, what := "", ""
	mf := c.fields(f["monitoredService"].v, path+".monitoredService", "type", "spec")
	switch typ := c.str(mf["type"], path+".monitoredService.type"); typ {
	case "", "Default":
		if sc.svc != nil {
			ref, what = sc.svc.Ref, fmt.Sprintf("the default monitored service of service %q", sc.svc.Ref)
		} else {
			c.bad(spec, path+".monitoredService", "a Default monitored service needs the stage's service (spec.service.serviceRef)")
			return
		}
		c.fields(mf["spec"].v, path+".monitoredService.spec")
	case "Configured", "Template":
		sp := c.fields(mf["spec"].v, path+".monitoredService.spec", "monitoredServiceRef", "templateRef", "versionLabel", "templateInputs")
		ref = c.str(sp["monitoredServiceRef"], path+".monitoredService.spec.monitoredServiceRef")
		if ref == "" {
			ref = c.str(sp["templateRef"], path+".monitoredService.spec.templateRef")
		}
		what = fmt.Sprintf("monitored service %q", ref)
	default:
		c.unsupported(mf["type"].v, path+".monitoredService.type", "monitored service type %q (supported: Default, Configured, Template)", typ)
		return
	}
	var metrics []*yaml.Node
	if c.o.Map != nil {
		metrics = c.o.Map.MonitoredServices[ref]
	}
	if metrics == nil {
		file := "the mapping file (--map)"
		if c.o.Map != nil {
			file = "the mapping file " + c.o.Map.File
		}
		c.bad(spec, path+".monitoredService", "%s has no health source in %s: add monitoredServices: {%s: {metrics: [{name, provider, query, failureCondition}]}}", what, file, ref)
		c.typos[typo{spec.Line, spec.Column, "metrics"}] = true // this report covers the native "metrics: required"
		return
	}
	sf := c.fields(f["spec"].v, path+".spec", "sensitivity", "duration", "baseline", "failOnNoAnalysis", "deploymentTag", "trafficsplit")
	fill := map[string]*yaml.Node{}
	if d := sf["duration"].v; d != nil {
		fill["duration"] = c.timeout(d, path+".spec.duration")
	}
	if b := sf["baseline"].v; b != nil {
		switch strings.ToUpper(b.Value) {
		case "LAST":
			fill["baseline"] = at(strNode("last"), b)
		case "NONE", "":
		default:
			c.unsupported(b, path+".spec.baseline", "baseline %q (supported: LAST: the same query over the window before the promotion)", b.Value)
		}
	}
	if n := sf["failOnNoAnalysis"].v; n != nil {
		switch n.Value {
		case "true":
			fill["failOnNoAnalysis"] = at(strNode("fail"), n)
		case "false":
			fill["failOnNoAnalysis"] = at(strNode("pass"), n)
		default:
			c.bad(n, path+".spec.failOnNoAnalysis", "want true or false, got %q", n.Value)
		}
	}
	if s := sf["sensitivity"].v; s != nil {
		limit, ok := verifySensitivity[strings.ToUpper(s.Value)]
		if !ok {
			c.bad(s, path+".spec.sensitivity", "want HIGH, MEDIUM or LOW, got %q", s.Value)
		} else {
			fill["failureLimit"] = at(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(limit)}, s)
		}
	}
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, m := range metrics {
		item := c.clone(m, func(s string) string { return c.expr(s, m, path) })
		for _, k := range []string{"duration", "baseline", "failOnNoAnalysis", "failureLimit"} {
			if fill[k] == nil || get(item, k) != nil || (k == "duration" && get(item, "count") != nil) {
				continue // the map's own value wins
			}
			put(item, k, fill[k])
		}
		list.Content = append(list.Content, item)
	}
	put(with, "metrics", list)
}
