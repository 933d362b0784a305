package argocd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// Preview apps: Argo CD renders only specs it stores, so the resources of an app spec an
// ApplicationSet would generate at a revision (a new environment, changed jsonnet arguments)
// are rendered by storing that spec as a temporary Application in a project that can deploy
// nothing, reading its manifests and deleting it again.
//
// Checked on Argo CD v3.2.11 (realenv): an app whose destination its project does not list is
// refused at create even with validate=false, so the project must list destinations; the
// project's resource rules make every sync fail ("resource :ConfigMap is not permitted in
// project") and a deny window with manualSync false refuses the sync call itself ("cannot
// sync: blocked by sync window"). The agent checks both before it creates an app.

const (
	previewPrefix = "prflow-preview-"
	// previewLabel marks preview apps (value: the agent that made it); the agent neither
	// publishes them as apps nor leaves them behind.
	previewLabel = "prflow.io/preview"
	// DefaultPreviewProject is the AppProject preview apps go to unless Options say otherwise.
	DefaultPreviewProject = "prflow-preview"
	defaultPreviewMaxAge  = 10 * time.Minute
)

// PreviewOptions turn on rendering of changed and new app specs through temporary apps.
type PreviewOptions struct {
	// Enabled lets the agent create and delete apps in Project (opt-in: it writes to Argo CD).
	Enabled bool
	// Project is the AppProject of preview apps (default prflow-preview); see docs/previews.md
	// for the project the agent requires: it refuses a project that could deploy anything.
	Project string
	// MaxAge: preview apps older than this are leftovers (an agent killed mid-preview) and
	// are deleted when the agent starts (default 10m).
	MaxAge time.Duration
}

func (o *PreviewOptions) defaults() {
	if o.Project == "" {
		o.Project = DefaultPreviewProject
	}
	if o.MaxAge <= 0 {
		o.MaxAge = defaultPreviewMaxAge
	}
}

// isPreviewApp reports whether app is a preview app (any agent's): not an app of the
// environment, so not published.
func (a *Agent) isPreviewApp(app *Application) bool {
	return app.Metadata.Labels[previewLabel] != "" && strings.HasPrefix(app.Metadata.Name, previewPrefix) &&
		app.Spec.Project == a.o.Preview.Project
}

// projectSafe checks that project p can deploy nothing: no cluster-scoped kind allowed, every
// namespaced kind denied, and a deny window over all apps at all times that manual syncs do
// not pass. It returns what is wrong, "" when safe.
func projectSafe(p map[string]any) string {
	spec, _ := p["spec"].(map[string]any)
	var why []string
	if l, _ := spec["clusterResourceWhitelist"].([]any); len(l) > 0 {
		why = append(why, "clusterResourceWhitelist must be empty")
	}
	if l, _ := spec["namespaceResourceWhitelist"].([]any); len(l) > 0 {
		why = append(why, "namespaceResourceWhitelist must be empty")
	}
	denyAll := false
	if l, _ := spec["namespaceResourceBlacklist"].([]any); len(l) > 0 {
		for _, r := range l {
			m, _ := r.(map[string]any)
			if m["group"] == "*" && m["kind"] == "*" {
				denyAll = true
			}
		}
	}
	if !denyAll {
		why = append(why, `namespaceResourceBlacklist must hold {group: "*", kind: "*"}`)
	}
	window := false
	ws, _ := spec["syncWindows"].([]any)
	for _, w := range ws {
		m, _ := w.(map[string]any)
		apps, _ := m["applications"].([]any)
		all := false
		for _, x := range apps {
			all = all || x == "*"
		}
		manual, _ := m["manualSync"].(bool)
		d, err := time.ParseDuration(fmt.Sprint(m["duration"]))
		if m["kind"] == "deny" && m["schedule"] == "* * * * *" && all && !manual && err == nil && d >= time.Minute {
			window = true
		}
	}
	if !window {
		why = append(why, `syncWindows must hold a deny window {schedule: "* * * * *", duration: "24h", applications: ["*"]} without manualSync`)
	}
	return strings.Join(why, "; ")
}

