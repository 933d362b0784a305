package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/policy"
)

// realPolicies loads files of examples/policies as the server's --policies does.
func realPolicies(t *testing.T, files []string) []controller.Option {
	t.Helper()
	if len(files) == 0 {
		return nil
	}
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pe, err := policy.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return []controller.Option{controller.WithPolicy(pe)}
}

// previewProject creates (or resets) the AppProject preview apps need, as docs/previews.md
// shows: every destination, no kind permitted, a deny window manual syncs do not pass.
func (r *realEnv) previewProject() {
	r.t.Helper()
	spec := map[string]any{"sourceRepos": []string{"*"},
		"destinations":               []map[string]any{{"server": "*", "namespace": "*"}},
		"clusterResourceWhitelist":   []any{},
		"namespaceResourceBlacklist": []map[string]any{{"group": "*", "kind": "*"}},
		"syncWindows":                []map[string]any{{"kind": "deny", "schedule": "* * * * *", "duration": "24h", "applications": []string{"*"}, "manualSync": false}}}
	code, body := r.api("POST", "/api/v1/projects?upsert=true", map[string]any{"project": map[string]any{
		"metadata": map[string]any{"name": argocd.DefaultPreviewProject}, "spec": spec}, "upsert": true})
	if code != 200 {
		r.t.Fatalf("create preview project: %d %s", code, body)
	}
}

// previewAgent runs agent "real" with preview apps and returns a client for it.
func (r *realEnv) previewAgent() *agent.Client {
	r.t.Helper()
	return r.runAgentClient(argocd.ClientOptions{}, argocd.Options{Preview: argocd.PreviewOptions{Enabled: true}})
}

// leftPreviewApps lists the apps in the preview project.
func (r *realEnv) leftPreviewApps() []string {
	r.t.Helper()
	_, body := r.api("GET", "/api/v1/applications?projects="+argocd.DefaultPreviewProject, nil)
	var l struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		r.t.Fatalf("list preview apps: %v %s", err, body)
	}
	var out []string
	for _, it := range l.Items {
		out = append(out, it.Metadata.Name)
	}
	return out
}

