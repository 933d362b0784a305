package argocd

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

const webFiles = "apps/web/"

var webMain = map[string]string{
	webFiles + "cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\ndata:\n  replicas: \"2\"\n  simulate: healthy\n",
	webFiles + "svc.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n",
}

// diffWorld is a fake Argo CD with app "web" deployed at main and an agent "eu" leading.
func diffWorld(t *testing.T, logTo *bytes.Buffer) (*world, *runningAgent) {
	t.Helper()
	w := newWorld(t)
	w.sha = w.git.Commit(repoURL, "main", webMain)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	r := w.start("eu", "r1", func(o *Options, _ *Client) {
		if logTo != nil {
			o.Log = slog.New(slog.NewTextHandler(&syncWriter{w: logTo}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	})
	w.waitRecord("eu", "web", "synced", func(st *agent.AppStatus) bool { return st != nil && st.Sync == agent.SyncSynced })
	return w, r
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// pr commits files (relative to apps/web) over main's on a branch and returns the head SHA.
func pr(w *world, branch string, files map[string]string, deletes ...string) string {
	tree := map[string]string{}
	for k, v := range webMain {
		tree[k] = v
	}
	for k, v := range files {
		tree[webFiles+k] = v
	}
	for _, d := range deletes {
		delete(tree, webFiles+d)
	}
	return w.git.Commit(repoURL, branch, tree)
}

func diffOne(t *testing.T, w *world, req agent.DiffRequest) agent.AppDiff {
	t.Helper()
	got, err := w.client.Diff(context.Background(), "eu", req)
	if err != nil {
		t.Fatalf("Diff(%+v): %v", req, err)
	}
	if len(got) != 1 {
		t.Fatalf("Diff(%+v): %d apps, want 1: %+v", req, len(got), got)
	}
	return got[0]
}

func resource(d agent.AppDiff, kind, name string) *agent.ResourceDiff {
	for i := range d.Resources {
		if d.Resources[i].Kind == kind && d.Resources[i].Name == name {
			return &d.Resources[i]
		}
	}
	return nil
}

// A revision that edits one object, adds one and drops one is previewed per object: change
// type, changed paths (a dotted key quoted) and a unified diff free of what Argo CD and
// Kubernetes add (tracking annotation, managed fields, resourceVersion, uid).
func TestDiffPreviewsRenderedChanges(t *testing.T) {
	w, _ := diffWorld(t, nil)
	head := pr(w, "pr-1", map[string]string{
		"cm.yaml":  strings.Replace(strings.Replace(webMain[webFiles+"cm.yaml"], `replicas: "2"`, `replicas: "3"`, 1), `sync-wave: "1"`, `sync-wave: "5"`, 1),
		"job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n",
	}, "svc.yaml")
	d := diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: head})
	if d.Error != "" || !d.Changed() || d.Unchanged != 0 || d.Agent != "eu" || !strings.HasSuffix(d.URL, "/applications/argocd/web") {
		t.Fatalf("diff: %+v", d)
	}
	cm := resource(d, "ConfigMap", "web")
	if cm == nil || cm.Change != agent.ChangeChanged || cm.Namespace != "shop" ||
		strings.Join(cm.Paths, ",") != `data.replicas,metadata.annotations["argocd.argoproj.io/sync-wave"]` {
		t.Fatalf("ConfigMap: %+v", cm)
	}
	if !strings.Contains(cm.Diff, "-  replicas: \"2\"\n+  replicas: \"3\"\n") || !strings.Contains(cm.Diff, "--- a/shop/configmap/web") {
		t.Fatalf("ConfigMap diff:\n%s", cm.Diff)
	}
	// Policies judge the new values of the changed paths (e.g. replicas going to 0).
	if cm.Values["data.replicas"] != "3" || cm.Values[`metadata.annotations["argocd.argoproj.io/sync-wave"]`] != "5" || len(cm.Values) != 2 {
		t.Errorf("ConfigMap values for policies: %v", cm.Values)
	}
	for _, noise := range []string{"tracking-id", "managedFields", "resourceVersion", "uid:", "creationTimestamp"} {
		if strings.Contains(cm.Diff, noise) {
			t.Errorf("diff shows %q, which no PR changes:\n%s", noise, cm.Diff)
		}
	}
	if j := resource(d, "Job", "migrate"); j == nil || j.Change != agent.ChangeAdded || j.Group != "batch" || !strings.Contains(j.Diff, "+  name: migrate") {
		t.Fatalf("Job: %+v", j)
	}
	if s := resource(d, "Service", "web"); s == nil || s.Change != agent.ChangeRemoved || !strings.Contains(s.Diff, "-  - port: 80") {
		t.Fatalf("Service: %+v", s)
	}

	// The deployed revision changes nothing: every object is counted unchanged.
	d = diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: w.sha})
	if d.Changed() || d.Unchanged != 2 || d.Error != "" || len(d.Resources) != 0 {
		t.Fatalf("diff at the deployed revision: %+v", d)
	}
	// A reformatted file is no change either.
	head = pr(w, "pr-fmt", map[string]string{"svc.yaml": "{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"web\"}, \"spec\": {\"ports\": [{\"port\": 80}]}}\n"})
	if d = diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: head}); d.Changed() || d.Unchanged != 2 {
		t.Fatalf("reformatted manifests: %+v", d)
	}
}

