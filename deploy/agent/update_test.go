package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func sp(s string) *string { return &s }
func bp(b bool) *bool     { return &b }

func TestSourcePatchApplyMergesAndRevertRestores(t *testing.T) {
	base := SourceSpec{Index: -1, RepoURL: "https://git.example/r.git", Path: "chart", TargetRevision: "v1",
		Helm: &HelmSpec{Parameters: []HelmParameter{{Name: "image.tag", Value: "1.0"}, {Name: "replicas", Value: "2", ForceString: true}},
			FileParameters: []HelmFileParameter{{Name: "image.tag", Path: "files/tag"}}, ValueFiles: []string{"values.yaml"}},
		Kustomize: &KustomizeSpec{Images: []string{"nginx=reg/nginx:1", "reg:5000/api:2"}, Replicas: []KustomizeReplica{{Name: "web", Count: 2}},
			CommonLabels: map[string]string{"team": "pay"}}}
	cases := []struct {
		name  string
		patch SourcePatch
		check func(t *testing.T, got SourceSpec)
	}{
		{"targetRevision", SourcePatch{TargetRevision: sp("v2")}, func(t *testing.T, got SourceSpec) {
			if got.TargetRevision != "v2" || len(got.Helm.Parameters) != 2 {
				t.Errorf("%+v", got)
			}
		}},
		{"helm parameter merged by name, new one appended, file parameter of the same name untouched",
			SourcePatch{Helm: &HelmPatch{Parameters: []HelmParameter{{Name: "image.tag", Value: "2.0"}, {Name: "debug", Value: "true"}}}},
			func(t *testing.T, got SourceSpec) {
				p := got.Helm.Parameters
				if len(p) != 3 || p[0] != (HelmParameter{Name: "image.tag", Value: "2.0"}) || p[1].Name != "replicas" || !p[1].ForceString || p[2].Name != "debug" {
					t.Errorf("parameters %+v", p)
				}
				if got.Helm.FileParameters[0].Path != "files/tag" {
					t.Errorf("a parameter must not merge with the file parameter of the same name: %+v", got.Helm.FileParameters)
				}
			}},
		{"value files replaced", SourcePatch{Helm: &HelmPatch{ValueFiles: &[]string{"a.yaml", "b.yaml"}}}, func(t *testing.T, got SourceSpec) {
			if strings.Join(got.Helm.ValueFiles, ",") != "a.yaml,b.yaml" {
				t.Errorf("%v", got.Helm.ValueFiles)
			}
		}},
		{"kustomize image merged by image name (registry port is not a tag)", SourcePatch{Kustomize: &KustomizePatch{
			Images: []string{"nginx:1.25", "reg:5000/api@sha256:abc", "redis:7"}}}, func(t *testing.T, got SourceSpec) {
			if strings.Join(got.Kustomize.Images, " ") != "nginx:1.25 reg:5000/api@sha256:abc redis:7" {
				t.Errorf("images %v", got.Kustomize.Images)
			}
		}},
		{"kustomize replicas, labels, prefix, force", SourcePatch{Kustomize: &KustomizePatch{Replicas: []KustomizeReplica{{Name: "web", Count: 5}, {Name: "worker", Count: 1}},
			CommonLabels: map[string]string{"env": "dev"}, NamePrefix: sp("dev-"), ForceCommonLabels: bp(true), Namespace: sp("shop")}},
			func(t *testing.T, got SourceSpec) {
				k := got.Kustomize
				if len(k.Replicas) != 2 || k.Replicas[0].Count != 5 || k.CommonLabels["team"] != "pay" || k.CommonLabels["env"] != "dev" ||
					k.NamePrefix != "dev-" || !k.ForceCommonLabels || k.Namespace != "shop" {
					t.Errorf("%+v", k)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.patch.Check(); err != nil {
				t.Fatal(err)
			}
			before := base.Clone()
			got := c.patch.Apply(base)
			if !base.Equal(before) {
				t.Fatal("Apply modified its argument")
			}
			c.check(t, got)
			if got.Equal(base) {
				t.Fatal("the patch changed nothing")
			}
			back := c.patch.Revert(base).Apply(got)
			if !back.Equal(base) {
				a, _ := json.Marshal(back)
				b, _ := json.Marshal(base)
				t.Errorf("revert:\n got %s\nwant %s", a, b)
			}
		})
	}
	// Reverting an update that added everything to a bare source leaves a bare source.
	bare := SourceSpec{Index: 0, RepoURL: "r", Path: "p"}
	p := SourcePatch{TargetRevision: sp("v9"), Helm: &HelmPatch{Parameters: []HelmParameter{{Name: "a", Value: "1"}}},
		Kustomize: &KustomizePatch{Images: []string{"x:1"}, CommonAnnotations: map[string]string{"k": "v"}}}
	after := p.Apply(bare)
	r := p.Revert(bare)
	if got := r.Apply(after); got.Helm != nil || got.Kustomize != nil || got.TargetRevision != "HEAD" {
		t.Errorf("revert onto a bare source: %+v", got)
	}
	// Fields the update did not touch keep what someone else set meanwhile.
	other := after.Clone()
	other.Helm.Parameters = append(other.Helm.Parameters, HelmParameter{Name: "theirs", Value: "x"})
	if got := r.Apply(other); got.Helm == nil || len(got.Helm.Parameters) != 1 || got.Helm.Parameters[0].Name != "theirs" {
		t.Errorf("revert must keep parameters it did not set: %+v", got.Helm)
	}
}

func TestSourcePatchCheckRefusesBadPatches(t *testing.T) {
	for _, c := range []struct {
		p    SourcePatch
		want string
	}{
		{SourcePatch{}, "changes nothing"},
		{SourcePatch{Helm: &HelmPatch{}}, "changes nothing"},
		{SourcePatch{TargetRevision: sp(" ")}, "targetRevision is empty"},
		{SourcePatch{Helm: &HelmPatch{Parameters: []HelmParameter{{Name: "", Value: "1"}}}}, "helm.parameters[0]: name is empty"},
		{SourcePatch{Helm: &HelmPatch{Parameters: []HelmParameter{{Name: "a"}, {Name: "a"}}}}, `"a" given twice`},
		{SourcePatch{Helm: &HelmPatch{FileParameters: []HelmFileParameter{{Name: "f"}}}}, "path is empty"},
		{SourcePatch{Helm: &HelmPatch{ValueFiles: &[]string{""}}}, "helm.valueFiles[0] is empty"},
		{SourcePatch{Kustomize: &KustomizePatch{Images: []string{"nginx:1", "nginx=other:2"}}}, `"nginx" given twice`},
		{SourcePatch{Kustomize: &KustomizePatch{Replicas: []KustomizeReplica{{Name: "w", Count: -1}}}}, "negative"},
	} {
		err := c.p.Check()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}

func TestSelectSource(t *testing.T) {
	names := []string{"chart", "", "values"}
	for _, c := range []struct {
		want  string
		multi bool
		idx   int
		err   string
	}{
		{"", false, -1, ""},
		{"chart", false, 0, "single source"},
		{"", true, 0, "choose one with source: its name or index: 0 (chart), 1, 2 (values)"},
		{"values", true, 2, ""},
		{"1", true, 1, ""},
		{"3", true, 0, "sources 0 to 2"},
		{"valeus", true, 0, `no source named "valeus"`},
	} {
		n := names
		if !c.multi {
			n = nil
		}
		idx, err := SelectSource(c.want, n, c.multi)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("SelectSource(%q, %v): %v, want %q", c.want, c.multi, err, c.err)
			}
			continue
		}
		if err != nil || idx != c.idx {
			t.Errorf("SelectSource(%q, %v) = %d, %v; want %d", c.want, c.multi, idx, err, c.idx)
		}
	}
}

