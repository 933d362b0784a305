package pipelines

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Env builds the expression environment for stage si: inputs, run, pipeline and stage
// variables, the outputs of steps in this stage (steps.<id>.outputs) and of all stages
// (stages.<id>.steps.<id>.outputs), and the stage's environment and clusters.
func (m *Machine) Env(r *Run, si int, rollback bool) map[string]any {
	p := m.P
	env := map[string]any{
		"inputs": anyMap(r.Inputs),
		"run":    map[string]any{"id": r.ID, "executor": r.Executor, "pipeline": r.Pipeline},
	}
	pvars := map[string]any{}
	pipeline := map[string]any{"name": p.Name, "variables": pvars}
	if p.Service != nil {
		env["service"] = map[string]any{"name": p.Service.Name}
	}
	env["pipeline"] = pipeline
	ctx := context.Background()
	for _, v := range p.Variables {
		if val, err := evalValue(v.Value, env); err == nil {
			pvars[v.Name] = val
		}
	}
	stages := map[string]any{}
	for _, sr := range r.Stages {
		stages[sr.ID] = map[string]any{"status": string(sr.Status), "steps": stepsMap(sr)}
	}
	env["stages"] = stages
	merged := map[string]any{}
	for k, v := range pvars {
		merged[k] = v
	}
	env["variables"] = merged
	if si < 0 || si >= len(r.Stages) {
		return env
	}
	sr := r.Stages[si]
	sp := p.Stages[si]
	svars := map[string]any{}
	env["steps"] = stages[sr.ID].(map[string]any)["steps"]
	env["stage"] = map[string]any{"id": sr.ID, "name": sp.Name, "status": string(sr.Status), "variables": svars}
	if !sr.Started.IsZero() {
		// When the stage started: Verify's startTime and queries over the promotion window.
		env["stage"].(map[string]any)["startedAt"] = sr.Started.UTC().Format(time.RFC3339)
		env["stage"].(map[string]any)["startedAtUnix"] = sr.Started.Unix()
	}
	if e := m.environment(si); e != nil {
		env["env"] = map[string]any{"name": e.Name, "group": e.Group}
		env["envgroup"] = map[string]any{"name": e.Group}
		var cl []any
		for _, c := range e.Clusters {
			cl = append(cl, map[string]any{"name": c.Name, "agent": c.Agent})
		}
		env["clusters"] = cl
		if len(cl) > 0 {
			env["cluster"] = cl[0]
		}
	}
	for _, v := range sp.Variables {
		if val, err := evalValue(v.Value, env); err == nil {
			svars[v.Name] = val
			merged[v.Name] = val
		}
	}
	_ = ctx
	_ = rollback
	return env
}

func stepsMap(sr *StageRun) map[string]any {
	out := map[string]any{}
	for _, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
		for _, st := range list {
			out[st.ID] = map[string]any{"status": string(st.Status), "outputs": anyMap(st.Outputs), "error": st.Error}
		}
	}
	return out
}

func anyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// evalValue resolves every expression in v. Errors name the key path inside v.
func evalValue(v *Value, env map[string]any) (any, error) {
	return evalAt(v, env, "")
}

func evalAt(v *Value, env map[string]any, path string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch {
	case v.Tmpl != nil:
		out, err := v.Tmpl.Eval(context.Background(), env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.TrimPrefix(orDefault(path, "value"), "."), err)
		}
		return out, nil
	case v.Map != nil:
		out := make(map[string]any, len(v.Map))
		keys := append([]string(nil), v.Keys...)
		sort.Strings(keys)
		for _, k := range keys {
			c, err := evalAt(v.Map[k], env, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case v.List != nil:
		out := make([]any, len(v.List))
		for i, c := range v.List {
			x, err := evalAt(c, env, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	}
	return v.Lit, nil
}
