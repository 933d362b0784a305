package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// GetAppDetails (Harness: GitOpsGetAppDetails) reads the details and status of GitOps apps
// from their agents: the apps listed (applicationsList, or applicationName + agentId) or those
// whose names match applicationRegex on the stage's agents. As in Harness, only apps that
// belong to the stage are returned (its clusters, and its service and environment where the
// app carries the harness.io labels), and the step fails when none does. It never decides on
// a stale view: while an agent cannot see Argo CD the step parks, like FetchLinkedApps.
func init() {
	Register(Definition{
		Type:             "GetAppDetails",
		JudgesAtDeadline: true,
		Priors:           NoPriors,
		Aliases:          []string{"GitOpsGetAppDetails"},
		Parks:            true,
		New:              func() Step { return StepFunc(runGetAppDetails) },
		Validate:         func(in map[string]any) error { _, err := appDetailsConfigFrom(in, true); return err },
		Config:           appDetailsConfig{},
	})
}

// appDetailsMax is Harness's cap on the apps one step returns.
const appDetailsMax = 1000

// appDetailsConfig is GetAppDetails's `with:`.
type appDetailsConfig struct {
	ApplicationsList appRefs    `input:"applicationsList" doc:"the apps to read"`
	ApplicationRegex regexInput `input:"applicationRegex" doc:"read the apps whose names match (Go regular expression) on the stage's agents"`
	ApplicationName  string     `input:"applicationName" doc:"one app to read (with agentId, or the stage's one agent)"`
	HardRefresh      bool       `input:"hardRefresh,default=false" doc:"make Argo CD re-read git and regenerate manifests before answering"`
	outageInput
	agentInputs

	list []appTarget // ApplicationsList or ApplicationName resolved
}

func appDetailsConfigFrom(in map[string]any, static bool) (*appDetailsConfig, error) {
	c, err := Decode[appDetailsConfig](in, static)
	if err != nil {
		return nil, err
	}
	set := 0
	if len(c.ApplicationsList) > 0 {
		set++
		if c.list, err = c.ApplicationsList.targets(c.agent(), static); err != nil {
			return nil, err
		}
	}
	if c.ApplicationName != "" {
		set++
		c.list = []appTarget{{Agent: c.agent(), App: c.ApplicationName}}
	}
	if c.ApplicationRegex.Source != "" {
		set++
	}
	switch {
	case set == 0:
		return nil, fmt.Errorf("no apps to read: give applicationsList, applicationRegex, or applicationName (with agentId)")
	case set > 1:
		return nil, fmt.Errorf("applicationsList, applicationRegex and applicationName: give only one")
	}
	return &c, nil
}

// appGetter reads one app through its agent with a refresh (*agent.Client has it).
type appGetter interface {
	Get(ctx context.Context, agentID, app string, refresh agent.Refresh) (*agent.AppStatus, error)
}

// appDetailsMemo is kept while the step is parked on an outage.
type appDetailsMemo struct {
	OutageSince time.Time `json:"outageSince,omitzero"`
}

