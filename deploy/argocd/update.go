package argocd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
)

// updateAttempts bounds how often Update re-reads an app that changed under it.
const updateAttempts = 6

// Update implements agent.Updater: it reads the app, applies the typed patch to the selected
// source and writes it back with PATCH /api/v1/applications/{name} as a JSON patch whose first
// operation tests metadata.resourceVersion. Argo CD applies the patch to the app it has, so a
// change made by anyone since the read fails the test and nothing is written; the agent then
// re-reads and applies the patch again on top of that change (PUT would not do: Argo CD's
// update handler copies the given spec over whatever the app has, ignoring resourceVersion).
// Only the keys the patch names are rewritten; every other field of the source (Helm values,
// Kustomize patches, plugin settings) is kept as Argo CD has it.
func (a *Agent) Update(ctx context.Context, req agent.UpdateRequest) (*agent.UpdateReply, error) {
	a.served.Add(1)
	name, ns := a.split(req.App)
	unlock, err := a.lockApp(ctx, req.App)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var last error
	for attempt := 0; attempt < updateAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt*attempt) * 50 * time.Millisecond):
			}
		}
		rep, err := a.updateOnce(ctx, req, name, ns)
		if errors.Is(err, agent.ErrConflict) {
			last = err
			a.o.Log.Info("app changed while updating it; re-reading", "app", req.App, "attempt", attempt+1)
			continue
		}
		if err != nil {
			return nil, err
		}
		return rep, nil
	}
	return nil, &agent.Error{Code: agent.CodeConflict, App: req.App,
		Message: fmt.Sprintf("update: the app changed under every one of %d attempts to update it (last: %v); nothing was written", updateAttempts, last)}
}

// lockApp serialises prflow's updates of one app: Argo CD validates a patched app (manifest
// generation, seconds) between reading it and writing it, and a write landing in that window
// is overwritten without a conflict, so two runs updating one app through this agent take
// turns — on one replica by a mutex, across replicas by a lease in prflow-locks.
func (a *Agent) lockApp(ctx context.Context, ref string) (func(), error) {
	mu, _ := a.updating.LoadOrStore(ref, &sync.Mutex{})
	m := mu.(*sync.Mutex)
	m.Lock()
	if a.updateLeases == nil {
		return m.Unlock, nil
	}
	key := queue.LeaseKey("agent-update", a.o.AgentID, ref)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lease, err := a.updateLeases.Acquire(lctx, key, a.o.Replica)
	if err != nil {
		m.Unlock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &agent.Error{Code: agent.CodeConflict, App: ref, Message: "update: another update of this app is still running (lease " + key + " in prflow-locks): " + err.Error()}
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			a.o.Log.Warn("release update lease", "app", ref, "err", err)
		}
		m.Unlock()
	}, nil
}

