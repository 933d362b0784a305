package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prflow/prflow/deploy/agent"
)

// ---- the Argo CD calls of a preview ----

// ManifestResponse is repositoryManifestResponse (GET /api/v1/applications/{name}/manifests):
// the app's manifests rendered by Argo CD's repo-server at a revision, as JSON strings.
type ManifestResponse struct {
	Manifests  []string `json:"manifests"`
	Namespace  string   `json:"namespace"`
	Revision   string   `json:"revision"`
	SourceType string   `json:"sourceType"`
}

// Manifests renders an app's stored spec at revision (Argo CD renders with its own Helm,
// Kustomize, jsonnet and plugins; Secret data comes back masked).
func (c *Client) Manifests(ctx context.Context, name, appNamespace, revision string) (*ManifestResponse, error) {
	q := url.Values{}
	if revision != "" {
		q.Set("revision", revision)
	}
	var m ManifestResponse
	if err := c.getApp(ctx, name, appNamespace, "/manifests", q, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// ManagedResource is v1alpha1ResourceDiff: one object of an app as the controller compared it.
// The states are JSON strings, "null" when the object is absent on that side.
type ManagedResource struct {
	Group               string `json:"group"`
	Kind                string `json:"kind"`
	Namespace           string `json:"namespace"`
	Name                string `json:"name"`
	TargetState         string `json:"targetState"`
	LiveState           string `json:"liveState"`
	NormalizedLiveState string `json:"normalizedLiveState"`
	PredictedLiveState  string `json:"predictedLiveState"`
	Hook                bool   `json:"hook"`
	Modified            bool   `json:"modified"`
}

// ManagedResources reads the controller's last comparison of an app (GET
// /api/v1/applications/{name}/managed-resources). v3.2.11 normalises the live states with the
// app's ignoreDifferences, not targetState (checked on realenv), so targetState compares with
// freshly rendered manifests as they are.
func (c *Client) ManagedResources(ctx context.Context, name, appNamespace string) ([]ManagedResource, error) {
	var r struct {
		Items []ManagedResource `json:"items"`
	}
	if err := c.getApp(ctx, name, appNamespace, "/managed-resources", nil, &r); err != nil {
		return nil, err
	}
	return r.Items, nil
}

// GeneratedApp is one Application an ApplicationSet generates: name and raw spec.
type GeneratedApp struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// GenerateAppSet asks Argo CD which Applications an ApplicationSet object would generate (POST
// /api/v1/applicationsets/generate; needs applicationsets create permission). Nothing is
// written.
func (c *Client) GenerateAppSet(ctx context.Context, set map[string]any) ([]GeneratedApp, error) {
	var r struct {
		Applications []GeneratedApp `json:"applications"`
	}
	body := map[string]any{"applicationSet": set}
	if err := c.do(ctx, http.MethodPost, "/api/v1/applicationsets/generate", nil, body, &r, ""); err != nil {
		return nil, err
	}
	return r.Applications, nil
}

// appSpec is an app's name, owner and raw spec.
type appSpec struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
		OwnerReferences []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

func (c *Client) listSpecs(ctx context.Context) ([]appSpec, error) {
	var l struct {
		Items []appSpec `json:"items"`
	}
	// No ?fields=: v3.2.11 drops metadata.ownerReferences and resourceVersion from a list
	// filtered with them (checked on realenv), as it drops a plain items.metadata.
	if err := c.do(ctx, http.MethodGet, "/api/v1/applications", nil, nil, &l, ""); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ---- the preview ----

// revisionRe is what the agent passes on as a revision: a SHA, branch or tag name.
var revisionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$`)

var shaRe = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

const defaultMaxDiffBytes = 64 << 10

// Diff implements agent.Differ: for each app, the manifests Argo CD renders at req.Revision
// compared with the target the controller compares the app with now, and for an
// ApplicationSet the changes of the apps it would generate at req.Revision.
func (a *Agent) Diff(ctx context.Context, req agent.DiffRequest) ([]agent.AppDiff, error) {
	a.served.Add(1)
	if !revisionRe.MatchString(req.Revision) || strings.Contains(req.Revision, "..") {
		return nil, agent.Errorf(agent.CodeInvalid, "diff: revision %q is not a commit SHA, branch or tag", req.Revision)
	}
	if req.MaxDiffBytes <= 0 {
		req.MaxDiffBytes = defaultMaxDiffBytes
	}
	out := map[string]*agent.AppDiff{}
	var render []string
	var specs map[string]json.RawMessage
	if req.ApplicationSet != "" {
		gen, existing, sp, err := a.previewAppSet(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, d := range gen {
			out[d.App] = d
		}
		render = append(render, existing...)
		if a.o.Preview.Enabled {
			specs = sp
			for ref, d := range gen {
				if d.Created && sp[ref] != nil {
					render = append(render, ref)
				}
			}
		}
	}
	for _, ref := range req.Apps {
		if _, ok := out[ref]; !ok {
			out[ref] = &agent.AppDiff{App: ref}
		}
		render = append(render, ref)
	}
	seen := map[string]bool{}
	var todo []string
	for _, ref := range render {
		if !seen[ref] {
			seen[ref] = true
			todo = append(todo, ref)
		}
	}
	sort.Strings(todo)
	results := make([]*agent.AppDiff, len(todo))
	var cached atomic.Int64
	errs := make([]error, len(todo))
	sem := make(chan struct{}, a.o.SyncConcurrency)
	var wg sync.WaitGroup
	for i, ref := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var hit bool
			if d := out[ref]; d.Created {
				results[i], hit, errs[i] = a.diffNewApp(ctx, ref, specs[ref], req)
			} else {
				results[i], hit, errs[i] = a.diffApp(ctx, ref, req, specs[ref])
			}
			if hit {
				cached.Add(1)
			}
		}()
	}
	wg.Wait()
	for i, ref := range todo {
		if errs[i] != nil {
			// Argo CD could not work (or refused the agent): the whole preview is retried later,
			// never read as "no change".
			return nil, errs[i]
		}
		d := out[ref]
		r := results[i]
		d.URL, d.Resources, d.Unchanged, d.Truncated = r.URL, r.Resources, r.Unchanged, r.Truncated
		d.SecretsNotCompared = r.SecretsNotCompared
		if r.Error != "" {
			d.Error = r.Error
		} else if specs[ref] != nil {
			d.SpecNotRendered = false // rendered with the new spec (a preview app)
		}
	}
	for _, d := range out {
		if d.Deleted {
			if err := a.diffDeleted(ctx, d, req.MaxDiffBytes); err != nil {
				return nil, err
			}
		}
	}
	list := make([]agent.AppDiff, 0, len(out))
	changed, failed := 0, 0
	for _, d := range out {
		d.Agent = a.o.AgentID
		list = append(list, *d)
		if d.Changed() {
			changed++
		}
		if d.Error != "" {
			failed++
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].App < list[j].App })
	// Counts only: what changed stays in the reply (a Secret's keys are names, but a log is
	// read by more people than a PR).
	a.o.Log.Info("previewed revision", "revision", short(req.Revision), "applicationSet", req.ApplicationSet,
		"apps", len(list), "changed", changed, "failed", failed, "rendered", len(todo), "cached", int(cached.Load()))
	return list, nil
}

// transient reports whether err means Argo CD cannot answer now (the preview as a whole fails
// with it) rather than something wrong with this app at this revision.
func transient(err error) bool {
	var e *agent.Error
	if !errors.As(err, &e) {
		return true // context ended and the like
	}
	switch e.Code {
	case agent.CodeUnavailable, agent.CodeUnreachable, agent.CodeTimeout, agent.CodeUnauthorized, agent.CodeInternal:
		return true
	}
	return false
}

// renderFailure reports whether a manifests error is the repo-server failing to render the
// app at the revision (a broken chart or jsonnet, a revision that does not exist): Argo CD
// answers it as a 500 with gRPC Unknown, which would otherwise read as "cannot work now".
func renderFailure(err error) bool {
	var e *agent.Error
	if !errors.As(err, &e) || agent.UnavailableText(e.Message) {
		return false
	}
	if e.Code != agent.CodeUnavailable && e.Code != agent.CodeInternal && e.Code != agent.CodeRejected {
		return false
	}
	for _, t := range []string{"Manifest generation error", "failed to generate manifest", "error generating manifests", "Unable to resolve", "unable to resolve"} {
		if strings.Contains(e.Message, t) {
			return true
		}
	}
	return false
}

// diffApp previews one app; the answer for the same app state and revision comes from memory.
// A non-nil spec is the app's spec at the revision (an ApplicationSet changes it): rendered
// through a preview app instead of the stored one.
func (a *Agent) diffApp(ctx context.Context, ref string, req agent.DiffRequest, spec json.RawMessage) (*agent.AppDiff, bool, error) {
	name, ns := a.split(ref)
	app, err := a.appForDiff(ctx, ref, name, ns)
	if err != nil {
		if transient(err) {
			return nil, false, err
		}
		return &agent.AppDiff{App: ref, Error: agent.AsError(err).Message}, false, nil
	}
	key := diffKey{ref: ref, revision: req.Revision, rv: app.Metadata.ResourceVersion, max: req.MaxDiffBytes, spec: specHash(spec), repo: req.RepoURL}
	if d, ok := a.diffs.get(key); ok {
		return d, true, nil
	}
	d := &agent.AppDiff{App: ref, URL: a.status(app).URL}
	if why := notPreviewable(app, spec, req); why != "" {
		// Says so whatever the app's state: the app's sources decide it, not Argo CD.
		d.Error = "not previewed: " + why
		return d, false, nil
	}
	if app.Status.Sync.Status == "" {
		// Not compared yet (a new app): its managed resources are empty, and the whole app
		// would read as added.
		return nil, false, &agent.Error{Code: agent.CodeUnavailable, App: ref, Message: "Argo CD has not compared the app with git yet"}
	}
	for _, c := range app.Status.Conditions {
		if c.Type == "ComparisonError" {
			// Without a current comparison the "before" side is not known; an answer would
			// show the whole app as added.
			d.Error = fmt.Sprintf("Argo CD cannot compare the app's current state (ComparisonError: %s)", c.Message)
			if agent.UnavailableText(c.Message) {
				return nil, false, &agent.Error{Code: agent.CodeUnavailable, App: ref, Message: d.Error}
			}
			return d, false, nil
		}
	}
	man, renderedAs, err := a.render(ctx, app, name, ns, spec, req)
	if err != nil {
		if transient(err) && !renderFailure(err) {
			return nil, false, err
		}
		d.Error = renderError(err, req.Revision)
		return d, false, nil
	}
	cur, err := a.argo.ManagedResources(ctx, name, ns)
	if err != nil {
		if transient(err) {
			return nil, false, err
		}
		d.Error = "reading the app's current resources: " + agent.AsError(err).Message
		return d, false, nil
	}
	destNS := firstNonEmpty(man.Namespace, app.Spec.Destination.Namespace)
	if spec != nil {
		destNS = firstNonEmpty(specDestNS(spec), destNS)
	}
	if err := compareAppAs(d, man.Manifests, cur, destNS, app.Metadata.Name, renderedAs, req.MaxDiffBytes); err != nil {
		d.Error = err.Error()
		return d, false, nil
	}
	if shaRe.MatchString(req.Revision) {
		a.diffs.put(key, d)
	}
	return d, false, nil
}

// diffDeleted lists the objects an app the ApplicationSet would no longer generate deploys
// now: Argo CD deletes them with the app (the resources finalizer generated apps carry).
func (a *Agent) diffDeleted(ctx context.Context, d *agent.AppDiff, maxBytes int) error {
	name, ns := a.split(d.App)
	app, err := a.appForDiff(ctx, d.App, name, ns)
	var key diffKey
	if err == nil {
		key = diffKey{ref: d.App, revision: "\x00deleted", rv: app.Metadata.ResourceVersion, max: maxBytes}
		if c, ok := a.diffs.get(key); ok {
			d.URL, d.Resources, d.Truncated, d.Error = c.URL, c.Resources, c.Truncated, c.Error
			return nil
		}
		d.URL = a.status(app).URL
		var cur []ManagedResource
		if cur, err = a.argo.ManagedResources(ctx, name, ns); err == nil {
			err = compareApp(d, nil, cur, app.Spec.Destination.Namespace, app.Metadata.Name, maxBytes)
		}
	}
	if err != nil {
		if transient(err) {
			return err
		}
		d.Error = "reading the resources of the app to be deleted: " + agent.AsError(err).Message
		return nil
	}
	a.diffs.put(key, d)
	return nil
}

// appForDiff is the app as the watch last saw it when this replica leads and its view is
// current (no call to Argo CD), else read from Argo CD.
func (a *Agent) appForDiff(ctx context.Context, ref, name, ns string) (*Application, error) {
	if a.leader.Load() && !a.stale.Load() {
		if v, ok := a.known.Load(ref); ok {
			return v.(*Application), nil
		}
	}
	return a.argo.Get(ctx, name, ns, "")
}

// remember keeps the app the watch or a re-list reported, for appForDiff; an older version
// (a re-list racing the stream) does not replace a newer one.
func (a *Agent) remember(app *Application, deleted bool) {
	st := a.status(app)
	ref := st.Ref()
	if deleted {
		a.known.Delete(ref)
		return
	}
	cp := *app
	for {
		prev, loaded := a.known.LoadOrStore(ref, &cp)
		if !loaded {
			return
		}
		if olderRV(cp.Metadata.ResourceVersion, prev.(*Application).Metadata.ResourceVersion) {
			return
		}
		if a.known.CompareAndSwap(ref, prev, &cp) {
			return
		}
	}
}

// compareApp fills d with the change from the current objects to the rendered ones.
func compareApp(d *agent.AppDiff, rendered []string, cur []ManagedResource, destNS, appName string, maxBytes int) error {
	return compareAppAs(d, rendered, cur, destNS, appName, appName, maxBytes)
}

// compareAppAs is compareApp for manifests Argo CD rendered for another app (renderedAs, a
// preview app): its tracking marks are dropped as the app's own are.
func compareAppAs(d *agent.AppDiff, rendered []string, cur []ManagedResource, destNS, appName, renderedAs string, maxBytes int) error {
	before := map[string]*kobj{}
	liveOnly := map[string]*kobj{}
	for _, r := range cur {
		o, err := parseObject(r.TargetState, destNS, appName)
		if err != nil {
			return fmt.Errorf("Argo CD's target state of %s %s: %v", r.Kind, r.Name, err)
		}
		if o != nil {
			before[o.key()] = o
			continue
		}
		// Not in the current target (awaiting pruning): compared only if the revision
		// renders it again.
		if o, err = parseObject(r.NormalizedLiveState, destNS, appName); err == nil && o != nil {
			liveOnly[o.key()] = o
		}
	}
	after := map[string]*kobj{}
	for i, m := range rendered {
		o, err := parseObject(m, destNS, renderedAs)
		if err != nil {
			return fmt.Errorf("rendered manifest %d: %v", i+1, err)
		}
		if o == nil {
			continue
		}
		if o.defaultedNS && before[o.key()] == nil {
			// Argo CD knows the kind as cluster-scoped (its target has no namespace).
			if b := before[o.group+"/"+o.kind+"//"+o.name]; b != nil {
				o.namespace = ""
				delete(o.obj["metadata"].(map[string]any), "namespace")
			}
		}
		after[o.key()] = o
	}
	size := 0
	for _, k := range unionKeys(before, after) {
		old := before[k]
		if old == nil {
			old = liveOnly[k]
		}
		rd := compareObjects(old, after[k])
		if keys := maskedOnBothSides(old, after[k]); len(keys) > 0 {
			o := after[k]
			d.SecretsNotCompared = append(d.SecretsNotCompared, fmt.Sprintf("%s/%s: %s", o.namespace, o.name, strings.Join(keys, ", ")))
		}
		if rd == nil {
			d.Unchanged++
			continue
		}
		if size+len(rd.Diff) > maxBytes {
			rd.Diff = ""
			d.Truncated = true
		}
		size += len(rd.Diff)
		d.Resources = append(d.Resources, *rd)
	}
	return nil
}

func short(rev string) string {
	if shaRe.MatchString(rev) {
		return rev[:12]
	}
	return rev
}

// ---- ApplicationSets ----

// previewAppSet asks Argo CD what the set would generate with its git generators reading
// req.Revision, and compares that with the apps it owns now. It returns the diffs of created,
// deleted and changed apps, the refs of existing generated apps to render, and the generated
// specs of created apps and of apps whose spec changes (to render through preview apps).
func (a *Agent) previewAppSet(ctx context.Context, req agent.DiffRequest) (map[string]*agent.AppDiff, []string, map[string]json.RawMessage, error) {
	ns, name, ok := strings.Cut(req.ApplicationSet, "/")
	if !ok {
		ns, name = "", req.ApplicationSet
	}
	set, err := a.argo.GetAppSet(ctx, name, ns)
	if err != nil {
		e := agent.AsError(err)
		e.Message = "ApplicationSet " + req.ApplicationSet + ": " + e.Message
		return nil, nil, nil, e
	}
	key := setKey{set: set.ref(), rv: set.Metadata.ResourceVersion, revision: req.Revision, repo: req.RepoURL}
	if out, render, specs, ok := a.setPreviews.get(key, a.currentRV, func() []string { return a.ownedBy(name) }); ok {
		return out, render, specs, nil
	}
	var obj map[string]any
	if err := json.Unmarshal(set.raw, &obj); err != nil {
		return nil, nil, nil, &agent.Error{Code: agent.CodeInternal, Message: fmt.Sprintf("ApplicationSet %s: %v", req.ApplicationSet, err)}
	}
	delete(obj, "status")
	if md, ok := obj["metadata"].(map[string]any); ok {
		for _, k := range serverMetadata {
			delete(md, k)
		}
	}
	spec, _ := obj["spec"].(map[string]any)
	gens, _ := spec["generators"].([]any)
	if n := pinGitGenerators(gens, req.RepoURL, req.Revision, 0); n == 0 {
		return nil, nil, nil, agent.Errorf(agent.CodeInvalid, "ApplicationSet %s has no git generator reading repo %q, so revision %s changes nothing it generates",
			req.ApplicationSet, req.RepoURL, short(req.Revision))
	}
	generated, err := a.argo.GenerateAppSet(ctx, obj)
	if err != nil {
		e := agent.AsError(err)
		e.Message = fmt.Sprintf("ApplicationSet %s at %s: %s", req.ApplicationSet, short(req.Revision), e.Message)
		switch {
		case e.Code == agent.CodeUnauthorized:
			e.Message += " (previewing an ApplicationSet needs applicationsets create permission for the agent's token)"
		case e.Code == agent.CodeUnavailable && !agent.UnavailableText(e.Message):
			// Argo CD answers a generator that fails at this revision (a config file that
			// does not parse, a revision it cannot resolve) with a 500: the revision's
			// problem, which retrying does not cure.
			e.Code = agent.CodeRejected
		}
		return nil, nil, nil, e
	}
	apps, err := a.argo.listSpecs(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	owned := map[string]appSpec{}
	existing := map[string]appSpec{}
	for _, s := range apps {
		ref := a.refOf(s.Metadata.Name, s.Metadata.Namespace)
		existing[ref] = s
		for _, o := range s.Metadata.OwnerReferences {
			if o.Kind == "ApplicationSet" && o.Name == name {
				owned[ref] = s
			}
		}
	}
	out := map[string]*agent.AppDiff{}
	specs := map[string]json.RawMessage{}
	var render []string
	for _, g := range generated {
		ref := a.refOf(g.Metadata.Name, firstNonEmpty(g.Metadata.Namespace, ns))
		cur, ok := existing[ref]
		if !ok {
			// SpecNotRendered until a preview app renders it (Diff).
			out[ref] = &agent.AppDiff{App: ref, Created: true, SpecChanges: specChanges(nil, g.Spec), SpecNotRendered: true}
			specs[ref] = g.Spec
			continue
		}
		sc := specChanges(cur.Spec, g.Spec)
		out[ref] = &agent.AppDiff{App: ref, SpecChanges: sc, SpecNotRendered: len(sc) > 0}
		if len(sc) > 0 {
			specs[ref] = g.Spec
		}
		render = append(render, ref)
		delete(owned, ref)
	}
	for ref := range owned {
		out[ref] = &agent.AppDiff{App: ref, Deleted: true}
	}
	if shaRe.MatchString(req.Revision) && set.Metadata.ResourceVersion != "" {
		seen := map[string]string{}
		for ref := range out {
			if s, ok := existing[ref]; ok {
				seen[ref] = s.Metadata.ResourceVersion
			}
		}
		a.setPreviews.put(key, out, render, specs, seen)
	}
	return out, render, specs, nil
}

// currentRV is an app's resourceVersion as the watch last saw it ("" when this replica does
// not lead, its view is stale, or the app is unknown).
func (a *Agent) currentRV(ref string) (string, bool) {
	if !a.leader.Load() || a.stale.Load() {
		return "", false
	}
	v, ok := a.known.Load(ref)
	if !ok {
		return "", true
	}
	return v.(*Application).Metadata.ResourceVersion, true
}

// ownedBy are the apps the watch last saw owned by ApplicationSet name.
func (a *Agent) ownedBy(name string) []string {
	var out []string
	a.known.Range(func(k, v any) bool {
		for _, o := range v.(*Application).Metadata.OwnerReferences {
			if o.Kind == "ApplicationSet" && o.Name == name {
				out = append(out, k.(string))
			}
		}
		return true
	})
	return out
}

type setKey struct{ set, rv, revision, repo string }

type setPreview struct {
	out    map[string]*agent.AppDiff
	render []string
	specs  map[string]json.RawMessage
	apps   map[string]string // every app's resourceVersion when the preview was made
}

// setCache keeps ApplicationSet previews: the same set (resourceVersion) generated at the same
// commit generates the same apps; the comparison with the existing apps holds while none of
// them changed, which only a leader with a current view can tell without asking Argo CD.
type setCache struct {
	mu    sync.Mutex
	m     map[setKey]*setPreview
	order []setKey
}

func (c *setCache) get(k setKey, rv func(string) (string, bool), owned func() []string) (map[string]*agent.AppDiff, []string, map[string]json.RawMessage, bool) {
	c.mu.Lock()
	p, ok := c.m[k]
	c.mu.Unlock()
	if !ok {
		return nil, nil, nil, false
	}
	// The apps now must be the apps then: none changed, none added (a new app of the same
	// name would decide Created), none gone.
	for ref, want := range p.apps {
		if got, fresh := rv(ref); !fresh || got != want {
			return nil, nil, nil, false
		}
	}
	for ref := range p.out {
		if _, had := p.apps[ref]; !had {
			if got, fresh := rv(ref); !fresh || got != "" {
				return nil, nil, nil, false
			}
		}
	}
	for _, ref := range owned() {
		if _, ok := p.out[ref]; !ok {
			return nil, nil, nil, false // a new app of the set: it would be reported deleted
		}
	}
	out := make(map[string]*agent.AppDiff, len(p.out))
	for ref, d := range p.out {
		cp := *d
		cp.SpecChanges = append([]string(nil), d.SpecChanges...)
		cp.Resources = nil
		out[ref] = &cp
	}
	return out, append([]string(nil), p.render...), p.specs, true
}

func (c *setCache) put(k setKey, out map[string]*agent.AppDiff, render []string, specs map[string]json.RawMessage, apps map[string]string) {
	cp := make(map[string]*agent.AppDiff, len(out))
	for ref, d := range out {
		x := *d
		x.SpecChanges = append([]string(nil), d.SpecChanges...)
		cp[ref] = &x
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[setKey]*setPreview{}
	}
	if _, ok := c.m[k]; !ok {
		c.order = append(c.order, k)
	}
	c.m[k] = &setPreview{out: cp, render: append([]string(nil), render...), specs: specs, apps: apps}
	for len(c.order) > diffCacheSize/8 {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

// refOf is an app's ref: its name, "namespace/name" outside Argo CD's own namespace.
func (a *Agent) refOf(name, ns string) string {
	if ns == "" || ns == a.o.Namespace {
		return name
	}
	return ns + "/" + name
}

// pinGitGenerators points the git generators (nested in matrix and merge too) that read repo
// at revision and counts them.
func pinGitGenerators(gens []any, repo, revision string, depth int) int {
	n := 0
	for _, g := range gens {
		m, _ := g.(map[string]any)
		if git, ok := m["git"].(map[string]any); ok {
			if u, _ := git["repoURL"].(string); repo == "" || SameRepo(u, repo) {
				git["revision"] = revision
				n++
			}
		}
		for _, k := range []string{"matrix", "merge"} {
			if sub, ok := m[k].(map[string]any); ok && depth < 3 {
				inner, _ := sub["generators"].([]any)
				n += pinGitGenerators(inner, repo, revision, depth+1)
			}
		}
	}
	return n
}

// specChanges lists how an app's spec changes, as "path: old → new".
func specChanges(old, new json.RawMessage) []string {
	a, b := flattenSpec(old), flattenSpec(new)
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		x, inA := a[k]
		y, inB := b[k]
		switch {
		case inA && inB && x == y:
		case old == nil:
			out = append(out, k+": "+y)
		default:
			if !inA {
				x = "(none)"
			}
			if !inB {
				y = "(none)"
			}
			out = append(out, k+": "+x+" → "+y)
		}
	}
	sort.Strings(out)
	return out
}

// flattenSpec flattens a spec into dotted paths and scalar values. Lists of named items
// (jsonnet TLAs, Helm parameters) are keyed by name, so "source.directory.jsonnet.tlas.image"
// names an argument whatever its position.
func flattenSpec(raw json.RawMessage) map[string]string {
	out := map[string]string{}
	if len(raw) == 0 {
		return out
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return out
	}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				walk(x, joinPath(path, k))
			}
		case []any:
			if named(t) {
				for _, it := range t {
					m := it.(map[string]any)
					p := joinPath(path, m["name"].(string))
					for k, x := range m {
						switch k {
						case "name":
						case "value":
							walk(x, p)
						default:
							walk(x, joinPath(p, k))
						}
					}
				}
				return
			}
			for i, x := range t {
				walk(x, fmt.Sprintf("%s[%d]", path, i))
			}
		case nil:
		case string:
			if t != "" {
				out[path] = t
			}
		default:
			b, _ := json.Marshal(t)
			out[path] = string(b)
		}
	}
	walk(v, "")
	return out
}

func named(l []any) bool {
	if len(l) == 0 {
		return false
	}
	seen := map[string]bool{}
	for _, it := range l {
		m, ok := it.(map[string]any)
		if !ok {
			return false
		}
		n, ok := m["name"].(string)
		if !ok || n == "" || seen[n] {
			return false
		}
		seen[n] = true
	}
	return true
}

// ---- cache ----

type diffKey struct {
	ref, revision, rv string
	max               int
	spec              string // hash of the spec rendered through a preview app ("" for the stored one)
	repo              string // the release repo: picks the sources of a multi-source app
}

// diffCache keeps the latest previews: the same app state (resourceVersion) rendered at the
// same commit gives the same answer, so a repeated preview costs Argo CD nothing.
type diffCache struct {
	mu    sync.Mutex
	m     map[diffKey]*agent.AppDiff
	order []diffKey
}

const diffCacheSize = 512

func (c *diffCache) get(k diffKey) (*agent.AppDiff, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[k]
	if !ok {
		return nil, false
	}
	cp := *d
	cp.Resources = append([]agent.ResourceDiff(nil), d.Resources...)
	return &cp, true
}

func (c *diffCache) put(k diffKey, d *agent.AppDiff) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[diffKey]*agent.AppDiff{}
	}
	if _, ok := c.m[k]; !ok {
		c.order = append(c.order, k)
	}
	cp := *d
	cp.Resources = append([]agent.ResourceDiff(nil), d.Resources...)
	c.m[k] = &cp
	for len(c.order) > diffCacheSize {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}
