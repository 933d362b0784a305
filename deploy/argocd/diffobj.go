package argocd

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"

	"github.com/prflow/prflow/deploy/agent"
)

// kobj is one Kubernetes object of a preview, cleaned of what Argo CD and Kubernetes add, with
// the values of a Secret's data replaced by their hashes as soon as it is parsed.
type kobj struct {
	group, kind, namespace, name string
	obj                          map[string]any
	secret                       bool
	// defaultedNS: the manifest named no namespace and the destination's was assumed; a kind
	// the agent does not know as cluster-scoped (a CRD's) may have none.
	defaultedNS bool
}

func (o *kobj) key() string { return o.group + "/" + o.kind + "/" + o.namespace + "/" + o.name }

// Markers that replace Secret values: a hash never leaves the agent either (a short secret's
// hash can be guessed), only whether the value changed.
const (
	secretHidden  = "(hidden)"
	secretChanged = "(changed)"
	hashPrefix    = "\x00sha256:"
	maskPrefix    = "\x00argocd-masked:"
)

// clusterScopedKinds are the built-in kinds without a namespace; a rendered object of any
// other kind without one lands in the app's destination namespace.
var clusterScopedKinds = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "Node": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true, "APIService": true,
	"IngressClass": true, "RuntimeClass": true, "CSIDriver": true, "VolumeAttachment": true,
}

// Metadata Kubernetes or Argo CD set; none of it is something a PR changes.
var (
	serverMetadata = []string{"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}
	addedAnnots    = []string{"kubectl.kubernetes.io/last-applied-configuration", "argocd.argoproj.io/tracking-id", "argocd.argoproj.io/installation-id"}
)

// parseObject decodes one manifest (JSON, as Argo CD returns them) and cleans it. "" and "null"
// (Argo CD's "no such object") give nil.
func parseObject(s, destNS, appName string) (*kobj, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("manifest is not a JSON object: %v", err)
	}
	if m == nil {
		return nil, nil
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	md, _ := m["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if kind == "" || name == "" {
		return nil, fmt.Errorf("manifest without kind or metadata.name (apiVersion %q kind %q)", apiVersion, kind)
	}
	group := ""
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		group = g
	}
	o := &kobj{group: group, kind: kind, name: name, obj: m}
	delete(m, "status")
	for _, k := range serverMetadata {
		delete(md, k)
	}
	if ann, ok := md["annotations"].(map[string]any); ok {
		for _, k := range addedAnnots {
			delete(ann, k)
		}
		if len(ann) == 0 {
			delete(md, "annotations")
		}
	}
	// Label tracking puts the app's name into this label; a value the manifests set themselves
	// (annotation tracking, Argo CD v3's default) is kept.
	if lab, ok := md["labels"].(map[string]any); ok {
		if v, _ := lab["app.kubernetes.io/instance"].(string); v == appName {
			delete(lab, "app.kubernetes.io/instance")
		}
		if len(lab) == 0 {
			delete(md, "labels")
		}
	}
	ns, _ := md["namespace"].(string)
	if ns == "" && !clusterScopedKinds[kind] && destNS != "" {
		ns = destNS
		md["namespace"] = ns
		o.defaultedNS = true
	}
	o.namespace = ns
	if group == "" && kind == "Secret" {
		o.secret = true
		hideSecret(m)
	}
	return o, nil
}

// hideSecret replaces every value of data and stringData by its hash, stringData folded into
// data as the API server does, so equal values compare equal and no value stays in memory
// longer than this call. Values Argo CD masked already ("++++++++") stay recognisable as masks.
func hideSecret(m map[string]any) {
	data, _ := m["data"].(map[string]any)
	out := map[string]any{}
	for k, v := range data {
		s, _ := v.(string)
		out[k] = secretToken(s, false)
	}
	if sd, ok := m["stringData"].(map[string]any); ok {
		for k, v := range sd {
			s, _ := v.(string)
			out[k] = secretToken(s, true)
		}
		delete(m, "stringData")
	}
	if len(out) > 0 {
		m["data"] = out
	} else {
		delete(m, "data")
	}
}

func secretToken(v string, plain bool) string {
	if v != "" && strings.Trim(v, "+") == "" {
		return maskPrefix + v
	}
	if plain {
		v = base64.StdEncoding.EncodeToString([]byte(v))
	}
	sum := sha256.Sum256([]byte(v))
	return hashPrefix + hex.EncodeToString(sum[:])
}

