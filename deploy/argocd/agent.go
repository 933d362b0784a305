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
	// (default 200ms and 3s; the wait doubles per failure, with jitter), so the view is
	// back within seconds of Argo CD coming back.
	MinBackoff, MaxBackoff time.Duration
	// LeaderRetry is how often a replica that is not the leader tries to take the lease
	// (default 1s). A leader that stops cleanly hands over at once; one that dies holds the
	// lease until it expires (LeaseTTL).
	LeaderRetry time.Duration
	// LeaseTTL is how long the leader lease lives without renewal (default 6s; renewed every
	// third of it): the longest a crashed leader blocks failover.
	LeaseTTL time.Duration
	// Heartbeat is how often the registration in prflow-agents is renewed (default 2s); a
	// registration not renewed for three heartbeats counts as expired.
	Heartbeat time.Duration
	// AppSetRefresh says how to make Argo CD re-read git for an ApplicationSet after a
	// merge (default: the refresh annotation through Argo CD's API).
	AppSetRefresh AppSetRefreshOptions
	// SyncWindowRefresh is how often each AppProject is read again for edits to its sync
	// windows (default 1m); SyncWindowTick is how often the agent looks for windows that
	// opened or closed and for apps whose windows it has not read yet (default 5s).
	SyncWindowRefresh, SyncWindowTick time.Duration
	// Resync is how often the leader re-lists every app while the watch stream is up (default
	// 5m; each wait is jittered down by up to a fifth), like an informer's resync: Argo CD's
	// stream drops events silently when its buffer is full, so no record stays wrong longer
	// than this. Only records that differ from the list are written.
	Resync time.Duration
	// WatchBuffer is Argo CD's watch buffer (its ARGOCD_WATCH_API_BUFFER_SIZE, default 1000).
	// When the agent receives half that many events back to back, Argo CD's buffer may have
	// overflowed, and the agent re-lists as soon as the stream calms down instead of waiting
	// for Resync. Negative: no early re-list.
	WatchBuffer int
	// Preview lets diff previews render changed and new app specs through temporary apps
	// (diffapp.go; off by default).
	Preview PreviewOptions
	// Now is the clock sync windows are evaluated with (default time.Now; tests move it).
	Now     func() time.Time
	Version string
	Log     *slog.Logger
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
	// stale: the records are not current (leader only); staleSince is when that began.
	stale      atomic.Bool
	staleSince atomic.Value  // time.Time
	kick       chan struct{} // re-register now

	win *windows // sync windows of the apps

	mu         sync.Mutex
	writer     *agent.Writer // set while leader
	pastWrites int64         // writes of earlier leaderships
	connects   atomic.Int64  // watch stream connections
	served     atomic.Int64  // requests handled

	// Re-lists (resync.go).
	resyncs, earlyResyncs, failedResyncs, repaired atomic.Int64
	lastResync                                     atomic.Value // time.Time

	// updating serialises this replica's updates of one app (app ref → *sync.Mutex);
	// updateLeases (prflow-locks) serialise them across replicas. Set by Run.
	updating     sync.Map
	updateLeases *queue.Leases

	// known is the apps as the watch last reported them (app ref → *Application, leader
	// only), diffs the previews already answered (diff.go).
	known       sync.Map
	diffs       diffCache
	setPreviews setCache
}

