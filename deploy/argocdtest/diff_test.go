package argocdtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

const diffSecret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: plain-value\ndata:\n  k: YWJj\n"

func manifestsOf(t *testing.T, s *Server, app, rev string) []map[string]any {
	t.Helper()
	var m map[string]json.RawMessage
	r := getJSON(t, s, "/api/v1/applications/"+app+"/manifests?revision="+rev, "manifests", &m)
	if len(m) != 1 || m["manifests"] == nil {
		t.Fatalf("v3.2.11 answers the manifests only: %s", r.body)
	}
	var list []string
	_ = json.Unmarshal(m["manifests"], &list)
	var out []map[string]any
	for _, s := range list {
		var o map[string]any
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatalf("manifest %q: %v", s, err)
		}
		out = append(out, o)
	}
	return out
}

// GET …/manifests?revision= renders the stored spec at the revision as realenv's Argo CD
// v3.2.11 does: tracking annotation, no namespace added, Secret data (stringData folded in)
// masked; its failures have the real status codes and texts.
func TestManifestsAtRevision(t *testing.T) {
	s, mg, _ := newFake(t)
	repo := "https://git.example/demo.git"
	if err := s.AddApp(demoApp("demo", repo, "apps/demo"), Deployed()); err != nil {
		t.Fatal(err)
	}
	head := mg.Commit(repo, "pr", map[string]string{"apps/demo/cm.yaml": configMap("demo", "degraded"), "apps/demo/secret.yaml": diffSecret})
	objs := manifestsOf(t, s, "demo", head)
	if len(objs) != 2 {
		t.Fatalf("manifests at head: %v", objs)
	}
	cm, sec := objs[0], objs[1]
	md := cm["metadata"].(map[string]any)
	if md["namespace"] != nil || md["annotations"].(map[string]any)["argocd.argoproj.io/tracking-id"] != "demo:/ConfigMap:demo/demo" ||
		cm["data"].(map[string]any)["simulate"] != "degraded" {
		t.Fatalf("ConfigMap: %v", cm)
	}
	if sec["stringData"] != nil || fmt.Sprint(sec["data"]) != "map[k:++++++++ password:++++++++]" {
		t.Fatalf("Secret: %v", sec)
	}
	// Without ?revision= it renders the target revision.
	if objs := manifestsOf(t, s, "demo", ""); len(objs) != 1 || objs[0]["data"].(map[string]any)["simulate"] != "healthy" {
		t.Fatalf("manifests at main: %v", objs)
	}

	broken := mg.Commit(repo, "broken", map[string]string{"apps/demo/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: [\n"})
	r := call(t, s, "GET", "/api/v1/applications/demo/manifests?revision="+broken, nil)
	var e ErrorBody
	r.json(t, &e)
	if r.status != 400 || e.Code != codeFailedPrecondition || !strings.Contains(e.Message, `"cm.yaml"`) {
		t.Fatalf("broken manifest: %d %s", r.status, r.body)
	}
	wantError(t, call(t, s, "GET", "/api/v1/applications/demo/manifests?revision=nosuchrev", nil), 500, codeUnknown,
		"unable to resolve 'nosuchrev' to a commit SHA")
	wantError(t, call(t, s, "GET", "/api/v1/applications/nope/manifests", nil), 403, codePermissionDenied, "permission denied")
	s.SetRepoServerDown(true)
	r = call(t, s, "GET", "/api/v1/applications/demo/manifests", nil)
	if r.status != 500 || !strings.Contains(string(r.body), "code = Unavailable") {
		t.Fatalf("repo-server down: %d %s", r.status, r.body)
	}
	s.SetRepoServerDown(false)
	s.Deny("applications", "get")
	wantError(t, call(t, s, "GET", "/api/v1/applications/demo/manifests", nil), 403, codePermissionDenied, "permission denied")
	wantError(t, call(t, s, "GET", "/api/v1/applications/demo/managed-resources", nil), 403, codePermissionDenied, "permission denied")
}

