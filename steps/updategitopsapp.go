package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/steps/template"
)

// UpdateGitOpsApp (Harness's step of the same name) changes one Argo CD app's source through
// its agent — targetRevision, Helm parameters, file parameters and values files, Kustomize
// images, replicas, namespace, name prefix/suffix, common labels and annotations — without
// touching git and without syncing. Helm parameters and file parameters are merged by name
// with the app's own (a parameter and a file parameter are never merged with each other),
// Kustomize images by image name, replicas by name, labels and annotations by key; other
// fields replace the app's value. A GitOpsSync later in the stage syncs the app without being
// told about it.
//
// With `rollback: true` (in the stage's rollbackSteps) it puts back what the stage's
// UpdateGitOpsApp changed: each field it set gets its earlier value again, and entries it
// added are removed; fields it did not touch are left as they are now.
func init() {
	Register(Definition{
		Type:     "UpdateGitOpsApp",
		New:      func() Step { return StepFunc(runUpdateGitOpsApp) },
		Validate: func(in map[string]any) error { _, err := updateConfigFrom(in, true); return err },
		Inputs: []Input{
			{Name: "applicationName", Type: InputString, Doc: "the app to change (namespace/name for apps outside Argo CD's namespace); required unless rollback"},
			{Name: "source", Type: InputString, Doc: "the source of a multi-source app to change: its name or index (required for multi-source apps)"},
			{Name: "targetRevision", Type: InputString, Doc: "the branch, tag or commit the app's source points at"},
			{Name: "helm", Type: InputObject, Doc: "Helm overrides", Fields: []Input{
				{Name: "parameters", Type: InputList, Doc: "merged by name with the app's parameters", Items: &Input{Type: InputObject, Fields: []Input{
					{Name: "name", Type: InputString, Required: true}, {Name: "value", Type: InputString, Required: true},
					{Name: "forceString", Type: InputBool},
				}}},
				{Name: "fileParameters", Type: InputList, Doc: "merged by name with the app's file parameters", Items: &Input{Type: InputObject, Fields: []Input{
					{Name: "name", Type: InputString, Required: true}, {Name: "path", Type: InputString, Required: true},
				}}},
				{Name: "valueFiles", Type: InputStrings, Doc: "replaces the app's values files"},
			}},
			{Name: "kustomize", Type: InputObject, Doc: "Kustomize overrides", Fields: []Input{
				{Name: "images", Type: InputStrings, Doc: "image overrides (name=newName:tag, name:tag, name@digest), merged by image name"},
				{Name: "namespace", Type: InputString},
				{Name: "replicas", Type: InputList, Doc: "merged by name", Items: &Input{Type: InputObject, Fields: []Input{
					{Name: "name", Type: InputString, Required: true}, {Name: "count", Type: InputInt, Required: true},
				}}},
				{Name: "namePrefix", Type: InputString}, {Name: "nameSuffix", Type: InputString},
				{Name: "commonLabels", Type: InputMap, Doc: "merged by key", Items: &Input{Type: InputString}},
				{Name: "commonAnnotations", Type: InputMap, Doc: "merged by key", Items: &Input{Type: InputString}},
				{Name: "forceCommonLabels", Type: InputBool}, {Name: "forceCommonAnnotations", Type: InputBool},
			}},
			{Name: "rollback", Type: InputBool, Default: false, Doc: "put back what the stage's UpdateGitOpsApp changed (in rollbackSteps); takes no other change"},
			inAgent, inAgentAlias,
		},
	})
}

type updateConfig struct {
	agentID  string
	app      string
	source   string
	patch    agent.SourcePatch
	rollback bool
}