func (a *Agent) updateOnce(ctx context.Context, req agent.UpdateRequest, name, ns string) (*agent.UpdateReply, error) {
	raw, err := a.argo.GetRaw(ctx, name, ns)
	if err != nil {
		return nil, err
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, &agent.Error{Code: agent.CodeInternal, App: req.App, Message: "update: Argo CD answered an application that is not a JSON object: " + err.Error()}
	}
	meta, _ := obj["metadata"].(map[string]any)
	spec, _ := obj["spec"].(map[string]any)
	if meta == nil || spec == nil {
		return nil, &agent.Error{Code: agent.CodeInternal, App: req.App, Message: "update: Argo CD answered an application without metadata or spec"}
	}
	rv, _ := meta["resourceVersion"].(string)
	if rv == "" {
		return nil, &agent.Error{Code: agent.CodeInternal, App: req.App, Message: "update: the application has no metadata.resourceVersion; cannot update it safely"}
	}
	if meta["deletionTimestamp"] != nil {
		return nil, &agent.Error{Code: agent.CodeRejected, App: req.App, Message: "update: the application is being deleted"}
	}
	sources, _ := spec["sources"].([]any)
	var names []string
	for _, s := range sources {
		m, _ := s.(map[string]any)
		n, _ := m["name"].(string)
		names = append(names, n)
	}
	idx, err := agent.SelectSource(req.Source, names, len(sources) > 0)
	if err != nil {
		return nil, err
	}
	var src map[string]any
	path := "/spec/source"
	if idx >= 0 {
		src, _ = sources[idx].(map[string]any)
		path = "/spec/sources/" + strconv.Itoa(idx)
	} else {
		src, _ = spec["source"].(map[string]any)
	}
	if src == nil {
		return nil, &agent.Error{Code: agent.CodeRejected, App: req.App, Message: "update: the application has no source (spec.source) to update"}
	}
	before, err := readSource(src, idx)
	if err != nil {
		return nil, &agent.Error{Code: agent.CodeRejected, App: req.App, Message: "update: " + err.Error()}
	}
	after := req.Patch.Apply(before)
	annotations, _ := meta["annotations"].(map[string]any)
	lastUpd := agent.ParseLastUpdate(str(annotations[agent.AnnotationLastUpdate]))
	rep := &agent.UpdateReply{Before: &before, After: &after}
	if lastUpd.Tagged(req.RunID, req.Step) {
		// An earlier delivery of this request updated the app: report what it replaced.
		b := lastUpd.Before
		rep.Before, rep.Repeated = &b, true
	}
	rep.Changed = !rep.Before.Equal(after)
	if after.Equal(before) {
		var app Application
		if err := json.Unmarshal(raw, &app); err != nil {
			return nil, &agent.Error{Code: agent.CodeInternal, App: req.App, Message: "update: " + err.Error()}
		}
		st := a.status(&app)
		st.ObservedAt = time.Now().UTC()
		rep.App = &st
		return rep, nil
	}
	writeSource(src, req.Patch, after)
	ops := []jsonPatchOp{
		{Op: "test", Path: "/metadata/resourceVersion", Value: rv},
		{Op: "replace", Path: path, Value: src},
	}
	note, _ := json.Marshal(agent.LastUpdate{Run: req.RunID, Step: req.Step, Before: *rep.Before})
	if annotations == nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{agent.AnnotationLastUpdate: string(note)}})
	} else {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + pointerEscape(agent.AnnotationLastUpdate), Value: string(note)})
	}
	app, err := a.argo.Patch(ctx, name, ns, ops)
	if err != nil {
		return nil, err
	}
	st := a.status(app)
	st.ObservedAt = time.Now().UTC()
	rep.App = &st
	// Field names only: Helm values may be secrets.
	a.o.Log.Info("app source updated", "app", req.App, "run", req.RunID, "step", req.Step, "fields", strings.Join(req.Patch.Touched(), ","))
	return rep, nil
}

func str(v any) string { s, _ := v.(string); return s }

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// decodeObject decodes JSON keeping numbers as written (json.Number), so fields the agent
// does not touch are sent back exactly as Argo CD gave them.
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// readSource reads the fields an update can change from an ApplicationSource object.
func readSource(src map[string]any, idx int) (agent.SourceSpec, error) {
	s := agent.SourceSpec{Index: idx, Name: str(src["name"]), RepoURL: str(src["repoURL"]), Path: str(src["path"]),
		Chart: str(src["chart"]), TargetRevision: str(src["targetRevision"])}
	if h, ok := src["helm"].(map[string]any); ok {
		hs := &agent.HelmSpec{}
		for _, p := range list(h["parameters"]) {
			m, _ := p.(map[string]any)
			force, _ := m["forceString"].(bool)
			hs.Parameters = append(hs.Parameters, agent.HelmParameter{Name: str(m["name"]), Value: scalar(m["value"]), ForceString: force})
		}
		for _, p := range list(h["fileParameters"]) {
			m, _ := p.(map[string]any)
			hs.FileParameters = append(hs.FileParameters, agent.HelmFileParameter{Name: str(m["name"]), Path: str(m["path"])})
		}
		for _, f := range list(h["valueFiles"]) {
			hs.ValueFiles = append(hs.ValueFiles, scalar(f))
		}
		if len(hs.Parameters)+len(hs.FileParameters)+len(hs.ValueFiles) > 0 {
			s.Helm = hs
		}
	}
	if k, ok := src["kustomize"].(map[string]any); ok {
		ks := &agent.KustomizeSpec{Namespace: str(k["namespace"]), NamePrefix: str(k["namePrefix"]), NameSuffix: str(k["nameSuffix"])}
		for _, im := range list(k["images"]) {
			ks.Images = append(ks.Images, scalar(im))
		}
		for _, r := range list(k["replicas"]) {
			m, _ := r.(map[string]any)
			n, err := strconv.ParseInt(scalar(m["count"]), 10, 64)
			if err != nil {
				return s, fmt.Errorf("kustomize.replicas %q: count %q is not a whole number", str(m["name"]), scalar(m["count"]))
			}
			ks.Replicas = append(ks.Replicas, agent.KustomizeReplica{Name: str(m["name"]), Count: n})
		}
		ks.CommonLabels = strMap(k["commonLabels"])
		ks.CommonAnnotations = strMap(k["commonAnnotations"])
		ks.ForceCommonLabels, _ = k["forceCommonLabels"].(bool)
		ks.ForceCommonAnnotations, _ = k["forceCommonAnnotations"].(bool)
		if !ks.Empty() {
			s.Kustomize = ks
		}
	}
	return s, nil
}

