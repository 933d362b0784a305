package argocd

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
)

// lead keeps prflow-apps in step with Argo CD until ctx ends: watch stream with reconnect and
// backoff, and a full re-list after every (re)connect so that nothing changed (or deleted)
// while the stream was down is missed.
func (a *Agent) lead(ctx context.Context, b *queue.Buckets) {
	w := agent.NewWriter(b.Apps, a.o.AgentID, a.o.Log)
	if err := w.Seed(ctx); err != nil && ctx.Err() == nil {
		a.o.Log.Warn("agent: could not read existing app records; unchanged apps will be rewritten", "err", err)
	}
	a.mu.Lock()
	a.writer = w
	a.mu.Unlock()
	defer a.known.Clear() // what the watch saw is not followed any more
	defer func() {
		a.mu.Lock()
		a.pastWrites += w.Writes()
		a.writer = nil
		a.mu.Unlock()
	}()

	// The inventory key (what FetchLinkedApps waits on) is rewritten at most every 200ms.
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		swept := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := w.FlushInventory(ctx); err != nil && ctx.Err() == nil {
					a.o.Log.Warn("agent: inventory", "err", err)
				}
				// Tombstones of deleted apps end after TombstoneTTL.
				if time.Since(swept) >= time.Minute {
					swept = time.Now()
					if _, err := w.Sweep(ctx, agent.TombstoneTTL); err != nil && ctx.Err() == nil {
						a.o.Log.Warn("agent: removing old tombstones", "err", err)
					}
				}
			}
		}
	}()
	bg.Add(1)
	go func() {
		defer bg.Done()
		a.win.loop(ctx, w)
	}()
	defer bg.Wait()

	attempt := 0 // reconnects since the stream last worked for a while
	for ctx.Err() == nil {
		opened := time.Time{}
		events := 0
		var relist sync.WaitGroup
		sctx, cancel := context.WithCancel(ctx)
		drops := newDropDetector(a.dropThreshold())
		err := a.argo.Watch(sctx, func() {
			opened = time.Now()
			a.connects.Add(1)
			relist.Add(1)
			go func() {
				defer relist.Done()
				if a.relist(sctx, w, drops) {
					a.resyncLoop(sctx, w, drops)
				}
			}()
		}, func(ev WatchEvent) {
			events++
			arrived := time.Now()
			wrote := a.apply(sctx, w, ev)
			drops.observe(arrived, time.Now(), wrote || ev.Type != "ADDED")
		})
		cancel()
		relist.Wait()
		if ctx.Err() != nil {
			return
		}
		a.setProblem(err)
		// The view is not current from now on: say so in the registration at once. The
		// records themselves are marked when the outage is more than a dropped stream (the
		// token was refused, or reconnecting failed), so a stream a proxy cut does not
		// rewrite every record twice.
		since := a.markStale("Argo CD watch stream: " + err.Error())
		if errors.Is(err, agent.ErrUnauthorized) {
			a.o.Log.Error("agent: Argo CD refused the agent's token; app status is stale until it is accepted again", "err", err)
		}
		if opened.IsZero() || errors.Is(err, agent.ErrUnauthorized) {
			a.markRecordsStale(ctx, w, since, err)
		}
		if !opened.IsZero() && (events > 0 || time.Since(opened) > 10*time.Second) {
			attempt = 0 // it worked for a while: start over
		}
		attempt++
		d := scm.Backoff(a.o.MinBackoff, a.o.MaxBackoff, attempt)
		a.o.Log.Warn("agent: Argo CD watch stream ended; reconnecting", "err", err, "in", d.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// dropThreshold is how many back-to-back events make the agent suspect drops (0: never).
func (a *Agent) dropThreshold() int {
	if a.o.WatchBuffer <= 0 {
		return 0
	}
	return max(a.o.WatchBuffer/2, 1)
}

// markRecordsStale marks every record stale, once per outage.
func (a *Agent) markRecordsStale(ctx context.Context, w *agent.Writer, since time.Time, cause error) {
	n, err := w.MarkStale(ctx, agent.Staleness{Since: since, Reason: cause.Error()})
	if err != nil && ctx.Err() == nil {
		a.o.Log.Warn("agent: marking app records stale", "err", err)
	}
	if n > 0 {
		a.o.Log.Warn("agent: marked app records stale: Argo CD cannot be seen", "records", n, "since", since, "err", cause)
	}
}

// relist writes every app Argo CD lists and deletes the records of apps it no longer has,
// after the stream (re)connected. It retries while the stream is up, since a missed deletion
// would otherwise wait for the next reconnect. It reports whether it finished.
func (a *Agent) relist(ctx context.Context, w *agent.Writer, drops *dropDetector) bool {
	wait := a.o.MinBackoff
	for ctx.Err() == nil {
		drops.epoch.Add(1)
		_, apps, err := a.listAndWrite(ctx, w, "")
		if err == nil {
			a.markFresh()
			a.resynced(0)
			a.o.Log.Debug("agent: re-listed applications", "apps", apps)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		a.setProblem(err)
		a.markRecordsStale(ctx, w, a.markStale("listing applications: "+err.Error()), err)
		if errors.Is(err, agent.ErrUnauthorized) {
			a.o.Log.Error("agent: Argo CD refused the agent's token while listing applications", "err", err)
		} else {
			a.o.Log.Warn("agent: listing applications failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(wait*2, a.o.MaxBackoff)
	}
	return false
}

// apply writes one event's app; it reports whether the record changed.
func (a *Agent) apply(ctx context.Context, w *agent.Writer, ev WatchEvent) bool {
	if a.isPreviewApp(&ev.Application) {
		return false // a diff preview's temporary app (diffapp.go), not an app of the environment
	}
	a.remember(&ev.Application, ev.Type == "DELETED") // the diff preview's cache key (diff.go)
	st := a.status(&ev.Application)
	var err error
	wrote := true
	if ev.Type == "DELETED" {
		a.win.forget(st.Ref())
		err = w.Delete(ctx, st.Ref(), st.ResourceVersion, "Argo CD's watch stream reported it DELETED")
	} else {
		wrote, err = a.win.write(ctx, w, st)
	}
	if err != nil && ctx.Err() == nil {
		a.o.Log.Warn("agent: write status", "app", st.Ref(), "event", ev.Type, "err", err)
	}
	return wrote
}

// status turns an Argo CD Application into prflow's record.
func (a *Agent) status(app *Application) agent.AppStatus {
	m, sp, s := &app.Metadata, &app.Spec, &app.Status
	st := agent.AppStatus{
		V: agent.Version, Agent: a.o.AgentID, Name: m.Name, Project: sp.Project,
		Namespace: sp.Destination.Namespace, ClusterServer: sp.Destination.Server,
		Labels: m.Labels, Sync: s.Sync.Status, Revision: s.Sync.Revision,
		Health: s.Health.Status, HealthMessage: s.Health.Message, ResourceVersion: m.ResourceVersion,
		UID: m.UID,
	}
	if m.CreationTimestamp != nil {
		st.CreatedAt = m.CreationTimestamp.UTC()
	}
	ctrlNS := firstNonEmpty(s.ControllerNamespace, a.o.Namespace)
	if m.Namespace != "" && m.Namespace != ctrlNS {
		st.AppNamespace = m.Namespace
	}
	st.Cluster = sp.Destination.Name
	if st.Cluster == "" {
		if sp.Destination.Server == "https://kubernetes.default.svc" {
			st.Cluster = "in-cluster"
		} else {
			st.Cluster = sp.Destination.Server
		}
	}
	for _, o := range m.OwnerReferences {
		if o.Kind == "ApplicationSet" {
			st.ApplicationSet = o.Name
		}
	}
	src := sp.Source
	if src == nil && len(sp.Sources) > 0 {
		src = &sp.Sources[0]
	}
	if src != nil {
		st.Source = agent.Source{RepoURL: src.RepoURL, Path: src.Path, TargetRevision: src.TargetRevision, Chart: src.Chart}
	}
	if p := sp.SyncPolicy; p != nil && p.Automated != nil && (p.Automated.Enabled == nil || *p.Automated.Enabled) {
		st.AutoSync = true
	}
	st.URL = a.o.UIURL + "/applications/" + firstNonEmpty(m.Namespace, ctrlNS) + "/" + m.Name
	if st.Revision == "" && len(s.Sync.Revisions) > 0 {
		st.Revision = s.Sync.Revisions[0]
	}
	if n := len(s.History); n > 0 {
		st.SyncedRevision = firstNonEmpty(s.History[n-1].Revision, first(s.History[n-1].Revisions))
	}
	if t := s.Health.LastTransitionTime; t != nil {
		st.HealthSince = t.UTC()
	}
	st.Operation = operation(app)
	var conds []string
	for _, c := range s.Conditions {
		conds = append(conds, c.Type+": "+c.Message)
	}
	st.Message = strings.Join(conds, "; ")
	st.Resources.Total = len(s.Resources)
	for _, r := range s.Resources {
		if r.Status == agent.SyncOutOfSync {
			st.Resources.OutOfSync++
		}
		if r.RequiresPruning {
			st.Resources.RequiresPruning++
		}
		if r.Health != nil && r.Health.Status != "" {
			if st.Resources.Health == nil {
				st.Resources.Health = map[string]int{}
			}
			st.Resources.Health[r.Health.Status]++
		}
	}
	if st.HealthMessage == "" {
		st.HealthMessage = resourceHealthMessage(app)
	}
	return st
}

// resourceHealthMessage is the reason for the app's health when the app itself gives none
// (Argo CD v3 keeps it on the resources): the message of the first resource with the app's
// own health status, else of the first non-healthy one, as "Kind/name: message".
func resourceHealthMessage(app *Application) string {
	pick := ""
	for pass := 0; pass < 2 && pick == ""; pass++ {
		for _, r := range app.Status.Resources {
			h := r.Health
			if h == nil || h.Message == "" || h.Status == agent.HealthHealthy {
				continue
			}
			if pass == 0 && h.Status != app.Status.Health.Status {
				continue
			}
			pick = r.Kind + "/" + r.Name + ": " + h.Message
			if r.Namespace != "" {
				pick = r.Kind + "/" + r.Namespace + "/" + r.Name + ": " + h.Message
			}
			break
		}
	}
	return pick
}

// operation is the app's current operation: app.operation while one is requested or running
// (operationState is null until the controller picks it up: phase Pending), else the last
// finished one from status.operationState.
func operation(app *Application) *agent.Operation {
	state := app.Status.OperationState
	var op *Operation
	out := &agent.Operation{}
	switch {
	case app.Operation != nil && (state == nil || finished(state.Phase)):
		// Requested, not picked up yet (Argo CD nulls operationState when it sets a new
		// operation; a finished state next to a new operation is the previous one).
		op = app.Operation
		out.Phase = agent.PhasePending
	case state != nil:
		op = &state.Operation
		out.Phase, out.Message, out.RetryCount = state.Phase, state.Message, state.RetryCount
		if state.StartedAt != nil {
			out.StartedAt = state.StartedAt.UTC()
		}
		if state.FinishedAt != nil {
			out.FinishedAt = state.FinishedAt.UTC()
		}
		if state.SyncResult != nil {
			out.SyncedRevision = firstNonEmpty(state.SyncResult.Revision, first(state.SyncResult.Revisions))
		}
	default:
		return nil
	}
	out.InitiatedBy, out.Automated = op.InitiatedBy.Username, op.InitiatedBy.Automated
	if op.Sync != nil {
		out.Revision = firstNonEmpty(op.Sync.Revision, first(op.Sync.Revisions))
		out.DryRun = op.Sync.DryRun
	}
	for _, i := range op.Info {
		switch i.Name {
		case agent.InfoRun:
			out.RunID = i.Value
		case agent.InfoStep:
			out.Step = i.Value
		}
	}
	return out
}

func firstNonEmpty(v ...string) string { return cmp.Or(v...) }

func first(l []string) string {
	if len(l) > 0 {
		return l[0]
	}
	return ""
}

// initiator describes who started an operation, for messages.
func initiator(op *Operation) string {
	switch {
	case op == nil:
		return "someone"
	case op.InitiatedBy.Automated:
		return "automated sync"
	case op.InitiatedBy.Username != "":
		return "user " + op.InitiatedBy.Username
	}
	return "someone"
}

func tagged(op *Operation, run, step string) bool {
	if op == nil || run == "" {
		return false
	}
	gotRun, gotStep := "", ""
	for _, i := range op.Info {
		switch i.Name {
		case agent.InfoRun:
			gotRun = i.Value
		case agent.InfoStep:
			gotStep = i.Value
		}
	}
	return gotRun == run && (step == "" || gotStep == step)
}

func finished(phase string) bool {
	return phase == agent.PhaseSucceeded || phase == agent.PhaseFailed || phase == agent.PhaseError
}
