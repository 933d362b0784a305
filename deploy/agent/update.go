package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// The "update" request (subject prflow.agent.<agent>.update) changes one app's source in the
// GitOps backend — target revision, Helm parameters, Kustomize overrides — without syncing it
// (Harness's UpdateGitOpsApp). The patch is typed: lists keyed by name (Helm parameters and
// file parameters, Kustomize images and replicas, labels, annotations) are merged into what the
// app has, so a run setting image.tag keeps the app's other parameters. Agents apply it with
// optimistic concurrency: a change made by someone else between reading and writing the app is
// re-read and the patch applied again on top of it, never overwritten.

// CodeConflict: the app kept changing while the agent tried to update it (every attempt met a
// newer resourceVersion); nothing was written.
const CodeConflict Code = "conflict"

// ErrConflict matches CodeConflict with errors.Is.
var ErrConflict = &Error{Code: CodeConflict}

// AnnotationLastUpdate is the app annotation an agent writes with every update: the run and
// step that made it and the source before it ({"run","step","before"}), so a re-delivered
// request of the same run+step reports the source the first delivery replaced.
const AnnotationLastUpdate = "prflow.io/last-update"

// UpdateRequest asks an agent to patch one app's source.
type UpdateRequest struct {
	V   int    `json:"v"`
	App string `json:"app"` // app ref
	// Source selects the source of a multi-source app (spec.sources): its name, or its index
	// as a number ("0"). Required for multi-source apps, refused for single-source ones.
	Source string      `json:"source,omitempty"`
	Patch  SourcePatch `json:"patch"`
	// RunID and Step tag the update (AnnotationLastUpdate) so a repeated request of the same
	// run+step reports the original "before" source.
	RunID string `json:"runId,omitempty"`
	Step  string `json:"step,omitempty"`
}

// UpdateReply answers an UpdateRequest.
type UpdateReply struct {
	V int `json:"v"`
	// App is the app's status as the backend answered the update.
	App *AppStatus `json:"app,omitempty"`
	// Before and After are the selected source before and after the patch.
	Before *SourceSpec `json:"before,omitempty"`
	After  *SourceSpec `json:"after,omitempty"`
	// Changed is false when the app already had every value of the patch (nothing written).
	Changed bool `json:"changed,omitempty"`
	// Repeated: an earlier request of the same run+step had updated the app; Before is what
	// that request found.
	Repeated bool   `json:"repeated,omitempty"`
	Error    *Error `json:"error,omitempty"`
}

// SourcePatch is a typed change of one app source. Nil and empty fields are left alone.
type SourcePatch struct {
	TargetRevision *string         `json:"targetRevision,omitempty"`
	Helm           *HelmPatch      `json:"helm,omitempty"`
	Kustomize      *KustomizePatch `json:"kustomize,omitempty"`
}

// HelmPatch changes an app's Helm overrides.
type HelmPatch struct {
	// Parameters are merged by name with the app's (a parameter and a file parameter of the
	// same name are not merged with each other).
	Parameters     []HelmParameter     `json:"parameters,omitempty"`
	FileParameters []HelmFileParameter `json:"fileParameters,omitempty"`
	// ValueFiles replaces the app's list of values files when set.
	ValueFiles *[]string `json:"valueFiles,omitempty"`
	// RemoveParameters and RemoveFileParameters drop entries by name (rollback of an update
	// that added them).
	RemoveParameters     []string `json:"removeParameters,omitempty"`
	RemoveFileParameters []string `json:"removeFileParameters,omitempty"`
}

// HelmParameter is Argo CD's HelmParameter.
type HelmParameter struct {
	Name        string `json:"name"`
	Value       string `json:"value"`
	ForceString bool   `json:"forceString,omitempty"`
}