// Secret values never leave the agent. Argo CD masks them itself ("++++++++"), so a change of
// keys shows; the agent also hashes any value it does get, so an Argo CD that hands out
// values cannot leak them into the reply, the agent's logs or its errors.
func TestDiffSecretValuesNeverLeave(t *testing.T) {
	const oldPW, newPW, token = "hunter2-old-pw", "hunter2-new-pw", "s3cr3t-token-value"
	secret := func(pw string, extra string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: %s\n%sstringData:\n  token: %s\n",
			base64.StdEncoding.EncodeToString([]byte(pw)), extra, token)
	}
	var logs bytes.Buffer
	w := newWorld(t)
	files := map[string]string{}
	for k, v := range webMain {
		files[k] = v
	}
	files[webFiles+"secret.yaml"] = secret(oldPW, "")
	w.sha = w.git.Commit(repoURL, "main", files)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1", func(o *Options, _ *Client) {
		o.Log = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	w.waitRecord("eu", "web", "synced", func(st *agent.AppStatus) bool { return st != nil && st.Sync == agent.SyncSynced })
	files[webFiles+"secret.yaml"] = secret(newPW, "  apikey: "+base64.StdEncoding.EncodeToString([]byte(token))+"\n")
	head := w.git.Commit(repoURL, "pr-secret", files)

	got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web"}, Revision: head})
	if err != nil {
		t.Fatal(err)
	}
	s := resource(got[0], "Secret", "db")
	if s == nil || s.Change != agent.ChangeChanged || !s.Masked || strings.Join(s.Paths, ",") != "data.apikey" || !strings.Contains(s.Diff, "+  apikey: (hidden)") {
		t.Fatalf("Secret: %+v", s)
	}
	if s.Values != nil {
		t.Errorf("a Secret's values reached the reply: %v", s.Values)
	}
	reply, _ := json.Marshal(got)
	noSecretBytes(t, "the reply", string(reply), oldPW, newPW, token)
	noSecretBytes(t, "the agent's logs", logs.String(), oldPW, newPW, token)

	// An Argo CD that hands out values (the agent cannot rule it out) gets them hashed at
	// once: a changed value shows as "(changed)", and no value, base64 or hash is in the answer.
	d := &agent.AppDiff{App: "web"}
	cur := []ManagedResource{{Kind: "Secret", Name: "db", Namespace: "shop", TargetState: mustJSON(t, map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db", "namespace": "shop"},
		"data": map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(oldPW))}, "stringData": map[string]any{"token": token},
	})}}
	rendered := []string{mustJSON(t, map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db"},
		"data": map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(newPW)), "token": base64.StdEncoding.EncodeToString([]byte(token))},
	})}
	if err := compareApp(d, rendered, cur, "shop", "web", 1<<20); err != nil {
		t.Fatal(err)
	}
	if len(d.Resources) != 1 || !d.Resources[0].Masked || strings.Join(d.Resources[0].Paths, ",") != "data.password" ||
		!strings.Contains(d.Resources[0].Diff, "+  password: (changed)") || !strings.Contains(d.Resources[0].Diff, "-  password: (hidden)") {
		t.Fatalf("unmasked Secret: %+v", d.Resources)
	}
	out, _ := json.Marshal(d)
	noSecretBytes(t, "the answer for unmasked values", string(out), oldPW, newPW, token)
	if strings.Contains(string(out), "sha256") {
		t.Fatalf("the answer carries a hash of a secret value: %s", out)
	}

	// A broken Secret manifest: the error names the file, not the values.
	files[webFiles+"secret.yaml"] = secret(newPW, "  broken: [\n")
	bad := w.git.Commit(repoURL, "pr-broken", files)
	got, err = w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web"}, Revision: bad})
	if err != nil || got[0].Error == "" {
		t.Fatalf("broken manifest: %+v %v", got, err)
	}
	noSecretBytes(t, "the error", got[0].Error, oldPW, newPW, token)
}

