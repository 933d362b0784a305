// Package flux is prflow's GitOps agent for Flux: it watches Flux's Kustomization and
// HelmRelease objects and their sources (GitRepository, OCIRepository) through the Kubernetes
// API with client-go informers, keeps one status record per app in prflow-apps (the same
// records as the Argo CD agent writes), and serves sync/apps/get requests: a sync is a
// reconcile request (the reconcile.fluxcd.io/requestedAt annotation, on the source and then on
// the app), never a write of the spec. Replicas elect their status writer with the Argo CD
// agent's leader lease.
package flux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/queue"
)

// Options configure an Agent.
type Options struct {
	AgentID string
	Replica string // default host-pid
	// Config reaches the Kubernetes API (rest.InClusterConfig, or a kubeconfig).
	Config *rest.Config
	// Namespace is Flux's own namespace (default flux-system): apps there are named "name",
	// apps elsewhere "namespace/name". The agent watches all namespaces.
	Namespace string
	// LeaderRetry, LeaseTTL and Heartbeat: as for the Argo CD agent (1s, 6s, 2s).
	LeaderRetry, LeaseTTL, Heartbeat time.Duration
	// Tick is how often the leader re-evaluates records that age (stuck requests) and checks
	// that the API answers (default 1s).
	Tick time.Duration
	// Resync is the informers' resync period (default 5m).
	Resync time.Duration
	// StuckAfter: a reconcile request not handled for this long marks the app's record stale
	// (its controller is not running), default 2m.
	StuckAfter time.Duration
	// SourceWait bounds how long a sync waits for the source to fetch before asking the app to
	// reconcile (default 30s).
	SourceWait time.Duration
	Version    string
	Log        *slog.Logger
}

// Agent bridges one cluster's Flux and NATS.
type Agent struct {
	o   Options
	dyn dynamic.Interface

	started    time.Time
	leader     atomic.Bool
	healthy    atomic.Bool
	stale      atomic.Bool
	staleSince atomic.Value // time.Time
	problem    atomic.Value // string
	apps       atomic.Int64
	kick       chan struct{}
	kinds      []schema.GroupVersionResource // the kinds installed in the cluster (Run)

	mu     sync.Mutex
	writer *agent.Writer
}