// HelmFileParameter is Argo CD's HelmFileParameter.
type HelmFileParameter struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// KustomizePatch changes an app's Kustomize overrides.
type KustomizePatch struct {
	// Images are kustomize image overrides ("name=newName:tag", "name:tag", "name@digest"),
	// merged with the app's by image name.
	Images       []string `json:"images,omitempty"`
	RemoveImages []string `json:"removeImages,omitempty"` // image names
	Namespace    *string  `json:"namespace,omitempty"`
	// Replicas are merged by name.
	Replicas                []KustomizeReplica `json:"replicas,omitempty"`
	RemoveReplicas          []string           `json:"removeReplicas,omitempty"`
	NamePrefix              *string            `json:"namePrefix,omitempty"`
	NameSuffix              *string            `json:"nameSuffix,omitempty"`
	CommonLabels            map[string]string  `json:"commonLabels,omitempty"` // merged by key
	RemoveCommonLabels      []string           `json:"removeCommonLabels,omitempty"`
	CommonAnnotations       map[string]string  `json:"commonAnnotations,omitempty"` // merged by key
	RemoveCommonAnnotations []string           `json:"removeCommonAnnotations,omitempty"`
	ForceCommonLabels       *bool              `json:"forceCommonLabels,omitempty"`
	ForceCommonAnnotations  *bool              `json:"forceCommonAnnotations,omitempty"`
}

// KustomizeReplica is Argo CD's KustomizeReplica.
type KustomizeReplica struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

// SourceSpec is the part of an app source an update can change, plus what identifies it.
type SourceSpec struct {
	// Index is the source's position in spec.sources (-1 for spec.source).
	Index          int            `json:"index"`
	Name           string         `json:"name,omitempty"`
	RepoURL        string         `json:"repoURL,omitempty"`
	Path           string         `json:"path,omitempty"`
	Chart          string         `json:"chart,omitempty"`
	TargetRevision string         `json:"targetRevision,omitempty"`
	Helm           *HelmSpec      `json:"helm,omitempty"`
	Kustomize      *KustomizeSpec `json:"kustomize,omitempty"`
}

// HelmSpec is the part of ApplicationSourceHelm an update can change.
type HelmSpec struct {
	Parameters     []HelmParameter     `json:"parameters,omitempty"`
	FileParameters []HelmFileParameter `json:"fileParameters,omitempty"`
	ValueFiles     []string            `json:"valueFiles,omitempty"`
}

// KustomizeSpec is the part of ApplicationSourceKustomize an update can change.
type KustomizeSpec struct {
	Images                 []string           `json:"images,omitempty"`
	Namespace              string             `json:"namespace,omitempty"`
	Replicas               []KustomizeReplica `json:"replicas,omitempty"`
	NamePrefix             string             `json:"namePrefix,omitempty"`
	NameSuffix             string             `json:"nameSuffix,omitempty"`
	CommonLabels           map[string]string  `json:"commonLabels,omitempty"`
	CommonAnnotations      map[string]string  `json:"commonAnnotations,omitempty"`
	ForceCommonLabels      bool               `json:"forceCommonLabels,omitempty"`
	ForceCommonAnnotations bool               `json:"forceCommonAnnotations,omitempty"`
}

// Updater is implemented by handlers that can change an app's source (request kind
// "update"); others answer CodeUnsupported.
type Updater interface {
	Update(ctx context.Context, req UpdateRequest) (*UpdateReply, error)
}

// Empty reports whether the patch changes nothing.
func (p SourcePatch) Empty() bool {
	h, k := p.Helm, p.Kustomize
	return p.TargetRevision == nil &&
		(h == nil || len(h.Parameters) == 0 && len(h.FileParameters) == 0 && h.ValueFiles == nil &&
			len(h.RemoveParameters) == 0 && len(h.RemoveFileParameters) == 0) &&
		(k == nil || len(k.Images) == 0 && len(k.RemoveImages) == 0 && k.Namespace == nil && len(k.Replicas) == 0 &&
			len(k.RemoveReplicas) == 0 && k.NamePrefix == nil && k.NameSuffix == nil && len(k.CommonLabels) == 0 &&
			len(k.RemoveCommonLabels) == 0 && len(k.CommonAnnotations) == 0 && len(k.RemoveCommonAnnotations) == 0 &&
			k.ForceCommonLabels == nil && k.ForceCommonAnnotations == nil)
}

