package steps

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// FetchLinkedApps lists the GitOps apps of the stage's service, environment and clusters: by
// owning ApplicationSet (applicationSet), by a label selector (labels / selector), or by
// Harness's harness.io/serviceRef and harness.io/envRef labels. With
// filterByServiceEnvCluster: true it takes every app of the environment on the clusters,
// whatever its service. An app labelled harness.io/envRef for another environment is never
// linked to the stage, even when it runs on one of the stage's clusters. After a merge in its stage it first asks each agent to have Argo CD
// re-read git for the ApplicationSets that read the merged repo (Argo CD's ApplicationSet
// controller otherwise does so only every 3 minutes), so new and changed apps are there in
// seconds. An app an ApplicationSet has not generated yet is waited for, parked on the
// agents' inventory keys, up to appWaitTimeout.
func init() {
	Register(Definition{
		Type:             "FetchLinkedApps",
		JudgesAtDeadline: true,
		Priors:           []string{"MergePR", "UpdateReleaseRepo", "RevertPR"},
		Aliases:          []string{"GitOpsFetchLinkedApps"},
		New:              func() Step { return StepFunc(runFetchLinkedApps) },
		Validate:         func(in map[string]any) error { _, err := linkedConfigFrom(in, true); return err },
		Config:           linkedConfig{},
	})
}

// Harness's labels linking an app to its service and environment.
const (
	LabelServiceRef = "harness.io/serviceRef"
	LabelEnvRef     = "harness.io/envRef"
)

const (
	linkedDefaultWait = 2 * time.Minute
	linkedPoll        = 5 * time.Second
)

// linkedConfig is FetchLinkedApps's `with:`.
type linkedConfig struct {
	ApplicationSet            string             `input:"applicationSet" doc:"the apps this ApplicationSet owns"`
	Labels                    labelSelectorInput `input:"labels" doc:"a label selector: \"k=v,k2=v2\", a list of \"k:v\" or a mapping"`
	Selector                  selectorText       `input:"selector" doc:"a label selector such as \"team=payments,tier in (web,api)\""`
	FilterByServiceEnvCluster bool               `input:"filterByServiceEnvCluster,default=false" doc:"every app of the environment on its clusters, whatever its service"`
	AllowEmpty                bool               `input:"allowEmpty,default=false" doc:"succeed when no app matches"`
	AppWaitTimeout            time.Duration      `input:"appWaitTimeout,default=2m" doc:"how long to wait for a matching app to appear"`
	outageInput
	agentInputs

	selector string // Labels and Selector
	waitSet  bool   // appWaitTimeout given
}

func linkedConfigFrom(in map[string]any, static bool) (*linkedConfig, error) {
	c, err := Decode[linkedConfig](in, static)
	if err != nil {
		return nil, err
	}
	return c.resolve(in), nil
}

// linkedPart reads the app selection of DiffPreview and MergePR, which take these inputs too
// (their own Decode refused unknown keys).
func linkedPart(in map[string]any, static bool) (*linkedConfig, error) {
	c, err := decodePart[linkedConfig](in, static)
	if err != nil {
		return nil, err
	}
	return c.resolve(in), nil
}

func (c linkedConfig) resolve(in map[string]any) *linkedConfig {
	var sels []string
	for _, s := range []string{string(c.Labels), string(c.Selector)} {
		if s != "" {
			sels = append(sels, s)
		}
	}
	c.selector = strings.Join(sels, ",")
	c.waitSet = hasValue(in, "appWaitTimeout")
	return &c
}

// linkedMemo is kept while waiting for apps to appear.
type linkedMemo struct {
	Until time.Time `json:"until,omitzero"`
	// OutageSince is when this step first found an agent offline or blind (zero: none).
	OutageSince time.Time `json:"outageSince,omitzero"`
	// Refreshed: the agents were asked to refresh the ApplicationSets after the merge.
	Refreshed bool `json:"refreshed,omitempty"`
}

// appSetRefresher is the agent client's ApplicationSet refresh (agent.Client has it).
type appSetRefresher interface {
	RefreshAppSets(ctx context.Context, agentID string, req agent.RefreshRequest) (*agent.RefreshReply, error)
}

// linkedRefreshTimeout bounds the refresh requests of one run of the step.
const linkedRefreshTimeout = 25 * time.Second

// target is one (agent, cluster) pair apps are looked up on; cluster "" means any cluster.
type linkedTarget struct {
	agent, cluster string
}

