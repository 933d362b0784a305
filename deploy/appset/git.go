package argocdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/template"

	"gopkg.in/yaml.v3"
)

// appsetState is one ApplicationSet plus the outcome of its last generation.
type appsetState struct {
	key  string
	as   ApplicationSet
	rv   int64
	genM sync.Mutex // serialises generations of this appset
}

// ownerRef is the controller reference a generated Application carries.
func (a *appsetState) ownerRef() OwnerReference {
	t := true
	return OwnerReference{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: a.as.Metadata.Name,
		UID: a.as.Metadata.UID, Controller: &t, BlockOwnerDeletion: &t}
}

func ownedBy(app *Application, as *ApplicationSet) bool {
	for _, o := range app.Metadata.OwnerReferences {
		if o.Kind == "ApplicationSet" && o.Name == as.Metadata.Name && (o.UID == "" || o.UID == as.Metadata.UID) {
			return true
		}
	}
	return false
}

// reconcileAppSet is one pass of the ApplicationSet controller: run the
// generators against git, render the template per parameter set, then
// create, update and delete the owned Applications as the sync policy allows.
// It returns the keys of Applications it created or changed.
func (s *Server) reconcileAppSet(ctx context.Context, key string, rc *revCache) []string {
	s.mu.Lock()
	ast := s.appsets[key]
	s.mu.Unlock()
	if ast == nil {
		return nil
	}
	ast.genM.Lock()
	defer ast.genM.Unlock()
	s.mu.Lock()
	as := clone(ast.as)
	s.mu.Unlock()

	desired, genErr := s.generate(ctx, as, rc)
	if ctx.Err() != nil {
		return nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appsets[key] != ast {
		return nil
	}
	now := s.now()
	if genErr != nil {
		ast.as.Status.Conditions = appsetConditions(NewTime(now), genErr)
		s.bumpAppSet(ast)
		s.log.Warn("argocdtest: applicationset generation failed", "appset", key, "err", genErr)
		return nil
	}
	policy := ""
	if as.Spec.SyncPolicy != nil {
		policy = as.Spec.SyncPolicy.ApplicationsSync
	}
	allowUpdate := policy == "" || policy == "sync" || policy == "create-update"
	allowDelete := policy == "" || policy == "sync" || policy == "create-delete"

	var touched []string
	var problems []string
	want := map[string]bool{}
	for _, app := range desired {
		app.Metadata.Namespace = firstNonEmpty(app.Metadata.Namespace, as.Metadata.Namespace, defaultNamespace)
		app.Metadata.OwnerReferences = []OwnerReference{ast.ownerRef()}
		k := app.Metadata.Namespace + "/" + app.Metadata.Name
		want[k] = true
		st := s.apps[k]
		if st == nil || st.gone {
			if !s.namespaces[app.Metadata.Namespace] {
				problems = append(problems, fmt.Sprintf("application %s: namespace %q is not permitted", app.Metadata.Name, app.Metadata.Namespace))
				continue
			}
			s.insertApp(app)
			touched = append(touched, k)
			continue
		}
		if !ownedBy(&st.app, &ast.as) {
			problems = append(problems, fmt.Sprintf("application %s already exists and is not owned by ApplicationSet %s", app.Metadata.Name, as.Metadata.Name))
			continue
		}
		if !allowUpdate {
			continue
		}
		if app.Spec.Project == "" {
			app.Spec.Project = "default"
		}
		if jsonEqual(st.app.Spec, app.Spec) && jsonEqual(st.app.Metadata.Labels, app.Metadata.Labels) &&
			jsonEqual(st.app.Metadata.Annotations, app.Metadata.Annotations) {
			continue
		}
		st.app.Spec = app.Spec
		st.app.Metadata.Labels, st.app.Metadata.Annotations = app.Metadata.Labels, app.Metadata.Annotations
		st.app.Metadata.Generation++
		s.commit(st, EventModified)
		touched = append(touched, k)
	}
	if allowDelete {
		for _, k := range sortedKeys(s.apps) {
			st := s.apps[k]
			if !want[k] && !st.gone && ownedBy(&st.app, &ast.as) && st.app.Metadata.DeletionTimestamp == nil {
				s.beginDeletion(st)
			}
		}
	}
	var err error
	if len(problems) > 0 {
		err = errors.New(strings.Join(problems, "; "))
	}
	ast.as.Status.Conditions = appsetConditions(NewTime(now), err)
	s.bumpAppSet(ast)
	return touched
}

func (s *Server) bumpAppSet(ast *appsetState) {
	s.rv++
	ast.rv = s.rv
	ast.as.Metadata.ResourceVersion = strconv.FormatInt(ast.rv, 10)
}

func appsetConditions(now Time, err error) []ApplicationSetCondition {
	t := &now
	if err != nil {
		return []ApplicationSetCondition{
			{Type: "ErrorOccurred", Status: "True", Reason: "ApplicationGenerationFromParamsError", Message: err.Error(), LastTransitionTime: t},
			{Type: "ParametersGenerated", Status: "False", Reason: "ErrorOccurred", Message: err.Error(), LastTransitionTime: t},
			{Type: "ResourcesUpToDate", Status: "False", Reason: "ApplicationGenerationFromParamsError", Message: err.Error(), LastTransitionTime: t},
		}
	}
	return []ApplicationSetCondition{
		{Type: "ErrorOccurred", Status: "False", Reason: "ApplicationSetUpToDate", Message: "Successfully generated parameters for all Applications", LastTransitionTime: t},
		{Type: "ParametersGenerated", Status: "True", Reason: "ParametersGenerated", Message: "Successfully generated parameters for all Applications", LastTransitionTime: t},
		{Type: "ResourcesUpToDate", Status: "True", Reason: "ApplicationSetUpToDate", Message: "All applications have been generated successfully", LastTransitionTime: t},
	}
}

// appsetView is the appset as the API returns it, with status.resources
// listing the generated apps' current sync and health. Callers hold s.mu.
func (s *Server) appsetView(ast *appsetState) ApplicationSet {
	as := clone(ast.as)
	as.Status.Resources = nil
	for _, k := range sortedKeys(s.apps) {
		st := s.apps[k]
		if !ownedBy(&st.app, &ast.as) {
			continue
		}
		h := st.app.Status.Health
		as.Status.Resources = append(as.Status.Resources, ResourceStatus{
			Group: "argoproj.io", Version: "v1alpha1", Kind: "Application", Namespace: st.app.Metadata.Namespace,
			Name: st.app.Metadata.Name, Status: st.app.Status.Sync.Status,
			Health: &HealthStatus{Status: h.Status, Message: h.Message, LastTransitionTime: h.LastTransitionTime},
		})
	}
	as.Status.ResourcesCount = int64(len(as.Status.Resources))
	return as
}

// ---- generators ----

// paramSet is one generator result: flat string params (fasttemplate
// mode) or nested values (goTemplate mode).
type paramSet map[string]any

func (s *Server) generate(ctx context.Context, as ApplicationSet, rc *revCache) ([]Application, error) {
	var out []Application
	seen := map[string]bool{}
	for i, g := range as.Spec.Generators {
		var sets []paramSet
		var err error
		tmpl := as.Spec.Template
		switch {
		case g.List != nil:
			sets, err = listParams(g.List, as.Spec.GoTemplate)
			tmpl, err = mergeTemplate(tmpl, g.List.Template, err)
		case g.Git != nil:
			sets, err = s.gitParams(ctx, g.Git, as.Spec.GoTemplate, rc)
			tmpl, err = mergeTemplate(tmpl, g.Git.Template, err)
		default:
			err = errors.New("only list and git generators are supported by argocdtest")
		}
		if err != nil {
			return nil, fmt.Errorf("generator %d: %w", i, err)
		}
		for _, p := range sets {
			t, err := renderTemplate(tmpl, p, as.Spec.GoTemplate, as.Spec.GoTemplateOptions)
			if err != nil {
				return nil, fmt.Errorf("generator %d: rendering template: %w", i, err)
			}
			if t.Metadata.Name == "" {
				return nil, fmt.Errorf("generator %d: the rendered template has no metadata.name", i)
			}
			if seen[t.Metadata.Name] {
				return nil, fmt.Errorf("generator %d: ApplicationSet %s contains applications with duplicate name: %s", i, as.Metadata.Name, t.Metadata.Name)
			}
			seen[t.Metadata.Name] = true
			out = append(out, Application{
				Metadata: ObjectMeta{Name: t.Metadata.Name, Namespace: t.Metadata.Namespace, Labels: t.Metadata.Labels,
					Annotations: t.Metadata.Annotations, Finalizers: t.Metadata.Finalizers},
				Spec: t.Spec,
			})
		}
	}
	return out, nil
}

// mergeTemplate overlays a generator-level template on spec.template.
func mergeTemplate(base, over ApplicationSetTemplate, err error) (ApplicationSetTemplate, error) {
	if err != nil {
		return base, err
	}
	ob, _ := json.Marshal(over)
	var overMap map[string]any
	_ = json.Unmarshal(ob, &overMap)
	if isEmptyJSON(overMap) {
		return base, nil
	}
	bb, _ := json.Marshal(base)
	var baseMap map[string]any
	_ = json.Unmarshal(bb, &baseMap)
	merged := mergeMaps(baseMap, overMap)
	mb, _ := json.Marshal(merged)
	var out ApplicationSetTemplate
	if err := json.Unmarshal(mb, &out); err != nil {
		return base, fmt.Errorf("merging generator template: %w", err)
	}
	return out, nil
}

func isEmptyJSON(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	case map[string]any:
		for _, e := range t {
			if !isEmptyJSON(e) {
				return false
			}
		}
		return true
	case []any:
		return len(t) == 0
	default:
		return false
	}
}