// Check refuses patches that cannot be applied: nothing to change, unnamed entries, the same
// name twice, an empty target revision, negative replica counts.
func (p SourcePatch) Check() error {
	if p.Empty() {
		return Errorf(CodeInvalid, "update: the patch changes nothing (give targetRevision, helm or kustomize values)")
	}
	if p.TargetRevision != nil && strings.TrimSpace(*p.TargetRevision) == "" {
		return Errorf(CodeInvalid, "update: targetRevision is empty")
	}
	dup := func(what string, names []string) error {
		seen := map[string]bool{}
		for i, n := range names {
			if strings.TrimSpace(n) == "" {
				return Errorf(CodeInvalid, "update: %s[%d]: name is empty", what, i)
			}
			if seen[n] {
				return Errorf(CodeInvalid, "update: %s: %q given twice", what, n)
			}
			seen[n] = true
		}
		return nil
	}
	if h := p.Helm; h != nil {
		var names, files []string
		for _, x := range h.Parameters {
			names = append(names, x.Name)
		}
		for _, x := range h.FileParameters {
			files = append(files, x.Name)
			if x.Path == "" {
				return Errorf(CodeInvalid, "update: helm.fileParameters %q: path is empty", x.Name)
			}
		}
		if err := dup("helm.parameters", append(names, h.RemoveParameters...)); err != nil {
			return err
		}
		if err := dup("helm.fileParameters", append(files, h.RemoveFileParameters...)); err != nil {
			return err
		}
		if h.ValueFiles != nil {
			for i, f := range *h.ValueFiles {
				if strings.TrimSpace(f) == "" {
					return Errorf(CodeInvalid, "update: helm.valueFiles[%d] is empty", i)
				}
			}
		}
	}
	if k := p.Kustomize; k != nil {
		var imgs, reps []string
		for _, im := range k.Images {
			imgs = append(imgs, ImageName(im))
		}
		for _, r := range k.Replicas {
			reps = append(reps, r.Name)
			if r.Count < 0 {
				return Errorf(CodeInvalid, "update: kustomize.replicas %q: count %d is negative", r.Name, r.Count)
			}
		}
		if err := dup("kustomize.images", append(imgs, k.RemoveImages...)); err != nil {
			return err
		}
		if err := dup("kustomize.replicas", append(reps, k.RemoveReplicas...)); err != nil {
			return err
		}
		for key := range k.CommonLabels {
			if key == "" {
				return Errorf(CodeInvalid, "update: kustomize.commonLabels: empty key")
			}
		}
		for key := range k.CommonAnnotations {
			if key == "" {
				return Errorf(CodeInvalid, "update: kustomize.commonAnnotations: empty key")
			}
		}
	}
	return nil
}

// Touched names the fields the patch sets, for logs (never values: Helm values may be secret).
func (p SourcePatch) Touched() []string {
	var out []string
	if p.TargetRevision != nil {
		out = append(out, "targetRevision")
	}
	if h := p.Helm; h != nil {
		for _, x := range h.Parameters {
			out = append(out, "helm.parameters."+x.Name)
		}
		for _, x := range h.FileParameters {
			out = append(out, "helm.fileParameters."+x.Name)
		}
		for _, n := range h.RemoveParameters {
			out = append(out, "-helm.parameters."+n)
		}
		for _, n := range h.RemoveFileParameters {
			out = append(out, "-helm.fileParameters."+n)
		}
		if h.ValueFiles != nil {
			out = append(out, "helm.valueFiles")
		}
	}
	if k := p.Kustomize; k != nil {
		for _, im := range k.Images {
			out = append(out, "kustomize.images."+ImageName(im))
		}
		for _, n := range k.RemoveImages {
			out = append(out, "-kustomize.images."+n)
		}
		for _, r := range k.Replicas {
			out = append(out, "kustomize.replicas."+r.Name)
		}
		for _, n := range k.RemoveReplicas {
			out = append(out, "-kustomize.replicas."+n)
		}
		for _, kv := range []struct {
			name string
			set  bool
		}{{"namespace", k.Namespace != nil}, {"namePrefix", k.NamePrefix != nil}, {"nameSuffix", k.NameSuffix != nil},
			{"forceCommonLabels", k.ForceCommonLabels != nil}, {"forceCommonAnnotations", k.ForceCommonAnnotations != nil}} {
			if kv.set {
				out = append(out, "kustomize."+kv.name)
			}
		}
		for _, key := range sortedKeys(k.CommonLabels) {
			out = append(out, "kustomize.commonLabels."+key)
		}
		for _, key := range k.RemoveCommonLabels {
			out = append(out, "-kustomize.commonLabels."+key)
		}
		for _, key := range sortedKeys(k.CommonAnnotations) {
			out = append(out, "kustomize.commonAnnotations."+key)
		}
		for _, key := range k.RemoveCommonAnnotations {
			out = append(out, "-kustomize.commonAnnotations."+key)
		}
	}
	return out
}

