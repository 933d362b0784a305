package argocdtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// The endpoints a diff preview reads, as Argo CD v3.2.11 answers them (checked on realenv):
//
//   - GET /api/v1/applications/{name}/manifests?revision= renders the app's stored spec at the
//     revision with the repo-server and answers {"manifests": [JSON strings]} only; the
//     manifests carry the tracking annotation but no namespace unless they set one; Secret data
//     (stringData folded in) is masked "++++++++" before it leaves the server. A manifest that
//     does not parse is HTTP 400, code 9, the repo-server's text; a revision that does not
//     resolve HTTP 500, code 2 "unable to resolve 'x' to a commit SHA"; repo-server down an
//     error with "code = Unavailable" inside;
//   - GET /api/v1/applications/{name}/managed-resources is the controller's last comparison:
//     per object targetState (namespace filled in), liveState (with the API server's
//     metadata), normalizedLiveState (the same without creationTimestamp), JSON strings, "null"
//     when absent; Secret values masked jointly, so equal values get equal masks;
//   - POST /api/v1/applicationsets/generate renders an ApplicationSet object given in the body
//     (its generators read git as written there) without storing anything and answers the apps
//     without metadata.namespace; it needs applicationsets create permission (403) and an
//     existing template project (400, code 3); a generator failure is HTTP 500, code 13.
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
	return objectJSON(o, appName, masks, true)
}

// objectJSON is trackedJSON; withNS false leaves metadata.namespace as the manifest has it (the
// repo-server's output: the controller fills it in later).
func objectJSON(o object, appName string, masks map[string]string, withNS bool) string {
	var m map[string]any
	if json.Unmarshal([]byte(o.canon), &m) != nil {
		return o.canon
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	if withNS && o.Namespace != "" {
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
	q := r.URL.Query()
	st := s.lockReadableApp(w, p[0], q.Get("appNamespace"), q.Get("project"))
	if st == nil {
		return
	}
	spec := clone(st.app.Spec)
	name := st.app.Metadata.Name
	s.mu.Unlock()

	if len(spec.Sources) > 0 {
		objs, e := s.multiSourceTarget(r, spec, q["sourcePositions"], q["revisions"])
		if e != nil {
			writeAPIError(w, e)
			return
		}
		reply(w, r, map[string]any{"manifests": manifestList(objs, name)})
		return
	}
	src := spec.primarySource()
	rev := firstNonEmpty(q.Get("revision"), src.TargetRevision)
	tg := s.loadTarget(r.Context(), spec, rev, nil)
	switch {
	case tg.err == nil:
	case isRepoServerDown(tg.err):
		writeAPIError(w, errf(codeUnknown, "error generating manifests: %v", tg.err))
		return
	case tg.revision == "":
		// v3.2.11: HTTP 500, code 2.
		writeAPIError(w, errf(codeUnknown, "unable to resolve '%s' to a commit SHA", rev))
		return
	default:
		// v3.2.11: a manifest that does not parse is HTTP 400, code 9, the repo-server's text.
		writeAPIError(w, errf(codeFailedPrecondition, "%v", tg.err))
		return
	}
	// v3.2.11 answers with the manifests only.
	reply(w, r, map[string]any{"manifests": manifestList(tg.objects, name)})
}

// manifestList is rendered objects as the manifests endpoint hands them out (each Secret
// masked by itself).
func manifestList(objs []object, name string) []string {
	manifests := []string{}
	for _, o := range objs {
		var masks map[string]string
		if o.Group == "" && o.Kind == "Secret" {
			masks = secretMasks(&o)[0]
		}
		manifests = append(manifests, objectJSON(o, name, masks, false))
	}
	return manifests
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
	q := r.URL.Query()
	st := s.lockReadableApp(w, p[0], q.Get("appNamespace"), q.Get("project"))
	if st == nil {
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
			mr.NormalizedLiveState = liveJSON(*l, name, masks[1], rv, i)
			var n map[string]any
			if json.Unmarshal([]byte(mr.NormalizedLiveState), &n) == nil {
				// Normalisation drops creationTimestamp, keeps the rest of the server's metadata.
				if md, ok := n["metadata"].(map[string]any); ok {
					delete(md, "creationTimestamp")
				}
				b, _ := json.Marshal(n)
				mr.NormalizedLiveState = string(b)
			}
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
		writeAPIError(w, errf(codeInvalidArgument, "ApplicationSet references project %s which does not exist", project))
		return
	}
	apps, err := s.generate(r.Context(), *as, newRevCache())
	if err != nil {
		// v3.2.11: HTTP 500, code 13, the generator's error.
		writeAPIError(w, errf(codeInternal, "%v", err))
		return
	}
	for i := range apps {
		// v3.2.11 leaves the namespace out of generated apps.
		apps[i].Metadata.Namespace = ""
		if apps[i].Spec.Project == "" {
			apps[i].Spec.Project = "default"
		}
	}
	reply(w, r, map[string]any{"applications": apps})
}
