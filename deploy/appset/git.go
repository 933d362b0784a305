package appset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// gitParams runs a git files or directories generator.
func gitParams(ctx context.Context, repo Repo, g *Git, goTemplate bool) ([]paramSet, error) {
	if g.RepoURL == "" {
		return nil, errors.New("git generator: repoURL is required")
	}
	sha, err := repo.Resolve(ctx, g.RepoURL, g.Revision)
	if err != nil {
		return nil, err
	}
	if len(g.Files) > 0 {
		return gitFileParams(ctx, repo, g, sha, goTemplate)
	}
	if len(g.Directories) > 0 {
		return gitDirParams(ctx, repo, g, sha, goTemplate)
	}
	return nil, errors.New("git generator: either files or directories is required")
}

// listFiles returns the repo paths under the literal prefix of each pattern.
func listFiles(ctx context.Context, repo Repo, repoURL, sha string, items []PathItem) (map[string][]byte, error) {
	files := map[string][]byte{}
	read := map[string]bool{}
	for _, it := range items {
		dir := LiteralDir(it.Path)
		if read[dir] {
			continue
		}
		read[dir] = true
		tree, err := repo.ReadTree(ctx, repoURL, sha, dir)
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

// LiteralDir is the directory part of a glob before its first wildcard ("" for the root):
// the one directory a generator has to read for the pattern.
func LiteralDir(pattern string) string {
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

// cleanDir normalises a directory: "", ".", "/" and "./" all mean the root.
func cleanDir(dir string) string {
	dir = strings.Trim(path.Clean("/"+strings.TrimSpace(dir)), "/")
	if dir == "." {
		return ""
	}
	return dir
}

func gitFileParams(ctx context.Context, repo Repo, g *Git, sha string, goTemplate bool) ([]paramSet, error) {
	files, err := listFiles(ctx, repo, g.RepoURL, sha, g.Files)
	if err != nil {
		return nil, err
	}
	var matched []string
	for p := range files {
		if Matches(g.Files, p) {
			matched = append(matched, p)
		}
	}
	sort.Strings(matched)
	var out []paramSet
	for _, p := range matched {
		objs, err := ParseConfigFile(files[p])
		if err != nil {
			return nil, fmt.Errorf("unable to process file '%s': %w", p, err)
		}
		for _, obj := range objs {
			ps := FileParams(p, obj, g.PathParamPrefix, goTemplate)
			if err := addValues(ps, g.Values, goTemplate); err != nil {
				return nil, err
			}
			out = append(out, paramSet{params: ps, file: p, config: obj})
		}
	}
	return out, nil
}

// Matches reports whether the files generator entries take repo path p: some entry includes
// it and none excludes it.
func Matches(items []PathItem, p string) bool {
	include, exclude := false, false
	for _, it := range items {
		if PathspecMatch(it.Path, p) {
			if it.Exclude {
				exclude = true
			} else {
				include = true
			}
		}
	}
	return include && !exclude
}

// FileParams is the parameter set of one object of config file p: the object's values
// (flattened to dotted keys unless goTemplate) and the path parameters (path, basename,
// filename, their normalized forms, segments), under prefix.path when prefix is set. The
// object itself is not changed.
func FileParams(p string, obj map[string]any, prefix string, goTemplate bool) Params {
	dir := path.Dir(p)
	if goTemplate {
		ps := Params{}
		for k, v := range obj {
			ps[k] = v
		}
		pathParams := map[string]any{
			"path": dir, "basename": path.Base(dir), "filename": path.Base(p),
			"basenameNormalized": SanitizeName(path.Base(dir)), "filenameNormalized": SanitizeName(path.Base(p)),
			"segments": strings.Split(dir, "/"),
		}
		if prefix != "" {
			ps[prefix] = map[string]any{"path": pathParams}
		} else {
			ps["path"] = pathParams
		}
		return ps
	}
	ps := Params{}
	flatten("", obj, ps)
	key := "path"
	if prefix != "" {
		key = prefix + ".path"
	}
	ps[key] = dir
	ps[key+".basename"] = path.Base(dir)
	ps[key+".filename"] = path.Base(p)
	ps[key+".basenameNormalized"] = SanitizeName(path.Base(dir))
	ps[key+".filenameNormalized"] = SanitizeName(path.Base(p))
	for i, seg := range strings.Split(dir, "/") {
		if seg != "" {
			ps[key+"["+strconv.Itoa(i)+"]"] = seg
		}
	}
	return ps
}

func gitDirParams(ctx context.Context, repo Repo, g *Git, sha string, goTemplate bool) ([]paramSet, error) {
	files, err := listFiles(ctx, repo, g.RepoURL, sha, g.Directories)
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
		ps := Params{}
		if goTemplate {
			pp := map[string]any{"path": d, "basename": path.Base(d), "basenameNormalized": SanitizeName(path.Base(d)),
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
			ps[prefix+".basenameNormalized"] = SanitizeName(path.Base(d))
			for i, seg := range strings.Split(d, "/") {
				if seg != "" {
					ps[prefix+"["+strconv.Itoa(i)+"]"] = seg
				}
			}
		}
		if err := addValues(ps, g.Values, goTemplate); err != nil {
			return nil, err
		}
		out = append(out, paramSet{params: ps})
	}
	return out, nil
}

func addValues(ps Params, values map[string]string, goTemplate bool) error {
	if len(values) == 0 {
		return nil
	}
	rendered := map[string]any{}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
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

// ParseConfigFile reads a generator config file (JSON or YAML; an object or a list of
// objects). Numbers go through JSON as float64, as upstream, so a number is later formatted
// with %v (12345678 becomes "1.2345678e+07").
func ParseConfigFile(b []byte) ([]map[string]any, error) {
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

// flatten turns nested objects into dotted keys ("cluster.name"), arrays into indexed keys
// ("list.0"), values into %v strings.
func flatten(prefix string, v any, out Params) {
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

// SanitizeName is upstream's utils.SanitizeName: lowercase, invalid characters become '-',
// trimmed to 253 characters and alphanumeric ends.
func SanitizeName(name string) string {
	s := invalidNameChars.ReplaceAllString(strings.ToLower(name), "-")
	if len(s) > 253 {
		s = s[:253]
	}
	return strings.Trim(s, "-.")
}

// PathspecMatch matches like `git ls-files -- <pattern>`, which the ApplicationSet files
// generator uses by default: fnmatch without FNM_PATHNAME, so '*' also matches '/', and a
// wildcard-free pattern matches the path itself or anything below it.
func PathspecMatch(pattern, p string) bool {
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