// ImageName is the image a kustomize image override applies to: "nginx" for "nginx=reg/nginx:1",
// "nginx:1", "nginx@sha256:…"; a registry port ("reg:5000/app:1") is not taken for a tag.
func ImageName(image string) string {
	if i := strings.IndexByte(image, '='); i >= 0 {
		return image[:i]
	}
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image
}

// Apply returns spec with the patch applied (spec itself is not modified).
func (p SourcePatch) Apply(spec SourceSpec) SourceSpec {
	out := spec.Clone()
	if p.TargetRevision != nil {
		out.TargetRevision = *p.TargetRevision
	}
	if h := p.Helm; h != nil {
		if out.Helm == nil {
			out.Helm = &HelmSpec{}
		}
		for _, x := range h.Parameters {
			out.Helm.Parameters = mergeByName(out.Helm.Parameters, x, func(e HelmParameter) string { return e.Name })
		}
		for _, x := range h.FileParameters {
			out.Helm.FileParameters = mergeByName(out.Helm.FileParameters, x, func(e HelmFileParameter) string { return e.Name })
		}
		out.Helm.Parameters = removeByName(out.Helm.Parameters, h.RemoveParameters, func(e HelmParameter) string { return e.Name })
		out.Helm.FileParameters = removeByName(out.Helm.FileParameters, h.RemoveFileParameters, func(e HelmFileParameter) string { return e.Name })
		if h.ValueFiles != nil {
			out.Helm.ValueFiles = append([]string(nil), (*h.ValueFiles)...)
		}
	}
	if k := p.Kustomize; k != nil {
		if out.Kustomize == nil {
			out.Kustomize = &KustomizeSpec{}
		}
		o := out.Kustomize
		for _, im := range k.Images {
			o.Images = mergeByName(o.Images, im, ImageName)
		}
		o.Images = removeByName(o.Images, k.RemoveImages, ImageName)
		for _, r := range k.Replicas {
			o.Replicas = mergeByName(o.Replicas, r, func(e KustomizeReplica) string { return e.Name })
		}
		o.Replicas = removeByName(o.Replicas, k.RemoveReplicas, func(e KustomizeReplica) string { return e.Name })
		if k.Namespace != nil {
			o.Namespace = *k.Namespace
		}
		if k.NamePrefix != nil {
			o.NamePrefix = *k.NamePrefix
		}
		if k.NameSuffix != nil {
			o.NameSuffix = *k.NameSuffix
		}
		o.CommonLabels = mergeMap(o.CommonLabels, k.CommonLabels, k.RemoveCommonLabels)
		o.CommonAnnotations = mergeMap(o.CommonAnnotations, k.CommonAnnotations, k.RemoveCommonAnnotations)
		if k.ForceCommonLabels != nil {
			o.ForceCommonLabels = *k.ForceCommonLabels
		}
		if k.ForceCommonAnnotations != nil {
			o.ForceCommonAnnotations = *k.ForceCommonAnnotations
		}
	}
	return out.Normalized()
}

// Clone deep-copies s.
func (s SourceSpec) Clone() SourceSpec {
	var out SourceSpec
	b, _ := json.Marshal(s)
	_ = json.Unmarshal(b, &out)
	return out
}

// Normalized drops Helm and Kustomize settings that set nothing.
func (s SourceSpec) Normalized() SourceSpec {
	x := s.Clone()
	if x.Helm != nil && len(x.Helm.Parameters) == 0 && len(x.Helm.FileParameters) == 0 && len(x.Helm.ValueFiles) == 0 {
		x.Helm = nil
	}
	if x.Kustomize != nil && x.Kustomize.Empty() {
		x.Kustomize = nil
	}
	return x
}

// Equal reports whether s and o have the same values (unset and empty are equal).
func (s SourceSpec) Equal(o SourceSpec) bool {
	a, _ := json.Marshal(s.Normalized())
	b, _ := json.Marshal(o.Normalized())
	return string(a) == string(b)
}

