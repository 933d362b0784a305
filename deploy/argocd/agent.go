// Package argocd is prflow's GitOps agent for Argo CD: it runs next to Argo CD, connects
// outbound to NATS, watches Argo CD's applications through the REST watch stream and keeps one
// status record per app in prflow-apps, and serves sync/apps/get requests through Argo CD's
// REST API. Several replicas may run for one Argo CD: all serve requests (one NATS queue
// group), and one of them — the holder of a lease in prflow-locks — writes status.
package argocd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
)

// Options configure an Agent.
type Options struct {
	// AgentID names the agent in pipelines (environments → clusters → agent).
	AgentID string
	// Replica tells replicas of one agent apart (default host-pid).
	Replica string
	// Client talks to Argo CD (see NewClient).
	Client *Client
	// UIURL is the Argo CD UI base for app links (default: the API URL).
	UIURL string
	// Namespace is Argo CD's own namespace; apps elsewhere are named "namespace/name"
	// (default "argocd").
	Namespace string
	// SyncConcurrency bounds the sync calls made at once for one request (default 8).
	SyncConcurrency int
	// MinBackoff and MaxBackoff bound the wait before reconnecting a broken watch stream
	// (default 200ms and 30s; the wait doubles per failure, with jitter).
	MinBackoff, MaxBackoff time.Duration
	// LeaderRetry is how often a replica that is not the leader tries to take the lease
	// (default 2s). A leader that stops cleanly hands over at once; one that dies holds the
	// lease until it expires (queue.LeaseTTL).
	LeaderRetry time.Duration
	// Heartbeat is how often the registration in prflow-agents is renewed (default 10s).
	Heartbeat time.Duration
	Version   string
	Log       *slog.Logger
}

// Agent bridges one Argo CD and NATS.
type Agent struct {
	o       Options
	argo    *Client
	started time.Time

	leader  atomic.Bool
	healthy atomic.Bool
	problem atomic.Value // string
	apps    atomic.Int64

	mu         sync.Mutex
	writer     *agent.Writer // set while leader
	pastWrites int64         // writes of earlier leaderships
	connects   atomic.Int64  // watch stream connections
	served     atomic.Int64  // requests handled
}

// New checks opts; it does not contact Argo CD or NATS.
func New(o Options) (*Agent, error) {
	if o.AgentID == "" {
		return nil, errors.New("argocd agent: agent id is required (--agent-id)")
	}
	if o.Client == nil {
		return nil, errors.New("argocd agent: no Argo CD client")
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.UIURL == "" {
		o.UIURL = o.Client.URL()
	}
	o.UIURL = strings.TrimRight(o.UIURL, "/")
	if o.Namespace == "" {
		o.Namespace = "argocd"
	}
	if o.SyncConcurrency <= 0 {
		o.SyncConcurrency = 8
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 200 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
	if o.LeaderRetry <= 0 {
		o.LeaderRetry = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Log = o.Log.With("agent", o.AgentID, "replica", o.Replica)
	a := &Agent{o: o, argo: o.Client}
	a.problem.Store("")
	return a, nil
}

// IsLeader reports whether this replica currently writes app status.
func (a *Agent) IsLeader() bool { return a.leader.Load() }

// Writes is the number of prflow-apps writes this replica made (0 for a follower).
func (a *Agent) Writes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.writer == nil {
		return a.pastWrites
	}
	return a.pastWrites + a.writer.Writes()
}

// Served is how many requests this replica handled.
func (a *Agent) Served() int64 { return a.served.Load() }

// Connects is how many times the watch stream was (re)connected.
func (a *Agent) Connects() int64 { return a.connects.Load() }

// Run checks that Argo CD answers and accepts the token (a clear error otherwise), registers
// the agent, serves requests and, while it holds the lease, keeps prflow-apps up to date. It
// returns when ctx ends; a clean stop hands the lease over at once.
func (a *Agent) Run(ctx context.Context, conn *queue.Conn) error {
	if err := a.argo.Ping(ctx); err != nil {
		return fmt.Errorf("agent %s: %w", a.o.AgentID, err)
	}
	a.healthy.Store(true)
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		return err
	}
	a.started = time.Now().UTC()
	wait, err := agent.Serve(ctx, conn.NC, a.o.AgentID, a, agent.ServeOptions{Log: a.o.Log})
	if err != nil {
		return err
	}
	hb, err := agent.Heartbeat(ctx, b.Agents, a.o.Heartbeat, a.registration, a.o.Log)
	if err != nil {
		return err
	}
	a.o.Log.Info("agent started", "argocd", a.argo.URL())
	a.leadLoop(ctx, b)
	wait()
	<-hb
	return nil
}

func (a *Agent) registration() agent.Registration {
	p, _ := a.problem.Load().(string)
	return agent.Registration{Agent: a.o.AgentID, Replica: a.o.Replica, Kind: "argocd", Target: a.argo.URL(),
		Version: a.o.Version, Leader: a.leader.Load(), Apps: int(a.apps.Load()), Healthy: a.healthy.Load(),
		Problem: p, Started: a.started}
}

func (a *Agent) setProblem(err error) {
	if err == nil {
		a.healthy.Store(true)
		a.problem.Store("")
		return
	}
	a.healthy.Store(false)
	a.problem.Store(err.Error())
}

// leadLoop takes the lease when it is free and writes status while holding it.
func (a *Agent) leadLoop(ctx context.Context, b *queue.Buckets) {
	leases := &queue.Leases{KV: b.Locks}
	key := queue.LeaseKey("agent", a.o.AgentID)
	for ctx.Err() == nil {
		ls, err := leases.TryAcquire(ctx, key, a.o.Replica)
		if err == nil {
			a.o.Log.Info("agent is the leader: writing app status")
			lctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-ls.Lost():
					cancel()
				case <-lctx.Done():
				}
			}()
			a.leader.Store(true)
			a.lead(lctx, b)
			a.leader.Store(false)
			cancel()
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = ls.Release(rctx)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			a.o.Log.Warn("agent lost the lease: another replica writes app status now")
		} else if !errors.Is(err, queue.ErrLeaseHeld) && ctx.Err() == nil {
			a.o.Log.Warn("agent: lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.o.LeaderRetry):
		}
	}
}
