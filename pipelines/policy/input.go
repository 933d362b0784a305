package policy

import (
	"encoding/json"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

// PipelineInput is the loaded pipeline as data: name, inputs, environments (with clusters),
// stages (with steps and rollback steps; expressions as written).
func PipelineInput(p *pipelines.Pipeline) map[string]any {
	envs := make([]any, 0, len(p.Environments))
	for i := range p.Environments {
		envs = append(envs, EnvironmentInput(&p.Environments[i]))
	}
	stages := make([]any, 0, len(p.Stages))
	for _, st := range p.Stages {
		stages = append(stages, StageInput(st))
	}
	inputs := make([]any, 0, len(p.Inputs))
	for _, in := range p.Inputs {
		inputs = append(inputs, map[string]any{"name": in.Name, "type": in.Type, "required": in.Required, "default": jsonish(in.Default)})
	}
	out := map[string]any{"name": p.Name, "file": p.File, "inputs": inputs, "environments": envs, "stages": stages}
	if p.Service != nil {
		out["service"] = map[string]any{"name": p.Service.Name}
	}
	return out
}

// EnvironmentInput is one environment as data; nil for none.
func EnvironmentInput(e *pipelines.Environment) map[string]any {
	if e == nil {
		return nil
	}
	cls := make([]any, 0, len(e.Clusters))
	for _, c := range e.Clusters {
		cls = append(cls, map[string]any{"name": c.Name, "agent": c.Agent})
	}
	return map[string]any{"name": e.Name, "group": e.Group, "clusters": cls}
}

// StageInput is one stage of the pipeline as data.
func StageInput(st *pipelines.Stage) map[string]any {
	steps := func(list []*pipelines.Step) []any {
		out := make([]any, 0, len(list))
		for _, sp := range list {
			out = append(out, map[string]any{"id": sp.ID, "name": sp.Name, "type": sp.Type, "pool": sp.Pool, "with": value(sp.With)})
		}
		return out
	}
	needs := make([]any, 0, len(st.Needs))
	for _, n := range st.Needs {
		needs = append(needs, n)
	}
	cls := make([]any, 0, len(st.Clusters))
	for _, c := range st.Clusters {
		cls = append(cls, c)
	}
	return map[string]any{"id": st.ID, "name": st.Name, "environment": st.Environment, "needs": needs,
		"clusters": cls, "steps": steps(st.Steps), "rollbackSteps": steps(st.Rollback)}
}

// RunInput is a run as data: its id, pipeline, executor, inputs, trigger and each stage's
// status and error so far, and the diff its preview found (StageDiff; empty before it ran).
func RunInput(r *pipelines.Run) map[string]any {
	stages := make([]any, 0, len(r.Stages))
	for _, s := range r.Stages {
		stages = append(stages, map[string]any{"id": s.ID, "status": string(s.Status), "error": s.Error, "diff": StageDiff(s)})
	}
	out := map[string]any{"id": r.ID, "pipeline": r.Pipeline, "executor": r.Executor, "status": string(r.Status),
		"inputs": jsonish(r.Inputs), "stages": stages}
	// A re-run or a retry says of which run, so a policy can decide on them apart; a retry's
	// stages say which it carried over (from which run).
	if r.RerunOf != "" {
		out["rerunOf"] = r.RerunOf
	}
	if r.RetryOf != "" {
		out["retryOf"] = r.RetryOf
		for i, s := range r.Stages {
			if s.CarriedFrom != "" {
				stages[i].(map[string]any)["carriedFrom"] = s.CarriedFrom
			}
		}
	}
	if t := r.Trigger; t != nil {
		out["trigger"] = map[string]any{"kind": t.Kind, "trigger": t.Trigger, "provider": t.Provider, "deliveryId": t.DeliveryID}
	}
	return out
}

// value is a step's `with` as data; an expression is its source text.
func value(v *pipelines.Value) any {
	switch {
	case v == nil:
		return nil
	case v.Tmpl != nil:
		return v.Tmpl.Source()
	case v.Map != nil:
		m := make(map[string]any, len(v.Map))
		for k, e := range v.Map {
			m[k] = value(e)
		}
		return m
	case v.List != nil:
		l := make([]any, 0, len(v.List))
		for _, e := range v.List {
			l = append(l, value(e))
		}
		return l
	}
	return jsonish(v.Lit)
}

// jsonish makes values OPA's converter takes without a JSON round trip where it can.
func jsonish(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = jsonish(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = jsonish(e)
		}
		return l
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// Converted turns an input part that is used many times (the pipeline, an app record) into
// OPA's value form once, so evaluations that include it skip the conversion. It returns x
// itself when x does not convert.
func Converted(x any) any {
	v, err := ast.InterfaceToValue(x)
	if err != nil {
		return x
	}
	return v
}

// StageDiff is what the stage's DiffPreview steps found its PR deploys, one entry per
// resource: {app, agent, group, kind, name, namespace, change (added, changed, removed),
// paths, values (path → new value; none for a masked Secret), masked}. An app the PR creates or deletes, or whose own spec it changes, also has
// an entry of kind Application (paths: the spec paths). Empty when no preview ran.
func StageDiff(sr *pipelines.StageRun) []any {
	out := []any{}
	for _, st := range sr.Steps {
		if st.Type != steps.TypeDiffPreview || st.Status != pipelines.StSucceeded {
			continue
		}
		out = append(out, DiffInput(st.Outputs["apps"])...)
	}
	return out
}

// DiffInput turns a DiffPreview's apps output into policy entries (see StageDiff).
func DiffInput(apps any) []any {
	var diffs []agent.AppDiff
	if b, err := json.Marshal(apps); err == nil {
		_ = json.Unmarshal(b, &diffs)
	}
	out := []any{}
	for _, d := range diffs {
		change := ""
		switch {
		case d.Created:
			change = agent.ChangeAdded
		case d.Deleted:
			change = agent.ChangeRemoved
		case len(d.SpecChanges) > 0:
			change = agent.ChangeChanged
		}
		if change != "" {
			paths := make([]any, 0, len(d.SpecChanges))
			for _, s := range d.SpecChanges {
				p, _, _ := strings.Cut(s, ": ")
				paths = append(paths, p)
			}
			out = append(out, map[string]any{"app": d.App, "agent": d.Agent, "group": "argoproj.io", "kind": "Application",
				"name": d.App, "namespace": "", "change": change, "paths": paths, "values": map[string]any{}, "masked": false})
		}
		for _, r := range d.Resources {
			paths := make([]any, 0, len(r.Paths))
			for _, p := range r.Paths {
				paths = append(paths, p)
			}
			values := map[string]any{}
			for k, v := range r.Values {
				values[k] = jsonish(v)
			}
			out = append(out, map[string]any{"app": d.App, "agent": d.Agent, "group": r.Group, "kind": r.Kind, "name": r.Name,
				"namespace": r.Namespace, "change": r.Change, "paths": paths, "values": values, "masked": r.Masked})
		}
	}
	return out
}