// Empty reports whether k sets nothing.
func (k *KustomizeSpec) Empty() bool {
	return k == nil || len(k.Images) == 0 && k.Namespace == "" && len(k.Replicas) == 0 && k.NamePrefix == "" &&
		k.NameSuffix == "" && len(k.CommonLabels) == 0 && len(k.CommonAnnotations) == 0 && !k.ForceCommonLabels && !k.ForceCommonAnnotations
}

// Revert is the patch that undoes p on a source that was before when p was applied: each
// field p set gets before's value back, and entries p added are removed.
func (p SourcePatch) Revert(before SourceSpec) SourcePatch {
	var r SourcePatch
	if p.TargetRevision != nil {
		v := before.TargetRevision
		if v == "" {
			v = "HEAD" // Argo CD's default for an unset targetRevision
		}
		r.TargetRevision = &v
	}
	if h := p.Helm; h != nil {
		bh := before.Helm
		if bh == nil {
			bh = &HelmSpec{}
		}
		rh := &HelmPatch{}
		rh.Parameters, rh.RemoveParameters = revertNamed(bh.Parameters, h.Parameters, h.RemoveParameters,
			func(e HelmParameter) string { return e.Name })
		rh.FileParameters, rh.RemoveFileParameters = revertNamed(bh.FileParameters, h.FileParameters, h.RemoveFileParameters,
			func(e HelmFileParameter) string { return e.Name })
		if h.ValueFiles != nil {
			vf := append([]string{}, bh.ValueFiles...)
			rh.ValueFiles = &vf
		}
		r.Helm = rh
	}
	if k := p.Kustomize; k != nil {
		bk := before.Kustomize
		if bk == nil {
			bk = &KustomizeSpec{}
		}
		rk := &KustomizePatch{}
		rk.Images, rk.RemoveImages = revertNamed(bk.Images, k.Images, k.RemoveImages, ImageName)
		rk.Replicas, rk.RemoveReplicas = revertNamed(bk.Replicas, k.Replicas, k.RemoveReplicas,
			func(e KustomizeReplica) string { return e.Name })
		str := func(set *string, old string) *string {
			if set == nil {
				return nil
			}
			return &old
		}
		rk.Namespace, rk.NamePrefix, rk.NameSuffix = str(k.Namespace, bk.Namespace), str(k.NamePrefix, bk.NamePrefix), str(k.NameSuffix, bk.NameSuffix)
		rk.CommonLabels, rk.RemoveCommonLabels = revertMap(bk.CommonLabels, sortedKeys(k.CommonLabels), k.RemoveCommonLabels)
		rk.CommonAnnotations, rk.RemoveCommonAnnotations = revertMap(bk.CommonAnnotations, sortedKeys(k.CommonAnnotations), k.RemoveCommonAnnotations)
		if k.ForceCommonLabels != nil {
			v := bk.ForceCommonLabels
			rk.ForceCommonLabels = &v
		}
		if k.ForceCommonAnnotations != nil {
			v := bk.ForceCommonAnnotations
			rk.ForceCommonAnnotations = &v
		}
		r.Kustomize = rk
	}
	return r
}

func revertMap(before map[string]string, set, removed []string) (map[string]string, []string) {
	restore := map[string]string{}
	var drop []string
	for _, k := range set {
		if v, ok := before[k]; ok {
			restore[k] = v
		} else {
			drop = append(drop, k)
		}
	}
	for _, k := range removed {
		if v, ok := before[k]; ok {
			restore[k] = v
		}
	}
	if len(restore) == 0 {
		restore = nil
	}
	return restore, drop
}

func mergeByName[T any](list []T, x T, name func(T) string) []T {
	out := append([]T(nil), list...)
	for i := range out {
		if name(out[i]) == name(x) {
			out[i] = x
			return out
		}
	}
	return append(out, x)
}

func removeByName[T any](list []T, names []string, name func(T) string) []T {
	if len(names) == 0 {
		return list
	}
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	var out []T
	for _, x := range list {
		if !drop[name(x)] {
			out = append(out, x)
		}
	}
	return out
}

