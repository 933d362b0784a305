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
		Priors:   []string{"UpdateGitOpsApp"},
		New:      func() Step { return StepFunc(runUpdateGitOpsApp) },
		Validate: func(in map[string]any) error { _, err := updateConfigFrom(in, true); return err },
		Config:   updateAppInputs{},
	})
}

// updateAppInputs is UpdateGitOpsApp's `with:`.
type updateAppInputs struct {
	ApplicationName string           `input:"applicationName" doc:"the app to change (namespace/name for apps outside Argo CD's namespace); required unless rollback"`
	Source          string           `input:"source" doc:"the source of a multi-source app to change: its name or index (required for multi-source apps)"`
	TargetRevision  *string          `input:"targetRevision" doc:"the branch, tag or commit the app's source points at"`
	Helm            *helmInputs      `input:"helm" doc:"Helm overrides"`
	Kustomize       *kustomizeInputs `input:"kustomize" doc:"Kustomize overrides"`
	Rollback        bool             `input:"rollback,default=false" doc:"put back what the stage's UpdateGitOpsApp changed (in rollbackSteps); takes no other change"`
	agentInputs
}

type helmInputs struct {
	Parameters []struct {
		Name        string `input:"name,required"`
		Value       string `input:"value,required"`
		ForceString bool   `input:"forceString"`
	} `input:"parameters" doc:"merged by name with the app's parameters"`
	FileParameters []struct {
		Name string `input:"name,required"`
		Path string `input:"path,required"`
	} `input:"fileParameters" doc:"merged by name with the app's file parameters"`
	ValueFiles *[]string `input:"valueFiles" doc:"replaces the app's values files"`
}

type kustomizeInputs struct {
	Images    []string `input:"images" doc:"image overrides (name=newName:tag, name:tag, name@digest), merged by image name"`
	Namespace *string  `input:"namespace"`
	Replicas  []struct {
		Name  string `input:"name,required"`
		Count int64  `input:"count,required"`
	} `input:"replicas" doc:"merged by name"`
	NamePrefix             *string           `input:"namePrefix"`
	NameSuffix             *string           `input:"nameSuffix"`
	CommonLabels           map[string]string `input:"commonLabels" doc:"merged by key"`
	CommonAnnotations      map[string]string `input:"commonAnnotations" doc:"merged by key"`
	ForceCommonLabels      *bool             `input:"forceCommonLabels"`
	ForceCommonAnnotations *bool             `input:"forceCommonAnnotations"`
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
	u, err := Decode[updateAppInputs](in, static)
	if err != nil {
		return nil, err
	}
	c := &updateConfig{agentID: u.agent(), app: u.ApplicationName, source: u.Source, rollback: u.Rollback}
	if u.TargetRevision != nil {
		if strings.TrimSpace(*u.TargetRevision) == "" {
			return nil, errors.New("targetRevision: empty (leave it out to keep the app's)")
		}
		c.patch.TargetRevision = u.TargetRevision
	}
	if h := u.Helm; h != nil {
		c.patch.Helm = &agent.HelmPatch{ValueFiles: h.ValueFiles}
		if h.ValueFiles != nil && *h.ValueFiles == nil {
			c.patch.Helm.ValueFiles = &[]string{} // valueFiles: "" clears them
		}
		for _, p := range h.Parameters {
			c.patch.Helm.Parameters = append(c.patch.Helm.Parameters, agent.HelmParameter(p))
		}
		for _, p := range h.FileParameters {
			c.patch.Helm.FileParameters = append(c.patch.Helm.FileParameters, agent.HelmFileParameter(p))
		}
	}
	if k := u.Kustomize; k != nil {
		c.patch.Kustomize = &agent.KustomizePatch{Images: k.Images, Namespace: k.Namespace, NamePrefix: k.NamePrefix, NameSuffix: k.NameSuffix,
			CommonLabels: k.CommonLabels, CommonAnnotations: k.CommonAnnotations,
			ForceCommonLabels: k.ForceCommonLabels, ForceCommonAnnotations: k.ForceCommonAnnotations}
		for _, r := range k.Replicas {
			c.patch.Kustomize.Replicas = append(c.patch.Kustomize.Replicas, agent.KustomizeReplica(r))
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

// appUpdater changes an app through its agent (*agent.Client has it).
type appUpdater interface {
	Update(ctx context.Context, agentID string, req agent.UpdateRequest) (*agent.UpdateReply, error)
}

func runUpdateGitOpsApp(ctx context.Context, sc *Context) (Result, error) {
	cfg, g, err := gitopsInputs(sc, updateConfigFrom)
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
