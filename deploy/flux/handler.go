package flux

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prflow/prflow/deploy/agent"
)

// apiErr turns a Kubernetes API error into an agent error naming the call.
func (a *Agent) apiErr(call string, err error) *agent.Error {
	switch {
	case apierrors.IsNotFound(err):
		return agent.Errorf(agent.CodeNotFound, "%s: %v", call, err)
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return agent.Errorf(agent.CodeUnauthorized, "%s: %v", call, err)
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err):
		return agent.Errorf(agent.CodeUnavailable, "%s: %v", call, err)
	case apierrors.IsConflict(err):
		return agent.Errorf(agent.CodeOperationInProgress, "%s: %v", call, err)
	case apierrors.ReasonForError(err) == metav1.StatusReasonUnknown:
		return agent.Errorf(agent.CodeUnreachable, "%s at %s: %v", call, a.o.Config.Host, err)
	}
	return agent.Errorf(agent.CodeRejected, "%s: %v", call, err)
}

// fetch reads an app (Kustomization, else HelmRelease) and its source from the API.
func (a *Agent) fetch(ctx context.Context, ref string) (app, src *unstructured.Unstructured, err error) {
	ns, name := a.splitRef(ref)
	for _, gvr := range []schema.GroupVersionResource{Kustomizations, HelmReleases} {
		if !a.served(gvr) {
			continue
		}
		app, err = a.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, a.apiErr("get "+gvr.Resource+" "+ns+"/"+name, err)
		}
		break
	}
	if app == nil {
		return nil, nil, &agent.Error{Code: agent.CodeNotFound, App: ref,
			Message: fmt.Sprintf("no Kustomization or HelmRelease %s/%s in the cluster", ns, name)}
	}
	if sg, sns, sname, ok := sourceRef(app); ok && a.served(sg) {
		src, err = a.dyn.Resource(sg).Namespace(sns).Get(ctx, sname, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return app, nil, nil
		}
		if err != nil {
			return nil, nil, a.apiErr("get "+sg.Resource+" "+sns+"/"+sname, err)
		}
	}
	return app, src, nil
}

func (a *Agent) served(gvr schema.GroupVersionResource) bool {
	for _, k := range a.kinds {
		if k == gvr {
			return true
		}
	}
	return false
}

// Get reads one app from the API (Refresh asks its source to fetch first, like a sync without
// the app's reconcile).
func (a *Agent) Get(ctx context.Context, req agent.GetRequest) (*agent.AppStatus, error) {
	app, src, err := a.fetch(ctx, req.App)
	if err != nil {
		return nil, err
	}
	if req.Refresh != agent.RefreshNone && src != nil && !suspended(src) {
		if src, err = a.reconcileSource(ctx, src, time.Now().UTC()); err != nil {
			return nil, err
		}
	}
	st := a.status(app, src, time.Now())
	st.V, st.Agent = agent.Version, a.o.AgentID
	return &st, nil
}

// Apps lists the apps matching q, read from the API.
func (a *Agent) Apps(ctx context.Context, q agent.AppsQuery) ([]agent.AppStatus, error) {
	sel := labels.Everything()
	if q.Selector != "" {
		s, err := labels.Parse(q.Selector)
		if err != nil {
			return nil, agent.Errorf(agent.CodeInvalid, "apps: selector %q: %v", q.Selector, err)
		}
		sel = s
	}
	if len(q.Labels) > 0 {
		reqs, _ := labels.SelectorFromSet(q.Labels).Requirements()
		sel = sel.Add(reqs...)
	}
	var re *regexp.Regexp
	if q.NameRegex != "" {
		var err error
		if re, err = regexp.Compile(q.NameRegex); err != nil {
			return nil, agent.Errorf(agent.CodeInvalid, "apps: nameRegex %q: %v", q.NameRegex, err)
		}
	}
	names := map[string]bool{}
	for _, n := range q.Names {
		names[n] = true
	}
	srcs := map[string]*unstructured.Unstructured{}
	for _, gvr := range []schema.GroupVersionResource{GitRepositories, OCIRepositories} {
		if !a.served(gvr) {
			continue
		}
		l, err := a.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, a.apiErr("list "+gvr.Resource, err)
		}
		for i := range l.Items {
			srcs[gvr.Resource+"/"+l.Items[i].GetNamespace()+"/"+l.Items[i].GetName()] = &l.Items[i]
		}
	}
	now := time.Now()
	var out []agent.AppStatus
	for _, gvr := range []schema.GroupVersionResource{Kustomizations, HelmReleases} {
		if !a.served(gvr) {
			continue
		}
		l, err := a.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, a.apiErr("list "+gvr.Resource, err)
		}
		for i := range l.Items {
			app := &l.Items[i]
			var src *unstructured.Unstructured
			if sg, ns, name, ok := sourceRef(app); ok {
				src = srcs[sg.Resource+"/"+ns+"/"+name]
			}
			st := a.status(app, src, now)
			st.V, st.Agent = agent.Version, a.o.AgentID
			switch {
			case q.ApplicationSet != "" && st.ApplicationSet != q.ApplicationSet:
			case re != nil && !re.MatchString(st.Name):
			case len(names) > 0 && !names[st.Ref()] && !names[st.Name]:
			case q.Project != "" && st.Project != q.Project:
			default:
				out = append(out, st)
			}
		}
	}
	return out, nil
}