// revertNamed reverts one named list of a patch against before: each entry the patch set is
// put back as it was, or removed when it was not there; each name it removed is put back when
// it was there.
func revertNamed[T any](before, set []T, removed []string, name func(T) string) (restore []T, remove []string) {
	for _, x := range set {
		if old, ok := findByName(before, name(x), name); ok {
			restore = append(restore, old)
		} else {
			remove = append(remove, name(x))
		}
	}
	for _, n := range removed {
		if old, ok := findByName(before, n, name); ok {
			restore = append(restore, old)
		}
	}
	return restore, remove
}

func findByName[T any](list []T, n string, name func(T) string) (T, bool) {
	for _, x := range list {
		if name(x) == n {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func mergeMap(m, set map[string]string, remove []string) map[string]string {
	if len(set) == 0 && len(remove) == 0 {
		return m
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range set {
		out[k] = v
	}
	for _, k := range remove {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// LastUpdate is the value of AnnotationLastUpdate.
type LastUpdate struct {
	Run    string     `json:"run"`
	Step   string     `json:"step"`
	Before SourceSpec `json:"before"`
}

// Tagged reports whether run and step made this update.
func (u *LastUpdate) Tagged(run, step string) bool {
	return u != nil && run != "" && u.Run == run && u.Step == step
}

// ParseLastUpdate reads an AnnotationLastUpdate value (nil when absent or unreadable: an
// annotation edited by hand must not block updates).
func ParseLastUpdate(s string) *LastUpdate {
	if s == "" {
		return nil
	}
	var u LastUpdate
	if json.Unmarshal([]byte(s), &u) != nil {
		return nil
	}
	return &u
}

// SelectSource picks the source an update applies to among n sources of a multi-source app
// (names[i] is source i's name; n == 0 means a single-source app). It returns -1 for
// spec.source.
func SelectSource(want string, names []string, multi bool) (int, error) {
	if !multi {
		if want != "" {
			return 0, Errorf(CodeInvalid, "update: source %q given, but the app has a single source (spec.source)", want)
		}
		return -1, nil
	}
	if want == "" {
		var desc []string
		for i, n := range names {
			if n != "" {
				desc = append(desc, fmt.Sprintf("%d (%s)", i, n))
			} else {
				desc = append(desc, fmt.Sprint(i))
			}
		}
		return 0, Errorf(CodeInvalid, "update: the app has %d sources (spec.sources); choose one with source: its name or index: %s", len(names), strings.Join(desc, ", "))
	}
	for i, n := range names {
		if n != "" && n == want {
			return i, nil
		}
	}
	var i int
	if _, err := fmt.Sscanf(want, "%d", &i); err == nil && fmt.Sprint(i) == want {
		if i < 0 || i >= len(names) {
			return 0, Errorf(CodeInvalid, "update: source index %d: the app has sources 0 to %d", i, len(names)-1)
		}
		return i, nil
	}
	return 0, Errorf(CodeInvalid, "update: the app has no source named %q (names: %s)", want, strings.Join(names, ", "))
}

// Update asks agentID to patch one app's source (see UpdateRequest). The patch is checked
// before anything is sent.
func (c *Client) Update(ctx context.Context, agentID string, req UpdateRequest) (*UpdateReply, error) {
	if req.App == "" {
		return nil, &Error{Code: CodeInvalid, Agent: agentID, Message: "update: no app given"}
	}
	if err := req.Patch.Check(); err != nil {
		e := withAgent(AsError(err), agentID)
		e.App = req.App
		return nil, e
	}
	req.V = Version
	var rep UpdateReply
	if err := c.ask(ctx, agentID, "update", req, &rep, 0, func() *Error { return rep.Error }); err != nil {
		return nil, err
	}
	if rep.App == nil || rep.Before == nil || rep.After == nil {
		return nil, &Error{Code: CodeInternal, Agent: agentID, App: req.App, Message: "update: incomplete reply"}
	}
	return &rep, nil
}

// dispatchUpdate serves one "update" request. Unknown fields are refused (a typo'd field must
// not be dropped silently and the rest applied), as are requests without an app or with an
// empty patch.
func dispatchUpdate(ctx context.Context, h Handler, data []byte, fail func(error) *Error) UpdateReply {
	var req UpdateRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return UpdateReply{V: Version, Error: fail(Errorf(CodeInvalid, "update: %v", err))}
	}
	withApp := func(e *Error) *Error {
		if e.App == "" {
			e.App = req.App
		}
		return e
	}
	if req.App == "" {
		return UpdateReply{V: Version, Error: fail(Errorf(CodeInvalid, "update: no app given"))}
	}
	if err := req.Patch.Check(); err != nil {
		return UpdateReply{V: Version, Error: withApp(fail(err))}
	}
	u, ok := h.(Updater)
	if !ok {
		return UpdateReply{V: Version, Error: withApp(fail(Errorf(CodeUnsupported, "update: this agent cannot change apps")))}
	}
	rep, err := u.Update(ctx, req)
	if err != nil {
		return UpdateReply{V: Version, Error: withApp(fail(err))}
	}
	rep.V = Version
	return *rep
}

// Only is s reduced to what identifies it (index, name, repo, path, chart, target revision)
// and the entries p touches: what a step reports and needs to undo p, without the app's other
// Helm or Kustomize values (which may be sensitive) going into run state.
func (s SourceSpec) Only(p SourcePatch) SourceSpec {
	out := SourceSpec{Index: s.Index, Name: s.Name, RepoURL: s.RepoURL, Path: s.Path, Chart: s.Chart, TargetRevision: s.TargetRevision}
	set := func(names ...[]string) map[string]bool {
		m := map[string]bool{}
		for _, l := range names {
			for _, n := range l {
				m[n] = true
			}
		}
		return m
	}
	if h, sh := p.Helm, s.Helm; h != nil && sh != nil {
		oh := &HelmSpec{}
		var pn, fn []string
		for _, x := range h.Parameters {
			pn = append(pn, x.Name)
		}
		for _, x := range h.FileParameters {
			fn = append(fn, x.Name)
		}
		params, files := set(pn, h.RemoveParameters), set(fn, h.RemoveFileParameters)
		for _, x := range sh.Parameters {
			if params[x.Name] {
				oh.Parameters = append(oh.Parameters, x)
			}
		}
		for _, x := range sh.FileParameters {
			if files[x.Name] {
				oh.FileParameters = append(oh.FileParameters, x)
			}
		}
		if h.ValueFiles != nil {
			oh.ValueFiles = append([]string(nil), sh.ValueFiles...)
		}
		out.Helm = oh
	}
	if k, sk := p.Kustomize, s.Kustomize; k != nil && sk != nil {
		ok := &KustomizeSpec{}
		var in, rn []string
		for _, im := range k.Images {
			in = append(in, ImageName(im))
		}
		for _, r := range k.Replicas {
			rn = append(rn, r.Name)
		}
		images, reps := set(in, k.RemoveImages), set(rn, k.RemoveReplicas)
		for _, im := range sk.Images {
			if images[ImageName(im)] {
				ok.Images = append(ok.Images, im)
			}
		}
		for _, r := range sk.Replicas {
			if reps[r.Name] {
				ok.Replicas = append(ok.Replicas, r)
			}
		}
		if k.Namespace != nil {
			ok.Namespace = sk.Namespace
		}
		if k.NamePrefix != nil {
			ok.NamePrefix = sk.NamePrefix
		}
		if k.NameSuffix != nil {
			ok.NameSuffix = sk.NameSuffix
		}
		pick := func(m map[string]string, keys map[string]bool) map[string]string {
			var o map[string]string
			for key, v := range m {
				if keys[key] {
					if o == nil {
						o = map[string]string{}
					}
					o[key] = v
				}
			}
			return o
		}
		ok.CommonLabels = pick(sk.CommonLabels, set(sortedKeys(k.CommonLabels), k.RemoveCommonLabels))
		ok.CommonAnnotations = pick(sk.CommonAnnotations, set(sortedKeys(k.CommonAnnotations), k.RemoveCommonAnnotations))
		if k.ForceCommonLabels != nil {
			ok.ForceCommonLabels = sk.ForceCommonLabels
		}
		if k.ForceCommonAnnotations != nil {
			ok.ForceCommonAnnotations = sk.ForceCommonAnnotations
		}
		out.Kustomize = ok
	}
	return out.Normalized()
}