type mrItem struct {
	Kind, Name, Namespace                       string
	TargetState, LiveState, NormalizedLiveState string
	Modified                                    bool
}

func managedOf(t *testing.T, s *Server, app string) map[string]mrItem {
	t.Helper()
	var body struct{ Items []mrItem }
	getJSON(t, s, "/api/v1/applications/"+app+"/managed-resources", "managed-resources", &body)
	out := map[string]mrItem{}
	for _, it := range body.Items {
		out[it.Kind+"/"+it.Name] = it
	}
	return out
}

// GET …/managed-resources is the controller's last comparison: target (namespace filled in),
// live with the API server's metadata, normalised live without creationTimestamp, "null" for
// an absent side, Secret values masked jointly (equal values, equal masks).
func TestManagedResources(t *testing.T) {
	s, mg, _ := newFake(t)
	repo := "https://git.example/demo.git"
	mg.Commit(repo, "main", map[string]string{"apps/demo/secret.yaml": diffSecret, "apps/demo/old.yaml": configMap("old", "healthy")})
	if err := s.AddApp(demoApp("demo", repo, "apps/demo"), Deployed()); err != nil {
		t.Fatal(err)
	}
	// main moves on: the Secret's password changes, old.yaml goes, new.yaml comes.
	mg.Commit(repo, "main", map[string]string{"apps/demo/secret.yaml": strings.Replace(diffSecret, "plain-value", "other-value", 1),
		"apps/demo/new.yaml": configMap("new", "healthy")}, "apps/demo/old.yaml")
	s.Reconcile()
	items := managedOf(t, s, "demo")
	if len(items) != 4 {
		t.Fatalf("items: %v", items)
	}
	cm := items["ConfigMap/demo"]
	var target, live, norm map[string]any
	_ = json.Unmarshal([]byte(cm.TargetState), &target)
	_ = json.Unmarshal([]byte(cm.LiveState), &live)
	_ = json.Unmarshal([]byte(cm.NormalizedLiveState), &norm)
	tmd, lmd, nmd := target["metadata"].(map[string]any), live["metadata"].(map[string]any), norm["metadata"].(map[string]any)
	if tmd["namespace"] != "demo" || lmd["resourceVersion"] == nil || lmd["managedFields"] == nil || lmd["creationTimestamp"] == nil ||
		nmd["creationTimestamp"] != nil || nmd["uid"] == nil || cm.Modified {
		t.Fatalf("ConfigMap: %+v", cm)
	}
	if it := items["ConfigMap/old"]; it.TargetState != "null" || it.LiveState == "null" || !it.Modified {
		t.Fatalf("live-only object: %+v", it)
	}
	if it := items["ConfigMap/new"]; it.LiveState != "null" || it.NormalizedLiveState != "null" || it.TargetState == "null" || !it.Modified {
		t.Fatalf("target-only object: %+v", it)
	}
	sec := items["Secret/db"]
	var ts, ls map[string]any
	_ = json.Unmarshal([]byte(sec.TargetState), &ts)
	_ = json.Unmarshal([]byte(sec.LiveState), &ls)
	if fmt.Sprint(ts["data"]) != "map[k:++++++++ password:++++++++]" || fmt.Sprint(ls["data"]) != "map[k:++++++++ password:++++++++++++]" || !sec.Modified {
		t.Fatalf("Secret masks: target %v live %v", ts["data"], ls["data"])
	}
	for _, it := range items {
		if strings.Contains(it.TargetState+it.LiveState+it.NormalizedLiveState, "value") {
			t.Fatalf("a Secret value left the server: %+v", it)
		}
	}
}

