package argocd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

// safePreviewProject makes the fake's prflow-preview project as docs/previews.md says: no kind
// permitted, a deny window over every app that manual syncs do not pass.
func safePreviewProject(t *testing.T, s *argocdtest.Server) {
	t.Helper()
	s.SetProjectResources(DefaultPreviewProject, argocdtest.ProjectResources{
		NamespaceBlacklist: []argocdtest.GroupKind{{Group: "*", Kind: "*"}}})
	if err := s.SetSyncWindows(DefaultPreviewProject, argocdtest.SyncWindow{Kind: "deny", Schedule: "* * * * *", Duration: "24h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
}

const variantCM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  variant: %s\n  simulate: healthy\n"

// variantWorld: ApplicationSet "web" generates web-<env> from envs/<env>/config.json; the
// config's variant picks the manifests directory, so a config change is a spec change whose
// resources differ (the fake renders directories, not jsonnet).
func variantWorld(t *testing.T, preview bool) *world {
	t.Helper()
	w := newWorld(t)
	cfg := func(v string) string { return `{"variant": "` + v + `"}` }
	w.sha = w.git.Commit(repoURL, "main", map[string]string{
		"manifests/a/cm.yaml":  strings.Replace(variantCM, "%s", "a", 1),
		"manifests/b/cm.yaml":  strings.Replace(variantCM, "%s", "b", 1),
		"manifests/b/svc.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n",
		"envs/dev/config.json": cfg("a"),
	})
	set := gitFilesAppSet("web", "envs/*/config.json", "web-{{path.basename}}", argocdtest.ApplicationSpec{Project: "default",
		Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: "manifests/{{variant}}", TargetRevision: "main"},
		Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "web-{{path.basename}}"},
		SyncPolicy:  &argocdtest.SyncPolicy{Automated: &argocdtest.SyncPolicyAutomated{}}})
	if err := w.argo.AddApplicationSet(set); err != nil {
		t.Fatal(err)
	}
	w.start("eu", "r1", func(o *Options, _ *Client) { o.Preview.Enabled = preview })
	w.waitRecord("eu", "web-dev", "synced", func(st *agent.AppStatus) bool { return st != nil && st.Sync == agent.SyncSynced })
	return w
}

func variantHead(w *world, branch string) string {
	return w.git.Commit(repoURL, branch, map[string]string{
		"manifests/a/cm.yaml":   strings.Replace(variantCM, "%s", "a", 1),
		"manifests/b/cm.yaml":   strings.Replace(variantCM, "%s", "b", 1),
		"manifests/b/svc.yaml":  "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n",
		"envs/dev/config.json":  `{"variant": "b"}`,
		"envs/prod/config.json": `{"variant": "a"}`,
	})
}

func previewApps(t *testing.T, s *argocdtest.Server) []string {
	t.Helper()
	var out []string
	for _, a := range s.Apps() {
		if strings.HasPrefix(a.Metadata.Name, previewPrefix) {
			out = append(out, a.Metadata.Name)
		}
	}
	return out
}