func noSecretBytes(t *testing.T, where, s string, secrets ...string) {
	t.Helper()
	for _, v := range secrets {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(s, form) {
				t.Fatalf("%s contains a secret value (%q)", where, form)
			}
		}
	}
}

// calls counts the requests Argo CD got on paths containing part.
func calls(w *world, part string) int {
	n := 0
	for _, r := range w.argo.Requests() {
		if strings.Contains(r.Path, part) {
			n++
		}
	}
	return n
}

// A repeated preview of the same head, with nothing changed in Argo CD since, costs Argo CD
// no call; once the app changes (here: synced to the head) the preview is made again.
func TestDiffRepeatedPreviewIsAnsweredFromMemory(t *testing.T) {
	w, _ := diffWorld(t, nil)
	head := pr(w, "pr-1", map[string]string{"cm.yaml": strings.Replace(webMain[webFiles+"cm.yaml"], `replicas: "2"`, `replicas: "3"`, 1)})
	req := agent.DiffRequest{Apps: []string{"web"}, Revision: head}
	first := diffOne(t, w, req)
	if len(first.Resources) != 1 {
		t.Fatalf("first preview: %+v", first)
	}
	before := len(w.argo.Requests())
	for range 3 {
		again := diffOne(t, w, req)
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("cached preview differs:\n%+v\n%+v", again, first)
		}
	}
	if after := w.argo.Requests(); len(after) != before {
		t.Fatalf("a repeated preview called Argo CD: %+v", after[before:])
	}

	// Merge the head into main: Argo CD's comparison (and the app's resourceVersion) moves, the
	// preview is made again and now shows nothing left to change.
	rec := w.record("eu", "web")
	merged := pr(w, "main", map[string]string{"cm.yaml": strings.Replace(webMain[webFiles+"cm.yaml"], `replicas: "2"`, `replicas: "3"`, 1)})
	w.argo.Reconcile()
	w.waitRecord("eu", "web", "compared with the merge", func(st *agent.AppStatus) bool {
		return st.Revision == merged && st.ResourceVersion != rec.ResourceVersion
	})
	n := calls(w, "/manifests")
	if d := diffOne(t, w, req); d.Changed() || d.Unchanged != 2 {
		t.Fatalf("preview after deploying the head: %+v", d)
	}
	if calls(w, "/manifests") != n+1 {
		t.Fatal("the preview after the app changed was answered from memory")
	}
}