// checkPreviewProject reads the preview project and refuses one that could deploy.
func (a *Agent) checkPreviewProject(ctx context.Context) error {
	var p map[string]any
	name := a.o.Preview.Project
	if err := a.argo.do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(name), nil, nil, &p, ""); err != nil {
		e := agent.AsError(err)
		if e.Code == agent.CodeNotFound || e.Code == agent.CodeUnauthorized {
			return agent.Errorf(agent.CodeRejected, "preview apps: AppProject %s: %s (create it as docs/previews.md shows)", name, e.Message)
		}
		return err
	}
	if why := projectSafe(p); why != "" {
		return agent.Errorf(agent.CodeRejected, "preview apps: AppProject %s could deploy what a preview renders, so no preview app is made in it: %s", name, why)
	}
	return nil
}

// previewName is unique per preview: the hash says what it renders, the random tail keeps two
// concurrent previews of the same spec apart.
func previewName(agentID, ref, revision string, spec json.RawMessage) string {
	h := sha256.New()
	for _, s := range []string{agentID, ref, revision, string(spec)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var r [3]byte
	_, _ = rand.Read(r[:])
	return previewPrefix + hex.EncodeToString(h.Sum(nil))[:10] + "-" + hex.EncodeToString(r[:])
}

// previewSpec is spec made safe to store: the preview project, no sync policy (no automated
// sync, no CreateNamespace), the rest (sources, destination, Helm, Kustomize, jsonnet
// settings) as generated, so it renders what the real app would.
func (a *Agent) previewSpec(spec json.RawMessage) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(spec, &m); err != nil {
		return nil, err
	}
	m["project"] = a.o.Preview.Project
	delete(m, "syncPolicy")
	delete(m, "operation")
	return m, nil
}

// renderSpec renders spec (an app spec not stored in Argo CD) at req.Revision through a
// temporary preview app, deleted again whatever happens. It returns the manifests and the name
// Argo CD rendered them for (their tracking ids name it).
func (a *Agent) renderSpec(ctx context.Context, ref string, spec json.RawMessage, req agent.DiffRequest) ([]string, string, error) {
	if err := a.checkPreviewProject(ctx); err != nil {
		return nil, "", err
	}
	body, err := a.previewSpec(spec)
	if err != nil {
		return nil, "", agent.Errorf(agent.CodeInternal, "generated spec of %s: %v", ref, err)
	}
	name := previewName(a.o.AgentID, ref, req.Revision, spec)
	app := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": a.o.Namespace,
			"labels":      map[string]string{previewLabel: labelValue(a.o.AgentID)},
			"annotations": map[string]string{"prflow.io/preview-of": ref, "prflow.io/preview-revision": req.Revision}},
		"spec": body,
	}
	var created Application
	// validate=false: the repo-server check at create would render once more for nothing.
	q := url.Values{"validate": {"false"}}
	if err := a.argo.do(ctx, http.MethodPost, "/api/v1/applications", q, app, &created, name); err != nil {
		e := agent.AsError(err)
		e.Message = "creating preview app " + name + " for " + ref + ": " + e.Message
		if e.Code == agent.CodeUnauthorized {
			e.Message += " (preview apps need applications create, get and delete in project " + a.o.Preview.Project + ")"
		}
		return nil, "", e
	}
	// Deleted also when ctx ends (a cancelled run): the delete gets its own time.
	defer a.deletePreviewApp(context.WithoutCancel(ctx), name)
	var rendered *ManifestResponse
	if srcs, ok := body["sources"].([]any); ok && len(srcs) > 0 {
		pos, revs, why := pinSources(sourcesOf(srcs), req.RepoURL, req.Revision)
		if why != "" {
			return nil, name, agent.Errorf(agent.CodeRejected, "not previewed: %s", why)
		}
		rendered, err = a.argo.ManifestsAt(ctx, name, a.o.Namespace, pos, revs)
	} else {
		rev := req.Revision
		if s, _ := body["source"].(map[string]any); s != nil {
			if c, _ := s["chart"].(string); c != "" {
				return nil, name, agent.Errorf(agent.CodeRejected, "not previewed: the app's source is Helm chart %s from %v; a release repo revision does not render it", c, s["repoURL"])
			}
		}
		rendered, err = a.argo.Manifests(ctx, name, a.o.Namespace, rev)
	}
	if err != nil {
		return nil, name, err
	}
	return rendered.Manifests, name, nil
}