// updateConfigFrom reads the inputs. static: at pipeline load, where values may still be
// unresolved expressions (checked when the step runs).
func updateConfigFrom(in map[string]any, static bool) (*updateConfig, error) {
	c := &updateConfig{}
	var err error
	for _, f := range []string{"agentId", "agent"} {
		if c.agentID, err = StringInput(in, f); err != nil {
			return nil, err
		}
		if c.agentID != "" {
			break
		}
	}
	if c.app, err = StringInput(in, "applicationName"); err != nil {
		return nil, err
	}
	if c.source, err = StringInput(in, "source"); err != nil {
		return nil, err
	}
	expr := func(v any) bool { s, ok := v.(string); return static && ok && template.Contains(s) }
	if v := in["rollback"]; !expr(v) {
		if c.rollback, err = BoolInput(in, "rollback"); err != nil {
			return nil, err
		}
	}
	if v, ok := in["targetRevision"]; ok && v != nil {
		s, err := StringInput(in, "targetRevision")
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(s) == "" {
			return nil, errors.New("targetRevision: empty (leave it out to keep the app's)")
		}
		c.patch.TargetRevision = &s
	}
	if v, ok := in["helm"]; ok && v != nil && !expr(v) {
		if c.patch.Helm, err = helmPatchFrom(v, static); err != nil {
			return nil, err
		}
	}
	if v, ok := in["kustomize"]; ok && v != nil && !expr(v) {
		if c.patch.Kustomize, err = kustomizePatchFrom(v, static); err != nil {
			return nil, err
		}
	}
	if c.rollback {
		if !c.patch.Empty() {
			return nil, errors.New("rollback: true puts back what the stage's UpdateGitOpsApp changed; give no targetRevision, helm or kustomize with it")
		}
		return c, nil
	}
	if c.app == "" {
		return nil, errors.New("applicationName: required (the app to change)")
	}
	if c.patch.Empty() {
		if static && (hasExpr(in["helm"]) || hasExpr(in["kustomize"])) {
			return c, nil // known when the step runs
		}
		return nil, errors.New("nothing to change: give targetRevision, helm (parameters, fileParameters, valueFiles) or kustomize values")
	}
	if err := c.patch.Check(); err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return nil, errors.New(strings.TrimPrefix(ae.Message, "update: "))
		}
		return nil, err
	}
	return c, nil
}

// hasExpr reports whether v holds an expression anywhere (its value is known at run time).
func hasExpr(v any) bool {
	switch x := v.(type) {
	case string:
		return template.Contains(x)
	case []any:
		for _, e := range x {
			if hasExpr(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasExpr(e) {
				return true
			}
		}
	}
	return false
}

func objectInput(v any, field string) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a mapping, got %T", field, v)
	}
	return m, nil
}

// listOfObjects reads a list of mappings; elements that are still expressions at load are
// skipped (static).
func listOfObjects(v any, field string, static bool) ([]map[string]any, error) {
	if s, ok := v.(string); ok && static && template.Contains(s) {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a list, got %T", field, v)
	}
	var out []map[string]any
	for i, e := range l {
		if s, ok := e.(string); ok && static && template.Contains(s) {
			continue
		}
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: want a mapping, got %T", field, i, e)
		}
		out = append(out, m)
	}
	return out, nil
}

func helmPatchFrom(v any, static bool) (*agent.HelmPatch, error) {
	m, err := objectInput(v, "helm")
	if err != nil {
		return nil, err
	}
	h := &agent.HelmPatch{}
	params, err := listOfObjects(m["parameters"], "helm.parameters", static)
	if m["parameters"] != nil && err != nil {
		return nil, err
	}
	for i, p := range params {
		f := fmt.Sprintf("helm.parameters[%d]", i)
		name, err := StringInput(p, "name")
		if err != nil {
			return nil, fmt.Errorf("%s.%w", f, err)
		}
		value, err := StringInput(p, "value")
		if err != nil {
			return nil, fmt.Errorf("%s.%w", f, err)
		}
		force, err := BoolInput(p, "forceString")
		if err != nil && !(static && template.Contains(fmt.Sprint(p["forceString"]))) {
			return nil, fmt.Errorf("%s.%w", f, err)
		}
		h.Parameters = append(h.Parameters, agent.HelmParameter{Name: name, Value: value, ForceString: force})
	}
	files, err := listOfObjects(m["fileParameters"], "helm.fileParameters", static)
	if m["fileParameters"] != nil && err != nil {
		return nil, err
	}
	for i, p := range files {
		f := fmt.Sprintf("helm.fileParameters[%d]", i)
		name, err := StringInput(p, "name")
		if err != nil {
			return nil, fmt.Errorf("%s.%w", f, err)
		}
		path, err := StringInput(p, "path")
		if err != nil {
			return nil, fmt.Errorf("%s.%w", f, err)
		}
		h.FileParameters = append(h.FileParameters, agent.HelmFileParameter{Name: name, Path: path})
	}
	if vf, ok := m["valueFiles"]; ok && vf != nil {
		if s, ok := vf.(string); !(ok && static && template.Contains(s)) {
			l, err := stringList(vf, "helm.valueFiles")
			if err != nil {
				return nil, err
			}
			if l == nil {
				l = []string{}
			}
			h.ValueFiles = &l
		}
	}
	return h, nil
}