// What cannot be previewed says so, per app or for the request, never as "no change": a
// revision that does not render, an app that does not exist, Argo CD's repo-server down
// (CodeUnavailable, so the caller retries), and a revision that is not one.
func TestDiffFailuresAreNotNoChange(t *testing.T) {
	w, _ := diffWorld(t, nil)
	broken := pr(w, "pr-broken", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: [\n"})
	got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web", "nope"}, Revision: broken})
	if err != nil || len(got) != 2 {
		t.Fatalf("Diff: %+v %v", got, err)
	}
	if got[0].App != "nope" || !strings.Contains(got[0].Error, "not found") || got[0].Changed() {
		t.Fatalf("missing app: %+v", got[0])
	}
	if got[1].App != "web" || !strings.Contains(got[1].Error, "cannot render the app at") || !strings.Contains(got[1].Error, "cm.yaml") || got[1].Changed() {
		t.Fatalf("broken revision: %+v", got[1])
	}

	head := pr(w, "pr-1", map[string]string{"cm.yaml": strings.Replace(webMain[webFiles+"cm.yaml"], `"2"`, `"4"`, 1)})
	w.argo.SetRepoServerDown(true)
	_, err = w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web"}, Revision: head})
	if !errors.Is(err, agent.ErrUnavailable) || !strings.Contains(err.Error(), "code = Unavailable") {
		t.Fatalf("repo-server down: err = %v, want CodeUnavailable", err)
	}
	w.argo.SetRepoServerDown(false)
	if d := diffOne(t, w, agent.DiffRequest{Apps: []string{"web"}, Revision: head}); len(d.Resources) != 1 {
		t.Fatalf("after the repo-server is back: %+v", d)
	}

	for _, rev := range []string{"../../etc/passwd", "main; rm -rf /", "-x"} {
		if _, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web"}, Revision: rev}); !errors.Is(err, agent.ErrInvalid) {
			t.Errorf("revision %q: err = %v, want CodeInvalid", rev, err)
		}
	}
}

// Many previews at once — several heads, two apps — each get their own answer.
func TestDiffConcurrentPreviews(t *testing.T) {
	w, _ := diffWorld(t, nil)
	w.addApp(app("web2", "apps/web", nil), argocdtest.Deployed())
	w.waitRecord("eu", "web2", "synced", func(st *agent.AppStatus) bool { return st != nil && st.Sync == agent.SyncSynced })
	heads := map[string]string{}
	for i := 3; i < 9; i++ {
		v := fmt.Sprint(i)
		heads[v] = pr(w, "pr-"+v, map[string]string{"cm.yaml": strings.Replace(webMain[webFiles+"cm.yaml"], `replicas: "2"`, `replicas: "`+v+`"`, 1)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for round := 0; round < 3; round++ {
		for v, head := range heads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web", "web2"}, Revision: head})
				if err != nil {
					errs <- err
					return
				}
				for _, d := range got {
					cm := resource(d, "ConfigMap", "web")
					if cm == nil || !strings.Contains(cm.Diff, `+  replicas: "`+v+`"`) {
						errs <- fmt.Errorf("head %s, app %s: %+v", v, d.App, d)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// An ApplicationSet preview asks Argo CD to generate the set with its git generators reading
// the head: a changed config becomes a spec change of the app ("…tlas.image: a → b"), a new
// config a created app, a removed one a deleted app. Without applicationsets create
// permission the preview fails and says which permission is missing.
func TestDiffApplicationSetSpecChanges(t *testing.T) {
	w := newWorld(t)
	cfg := func(image string) string { return `{"image": "` + image + `", "replicas": 2}` }
	base := map[string]string{
		"manifests/web/cm.yaml":       healthyCM,
		"envs/dev/config.json":        cfg("web:1.0"),
		"envs/staging/config.json":    cfg("web:0.9"),
		"envs/staging/unrelated.yaml": "x: 1\n",
	}
	w.sha = w.git.Commit(repoURL, "main", base)
	tlas := json.RawMessage(`{"include":"*.yaml","jsonnet":{"tlas":[{"name":"env","value":"{{path.basename}}"},{"name":"image","value":"{{image}}"}]}}`)
	set := gitFilesAppSet("web", "envs/*/config.json", "web-{{path.basename}}", argocdtest.ApplicationSpec{Project: "default",
		Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: "manifests/web", TargetRevision: "main", Directory: tlas},
		Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "web-{{path.basename}}"}})
	if err := w.argo.AddApplicationSet(set); err != nil {
		t.Fatal(err)
	}
	w.start("eu", "r1")
	w.waitRecord("eu", "web-dev", "generated", func(st *agent.AppStatus) bool { return st != nil })

	head := w.git.Commit(repoURL, "pr-1", map[string]string{
		"manifests/web/cm.yaml": healthyCM, "envs/dev/config.json": cfg("web:1.1"), "envs/prod/config.json": cfg("web:1.0"),
	})
	req := agent.DiffRequest{ApplicationSet: "web", RepoURL: "release", Revision: head}
	got, err := w.client.Diff(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	byApp := map[string]agent.AppDiff{}
	var names []string
	for _, d := range got {
		byApp[d.App] = d
		names = append(names, d.App)
	}
	if strings.Join(names, ",") != "web-dev,web-prod,web-staging" {
		t.Fatalf("apps: %v", names)
	}
	// Argo CD renders the stored spec only: the reply must not pass that off as the new one's.
	if d := byApp["web-dev"]; !d.SpecNotRendered {
		t.Errorf("web-dev's spec changed but the reply does not say its resources were rendered with the old spec: %+v", d)
	}
	if d := byApp["web-dev"]; strings.Join(d.SpecChanges, ";") != "source.directory.jsonnet.tlas.image: web:1.0 → web:1.1" || d.Created || d.Deleted || d.Error != "" {
		t.Fatalf("web-dev: %+v", d)
	}
	if d := byApp["web-prod"]; !d.Created || d.Deleted || len(d.Resources) != 0 {
		t.Fatalf("web-prod: %+v", d)
	}
	if d := byApp["web-staging"]; !d.Deleted || d.Created || len(d.Resources) != 1 || d.Resources[0].Change != agent.ChangeRemoved || d.Resources[0].Namespace != "web-staging" {
		t.Fatalf("web-staging: %+v", d)
	}
	// The same head again: one call (the set itself, to see that its spec did not change;
	// v3.2 has no ApplicationSet watch), the same answer.
	before := len(w.argo.Requests())
	again, err := w.client.Diff(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again) != fmt.Sprint(got) {
		t.Fatalf("repeated ApplicationSet preview differs:\n%+v\n%+v", again, got)
	}
	if reqs := w.argo.Requests()[before:]; len(reqs) != 1 || reqs[0].Path != "/api/v1/applicationsets/web" {
		t.Fatalf("a repeated ApplicationSet preview called Argo CD: %+v", reqs)
	}

	// The generate call read the head, not main: Argo CD was asked with the pinned revision.
	var body string
	for _, r := range w.argo.Requests() {
		if r.Path == "/api/v1/applicationsets/generate" {
			body = string(r.Body)
		}
	}
	if !strings.Contains(body, `"revision":"`+head+`"`) {
		t.Fatalf("generate request: %s", body)
	}
	// Nothing was written: the apps are as before.
	if a, _ := w.argo.App("web-dev"); !strings.Contains(string(a.Spec.Source.Directory), "web:1.0") {
		t.Fatalf("the preview changed the app: %s", a.Spec.Source.Directory)
	}
	if _, ok := w.argo.App("web-prod"); ok {
		t.Fatal("the preview created web-prod")
	}

	// prod is merged to main and generated: the remembered preview no longer holds (a new app
	// of the set), and the head now creates nothing.
	w.git.Commit(repoURL, "main", map[string]string{"envs/prod/config.json": cfg("web:1.0")})
	if _, err := w.client.RefreshAppSets(context.Background(), "eu", agent.RefreshRequest{ApplicationSet: "web", Wait: true}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web-prod", "generated", func(st *agent.AppStatus) bool { return st != nil })
	got, err = w.client.Diff(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got {
		if d.App == "web-prod" && (d.Created || d.Changed()) {
			t.Fatalf("web-prod after it was generated: %+v", d)
		}
	}

	// A repo the set does not read, and a set that does not exist, are the caller's mistakes.
	if _, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", RepoURL: "acme/other", Revision: head}); !errors.Is(err, agent.ErrInvalid) ||
		!strings.Contains(err.Error(), "no git generator reading repo") {
		t.Fatalf("other repo: %v", err)
	}
	if _, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "nope", Revision: head}); !errors.Is(err, agent.ErrNotFound) ||
		!strings.Contains(err.Error(), "ApplicationSet nope") {
		t.Fatalf("missing set: %v", err)
	}

	// A head whose config does not parse cannot be generated: the revision's problem.
	bad := w.git.Commit(repoURL, "pr-bad", map[string]string{"manifests/web/cm.yaml": healthyCM, "envs/dev/config.json": `{"image": `})
	if _, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", Revision: bad}); !errors.Is(err, agent.ErrRejected) ||
		!strings.Contains(err.Error(), "ApplicationSet web at") || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("config that does not parse: %v", err)
	}
	// Repo-server down: Argo CD cannot work now, the caller retries (a new head: the one
	// previewed before is answered from memory).
	head2 := w.git.Commit(repoURL, "pr-2", map[string]string{"envs/dev/config.json": cfg("web:1.2")})
	w.argo.SetRepoServerDown(true)
	if _, err := w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", Revision: head2}); !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("repo-server down: %v", err)
	}
	w.argo.SetRepoServerDown(false)

	w.argo.Deny("applicationsets", "create")
	_, err = w.client.Diff(context.Background(), "eu", agent.DiffRequest{ApplicationSet: "web", Revision: head2})
	if !errors.Is(err, agent.ErrUnauthorized) || !strings.Contains(err.Error(), "applicationsets create permission") {
		t.Fatalf("without applicationsets create: %v", err)
	}
}

// The comparison itself: a kind the agent does not know as cluster-scoped (a CRD's) matches
// Argo CD's namespace-less target; list paths are indexed; the diff cap truncates diffs but
// keeps every object and path; a manifest that is not an object is an error naming it.
func TestCompareAppEdgeCases(t *testing.T) {
	deploy := func(image string) string {
		return mustJSON(t, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": image}}}}}})
	}
	issuer := mustJSON(t, map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": map[string]any{"name": "le"}, "spec": map[string]any{"acme": map[string]any{}}})
	cur := []ManagedResource{
		{Group: "cert-manager.io", Kind: "ClusterIssuer", Name: "le", TargetState: issuer},
		{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web", TargetState: deploy("web:1")},
	}
	d := &agent.AppDiff{}
	if err := compareApp(d, []string{issuer, deploy("web:2")}, cur, "shop", "web", 1<<20); err != nil {
		t.Fatal(err)
	}
	if d.Unchanged != 1 || len(d.Resources) != 1 || strings.Join(d.Resources[0].Paths, ",") != "spec.template.spec.containers[0].image" {
		t.Fatalf("diff: %+v", d)
	}

	var many []string
	var manyCur []ManagedResource
	for i := 0; i < 20; i++ {
		o := func(v string) string {
			return mustJSON(t, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": fmt.Sprintf("c%02d", i)},
				"data": map[string]any{"v": v, "pad": strings.Repeat("x", 200)}})
		}
		manyCur = append(manyCur, ManagedResource{Kind: "ConfigMap", Namespace: "shop", Name: fmt.Sprintf("c%02d", i), TargetState: o("1")})
		many = append(many, o("2"))
	}
	d = &agent.AppDiff{}
	if err := compareApp(d, many, manyCur, "shop", "web", 2000); err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, r := range d.Resources {
		size += len(r.Diff)
		if strings.Join(r.Paths, ",") != "data.v" {
			t.Fatalf("paths of %s: %v", r.Name, r.Paths)
		}
	}
	if !d.Truncated || len(d.Resources) != 20 || size > 2000 || d.Resources[0].Diff == "" || d.Resources[19].Diff != "" {
		t.Fatalf("capped diff: truncated %v, %d resources, %d bytes", d.Truncated, len(d.Resources), size)
	}

	for _, bad := range []string{`[1,2]`, `{"kind": "ConfigMap"}`, `{not json`} {
		err := compareApp(&agent.AppDiff{}, []string{bad}, nil, "shop", "web", 1<<20)
		if err == nil || !strings.Contains(err.Error(), "rendered manifest 1") {
			t.Errorf("manifest %s: err = %v", bad, err)
		}
	}
}