// deletePreviewApp deletes a preview app without cascading (it never deployed anything, and
// a cascade would wait for a finalizer); a failure is left to the sweeper.
func (a *Agent) deletePreviewApp(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	q := url.Values{"cascade": {"false"}, "appNamespace": {a.o.Namespace}}
	err := a.argo.do(ctx, http.MethodDelete, "/api/v1/applications/"+url.PathEscape(name), q, nil, nil, name)
	if err != nil && agent.AsError(err).Code != agent.CodeNotFound {
		a.o.Log.Warn("agent: deleting a preview app failed; the next agent start deletes it", "app", name, "err", err)
	}
}

// sweepPreviews deletes preview apps older than MaxAge: leftovers of an agent that died while
// it rendered one. Younger ones may be another replica's preview in progress.
func (a *Agent) sweepPreviews(ctx context.Context) (int, error) {
	var l struct {
		Items []Application `json:"items"`
	}
	q := url.Values{"projects": {a.o.Preview.Project}, "selector": {previewLabel}}
	if err := a.argo.do(ctx, http.MethodGet, "/api/v1/applications", q, nil, &l, ""); err != nil {
		return 0, err
	}
	n := 0
	now := a.now()
	for i := range l.Items {
		app := &l.Items[i]
		if !a.isPreviewApp(app) || app.Metadata.CreationTimestamp == nil || now.Sub(*app.Metadata.CreationTimestamp) < a.o.Preview.MaxAge {
			continue
		}
		a.deletePreviewApp(ctx, app.Metadata.Name)
		n++
	}
	if n > 0 {
		a.o.Log.Info("agent: deleted leftover preview apps", "apps", n, "olderThan", a.o.Preview.MaxAge.String())
	}
	return n, nil
}

// labelValue makes s a valid label value (63 characters of [A-Za-z0-9._-]).
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	s = strings.Trim(string(b), "-_.")
	if len(s) > 63 {
		s = strings.Trim(s[:63], "-_.")
	}
	if s == "" {
		s = "agent"
	}
	return s
}

// ---- multi-source apps ----

