package argocd

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// Sync implements agent.Handler: it syncs every requested app through Argo CD (a bounded
// number at once), tagging each operation with the run and step.
func (a *Agent) Sync(ctx context.Context, req agent.SyncRequest) ([]agent.SyncResult, error) {
	a.served.Add(1)
	out := make([]agent.SyncResult, len(req.Apps))
	sem := make(chan struct{}, a.o.SyncConcurrency)
	var wg sync.WaitGroup
	for i, ref := range req.Apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = a.syncOne(ctx, req, ref)
		}()
	}
	wg.Wait()
	return out, nil
}

func (a *Agent) syncOne(ctx context.Context, req agent.SyncRequest, ref string) agent.SyncResult {
	res := agent.SyncResult{App: ref}
	fail := func(err error) agent.SyncResult {
		res.Error = agent.AsError(err)
		if res.Error.App == "" {
			res.Error.App = ref
		}
		return res
	}
	name, ns := a.split(ref)
	app, err := a.argo.Get(ctx, name, ns, req.Refresh)
	if err != nil {
		return fail(err)
	}
	if op := pending(app); op != nil {
		if tagged(op, req.RunID, req.Step) {
			res.AlreadyRunning, res.Revision, res.UID = true, opRevision(op), app.Metadata.UID
			return res
		}
		return fail(busy(app, op, ref))
	}
	// Argo CD treats every API sync as manual, so a window with manualSync would let any
	// request through: only a request that asks for it (Manual) may pass one.
	if err := a.win.check(ctx, app, ref, req.Manual); err != nil {
		return fail(err)
	}
	body := SyncBody{Name: name, Revision: req.Revision, DryRun: req.DryRun, Prune: req.Prune, AppNamespace: ns}
	if req.ApplyOnly {
		body.Strategy = &SyncStrategy{Apply: &Force{Force: req.ForceApply}}
	} else {
		body.Strategy = &SyncStrategy{Hook: &Force{Force: req.ForceApply}}
	}
	if r := req.Retry; r != nil {
		body.RetryStrategy = &RetryStrategy{Limit: r.Limit}
		if b := r.Backoff; b != nil {
			body.RetryStrategy.Backoff = &struct {
				Duration    string `json:"duration,omitempty"`
				Factor      *int64 `json:"factor,omitempty"`
				MaxDuration string `json:"maxDuration,omitempty"`
			}{Duration: b.Duration, MaxDuration: b.MaxDuration}
			if b.Factor > 0 {
				f := b.Factor
				body.RetryStrategy.Backoff.Factor = &f
			}
		}
	}
	if len(req.SyncOptions) > 0 {
		var own []string
		if app.Spec.SyncPolicy != nil {
			own = app.Spec.SyncPolicy.SyncOptions
		}
		body.SyncOptions = &SyncOptions{Items: MergeSyncOptions(own, req.SyncOptions)}
	}
	if req.RunID != "" {
		body.Infos = append(body.Infos, Info{Name: agent.InfoRun, Value: req.RunID})
		if req.Step != "" {
			body.Infos = append(body.Infos, Info{Name: agent.InfoStep, Value: req.Step})
		}
	}
	res.At = time.Now().UTC()
	started, err := a.argo.Sync(ctx, body)
	if errors.Is(err, agent.ErrOperationInProgress) {
		// Someone started an operation between our read and our sync; maybe an earlier
		// delivery of this very request.
		cur, gerr := a.argo.Get(ctx, name, ns, "")
		if gerr == nil {
			if op := pending(cur); op != nil {
				if tagged(op, req.RunID, req.Step) {
					res.AlreadyRunning, res.Revision, res.UID = true, opRevision(op), cur.Metadata.UID
					return res
				}
				return fail(busy(cur, op, ref))
			}
		}
		return fail(err)
	}
	if err != nil {
		return fail(err)
	}
	if started.Operation != nil {
		res.Revision = opRevision(started.Operation)
	}
	res.UID = firstNonEmpty(started.Metadata.UID, app.Metadata.UID)
	a.o.Log.Info("sync started", "app", ref, "run", req.RunID, "step", req.Step, "revision", res.Revision)
	return res
}

