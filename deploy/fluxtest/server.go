// Package fluxtest is a fake of the parts of a Kubernetes API server that Flux's objects live
// in (GitRepository, OCIRepository, Kustomization, HelmRelease), with a fake of Flux's
// source-controller and kustomize-controller driving their status, for CI where no
// kube-apiserver runs. Clients talk to it with real client-go over HTTP: list and watch with
// resourceVersion (410 Gone for a version older than the retained history), get, create,
// merge patch, delete, label selectors.
//
// The fake controllers act like Flux's: a source fetches the head of its branch when asked
// (reconcile.fluxcd.io/requestedAt, a spec change, or a Poll) and publishes an artifact
// revision "branch@sha1:<hex>"; a Kustomization whose source artifact moved, or that was asked
// to reconcile, turns Reconciling, then applies: Ready=True "Applied revision: …", or
// Ready=False with a message when the revision was marked bad (FailRevision). Suspended
// objects are left alone. Stopping a controller (StopSource, StopKustomize) leaves requests
// unhandled, as when the real controller's pod is gone.
package fluxtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kinds the fake serves: resource (plural) → group/version and kind.
var kinds = map[string]kindInfo{
	"gitrepositories": {Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"},
	"ocirepositories": {Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "OCIRepository"},
	"kustomizations":  {Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"},
	"helmreleases":    {Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"},
}

type kindInfo struct{ Group, Version, Kind string }

// Resolver answers the head commit of a branch of a git repository (the fake source-controller's
// git fetch).
type Resolver func(url, branch string) (string, error)

type event struct {
	rv   int64
	res  string
	typ  string // ADDED, MODIFIED, DELETED
	obj  map[string]any
	ns   string
	name string
}

// Server is the fake. Create it with New; it is safe for concurrent use.
type Server struct {
	srv     *httptest.Server
	resolve Resolver
	step    time.Duration
	now     func() time.Time

	mu      sync.Mutex
	rv      int64
	objs    map[string]map[string]map[string]any // resource → ns/name → object
	events  []event
	oldest  int64 // events older than this were compacted away
	changed chan struct{}
	bcast   chan struct{}     // closed and replaced on every event (wakes watches)
	bad     map[string]string // revision (sha) → apply failure message
	srcDown bool
	ksDown  bool
	reqs    map[string]int // "METHOD resource" → count (for tests)
	closed  chan struct{}
	wg      sync.WaitGroup
}

// Option configures New.
type Option func(*Server)

// WithStep sets the delay between two status transitions of the fake controllers (default 5ms).
func WithStep(d time.Duration) Option { return func(s *Server) { s.step = d } }

// New starts the fake on a loopback port; resolve answers the sources' branch heads.
func New(resolve Resolver, opts ...Option) *Server {
	s := &Server{resolve: resolve, step: 5 * time.Millisecond, now: time.Now,
		objs: map[string]map[string]map[string]any{}, changed: make(chan struct{}, 1), bad: map[string]string{},
		reqs: map[string]int{}, closed: make(chan struct{}), bcast: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	for r := range kinds {
		s.objs[r] = map[string]map[string]any{}
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.wg.Add(1)
	go s.controllers()
	return s
}

// URL is the API server's base URL (a rest.Config Host).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the controllers and the server.
func (s *Server) Close() {
	select {
	case <-s.closed:
		return
	default:
	}
	close(s.closed)
	s.srv.CloseClientConnections()
	s.srv.Close()
	s.wg.Wait()
}

// FailRevision makes every Kustomization applying revision (a commit sha) fail with msg
// (Ready=False, reason HealthCheckFailed), as a bad change does in a real cluster.
func (s *Server) FailRevision(sha, msg string) {
	s.mu.Lock()
	s.bad[sha] = msg
	s.mu.Unlock()
	s.poke()
}

// StopSource stops (true) or restarts (false) the fake source-controller.
func (s *Server) StopSource(down bool) {
	s.mu.Lock()
	s.srcDown = down
	s.mu.Unlock()
	s.poke()
}

// StopKustomize stops (true) or restarts (false) the fake kustomize-controller.
func (s *Server) StopKustomize(down bool) {
	s.mu.Lock()
	s.ksDown = down
	s.mu.Unlock()
	s.poke()
}

// Poll makes every source fetch its branch again (Flux's spec.interval elapsing).
func (s *Server) Poll() {
	s.mu.Lock()
	for _, o := range s.objs["gitrepositories"] {
		setPath(o, true, "status", "_poll")
	}
	s.mu.Unlock()
	s.poke()
}

// Requests is how many requests of method on resource the fake served ("PATCH",
// "kustomizations").
func (s *Server) Requests(method, resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[method+" "+resource]
}

// Compact forgets the watch history, so a watch from any earlier resourceVersion gets 410 Gone
// (etcd compaction).
func (s *Server) Compact() {
	s.mu.Lock()
	s.events = nil
	s.oldest = s.rv + 1
	s.mu.Unlock()
}

// Get returns a copy of an object (nil when absent).
func (s *Server) Get(resource, ns, name string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objs[resource][ns+"/"+name]
	if o == nil {
		return nil
	}
	return clone(o)
}

// Apply creates or replaces an object given as YAML-free JSON-like map (apiVersion and kind
// are filled in). Status is kept when replacing.
func (s *Server) Apply(resource string, obj map[string]any) error {
	if _, ok := kinds[resource]; !ok {
		return fmt.Errorf("fluxtest: unknown resource %q", resource)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ns, name := str(obj, "metadata", "namespace"), str(obj, "metadata", "name")
	if ns == "" {
		ns = "flux-system"
		setPath(obj, ns, "metadata", "namespace")
	}
	if cur := s.objs[resource][ns+"/"+name]; cur != nil {
		merged := clone(obj)
		merged["status"] = cur["status"]
		s.replace(resource, cur, merged)
		return nil
	}
	_, err := s.create(resource, ns, obj)
	return err
}

// poke wakes the controllers.
func (s *Server) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// create stores a new object (s.mu held).
func (s *Server) create(resource, ns string, obj map[string]any) (map[string]any, error) {
	name := str(obj, "metadata", "name")
	if name == "" {
		return nil, fmt.Errorf("metadata.name: Required value")
	}
	if s.objs[resource][ns+"/"+name] != nil {
		return nil, errConflict
	}
	k := kinds[resource]
	o := clone(obj)
	o["apiVersion"], o["kind"] = k.Group+"/"+k.Version, k.Kind
	setPath(o, ns, "metadata", "namespace")
	setPath(o, int64(1), "metadata", "generation")
	setPath(o, fmt.Sprintf("uid-%s-%s-%d", resource, name, s.rv+1), "metadata", "uid")
	setPath(o, s.now().UTC().Format(time.RFC3339), "metadata", "creationTimestamp")
	if _, ok := o["status"]; !ok {
		o["status"] = map[string]any{}
	}
	s.objs[resource][ns+"/"+name] = o
	s.record(resource, "ADDED", o)
	return o, nil
}

// replace swaps cur for next, bumping generation when the spec changed (s.mu held).
func (s *Server) replace(resource string, cur, next map[string]any) {
	gen, _ := getPath(cur, "metadata", "generation").(int64)
	if !jsonEqual(cur["spec"], next["spec"]) {
		gen++
	}
	for _, k := range []string{"uid", "creationTimestamp", "namespace", "name"} {
		setPath(next, getPath(cur, "metadata", k), "metadata", k)
	}
	k := kinds[resource]
	next["apiVersion"], next["kind"] = k.Group+"/"+k.Version, k.Kind
	setPath(next, gen, "metadata", "generation")
	key := str(cur, "metadata", "namespace") + "/" + str(cur, "metadata", "name")
	s.objs[resource][key] = next
	s.record(resource, "MODIFIED", next)
}

// record bumps the resourceVersion, stamps it on o and appends the event (s.mu held).
func (s *Server) record(resource, typ string, o map[string]any) {
	s.rv++
	setPath(o, strconv.FormatInt(s.rv, 10), "metadata", "resourceVersion")
	s.events = append(s.events, event{rv: s.rv, res: resource, typ: typ, obj: clone(o),
		ns: str(o, "metadata", "namespace"), name: str(o, "metadata", "name")})
	s.poke()
	s.broadcast()
}

var errConflict = fmt.Errorf("already exists")

// sortedKeys returns m's keys in order, so the controllers act deterministically.
func sortedKeys(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func str(o map[string]any, path ...string) string {
	v, _ := getPath(o, path...).(string)
	return v
}

func getPath(o map[string]any, path ...string) any {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func setPath(o map[string]any, v any, path ...string) {
	m := o
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	if v == nil {
		delete(m, path[len(path)-1])
		return
	}
	m[path[len(path)-1]] = v
}

// clone deep-copies a JSON-like value through JSON, normalising numbers to int64 where whole.
func clone(o map[string]any) map[string]any {
	b, _ := json.Marshal(o)
	return decode(b)
}

func decode(b []byte) map[string]any {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var out map[string]any
	_ = d.Decode(&out)
	return normalize(out).(map[string]any)
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