// POST /api/v1/applicationsets/generate renders the given set without storing anything,
// refuses without applicationsets create permission or with an unknown project, and reports
// a generator failure as HTTP 500, code 13.
func TestGenerateAppSet(t *testing.T) {
	s, mg, _ := newFake(t)
	repo := "https://git.example/demo.git"
	head := mg.Commit(repo, "pr", map[string]string{"envs/a/config.json": `{"v": "1"}`, "envs/b/config.json": `{"v": "2"}`})
	set := func(rev, project string) map[string]any {
		return map[string]any{"applicationSet": map[string]any{
			"metadata": map[string]any{"name": "envs"},
			"spec": map[string]any{
				"generators": []any{map[string]any{"git": map[string]any{"repoURL": repo, "revision": rev, "files": []any{map[string]any{"path": "envs/*/config.json"}}}}},
				"template": map[string]any{"metadata": map[string]any{"name": "env-{{path.basename}}"},
					"spec": map[string]any{"project": project, "source": map[string]any{"repoURL": repo, "path": "apps/demo", "targetRevision": "v{{v}}"},
						"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "{{path.basename}}"}}},
			}}}
	}
	r := call(t, s, "POST", "/api/v1/applicationsets/generate", set(head, "default"))
	if r.status != 200 {
		t.Fatalf("generate: %d %s", r.status, r.body)
	}
	var out struct{ Applications []Application }
	r.json(t, &out)
	if len(out.Applications) != 2 || out.Applications[0].Metadata.Name != "env-a" || out.Applications[0].Metadata.Namespace != "" ||
		out.Applications[1].Spec.Source.TargetRevision != "v2" {
		t.Fatalf("generated: %s", r.body)
	}
	if len(s.Apps()) != 0 {
		t.Fatalf("generate stored apps: %v", s.Apps())
	}
	// At main the files do not exist: nothing is generated.
	r = call(t, s, "POST", "/api/v1/applicationsets/generate", set("main", "default"))
	out.Applications = nil
	r.json(t, &out)
	if r.status != 200 || len(out.Applications) != 0 {
		t.Fatalf("generate at main: %d %s", r.status, r.body)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applicationsets/generate", set(head, "nope")), 400, codeInvalidArgument,
		"ApplicationSet references project nope which does not exist")
	r = call(t, s, "POST", "/api/v1/applicationsets/generate", set("nosuchrev", "default"))
	if r.status != 500 || !strings.Contains(string(r.body), `"code":13`) || !strings.Contains(string(r.body), "nosuchrev") {
		t.Fatalf("unresolvable revision: %d %s", r.status, r.body)
	}
	wantError(t, call(t, s, "POST", "/api/v1/applicationsets/generate", map[string]any{}), 500, codeUnknown,
		"error creating ApplicationSets: ApplicationSets is nil in request")
	if r := call(t, s, "POST", "/api/v1/applicationsets/generate", set(head, "default"), "Content-Type", "text/plain"); r.status != 415 {
		t.Fatalf("without Content-Type: %d", r.status)
	}
	s.Deny("applicationsets", "create")
	wantError(t, call(t, s, "POST", "/api/v1/applicationsets/generate", set(head, "default")), 403, codePermissionDenied,
		"error checking create permissions for ApplicationSets envs : permission denied")
}

// Previews read while the controller compares and syncs: every answer is whole.
func TestDiffEndpointsConcurrent(t *testing.T) {
	s, mg, _ := newFake(t)
	repo := "https://git.example/demo.git"
	if err := s.AddApp(demoApp("demo", repo, "apps/demo"), Deployed()); err != nil {
		t.Fatal(err)
	}
	heads := make([]string, 6)
	for i := range heads {
		heads[i] = mg.Commit(repo, fmt.Sprintf("pr-%d", i), map[string]string{"apps/demo/cm.yaml": configMap("demo", "healthy"),
			"apps/demo/extra.yaml": configMap(fmt.Sprintf("extra-%d", i), "healthy")})
	}
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for i := range heads {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 5 {
				objs := manifestsOf(t, s, "demo", heads[i])
				if len(objs) != 2 || objs[1]["metadata"].(map[string]any)["name"] != fmt.Sprintf("extra-%d", i) {
					errs <- fmt.Sprintf("head %d: %v", i, objs)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 5 {
				if items := managedOf(t, s, "demo"); items["ConfigMap/demo"].TargetState == "" {
					errs <- fmt.Sprintf("managed-resources: %v", items)
				}
				s.Reconcile()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
