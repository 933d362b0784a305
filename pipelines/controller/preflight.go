package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

// ErrRefused means a run was not started because it names connectors or agents that nothing
// live serves (see Check). Nothing was stored, dispatched or written to a release repo.
var ErrRefused = errors.New("refused")

// RefusedError lists every connector and agent a pipeline names that nothing live serves.
type RefusedError struct{ Problems []string }

func (e *RefusedError) Error() string { return "refused: " + strings.Join(e.Problems, "; ") }

// Is makes a RefusedError match ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// WithoutStartChecks turns off the run-start check of connectors and agents (Check), for
// tests that exercise what steps do when an agent is offline at run time.
func WithoutStartChecks() Option { return func(c *Controller) { c.noChecks = true } }

// needs are the connectors (by worker pool) and agents a pipeline names literally. Names
// given by expressions are known only when the step's job is built, so they are skipped.
type needs struct {
	connectors map[string][]string // pool → connector names
	agents     []string
	channels   []string // notification channels (jobs of pipelines.DefaultPool)
}

func pipelineNeeds(p *pipelines.Pipeline, reg *steps.Registry, trig *pipelines.TriggerInfo) needs {
	n := needs{connectors: map[string][]string{}, channels: p.NotifyChannels()}
	addConn := func(pool, name string) {
		if name != "" && !slices.Contains(n.connectors[pool], name) {
			n.connectors[pool] = append(n.connectors[pool], name)
		}
	}
	addAgent := func(name string) {
		if name != "" && !slices.Contains(n.agents, name) {
			n.agents = append(n.agents, name)
		}
	}
	if trig != nil && trig.Connector != "" {
		pool := pipelines.DefaultPool
		if def, ok := reg.Lookup(steps.TypeTriggerPaths); ok && def.Pool != "" {
			pool = def.Pool
		}
		addConn(pool, trig.Connector)
	}
	for _, st := range p.Stages {
		if env := p.Env(st.Environment); env != nil {
			for _, cl := range env.Clusters {
				if len(st.Clusters) == 0 || slices.Contains(st.Clusters, cl.Name) {
					addAgent(cl.Agent)
				}
			}
		}
		for _, sp := range append(slices.Clip(st.Steps), st.Rollback...) {
			pool := sp.Pool
			if pool == "" {
				if def, ok := reg.Lookup(sp.Type); ok && def.Pool != "" {
					pool = def.Pool
				} else {
					pool = pipelines.DefaultPool
				}
			}
			if sp.With == nil {
				continue
			}
			for _, k := range []string{"connector", "connectorRef"} {
				addConn(pool, literal(sp.With.Map[k]))
			}
			for _, k := range []string{"agentId", "agent"} {
				addAgent(literal(sp.With.Map[k]))
			}
			// Verify's metrics connectors are on the workers too (advertised as routes).
			if def, ok := reg.Lookup(sp.Type); ok && def.Type == "Verify" && sp.With.Map["metrics"] != nil {
				for _, e := range sp.With.Map["metrics"].List {
					if e != nil && e.Map != nil {
						if name := literal(e.Map["provider"]); name != "" {
							addConn(pool, steps.MetricsRoute(name))
						}
					}
				}
			}
			if list := sp.With.Map["applicationsList"]; list != nil {
				for _, e := range list.List {
					if e == nil || e.Map == nil {
						continue
					}
					for _, k := range []string{"agentId", "agent", "agentIdentifier"} {
						addAgent(literal(e.Map[k]))
					}
				}
			}
		}
	}
	return n
}

// literal is v's value when it is a literal string, else "".
func literal(v *pipelines.Value) string {
	if v == nil || v.Tmpl != nil {
		return ""
	}
	s, _ := v.Lit.(string)
	return s
}

// Check is the run-start check: every connector a pipeline names is held by a live worker
// of the step's pool, every notification channel by a live worker of the default pool, and
// every agent it names is registered and live. It returns a
// RefusedError listing every problem, or nil. It reads prflow-workers and prflow-agents only
// when the pipeline names connectors, notification channels or agents: from memory while the
// controller runs (a refusal is confirmed from the buckets), else from the buckets.
func (c *Controller) Check(ctx context.Context, p *pipelines.Pipeline, trig *pipelines.TriggerInfo) error {
	if c.regs.ready() {
		// From memory (registrations.go); only a refusal is worth reading the buckets for.
		if err := c.check(ctx, p, trig, c.regs.liveWorkers, c.regs.liveAgents); err == nil {
			return nil
		}
	}
	return c.check(ctx, p, trig, c.LiveWorkers, c.liveAgents)
}

