package fluxtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/labels"
)

// broadcast wakes every open watch (s.mu held).
func (s *Server) broadcast() {
	close(s.bcast)
	s.bcast = make(chan struct{})
}

// route is a parsed API path: /apis/<group>/<version>[/namespaces/<ns>]/<resource>[/<name>].
type route struct {
	resource, ns, name string
}

func parsePath(p string) (route, error) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) < 4 || parts[0] != "apis" {
		return route{}, fmt.Errorf("path %s is not served by this fake (only /apis/<group>/<version>/…)", p)
	}
	group, version := parts[1], parts[2]
	rest := parts[3:]
	var r route
	if rest[0] == "namespaces" && len(rest) >= 3 {
		r.ns, rest = rest[1], rest[2:]
	}
	r.resource = rest[0]
	if len(rest) > 1 {
		r.name = rest[1]
	}
	if len(rest) > 2 {
		return route{}, fmt.Errorf("subresource %s is not served by this fake", rest[2])
	}
	k, ok := kinds[r.resource]
	if !ok || k.Group != group || k.Version != version {
		return route{}, fmt.Errorf("the server could not find the requested resource %s.%s/%s", r.resource, group, version)
	}
	return r, nil
}

// status writes a Kubernetes Status error.
func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"message": msg, "reason": reason, "code": code})
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/version" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"34","gitVersion":"v1.34.4-fluxtest"}`))
		return
	}
	rt, err := parsePath(req.URL.Path)
	if err != nil {
		status(w, http.StatusNotFound, "NotFound", err.Error())
		return
	}
	s.mu.Lock()
	s.reqs[req.Method+" "+rt.resource]++
	s.mu.Unlock()
	switch {
	case req.Method == http.MethodGet && rt.name == "" && req.URL.Query().Get("watch") == "true":
		s.watch(w, req, rt)
	case req.Method == http.MethodGet && rt.name == "":
		s.list(w, req, rt)
	case req.Method == http.MethodGet:
		s.get(w, rt)
	case req.Method == http.MethodPost && rt.name == "" && rt.ns != "":
		s.post(w, req, rt)
	case req.Method == http.MethodPatch && rt.name != "":
		s.patch(w, req, rt)
	case req.Method == http.MethodDelete && rt.name != "":
		s.delete(w, rt)
	default:
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", req.Method+" "+req.URL.Path+" is not supported by this fake")
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) selector(req *http.Request) (labels.Selector, error) {
	return labels.Parse(req.URL.Query().Get("labelSelector"))
}

func matches(sel labels.Selector, o map[string]any) bool {
	ls := labels.Set{}
	if m, ok := getPath(o, "metadata", "labels").(map[string]any); ok {
		for k, v := range m {
			ls[k], _ = v.(string)
		}
	}
	return sel.Matches(ls)
}

func (s *Server) list(w http.ResponseWriter, req *http.Request, rt route) {
	sel, err := s.selector(req)
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "labelSelector: "+err.Error())
		return
	}
	s.mu.Lock()
	var items []any
	for _, key := range sortedKeys(s.objs[rt.resource]) {
		o := s.objs[rt.resource][key]
		if (rt.ns == "" || str(o, "metadata", "namespace") == rt.ns) && matches(sel, o) {
			items = append(items, clone(o))
		}
	}
	rv := s.rv
	s.mu.Unlock()
	k := kinds[rt.resource]
	if items == nil {
		items = []any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": k.Group + "/" + k.Version, "kind": k.Kind + "List",
		"metadata": map[string]any{"resourceVersion": strconv.FormatInt(rv, 10)}, "items": items})
}