func kustomizePatchFrom(v any, static bool) (*agent.KustomizePatch, error) {
	m, err := objectInput(v, "kustomize")
	if err != nil {
		return nil, err
	}
	k := &agent.KustomizePatch{}
	isExpr := func(x any) bool { s, ok := x.(string); return static && ok && template.Contains(s) }
	if x, ok := m["images"]; ok && x != nil && !isExpr(x) {
		if k.Images, err = stringList(x, "kustomize.images"); err != nil {
			return nil, err
		}
	}
	strPtr := func(key string) (*string, error) {
		x, ok := m[key]
		if !ok || x == nil {
			return nil, nil
		}
		s, err := StringInput(m, key)
		if err != nil {
			return nil, fmt.Errorf("kustomize.%w", err)
		}
		return &s, nil
	}
	if k.Namespace, err = strPtr("namespace"); err != nil {
		return nil, err
	}
	if k.NamePrefix, err = strPtr("namePrefix"); err != nil {
		return nil, err
	}
	if k.NameSuffix, err = strPtr("nameSuffix"); err != nil {
		return nil, err
	}
	reps, err := listOfObjects(m["replicas"], "kustomize.replicas", static)
	if m["replicas"] != nil && err != nil {
		return nil, err
	}
	for i, r := range reps {
		f := fmt.Sprintf("kustomize.replicas[%d]", i)
		name, err := StringInput(r, "name")
		if err != nil {
			return nil, fmt.Errorf("%s.%w", f, err)
		}
		n, err := intInput(r["count"], f+".count", static)
		if err != nil {
			return nil, err
		}
		k.Replicas = append(k.Replicas, agent.KustomizeReplica{Name: name, Count: int64(n)})
	}
	strMap := func(key string) (map[string]string, error) {
		x, ok := m[key]
		if !ok || x == nil || isExpr(x) {
			return nil, nil
		}
		mm, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("kustomize.%s: want a mapping of strings, got %T", key, x)
		}
		out := map[string]string{}
		for kk := range mm {
			s, err := StringInput(mm, kk)
			if err != nil {
				return nil, fmt.Errorf("kustomize.%s.%w", key, err)
			}
			out[kk] = s
		}
		return out, nil
	}
	if k.CommonLabels, err = strMap("commonLabels"); err != nil {
		return nil, err
	}
	if k.CommonAnnotations, err = strMap("commonAnnotations"); err != nil {
		return nil, err
	}
	boolPtr := func(key string) (*bool, error) {
		x, ok := m[key]
		if !ok || x == nil || isExpr(x) {
			return nil, nil
		}
		b, err := BoolInput(m, key)
		if err != nil {
			return nil, fmt.Errorf("kustomize.%w", err)
		}
		return &b, nil
	}
	if k.ForceCommonLabels, err = boolPtr("forceCommonLabels"); err != nil {
		return nil, err
	}
	if k.ForceCommonAnnotations, err = boolPtr("forceCommonAnnotations"); err != nil {
		return nil, err
	}
	return k, nil
}

// appUpdater changes an app through its agent (*agent.Client has it).
type appUpdater interface {
	Update(ctx context.Context, agentID string, req agent.UpdateRequest) (*agent.UpdateReply, error)
}