func mergeMaps(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if isEmptyJSON(v) {
			continue
		}
		if om, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func listParams(g *ListGenerator, goTemplate bool) ([]paramSet, error) {
	var out []paramSet
	for i, raw := range g.Elements {
		var el map[string]any
		if err := json.Unmarshal(raw, &el); err != nil {
			return nil, fmt.Errorf("list element %d is not an object: %w", i, err)
		}
		if goTemplate {
			out = append(out, el)
			continue
		}
		p := paramSet{}
		for k, v := range el {
			if k == "values" {
				vals, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("list element %d: values must be an object", i)
				}
				for vk, vv := range vals {
					p["values."+vk] = fmt.Sprintf("%v", vv)
				}
				continue
			}
			sv, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("list element %d: error parsing value of %q as string", i, k)
			}
			p[k] = sv
		}
		out = append(out, p)
	}
	return out, nil
}

// gitParams runs a git files or directories generator.
func (s *Server) gitParams(ctx context.Context, g *GitGenerator, goTemplate bool, rc *revCache) ([]paramSet, error) {
	if g.RepoURL == "" {
		return nil, errors.New("git generator: repoURL is required")
	}
	sha, err := s.resolve(ctx, g.RepoURL, g.Revision, rc)
	if err != nil {
		return nil, fmt.Errorf("error resolving %q in %s: %w", firstNonEmpty(g.Revision, "HEAD"), redactURL(g.RepoURL), err)
	}
	if len(g.Files) > 0 {
		return s.gitFileParams(ctx, g, sha, goTemplate)
	}
	if len(g.Directories) > 0 {
		return s.gitDirParams(ctx, g, sha, goTemplate)
	}
	return nil, errors.New("git generator: either files or directories is required")
}