func (s *Server) get(w http.ResponseWriter, rt route) {
	s.mu.Lock()
	o := s.objs[rt.resource][rt.ns+"/"+rt.name]
	if o != nil {
		o = clone(o)
	}
	s.mu.Unlock()
	if o == nil {
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s.%s %q not found", rt.resource, kinds[rt.resource].Group, rt.name))
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (s *Server) post(w http.ResponseWriter, req *http.Request, rt route) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "body is not a JSON object: "+err.Error())
		return
	}
	obj = clone(obj)
	s.mu.Lock()
	o, err := s.create(rt.resource, rt.ns, obj)
	if o != nil {
		o = clone(o)
	}
	s.mu.Unlock()
	switch {
	case err == errConflict:
		status(w, http.StatusConflict, "AlreadyExists", fmt.Sprintf("%s %q already exists", rt.resource, str(obj, "metadata", "name")))
	case err != nil:
		status(w, http.StatusUnprocessableEntity, "Invalid", err.Error())
	default:
		writeJSON(w, http.StatusCreated, o)
	}
}

// patch applies a JSON merge patch or a JSON patch to the object (status included, as the
// fake has no status subresource).
func (s *Server) patch(w http.ResponseWriter, req *http.Request, rt route) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.objs[rt.resource][rt.ns+"/"+rt.name]
	if cur == nil {
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s.%s %q not found", rt.resource, kinds[rt.resource].Group, rt.name))
		return
	}
	orig, _ := json.Marshal(cur)
	var out []byte
	switch ct := req.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/merge-patch+json"):
		out, err = jsonpatch.MergePatch(orig, body)
	case strings.HasPrefix(ct, "application/json-patch+json"):
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(body); err == nil {
			out, err = p.Apply(orig)
		}
	default:
		status(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", "patch content type "+ct+" is not supported by this fake")
		return
	}
	if err != nil {
		status(w, http.StatusUnprocessableEntity, "Invalid", "patch: "+err.Error())
		return
	}
	next := decode(out)
	if rv := str(next, "metadata", "resourceVersion"); rv != "" && rv != str(cur, "metadata", "resourceVersion") {
		status(w, http.StatusConflict, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
		return
	}
	s.replace(rt.resource, cur, next)
	writeJSON(w, http.StatusOK, clone(next))
}

func (s *Server) delete(w http.ResponseWriter, rt route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := rt.ns + "/" + rt.name
	o := s.objs[rt.resource][key]
	if o == nil {
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", rt.resource, rt.name))
		return
	}
	delete(s.objs[rt.resource], key)
	s.record(rt.resource, "DELETED", o)
	writeJSON(w, http.StatusOK, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success"})
}

// watch streams events after resourceVersion, as newline-delimited JSON watch events, until
// timeoutSeconds, the client going away, or the server closing.
func (s *Server) watch(w http.ResponseWriter, req *http.Request, rt route) {
	sel, err := s.selector(req)
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "labelSelector: "+err.Error())
		return
	}
	q := req.URL.Query()
	from, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	timeout := 5 * time.Minute
	if t, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	s.mu.Lock()
	if from != 0 && from < s.oldest-1 {
		s.mu.Unlock()
		// As the real server: 200, then one ERROR event carrying 410 Expired.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": map[string]any{"kind": "Status", "apiVersion": "v1",
			"status": "Failure", "reason": "Expired", "code": 410,
			"message": fmt.Sprintf("too old resource version: %d (%d)", from, s.oldest)}})
		return
	}
	if from == 0 {
		from = s.rv // "0" or none: from now (the informer lists first)
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	enc := json.NewEncoder(w)
	end := time.After(timeout)
	for {
		s.mu.Lock()
		var out []event
		for _, e := range s.events {
			if e.rv > from && e.res == rt.resource && (rt.ns == "" || e.ns == rt.ns) && matches(sel, e.obj) {
				out = append(out, e)
			}
		}
		if n := len(s.events); n > 0 {
			from = max(from, s.events[n-1].rv)
		}
		wake := s.bcast
		s.mu.Unlock()
		for _, e := range out {
			if err := enc.Encode(map[string]any{"type": e.typ, "object": e.obj}); err != nil {
				return
			}
		}
		if len(out) > 0 && fl != nil {
			fl.Flush()
		}
		select {
		case <-wake:
		case <-end:
			return
		case <-req.Context().Done():
			return
		case <-s.closed:
			return
		}
	}
}
