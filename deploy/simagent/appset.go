package simagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/deploy/appset"
)

// appSet is the part of an Argo CD ApplicationSet the simulated agent reads: its name and the
// spec that deploy/appset generates apps from (git files generators only, see generate).
type appSet struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec appset.Spec `json:"spec"`
}

// appTemplate is the rendered template of one generated app.
type appTemplate struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Project string `json:"project"`
		Source  struct {
			RepoURL        string `json:"repoURL"`
			Path           string `json:"path"`
			TargetRevision string `json:"targetRevision"`
			// What the app renders (render.go): a directory source; Helm and Kustomize
			// sources are recognised only to say they are not rendered.
			Directory *directorySource `json:"directory,omitempty"`
			Helm      json.RawMessage  `json:"helm,omitempty"`
			Kustomize json.RawMessage  `json:"kustomize,omitempty"`
			Chart     string           `json:"chart,omitempty"`
		} `json:"source"`
		Destination struct {
			Server    string `json:"server"`
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"destination"`
	} `json:"spec"`
}

// genApp is one app the ApplicationSet generates from one config file.
type genApp struct {
	tmpl   appTemplate
	file   string // the generator file (the app's config)
	config map[string]any
	appset string
}

// findAppSet locates the ApplicationSet manifest: the given path, or the single YAML/JSON file
// in the repo whose kind is ApplicationSet.
func findAppSet(files map[string][]byte, want string) (string, *appSet, error) {
	if want != "" {
		b, ok := files[want]
		if !ok {
			return "", nil, fmt.Errorf("ApplicationSet manifest %s: not in the release repo", want)
		}
		as, err := parseAppSet(b)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", want, err)
		}
		if as == nil {
			return "", nil, fmt.Errorf("%s: no document of kind ApplicationSet", want)
		}
		return want, as, nil
	}
	var found []string
	var sets []*appSet
	for _, p := range sortedKeys(files) {
		if !bytes.Contains(files[p], []byte("ApplicationSet")) {
			continue
		}
		as, err := parseAppSet(files[p])
		if err != nil || as == nil {
			continue
		}
		found = append(found, p)
		sets = append(sets, as)
	}
	switch len(found) {
	case 0:
		return "", nil, fmt.Errorf("no ApplicationSet manifest (kind: ApplicationSet) found in the release repo")
	case 1:
		return found[0], sets[0], nil
	}
	return "", nil, fmt.Errorf("several ApplicationSet manifests in the release repo (%s): name one", strings.Join(found, ", "))
}

func isManifest(p string) bool {
	switch strings.ToLower(path.Ext(p)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// parseAppSet returns the first ApplicationSet document of a YAML or JSON file (nil if none).
func parseAppSet(b []byte) (*appSet, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, err
		}
		if doc["kind"] != "ApplicationSet" {
			continue
		}
		jb, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		var as appSet
		if err := json.Unmarshal(jb, &as); err != nil {
			return nil, fmt.Errorf("ApplicationSet: %w", err)
		}
		if as.Metadata.Name == "" {
			return nil, fmt.Errorf("ApplicationSet: metadata.name is empty")
		}
		return &as, nil
	}
}

// generate renders one app per config file the ApplicationSet's git files generators match
// in files (the release repo's manifests at one commit; the generators' repoURL and revision
// are taken to be that repo and commit, since the simulated agent watches one repo).
func (as *appSet) generate(files map[string][]byte) ([]genApp, error) {
	for i, g := range as.Spec.Generators {
		if g.Git == nil || len(g.Git.Files) == 0 {
			return nil, fmt.Errorf("ApplicationSet %s: generators[%d]: the simulated agent supports only git files generators", as.Metadata.Name, i)
		}
	}
	if len(as.Spec.Generators) == 0 {
		return nil, fmt.Errorf("ApplicationSet %s: no git files generator", as.Metadata.Name)
	}
	spec := as.spec()
	gen, err := appset.Generate(context.Background(), filesRepo(files), spec)
	if err != nil {
		return nil, fmt.Errorf("ApplicationSet %s: %w", as.Metadata.Name, err)
	}
	var out []genApp
	seen := map[string]string{}
	for _, g := range gen {
		// configAt reads a config file back as one object: a file holding a list of them
		// cannot say which app it deploys.
		if prev, dup := seen[g.File]; dup {
			return nil, fmt.Errorf("ApplicationSet %s: config file %s: holds a list (apps %s and %s); the simulated agent wants one object of keys per file", as.Metadata.Name, g.File, prev, g.Name)
		}
		seen[g.File] = g.Name
		var t appTemplate
		if err := json.Unmarshal(g.Template, &t); err != nil {
			return nil, fmt.Errorf("ApplicationSet %s: config file %s: rendered template: %w", as.Metadata.Name, g.File, err)
		}
		out = append(out, genApp{tmpl: t, file: g.File, config: g.Config, appset: as.Metadata.Name})
	}
	return out, nil
}

// spec is the ApplicationSet's spec as the simulated agent evaluates it: a missing template
// parameter is an error (missingkey=error), so a typo in the template fails loudly.
func (as *appSet) spec() appset.Spec {
	spec := as.Spec
	spec.Name = as.Metadata.Name
	if spec.GoTemplate && len(spec.GoTemplateOptions) == 0 {
		spec.GoTemplateOptions = []string{"missingkey=error"}
	}
	return spec
}

// render fills the template with the parameters of config file `file` holding cfg.
func (as *appSet) render(file string, cfg map[string]any) (appTemplate, error) {
	var t appTemplate
	spec := as.spec()
	raw, err := appset.Render(spec.Template, appset.FileParams(file, cfg, "", spec.GoTemplate), spec.GoTemplate, spec.GoTemplateOptions)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, fmt.Errorf("rendered template: %w", err)
	}
	return t, nil
}

// parseConfig reads an app's config file: one object of keys.
func parseConfig(b []byte) (map[string]any, error) {
	objs, err := appset.ParseConfigFile(b)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("want one object of keys, got a list of %d", len(objs))
	}
	return objs[0], nil
}

// filesRepo serves the generators from the manifests read at one commit.
type filesRepo map[string][]byte

func (filesRepo) Resolve(context.Context, string, string) (string, error) { return "", nil }

func (f filesRepo) ReadTree(_ context.Context, _, _, dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, b := range f {
		if dir == "" {
			out[p] = b
		} else if rel, ok := strings.CutPrefix(p, dir+"/"); ok {
			out[rel] = b
		}
	}
	return out, nil
}

// simulated reads the config's `simulate` key: degraded, progressing, suspended or healthy.
func simulated(cfg map[string]any) string {
	s, _ := cfg["simulate"].(string)
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "degraded":
		return "Degraded"
	case "progressing":
		return "Progressing"
	case "suspended":
		return "Suspended"
	}
	return "Healthy"
}

// unionKeys returns the keys of a and b, each once, sorted.
func unionKeys[V any](a, b map[string]V) []string {
	keys := make(map[string]bool, len(a)+len(b))
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return sortedKeys(keys)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