func (c *Controller) check(ctx context.Context, p *pipelines.Pipeline, trig *pipelines.TriggerInfo,
	liveWorkers func(context.Context) ([]worker.Info, error), liveAgents func(context.Context) (map[string]bool, error)) error {
	n := pipelineNeeds(p, c.reg, trig)
	var problems []string
	var live []worker.Info
	if len(n.connectors) > 0 || len(n.channels) > 0 {
		var err error
		if live, err = liveWorkers(ctx); err != nil {
			return err
		}
	}
	if len(n.connectors) > 0 {
		pools := make([]string, 0, len(n.connectors))
		for pool := range n.connectors {
			pools = append(pools, pool)
		}
		sort.Strings(pools)
		for _, pool := range pools {
			held := map[string]bool{}
			workers := 0
			for _, w := range live {
				if slices.Contains(w.Pools, pool) {
					workers++
					for _, cn := range w.Connectors {
						held[cn] = true
					}
				}
			}
			for _, name := range n.connectors[pool] {
				if held[name] {
					continue
				}
				if workers == 0 {
					problems = append(problems, fmt.Sprintf("connector %q: pool %q has no live worker", name, pool))
					continue
				}
				problems = append(problems, fmt.Sprintf("connector %q is held by no live worker of pool %q (live: %s)", name, pool, list(held)))
			}
		}
	}
	// A channel's URL and password are on the workers: one that no live worker holds would
	// fail every notification of the run, so the run is refused before it does anything.
	if len(n.channels) > 0 {
		held := map[string]bool{}
		for _, w := range live {
			if slices.Contains(w.Pools, pipelines.DefaultPool) {
				for _, ch := range w.Channels {
					held[ch] = true
				}
			}
		}
		for _, ch := range n.channels {
			if !held[ch] {
				problems = append(problems, fmt.Sprintf("notification channel %q is configured on no live worker of pool %q (prflow worker --notifiers; live channels: %s)", ch, pipelines.DefaultPool, list(held)))
			}
		}
	}
	if len(n.agents) > 0 {
		registered, err := liveAgents(ctx)
		if err != nil {
			return err
		}
		for _, a := range n.agents {
			if !registered[a] {
				problems = append(problems, fmt.Sprintf("agent %q is not registered (registered: %s)", a, list(registered)))
			}
		}
	}
	if len(problems) > 0 {
		return &RefusedError{Problems: problems}
	}
	return nil
}

func list(set map[string]bool) string {
	if len(set) == 0 {
		return "none"
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// LiveWorkers reads the workers registered in prflow-workers (the bucket's TTL drops those
// whose heartbeats stopped).
func (c *Controller) LiveWorkers(ctx context.Context) ([]worker.Info, error) {
	lister, err := c.b.Workers.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read prflow-workers: %w", err)
	}
	var out []worker.Info
	for k := range lister.Keys() {
		e, err := c.b.Workers.Get(ctx, k)
		if err != nil {
			continue // gone between list and get
		}
		var w worker.Info
		if json.Unmarshal(e.Value(), &w) == nil {
			out = append(out, w)
		}
	}
	return out, nil
}

// liveAgents reads the agents registered in prflow-agents.
func (c *Controller) liveAgents(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	lister, err := c.b.Agents.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read prflow-agents: %w", err)
	}
	for k := range lister.Keys() {
		e, err := c.b.Agents.Get(ctx, k)
		if err != nil {
			continue
		}
		var r agent.Registration
		if json.Unmarshal(e.Value(), &r) == nil && r.Agent != "" {
			out[r.Agent] = true
		}
	}
	return out, nil
}

// NoWorker starts the wait reason of a queued step that no live worker can take.
const NoWorker = "waiting for a worker"

// explainQueued gives each queued step of r that no live worker can take a wait reason
// ("waiting for a worker with connector X in pool Y"), for status output. r is a copy read
// for a client; nothing is stored. The connector is known when the step names it literally.
func (c *Controller) explainQueued(ctx context.Context, r *pipelines.Run) {
	var m *pipelines.Machine
	var live []worker.Info
	loaded := false
	for _, sr := range r.Stages {
		for i, list := range [][]*pipelines.StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if st.Status != pipelines.StQueued {
					continue
				}
				if !loaded {
					loaded = true
					var err error
					if m, err = c.machine(ctx, r.Spec); err != nil {
						return
					}
					if live, err = c.workerView(ctx); err != nil {
						return
					}
				}
				sp := stepSpec(m.P, sr.ID, st.ID, i == 1)
				if sp == nil {
					continue
				}
				pool, conn := c.stepRoute(sp)
				if reason := blocked(live, pool, conn); reason != "" {
					st.Wait = &steps.Wait{Reason: reason}
				}
			}
		}
	}
}

func stepSpec(p *pipelines.Pipeline, stage, step string, rollback bool) *pipelines.Step {
	s := p.Stage(stage)
	if s == nil {
		return nil
	}
	list := s.Steps
	if rollback {
		list = s.Rollback
	}
	for _, sp := range list {
		if sp.ID == step {
			return sp
		}
	}
	return nil
}

// stepRoute is the pool a step's jobs go to and the connector it names literally ("" none).
func (c *Controller) stepRoute(sp *pipelines.Step) (pool, conn string) {
	pool = sp.Pool
	if pool == "" {
		if def, ok := c.reg.Lookup(sp.Type); ok && def.Pool != "" {
			pool = def.Pool
		} else {
			pool = pipelines.DefaultPool
		}
	}
	if sp.With != nil {
		for _, k := range []string{"connector", "connectorRef"} {
			if conn = literal(sp.With.Map[k]); conn != "" {
				break
			}
		}
	}
	return pool, conn
}

// blocked says why no live worker can take a job of pool needing conn, or "".
func blocked(live []worker.Info, pool, conn string) string {
	for _, w := range live {
		if slices.Contains(w.Pools, pool) && (conn == "" || slices.Contains(w.Connectors, conn)) {
			return ""
		}
	}
	if conn != "" {
		return fmt.Sprintf("%s with connector %s in pool %s", NoWorker, conn, pool)
	}
	return fmt.Sprintf("%s in pool %s (none is live)", NoWorker, pool)
}

// workerView is LiveWorkers, read at most once a second: clients following runs poll.
func (c *Controller) workerView(ctx context.Context) ([]worker.Info, error) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	if !c.viewAt.IsZero() && time.Since(c.viewAt) < time.Second {
		return c.view, nil
	}
	live, err := c.LiveWorkers(ctx)
	if err != nil {
		return nil, err
	}
	c.view, c.viewAt = live, time.Now()
	return live, nil
}