// New checks opts; it does not contact Argo CD or NATS.
func New(o Options) (*Agent, error) {
	if o.AgentID == "" {
		return nil, errors.New("argocd agent: agent id is required (--agent-id)")
	}
	if o.Client == nil {
		return nil, errors.New("argocd agent: no Argo CD client")
	}
	if err := o.AppSetRefresh.check(); err != nil {
		return nil, err
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
	o.Preview.defaults()
	if o.MinBackoff <= 0 {
		o.MinBackoff = 200 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(3*time.Second, o.MinBackoff)
	}
	if o.LeaderRetry <= 0 {
		o.LeaderRetry = time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 6 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 2 * time.Second
	}
	if o.SyncWindowRefresh <= 0 {
		o.SyncWindowRefresh = time.Minute
	}
	if o.SyncWindowTick <= 0 {
		o.SyncWindowTick = 5 * time.Second
	}
	if o.Resync <= 0 {
		o.Resync = 5 * time.Minute
	}
	if o.WatchBuffer == 0 {
		o.WatchBuffer = 1000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Log = o.Log.With("agent", o.AgentID, "replica", o.Replica)
	a := &Agent{o: o, argo: o.Client, kick: make(chan struct{}, 1)}
	a.win = newWindows(a)
	a.problem.Store("")
	a.staleSince.Store(time.Time{})
	return a, nil
}

func (a *Agent) now() time.Time { return a.o.Now() }

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
	a.updateLeases = &queue.Leases{KV: b.Locks}
	wait, err := agent.Serve(ctx, conn.NC, a.o.AgentID, a, agent.ServeOptions{Log: a.o.Log})
	if err != nil {
		return err
	}
	// Try the lease before the first heartbeat, so the registration says who leads (and
	// that its records are not confirmed yet) from the start.
	lease := &leaderLease{kv: b.Locks, key: queue.LeaseKey("agent", a.o.AgentID), holder: a.o.Replica, ttl: a.o.LeaseTTL}
	rev, lerr := lease.tryAcquire(ctx)
	if lerr == nil {
		a.leader.Store(true)
		a.markStale("re-listing applications after taking the lead")
	}
	hb, err := agent.HeartbeatKick(ctx, b.Agents, a.o.Heartbeat, a.registration, a.o.Log, a.kick)
	if err != nil {
		if lerr == nil {
			lease.release(rev)
		}
		return err
	}
	a.o.Log.Info("agent started", "argocd", a.argo.URL())
	if a.o.Preview.Enabled {
		go func() {
			if _, err := a.sweepPreviews(ctx); err != nil && ctx.Err() == nil {
				a.o.Log.Warn("agent: looking for leftover preview apps failed", "err", err)
			}
		}()
	}
	a.leadLoop(ctx, b, lease, rev, lerr == nil)
	wait()
	<-hb
	return nil
}

func (a *Agent) registration() agent.Registration {
	p, _ := a.problem.Load().(string)
	r := agent.Registration{Agent: a.o.AgentID, Replica: a.o.Replica, Kind: "argocd", Target: a.argo.URL(),
		Version: a.o.Version, Leader: a.leader.Load(), Apps: int(a.apps.Load()), Healthy: a.healthy.Load(),
		Problem: p, Started: a.started}
	if r.Leader && a.stale.Load() {
		r.Stale = true
		r.StaleSince, _ = a.staleSince.Load().(time.Time)
	}
	if r.Leader {
		rs := a.Resyncs()
		r.LastResync, r.Resyncs, r.Repaired = rs.Last, rs.Resyncs, rs.Repaired
	}
	return r
}

// reregister makes the heartbeat write the registration now.
func (a *Agent) reregister() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// setProblem records whether this replica reaches Argo CD.
func (a *Agent) setProblem(err error) {
	if err == nil {
		changed := !a.healthy.Swap(true)
		if p, _ := a.problem.Load().(string); p != "" {
			changed = true
		}
		a.problem.Store("")
		if changed {
			a.reregister()
		}
		return
	}
	a.healthy.Store(false)
	a.problem.Store(err.Error())
	a.reregister()
}

// markStale says the records are not current any more (first time: since now).
func (a *Agent) markStale(reason string) time.Time {
	if !a.stale.Swap(true) {
		a.staleSince.Store(time.Now().UTC())
	}
	if reason != "" {
		a.problem.Store(reason)
	}
	a.reregister()
	since, _ := a.staleSince.Load().(time.Time)
	return since
}

// markFresh says the records are current again.
func (a *Agent) markFresh() {
	a.stale.Store(false)
	a.staleSince.Store(time.Time{})
	a.setProblem(nil)
	a.reregister()
}

// leadLoop takes the lease when it is free and writes status while holding it. held says the
// lease (revision rev) was taken before the loop.
func (a *Agent) leadLoop(ctx context.Context, b *queue.Buckets, lease *leaderLease, rev uint64, held bool) {
	for ctx.Err() == nil {
		if !held {
			var err error
			rev, err = lease.tryAcquire(ctx)
			held = err == nil
			if err != nil && !errors.Is(err, errLeaseHeld) && ctx.Err() == nil {
				a.o.Log.Warn("agent: lease", "err", err)
			}
		}
		if held {
			a.o.Log.Info("agent is the leader: writing app status")
			if !a.leader.Swap(true) {
				a.markStale("re-listing applications after taking the lead")
			}
			lctx, cancel := context.WithCancel(ctx)
			var lost bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				rev, lost = lease.hold(lctx, rev)
				cancel()
			}()
			a.lead(lctx, b)
			cancel()
			<-done
			a.leader.Store(false)
			a.stale.Store(false)
			a.reregister()
			if !lost {
				lease.release(rev)
			}
			held = false
			if ctx.Err() != nil {
				return
			}
			a.o.Log.Warn("agent lost the lease: another replica writes app status now")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.o.LeaderRetry):
		}
	}
}
