package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/steps/template"
)

// StageGate ends a stage only when a condition over its apps' live status holds, and keeps
// holding for the soak time. A stage's `gate:` block adds it as the stage's last step. The
// condition sees `apps`: the status records of the apps this stage synced or linked (name,
// agent, sync, health, revision, syncedRevision, healthMessage, …). It wakes on those apps'
// status changes; if the condition stops holding during the soak, the stage fails.
func init() {
	Register(Definition{
		Type:             "StageGate",
		JudgesAtDeadline: true,
		Priors:           []string{"GitOpsSync", "FetchLinkedApps"},
		Internal:         true, // written as a stage's `gate:`
		New:              func() Step { return StepFunc(runStageGate) },
		Config:           stageGateConfig{},
		Validate: func(in map[string]any) error {
			if c, _ := in["condition"].(string); c != "" {
				if _, err := template.CompileCondition(c); err != nil {
					return fmt.Errorf("condition: %w", err)
				}
			}
			return nil
		},
	})
}

// stageGateConfig is StageGate's `with:`, written by the loader from a stage's `gate:`.
type stageGateConfig struct {
	Condition string        `input:"condition" doc:"an expression over the apps' status (apps)"`
	Soak      time.Duration `input:"soak" doc:"how long the condition must hold"`
	outageInput
}

type gateMemo struct {
	HeldSince   time.Time `json:"heldSince,omitzero"`
	OutageSince time.Time `json:"outageSince,omitzero"`
}

func runStageGate(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := Decode[stageGateConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	cond, soak := cfg.Condition, cfg.Soak
	g, gerr := gitopsFor(sc)
	if gerr != nil && cond != "" {
		return Result{}, gerr
	}
	outageLimit := cfg.outageTimeout()
	targets := gateApps(sc)
	if gerr != nil && len(targets) > 0 {
		return Result{}, gerr
	}
	var statuses []any
	var keys []string
	views := &viewCache{g: g}
	var out outage
	for _, t := range targets {
		keys = append(keys, agent.StatusKey(t.Agent, t.App))
		st, err := g.Status(ctx, t.Agent, t.App)
		if err != nil && !errors.Is(err, agent.ErrNotFound) {
			return Result{}, fmt.Errorf("status of %s (agent %s): %w", t.App, t.Agent, err)
		}
		if v := agent.RecordView(views.get(ctx, t.Agent), st); !v.Fresh {
			out.add(v)
		}
		var m map[string]any
		if st != nil {
			b, _ := json.Marshal(st)
			_ = json.Unmarshal(b, &m)
		} else {
			m = map[string]any{"name": t.App, "agent": t.Agent, "health": "Missing", "sync": "Unknown"}
		}
		statuses = append(statuses, m)
	}
	var m gateMemo
	_, _ = sc.DecodeMemo(&m)
	now := time.Now()
	final := sc.WakeReason == "deadline"
	if out.track(&m.OutageSince, now, outageLimit, final) {
		return FailBlind(out.blindMessage(fmt.Sprintf("gate condition %q could not be checked", cond), m.OutageSince, outageLimit, final, now)), nil
	}
	if out.any() {
		// What the apps show is not what Argo CD has: neither count the soak nor fail on it.
		m.HeldSince = time.Time{}
		poll := min(outagePoll, max(time.Until(m.OutageSince.Add(outageLimit)), time.Second))
		return Park(Wait{Keys: keys, Deadline: sc.Deadline, Poll: poll, Reason: "waiting: " + out.describe()}, m), nil
	}
	holds := true
	if cond != "" {
		t, err := template.CompileCondition(cond)
		if err != nil {
			return Result{}, Terminalf("condition: %w", err)
		}
		holds, err = t.EvalBool(ctx, map[string]any{"apps": statuses, "stage": map[string]any{"id": sc.Stage}, "run": map[string]any{"id": sc.RunID}})
		if err != nil {
			return Result{}, Terminalf("condition %q: %w", cond, err)
		}
	}
	switch {
	case holds && m.HeldSince.IsZero():
		m.HeldSince = now
	case !holds && !m.HeldSince.IsZero():
		return Fail(fmt.Sprintf("gate condition %q stopped holding after %s of the %s soak: %s", cond, now.Sub(m.HeldSince).Round(time.Second), soak, summarize(statuses))), nil
	}
	if holds && now.Sub(m.HeldSince) >= soak {
		return Done(map[string]any{"apps": statuses, "heldSince": m.HeldSince.UTC().Format(time.RFC3339)}), nil
	}
	if sc.WakeReason == "deadline" {
		return Fail(fmt.Sprintf("gate condition %q not met in time: %s", cond, summarize(statuses))), nil
	}
	w := Wait{Keys: keys, Deadline: sc.Deadline, Poll: 30 * time.Second}
	if holds {
		w.Poll = soak - now.Sub(m.HeldSince)
		w.Reason = fmt.Sprintf("soaking: condition holds since %s, %s to go", m.HeldSince.UTC().Format("15:04:05"), w.Poll.Round(time.Second))
	} else {
		w.Reason = fmt.Sprintf("waiting for %q: %s", cond, summarize(statuses))
	}
	return Park(w, m), nil
}

// gateApps are the apps of the stage's latest GitOpsSync, else FetchLinkedApps.
func gateApps(sc *Context) []appTarget {
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		p := sc.Priors[i]
		var list []any
		switch p.Type {
		case "GitOpsSync":
			list, _ = p.Outputs["applications"].([]any)
		case "FetchLinkedApps":
			list, _ = p.Outputs["apps"].([]any)
		default:
			continue
		}
		var out []appTarget
		for _, e := range list {
			m, _ := e.(map[string]any)
			a, _ := m["agent"].(string)
			n, _ := m["name"].(string)
			if a != "" && n != "" {
				out = append(out, appTarget{Agent: a, App: n})
			}
		}
		return out
	}
	return nil
}

func summarize(statuses []any) string {
	var parts []string
	for _, s := range statuses {
		m, _ := s.(map[string]any)
		parts = append(parts, fmt.Sprintf("%v %v/%v", m["name"], m["sync"], m["health"]))
	}
	if len(parts) == 0 {
		return "no apps"
	}
	return strings.Join(parts, ", ")
}