// listFiles returns the repo paths under the literal prefix of each pattern.
func (s *Server) listFiles(ctx context.Context, repoURL, sha string, patterns []string) (map[string][]byte, error) {
	files := map[string][]byte{}
	read := map[string]bool{}
	for _, p := range patterns {
		dir := literalDir(p)
		if read[dir] {
			continue
		}
		read[dir] = true
		tree, err := s.git.ReadTree(ctx, repoURL, sha, dir)
		if errors.Is(err, ErrPathNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for rel, c := range tree {
			full := rel
			if dir != "" {
				full = dir + "/" + rel
			}
			files[full] = c
		}
	}
	return files, nil
}

// literalDir is the directory part of a glob before its first wildcard.
func literalDir(pattern string) string {
	i := strings.IndexAny(pattern, "*?[")
	if i < 0 {
		return cleanDir(path.Dir(pattern))
	}
	j := strings.LastIndexByte(pattern[:i], '/')
	if j < 0 {
		return ""
	}
	return cleanDir(pattern[:j])
}

func (s *Server) gitFileParams(ctx context.Context, g *GitGenerator, sha string, goTemplate bool) ([]paramSet, error) {
	var patterns []string
	for _, f := range g.Files {
		patterns = append(patterns, f.Path)
	}
	files, err := s.listFiles(ctx, g.RepoURL, sha, patterns)
	if err != nil {
		return nil, err
	}
	var matched []string
	for p := range files {
		include, exclude := false, false
		for _, f := range g.Files {
			if gitPathspecMatch(f.Path, p) {
				if f.Exclude {
					exclude = true
				} else {
					include = true
				}
			}
		}
		if include && !exclude {
			matched = append(matched, p)
		}
	}
	sort.Strings(matched)
	var out []paramSet
	for _, p := range matched {
		objs, err := parseConfigFile(files[p])
		if err != nil {
			return nil, fmt.Errorf("unable to process file '%s': %w", p, err)
		}
		for _, obj := range objs {
			var ps paramSet
			if goTemplate {
				ps = paramSet(obj)
				pathParams := map[string]any{
					"path": path.Dir(p), "basename": path.Base(path.Dir(p)), "filename": path.Base(p),
					"basenameNormalized": sanitizeName(path.Base(path.Dir(p))), "filenameNormalized": sanitizeName(path.Base(p)),
					"segments": strings.Split(path.Dir(p), "/"),
				}
				if g.PathParamPrefix != "" {
					ps[g.PathParamPrefix] = map[string]any{"path": pathParams}
				} else {
					ps["path"] = pathParams
				}
			} else {
				ps = paramSet{}
				flatten("", obj, ps)
				prefix := "path"
				if g.PathParamPrefix != "" {
					prefix = g.PathParamPrefix + ".path"
				}
				dir := path.Dir(p)
				ps[prefix] = dir
				ps[prefix+".basename"] = path.Base(dir)
				ps[prefix+".filename"] = path.Base(p)
				ps[prefix+".basenameNormalized"] = sanitizeName(path.Base(dir))
				ps[prefix+".filenameNormalized"] = sanitizeName(path.Base(p))
				for i, seg := range strings.Split(dir, "/") {
					if seg != "" {
						ps[prefix+"["+strconv.Itoa(i)+"]"] = seg
					}
				}
			}
			if err := addValues(ps, g.Values, goTemplate); err != nil {
				return nil, err
			}
			out = append(out, ps)
		}
	}
	return out, nil
}

func (s *Server) gitDirParams(ctx context.Context, g *GitGenerator, sha string, goTemplate bool) ([]paramSet, error) {
	var patterns []string
	for _, d := range g.Directories {
		patterns = append(patterns, d.Path)
	}
	files, err := s.listFiles(ctx, g.RepoURL, sha, patterns)
	if err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	for p := range files {
		for d := path.Dir(p); d != "." && d != "/" && d != ""; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var matched []string
	for d := range dirs {
		include, exclude := false, false
		for _, it := range g.Directories {
			if ok, _ := path.Match(it.Path, d); ok {
				if it.Exclude {
					exclude = true
				} else {
					include = true
				}
			}
		}
		if include && !exclude {
			matched = append(matched, d)
		}
	}
	sort.Strings(matched)
	var out []paramSet
	for _, d := range matched {
		ps := paramSet{}
		if goTemplate {
			pp := map[string]any{"path": d, "basename": path.Base(d), "basenameNormalized": sanitizeName(path.Base(d)),
				"segments": strings.Split(d, "/")}
			if g.PathParamPrefix != "" {
				ps[g.PathParamPrefix] = map[string]any{"path": pp}
			} else {
				ps["path"] = pp
			}
		} else {
			prefix := "path"
			if g.PathParamPrefix != "" {
				prefix = g.PathParamPrefix + ".path"
			}
			ps[prefix] = d
			ps[prefix+".basename"] = path.Base(d)
			ps[prefix+".basenameNormalized"] = sanitizeName(path.Base(d))
			for i, seg := range strings.Split(d, "/") {
				if seg != "" {
					ps[prefix+"["+strconv.Itoa(i)+"]"] = seg
				}
			}
		}
		if err := addValues(ps, g.Values, goTemplate); err != nil {
			return nil, err
		}
		out = append(out, ps)
	}
	return out, nil
}

func addValues(ps paramSet, values map[string]string, goTemplate bool) error {
	if len(values) == 0 {
		return nil
	}
	rendered := map[string]any{}
	for _, k := range sortedKeys(values) {
		v, err := renderString(values[k], ps, goTemplate, nil)
		if err != nil {
			return fmt.Errorf("rendering values.%s: %w", k, err)
		}
		rendered[k] = v
	}
	if goTemplate {
		ps["values"] = rendered
		return nil
	}
	for k, v := range rendered {
		ps["values."+k] = v
	}
	return nil
}

// parseConfigFile reads a generator config file (JSON or YAML; an object or
// a list of objects). Numbers go through JSON as float64, as upstream, so a
// number is later formatted with %v (12345678 becomes "1.2345678e+07").
func parseConfigFile(b []byte) ([]map[string]any, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	jb, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not representable as JSON: %w", err)
	}
	var norm any
	if err := json.Unmarshal(jb, &norm); err != nil {
		return nil, err
	}
	switch t := norm.(type) {
	case nil:
		return []map[string]any{{}}, nil
	case map[string]any:
		return []map[string]any{t}, nil
	case []any:
		var out []map[string]any
		for i, e := range t {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("element %d is not an object", i)
			}
			out = append(out, m)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("content is a %T, not an object", norm)
	}
}

// flatten turns nested objects into dotted keys ("cluster.name"), arrays
// into indexed keys ("list.0"), values into %v strings.
func flatten(prefix string, v any, out paramSet) {
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

var invalidNameChars = regexp.MustCompile(`[^-a-z0-9.]`)

// sanitizeName is upstream's utils.SanitizeName: lowercase, invalid
// characters become '-', trimmed to 253 characters and alphanumeric ends.
func sanitizeName(name string) string {
	s := invalidNameChars.ReplaceAllString(strings.ToLower(name), "-")
	if len(s) > 253 {
		s = s[:253]
	}
	return strings.Trim(s, "-.")
}

// gitPathspecMatch matches like `git ls-files -- <pattern>`, which the
// ApplicationSet files generator uses by default: fnmatch without
// FNM_PATHNAME, so '*' also matches '/', and a wildcard-free pattern
// matches the path itself or anything below it.
func gitPathspecMatch(pattern, p string) bool {
	pattern = strings.TrimPrefix(pattern, "./")
	if !strings.ContainsAny(pattern, "*?[") {
		pattern = strings.TrimSuffix(pattern, "/")
		return p == pattern || strings.HasPrefix(p, pattern+"/")
	}
	re, err := globRegexp(pattern)
	if err != nil {
		return false
	}
	return re.MatchString(p)
}

func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			j := strings.IndexByte(pattern[i+1:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := pattern[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ---- template rendering ----

// renderTemplate substitutes params into every string (keys included) of
// the template: {{ key }} fasttemplate-style by default (unknown keys are
// left as they are), Go text/template with goTemplate.
func renderTemplate(tmpl ApplicationSetTemplate, params paramSet, goTemplate bool, goOpts []string) (ApplicationSetTemplate, error) {
	b, err := json.Marshal(tmpl)
	if err != nil {
		return tmpl, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return tmpl, err
	}
	v, err = renderAny(v, params, goTemplate, goOpts)
	if err != nil {
		return tmpl, err
	}
	rb, err := json.Marshal(v)
	if err != nil {
		return tmpl, err
	}
	var out ApplicationSetTemplate
	if err := json.Unmarshal(rb, &out); err != nil {
		return tmpl, fmt.Errorf("rendered template is not a valid Application template: %w", err)
	}
	return out, nil
}

func renderAny(v any, params paramSet, goTemplate bool, goOpts []string) (any, error) {
	switch t := v.(type) {
	case string:
		return renderString(t, params, goTemplate, goOpts)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			rk, err := renderString(k, params, goTemplate, goOpts)
			if err != nil {
				return nil, err
			}
			re, err := renderAny(e, params, goTemplate, goOpts)
			if err != nil {
				return nil, err
			}
			out[rk] = re
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			re, err := renderAny(e, params, goTemplate, goOpts)
			if err != nil {
				return nil, err
			}
			out[i] = re
		}
		return out, nil
	default:
		return v, nil
	}
}

var goTemplateFuncs = template.FuncMap{
	"lower":     strings.ToLower,
	"upper":     strings.ToUpper,
	"trim":      strings.TrimSpace,
	"replace":   func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
	"normalize": sanitizeName,
	"default": func(def, v any) any {
		if v == nil || v == "" {
			return def
		}
		return v
	},
	"toJson": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join": func(sep string, v []any) string {
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fmt.Sprintf("%v", e)
		}
		return strings.Join(parts, sep)
	},
}

func renderString(s string, params paramSet, goTemplate bool, goOpts []string) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	if goTemplate {
		t := template.New("").Funcs(goTemplateFuncs)
		if len(goOpts) > 0 {
			t = t.Option(goOpts...)
		}
		t, err := t.Parse(s)
		if err != nil {
			return "", fmt.Errorf("failed to parse template %q: %w", s, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, map[string]any(params)); err != nil {
			return "", fmt.Errorf("failed to execute template %q: %w", s, err)
		}
		return buf.String(), nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			b.WriteString(s)
			break
		}
		j := strings.Index(s[i+2:], "}}")
		if j < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		tag := s[i+2 : i+2+j]
		if v, ok := params[strings.TrimSpace(tag)]; ok && strings.TrimSpace(tag) != "" {
			b.WriteString(fmt.Sprintf("%v", v))
		} else {
			b.WriteString("{{" + tag + "}}")
		}
		s = s[i+2+j+2:]
	}
	return b.String(), nil
}

// ---- HTTP ----

// handleListAppSets serves GET /api/v1/applicationsets.
func (s *Server) handleListAppSets(w http.ResponseWriter, r *http.Request, _ []string) {
	if _, e := s.authenticate(r); e != nil {
		writeAPIError(w, e)
		return
	}
	q := r.URL.Query()
	sel, err := ParseSelector(q.Get("selector"))
	if err != nil {
		writeAPIError(w, errf(codeUnknown, "error parsing the selector: %v", err))
		return
	}
	ns := firstNonEmpty(q.Get("appsetNamespace"), defaultNamespace)
	projects := map[string]bool{}
	for _, p := range nonEmpty(q["projects"]) {
		projects[p] = true
	}
	s.mu.Lock()
	if !s.namespaces[ns] {
		s.mu.Unlock()
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", ns))
		return
	}
	items := []ApplicationSet{}
	for _, k := range sortedKeys(s.appsets) {
		ast := s.appsets[k]
		if ast.as.Metadata.Namespace != ns || !sel.Matches(ast.as.Metadata.Labels) {
			continue
		}
		if len(projects) > 0 && !projects[ast.as.Spec.Template.Spec.project()] {
			continue
		}
		items = append(items, s.appsetView(ast))
	}
	rv := strconv.FormatInt(s.rv, 10)
	s.mu.Unlock()
	reply(w, r, ApplicationSetList{Metadata: ListMeta{ResourceVersion: rv}, Items: items})
}

// handleGetAppSet serves GET /api/v1/applicationsets/{name}. Unlike apps, a
// missing appset is a plain 404.
func (s *Server) handleGetAppSet(w http.ResponseWriter, r *http.Request, p []string) {
	if _, e := s.authenticate(r); e != nil {
		writeAPIError(w, e)
		return
	}
	ns := firstNonEmpty(r.URL.Query().Get("appsetNamespace"), defaultNamespace)
	s.mu.Lock()
	if !s.namespaces[ns] {
		s.mu.Unlock()
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", ns))
		return
	}
	ast := s.appsets[ns+"/"+p[0]]
	if ast == nil {
		s.mu.Unlock()
		writeAPIError(w, errf(codeNotFound, "error getting ApplicationSet: applicationsets.argoproj.io %q not found", p[0]))
		return
	}
	view := s.appsetView(ast)
	s.mu.Unlock()
	reply(w, r, view)
}