// New checks o; it does not contact the cluster or NATS.
func New(o Options) (*Agent, error) {
	if o.AgentID == "" {
		return nil, errors.New("flux agent: agent id is required (--agent-id)")
	}
	if o.Config == nil {
		return nil, errors.New("flux agent: no Kubernetes API config (--kubeconfig, or run in a cluster)")
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.Namespace == "" {
		o.Namespace = "flux-system"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.LeaderRetry, time.Second)
	def(&o.LeaseTTL, 6*time.Second)
	def(&o.Heartbeat, 2*time.Second)
	def(&o.Tick, time.Second)
	def(&o.Resync, 5*time.Minute)
	def(&o.StuckAfter, 2*time.Minute)
	def(&o.SourceWait, 30*time.Second)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Log = o.Log.With("agent", o.AgentID, "replica", o.Replica, "engine", "flux")
	dyn, err := dynamic.NewForConfig(o.Config)
	if err != nil {
		return nil, fmt.Errorf("flux agent: Kubernetes client: %w", err)
	}
	a := &Agent{o: o, dyn: dyn, kick: make(chan struct{}, 1)}
	a.problem.Store("")
	a.staleSince.Store(time.Time{})
	return a, nil
}

// IsLeader reports whether this replica writes app status.
func (a *Agent) IsLeader() bool { return a.leader.Load() }

// discover lists each Flux kind once: a kind whose CRD is not installed is left out (the
// helm-controller is optional); without Kustomizations the agent refuses to start.
func (a *Agent) discover(ctx context.Context) error {
	a.kinds = nil
	for _, gvr := range []schema.GroupVersionResource{GitRepositories, OCIRepositories, Kustomizations, HelmReleases} {
		_, err := a.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		switch {
		case err == nil:
			a.kinds = append(a.kinds, gvr)
		case gvr == Kustomizations:
			return fmt.Errorf("list %s (%s/%s) at %s: %w (are Flux's CRDs installed, and may this agent list them?)",
				gvr.Resource, gvr.Group, gvr.Version, a.o.Config.Host, err)
		default:
			a.o.Log.Info("Flux kind not served: not watching it", "resource", gvr.Resource, "group", gvr.Group, "err", err)
		}
	}
	return nil
}

// Run checks that the API answers and serves Kustomizations, registers the agent, serves
// requests and, while it holds the lease, keeps prflow-apps up to date. It returns when ctx ends.
func (a *Agent) Run(ctx context.Context, conn *queue.Conn) error {
	if err := a.discover(ctx); err != nil {
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
	lease := argocd.NewLeaderLease(b.Locks, queue.LeaseKey("agent", a.o.AgentID), a.o.Replica, a.o.LeaseTTL)
	hb, err := agent.HeartbeatKick(ctx, b.Agents, a.o.Heartbeat, a.registration, a.o.Log, a.kick)
	if err != nil {
		return err
	}
	a.o.Log.Info("flux agent started", "api", a.o.Config.Host)
	for ctx.Err() == nil {
		rev, err := lease.TryAcquire(ctx)
		if err == nil {
			a.leader.Store(true)
			a.markStale("listing Flux objects after taking the lead")
			lctx, cancel := context.WithCancel(ctx)
			done := make(chan bool, 1)
			go func() {
				_, lost := lease.Hold(lctx, rev)
				cancel()
				done <- lost
			}()
			a.lead(lctx, b)
			cancel()
			lost := <-done
			a.leader.Store(false)
			a.stale.Store(false)
			a.reregister()
			if !lost {
				lease.Release(rev)
			}
			if ctx.Err() != nil {
				break
			}
			a.o.Log.Warn("flux agent lost the lease: another replica writes app status now")
		} else if !errors.Is(err, argocd.ErrLeaseHeld) && ctx.Err() == nil {
			a.o.Log.Warn("flux agent: lease", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.o.LeaderRetry):
		}
	}
	wait()
	<-hb
	return nil
}

func (a *Agent) registration() agent.Registration {
	p, _ := a.problem.Load().(string)
	r := agent.Registration{Agent: a.o.AgentID, Replica: a.o.Replica, Kind: "flux", Target: a.o.Config.Host,
		Version: a.o.Version, Leader: a.leader.Load(), Apps: int(a.apps.Load()), Healthy: a.healthy.Load(),
		Problem: p, Started: a.started}
	if r.Leader && a.stale.Load() {
		r.Stale = true
		r.StaleSince, _ = a.staleSince.Load().(time.Time)
	}
	return r
}

func (a *Agent) reregister() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) markStale(reason string) time.Time {
	if !a.stale.Swap(true) {
		a.staleSince.Store(time.Now().UTC())
	}
	a.problem.Store(reason)
	a.reregister()
	since, _ := a.staleSince.Load().(time.Time)
	return since
}

func (a *Agent) markFresh() {
	a.stale.Store(false)
	a.staleSince.Store(time.Time{})
	a.healthy.Store(true)
	a.problem.Store("")
	a.reregister()
}

// lead watches the Flux kinds with informers and writes every app's record whenever anything
// changed, until ctx ends (the lease is lost or the agent stops).
func (a *Agent) lead(ctx context.Context, b *queue.Buckets) {
	w := agent.NewWriter(b.Apps, a.o.AgentID, a.o.Log)
	if err := w.Seed(ctx); err != nil {
		a.o.Log.Warn("flux agent: read existing records", "err", err)
	}
	a.mu.Lock()
	a.writer = w
	a.mu.Unlock()

	dirty := make(chan struct{}, 1)
	poke := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	var watchErr atomic.Value // string: the last watch failure, "" once the API answers again
	watchErr.Store("")
	f := dynamicinformer.NewDynamicSharedInformerFactory(a.dyn, a.o.Resync)
	informers := map[schema.GroupVersionResource]cache.SharedIndexInformer{}
	for _, gvr := range a.kinds {
		inf := f.ForResource(gvr).Informer()
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			watchErr.Store(fmt.Sprintf("watch %s at %s: %v", gvr.Resource, a.o.Config.Host, err))
			poke()
		})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { poke() },
			UpdateFunc: func(any, any) { poke() },
			DeleteFunc: func(any) { poke() },
		})
		informers[gvr] = inf
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	synced := false
	tick := time.NewTicker(a.o.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.mu.Lock()
			a.writer = nil
			a.mu.Unlock()
			return
		case <-dirty:
		case <-tick.C:
		}
		if !synced {
			synced = true
			for _, inf := range informers {
				synced = synced && inf.HasSynced()
			}
			if !synced {
				continue
			}
		}
		// A watch error is only a problem while the API does not answer: the reflector
		// re-lists by itself once it does.
		if msg, _ := watchErr.Load().(string); msg != "" {
			if _, err := a.dyn.Resource(Kustomizations).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				if ctx.Err() != nil {
					continue
				}
				since := a.markStale(msg)
				a.healthy.Store(false)
				if _, err := w.MarkStale(ctx, agent.Staleness{Since: since, Reason: msg}); err != nil {
					a.o.Log.Warn("flux agent: mark records stale", "err", err)
				}
				continue
			}
			watchErr.Store("")
		}
		if err := a.writeAll(ctx, w, informers); err != nil {
			a.o.Log.Warn("flux agent: write records", "err", err)
			continue
		}
		if a.stale.Load() {
			a.markFresh()
		}
	}
}

// writeAll writes the record of every app in the informers' caches and tombstones the apps
// that are gone.
func (a *Agent) writeAll(ctx context.Context, w *agent.Writer, informers map[schema.GroupVersionResource]cache.SharedIndexInformer) error {
	get := func(gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
		inf := informers[gvr]
		if inf == nil {
			return nil
		}
		o, ok, _ := inf.GetStore().GetByKey(ns + "/" + name)
		if !ok {
			return nil
		}
		u, _ := o.(*unstructured.Unstructured)
		return u
	}
	now := time.Now()
	present := map[string]bool{}
	var first error
	for _, gvr := range []schema.GroupVersionResource{Kustomizations, HelmReleases} {
		inf := informers[gvr]
		if inf == nil {
			continue
		}
		for _, o := range inf.GetStore().List() {
			app, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			var src *unstructured.Unstructured
			if sg, ns, name, ok := sourceRef(app); ok {
				src = get(sg, ns, name)
			}
			st := a.status(app, src, now)
			present[st.Ref()] = true
			if _, err := w.Put(ctx, st); err != nil && first == nil {
				first = err
			}
		}
	}
	a.apps.Store(int64(len(present)))
	if first != nil {
		return first
	}
	if _, err := w.RetainCount(ctx, present, "", "deleted from the cluster"); err != nil {
		return err
	}
	if _, err := w.Sweep(ctx, agent.TombstoneTTL); err != nil {
		return err
	}
	return w.FlushInventory(ctx)
}