// updHandler is echoHandler that can update: it records what it was asked.
type updHandler struct {
	echoHandler
	got chan UpdateRequest
}

func (h updHandler) Update(_ context.Context, req UpdateRequest) (*UpdateReply, error) {
	h.got <- req
	if req.App == "ghost" {
		return nil, Errorf(CodeNotFound, "no such app")
	}
	b := SourceSpec{Index: -1, TargetRevision: "v1"}
	a := req.Patch.Apply(b)
	return &UpdateReply{App: &AppStatus{Name: req.App}, Before: &b, After: &a, Changed: true}, nil
}

func TestUpdateRequestRoundTripAndRefusals(t *testing.T) {
	nc, apps, agents := natsKV(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hb, err := Heartbeat(ctx, agents, time.Hour, func() Registration { return Registration{Agent: "eu", Replica: "r1", Kind: "test"} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := updHandler{got: make(chan UpdateRequest, 4)}
	wait, err := Serve(ctx, nc, "eu", h, ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(nc, apps, agents)
	rep, err := c.Update(ctx, "eu", UpdateRequest{App: "web", Patch: SourcePatch{TargetRevision: sp("v2")}, RunID: "r1", Step: "s/u"})
	if err != nil || rep.After.TargetRevision != "v2" || rep.Before.TargetRevision != "v1" || !rep.Changed {
		t.Fatalf("update: %+v %v", rep, err)
	}
	if got := <-h.got; got.RunID != "r1" || got.Step != "s/u" || *got.Patch.TargetRevision != "v2" {
		t.Errorf("handler got %+v", got)
	}
	var ae *Error
	if _, err := c.Update(ctx, "eu", UpdateRequest{App: "ghost", Patch: SourcePatch{TargetRevision: sp("v2")}}); !errors.As(err, &ae) || ae.Code != CodeNotFound || ae.App != "ghost" || ae.Agent != "eu" {
		t.Errorf("unknown app: %v", err)
	}
	<-h.got
	// The client refuses an empty patch before sending anything.
	if _, err := c.Update(ctx, "eu", UpdateRequest{App: "web"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "changes nothing") {
		t.Errorf("empty patch: %v", err)
	}
	// Raw requests from another client: a typo'd field, no app, an empty patch, a bad version.
	for _, c := range []struct{ body, want string }{
		{`{"v":1,"app":"web","patch":{"targetRevison":"v2"}}`, `unknown field "targetRevison"`},
		{`{"v":1,"app":"web","patch":{"helm":{"parameters":[{"name":"a","value":"1","vlaue":"2"}]}}}`, `unknown field "vlaue"`},
		{`{"v":1,"patch":{"targetRevision":"v2"}}`, "no app given"},
		{`{"v":1,"app":"web","patch":{}}`, "changes nothing"},
		{`{"v":1,"app":"web","patch":{"kustomize":{"replicas":[{"name":"w","count":"three"}]}}}`, "cannot unmarshal"},
		{`{"v":2,"app":"web","patch":{"targetRevision":"v2"}}`, "protocol version 2"},
	} {
		msg, err := nc.RequestWithContext(ctx, Subject("eu", "update"), []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var r UpdateReply
		if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error == nil || !strings.Contains(r.Error.Message, c.want) || r.Error.Agent != "eu" {
			t.Errorf("%s: %s, want an error with %q", c.body, msg.Data, c.want)
		}
	}
	select {
	case got := <-h.got:
		t.Errorf("a refused request reached the handler: %+v", got)
	default:
	}
	cancel()
	wait()
	<-hb
}

// An agent whose handler cannot update answers unsupported, naming the app.
func TestUpdateUnsupportedByHandler(t *testing.T) {
	rep := dispatch(context.Background(), echoHandler{}, "update", []byte(`{"v":1,"app":"web","patch":{"targetRevision":"v2"}}`), "eu")
	r, ok := rep.(UpdateReply)
	if !ok || !errors.Is(r.Error, ErrUnsupported) || r.Error.App != "web" || r.Error.Agent != "eu" {
		t.Fatalf("%+v", rep)
	}
}

// Only keeps what the patch touches, and a revert computed from it restores the same values as
// one computed from the whole source.
func TestSourceSpecOnlyKeepsWhatThePatchTouches(t *testing.T) {
	full := SourceSpec{Index: -1, RepoURL: "r", Path: "p", TargetRevision: "v1",
		Helm:      &HelmSpec{Parameters: []HelmParameter{{Name: "image.tag", Value: "1"}, {Name: "db.password", Value: "hunter2"}}, ValueFiles: []string{"a.yaml"}},
		Kustomize: &KustomizeSpec{Images: []string{"nginx:1", "redis:6"}, CommonLabels: map[string]string{"team": "pay", "secret": "x"}}}
	p := SourcePatch{Helm: &HelmPatch{Parameters: []HelmParameter{{Name: "image.tag", Value: "2"}, {Name: "new", Value: "y"}}},
		Kustomize: &KustomizePatch{Images: []string{"nginx:2"}, CommonLabels: map[string]string{"team": "web"}}}
	got := full.Only(p)
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "redis") || strings.Contains(string(b), "secret") || strings.Contains(string(b), "a.yaml") {
		t.Errorf("Only kept untouched values: %s", b)
	}
	if got.TargetRevision != "v1" || got.Helm.Parameters[0].Value != "1" || got.Kustomize.Images[0] != "nginx:1" || got.Kustomize.CommonLabels["team"] != "pay" {
		t.Errorf("Only dropped touched values: %s", b)
	}
	after := p.Apply(full)
	if a, b := p.Revert(got).Apply(after), p.Revert(full).Apply(after); !a.Equal(b) || !a.Equal(full) {
		t.Errorf("revert from the reduced source differs:\n%+v\n%+v", a, b)
	}
}