func runFetchLinkedApps(ctx context.Context, sc *Context) (Result, error) {
	g, err := gitopsFor(sc) // first: without the client no inputs can make the step run here
	if err != nil {
		return Result{}, err
	}
	cfg, err := linkedConfigFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	targets, err := linkedTargets(sc, cfg)
	if err != nil {
		return Result{}, Terminal(err)
	}
	q, how, err := linkedQuery(sc, cfg)
	if err != nil {
		return Result{}, Terminal(err)
	}
	final := sc.WakeReason == "deadline"
	if final {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	var m linkedMemo
	if _, err := sc.DecodeMemo(&m); err != nil {
		return Result{}, Terminalf("FetchLinkedApps memo: %w", err)
	}
	if !m.Refreshed && !final && mergedInStage(sc) {
		var agents []string
		for _, t := range targets {
			agents = append(agents, t.agent)
		}
		// An agent that is offline or blind could not pass the refresh on: ask again on the
		// next wake. Without it the apps keep the spec rendered before the merge until Argo
		// CD's own poll, and a sync in between deploys that stale spec.
		m.Refreshed = refreshAppSets(ctx, sc, g, cfg.ApplicationSet, agents)
	}
	byAgent := map[string][]agent.AppStatus{}
	var out0 outage
	for _, t := range targets {
		if _, done := byAgent[t.agent]; done {
			continue
		}
		apps, err := g.Apps(ctx, t.agent, q)
		if v, isOutage := outageErr(t.agent, err); isOutage {
			// The agent is offline or cannot see Argo CD: wait for it (holding no worker)
			// instead of failing the stage into a rollback nobody can observe.
			out0.add(v)
			byAgent[t.agent] = nil
			continue
		}
		if err != nil {
			return Result{}, agentErr(err, fmt.Sprintf("list apps on agent %s", t.agent))
		}
		byAgent[t.agent] = apps
	}
	if res, stop := out0.settle(sc, &m, &m.OutageSince, cfg.outageTimeout(), final,
		outageWords{"linked apps could not be listed", "agent not available; waiting", "waiting"}); stop {
		return res, nil
	}
	var out []any
	var empty []string
	seen := map[string]bool{}
	otherEnv := otherEnvFilter(sc, cfg)
	left := 0
	for _, t := range targets {
		n := 0
		for _, a := range byAgent[t.agent] {
			if t.cluster != "" && a.Cluster != t.cluster && a.ClusterServer != t.cluster {
				continue
			}
			if otherEnv(a) {
				left++
				continue
			}
			n++
			key := t.agent + "\x00" + a.Ref()
			if seen[key] {
				continue
			}
			seen[key] = true
			sc.Log.Info("Found linked app", "app", a.Ref(), "agent", t.agent, "cluster", a.Cluster, "link", a.URL)
			out = append(out, linkedOutput(t.agent, a))
		}
		if n == 0 {
			where := "agent " + t.agent
			if t.cluster != "" {
				where = "cluster " + t.cluster + " (agent " + t.agent + ")"
			}
			empty = append(empty, where)
		}
	}
	if left > 0 {
		sc.Log.Info("left out apps of other environments", "apps", left, "label", LabelEnvRef, "environment", sc.Env.Name)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].(map[string]any), out[j].(map[string]any)
		return a["agent"].(string)+"/"+a["name"].(string) < b["agent"].(string)+"/"+b["name"].(string)
	})
	if len(empty) == 0 || cfg.AllowEmpty {
		if len(out) == 0 {
			sc.Log.Info("No linked apps found", "selection", how)
		}
		res := map[string]any{"apps": orEmpty(out)}
		if cfg.ApplicationSet != "" {
			// GitOpsSync follows this ApplicationSet's app when one is renamed.
			res["applicationSet"] = cfg.ApplicationSet
		}
		return Done(res), nil
	}
	// Some cluster has no app yet: an ApplicationSet may be about to generate it.
	if m.Until.IsZero() {
		wait := cfg.AppWaitTimeout
		m.Until = time.Now().Add(wait)
		if !sc.Deadline.IsZero() && sc.Deadline.Before(m.Until) && !cfg.waitSet {
			m.Until = sc.Deadline
		}
	}
	msg := fmt.Sprintf("no app (%s) on %s", how, strings.Join(empty, ", "))
	if left > 0 {
		msg += fmt.Sprintf(" (%d apps labelled %s for another environment left out)", left, LabelEnvRef)
	}
	if final || !time.Now().Before(m.Until) {
		return Fail(msg + " (set allowEmpty: true to pass without apps)"), nil
	}
	var keys []string
	for a := range byAgent {
		keys = append(keys, agent.InventoryKey(a))
	}
	sort.Strings(keys)
	deadline := m.Until
	if !sc.Deadline.IsZero() && sc.Deadline.Before(deadline) {
		deadline = sc.Deadline
	}
	// The inventory keys wake the step; the poll covers an app created between this query and
	// the controller indexing the park.
	poll := min(linkedPoll, time.Second<<min(sc.Wake, 3), max(time.Until(m.Until), time.Second))
	return Park(Wait{Keys: keys, Poll: poll, Deadline: deadline,
		Reason: "waiting for the ApplicationSet to generate apps: " + msg}, m), nil
}

