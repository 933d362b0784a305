package argocdtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// HealthFunc computes an application's health from its files at the
// deployed revision (relative to spec.source.path). It plays the role of
// Argo CD's resource health checks (Lua customizations included). It runs
// with the server's lock held and must not call back into the Server.
type HealthFunc func(app Application, files map[string][]byte) HealthStatus

var simulateRe = regexp.MustCompile(`(?m)^[ \t]*"?simulate"?[ \t]*:[ \t]*"?(degraded|progressing|suspended|healthy)"?`)

// DefaultHealth is the default HealthFunc. It mirrors the Lua check the
// realenv installs for ConfigMaps: a manifest containing `simulate: degraded`
// (or progressing / suspended; JSON "simulate": "degraded" too) makes the app
// Degraded (Progressing / Suspended); anything else is Healthy.
func DefaultHealth(_ Application, files map[string][]byte) HealthStatus {
	worst := HealthStatus{Status: HealthHealthy}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, m := range simulateRe.FindAllSubmatch(files[n], -1) {
			var st string
			switch string(m[1]) {
			case "degraded":
				st = HealthDegraded
			case "progressing":
				st = HealthProgressing
			case "suspended":
				st = HealthSuspended
			default:
				continue
			}
			if healthRank(st) > healthRank(worst.Status) {
				worst = HealthStatus{Status: st, Message: fmt.Sprintf("%s: simulate: %s", n, m[1])}
			}
		}
	}
	return worst
}

// healthRank orders health codes healthiest first, as gitops-engine does.
func healthRank(s string) int {
	switch s {
	case HealthHealthy:
		return 0
	case HealthSuspended:
		return 1
	case HealthProgressing:
		return 2
	case HealthMissing:
		return 3
	case HealthDegraded:
		return 4
	default:
		return 5
	}
}

// object is one Kubernetes manifest of an application.
type object struct {
	Group, Version, Kind, Namespace, Name string
	canon                                 string // canonical JSON, for diffing
}

func (o object) key() string {
	return o.Group + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name
}

func (o object) ref() string { return strings.ToLower(o.Kind) + "/" + o.Name }

var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "Node": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true, "APIService": true,
}

// manifestError is a manifest generation failure; Argo CD shows it as a
// ComparisonError condition.
type manifestError struct{ msg string }

func (e *manifestError) Error() string { return e.msg }

// parseManifests extracts the Kubernetes objects of a directory-type app the
// way Argo CD's repo-server does: *.yaml, *.yml and *.json files directly in
// the app path (subdirectories only with directory.recurse), minus those that
// match directory.exclude or miss directory.include; every document must be
// an object with apiVersion, kind and metadata.name.
func parseManifests(src ApplicationSource, destNamespace string, files map[string][]byte) ([]object, error) {
	var d struct {
		Recurse bool   `json:"recurse"`
		Include string `json:"include"`
		Exclude string `json:"exclude"`
	}
	if len(src.Directory) > 0 {
		_ = json.Unmarshal(src.Directory, &d)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if !d.Recurse && strings.Contains(n, "/") {
			continue
		}
		// Exclude first, then include, both against the path below the app path.
		if d.Exclude != "" && globMatch(d.Exclude, n) || d.Include != "" && !globMatch(d.Include, n) {
			continue
		}
		base := path.Base(n)
		if strings.HasPrefix(base, ".") {
			continue
		}
		switch strings.ToLower(path.Ext(n)) {
		case ".yaml", ".yml", ".json":
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var objs []object
	seen := map[string]string{}
	for _, n := range names {
		dec := yaml.NewDecoder(bytes.NewReader(files[n]))
		for doc := 1; ; doc++ {
			var v any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, &manifestError{fmt.Sprintf("failed to unmarshal %q (document %d): %v", n, doc, err)}
			}
			if v == nil {
				continue
			}
			items := []any{v}
			if list, ok := v.([]any); ok {
				items = list
			}
			for _, it := range items {
				o, err := toObject(it, destNamespace)
				if err != nil {
					return nil, &manifestError{fmt.Sprintf("%q (document %d): %v", n, doc, err)}
				}
				if prev, dup := seen[o.key()]; dup {
					return nil, &manifestError{fmt.Sprintf("%q (document %d): %s %s is also defined in %q", n, doc, o.Kind, o.Name, prev)}
				}
				seen[o.key()] = n
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

func toObject(v any, destNamespace string) (object, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return object{}, fmt.Errorf("manifest is a %T, not an object", v)
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	if kind == "" {
		return object{}, errors.New("Object 'Kind' is missing")
	}
	if apiVersion == "" {
		return object{}, fmt.Errorf("Object 'apiVersion' is missing in %s", kind)
	}
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return object{}, fmt.Errorf("%s has no metadata.name", kind)
	}
	ns, _ := meta["namespace"].(string)
	if clusterScoped[kind] {
		ns = ""
	} else if ns == "" {
		ns = destNamespace
	}
	group, version := "", apiVersion
	if g, ver, ok := strings.Cut(apiVersion, "/"); ok {
		group, version = g, ver
	}
	canon, err := json.Marshal(m)
	if err != nil {
		return object{}, fmt.Errorf("%s %s cannot be represented as JSON: %v", kind, name, err)
	}
	return object{Group: group, Version: version, Kind: kind, Namespace: ns, Name: name, canon: string(canon)}, nil
}

// globMatch matches a directory.include/exclude pattern the way Argo CD does
// (gobwas/glob with no separators): '*' and '**' match any run of characters,
// '/' included; '?' one character; [abc], [a-z], [!...] classes; {a,b}
// alternatives; '\' escapes. A pattern that does not compile matches nothing,
// as in Argo CD (which logs it).
func globMatch(pattern, name string) bool {
	re, ok := dirGlobRegexp(pattern)
	return ok && re.MatchString(name)
}

func dirGlobRegexp(pattern string) (*regexp.Regexp, bool) {
	var b strings.Builder
	b.WriteString("^")
	depth := 0 // open {…} groups
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 == len(pattern) {
				return nil, false
			}
			i++
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		case '[':
			end := strings.IndexByte(pattern[i+1:], ']')
			if end < 0 {
				return nil, false
			}
			class := pattern[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			if class == "" || class == "^" {
				return nil, false
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		case '{':
			depth++
			b.WriteString("(?:")
		case '}':
			if depth == 0 {
				return nil, false
			}
			depth--
			b.WriteString(")")
		case ',':
			if depth > 0 {
				b.WriteString("|")
			} else {
				b.WriteString(",")
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	if depth != 0 {
		return nil, false
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return re, err == nil
}
