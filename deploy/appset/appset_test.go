package appset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// memRepo is a repository at one commit per revision, read the way Repo promises.
type memRepo struct {
	revs  map[string]string            // revision → sha
	trees map[string]map[string]string // sha → path → content
}

func (m *memRepo) Resolve(_ context.Context, repoURL, revision string) (string, error) {
	if sha, ok := m.revs[revision]; ok {
		return sha, nil
	}
	return "", fmt.Errorf("error resolving %q in %s: no such revision", revision, repoURL)
}

func (m *memRepo) ReadTree(_ context.Context, _, sha, dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, c := range m.trees[sha] {
		if dir == "" {
			out[p] = []byte(c)
		} else if rel, ok := strings.CutPrefix(p, dir+"/"); ok {
			out[rel] = []byte(c)
		}
	}
	return out, nil
}

func newMemRepo(files map[string]string) *memRepo {
	return &memRepo{revs: map[string]string{"main": "sha1"}, trees: map[string]map[string]string{"sha1": files}}
}

func spec(t *testing.T, js string) Spec {
	t.Helper()
	var s Spec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	s.Name = "web"
	return s
}

const filesSpec = `{
  "generators": [{"git": {"repoURL": "https://git.example/r.git", "revision": "main",
    "files": [{"path": "envs/*/config.yaml"}, {"path": "envs/off/*", "exclude": true}]}}],
  "template": {"metadata": {"name": "web-{{env}}", "labels": {"org": "{{path[0]}}", "dir": "{{path.basename}}"}},
    "spec": {"project": "shop", "destination": {"name": "{{cluster.name}}", "namespace": "{{ nope }}"}, "replicas": 3}}
}`

func TestGenerateGitFiles(t *testing.T) {
	repo := newMemRepo(map[string]string{
		"envs/dev/config.yaml":  "env: dev\ncluster:\n  name: dev-eu\n",
		"envs/prod/config.yaml": `{"env": "prod", "cluster": {"name": "prod-us"}}`,
		"envs/off/config.yaml":  "env: off\n",
		"envs/dev/values.yaml":  "env: nope\n",
		"README.md":             "not a config\n",
	})
	apps, err := Generate(context.Background(), repo, spec(t, filesSpec))
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 2 || apps[0].Name != "web-dev" || apps[1].Name != "web-prod" {
		t.Fatalf("apps %+v", apps)
	}
	var got struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct {
			Destination struct{ Name, Namespace string }
			Replicas    json.Number
		}
	}
	if err := json.Unmarshal(apps[0].Template, &got); err != nil {
		t.Fatal(err)
	}
	// Unknown fasttemplate parameters stay as written; numbers are not turned into floats.
	if got.Metadata.Labels["org"] != "envs" || got.Metadata.Labels["dir"] != "dev" || got.Spec.Destination.Name != "dev-eu" ||
		got.Spec.Destination.Namespace != "{{ nope }}" || got.Spec.Replicas != "3" {
		t.Fatalf("rendered %s", apps[0].Template)
	}
	if apps[0].File != "envs/dev/config.yaml" || apps[0].Config["env"] != "dev" {
		t.Fatalf("app source %q %v", apps[0].File, apps[0].Config)
	}
}

func TestGenerateGoTemplateKeepsConfigAndNamesField(t *testing.T) {
	repo := newMemRepo(map[string]string{"envs/dev/config.yaml": "env: dev\ncluster:\n  name: dev-eu\n"})
	s := spec(t, `{"goTemplate": true, "goTemplateOptions": ["missingkey=error"],
	  "generators": [{"git": {"repoURL": "r", "revision": "main", "files": [{"path": "envs/*/config.yaml"}]}}],
	  "template": {"metadata": {"name": "web-{{ .env }}-{{ index .path.segments 1 }}"}, "spec": {"destination": {"name": "{{ .cluster.name | upper }}"}}}}`)
	apps, err := Generate(context.Background(), repo, s)
	if err != nil || len(apps) != 1 || apps[0].Name != "web-dev-dev" || !strings.Contains(string(apps[0].Template), `"DEV-EU"`) {
		t.Fatalf("apps %+v %v", apps, err)
	}
	// The path parameters are the app's, not its config file's.
	if _, leaked := apps[0].Config["path"]; leaked || len(apps[0].Config) != 2 {
		t.Fatalf("config changed by rendering: %v", apps[0].Config)
	}
	s.Template = json.RawMessage(`{"metadata": {"name": "x"}, "spec": {"destination": {"namespace": "{{ .nope }}"}}}`)
	_, err = Generate(context.Background(), repo, s)
	if err == nil || !strings.Contains(err.Error(), "destination: namespace") || !strings.Contains(err.Error(), "nope") ||
		!strings.Contains(err.Error(), "envs/dev/config.yaml") {
		t.Fatalf("a missing parameter must be an error naming the field and the file: %v", err)
	}
}

