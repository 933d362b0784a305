package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/worker"
)

// registrations keeps prflow-agents and prflow-workers in memory from KV watchers, so that a
// run start checks its agents and connectors without listing the buckets (a key listing and
// a read per key on every start). Both buckets expire keys after queue.LeaseTTL without an
// event, so an entry counts as live for that long after it was written, as in the bucket.
//
// Only "yes" answers are trusted: a start the cache would refuse is checked again against the
// buckets themselves (Controller.Check), so a lagging watcher can never refuse a run.
type registrations struct {
	mu      sync.Mutex
	agents  map[string]agentReg // prflow-agents key → registration
	workers map[string]workerReg
	caught  int               // watchers that delivered every current entry (2: both)
	views   map[string]string // agent → its view signature when last compared
	check   time.Duration     // how often views are compared: viewCheck unless a test sets it
}

type agentReg struct {
	reg agent.Registration
	at  time.Time // when it was written
}

type workerReg struct {
	info worker.Info
	at   time.Time
}

func newRegistrations() *registrations {
	return &registrations{agents: map[string]agentReg{}, workers: map[string]workerReg{}, views: map[string]string{}}
}

// ready says whether both watchers caught up (before that, nothing is answered from memory).
func (g *registrations) ready() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.caught == 2
}

func live(at, now time.Time) bool { return now.Sub(at) < queue.LeaseTTL }

// liveAgents is as Controller.liveAgents, from memory.
func (g *registrations) liveAgents(context.Context) (map[string]bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	out := map[string]bool{}
	for _, e := range g.agents {
		if e.reg.Agent != "" && live(e.at, now) {
			out[e.reg.Agent] = true
		}
	}
	return out, nil
}

// liveWorkers is as Controller.LiveWorkers, from memory.
func (g *registrations) liveWorkers(context.Context) ([]worker.Info, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	var out []worker.Info
	for _, e := range g.workers {
		if live(e.at, now) {
			out = append(out, e.info)
		}
	}
	return out, nil
}

// viewSignature sums up what an agent's view (agent.Client.View) depends on, except the
// heartbeat: the live replicas with their lead, health and staleness. A change in it may turn
// the agent's records trustworthy or not for the steps parked on them.
func (g *registrations) viewSignatureLocked(agentID string, now time.Time) string {
	var parts []string
	for _, e := range g.agents {
		r := e.reg
		if r.Agent != agentID || !live(e.at, now) || (!r.Expires.IsZero() && now.After(r.Expires)) {
			continue
		}
		parts = append(parts, r.Replica+"|"+flag(r.Leader)+flag(r.Healthy)+flag(r.Stale))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// changedViews compares every known agent's view signature with the last one and returns
// the agents whose view changed since (an agent seen for the first time is not a change).
func (g *registrations) changedViews(now time.Time) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := map[string]bool{}
	for _, e := range g.agents {
		if e.reg.Agent != "" {
			ids[e.reg.Agent] = true
		}
	}
	for id := range g.views {
		ids[id] = true
	}
	var out []string
	for id := range ids {
		sig := g.viewSignatureLocked(id, now)
		if old, known := g.views[id]; known && old != sig {
			out = append(out, id)
		}
		g.views[id] = sig // "" once no replica is live: one coming back is a change too
	}
	slices.Sort(out)
	return out
}

// apply takes one watcher entry in (nil: the watcher delivered every current entry).
func (g *registrations) apply(bucket string, e jetstream.KeyValueEntry, initial bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e == nil {
		g.caught++
		return
	}
	at := time.Now()
	if initial {
		at = e.Created() // written before we watched
	}
	del := e.Operation() != jetstream.KeyValuePut
	switch bucket {
	case queue.BucketAgents:
		var r agent.Registration
		if del || json.Unmarshal(e.Value(), &r) != nil {
			delete(g.agents, e.Key())
			return
		}
		g.agents[e.Key()] = agentReg{reg: r, at: at}
	case queue.BucketWorkers:
		var w worker.Info
		if del || json.Unmarshal(e.Value(), &w) != nil {
			delete(g.workers, e.Key())
			return
		}
		g.workers[e.Key()] = workerReg{info: w, at: at}
	}
}

// forgetExpired drops entries the buckets have expired, so the maps do not grow with every
// worker or replica that ever ran.
func (g *registrations) forgetExpired(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, e := range g.agents {
		if !live(e.at, now) {
			delete(g.agents, k)
		}
	}
	for k, e := range g.workers {
		if !live(e.at, now) {
			delete(g.workers, k)
		}
	}
}

// viewCheck is how often agents' views are compared (a registration that expires writes
// nothing, so expiry is found by looking), and sweepEvery how many of those pass between
// sweeps of the parked steps against the keys' last changes.
const (
	viewCheck  = 5 * time.Second
	sweepEvery = 12
)

// watchRegistrations follows prflow-agents and prflow-workers until ctx ends. When an agent's
// view changes (failover, health, staleness, its last replica expiring or coming back), the
// steps parked on its app records are woken: their records alone would not change. Every
// minute it also wakes any parked step whose key changed after it parked but whose wake was
// lost (a failed publish), from the controller's own indexes: no job, no read of a bucket.
func (c *Controller) watchRegistrations(ctx context.Context, agentsW, workersW jetstream.KeyWatcher) {
	g := c.regs
	every := viewCheck
	if g.check > 0 {
		every = g.check
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	agentsInit, workersInit := true, true
	au, wu := agentsW.Updates(), workersW.Updates()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-au:
			if !ok {
				au = nil
				continue
			}
			g.apply(queue.BucketAgents, e, agentsInit)
			if e == nil {
				agentsInit = false
				g.changedViews(time.Now()) // the first signatures: nothing to compare yet
				continue
			}
			if !agentsInit {
				c.wakeAgents(ctx, g.changedViews(time.Now()))
			}
		case e, ok := <-wu:
			if !ok {
				wu = nil
				continue
			}
			g.apply(queue.BucketWorkers, e, workersInit)
			if e == nil {
				workersInit = false
			}
		case <-tick.C:
			now := time.Now()
			if !agentsInit {
				c.wakeAgents(ctx, g.changedViews(now))
			}
			if n++; n%sweepEvery == 0 {
				g.forgetExpired(now)
				c.sweepParked(ctx)
			}
		}
	}
}

// wakeAgents wakes the steps parked on the app records of agents whose view changed.
func (c *Controller) wakeAgents(ctx context.Context, ids []string) {
	for _, id := range ids {
		if refs := c.park.wokenByPrefix(agent.Token(id) + "."); len(refs) > 0 {
			_ = c.wakeRefs(ctx, refs, "agent "+id+"'s registration changed")
		}
	}
}

// sweepParked wakes the parked steps whose key or topic changed after they parked: normally
// their wake is already on its way (and this one is dropped as a duplicate, or changes
// nothing); it matters when that wake's publish failed.
func (c *Controller) sweepParked(ctx context.Context) {
	if refs := c.park.missedWakes(); len(refs) > 0 {
		_ = c.wakeRefs(ctx, refs, "a change its wake was lost for")
	}
}
