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

// The GitOps gates (GitOpsSync, FetchLinkedApps, StageGate) never decide on a stale view: while
// an agent cannot see Argo CD (its registration is missing, expired, unhealthy or stale, or
// the record is marked stale) they park and say why. An outage longer than
// agentOutageTimeout, or one still going at the step's deadline, fails the step with
// NoRollback: the stage fails without a rollback it could not observe.

// defaultOutageTimeout is agentOutageTimeout when the pipeline does not set it.
const defaultOutageTimeout = 10 * time.Minute

// outagePoll is how often a step parked on an outage looks again: recovery of a registration
// changes no prflow-apps key, so it is not a wake.
const outagePoll = 3 * time.Second

// outage is what a step knows about the agents it cannot see right now.
type outage struct {
	views []agent.View // not fresh, one per agent, sorted by agent
}

func (o *outage) add(v agent.View) {
	for _, x := range o.views {
		if x.Agent == v.Agent {
			return
		}
	}
	o.views = append(o.views, v)
	sort.Slice(o.views, func(i, j int) bool { return o.views[i].Agent < o.views[j].Agent })
}

func (o *outage) any() bool { return len(o.views) > 0 }

// since is when the outage began: the earliest reported start, else first (when this step
// first saw it).
func (o *outage) since(first time.Time) time.Time {
	t := first
	for _, v := range o.views {
		if !v.Since.IsZero() && (t.IsZero() || v.Since.Before(t)) {
			t = v.Since
		}
	}
	return t
}

func (o *outage) describe() string {
	parts := make([]string, len(o.views))
	for i, v := range o.views {
		parts[i] = v.Describe()
	}
	return strings.Join(parts, "; ")
}

// track updates the memo's outage start and reports whether the outage has lasted too long
// (or the step is at its deadline): then the step must fail without rollback.
func (o *outage) track(start *time.Time, now time.Time, limit time.Duration, final bool) bool {
	if !o.any() {
		*start = time.Time{}
		return false
	}
	if start.IsZero() {
		*start = o.since(now)
	}
	return final || now.Sub(*start) >= limit
}

// blindMessage explains a failure on an outage: what could not be seen, and that no rollback
// runs.
func (o *outage) blindMessage(what string, start time.Time, limit time.Duration, final bool, now time.Time) string {
	how := fmt.Sprintf("for %s, longer than agentOutageTimeout %s", now.Sub(start).Round(time.Second), limit)
	if final && now.Sub(start) < limit {
		how = "until the step's deadline"
	}
	return fmt.Sprintf("%s: %s, %s; refusing to roll back blind (prflow cannot see what the cluster runs; check Argo CD and the agent, then re-run or roll back by hand)",
		what, o.describe(), how)
}

// outageWords are what a step says about an outage: what could not be done (its failure),
// its log line and the start of its wait's reason.
type outageWords struct{ failure, logLine, waiting string }

// settle ends a step's round of agent requests; with every agent answering it returns false
// and the step goes on. Otherwise the step fails without rollback once the outage has lasted
// limit (or the step is at its deadline), or parks until the agents are back: woken by their
// inventory keys and by keys, and polled, since a registration's recovery is not a wake.
// memo points at the step's memo, which holds since: it is saved as it is when the step parks.
func (o *outage) settle(sc *Context, memo any, since *time.Time, limit time.Duration, final bool, say outageWords, keys ...string) (Result, bool) {
	now := time.Now()
	if o.track(since, now, limit, final) {
		return FailBlind(o.blindMessage(say.failure, *since, limit, final, now)), true
	}
	if !o.any() {
		return Result{}, false
	}
	for _, v := range o.views {
		keys = append(keys, agent.InventoryKey(v.Agent))
	}
	sort.Strings(keys)
	poll := min(outagePoll, time.Second<<min(sc.Wake, 2), max(time.Until(since.Add(limit)), time.Second))
	sc.Log.Warn(say.logLine, "why", o.describe())
	return Park(Wait{Keys: keys, Poll: poll, Deadline: sc.Deadline, Reason: say.waiting + ": " + o.describe()}, memo), true
}

// viewCache asks each agent's view once per step run.
type viewCache struct {
	g GitOps
	m map[string]agent.View
}

func (c *viewCache) get(ctx context.Context, agentID string) agent.View {
	if c.m == nil {
		c.m = map[string]agent.View{}
	}
	v, ok := c.m[agentID]
	if !ok {
		v = c.g.View(ctx, agentID)
		c.m[agentID] = v
	}
	return v
}

// outageErr reports whether an agent request failed because the agent or its view of Argo CD
// is gone (offline, no answer, Argo CD unreachable or refusing the agent's token), and turns
// it into a view.
func outageErr(agentID string, err error) (agent.View, bool) {
	for _, s := range []error{agent.ErrOffline, agent.ErrTimeout, agent.ErrUnreachable, agent.ErrUnauthorized} {
		if errors.Is(err, s) {
			reason := err.Error()
			var e *agent.Error
			if errors.As(err, &e) {
				reason = e.Message
			}
			return agent.View{Agent: agentID, Reason: reason}, true
		}
	}
	return agent.View{}, false
}
