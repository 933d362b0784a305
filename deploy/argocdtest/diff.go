package argocdtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// The endpoints a diff preview reads, as Argo CD v3.2 answers them:
//
//   - GET /api/v1/applications/{name}/manifests?revision= renders the app's stored spec at the
//     revision with the repo-server (a render failure is HTTP 500, gRPC Unknown, "error
//     generating manifests: …"; repo-server down is the same with "code = Unavailable" inside);
//     the repo-server adds the tracking annotation; Secret data is masked ("++++++++") before
//     it leaves the server;
//   - GET /api/v1/applications/{name}/managed-resources is the controller's last comparison:
//     per object targetState, liveState, normalizedLiveState (JSON strings, "null" when absent),
//     Secret values masked jointly so that equal values get equal masks;
//   - POST /api/v1/applicationsets/generate renders an ApplicationSet object given in the body
//     (its generators read git as written there) without storing anything; it needs
//     applicationsets create permission and an existing template project.
//
// Deny takes a permission away from every token, for RBAC failure tests.

// Deny makes the server refuse action on resource ("applications", "get"; "applicationsets",
// "create") to every caller, as an RBAC policy without that grant does.
func (s *Server) Deny(resource, action string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied == nil {
		s.denied = map[string]bool{}
	}
	s.denied[resource+"/"+action] = true
}

// allowedLocked is Argo CD's enforcer check. Callers hold s.mu.
func (s *Server) allowedLocked(resource, action string) bool {
	return !s.denied[resource+"/"+action]
}

const trackingAnnotation = "argocd.argoproj.io/tracking-id"

