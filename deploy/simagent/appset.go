package simagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"
)

// appSet is the part of an Argo CD ApplicationSet the simulated agent understands: git files
// generators and the template's name, labels, project, source and destination.
type appSet struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		GoTemplate bool `json:"goTemplate"`
		Generators []struct {
			Git *struct {
				RepoURL string `json:"repoURL"`
				Files   []struct {
					Path    string `json:"path"`
					Exclude bool   `json:"exclude"`
				} `json:"files"`
				Directories []any `json:"directories"`
			} `json:"git"`
		} `json:"generators"`
		Template json.RawMessage `json:"template"`
	} `json:"spec"`
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

// patterns are the files generators' include and exclude globs.
func (as *appSet) patterns() (include, exclude []string, err error) {
	for i, g := range as.Spec.Generators {
		if g.Git == nil || len(g.Git.Files) == 0 {
			return nil, nil, fmt.Errorf("ApplicationSet %s: generators[%d]: the simulated agent supports only git files generators", as.Metadata.Name, i)
		}
		for _, f := range g.Git.Files {
			if f.Exclude {
				exclude = append(exclude, f.Path)
			} else {
				include = append(include, f.Path)
			}
		}
	}
	if len(include) == 0 {
		return nil, nil, fmt.Errorf("ApplicationSet %s: no git files generator", as.Metadata.Name)
	}
	return include, exclude, nil
}

// generate renders one app per matching config file.
func (as *appSet) generate(files map[string][]byte) ([]genApp, error) {
	include, exclude, err := as.patterns()
	if err != nil {
		return nil, err
	}
	var out []genApp
	seen := map[string]string{}
	for _, p := range sortedKeys(files) {
		if !matchAny(include, p) || matchAny(exclude, p) {
			continue
		}
		cfg, err := parseConfig(files[p])
		if err != nil {
			return nil, fmt.Errorf("ApplicationSet %s: config file %s: %w", as.Metadata.Name, p, err)
		}
		t, err := as.render(p, cfg)
		if err != nil {
			return nil, fmt.Errorf("ApplicationSet %s: config file %s: %w", as.Metadata.Name, p, err)
		}
		if t.Metadata.Name == "" {
			return nil, fmt.Errorf("ApplicationSet %s: config file %s: rendered app name is empty", as.Metadata.Name, p)
		}
		if prev, dup := seen[t.Metadata.Name]; dup {
			return nil, fmt.Errorf("ApplicationSet %s: config files %s and %s both generate app %q", as.Metadata.Name, prev, p, t.Metadata.Name)
		}
		seen[t.Metadata.Name] = p
		out = append(out, genApp{tmpl: t, file: p, config: cfg, appset: as.Metadata.Name})
	}
	return out, nil
}

func parseConfig(b []byte) (map[string]any, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	jb, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(jb, &m); err != nil {
		return nil, fmt.Errorf("want an object of keys, got %s", strings.TrimSpace(string(jb)))
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// render fills the template with the file's parameters: {{ key.sub }} by default, Go
// templates ({{ .key.sub }}) with goTemplate, as Argo CD's ApplicationSet controller does.
func (as *appSet) render(file string, cfg map[string]any) (appTemplate, error) {
	var t appTemplate
	dir := path.Dir(file)
	var raw []byte
	if as.Spec.GoTemplate {
		params := map[string]any{}
		for k, v := range cfg {
			params[k] = v
		}
		params["path"] = map[string]any{"path": dir, "basename": path.Base(dir), "filename": path.Base(file),
			"segments": strings.Split(dir, "/")}
		out, err := renderJSON(as.Spec.Template, func(s string) (string, error) {
			tp, err := template.New("t").Option("missingkey=error").Parse(s)
			if err != nil {
				return "", err
			}
			var b strings.Builder
			if err := tp.Execute(&b, params); err != nil {
				return "", err
			}
			return b.String(), nil
		})
		if err != nil {
			return t, err
		}
		raw = out
	} else {
		flat := map[string]string{}
		flatten("", cfg, flat)
		flat["path"] = dir
		flat["path.basename"] = path.Base(dir)
		flat["path.filename"] = path.Base(file)
		for i, seg := range strings.Split(dir, "/") {
			flat["path["+strconv.Itoa(i)+"]"] = seg
		}
		out, err := renderJSON(as.Spec.Template, func(s string) (string, error) {
			return placeholder.ReplaceAllStringFunc(s, func(m string) string {
				k := strings.TrimSpace(m[2 : len(m)-2])
				if v, ok := flat[k]; ok {
					return v
				}
				return m
			}), nil
		})
		if err != nil {
			return t, err
		}
		raw = out
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, fmt.Errorf("rendered template: %w", err)
	}
	return t, nil
}

var placeholder = regexp.MustCompile(`\{\{[^{}]*\}\}`)

// renderJSON applies f to every string of a JSON document.
func renderJSON(doc json.RawMessage, f func(string) (string, error)) ([]byte, error) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	var walk func(any) (any, error)
	walk = func(x any) (any, error) {
		switch t := x.(type) {
		case string:
			return f(t)
		case map[string]any:
			for k, e := range t {
				r, err := walk(e)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
				t[k] = r
			}
		case []any:
			for i, e := range t {
				r, err := walk(e)
				if err != nil {
					return nil, err
				}
				t[i] = r
			}
		}
		return x, nil
	}
	out, err := walk(v)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return json.Marshal(out)
}

func flatten(prefix string, v any, out map[string]string) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			flatten(join(k), e, out)
		}
	case []any:
		for i, e := range t {
			flatten(join(strconv.Itoa(i)), e, out)
		}
	default:
		if prefix != "" {
			out[prefix] = fmt.Sprintf("%v", t)
		}
	}
}

// matchAny matches git pathspec globs the way the files generator does: '*' also crosses
// '/', and a pattern without wildcards matches the path or anything below it.
func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		pat = strings.TrimPrefix(pat, "./")
		if !strings.ContainsAny(pat, "*?[") {
			pat = strings.TrimSuffix(pat, "/")
			if p == pat || strings.HasPrefix(p, pat+"/") {
				return true
			}
			continue
		}
		if globRE(pat).MatchString(p) {
			return true
		}
	}
	return false
}

func globRE(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