func runUpdateGitOpsApp(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := updateConfigFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	g, err := gitopsFor(sc)
	if err != nil {
		return Result{}, err
	}
	up, ok := g.(appUpdater)
	if !ok {
		return Result{}, Terminalf("this worker's GitOps client cannot ask agents to change apps")
	}
	req := agent.UpdateRequest{App: cfg.app, Source: cfg.source, Patch: cfg.patch, RunID: sc.RunID, Step: sc.Stage + "/" + sc.StepID}
	agentID := cfg.agentID
	if cfg.rollback {
		prior := lastUpdate(sc)
		if prior == nil {
			sc.Log.Info("nothing to roll back: no UpdateGitOpsApp of this stage changed an app")
			return Done(map[string]any{"rollback": true, "changed": false}), nil
		}
		if agentID == "" {
			agentID = prior.agent
		}
		if req.App == "" {
			req.App = prior.app
		}
		if agentID != prior.agent || req.App != prior.app {
			return Result{}, Terminalf("rollback: the stage's UpdateGitOpsApp changed app %s on agent %s, not %s on agent %s", prior.app, prior.agent, req.App, agentID)
		}
		req.Patch = prior.patch.Revert(prior.before)
		if prior.before.Index >= 0 {
			req.Source = strconv.Itoa(prior.before.Index)
		}
		if req.Patch.Empty() {
			sc.Log.Info("nothing to roll back: the stage's UpdateGitOpsApp changed nothing", "app", req.App)
			return Done(map[string]any{"rollback": true, "changed": false}), nil
		}
	}
	if agentID == "" {
		agents := stageAgents(sc, "")
		if len(agents) != 1 {
			return Result{}, Terminalf("agentId: required: the stage has %d agents (%s)", len(agents), strings.Join(agents, ", "))
		}
		agentID = agents[0]
	}
	// Inputs are checked before side effects: the app must exist and belong to the stage.
	st, err := readApp(ctx, g, appTarget{Agent: agentID, App: req.App}, false)
	if gt, ok := g.(appGetter); ok && errors.Is(err, agent.ErrNotFound) {
		st, err = gt.Get(ctx, agentID, req.App, agent.RefreshNone) // not reported yet, maybe just created
	}
	if errors.Is(err, agent.ErrNotFound) {
		return Fail(fmt.Sprintf("application %s not found on agent %s", req.App, agentID)), nil
	}
	if err != nil {
		return Result{}, agentErr(err, fmt.Sprintf("read app %s on agent %s", req.App, agentID))
	}
	if why := appOutsideStage(sc, agentID, st); why != "" {
		return Fail(fmt.Sprintf("application %s (agent %s) does not belong to this stage: %s", req.App, agentID, why)), nil
	}
	rep, err := up.Update(ctx, agentID, req)
	switch {
	case errors.Is(err, agent.ErrNotFound):
		return Fail(fmt.Sprintf("application %s not found on agent %s", req.App, agentID)), nil
	case errors.Is(err, agent.ErrConflict), errors.Is(err, agent.ErrInvalid), errors.Is(err, agent.ErrRejected):
		return Fail(fmt.Sprintf("update of application %s on agent %s: %v", req.App, agentID, err)), nil
	case err != nil:
		return Result{}, agentErr(err, fmt.Sprintf("update app %s on agent %s", req.App, agentID))
	}
	// Field names only in logs: Helm values may be secrets.
	sc.Log.Info("Application updated", "app", req.App, "agent", agentID, "fields", strings.Join(req.Patch.Touched(), ", "),
		"changed", rep.Changed, "sync", rep.App.Sync)
	out := map[string]any{
		"application":  linkedOutput(agentID, *rep.App),
		"sourceBefore": toMap(rep.Before.Only(req.Patch)),
		"sourceAfter":  toMap(rep.After.Only(req.Patch)),
		"patch":        toMap(req.Patch),
		"changed":      rep.Changed,
		"rollback":     cfg.rollback,
	}
	app := out["application"].(map[string]any)
	app["targetRevision"] = rep.After.TargetRevision
	return Done(out), nil
}

func toMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

type priorUpdate struct {
	agent, app string
	before     agent.SourceSpec
	patch      agent.SourcePatch
}

// lastUpdate is the latest forward (not rollback) UpdateGitOpsApp of the stage that succeeded.
func lastUpdate(sc *Context) *priorUpdate {
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		p := sc.Priors[i]
		if p.Type != "UpdateGitOpsApp" {
			continue
		}
		if rb, _ := p.Outputs["rollback"].(bool); rb {
			continue
		}
		a, _ := p.Outputs["application"].(map[string]any)
		u := &priorUpdate{}
		u.agent, _ = a["agent"].(string)
		u.app, _ = a["name"].(string)
		if ns, _ := a["appNamespace"].(string); ns != "" {
			u.app = ns + "/" + u.app
		}
		if fromMap(p.Outputs["sourceBefore"], &u.before) != nil || fromMap(p.Outputs["patch"], &u.patch) != nil || u.agent == "" || u.app == "" {
			continue
		}
		return u
	}
	return nil
}

func fromMap(v any, out any) error {
	if v == nil {
		return errors.New("missing")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// updatedApps are the apps the stage's UpdateGitOpsApp steps changed, for GitOpsSync.
func updatedApps(sc *Context) []appTarget {
	var out []appTarget
	seen := map[appTarget]bool{}
	for _, p := range sc.Priors {
		if p.Type != "UpdateGitOpsApp" {
			continue
		}
		a, _ := p.Outputs["application"].(map[string]any)
		ag, _ := a["agent"].(string)
		n, _ := a["name"].(string)
		if ns, _ := a["appNamespace"].(string); ns != "" {
			n = ns + "/" + n
		}
		t := appTarget{Agent: ag, App: n}
		if ag != "" && n != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}