// With preview apps, a spec the ApplicationSet changes is rendered as it will be (web-dev's
// ConfigMap and a new Service), and a new environment's resources are listed as added; the
// temporary apps are gone afterwards, are never published as apps, and are made in the
// preview project without a sync policy.
func TestDiffPreviewAppsRenderChangedAndNewSpecs(t *testing.T) {
	w := variantWorld(t, true)
	safePreviewProject(t, w.argo)
	head := variantHead(w, "pr-variant")
	before := len(w.argo.Requests())
	got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", RepoURL: repoURL, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]agent.AppDiff{}
	for _, d := range got {
		by[d.App] = d
	}
	dev := by["web-dev"]
	cm := resource(dev, "ConfigMap", "web")
	if dev.SpecNotRendered || dev.Error != "" || cm == nil || strings.Join(cm.Paths, ",") != "data.variant" || resource(dev, "Service", "web") == nil {
		t.Fatalf("web-dev was not rendered with its new spec: %+v", dev)
	}
	prod := by["web-prod"]
	if !prod.Created || prod.SpecNotRendered || prod.Error != "" || len(prod.Resources) != 1 || prod.Resources[0].Change != agent.ChangeAdded ||
		prod.Resources[0].Namespace != "web-prod" {
		t.Fatalf("web-prod: %+v", prod)
	}
	if left := previewApps(t, w.argo); len(left) != 0 {
		t.Fatalf("preview apps left behind: %v", left)
	}
	var created, deleted int
	for _, r := range w.argo.Requests()[before:] {
		switch {
		case r.Method == http.MethodPost && r.Path == "/api/v1/applications":
			created++
		case r.Method == http.MethodDelete && strings.HasPrefix(r.Path, "/api/v1/applications/"+previewPrefix):
			deleted++
			if !strings.Contains(r.Query, "cascade=false") {
				t.Errorf("preview app deleted with cascade: %s?%s", r.Path, r.Query)
			}
		case r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/sync"):
			t.Errorf("the preview synced something: %s", r.Path)
		}
	}
	if created != 2 || deleted != 2 {
		t.Fatalf("preview apps created %d, deleted %d; want 2 and 2", created, deleted)
	}
	// No record of a preview app reached prflow-apps.
	keys, _ := w.b.Apps.ListKeys(context.Background())
	for k := range keys.Keys() {
		if strings.Contains(k, previewPrefix) {
			t.Fatalf("a preview app was published: %s", k)
		}
	}
	// The same head again costs no preview app.
	before = len(w.argo.Requests())
	if _, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", RepoURL: repoURL, Revision: head}); err != nil {
		t.Fatal(err)
	}
	for _, r := range w.argo.Requests()[before:] {
		if r.Method != http.MethodGet {
			t.Fatalf("a repeated preview wrote to Argo CD: %s %s", r.Method, r.Path)
		}
	}
}

// Without --preview-apps a changed or new spec is reported as not rendered, never as rendering
// the same; and nothing is written to Argo CD.
func TestDiffWithoutPreviewAppsSaysNotRendered(t *testing.T) {
	w := variantWorld(t, false)
	safePreviewProject(t, w.argo)
	got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", RepoURL: repoURL, Revision: variantHead(w, "pr-off")})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got {
		if !d.SpecNotRendered || len(d.Resources) != 0 && d.App == "web-prod" {
			t.Fatalf("%s: %+v", d.App, d)
		}
	}
	for _, r := range w.argo.Requests() {
		if r.Method == http.MethodPost && r.Path == "/api/v1/applications" {
			t.Fatal("an agent without preview apps created one")
		}
	}
}

// A preview project that could deploy (no deny window, kinds permitted) or that is missing is
// refused before any app is created, and the apps say why.
func TestDiffPreviewAppsRefuseUnsafeProject(t *testing.T) {
	w := variantWorld(t, true)
	head := variantHead(w, "pr-unsafe")
	check := func(want string) {
		t.Helper()
		before := len(w.argo.Requests())
		got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", RepoURL: repoURL, Revision: head})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range got {
			if d.App != "web-dev" && d.App != "web-prod" {
				continue
			}
			if !strings.Contains(d.Error, want) || d.Changed() && len(d.Resources) > 0 {
				t.Fatalf("%s: %+v, want error with %q", d.App, d, want)
			}
		}
		for _, r := range w.argo.Requests()[before:] {
			if r.Method == http.MethodPost && r.Path == "/api/v1/applications" {
				t.Fatal("a preview app was created in an unsafe project")
			}
		}
	}
	check("AppProject prflow-preview")
	// Exists, kinds denied, but no deny window: a manual sync could start.
	w.argo.SetProjectResources(DefaultPreviewProject, argocdtest.ProjectResources{NamespaceBlacklist: []argocdtest.GroupKind{{Group: "*", Kind: "*"}}})
	check("syncWindows must hold a deny window")
	// A window, but every namespaced kind permitted.
	if err := w.argo.SetSyncWindows(DefaultPreviewProject, argocdtest.SyncWindow{Kind: "deny", Schedule: "* * * * *", Duration: "24h", Applications: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	w.argo.SetProjectResources(DefaultPreviewProject, argocdtest.ProjectResources{})
	check("namespaceResourceBlacklist must hold")
	// A deny window that lets manual syncs through.
	w.argo.SetProjectResources(DefaultPreviewProject, argocdtest.ProjectResources{NamespaceBlacklist: []argocdtest.GroupKind{{Group: "*", Kind: "*"}}})
	if err := w.argo.SetSyncWindows(DefaultPreviewProject, argocdtest.SyncWindow{Kind: "deny", Schedule: "* * * * *", Duration: "24h", Applications: []string{"*"}, ManualSync: true}); err != nil {
		t.Fatal(err)
	}
	check("without manualSync")
}

// cancelAfterCreate cancels the preview's context as soon as Argo CD created the preview app.
type cancelAfterCreate struct {
	cancel context.CancelFunc
	rt     http.RoundTripper
}

func (c *cancelAfterCreate) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if r.Method == http.MethodPost && r.URL.Path == "/api/v1/applications" {
		c.cancel()
	}
	return resp, err
}