// TestRealPreviewAppsRenderNewSpecs: with preview apps, the real Argo CD renders the app spec
// the example ApplicationSet generates at the PR head: dev's config.json change (a jsonnet
// argument) shows as the ConfigMap change it renders, and a brand-new prod environment as the
// resources it adds. No preview app is left, and one made in the preview project cannot be
// synced.
func TestRealPreviewAppsRenderNewSpecs(t *testing.T) {
	r := realSetupOpts(t, realOpts{auto: true, envs: []string{"dev"}})
	r.waitApps("dev")
	r.waitHealthy("dev")
	r.previewProject()
	c := r.previewAgent()
	head := r.branch("pr-preview-apps", func(dir string) {
		putFile(t, dir, "envs/dev/config.json", strings.Replace(realConfig("dev"), `"tag": "1.4.1"`, `"tag": "1.5.0"`, 1))
		putFile(t, dir, "envs/prod/config.json", realConfig("prod"))
	})
	start := time.Now()
	got, err := c.Diff(context.Background(), "real", agent.DiffRequest{ApplicationSet: r.set, RepoURL: r.url, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	by := diffByApp(t, got)
	dev := by[r.id+"-dev"]
	cm := findResource(dev, "ConfigMap", "web")
	if dev.Error != "" || dev.SpecNotRendered || cm == nil || cm.Change != agent.ChangeChanged || strings.Join(cm.Paths, ",") != "data.image" ||
		!strings.Contains(cm.Diff, "+  image: "+realImage+"1.5.0") {
		t.Fatalf("dev: %+v", dev)
	}
	prod := by[r.id+"-prod"]
	if !prod.Created || prod.SpecNotRendered || prod.Error != "" || len(prod.Resources) == 0 {
		t.Fatalf("prod: %+v", prod)
	}
	for _, res := range prod.Resources {
		if res.Change != agent.ChangeAdded || res.Namespace != r.id+"-prod" {
			t.Fatalf("prod resource: %+v", res)
		}
	}
	t.Logf("REALTIME preview with 2 preview apps (dev changed spec, prod new) took %s; dev %s; prod adds %d resources",
		took.Round(time.Millisecond), strings.Join(cm.Paths, ","), len(prod.Resources))
	// p50 over fresh heads, each needing two preview apps.
	var times []time.Duration
	for i := 0; i < 7; i++ {
		h := r.branch("pr-preview-bench-"+string(rune('a'+i)), func(dir string) {
			putFile(t, dir, "envs/dev/config.json", strings.Replace(realConfig("dev"), `"tag": "1.4.1"`, `"tag": "1.6.`+string(rune('0'+i))+`"`, 1))
			putFile(t, dir, "envs/prod/config.json", realConfig("prod"))
		})
		start := time.Now()
		if _, err := c.Diff(context.Background(), "real", agent.DiffRequest{ApplicationSet: r.set, RepoURL: r.url, Revision: h}); err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("REALTIME preview with 2 preview apps over 7 fresh heads: p50 %s (min %s, max %s)",
		times[3].Round(time.Millisecond), times[0].Round(time.Millisecond), times[6].Round(time.Millisecond))
	if left := r.leftPreviewApps(); len(left) != 0 {
		t.Fatalf("preview apps left behind: %v", left)
	}
	// No preview app was published as an app of the environment.
	if _, err := c.Status(context.Background(), "real", "prflow-preview-x"); err == nil {
		t.Fatal("status of a preview app")
	}

	// The project refuses to deploy: an app made in it as the agent makes them is refused a
	// sync by its window, and nothing reaches the cluster.
	name := "prflow-preview-" + r.id
	code, body := r.api("POST", "/api/v1/applications", map[string]any{
		"metadata": map[string]any{"name": name, "labels": map[string]string{"prflow.io/preview": "test"}},
		"spec": map[string]any{"project": argocd.DefaultPreviewProject,
			"source":      map[string]any{"repoURL": r.vars["GIT_URL"], "path": "apps/demo", "targetRevision": "HEAD"},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": r.id + "-dev"}},
	})
	if code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	defer r.api("DELETE", "/api/v1/applications/"+name+"?cascade=false", nil)
	code, body = r.api("POST", "/api/v1/applications/"+name+"/sync", map[string]any{})
	if code == 200 || !strings.Contains(string(body), "blocked by sync window") {
		t.Fatalf("sync of a preview-project app: %d %s", code, body)
	}
}

// TestRealPreviewPolicyDeniesReplicasZero: the example stage policy (examples/policies)
// denies a prod promotion whose PR sets replicas to 0, on the real Argo CD's preview (the
// ApplicationSet's jsonnet argument, rendered through a preview app), before the merge: main
// keeps prod's config.
func TestRealPreviewPolicyDeniesReplicasZero(t *testing.T) {
	r := realSetupOpts(t, realOpts{auto: true, envs: []string{"staging", "prod"}, policies: []string{"stage.rego"}})
	r.waitApps("staging", "prod")
	r.waitHealthy("staging")
	r.waitHealthy("prod")
	r.previewProject()
	r.previewAgent()
	before := r.file("envs/prod/config.json")
	headBefore := r.git(t.TempDir(), "ls-remote", r.url, "refs/heads/main")
	src := strings.Replace(r.promotion([]string{"staging", "prod"}, []string{"prod"}, ""), "    image.tag: \"${{ inputs.tag }}\"\n",
		"    image.tag: \"${{ inputs.tag }}\"\n    replicas: 0\n", 1)
	run := r.e.Wait(r.e.Start(src, map[string]any{"tag": "1.5.0"}).ID, 5*time.Minute)
	want := "data.replicas goes to 0 in prod"
	if run.Status != pipelines.StFailed || !strings.Contains(run.Error, "denied by policy") || !strings.Contains(run.Error, want) {
		t.Fatalf("run %s: %q, want a policy denial with %q\n%s", run.Status, run.Error, want, describeRun(run))
	}
	if m := ctltest.Step(run, "prod", "merge"); m != nil && m.Status == pipelines.StSucceeded {
		t.Fatalf("merged: %+v", m.Outputs)
	}
	if got := r.file("envs/prod/config.json"); got != before {
		t.Errorf("main's prod config changed:\n%s", got)
	}
	if head := r.git(t.TempDir(), "ls-remote", r.url, "refs/heads/main"); head != headBefore {
		t.Errorf("main moved: %s → %s", headBefore, head)
	}
	t.Logf("policy denial on the real Argo CD: %s", run.Error)
}

// TestRealPreviewSecretValueOnly: what the real Argo CD lets a preview see of a Secret. The
// manifests of a revision come masked by themselves and the current target masked with the
// live object, so a value-only change shows equal masks: the preview names the Secret's keys
// as not compared (never a bare "no change"), and a new key is still reported.
func TestRealPreviewSecretValueOnly(t *testing.T) {
	r := realSetupOpts(t, realOpts{auto: true, envs: []string{"dev"}})
	r.branchMain(func(dir string) {
		putFile(t, dir, "plain/cm.yaml", realPlainCM)
		putFile(t, dir, "plain/secret.yaml", realSecret(realSecretValue, ""))
	})
	plain := r.createPlainApp()
	c := r.previewAgent()
	head := r.branch("pr-secret-value-only", func(dir string) {
		putFile(t, dir, "plain/secret.yaml", realSecret(realSecretNew, ""))
	})
	got, err := c.Diff(context.Background(), "real", agent.DiffRequest{Apps: []string{plain}, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	d := got[0]
	if d.Error != "" || d.Changed() || strings.Join(d.SecretsNotCompared, ";") != r.id+"-plain/db: password" {
		t.Fatalf("value-only Secret change on the real Argo CD: %+v", d)
	}
	// The raw answers, to record what Argo CD hands out.
	_, man := r.api("GET", "/api/v1/applications/"+plain+"/manifests?revision="+head, nil)
	_, mr := r.api("GET", "/api/v1/applications/"+plain+"/managed-resources", nil)
	for _, v := range []string{realSecretValue, realSecretNew} {
		if strings.Contains(string(man)+string(mr), base64.StdEncoding.EncodeToString([]byte(v))) {
			t.Fatal("Argo CD handed out a Secret value")
		}
	}
	if !strings.Contains(string(man), `\"password\":\"++++++++\"`) {
		t.Errorf("manifests at the head: %s", tail(string(man), 600))
	}
	head = r.branch("pr-secret-key", func(dir string) {
		putFile(t, dir, "plain/secret.yaml", realSecret(realSecretNew, "  apikey: "+base64.StdEncoding.EncodeToString([]byte("k"))+"\n"))
	})
	got, err = c.Diff(context.Background(), "real", agent.DiffRequest{Apps: []string{plain}, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	if s := findResource(got[0], "Secret", "db"); s == nil || strings.Join(s.Paths, ",") != "data.apikey" || len(got[0].SecretsNotCompared) != 1 {
		t.Fatalf("Secret with a new key: %+v", got[0])
	}
	t.Logf("value-only Secret change: not compared %v", d.SecretsNotCompared)
}

// TestRealPreviewMultiSource: a multi-source app (the release repo's plain/ and the demo
// repo's apps/demo) is rendered with the release repo's source at the PR head through
// manifests?sourcePositions=&revisions= (Argo CD v3), the other source as it is; a request
// that names no release repo says "not previewed" and why.
func TestRealPreviewMultiSource(t *testing.T) {
	r := realSetupOpts(t, realOpts{auto: true, envs: []string{"dev"}})
	r.branchMain(func(dir string) { putFile(t, dir, "plain/cm.yaml", realPlainCM) })
	name := r.id + "-multi"
	code, body := r.api("POST", "/api/v1/applications", map[string]any{
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"project": "default",
			"sources": []map[string]any{
				{"repoURL": r.url, "path": "plain", "targetRevision": "main"},
				{"repoURL": r.vars["GIT_URL"], "path": "apps/demo", "targetRevision": "HEAD"}},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": name},
			"syncPolicy":  map[string]any{"automated": map[string]any{}, "syncOptions": []string{"CreateNamespace=true"}}},
	})
	if code != 200 {
		t.Fatalf("create multi-source app: %d %s", code, body)
	}
	t.Cleanup(func() { r.api("DELETE", "/api/v1/applications/"+name+"?cascade=true", nil) })
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, b := r.api("GET", "/api/v1/applications/"+name, nil)
		var a struct {
			Status struct {
				Sync struct{ Status string } `json:"sync"`
			} `json:"status"`
		}
		if json.Unmarshal(b, &a) == nil && a.Status.Sync.Status == "Synced" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not sync: %s", name, tail(string(b), 500))
		}
	}
	c := r.previewAgent()
	head := r.branch("pr-multi", func(dir string) {
		putFile(t, dir, "plain/cm.yaml", strings.Replace(realPlainCM, `replicas: "2"`, `replicas: "5"`, 1))
	})
	got, err := c.Diff(context.Background(), "real", agent.DiffRequest{Apps: []string{name}, RepoURL: r.url, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	d := got[0]
	cm := findResource(d, "ConfigMap", "plain")
	if d.Error != "" || len(d.Resources) != 1 || cm == nil || strings.Join(cm.Paths, ",") != "data.replicas" || d.Unchanged != 1 {
		t.Fatalf("multi-source app: %+v", d)
	}
	got, err = c.Diff(context.Background(), "real", agent.DiffRequest{Apps: []string{name}, Revision: head})
	if err != nil || !strings.HasPrefix(got[0].Error, "not previewed: ") || !strings.Contains(got[0].Error, "2 git repos") {
		t.Fatalf("multi-source app without a release repo: %+v %v", got, err)
	}
	t.Logf("multi-source: %s changed; without a repo: %s", strings.Join(cm.Paths, ","), got[0].Error)
}