// trackedJSON is an object's manifest as Argo CD hands it out: with the annotation tracking
// id of the app, Secret data masked by masks (nil: no masking needed).
func trackedJSON(o object, appName string, masks map[string]string) string {
	var m map[string]any
	if json.Unmarshal([]byte(o.canon), &m) != nil {
		return o.canon
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	if o.Namespace != "" {
		md["namespace"] = o.Namespace
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	ann[trackingAnnotation] = appName + ":" + o.Group + "/" + o.Kind + ":" + o.Namespace + "/" + o.Name
	md["annotations"] = ann
	if o.Group == "" && o.Kind == "Secret" {
		data := secretData(m)
		masked := map[string]any{}
		for k := range data {
			masked[k] = masks[k]
		}
		delete(m, "stringData")
		if len(masked) > 0 {
			m["data"] = masked
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// secretData is a Secret's data with stringData folded in (base64), as NormalizeSecret does.
func secretData(m map[string]any) map[string]string {
	out := map[string]string{}
	if d, ok := m["data"].(map[string]any); ok {
		for k, v := range d {
			s, _ := v.(string)
			out[k] = s
		}
	}
	if d, ok := m["stringData"].(map[string]any); ok {
		for k, v := range d {
			s, _ := v.(string)
			out[k] = base64.StdEncoding.EncodeToString([]byte(s))
		}
	}
	return out
}

// secretMasks is HideSecretData: per key, the first distinct value among objs gets
// "++++++++", the next one four more '+', and so on.
func secretMasks(objs ...*object) []map[string]string {
	datas := make([]map[string]string, len(objs))
	keys := map[string]bool{}
	for i, o := range objs {
		if o == nil {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(o.canon), &m) == nil {
			datas[i] = secretData(m)
			for k := range datas[i] {
				keys[k] = true
			}
		}
	}
	out := make([]map[string]string, len(objs))
	for i := range out {
		out[i] = map[string]string{}
	}
	for k := range keys {
		next := "++++++++"
		seen := map[string]string{}
		for i, d := range datas {
			v, ok := d[k]
			if !ok {
				continue
			}
			r, ok := seen[v]
			if !ok {
				r = next
				next += "++++"
				seen[v] = r
			}
			out[i][k] = r
		}
	}
	return out
}

// handleManifests serves GET /api/v1/applications/{name}/manifests.
func (s *Server) handleManifests(w http.ResponseWriter, r *http.Request, p []string) {
	if _, e := s.authenticate(r); e != nil {
		writeAPIError(w, e)
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	st, e := s.lookupApp(p[0], q.Get("appNamespace"), q.Get("project"))
	if e == nil && !s.allowedLocked("applications", "get") {
		e = errPermissionDenied
	}
	if e != nil {
		s.mu.Unlock()
		writeAPIError(w, e)
		return
	}
	spec := clone(st.app.Spec)
	name := st.app.Metadata.Name
	s.mu.Unlock()

	src := spec.primarySource()
	rev := firstNonEmpty(q.Get("revision"), src.TargetRevision)
	tg := s.loadTarget(r.Context(), spec, rev, nil)
	if tg.err != nil {
		msg := "error generating manifests: rpc error: code = Unknown desc = Manifest generation error (cached): " + tg.err.Error()
		if isRepoServerDown(tg.err) {
			msg = "error generating manifests: " + tg.err.Error()
		}
		writeAPIError(w, errf(codeUnknown, "%s", msg))
		return
	}
	manifests := []string{}
	for _, o := range tg.objects {
		o := o
		var masks map[string]string
		if o.Group == "" && o.Kind == "Secret" {
			masks = secretMasks(&o)[0]
		}
		manifests = append(manifests, trackedJSON(o, name, masks))
	}
	reply(w, r, map[string]any{
		"manifests": manifests, "namespace": spec.Destination.Namespace, "server": spec.Destination.Server,
		"revision": tg.revision, "sourceType": sourceType(src),
	})
}

// managedResource is v1alpha1ResourceDiff.
type managedResource struct {
	Group               string `json:"group,omitempty"`
	Kind                string `json:"kind"`
	Namespace           string `json:"namespace,omitempty"`
	Name                string `json:"name"`
	TargetState         string `json:"targetState"`
	LiveState           string `json:"liveState"`
	NormalizedLiveState string `json:"normalizedLiveState"`
	PredictedLiveState  string `json:"predictedLiveState"`
	Diff                string `json:"diff,omitempty"`
	Hook                bool   `json:"hook,omitempty"`
	Modified            bool   `json:"modified,omitempty"`
	ResourceVersion     string `json:"resourceVersion,omitempty"`
}

// handleManagedResources serves GET /api/v1/applications/{name}/managed-resources from the
// controller's last comparison (the target of the last successful one, the live objects).
func (s *Server) handleManagedResources(w http.ResponseWriter, r *http.Request, p []string) {
	if _, e := s.authenticate(r); e != nil {
		writeAPIError(w, e)
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	st, e := s.lookupApp(p[0], q.Get("appNamespace"), q.Get("project"))
	if e == nil && !s.allowedLocked("applications", "get") {
		e = errPermissionDenied
	}
	if e != nil {
		s.mu.Unlock()
		writeAPIError(w, e)
		return
	}
	name := st.app.Metadata.Name
	target := append([]object(nil), st.target...)
	var live []object
	if st.live != nil {
		live = append(live, st.live.objects...)
	}
	rv := st.rv
	s.mu.Unlock()

	byKey := map[string]*[2]*object{}
	var keys []string
	add := func(o object, side int) {
		k := o.key()
		pair := byKey[k]
		if pair == nil {
			pair = &[2]*object{}
			byKey[k] = pair
			keys = append(keys, k)
		}
		pair[side] = &o
	}
	for _, o := range target {
		add(o, 0)
	}
	for _, o := range live {
		add(o, 1)
	}
	sort.Strings(keys)
	items := []managedResource{}
	for i, k := range keys {
		t, l := byKey[k][0], byKey[k][1]
		ref := t
		if ref == nil {
			ref = l
		}
		var masks []map[string]string
		if ref.Group == "" && ref.Kind == "Secret" {
			masks = secretMasks(t, l)
		} else {
			masks = []map[string]string{nil, nil}
		}
		mr := managedResource{Group: ref.Group, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name,
			TargetState: "null", LiveState: "null", NormalizedLiveState: "null", PredictedLiveState: "null"}
		if t != nil {
			mr.TargetState = trackedJSON(*t, name, masks[0])
		}
		if l != nil {
			mr.LiveState = liveJSON(*l, name, masks[1], rv, i)
			mr.NormalizedLiveState = trackedJSON(*l, name, masks[1])
			mr.PredictedLiveState = mr.NormalizedLiveState
			if t != nil {
				mr.PredictedLiveState = mr.TargetState
			}
		}
		mr.Modified = t == nil || l == nil || t.canon != l.canon
		items = append(items, mr)
	}
	reply(w, r, map[string]any{"items": items})
}

// liveJSON is a live object as the API server returns it: with the fields it sets.
func liveJSON(o object, appName string, masks map[string]string, rv int64, i int) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(trackedJSON(o, appName, masks)), &m)
	md, _ := m["metadata"].(map[string]any)
	if md != nil {
		md["resourceVersion"] = fmt.Sprintf("%d%03d", rv, i)
		md["uid"] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		md["creationTimestamp"] = "2026-01-01T00:00:00Z"
		md["managedFields"] = []any{map[string]any{"manager": "argocd-controller", "operation": "Apply"}}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// handleGenerateAppSet serves POST /api/v1/applicationsets/generate.
func (s *Server) handleGenerateAppSet(w http.ResponseWriter, r *http.Request, _ []string) {
	if _, e := s.authenticate(r); e != nil {
		writeAPIError(w, e)
		return
	}
	var req struct {
		ApplicationSet *ApplicationSet `json:"applicationSet"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeAPIError(w, e)
		return
	}
	as := req.ApplicationSet
	if as == nil {
		writeAPIError(w, errf(codeUnknown, "error creating ApplicationSets: ApplicationSets is nil in request"))
		return
	}
	ns := firstNonEmpty(as.Metadata.Namespace, defaultNamespace)
	project := as.Spec.Template.Spec.Project
	if strings.Contains(project, "{{") {
		writeAPIError(w, errf(codeUnknown, "error validating ApplicationSets: the Argo CD API does not currently support creating ApplicationSets with templated `project` fields"))
		return
	}
	s.mu.Lock()
	nsOK, allowed, projOK := s.namespaces[ns], s.allowedLocked("applicationsets", "create"), s.projects[firstNonEmpty(project, "default")]
	s.mu.Unlock()
	switch {
	case !nsOK:
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", ns))
		return
	case !allowed:
		writeAPIError(w, errf(codePermissionDenied, "error checking create permissions for ApplicationSets %s : permission denied", as.Metadata.Name))
		return
	case !projOK:
		writeAPIError(w, errf(codeInvalidArgument, "error checking create permissions for ApplicationSets %s : ApplicationSet references project %s which does not exist", as.Metadata.Name, project))
		return
	}
	apps, err := s.generate(r.Context(), *as, newRevCache())
	if err != nil {
		writeAPIError(w, errf(codeUnknown, "unable to generate Applications of ApplicationSet: %v", err))
		return
	}
	for i := range apps {
		apps[i].Metadata.Namespace = firstNonEmpty(apps[i].Metadata.Namespace, ns)
		if apps[i].Spec.Project == "" {
			apps[i].Spec.Project = "default"
		}
	}
	reply(w, r, map[string]any{"applications": apps})
}