// pending is the app's requested or running operation, nil when none.
func pending(app *Application) *Operation {
	if app.Operation != nil {
		return app.Operation
	}
	if s := app.Status.OperationState; s != nil && !finished(s.Phase) {
		return &s.Operation
	}
	return nil
}

func opRevision(op *Operation) string {
	if op.Sync == nil {
		return ""
	}
	return firstNonEmpty(op.Sync.Revision, first(op.Sync.Revisions))
}

func busy(app *Application, op *Operation, ref string) error {
	phase := agent.PhasePending
	if s := app.Status.OperationState; s != nil {
		phase = s.Phase
	}
	return &agent.Error{Code: agent.CodeOperationInProgress, App: ref,
		Message: fmt.Sprintf("another operation is already in progress (started by %s, phase %s)", initiator(op), phase)}
}

// MergeSyncOptions lays Argo CD sync option items over base by key (the part before "="):
// an item in over replaces base's item with the same key, others are kept in order.
func MergeSyncOptions(base, over []string) []string {
	key := func(s string) string { k, _, _ := strings.Cut(s, "="); return strings.ToLower(k) }
	idx := map[string]int{}
	var out []string
	for _, s := range slices.Concat(base, over) {
		if i, ok := idx[key(s)]; ok {
			out[i] = s
			continue
		}
		idx[key(s)] = len(out)
		out = append(out, s)
	}
	return out
}

// Apps implements agent.Handler: Argo CD filters by label selector, the agent by owner, name
// and project.
func (a *Agent) Apps(ctx context.Context, q agent.AppsQuery) ([]agent.AppStatus, error) {
	a.served.Add(1)
	var re *regexp.Regexp
	if q.NameRegex != "" {
		var err error
		if re, err = regexp.Compile(q.NameRegex); err != nil {
			return nil, agent.Errorf(agent.CodeInvalid, "nameRegex %q: %v", q.NameRegex, err)
		}
	}
	sel := q.Selector
	if len(q.Labels) > 0 {
		keys := make([]string, 0, len(q.Labels))
		for k := range q.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if sel != "" {
				sel += ","
			}
			sel += k + "=" + q.Labels[k]
		}
	}
	apps, _, err := a.argo.List(ctx, sel)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, n := range q.Names {
		names[n] = true
	}
	out := []agent.AppStatus{}
	for i := range apps {
		st := a.status(&apps[i])
		switch {
		case q.ApplicationSet != "" && st.ApplicationSet != q.ApplicationSet,
			re != nil && !re.MatchString(st.Name),
			len(names) > 0 && !names[st.Name] && !names[st.Ref()],
			q.Project != "" && st.Project != q.Project:
			continue
		}
		st.ObservedAt = time.Now().UTC()
		st.SyncWindows, _ = a.win.current(&st, a.now())
		out = append(out, st)
	}
	return out, nil
}

// Get implements agent.Handler.
func (a *Agent) Get(ctx context.Context, req agent.GetRequest) (*agent.AppStatus, error) {
	a.served.Add(1)
	switch req.Refresh {
	case agent.RefreshNone, agent.RefreshNormal, agent.RefreshHard:
	default:
		return nil, agent.Errorf(agent.CodeInvalid, "refresh %q: want normal or hard", req.Refresh)
	}
	name, ns := a.split(req.App)
	app, err := a.argo.Get(ctx, name, ns, req.Refresh)
	if err != nil {
		return nil, err
	}
	st := a.status(app)
	st.ObservedAt = time.Now().UTC()
	st.SyncWindows, _ = a.win.current(&st, a.now())
	return &st, nil
}

// split turns a ref into name and app namespace ("" for Argo CD's own namespace).
func (a *Agent) split(ref string) (string, string) {
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		if ns == a.o.Namespace {
			ns = ""
		}
		return name, ns
	}
	return ref, ""
}