func list(v any) []any { l, _ := v.([]any); return l }

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func strMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = scalar(x)
	}
	return out
}

// writeSource writes into src the keys the patch touches, with their values from after.
func writeSource(src map[string]any, p agent.SourcePatch, after agent.SourceSpec) {
	if p.TargetRevision != nil {
		src["targetRevision"] = after.TargetRevision
	}
	// put writes key into m if the patch touched it: v, or no key at all when v is empty.
	put := func(m map[string]any, touched bool, key string, v any, empty bool) {
		switch {
		case !touched:
		case empty:
			delete(m, key)
		default:
			m[key] = v
		}
	}
	// object is src's object at key, a new one when there is none.
	object := func(key string) map[string]any {
		if m, _ := src[key].(map[string]any); m != nil {
			return m
		}
		return map[string]any{}
	}
	if h := p.Helm; h != nil {
		hm, ah := object("helm"), cmp.Or(after.Helm, &agent.HelmSpec{})
		put(hm, len(h.Parameters)+len(h.RemoveParameters) > 0, "parameters", ah.Parameters, len(ah.Parameters) == 0)
		put(hm, len(h.FileParameters)+len(h.RemoveFileParameters) > 0, "fileParameters", ah.FileParameters, len(ah.FileParameters) == 0)
		put(hm, h.ValueFiles != nil, "valueFiles", ah.ValueFiles, len(ah.ValueFiles) == 0)
		put(src, true, "helm", hm, len(hm) == 0)
	}
	if k := p.Kustomize; k != nil {
		km, ak := object("kustomize"), cmp.Or(after.Kustomize, &agent.KustomizeSpec{})
		put(km, len(k.Images)+len(k.RemoveImages) > 0, "images", ak.Images, len(ak.Images) == 0)
		put(km, len(k.Replicas)+len(k.RemoveReplicas) > 0, "replicas", ak.Replicas, len(ak.Replicas) == 0)
		put(km, k.Namespace != nil, "namespace", ak.Namespace, ak.Namespace == "")
		put(km, k.NamePrefix != nil, "namePrefix", ak.NamePrefix, ak.NamePrefix == "")
		put(km, k.NameSuffix != nil, "nameSuffix", ak.NameSuffix, ak.NameSuffix == "")
		put(km, len(k.CommonLabels)+len(k.RemoveCommonLabels) > 0, "commonLabels", ak.CommonLabels, len(ak.CommonLabels) == 0)
		put(km, len(k.CommonAnnotations)+len(k.RemoveCommonAnnotations) > 0, "commonAnnotations", ak.CommonAnnotations, len(ak.CommonAnnotations) == 0)
		put(km, k.ForceCommonLabels != nil, "forceCommonLabels", ak.ForceCommonLabels, !ak.ForceCommonLabels)
		put(km, k.ForceCommonAnnotations != nil, "forceCommonAnnotations", ak.ForceCommonAnnotations, !ak.ForceCommonAnnotations)
		put(src, true, "kustomize", km, len(km) == 0)
	}
}

// ---- calls ----

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// PatchBody is ApplicationPatchRequest, the body of PATCH /api/v1/applications/{name}.
type PatchBody struct {
	Name         string `json:"name"`
	Patch        string `json:"patch"`
	PatchType    string `json:"patchType"`
	AppNamespace string `json:"appNamespace,omitempty"`
}

// GetRaw reads one app as Argo CD's JSON.
func (c *Client) GetRaw(ctx context.Context, name, appNamespace string) ([]byte, error) {
	var raw json.RawMessage
	if err := c.getApp(ctx, name, appNamespace, "", nil, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// Patch applies a JSON patch (RFC 6902) to one app. A failed "test" operation (the app
// changed) and a write conflict inside Argo CD are ErrConflict.
func (c *Client) Patch(ctx context.Context, name, appNamespace string, ops []jsonPatchOp) (*Application, error) {
	p, err := json.Marshal(ops)
	if err != nil {
		return nil, &agent.Error{Code: agent.CodeInvalid, App: name, Message: err.Error()}
	}
	var a Application
	err = c.do(ctx, http.MethodPatch, "/api/v1/applications/"+url.PathEscape(name), nil,
		PatchBody{Name: name, Patch: string(p), PatchType: "json", AppNamespace: appNamespace}, &a, name)
	var ae *agent.Error
	if errors.As(err, &ae) && (strings.Contains(ae.Message, "testing value /metadata/resourceVersion failed") ||
		strings.Contains(ae.Message, "Too many conflicts") || strings.Contains(ae.Message, ": HTTP 409")) {
		conflict := *ae
		conflict.Code = agent.CodeConflict
		return nil, &conflict
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}