// A preview cancelled after its app was created still deletes it; concurrent previews of the
// same spec get apps of their own (unique names) and all are deleted.
func TestDiffPreviewAppDeletedOnCancelAndConcurrent(t *testing.T) {
	w := variantWorld(t, true)
	safePreviewProject(t, w.argo)
	head := variantHead(w, "pr-cancel")
	spec := json.RawMessage(`{"project":"default","source":{"repoURL":"` + repoURL + `","path":"manifests/b","targetRevision":"main"},` +
		`"destination":{"server":"https://kubernetes.default.svc","namespace":"web-x"},"syncPolicy":{"automated":{}}}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: w.argo.Token(), Transport: &cancelAfterCreate{cancel: cancel, rt: http.DefaultTransport}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{AgentID: "x", Client: c, Log: w.log, Preview: PreviewOptions{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.renderSpec(ctx, "web-x", spec, agent.DiffRequest{Revision: head, RepoURL: repoURL}); err == nil {
		t.Fatal("a cancelled preview rendered")
	}
	if left := previewApps(t, w.argo); len(left) != 0 {
		t.Fatalf("a cancelled preview left its app: %v", left)
	}

	c2, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: w.argo.Token()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{AgentID: "x", Client: c2, Log: w.log, Preview: PreviewOptions{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _, err := b.renderSpec(context.Background(), "web-x", spec, agent.DiffRequest{Revision: head, RepoURL: repoURL})
			if err == nil && len(m) != 2 {
				err = &agent.Error{Message: "rendered " + strings.Join(m, ",")}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if left := previewApps(t, w.argo); len(left) != 0 {
		t.Fatalf("concurrent previews left apps: %v", left)
	}
}

// The sweeper deletes preview apps older than MaxAge (an agent killed mid-preview left them)
// and leaves young ones (a preview in progress) and other apps of the project alone.
func TestSweepPreviewsDeletesOnlyOldLeftovers(t *testing.T) {
	w := newWorld(t)
	safePreviewProject(t, w.argo)
	left := func(name string, labels map[string]string) {
		a := app(name, "apps/web", labels)
		a.Spec.Project = DefaultPreviewProject
		w.addApp(a)
	}
	left(previewPrefix+"0123456789-abcdef", map[string]string{previewLabel: "eu"})
	left(previewPrefix+"unlabelled", nil)
	left("someone-elses", map[string]string{previewLabel: "eu"})
	// The agent's clock runs an hour ahead until the test sets it right (the agent reads it
	// from its own goroutines: an atomic, not a swap of o.Now).
	var ahead atomic.Bool
	ahead.Store(true)
	r := w.start("eu", "r1", func(o *Options, _ *Client) {
		o.Preview.Enabled = true
		o.Now = func() time.Time {
			if ahead.Load() {
				return time.Now().Add(time.Hour)
			}
			return time.Now()
		}
	})
	w.eventually(10*time.Second, "old preview app deleted", func() bool {
		return len(previewApps(t, w.argo)) == 1
	})
	if got := previewApps(t, w.argo); got[0] != previewPrefix+"unlabelled" {
		t.Fatalf("left: %v", got)
	}
	// Young apps stay.
	left(previewPrefix+"fedcba9876-000000", map[string]string{previewLabel: "eu"})
	n, err := r.sweepPreviews(context.Background())
	if err != nil || n != 1 {
		// the clock is an hour ahead: the new one is old too
		t.Fatalf("sweep with the clock ahead: %d %v", n, err)
	}
	left(previewPrefix+"fedcba9876-111111", map[string]string{previewLabel: "eu"})
	ahead.Store(false)
	if n, err := r.sweepPreviews(context.Background()); err != nil || n != 0 {
		t.Fatalf("a young preview app was swept: %d %v", n, err)
	}
}

// Multi-source apps render with the sources that read the release repo at the revision;
// without a repo to pick among several, and for Helm chart sources, the app says "not
// previewed" and why, never "no change".
func TestDiffMultiSourceAndUnpreviewable(t *testing.T) {
	w := newWorld(t)
	const other = "https://git.example/platform.git"
	w.git.Commit(other, "main", map[string]string{"base/cm.yaml": strings.Replace(healthyCM, "name: cfg", "name: base", 1)})
	w.sha = w.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": healthyCM})
	multi := app("multi", "", nil)
	multi.Spec.Source = nil
	multi.Spec.Sources = []argocdtest.ApplicationSource{
		{RepoURL: repoURL, Path: "apps/web", TargetRevision: "main"},
		{RepoURL: other, Path: "base", TargetRevision: "main"},
	}
	w.addApp(multi, argocdtest.Deployed())
	chart := app("chart", "", nil)
	chart.Spec.Source = &argocdtest.ApplicationSource{RepoURL: "oci://registry.example/charts", Chart: "web", TargetRevision: "1.2.3"}
	w.addApp(chart)
	w.start("eu", "r1")
	w.waitRecord("eu", "multi", "synced", func(st *agent.AppStatus) bool { return st != nil && st.Sync == agent.SyncSynced })
	w.waitRecord("eu", "chart", "known", func(st *agent.AppStatus) bool { return st != nil && st.Sync != "" })

	head := w.git.Commit(repoURL, "pr", map[string]string{"apps/web/cm.yaml": strings.Replace(healthyCM, "healthy", "degraded", 1)})
	got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"chart", "multi"}, RepoURL: repoURL, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	m := got[1]
	if m.App != "multi" || m.Error != "" || len(m.Resources) != 1 || m.Resources[0].Name != "cfg" || m.Unchanged != 1 {
		t.Fatalf("multi-source app: %+v", m)
	}
	if c := got[0]; c.App != "chart" || !strings.HasPrefix(c.Error, "not previewed: ") || !strings.Contains(c.Error, "Helm chart web 1.2.3") {
		t.Fatalf("chart app: %+v", c)
	}
	// No repo given, two git repos: which one the revision belongs to is not known.
	got, err = w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"multi"}, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got[0].Error, "not previewed: ") || !strings.Contains(got[0].Error, "2 git repos") {
		t.Fatalf("ambiguous multi-source app: %+v", got[0])
	}
	// A repo none of its sources reads.
	got, err = w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"multi"}, RepoURL: "https://git.example/nope.git", Revision: head})
	if err != nil || !strings.Contains(got[0].Error, "none of the app's 2 sources reads repo") {
		t.Fatalf("multi-source app, foreign repo: %+v %v", got, err)
	}
}

// A Secret whose value alone changes: Argo CD masks a rendering at a revision by itself, so
// the masks are equal and the change cannot be seen; the preview says which Secret keys it
// could not compare instead of a bare "no change". A change the masks do show (a new key) is
// still reported, with the keys not compared named too.
func TestDiffSecretValueOnlyChangeIsNamedNotCompared(t *testing.T) {
	secret := func(pw, extra string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: " + base64.StdEncoding.EncodeToString([]byte(pw)) + "\n" + extra
	}
	w := newWorld(t)
	files := map[string]string{}
	for k, v := range webMain {
		files[k] = v
	}
	files[webFiles+"secret.yaml"] = secret("old-value", "")
	w.sha = w.git.Commit(repoURL, "main", files)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1")
	w.waitRecord("eu", "web", "synced", func(st *agent.AppStatus) bool { return st != nil && st.Sync == agent.SyncSynced })

	files[webFiles+"secret.yaml"] = secret("new-value", "")
	d := diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: w.git.Commit(repoURL, "pr-value", files)})
	if d.Changed() || strings.Join(d.SecretsNotCompared, ";") != "shop/db: password" {
		t.Fatalf("value-only Secret change: %+v", d)
	}
	files[webFiles+"secret.yaml"] = secret("new-value", "  apikey: YWJj\n")
	d = diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: w.git.Commit(repoURL, "pr-key", files)})
	if s := resource(d, "Secret", "db"); s == nil || strings.Join(s.Paths, ",") != "data.apikey" || strings.Join(d.SecretsNotCompared, ";") != "shop/db: password" {
		t.Fatalf("Secret with a new key: %+v", d)
	}
	// A ConfigMap-only app names no Secret.
	d = diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: w.sha})
	if d.Changed() || strings.Join(d.SecretsNotCompared, ";") != "shop/db: password" {
		t.Fatalf("unchanged head: %+v", d)
	}
}