func runGetAppDetails(ctx context.Context, sc *Context) (Result, error) {
	cfg, g, err := gitopsInputs(sc, appDetailsConfigFrom)
	if err != nil {
		return Result{}, err
	}
	var m appDetailsMemo
	if _, err := sc.DecodeMemo(&m); err != nil {
		return Result{}, Terminalf("GetAppDetails memo: %w", err)
	}
	final := sc.WakeReason == "deadline"
	var out outage
	targets, err := appDetailsTargets(ctx, sc, cfg, g, &out)
	if err != nil {
		return Result{}, err
	}
	views := &viewCache{g: g}
	type found struct {
		t  appTarget
		st *agent.AppStatus
	}
	var apps []found
	var missing []string
	for _, t := range targets {
		if v := views.get(ctx, t.Agent); !v.Fresh {
			out.add(v)
			continue
		}
		st, err := readApp(ctx, g, t, cfg.HardRefresh)
		if v, isOutage := outageErr(t.Agent, err); isOutage {
			out.add(v)
			continue
		}
		if errors.Is(err, agent.ErrNotFound) {
			missing = append(missing, t.App+" (agent "+t.Agent+")")
			continue
		}
		if err != nil {
			return Result{}, agentErr(err, fmt.Sprintf("read app %s on agent %s", t.App, t.Agent))
		}
		if v := agent.RecordView(views.get(ctx, t.Agent), st); !v.Fresh {
			out.add(v) // the agent marked this record stale: it is not what Argo CD has now
			continue
		}
		apps = append(apps, found{t, st})
	}
	keys := []string{}
	for _, t := range targets {
		keys = append(keys, agent.StatusKey(t.Agent, t.App))
	}
	if res, stop := out.settle(sc, &m, &m.OutageSince, cfg.outageTimeout(), final,
		outageWords{"app details could not be read", "agent not available; waiting", "waiting"}, keys...); stop {
		return res, nil
	}
	var list []any
	var excluded []string
	for _, f := range apps {
		if why := appOutsideStage(sc, f.t.Agent, f.st); why != "" {
			sc.Log.Info("Application left out", "app", f.st.Ref(), "agent", f.t.Agent, "why", why)
			excluded = append(excluded, f.st.Ref()+": "+why)
			continue
		}
		sc.Log.Info("Application details", "app", f.st.Ref(), "agent", f.t.Agent, "sync", f.st.Sync, "health", f.st.Health, "revision", f.st.Revision)
		list = append(list, appDetails(f.t.Agent, f.st))
	}
	if len(list) == 0 {
		var why []string
		if len(missing) > 0 {
			why = append(why, "not found: "+strings.Join(missing, ", "))
		}
		if len(excluded) > 0 {
			why = append(why, "not of this stage: "+strings.Join(excluded, "; "))
		}
		if len(why) == 0 {
			why = append(why, "no app matches applicationRegex "+cfg.ApplicationRegex.Source)
		}
		return Fail("no application matches the stage's service, environment and clusters (" + strings.Join(why, "; ") + ")"), nil
	}
	if len(missing) > 0 {
		sc.Log.Warn("Applications not found", "apps", strings.Join(missing, ", "))
	}
	return Done(map[string]any{"applications": list}), nil
}

// appDetailsTargets resolves the apps to read; agents that cannot answer an applicationRegex
// listing are added to out.
func appDetailsTargets(ctx context.Context, sc *Context, cfg *appDetailsConfig, g GitOps, out *outage) ([]appTarget, error) {
	if cfg.ApplicationRegex.re == nil {
		var list []appTarget
		for i, t := range cfg.list {
			if t.Agent == "" {
				agents := stageAgents(sc, "")
				if len(agents) != 1 {
					return nil, Terminalf("app %s (applicationsList[%d]): agentId required: the stage has %d agents (%s)", t.App, i, len(agents), strings.Join(agents, ", "))
				}
				t.Agent = agents[0]
			}
			list = append(list, t)
		}
		return list, nil
	}
	agents := stageAgents(sc, cfg.agent())
	if len(agents) == 0 {
		return nil, Terminalf("applicationRegex: no agent to ask; set agentId or give the stage an environment whose clusters name an agent")
	}
	var list []appTarget
	for _, a := range agents {
		apps, err := g.Apps(ctx, a, agent.AppsQuery{NameRegex: cfg.ApplicationRegex.Source})
		if v, isOutage := outageErr(a, err); isOutage {
			out.add(v)
			continue
		}
		if err != nil {
			return nil, agentErr(err, "list apps on agent "+a)
		}
		for _, s := range apps {
			list = append(list, appTarget{Agent: a, App: s.Ref()})
		}
	}
	if len(list) > appDetailsMax {
		return nil, Terminalf("applicationRegex %s matches %d applications; GetAppDetails reads at most %d (narrow the regex)", cfg.ApplicationRegex.Source, len(list), appDetailsMax)
	}
	return list, nil
}

// readApp reads the app's record; with hardRefresh it asks the agent, which makes Argo CD
// re-read git first.
func readApp(ctx context.Context, g GitOps, t appTarget, hard bool) (*agent.AppStatus, error) {
	if hard {
		if gt, ok := g.(appGetter); ok {
			return gt.Get(ctx, t.Agent, t.App, agent.RefreshHard)
		}
		return nil, Terminalf("hardRefresh: this worker's GitOps client cannot ask agents to refresh")
	}
	return g.Status(ctx, t.Agent, t.App)
}

