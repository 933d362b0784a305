package simagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	jsonnet "github.com/google/go-jsonnet"
	"go.yaml.in/yaml/v3"
)

// The simulated agent renders an app's manifests the way Argo CD renders a directory source:
// every YAML, JSON and Jsonnet file of the source path (include/exclude globs, recurse), the
// Jsonnet ones evaluated with the source's top-level arguments and external variables. Helm
// and Kustomize sources are not rendered (the simulated agent has neither tool).

// directorySource is spec.source.directory of an Argo CD Application.
type directorySource struct {
	Recurse bool   `json:"recurse,omitempty"`
	Include string `json:"include,omitempty"`
	Exclude string `json:"exclude,omitempty"`
	Jsonnet struct {
		TLAs    []jsonnetVar `json:"tlas,omitempty"`
		ExtVars []jsonnetVar `json:"extVars,omitempty"`
		Libs    []string     `json:"libs,omitempty"`
	} `json:"jsonnet"`
}

type jsonnetVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Code  bool   `json:"code,omitempty"`
}

// kobj is one rendered Kubernetes object.
type kobj struct {
	group, kind, namespace, name string
	body                         map[string]any
}

func (o kobj) key() string {
	return o.group + "/" + o.kind + "/" + o.namespace + "/" + o.name
}

// renderable reports whether a repo file can take part in rendering (manifests and Jsonnet
// with its libraries).
func renderable(p string) bool {
	switch strings.ToLower(path.Ext(p)) {
	case ".yaml", ".yml", ".json", ".jsonnet", ".libsonnet":
		return true
	}
	return false
}

// render returns the objects app template t deploys from files (the repo at one commit),
// each with its namespace defaulted to the destination's, as Argo CD applies them.
func render(t appTemplate, files map[string][]byte) ([]kobj, error) {
	src := t.Spec.Source
	if len(src.Helm) > 0 || len(src.Kustomize) > 0 || src.Chart != "" {
		return nil, errors.New("the simulated agent renders directory sources (YAML, JSON, Jsonnet) only, not Helm or Kustomize")
	}
	dir := strings.Trim(path.Clean("/"+src.Path), "/")
	var d directorySource
	if src.Directory != nil {
		d = *src.Directory
	}
	var names []string
	for p := range files {
		rel := p
		if dir != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(p, dir+"/"); !ok {
				continue
			}
		}
		if !d.Recurse && strings.Contains(rel, "/") {
			continue
		}
		switch strings.ToLower(path.Ext(rel)) {
		case ".yaml", ".yml", ".json", ".jsonnet":
		default:
			continue
		}
		if d.Include != "" && !globs(d.Include, rel) || d.Exclude != "" && globs(d.Exclude, rel) {
			continue
		}
		names = append(names, p)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no manifests in the source path", src.Path)
	}
	sort.Strings(names)
	var docs []map[string]any
	for _, p := range names {
		var got []map[string]any
		var err error
		if strings.HasSuffix(p, ".jsonnet") {
			got, err = evalJsonnet(p, files, d)
		} else {
			got, err = yamlDocs(files[p])
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		docs = append(docs, got...)
	}
	var out []kobj
	seen := map[string]bool{}
	for _, doc := range docs {
		o, err := toObject(doc, t.Spec.Destination.Namespace)
		if err != nil {
			return nil, err
		}
		if seen[o.key()] {
			return nil, fmt.Errorf("%s %s/%s is rendered twice", o.kind, o.namespace, o.name)
		}
		seen[o.key()] = true
		out = append(out, o)
	}
	return out, nil
}

// globs matches Argo CD's include/exclude: a glob or {a,b} list of globs.
func globs(pattern, name string) bool {
	p := strings.TrimSuffix(strings.TrimPrefix(pattern, "{"), "}")
	for _, g := range strings.Split(p, ",") {
		if ok, _ := path.Match(strings.TrimSpace(g), name); ok {
			return true
		}
		if ok, _ := path.Match(strings.TrimSpace(g), path.Base(name)); ok {
			return true
		}
	}
	return false
}

func evalJsonnet(file string, files map[string][]byte, d directorySource) ([]map[string]any, error) {
	vm := jsonnet.MakeVM()
	vm.Importer(&repoImporter{files: files, libs: d.Jsonnet.Libs})
	for _, v := range d.Jsonnet.TLAs {
		if v.Code {
			vm.TLACode(v.Name, v.Value)
		} else {
			vm.TLAVar(v.Name, v.Value)
		}
	}
	for _, v := range d.Jsonnet.ExtVars {
		if v.Code {
			vm.ExtCode(v.Name, v.Value)
		} else {
			vm.ExtVar(v.Name, v.Value)
		}
	}
	out, err := vm.EvaluateAnonymousSnippet(file, string(files[file]))
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, err
	}
	return flatten(v)
}

// flatten turns a rendered value (an object, a list of them, or a kind: List) into objects.
func flatten(v any) ([]map[string]any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []any:
		var out []map[string]any
		for _, e := range x {
			got, err := flatten(e)
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
		return out, nil
	case map[string]any:
		if k, _ := x["kind"].(string); strings.HasSuffix(k, "List") {
			if items, ok := x["items"].([]any); ok {
				return flatten(items)
			}
		}
		return []map[string]any{x}, nil
	}
	return nil, fmt.Errorf("renders %T, want an object or a list of objects", v)
}

func yamlDocs(b []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var doc any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		// Through JSON, so numbers and maps have the types Jsonnet's output has.
		jb, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal(jb, &v); err != nil {
			return nil, err
		}
		got, err := flatten(v)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
}

func toObject(doc map[string]any, namespace string) (kobj, error) {
	kind, _ := doc["kind"].(string)
	api, _ := doc["apiVersion"].(string)
	md, _ := doc["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if kind == "" || api == "" || name == "" {
		return kobj{}, fmt.Errorf("an object without kind, apiVersion or metadata.name: %.80s", fmt.Sprint(doc))
	}
	group := ""
	if i := strings.Index(api, "/"); i > 0 {
		group = api[:i]
	}
	ns, _ := md["namespace"].(string)
	if ns == "" && !clusterScoped(kind) {
		ns = namespace
	}
	return kobj{group: group, kind: kind, namespace: ns, name: name, body: doc}, nil
}

func clusterScoped(kind string) bool {
	switch kind {
	case "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume",
		"StorageClass", "PriorityClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		return true
	}
	return false
}

// repoImporter resolves Jsonnet imports among the repo's files: relative to the importing
// file, then in the source's library directories.
type repoImporter struct {
	files map[string][]byte
	libs  []string
}

func (r *repoImporter) Import(importedFrom, importedPath string) (jsonnet.Contents, string, error) {
	cands := []string{path.Join(path.Dir(importedFrom), importedPath)}
	for _, l := range r.libs {
		cands = append(cands, path.Join(strings.Trim(l, "/"), importedPath))
	}
	for _, c := range cands {
		c = strings.TrimPrefix(path.Clean(c), "/")
		if b, ok := r.files[c]; ok {
			return jsonnet.MakeContents(string(b)), c, nil
		}
	}
	return jsonnet.Contents{}, "", fmt.Errorf("import %q: not in the release repo (looked at %s)", importedPath, strings.Join(cands, ", "))
}