// mergedInStage reports whether a merge ran earlier in this stage (or its rollback).
func mergedInStage(sc *Context) bool {
	for _, p := range sc.Priors {
		if p.Type == "MergePR" {
			return true
		}
	}
	return false
}

// mergedWithoutRefresh reports whether the stage merged and no FetchLinkedApps ran after the
// last merge (which would have refreshed the ApplicationSets already).
func mergedWithoutRefresh(sc *Context) bool {
	merge, fetch := -1, -1
	for i, p := range sc.Priors {
		switch p.Type {
		case "MergePR":
			merge = i
		case "FetchLinkedApps":
			fetch = i
		}
	}
	return merge >= 0 && fetch < merge
}

// refreshAppSets asks each agent once to have Argo CD regenerate the ApplicationSets that read
// the merged repo (or appSet only), waiting until they are regenerated where the agent can
// tell: a merge may add an app or change the parameters an ApplicationSet renders into an
// app's spec, and a sync before the regeneration would deploy the old spec. It is an
// optimisation: on any other failure the step goes on and Argo CD's own poll catches up. It
// reports false when an agent was offline or could not see Argo CD (worth asking again).
func refreshAppSets(ctx context.Context, sc *Context, g GitOps, appSet string, agents []string) bool {
	r, ok := g.(appSetRefresher)
	if !ok {
		return true
	}
	all := true
	req := agent.RefreshRequest{ApplicationSet: appSet, Wait: true}
	if p := priorPR(sc); p != nil {
		req.RepoURL, _ = p.Outputs["repo"].(string)
		req.Branch, _ = p.Outputs["baseBranch"].(string)
	}
	ctx, cancel := context.WithTimeout(ctx, linkedRefreshTimeout)
	defer cancel()
	done := map[string]bool{}
	for _, a := range agents {
		if done[a] {
			continue
		}
		done[a] = true
		start := time.Now()
		rep, err := r.RefreshAppSets(ctx, a, req)
		switch {
		case errors.Is(err, agent.ErrUnsupported):
			sc.Log.Debug("agent does not refresh ApplicationSets", "agent", a, "err", err)
		case errors.Is(err, agent.ErrNotFound) && req.ApplicationSet != "":
			sc.Log.Warn("ApplicationSet to refresh not found", "agent", a, "err", err)
		case isOutage(a, err):
			all = false
			sc.Log.Warn("could not refresh ApplicationSets yet: the agent is not available; asking again when it is", "agent", a, "err", err)
		case err != nil:
			sc.Log.Warn("could not refresh ApplicationSets; waiting for Argo CD's own poll (every 3 minutes by default)", "agent", a, "err", err)
		case rep.Unavailable != "":
			// Argo CD cannot regenerate now (repo-server down); the agent stopped waiting
			// early instead of for its whole bound. Its controller retries by itself.
			sc.Log.Warn("Argo CD cannot regenerate the ApplicationSets right now; going on without waiting", "agent", a,
				"appsets", strings.Join(rep.Refreshed, ", "), "why", rep.Unavailable, "took", time.Since(start).Round(time.Millisecond))
		case len(rep.Refreshed) == 0:
			sc.Log.Info("no ApplicationSet reads the merged repo", "agent", a, "repo", req.RepoURL)
		default:
			sc.Log.Info("ApplicationSets refreshed", "agent", a, "mode", rep.Mode, "appsets", strings.Join(rep.Refreshed, ", "),
				"regenerated", rep.Done, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	return all
}

func isOutage(agentID string, err error) bool {
	_, ok := outageErr(agentID, err)
	return ok
}

func orEmpty(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

// linkedTargets are the (agent, cluster) pairs of the stage's environment, or the agent input.
func linkedTargets(sc *Context, cfg *linkedConfig) ([]linkedTarget, error) {
	var out []linkedTarget
	if sc.Env != nil {
		for _, c := range sc.Env.Clusters {
			a := c.Agent
			if a == "" {
				a = cfg.agent()
			}
			if a == "" {
				return nil, fmt.Errorf("environment %s, cluster %s: no agent (set agent: on the cluster, or agentId on the step)", sc.Env.Name, c.Name)
			}
			if cfg.agent() != "" && a != cfg.agent() {
				continue
			}
			out = append(out, linkedTarget{agent: a, cluster: c.Name})
		}
	}
	if len(out) == 0 && cfg.agent() != "" {
		out = append(out, linkedTarget{agent: cfg.agent()})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no clusters to look in: give the stage an environment with clusters (name + agent), or set agentId")
	}
	return out, nil
}

// linkedQuery builds the apps query and says in words what it selects.
func linkedQuery(sc *Context, cfg *linkedConfig) (agent.AppsQuery, string, error) {
	q := agent.AppsQuery{Selector: cfg.selector}
	var how []string
	env, svc := "", ""
	if sc.Env != nil {
		env, svc = sc.Env.Name, sc.Env.Service
	}
	switch {
	case cfg.FilterByServiceEnvCluster:
		// Every app of the environment on the clusters, whatever its service.
		if env == "" {
			return q, "", fmt.Errorf("filterByServiceEnvCluster: the stage has no environment")
		}
		q.Labels = map[string]string{LabelEnvRef: env}
		how = append(how, LabelEnvRef+"="+env)
	case cfg.ApplicationSet != "":
		q.ApplicationSet = cfg.ApplicationSet
		how = append(how, "ApplicationSet "+cfg.ApplicationSet)
	case cfg.selector != "":
	default:
		if svc == "" || env == "" {
			return q, "", fmt.Errorf("no way to select apps: give applicationSet, labels or selector, or declare the pipeline's service and the stage's environment (apps are then matched by %s and %s)", LabelServiceRef, LabelEnvRef)
		}
		q.Labels = map[string]string{LabelServiceRef: svc, LabelEnvRef: env}
		how = append(how, LabelServiceRef+"="+svc, LabelEnvRef+"="+env)
	}
	if cfg.selector != "" {
		how = append(how, "selector "+cfg.selector)
	}
	return q, strings.Join(how, ", "), nil
}

// otherEnvFilter reports, for an app an ApplicationSet or a selector matched, whether it is
// labelled (harness.io/envRef) as another environment's than the stage's. Environments often
// share a cluster, a namespace each: without this a dev stage would link, sync and gate the
// prod app the same ApplicationSet generated there. Apps without the label are kept (their
// cluster is all there is to go by); label-based selection already names the environment.
func otherEnvFilter(sc *Context, cfg *linkedConfig) func(agent.AppStatus) bool {
	if sc.Env == nil || sc.Env.Name == "" || cfg.FilterByServiceEnvCluster || (cfg.ApplicationSet == "" && cfg.selector == "") {
		return func(agent.AppStatus) bool { return false }
	}
	env := sc.Env.Name
	return func(a agent.AppStatus) bool {
		v, ok := a.Labels[LabelEnvRef]
		return ok && v != "" && !strings.EqualFold(v, env)
	}
}

func linkedOutput(agentID string, a agent.AppStatus) map[string]any {
	o := map[string]any{
		"name": a.Name, "agent": agentID, "cluster": a.Cluster, "namespace": a.Namespace, "url": a.URL,
		"sync": a.Sync, "health": a.Health, "revision": a.Revision,
		// Harness's outcome field names, for pipelines ported from it.
		"agentIdentifier": agentID, "syncStatus": a.Sync, "healthStatus": a.Health,
	}
	if a.AppNamespace != "" {
		o["appNamespace"] = a.AppNamespace
	}
	if a.ApplicationSet != "" {
		o["applicationSet"] = a.ApplicationSet
	}
	if a.HealthMessage != "" {
		o["healthMessage"] = a.HealthMessage
	}
	return o
}
