package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/policy"
)

// WithPolicy evaluates policies (prflow.pipeline, prflow.run, prflow.stage) on pipelines,
// run starts and stage starts. Without it nothing is evaluated and nothing costs.
func WithPolicy(ev policy.Evaluator) Option { return func(c *Controller) { c.policy = ev } }

// policyTimeout bounds one evaluation together with the reads it needs (app status).
const policyTimeout = 5 * time.Second

// pipelinePolicy applies prflow.pipeline to a loaded pipeline: a deny is a *policy.DeniedError
// with every message; warnings are returned.
func (c *Controller) pipelinePolicy(ctx context.Context, p *pipelines.Pipeline) ([]string, error) {
	if c.policy == nil || !c.policy.Has(policy.Pipeline) {
		return nil, nil
	}
	d, err := c.policy.Evaluate(ctx, policy.Pipeline, policy.PipelineInput(p))
	if err != nil {
		return nil, err
	}
	return d.Warn, d.Err(policy.Pipeline)
}

// runPolicy applies prflow.pipeline and prflow.run before a run is stored: input.pipeline,
// input.inputs, input.trigger, input.caller {user, groups}, input.run.
func (c *Controller) runPolicy(ctx context.Context, p *pipelines.Pipeline, r *pipelines.Run, caller User) ([]string, error) {
	warn, err := c.pipelinePolicy(ctx, p)
	if err != nil || c.policy == nil || !c.policy.Has(policy.Run) {
		return warn, err
	}
	groups := make([]any, 0, len(caller.Groups))
	for _, g := range caller.Groups {
		groups = append(groups, g)
	}
	in := map[string]any{"pipeline": policy.PipelineInput(p), "run": policy.RunInput(r),
		"caller": map[string]any{"user": caller.Name, "groups": groups}}
	in["inputs"] = in["run"].(map[string]any)["inputs"]
	in["trigger"] = in["run"].(map[string]any)["trigger"]
	d, err := c.policy.Evaluate(ctx, policy.Run, in)
	if err != nil {
		return warn, err
	}
	return append(warn, d.Warn...), d.Err(policy.Run)
}

// stageGate asks prflow.stage before each stage of one pipeline starts.
type stageGate struct {
	c        *Controller
	p        *pipelines.Pipeline
	pipeline any   // the pipeline as data, converted once
	stages   []any // each stage as data, converted once
	envs     []any // each stage's environment as data, converted once
}

func (c *Controller) gateFor(p *pipelines.Pipeline) pipelines.StageGate {
	if c.policy == nil {
		return nil
	}
	g := &stageGate{c: c, p: p, pipeline: policy.Converted(policy.PipelineInput(p))}
	for _, st := range p.Stages {
		g.stages = append(g.stages, policy.Converted(policy.StageInput(st)))
		g.envs = append(g.envs, policy.Converted(policy.EnvironmentInput(p.Env(st.Environment))))
	}
	return g
}

// StageAllowed evaluates prflow.stage with input.stage, input.environment, input.pipeline,
// input.run (every stage's status so far), input.apps (every app status record the agents
// keep in prflow-apps, from memory: see appWatch) and input.diff (what the stage's preview
// found; empty before it ran). An evaluation that fails denies: a policy that cannot be
// checked must not be skipped.
func (g *stageGate) StageAllowed(r *pipelines.Run, si int) (deny, warn []string) {
	return g.evaluate(r, si, "")
}

// PreviewAllowed evaluates prflow.stage again once the stage's DiffPreview found what its PR
// deploys (input.diff), before the merge.
func (g *stageGate) PreviewAllowed(r *pipelines.Run, si int) (deny, warn []string) {
	return g.evaluate(r, si, "after its diff preview ")
}

func (g *stageGate) evaluate(r *pipelines.Run, si int, when string) (deny, warn []string) {
	if !g.c.policy.Has(policy.Stage) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), policyTimeout)
	defer cancel()
	apps, err := g.c.stageApps(ctx)
	if err != nil {
		g.c.log.Error("stage policy: app status unreadable", "run", r.ID, "stage", r.Stages[si].ID, "err", err)
		return []string{"policy not evaluated: app status unreadable: " + err.Error()}, nil
	}
	st := g.p.Stages[si]
	in := map[string]any{"stage": g.stages[si], "environment": g.envs[si], "pipeline": g.pipeline, "run": policy.RunInput(r), "apps": apps,
		"diff": policy.StageDiff(r.Stages[si])}
	d, err := g.c.policy.Evaluate(ctx, policy.Stage, in)
	if err != nil {
		g.c.log.Error("stage policy failed", "run", r.ID, "stage", st.ID, "err", err)
		return []string{"policy not evaluated: " + err.Error()}, nil
	}
	if len(d.Deny) > 0 {
		g.c.log.Warn(strings.TrimSpace("stage denied by policy "+when), "run", r.ID, "stage", st.ID, "deny", d.Deny)
	}
	if len(d.Warn) > 0 {
		g.c.log.Warn("stage policy warnings", "run", r.ID, "stage", st.ID, "warn", d.Warn)
	}
	return d.Deny, d.Warn
}

// appStatuses reads every app status record of prflow-apps, each with its key, as one list
// converted for the policy engine: what a stage gate uses while no watcher is caught up.
// Records are converted once per revision (appCache), and the list is built again only when
// a record changed (appList): most reads see the same list, and rebuilding it was a third of
// an evaluation's allocations.
func (c *Controller) appStatuses(ctx context.Context) (any, error) {
	lister, err := c.b.Apps.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return policy.Converted([]any{}), nil
	}
	if err != nil {
		return nil, fmt.Errorf("prflow-apps: %w", err)
	}
	var vals []any
	var revs []appRev
	for k := range lister.Keys() {
		e, err := c.b.Apps.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		revs = append(revs, appRev{k, e.Revision()})
		if v, ok := c.appCache.Load(k); ok && v.(cachedApp).rev == e.Revision() {
			vals = append(vals, v.(cachedApp).val)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(e.Value(), &m); err != nil || m == nil || agent.Tombstone(m) { // "null" is no record either, nor is a deleted app's tombstone
			revs = revs[:len(revs)-1]
			continue
		}
		m["key"] = k
		val := policy.Converted(m)
		c.appCache.Store(k, cachedApp{rev: e.Revision(), val: val})
		vals = append(vals, val)
	}
	if last := c.appList.Load(); last != nil && slices.Equal(last.revs, revs) {
		return last.val, nil
	}
	if vals == nil {
		vals = []any{}
	}
	list := &appList{revs: revs, val: policy.Converted(vals)}
	c.appList.Store(list)
	return list.val, nil
}

// appRev is one app status record at one revision.
type appRev struct {
	key string
	rev uint64
}

// appList is the converted list of app status records as of the revisions in revs.
type appList struct {
	revs []appRev
	val  any
}

type cachedApp struct {
	rev uint64
	val any
}
