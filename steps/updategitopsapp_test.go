package steps

import (
	"strings"
	"testing"
)

func TestUpdateGitOpsAppInputs(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     map[string]any
		static bool
		err    string
		check  func(t *testing.T, c *updateConfig)
	}{
		{name: "helm and target", in: map[string]any{"applicationName": "web", "agentId": "eu", "targetRevision": "v2",
			"helm": map[string]any{"parameters": []any{map[string]any{"name": "image.tag", "value": 1.10, "forceString": "true"}},
				"fileParameters": []any{map[string]any{"name": "f", "path": "files/f"}}, "valueFiles": "a.yaml,b.yaml"}},
			check: func(t *testing.T, c *updateConfig) {
				h := c.patch.Helm
				if *c.patch.TargetRevision != "v2" || h.Parameters[0].Value != "1.1" || !h.Parameters[0].ForceString ||
					h.FileParameters[0].Path != "files/f" || strings.Join(*h.ValueFiles, " ") != "a.yaml b.yaml" || c.agentID != "eu" {
					t.Errorf("%+v %+v", c, h)
				}
			}},
		{name: "empty valueFiles clears them", in: map[string]any{"applicationName": "web", "helm": map[string]any{"valueFiles": []any{}}},
			check: func(t *testing.T, c *updateConfig) {
				if c.patch.Helm.ValueFiles == nil || len(*c.patch.Helm.ValueFiles) != 0 {
					t.Errorf("valueFiles %v", c.patch.Helm.ValueFiles)
				}
			}},
		{name: "kustomize", in: map[string]any{"applicationName": "web", "kustomize": map[string]any{"images": []any{"nginx:1.25"},
			"replicas": []any{map[string]any{"name": "w", "count": 3}}, "commonLabels": map[string]any{"team": "pay"}, "namePrefix": "",
			"forceCommonLabels": false}},
			check: func(t *testing.T, c *updateConfig) {
				k := c.patch.Kustomize
				if k.Images[0] != "nginx:1.25" || k.Replicas[0].Count != 3 || k.CommonLabels["team"] != "pay" || k.NamePrefix == nil || *k.NamePrefix != "" ||
					k.ForceCommonLabels == nil || *k.ForceCommonLabels || k.Namespace != nil {
					t.Errorf("%+v", k)
				}
			}},
		{name: "values from expressions, at load", static: true, in: map[string]any{"applicationName": "${{ inputs.app }}",
			"helm": map[string]any{"parameters": "${{ inputs.params }}"}, "rollback": "${{ inputs.rb }}"}},
		{name: "rollback alone", in: map[string]any{"rollback": true}},
		{name: "rollback with a change", in: map[string]any{"rollback": "true", "targetRevision": "v1"}, err: "give no targetRevision"},
		{name: "no app", in: map[string]any{"targetRevision": "v1"}, err: "applicationName: required"},
		{name: "nothing to change", in: map[string]any{"applicationName": "web", "helm": map[string]any{}}, err: "nothing to change"},
		{name: "helm not a mapping", in: map[string]any{"applicationName": "web", "helm": "image.tag=2"}, err: "helm: want a mapping"},
		{name: "parameter not a mapping", in: map[string]any{"applicationName": "web", "helm": map[string]any{"parameters": []any{"a=b"}}}, err: "helm.parameters[0]: want a mapping"},
		{name: "parameter name a list", in: map[string]any{"applicationName": "web", "helm": map[string]any{"parameters": []any{map[string]any{"name": []any{"a"}, "value": "b"}}}}, err: "helm.parameters[0].name: want a string"},
		{name: "bad forceString", in: map[string]any{"applicationName": "web", "helm": map[string]any{"parameters": []any{map[string]any{"name": "a", "value": "b", "forceString": "maybe"}}}}, err: "helm.parameters[0].forceString"},
		{name: "bad count", in: map[string]any{"applicationName": "web", "kustomize": map[string]any{"replicas": []any{map[string]any{"name": "w", "count": "x"}}}}, err: "kustomize.replicas[0].count"},
		{name: "labels not a mapping", in: map[string]any{"applicationName": "web", "kustomize": map[string]any{"commonLabels": []any{"a"}}}, err: "kustomize.commonLabels: want a mapping"},
		{name: "same image twice", in: map[string]any{"applicationName": "web", "kustomize": map[string]any{"images": []any{"a:1", "a:2"}}}, err: `kustomize.images: "a" given twice`},
		{name: "negative replicas", in: map[string]any{"applicationName": "web", "kustomize": map[string]any{"replicas": []any{map[string]any{"name": "w", "count": -1}}}}, err: "negative"},
		{name: "bad rollback", in: map[string]any{"rollback": "sometimes"}, err: "rollback: want true or false"},
	} {
		cfg, err := updateConfigFrom(c.in, c.static)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
			continue
		}
		if err == nil && c.check != nil {
			c.check(t, cfg)
		}
	}
}

// The rollback mode finds the stage's latest forward update in the step's priors (rollback
// steps see the stage's steps first, then earlier rollback steps), and GitOpsSync finds every
// app the stage's updates changed.
func TestUpdatePriors(t *testing.T) {
	fwd := func(id, app, ns string, rollback bool) Prior {
		a := map[string]any{"name": app, "agent": "eu"}
		if ns != "" {
			a["appNamespace"] = ns
		}
		return Prior{ID: id, Type: "UpdateGitOpsApp", Outputs: map[string]any{"application": a, "rollback": rollback,
			"sourceBefore": map[string]any{"index": -1, "targetRevision": "main"}, "patch": map[string]any{"targetRevision": "v2"}}}
	}
	sc := &Context{Priors: []Prior{
		{ID: "apps", Type: "FetchLinkedApps"},
		fwd("upd", "web", "team-a", false),
		{ID: "sync", Type: "GitOpsSync"},
		fwd("revert", "web", "team-a", true),
	}}
	u := lastUpdate(sc)
	if u == nil || u.app != "team-a/web" || u.agent != "eu" || u.before.TargetRevision != "main" || *u.patch.TargetRevision != "v2" {
		t.Fatalf("lastUpdate = %+v", u)
	}
	if r := u.patch.Revert(u.before); r.TargetRevision == nil || *r.TargetRevision != "main" {
		t.Errorf("revert %+v", r)
	}
	if got := updatedApps(sc); len(got) != 1 || got[0] != (appTarget{Agent: "eu", App: "team-a/web"}) {
		t.Errorf("updatedApps = %v", got)
	}
	if lastUpdate(&Context{Priors: []Prior{fwd("revert", "web", "", true)}}) != nil {
		t.Error("a rollback update must not be rolled back")
	}
	broken := fwd("upd", "web", "", false)
	delete(broken.Outputs, "patch")
	if lastUpdate(&Context{Priors: []Prior{broken}}) != nil {
		t.Error("an update without its patch output cannot be rolled back")
	}
}
