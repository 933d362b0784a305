package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
)

// countingTransport counts the requests the agent sends to Argo CD.
type countingTransport struct {
	n  atomic.Int64
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// diffAgent runs agent "real" with a counting transport and returns a client for it.
func (r *realEnv) diffAgent() (*agent.Client, *countingTransport) {
	r.t.Helper()
	ct := &countingTransport{rt: http.DefaultTransport}
	return r.runAgentClient(argocd.ClientOptions{Transport: ct}, argocd.Options{}), ct
}

// branch commits edit's changes to the release repo on a new branch (a PR head) and returns
// the head SHA. edit gets the work tree (a clone of main).
func (r *realEnv) branch(name string, edit func(dir string)) string {
	r.t.Helper()
	work := r.t.TempDir()
	r.git(work, "clone", "-q", "--branch", "main", r.url, ".")
	r.git(work, "checkout", "-q", "-b", name)
	edit(work)
	r.git(work, "add", "-A")
	r.git(work, "commit", "-qm", name)
	r.git(work, "push", "-q", "origin", name)
	return r.git(work, "rev-parse", "HEAD")
}

func putFile(t *testing.T, dir, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	realPlainCM     = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  replicas: \"2\"\n  simulate: healthy\n"
	realSecretValue = "real-secret-old-value"
	realSecretNew   = "real-secret-new-value"
)

func realSecret(value, extra string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n  password: " +
		base64.StdEncoding.EncodeToString([]byte(value)) + "\n" + extra
}

// createPlainApp makes a plain-directory app of the release repo (plain/), synced, deleted at
// the end.
func (r *realEnv) createPlainApp() string {
	r.t.Helper()
	name := r.id + "-plain"
	code, body := r.api("POST", "/api/v1/applications", map[string]any{
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"project": "default",
			"source":      map[string]any{"repoURL": r.url, "path": "plain", "targetRevision": "main"},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": r.id + "-plain"},
			"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true}, "syncOptions": []string{"CreateNamespace=true"}}},
	})
	if code != 200 {
		r.t.Fatalf("create app %s: %d %s", name, code, body)
	}
	r.t.Cleanup(func() { r.api("DELETE", "/api/v1/applications/"+name+"?cascade=true", nil) })
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, b := r.api("GET", "/api/v1/applications/"+name, nil)
		var a struct {
			Status struct {
				Sync struct{ Status string } `json:"sync"`
			} `json:"status"`
		}
		if json.Unmarshal(b, &a) == nil && a.Status.Sync.Status == "Synced" {
			return name
		}
		if time.Now().After(end) {
			r.t.Fatalf("%s did not sync: %s", name, tail(string(b), 500))
		}
	}
}

func diffByApp(t *testing.T, got []agent.AppDiff) map[string]agent.AppDiff {
	t.Helper()
	out := map[string]agent.AppDiff{}
	for _, d := range got {
		out[d.App] = d
	}
	return out
}

func findResource(d agent.AppDiff, kind, name string) *agent.ResourceDiff {
	for i := range d.Resources {
		if d.Resources[i].Kind == kind && d.Resources[i].Name == name {
			return &d.Resources[i]
		}
	}
	return nil
}