// appOutsideStage says why an app does not belong to the stage ("" when it does): it must run
// on one of the stage's clusters of its agent, and its harness.io/serviceRef and envRef labels,
// when it has them, must name the stage's service and environment.
func appOutsideStage(sc *Context, agentID string, st *agent.AppStatus) string {
	if sc.Env == nil {
		return ""
	}
	var clusters []string
	for _, c := range sc.Env.Clusters {
		if c.Agent == agentID || c.Agent == "" {
			clusters = append(clusters, c.Name)
		}
	}
	if len(sc.Env.Clusters) > 0 {
		ok := false
		for _, c := range clusters {
			ok = ok || st.Cluster == c || st.ClusterServer == c
		}
		if !ok {
			return fmt.Sprintf("it runs on cluster %q, not on the stage's clusters of agent %s (%s)", firstNonEmptyStr(st.Cluster, st.ClusterServer), agentID, strings.Join(clusters, ", "))
		}
	}
	if s := st.Labels[LabelServiceRef]; s != "" && sc.Env.Service != "" && s != sc.Env.Service {
		return fmt.Sprintf("label %s=%s, the stage's service is %s", LabelServiceRef, s, sc.Env.Service)
	}
	if e := st.Labels[LabelEnvRef]; e != "" && sc.Env.Name != "" && e != sc.Env.Name {
		return fmt.Sprintf("label %s=%s, the stage's environment is %s", LabelEnvRef, e, sc.Env.Name)
	}
	return ""
}

// appDetails is one element of the applications output: prflow's flat fields (as
// FetchLinkedApps gives them) and, under app, the Argo CD Application's shape (metadata, spec,
// status) that Harness returns, without the large lists it trims (resources, ignoreDifferences).
func appDetails(agentID string, st *agent.AppStatus) map[string]any {
	o := linkedOutput(agentID, *st)
	o["project"] = st.Project
	o["targetRevision"] = st.Source.TargetRevision
	o["syncedRevision"] = st.SyncedRevision
	o["autoSync"] = st.AutoSync
	if st.Message != "" {
		o["message"] = st.Message
	}
	meta := map[string]any{"name": st.Name}
	if st.AppNamespace != "" {
		meta["namespace"] = st.AppNamespace
	}
	if len(st.Labels) > 0 {
		labels := map[string]any{}
		for k, v := range st.Labels {
			labels[k] = v
		}
		meta["labels"] = labels
	}
	source := map[string]any{"repoURL": st.Source.RepoURL, "path": st.Source.Path, "targetRevision": st.Source.TargetRevision}
	if st.Source.Chart != "" {
		source["chart"] = st.Source.Chart
	}
	dest := map[string]any{"namespace": st.Namespace}
	if st.ClusterServer != "" {
		dest["server"] = st.ClusterServer
	}
	if st.Cluster != "" {
		dest["name"] = st.Cluster
	}
	health := map[string]any{"status": st.Health}
	if st.HealthMessage != "" {
		health["message"] = st.HealthMessage
	}
	status := map[string]any{
		"sync":   map[string]any{"status": st.Sync, "revision": st.Revision},
		"health": health,
	}
	if op := st.Operation; op != nil {
		ops := map[string]any{"phase": op.Phase, "message": op.Message}
		if !op.StartedAt.IsZero() {
			ops["startedAt"] = op.StartedAt.UTC().Format(time.RFC3339)
		}
		if !op.FinishedAt.IsZero() {
			ops["finishedAt"] = op.FinishedAt.UTC().Format(time.RFC3339)
		}
		if op.SyncedRevision != "" {
			ops["syncResult"] = map[string]any{"revision": op.SyncedRevision}
		}
		status["operationState"] = ops
	}
	o["app"] = map[string]any{
		"metadata": meta,
		"spec":     map[string]any{"project": st.Project, "source": source, "destination": dest},
		"status":   status,
	}
	return o
}