// ManifestsAt renders a multi-source app with the sources at positions (1-based) at revisions
// (GET .../manifests?sourcePositions=…&revisions=…, Argo CD v3); the other sources render at
// their targetRevision.
func (c *Client) ManifestsAt(ctx context.Context, name, appNamespace string, positions []int, revisions []string) (*ManifestResponse, error) {
	q := url.Values{}
	for i, p := range positions {
		q.Add("sourcePositions", strconv.Itoa(p))
		q.Add("revisions", revisions[i])
	}
	var m ManifestResponse
	if err := c.getApp(ctx, name, appNamespace, "/manifests", q, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

func sourcesOf(l []any) []Source {
	out := make([]Source, 0, len(l))
	for _, x := range l {
		m, _ := x.(map[string]any)
		var s Source
		s.RepoURL, _ = m["repoURL"].(string)
		s.Path, _ = m["path"].(string)
		s.Chart, _ = m["chart"].(string)
		s.TargetRevision, _ = m["targetRevision"].(string)
		out = append(out, s)
	}
	return out
}

// pinSources picks the sources of a multi-source app that read the release repo (git sources,
// not Helm charts) to render at revision. Without a repo to match, one git repo among the
// sources is taken as the release repo; several are ambiguous. why says what stops a preview.
func pinSources(srcs []Source, repo, revision string) (positions []int, revisions []string, why string) {
	var gitRepos []string
	for _, s := range srcs {
		if s.Chart == "" && !containsRepo(gitRepos, s.RepoURL) {
			gitRepos = append(gitRepos, s.RepoURL)
		}
	}
	if repo == "" {
		if len(gitRepos) != 1 {
			return nil, nil, fmt.Sprintf("the app has %d sources from %d git repos (%s) and the preview names no release repo to render at %s",
				len(srcs), len(gitRepos), strings.Join(gitRepos, ", "), short(revision))
		}
		repo = gitRepos[0]
	}
	for i, s := range srcs {
		if s.Chart == "" && SameRepo(s.RepoURL, repo) {
			positions = append(positions, i+1)
			revisions = append(revisions, revision)
		}
	}
	if len(positions) == 0 {
		return nil, nil, fmt.Sprintf("none of the app's %d sources reads repo %s (sources: %s)", len(srcs), repo, strings.Join(gitRepos, ", "))
	}
	return positions, revisions, ""
}

func containsRepo(l []string, r string) bool {
	for _, x := range l {
		if SameRepo(x, r) {
			return true
		}
	}
	return false
}

// ---- rendering for a preview ----

// render renders app at req.Revision: with spec (its spec at the revision) through a preview
// app, else its stored spec, a multi-source app with the sources that read the release repo
// at the revision. It returns the name Argo CD rendered for.
func (a *Agent) render(ctx context.Context, app *Application, name, ns string, spec json.RawMessage, req agent.DiffRequest) (*ManifestResponse, string, error) {
	if spec != nil {
		m, as, err := a.renderSpec(ctx, a.refOf(name, ns), spec, req)
		if err != nil {
			return nil, "", err
		}
		return &ManifestResponse{Manifests: m}, as, nil
	}
	if why := notPreviewable(app, nil, req); why != "" {
		return nil, "", agent.Errorf(agent.CodeRejected, "not previewed: %s", why)
	}
	if len(app.Spec.Sources) > 0 {
		pos, revs, _ := pinSources(app.Spec.Sources, req.RepoURL, req.Revision)
		m, err := a.argo.ManifestsAt(ctx, name, ns, pos, revs)
		return m, name, err
	}
	m, err := a.argo.Manifests(ctx, name, ns, req.Revision)
	return m, name, err
}

// notPreviewable says why the stored spec of app cannot be rendered at a release repo
// revision ("" when it can; a spec to render through a preview app is checked there).
func notPreviewable(app *Application, spec json.RawMessage, req agent.DiffRequest) string {
	if spec != nil {
		return ""
	}
	if len(app.Spec.Sources) > 0 {
		_, _, why := pinSources(app.Spec.Sources, req.RepoURL, req.Revision)
		return why
	}
	if s := app.Spec.Source; s != nil && s.Chart != "" {
		return fmt.Sprintf("the app's source is Helm chart %s %s from %s; a revision of the release repo does not render it", s.Chart, s.TargetRevision, s.RepoURL)
	}
	return ""
}

// renderError is what an app's preview says when Argo CD did not render it.
func renderError(err error, revision string) string {
	msg := agent.AsError(err).Message
	if strings.HasPrefix(msg, "not previewed: ") || strings.HasPrefix(msg, "preview apps: ") {
		return msg
	}
	return fmt.Sprintf("Argo CD cannot render the app at %s: %s", short(revision), msg)
}

// diffNewApp previews an app the ApplicationSet would create: every object its generated spec
// renders at the revision is added.
func (a *Agent) diffNewApp(ctx context.Context, ref string, spec json.RawMessage, req agent.DiffRequest) (*agent.AppDiff, bool, error) {
	key := diffKey{ref: ref, revision: req.Revision, rv: "\x00new", max: req.MaxDiffBytes, spec: specHash(spec)}
	if d, ok := a.diffs.get(key); ok {
		return d, true, nil
	}
	d := &agent.AppDiff{App: ref}
	m, as, err := a.renderSpec(ctx, ref, spec, req)
	if err != nil {
		if transient(err) && !renderFailure(err) {
			return nil, false, err
		}
		d.Error = renderError(err, req.Revision)
		return d, false, nil
	}
	if err := compareAppAs(d, m, nil, specDestNS(spec), "", as, req.MaxDiffBytes); err != nil {
		d.Error = err.Error()
		return d, false, nil
	}
	if shaRe.MatchString(req.Revision) {
		a.diffs.put(key, d)
	}
	return d, false, nil
}

func specHash(spec json.RawMessage) string {
	if spec == nil {
		return ""
	}
	h := sha256.Sum256(spec)
	return hex.EncodeToString(h[:])
}

// specDestNS is the destination namespace of a raw app spec.
func specDestNS(spec json.RawMessage) string {
	var s struct {
		Destination struct {
			Namespace string `json:"namespace"`
		} `json:"destination"`
	}
	_ = json.Unmarshal(spec, &s)
	return s.Destination.Namespace
}