// The preview against a real Argo CD: the example release repo's jsonnet app through its
// ApplicationSet (a config.json value is a spec change; a new environment a created app; a
// change of the jsonnet itself a resource diff), a plain-directory app (resource diff with
// paths), and a Secret (masked: Argo CD hands out no values, the agent none either).
func TestRealDiffPreview(t *testing.T) {
	r := realSetupOpts(t, realOpts{auto: true, envs: []string{"dev", "staging"}})
	jsonnet, err := os.ReadFile("../../examples/release-repo/manifests/web/web.jsonnet")
	if err != nil {
		t.Fatal(err)
	}
	// The plain app's files live next to the jsonnet app's in the same release repo.
	r.branchMain(func(dir string) {
		putFile(t, dir, "plain/cm.yaml", realPlainCM)
		putFile(t, dir, "plain/secret.yaml", realSecret(realSecretValue, ""))
	})
	r.waitApps("dev", "staging")
	plain := r.createPlainApp()
	r.waitHealthy("dev")
	c, ct := r.diffAgent()
	ctx := context.Background()

	// 1. jsonnet: a config.json value (the ApplicationSet's TLA) changes in dev, and a new
	// environment appears.
	head := r.branch("pr-config", func(dir string) {
		putFile(t, dir, "envs/dev/config.json", strings.Replace(realConfig("dev"), `"tag": "1.4.1"`, `"tag": "1.5.0"`, 1))
		putFile(t, dir, "envs/prod/config.json", realConfig("prod"))
		if err := os.RemoveAll(filepath.Join(dir, "envs", "staging")); err != nil {
			t.Fatal(err)
		}
	})
	got, err := c.Diff(ctx, "real", agent.DiffRequest{ApplicationSet: r.set, RepoURL: r.url, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	by := diffByApp(t, got)
	dev := by[r.id+"-dev"]
	if strings.Join(dev.SpecChanges, ";") != "source.directory.jsonnet.tlas.image: "+realImage+"1.4.1 → "+realImage+"1.5.0" || dev.Error != "" {
		t.Fatalf("dev: %+v", dev)
	}
	if st := by[r.id+"-staging"]; !st.Deleted || st.Error != "" || len(st.Resources) != 1 || st.Resources[0].Change != agent.ChangeRemoved {
		t.Fatalf("staging: %+v", st)
	}
	if prod := by[r.id+"-prod"]; !prod.Created {
		t.Fatalf("prod: %+v (all: %+v)", prod, got)
	}
	t.Logf("jsonnet config change: dev %v; prod created with spec %v", dev.SpecChanges, by[r.id+"-prod"].SpecChanges)

	// 2. A change of the jsonnet itself renders differently for every environment.
	head = r.branch("pr-jsonnet", func(dir string) {
		putFile(t, dir, "manifests/web/web.jsonnet", strings.Replace(string(jsonnet), "    env: env,\n", "    env: env,\n    tier: 'frontend',\n", 1))
	})
	got, err = c.Diff(ctx, "real", agent.DiffRequest{ApplicationSet: r.set, RepoURL: r.url, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"dev", "staging"} {
		d := diffByApp(t, got)[r.id+"-"+env]
		cm := findResource(d, "ConfigMap", "web")
		if cm == nil || cm.Change != agent.ChangeChanged || strings.Join(cm.Paths, ",") != "data.tier" || !strings.Contains(cm.Diff, "+  tier: frontend") {
			t.Fatalf("%s: %+v", env, d)
		}
		for _, noise := range []string{"tracking-id", "managedFields", "resourceVersion"} {
			if strings.Contains(cm.Diff, noise) {
				t.Fatalf("%s diff shows %s:\n%s", env, noise, cm.Diff)
			}
		}
	}

	// 3. Plain directory: a manifest change, a new object, and a Secret that gains a key and
	// changes a value.
	head = r.branch("pr-plain", func(dir string) {
		putFile(t, dir, "plain/cm.yaml", strings.Replace(realPlainCM, `replicas: "2"`, `replicas: "0"`, 1))
		putFile(t, dir, "plain/svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: plain\nspec:\n  ports:\n  - port: 80\n")
		putFile(t, dir, "plain/secret.yaml", realSecret(realSecretNew, "  apikey: "+base64.StdEncoding.EncodeToString([]byte(realSecretNew))+"\n"))
	})
	got, err = c.Diff(ctx, "real", agent.DiffRequest{Apps: []string{plain}, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	d := got[0]
	if cm := findResource(d, "ConfigMap", "plain"); cm == nil || strings.Join(cm.Paths, ",") != "data.replicas" || !strings.Contains(cm.Diff, "+  replicas: \"0\"") {
		t.Fatalf("plain ConfigMap: %+v", d)
	}
	if svc := findResource(d, "Service", "plain"); svc == nil || svc.Change != agent.ChangeAdded {
		t.Fatalf("plain Service: %+v", d)
	}
	sec := findResource(d, "Secret", "db")
	if sec == nil || !sec.Masked || strings.Join(sec.Paths, ",") != "data.apikey" {
		t.Fatalf("plain Secret: %+v", d)
	}
	reply, _ := json.Marshal(got)
	for _, v := range []string{realSecretValue, realSecretNew} {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(string(reply), form) || strings.Contains(r.e.Logs.String(), form) {
				t.Fatalf("a Secret value (%q) left the agent", form)
			}
		}
	}
	t.Logf("plain app: %d resources changed, Secret diff:\n%s", len(d.Resources), sec.Diff)

	// A value-only Secret change: Argo CD masks values before they leave it, so it is not
	// visible to the preview (reported, not asserted as a feature).
	head = r.branch("pr-secret-value", func(dir string) {
		putFile(t, dir, "plain/secret.yaml", realSecret(realSecretNew, ""))
	})
	if got, err = c.Diff(ctx, "real", agent.DiffRequest{Apps: []string{plain}, Revision: head}); err == nil {
		t.Logf("value-only Secret change: changed=%v resources=%d", got[0].Changed(), len(got[0].Resources))
	}

	// 4. Cost: p50 of a preview of a fresh head (two apps of the set plus the generate call),
	// and a repeated preview of the same head makes no Argo CD call.
	var times []time.Duration
	var last string
	for i := 0; i < 10; i++ {
		last = r.branch("pr-bench-"+string(rune('a'+i)), func(dir string) {
			putFile(t, dir, "envs/dev/config.json", strings.Replace(realConfig("dev"), `"replicas": 2`, `"replicas": `+string(rune('3'+i%6)), 1))
		})
		start := time.Now()
		if _, err := c.Diff(ctx, "real", agent.DiffRequest{ApplicationSet: r.set, RepoURL: r.url, Revision: last}); err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	var appTimes []time.Duration
	for i := 0; i < 10; i++ {
		h := r.branch("pr-bench-app-"+string(rune('a'+i)), func(dir string) {
			putFile(t, dir, "plain/cm.yaml", strings.Replace(realPlainCM, `replicas: "2"`, `replicas: "`+string(rune('3'+i%6))+`"`, 1))
		})
		start := time.Now()
		if _, err := c.Diff(ctx, "real", agent.DiffRequest{Apps: []string{plain}, Revision: h}); err != nil {
			t.Fatal(err)
		}
		appTimes = append(appTimes, time.Since(start))
	}
	sort.Slice(appTimes, func(i, j int) bool { return appTimes[i] < appTimes[j] })
	req := agent.DiffRequest{Apps: []string{r.id + "-dev", r.id + "-staging", plain}, Revision: last}
	if _, err := c.Diff(ctx, "real", req); err != nil {
		t.Fatal(err)
	}
	before := ct.n.Load()
	start := time.Now()
	for i := 0; i < 10; i++ {
		if _, err := c.Diff(ctx, "real", req); err != nil {
			t.Fatal(err)
		}
	}
	cached := time.Since(start) / 10
	if n := ct.n.Load() - before; n != 0 {
		t.Errorf("10 repeated previews of the same head made %d Argo CD calls, want 0", n)
	}
	// The ApplicationSet form costs one call (GET of the set: v3.2 has no ApplicationSet watch).
	setReq := agent.DiffRequest{ApplicationSet: r.set, RepoURL: r.url, Revision: last}
	before = ct.n.Load()
	start = time.Now()
	for i := 0; i < 10; i++ {
		if _, err := c.Diff(ctx, "real", setReq); err != nil {
			t.Fatal(err)
		}
	}
	setCached := time.Since(start) / 10
	if n := ct.n.Load() - before; n != 10 {
		t.Errorf("10 repeated ApplicationSet previews of the same head made %d Argo CD calls, want 10 (one each)", n)
	}
	t.Logf("REALTIME diff preview: ApplicationSet (generate + 2 apps) p50 %s (min %s, max %s); one plain app p50 %s (min %s, max %s); repeated preview of 3 apps %s, 0 Argo CD calls; repeated ApplicationSet preview %s, 1 call",
		times[len(times)/2].Round(time.Millisecond), times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond),
		appTimes[len(appTimes)/2].Round(time.Millisecond), appTimes[0].Round(time.Millisecond), appTimes[len(appTimes)-1].Round(time.Millisecond),
		cached.Round(time.Microsecond), setCached.Round(time.Microsecond))

	// 5. A revision whose jsonnet does not compile is the app's error, not "no change".
	head = r.branch("pr-broken", func(dir string) {
		putFile(t, dir, "manifests/web/web.jsonnet", "function(env, image, replicas, simulate='healthy') {\n")
	})
	got, err = c.Diff(ctx, "real", agent.DiffRequest{Apps: []string{r.id + "-dev"}, Revision: head})
	if err != nil || got[0].Error == "" || got[0].Changed() {
		t.Fatalf("broken jsonnet: %+v %v", got, err)
	}
	t.Logf("broken jsonnet: %s", got[0].Error)
}

// branchMain commits edit's changes to main directly.
func (r *realEnv) branchMain(edit func(dir string)) {
	r.t.Helper()
	work := r.t.TempDir()
	r.git(work, "clone", "-q", "--branch", "main", r.url, ".")
	edit(work)
	r.git(work, "add", "-A")
	r.git(work, "commit", "-qm", "edit main")
	r.git(work, "push", "-q", "origin", "main")
}

// prodAppSetAt is an ApplicationSet generating the test's prod app from path of its repo.
func prodAppSetAt(path string) func(r *realEnv) map[string]any {
	return func(r *realEnv) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": r.set, "namespace": "argocd"},
			"spec": map[string]any{
				"generators": []any{map[string]any{"list": map[string]any{"elements": []any{map[string]any{"env": "prod"}}}}},
				"template": map[string]any{
					"metadata": map[string]any{"name": r.id + "-{{env}}"},
					"spec": map[string]any{"project": "default",
						"source":      map[string]any{"repoURL": r.url, "targetRevision": "main", "path": path},
						"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": r.id + "-{{env}}"}},
				},
			},
		}
	}
}

// diffWhenAvailable asks agent real for app's diff at head, again each second for a minute
// while it answers "unavailable" (until Argo CD's controller compared a new app once).
func diffWhenAvailable(t *testing.T, c *agent.Client, app, head string) agent.AppDiff {
	t.Helper()
	for end := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		got, err := c.Diff(context.Background(), "real", agent.DiffRequest{Apps: []string{app}, Revision: head})
		if errors.Is(err, agent.ErrUnavailable) && time.Now().Before(end) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
}

// A Kustomize image change, rendered by the real repo-server's kustomize. realenv ships no
// kustomize binary; `GOBIN=$REALENV/bin go install sigs.k8s.io/kustomize/kustomize/v5@v5.7.1`
// puts one on the repo-server's PATH.
func TestRealDiffKustomize(t *testing.T) {
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Getenv("PRFLOW_REALENV")), "bin", "kustomize")); os.Getenv("PRFLOW_REALENV") != "" && err != nil {
		t.Skip("realenv has no kustomize binary (see the comment above)")
	}
	kust := func(tag string) string {
		return "resources: [../../base]\nimages:\n- name: registry.example.com/shop/web\n  newTag: \"" + tag + "\"\n"
	}
	files := map[string]string{
		"kustomize/base/kustomization.yaml": "resources: [deploy.yaml]\n",
		"kustomize/base/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n" +
			"  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n" +
			"      - name: web\n        image: registry.example.com/shop/web:latest\n",
		"kustomize/overlays/prod/kustomization.yaml": kust("1.4.1"),
	}
	r := realSetupOpts(t, realOpts{files: files, appSet: prodAppSetAt("kustomize/overlays/{{env}}")})
	r.waitApps("prod")
	c, _ := r.diffAgent()
	head := r.branch("pr-kustomize", func(dir string) {
		putFile(t, dir, "kustomize/overlays/prod/kustomization.yaml", kust("1.5.0"))
	})
	app := r.id + "-prod"
	d := diffWhenAvailable(t, c, app, head)
	dep := findResource(d, "Deployment", "web")
	if dep == nil || dep.Change != agent.ChangeChanged || strings.Join(dep.Paths, ",") != "spec.template.spec.containers[0].image" ||
		!strings.Contains(dep.Diff, "+      - image: registry.example.com/shop/web:1.5.0") {
		t.Fatalf("Kustomize image change: %+v", d)
	}
	t.Logf("Kustomize image change:\n%s", dep.Diff)
}