// Diff is not offered: Flux renders manifests inside its controllers, with no API to render a
// revision that is not applied.
func (a *Agent) Diff(context.Context, agent.DiffRequest) ([]agent.AppDiff, error) {
	return nil, agent.Errorf(agent.CodeUnsupported,
		"diff preview is not supported on Flux (kustomize-controller has no API to render a revision it has not applied); turn the preview off (preview: false)")
}

// annotate merge-patches metadata.annotations only.
func (a *Agent) annotate(ctx context.Context, o *unstructured.Unstructured, ann map[string]string) (*unstructured.Unstructured, error) {
	gvr := map[string]schema.GroupVersionResource{"GitRepository": GitRepositories, "OCIRepository": OCIRepositories,
		"Kustomization": Kustomizations, "HelmRelease": HelmReleases}[o.GetKind()]
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	out, err := a.dyn.Resource(gvr).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return nil, a.apiErr("annotate "+kindName(o), err)
	}
	return out, nil
}

// reconcileSource asks src to fetch now and waits (SourceWait) until source-controller handled
// the request; it returns the source as it is then.
func (a *Agent) reconcileSource(ctx context.Context, src *unstructured.Unstructured, at time.Time) (*unstructured.Unstructured, error) {
	v := at.Format(time.RFC3339Nano)
	if _, err := a.annotate(ctx, src, map[string]string{ReconcileAt: v}); err != nil {
		return nil, err
	}
	gvr := map[string]schema.GroupVersionResource{"GitRepository": GitRepositories, "OCIRepository": OCIRepositories}[src.GetKind()]
	deadline := time.Now().Add(a.o.SourceWait)
	for {
		cur, err := a.dyn.Resource(gvr).Namespace(src.GetNamespace()).Get(ctx, src.GetName(), metav1.GetOptions{})
		if err != nil {
			return nil, a.apiErr("get "+kindName(src), err)
		}
		if nestedString(cur, "status", "lastHandledReconcileAt") == v {
			if c := conditions(cur)["Ready"]; c.Status == "False" {
				return nil, agent.Errorf(agent.CodeRejected, "%s could not fetch: %s", kindName(cur), c.Message)
			}
			return cur, nil
		}
		if time.Now().After(deadline) {
			return nil, agent.Errorf(agent.CodeUnavailable, "source-controller did not handle the reconcile request of %s within %s (is source-controller running?)",
				kindName(src), a.o.SourceWait)
		}
		select {
		case <-ctx.Done():
			return nil, agent.Errorf(agent.CodeTimeout, "waiting for source-controller to fetch %s: %v", kindName(src), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Sync asks each app to reconcile: its source first (so the app applies the commit just
// merged, not the artifact fetched at the last interval), then the app, tagged with the run and
// step. Suspended apps and sources are refused.
func (a *Agent) Sync(ctx context.Context, req agent.SyncRequest) ([]agent.SyncResult, error) {
	if req.DryRun {
		return nil, agent.Errorf(agent.CodeUnsupported, "sync: dry run is not supported on Flux")
	}
	out := make([]agent.SyncResult, len(req.Apps))
	for i, ref := range req.Apps {
		out[i] = a.syncOne(ctx, req, ref)
	}
	return out, nil
}

func (a *Agent) syncOne(ctx context.Context, req agent.SyncRequest, ref string) agent.SyncResult {
	res := agent.SyncResult{App: ref}
	fail := func(e *agent.Error) agent.SyncResult {
		e.App = ref
		res.Error = e
		return res
	}
	app, src, err := a.fetch(ctx, ref)
	if err != nil {
		return fail(agent.AsError(err))
	}
	res.UID = string(app.GetUID())
	if suspended(app) {
		return fail(agent.Errorf(agent.CodeRejected, "%s is suspended (spec.suspend: true): prflow does not reconcile suspended objects; resume it first (flux resume %s %s -n %s)",
			kindName(app), lower(app.GetKind()), app.GetName(), app.GetNamespace()))
	}
	if src != nil && suspended(src) {
		return fail(agent.Errorf(agent.CodeRejected, "its source %s is suspended (spec.suspend: true): resume it first", kindName(src)))
	}
	ann := app.GetAnnotations()
	if req.RunID != "" && ann[annRun] == req.RunID && ann[annStep] == req.Step && ann[annRequestedAt] == ann[ReconcileAt] {
		if op := operation(app, conditions(app)["Ready"], conditions(app)["Reconciling"]); op != nil && !op.Finished() {
			res.AlreadyRunning, res.Revision, res.At = true, ann[annRevision], op.StartedAt
			return res
		}
	}
	at := time.Now().UTC()
	if src != nil {
		if src, err = a.reconcileSource(ctx, src, at); err != nil {
			return fail(agent.AsError(err))
		}
		res.Revision = ParseRevision(nestedString(src, "status", "artifact", "revision"))
	}
	v := at.Format(time.RFC3339Nano)
	if _, err := a.annotate(ctx, app, map[string]string{ReconcileAt: v, annRequestedAt: v, annRun: req.RunID,
		annStep: req.Step, annRevision: res.Revision}); err != nil {
		return fail(agent.AsError(err))
	}
	res.At = at
	a.o.Log.Info("reconcile requested", "app", ref, "kind", app.GetKind(), "revision", res.Revision, "run", req.RunID, "step", req.Step)
	return res
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}
