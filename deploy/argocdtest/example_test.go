package argocdtest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/examples"
)

// Issue 20: examples/release-repo must deploy unchanged on Argo CD. Its ApplicationSet used the
// environment directory as a directory source, so config.json (generator parameters, no kind)
// was applied as a manifest and every app failed with "Object 'Kind' is missing". The fake
// generates the apps from the example as the ApplicationSet controller does and loads their
// target state as the repo-server does. It does not evaluate Jsonnet, so what it proves is that
// no app reads a non-manifest, and that the config values reach the apps' arguments.
func TestExampleReleaseRepoDeploys(t *testing.T) {
	files := examples.ReleaseRepo()
	var doc any
	if err := yaml.Unmarshal([]byte(files["appset.yaml"]), &doc); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var as ApplicationSet
	if err := json.Unmarshal(b, &as); err != nil {
		t.Fatal(err)
	}
	mg := NewMemGit()
	mg.Commit(as.Spec.Generators[0].Git.RepoURL, "main", files)
	s := New(WithGitReader(mg), WithTimeline(3*time.Millisecond, 1))
	t.Cleanup(s.Close)
	if err := s.AddApplicationSet(as); err != nil {
		t.Fatal(err)
	}
	apps := s.Apps()
	if len(apps) != 3 {
		t.Fatalf("%d apps generated, want one per envs/*/config.json (3)", len(apps))
	}
	for _, app := range apps {
		name := app.Metadata.Name
		env := strings.TrimPrefix(name, "web-")
		a := getApp(t, s, name+"?refresh=hard")
		if len(a.Status.Conditions) != 0 || a.Status.Sync.Status != SyncStatusOutOfSync && a.Status.Sync.Status != SyncStatusSynced {
			t.Errorf("%s: %s %+v", name, state(a), a.Status.Conditions)
		}
		src := a.Spec.Source
		var dir struct {
			Include string `json:"include"`
			Exclude string `json:"exclude"`
			Jsonnet struct {
				TLAs []struct{ Name, Value string } `json:"tlas"`
			} `json:"jsonnet"`
		}
		if err := json.Unmarshal(src.Directory, &dir); err != nil {
			t.Fatalf("%s: directory %s: %v", name, src.Directory, err)
		}
		// Every file the source reads is a Jsonnet manifest; config.json is not among them.
		var read []string
		for p := range files {
			rel, ok := strings.CutPrefix(p, src.Path+"/")
			if !ok || strings.Contains(rel, "/") {
				continue
			}
			if (dir.Exclude == "" || !globMatch(dir.Exclude, rel)) && (dir.Include == "" || globMatch(dir.Include, rel)) {
				read = append(read, rel)
				if !strings.HasSuffix(rel, ".jsonnet") {
					t.Errorf("%s: source %s reads %s, which is not a manifest", name, src.Path, rel)
				}
			}
		}
		if len(read) == 0 {
			t.Errorf("%s: source %s holds no manifests", name, src.Path)
		}
		tlas := map[string]string{}
		for _, v := range dir.Jsonnet.TLAs {
			tlas[v.Name] = v.Value
		}
		var cfg struct {
			Image   struct{ Repository, Tag string }
			Cluster struct{ Name string }
		}
		if err := json.Unmarshal([]byte(files["envs/"+env+"/config.json"]), &cfg); err != nil {
			t.Fatal(err)
		}
		if tlas["env"] != env || tlas["image"] != cfg.Image.Repository+":"+cfg.Image.Tag {
			t.Errorf("%s: arguments %v do not carry envs/%s/config.json", name, tlas, env)
		}
		if a.Spec.Destination.Name != cfg.Cluster.Name {
			t.Errorf("%s: destination %+v, want cluster %s", name, a.Spec.Destination, cfg.Cluster.Name)
		}
	}
}