// A Helm values change (the guestbook's replicas and image tag), rendered by the real
// repo-server's helm. realenv ships no helm binary; `GOBIN=$REALENV/bin go install
// helm.sh/helm/v3/cmd/helm@v3.18.4` puts one on the repo-server's PATH.
func TestRealDiffHelm(t *testing.T) {
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Getenv("PRFLOW_REALENV")), "bin", "helm")); os.Getenv("PRFLOW_REALENV") != "" && err != nil {
		t.Skip("realenv has no helm binary (see the comment above)")
	}
	values := func(replicas int, tag string) string {
		return "replicaCount: " + string(rune('0'+replicas)) + "\nimage:\n  repository: gcr.io/heptio-images/ks-guestbook-demo\n  tag: \"" + tag + "\"\n"
	}
	files := map[string]string{
		"helm/guestbook/Chart.yaml":  "apiVersion: v2\nname: helm-guestbook\nversion: 0.1.0\n",
		"helm/guestbook/values.yaml": values(1, "0.1"),
		"helm/guestbook/templates/deployment.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-guestbook\n" +
			"spec:\n  replicas: {{ .Values.replicaCount }}\n  selector: {matchLabels: {app: guestbook}}\n  template:\n" +
			"    metadata: {labels: {app: guestbook}}\n    spec:\n      containers:\n      - name: guestbook\n" +
			"        image: \"{{ .Values.image.repository }}:{{ .Values.image.tag }}\"\n",
	}
	r := realSetupOpts(t, realOpts{files: files, appSet: prodAppSetAt("helm/guestbook")})
	r.waitApps("prod")
	c, _ := r.diffAgent()
	head := r.branch("pr-helm", func(dir string) { putFile(t, dir, "helm/guestbook/values.yaml", values(0, "0.2")) })
	app := r.id + "-prod"
	d := diffWhenAvailable(t, c, app, head)
	dep := findResource(d, "Deployment", app+"-guestbook")
	if dep == nil || dep.Change != agent.ChangeChanged || strings.Join(dep.Paths, ",") != "spec.replicas,spec.template.spec.containers[0].image" {
		t.Fatalf("Helm values change: %+v", d)
	}
	t.Logf("Helm values change:\n%s", dep.Diff)
}