// maskedOnBothSides are the data keys of a Secret whose values Argo CD masked on both sides:
// it masks a rendering at a revision by itself ("++++++++" for every key) and the current
// target together with the live object, so equal masks say nothing about equal values.
func maskedOnBothSides(old, new *kobj) []string {
	if old == nil || new == nil || !new.secret {
		return nil
	}
	da, _ := old.obj["data"].(map[string]any)
	db, _ := new.obj["data"].(map[string]any)
	var keys []string
	for k, v := range db {
		a, _ := da[k].(string)
		b, _ := v.(string)
		if strings.HasPrefix(a, maskPrefix) && strings.HasPrefix(b, maskPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// compareObjects is the change from old to new (either may be nil), or nil when they are equal.
func compareObjects(old, new *kobj) *agent.ResourceDiff {
	ref := new
	if ref == nil {
		ref = old
	}
	if ref == nil {
		return nil
	}
	d := &agent.ResourceDiff{Group: ref.group, Kind: ref.kind, Namespace: ref.namespace, Name: ref.name}
	var a, b map[string]any
	switch {
	case old == nil:
		d.Change, b = agent.ChangeAdded, new.obj
	case new == nil:
		d.Change, a = agent.ChangeRemoved, old.obj
	default:
		if reflect.DeepEqual(old.obj, new.obj) {
			return nil
		}
		d.Change, a, b = agent.ChangeChanged, old.obj, new.obj
		var paths []string
		vals := map[string]any{}
		changedPaths(a, b, "", &paths, vals)
		d.Paths, d.Values = paths, vals
	}
	if d.Change == agent.ChangeAdded {
		d.Values = map[string]any{} // every field of an added object, e.g. a new Deployment at 0 replicas
		leaves(new.obj, "", d.Values)
	}
	if ref.secret {
		d.Masked = true
		d.Values = nil // Secret values never leave the agent
		a, b = maskSecretPair(a, b)
	}
	d.Diff = unifiedDiff(a, b, ref)
	return d
}

// maskSecretPair replaces the hashed Secret values by markers: "(hidden)", and "(changed)" on
// the new side for a value that differs.
func maskSecretPair(a, b map[string]any) (map[string]any, map[string]any) {
	da, _ := a["data"].(map[string]any)
	db, _ := b["data"].(map[string]any)
	mask := func(m map[string]any, d map[string]any, other map[string]any, newSide bool) map[string]any {
		if m == nil {
			return nil
		}
		cp := make(map[string]any, len(m))
		for k, v := range m {
			cp[k] = v
		}
		if d == nil {
			return cp
		}
		md := make(map[string]any, len(d))
		for k, v := range d {
			md[k] = secretHidden
			if ov, ok := other[k]; newSide && ok && ov != v {
				md[k] = secretChanged
			}
		}
		cp["data"] = md
		return cp
	}
	return mask(a, da, db, false), mask(b, db, da, true)
}

// changedPaths appends the dotted paths where a and b differ, sorted and capped, and records
// b's value at each in vals (nil where b lacks it), for policies.
func changedPaths(a, b any, path string, out *[]string, vals map[string]any) {
	add := func(p string, v any) {
		*out = append(*out, p)
		vals[p] = v
	}
	const maxPaths = 100
	if len(*out) >= maxPaths {
		return
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			add(orRoot(path), b)
			return
		}
		for _, k := range unionKeys(av, bv) {
			x, inA := av[k]
			y, inB := bv[k]
			p := joinPath(path, k)
			if !inA || !inB {
				add(p, y)
				continue
			}
			changedPaths(x, y, p, out, vals)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok {
			add(orRoot(path), b)
			return
		}
		n := max(len(av), len(bv))
		for i := 0; i < n; i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			if i >= len(av) || i >= len(bv) {
				var v any
				if i < len(bv) {
					v = bv[i]
				}
				add(p, v)
				continue
			}
			changedPaths(av[i], bv[i], p, out, vals)
		}
	default:
		if !reflect.DeepEqual(a, b) {
			add(orRoot(path), b)
		}
	}
}

// leaves records every leaf value of v under its dotted path.
func leaves(v any, path string, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, y := range x {
			leaves(y, joinPath(path, k), out)
		}
	case []any:
		for i, y := range x {
			leaves(y, fmt.Sprintf("%s[%d]", path, i), out)
		}
	default:
		out[orRoot(path)] = v
	}
}

func orRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// joinPath adds a key to a dotted path; a key that is not a plain word is quoted
// (metadata.annotations["argocd.argoproj.io/sync-wave"]), as UpdateReleaseRepo's paths are.
func joinPath(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			plain = false
			break
		}
	}
	if !plain {
		q, _ := json.Marshal(key)
		return path + "[" + string(q) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// unifiedDiff is the unified diff of the objects' YAML.
func unifiedDiff(a, b map[string]any, o *kobj) string {
	name := strings.ToLower(o.kind) + "/" + o.name
	if o.namespace != "" {
		name = o.namespace + "/" + name
	}
	text := func(m map[string]any) []string {
		if m == nil {
			return nil
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return []string{fmt.Sprintf("# cannot be shown as YAML: %v\n", err)}
		}
		return difflib.SplitLines(string(y))
	}
	ud := difflib.UnifiedDiff{A: text(a), B: text(b), FromFile: "a/" + name, ToFile: "b/" + name, Context: 3}
	s, err := difflib.GetUnifiedDiffString(ud)
	if err != nil {
		return ""
	}
	return s
}

// unionKeys returns the keys of a and b, each once, sorted.
func unionKeys[A, B any](a map[string]A, b map[string]B) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