func TestGenerateListAndDirectories(t *testing.T) {
	repo := newMemRepo(map[string]string{"apps/blue/cm.yaml": "x", "apps/green/cm.yaml": "x", "apps/skip/cm.yaml": "x"})
	s := spec(t, `{"generators": [
	    {"list": {"elements": [{"color": "red", "values": {"tier": "front"}}],
	              "template": {"metadata": {"labels": {"gen": "list"}}}}},
	    {"git": {"repoURL": "r", "revision": "main", "directories": [{"path": "apps/*"}, {"path": "apps/skip", "exclude": true}],
	             "values": {"tier": "{{path.basename}}-tier"}}}],
	  "template": {"metadata": {"name": "{{color}}{{path.basename}}", "labels": {"tier": "{{values.tier}}"}}, "spec": {}}}`)
	apps, err := Generate(context.Background(), repo, s)
	if err != nil {
		t.Fatal(err)
	}
	var names, tiers []string
	for _, a := range apps {
		var m struct {
			Metadata struct{ Labels map[string]string }
		}
		_ = json.Unmarshal(a.Template, &m)
		names = append(names, a.Name)
		tiers = append(tiers, m.Metadata.Labels["tier"]+"/"+m.Metadata.Labels["gen"])
	}
	// The list app keeps the unknown {{path.basename}}; the generator template adds a label.
	if strings.Join(names, ",") != "red{{path.basename}},{{color}}blue,{{color}}green" ||
		strings.Join(tiers, ",") != "front/list,blue-tier/,green-tier/" {
		t.Fatalf("names %v tiers %v", names, tiers)
	}
}

func TestGenerateMistakes(t *testing.T) {
	repo := newMemRepo(map[string]string{
		"envs/a/config.yaml": "env: same\n", "envs/b/config.yaml": "env: same\n",
		"bad/x/config.yaml": "env: [unclosed\n", "list/x/config.yaml": "- 1\n",
	})
	git := func(files, extra string) string {
		return `{"generators": [{"git": {"repoURL": "r", "revision": "main", "files": [{"path": "` + files + `"}]` + extra + `}}],
		  "template": {"metadata": {"name": "web-{{env}}"}, "spec": {}}}`
	}
	cases := map[string]struct{ spec, want string }{
		"duplicate app":   {git("envs/*/config.yaml", ""), "duplicate name: web-same (config files envs/a/config.yaml and envs/b/config.yaml)"},
		"broken yaml":     {git("bad/*/config.yaml", ""), "unable to process file 'bad/x/config.yaml'"},
		"list of numbers": {git("list/*/config.yaml", ""), "unable to process file 'list/x/config.yaml': element 0 is not an object"},
		"unknown branch":  {strings.Replace(git("envs/*/config.yaml", ""), `"main"`, `"mian"`, 1), `error resolving "mian"`},
		"no repoURL":      {strings.Replace(git("envs/*/config.yaml", ""), `"repoURL": "r", `, "", 1), "repoURL is required"},
		"no files":        {`{"generators": [{"git": {"repoURL": "r", "revision": "main"}}], "template": {}}`, "either files or directories"},
		"empty name":      {strings.Replace(git("envs/a/config.yaml", ""), "web-{{env}}", "", 1), "has no metadata.name"},
		"matrix":          {`{"generators": [{"matrix": {}}], "template": {}}`, "generator 0: only list and git generators"},
		"list not object": {`{"generators": [{"list": {"elements": ["x"]}}], "template": {}}`, "list element 0 is not an object"},
		"list number":     {`{"generators": [{"list": {"elements": [{"n": 1}]}}], "template": {}}`, `error parsing value of "n" as string`},
		"bad go template": {`{"goTemplate": true, "generators": [{"list": {"elements": [{"n": "1"}]}}], "template": {"metadata": {"name": "{{ .n "}}}`, "failed to parse template"},
	}
	for name, c := range cases {
		_, err := Generate(context.Background(), repo, spec(t, c.spec))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	_, err := Generate(context.Background(), repo, spec(t, `{"generators": [{"clusters": {}}], "template": {}}`))
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("clusters generator: %v, want ErrUnsupported", err)
	}
}

// Generation keeps no state: ApplicationSets generate concurrently (the fake Argo CD does).
func TestGenerateConcurrently(t *testing.T) {
	repo := newMemRepo(map[string]string{"envs/dev/config.yaml": "env: dev\ncluster: {name: dev-eu}\n"})
	s := spec(t, filesSpec)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			apps, err := Generate(context.Background(), repo, s)
			if err == nil && (len(apps) != 1 || apps[0].Name != "web-dev") {
				err = fmt.Errorf("apps %+v", apps)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestGitPathspecMatch(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"cluster-config/**/config.json", "cluster-config/eng/dev/config.json", true},
		{"cluster-config/**/config.json", "cluster-config/config.json", false},
		{"cluster-config/*/config.json", "cluster-config/a/b/config.json", true}, // '*' crosses '/' in git pathspecs
		{"envs/?/config.yaml", "envs/a/config.yaml", true},
		{"envs/[ab]/config.yaml", "envs/c/config.yaml", false},
		{"envs/[!ab]/config.yaml", "envs/c/config.yaml", true},
		{"envs/dev/config.yaml", "envs/dev/config.yaml", true},
		{"envs", "envs/dev/config.yaml", true}, // a directory pathspec matches what is below it
		{"env", "envs/dev/config.yaml", false},
	}
	for _, tc := range cases {
		if got := PathspecMatch(tc.pattern, tc.path); got != tc.want {
			t.Errorf("PathspecMatch(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
	if d := LiteralDir("cluster-config/**/config.json"); d != "cluster-config" {
		t.Errorf("LiteralDir = %q", d)
	}
	if d := LiteralDir("*.json"); d != "" {
		t.Errorf("LiteralDir = %q", d)
	}
	if n := SanitizeName("Directory_2.X"); n != "directory-2.x" {
		t.Errorf("SanitizeName = %q", n)
	}
}

// Moved from the simulated agent's tests: it matched files with a copy of this logic.
func TestFilesGeneratorGlobsCrossSlash(t *testing.T) {
	if !Matches([]PathItem{{Path: "envs/*/config.yaml"}}, "envs/a/b/config.yaml") || Matches([]PathItem{{Path: "envs/*/config.yaml"}}, "envs/a/values.yaml") {
		t.Fatal("files generator globs match like git pathspecs ('*' crosses '/')")
	}
}
