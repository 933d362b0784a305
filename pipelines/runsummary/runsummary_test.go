package runsummary

import (
	"testing"

	"github.com/prflow/prflow/pipelines"
)

// DiffOf takes a DiffPreview step's outputs and any step's outputs of that shape, and leaves
// alone outputs that only look alike: FetchLinkedApps' apps (named "name"), apps that are not
// objects, a summary without changed.
func TestDiffOfShapes(t *testing.T) {
	diffApps := []any{map[string]any{"app": "web-dev", "agent": "sim", "resources": []any{map[string]any{"kind": "Deployment", "name": "web", "change": "changed", "paths": []any{"spec.replicas"}}}, "unchanged": float64(3)}}
	for _, tc := range []struct {
		name string
		st   pipelines.StepRun
		ok   bool
		apps int
	}{
		{"DiffPreview", pipelines.StepRun{Type: "DiffPreview", Outputs: map[string]any{"apps": diffApps, "summary": "web-dev: 1 changed", "changed": true}}, true, 1},
		{"DiffPreview with no app", pipelines.StepRun{Type: "DiffPreview", Outputs: map[string]any{"summary": "nothing linked", "changed": false}}, true, 0},
		{"MergePR preview", pipelines.StepRun{Type: "MergePR", Outputs: map[string]any{"commitId": "abc", "apps": diffApps, "summary": "s", "changed": true}}, true, 1},
		{"linked apps", pipelines.StepRun{Type: "FetchLinkedApps", Outputs: map[string]any{"apps": []any{map[string]any{"name": "web-dev", "agent": "sim"}}}}, false, 0},
		{"linked apps with a summary", pipelines.StepRun{Type: "Noop", Outputs: map[string]any{"apps": []any{map[string]any{"name": "web-dev"}}, "summary": "x", "changed": true}}, false, 0},
		{"apps not objects", pipelines.StepRun{Type: "DiffPreview", Outputs: map[string]any{"apps": []any{"web-dev"}, "summary": "x", "changed": true}}, false, 0},
		{"apps a string", pipelines.StepRun{Type: "DiffPreview", Outputs: map[string]any{"apps": "web-dev"}}, false, 0},
		{"summary only", pipelines.StepRun{Type: "Noop", Outputs: map[string]any{"summary": "a text"}}, false, 0},
		{"no outputs", pipelines.StepRun{Type: "DiffPreview"}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := DiffOf(&tc.st)
			if ok != tc.ok || len(d.Apps) != tc.apps {
				t.Fatalf("DiffOf = %+v, %v; want ok %v with %d apps", d, ok, tc.ok, tc.apps)
			}
			if ok && tc.apps > 0 && (d.Apps[0].App != "web-dev" || d.Apps[0].Resources[0].Paths[0] != "spec.replicas" || d.Apps[0].Unchanged != 3) {
				t.Errorf("app read back wrong: %+v", d.Apps[0])
			}
		})
	}
}

// Of counts only what succeeded (a failed UpdateReleaseRepo claims no edit, a failed sync
// no app), keeps a failed diff preview (it says why), marks an already-promoted stage
// without a PR, and marks rollback edits.
func TestOfCountsWhatHappened(t *testing.T) {
	edits := func(old, val string) []any {
		return []any{map[string]any{"file": "envs/dev/config.json", "changes": []any{map[string]any{"key": "image.tag", "value": val, "old": old}}}}
	}
	r := &pipelines.Run{Stages: []*pipelines.StageRun{
		{ID: "dev", Status: pipelines.StSucceeded, Steps: []*pipelines.StepRun{
			{ID: "update", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{"alreadyPromoted": true, "revision": "abc", "prNumber": "", "edits": edits("1.5.0", "1.5.0")}},
		}},
		{ID: "prod", Status: pipelines.StFailed, Steps: []*pipelines.StepRun{
			{ID: "update", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{"prNumber": float64(4), "prlink": "javascript:alert(1)", "edits": edits("1.4.1", "1.5.0")}},
			{ID: "again", Type: "UpdateReleaseRepo", Status: pipelines.StFailed, Outputs: map[string]any{"edits": edits("1.5.0", "9.9.9")}},
			{ID: "preview", Type: "DiffPreview", Status: pipelines.StFailed, Outputs: map[string]any{"summary": "the PR changes no resource of web-prod", "changed": false}},
			{ID: "sync", Type: "GitOpsSync", Status: pipelines.StFailed, Outputs: map[string]any{"applications": []any{map[string]any{"name": "web-prod", "health": "Degraded"}}}},
		}, Rollback: []*pipelines.StepRun{
			{ID: "revert", Type: "RevertPR", Status: pipelines.StSucceeded, Outputs: map[string]any{"edits": edits("1.5.0", "1.4.1")}},
		}},
	}}
	got := Of(r)
	dev, prod := got[0], got[1]
	if !dev.AlreadyPromoted || dev.Revision != "abc" || len(dev.PRs) != 0 || len(dev.Edits) != 1 || !dev.Edits[0].Already {
		t.Errorf("dev: %+v", dev)
	}
	if len(prod.Edits) != 2 || prod.Edits[0].OldText() != "1.4.1" || prod.Edits[0].Rollback || !prod.Edits[1].Rollback || prod.Edits[1].Step != "revert" {
		t.Errorf("prod edits: %+v", prod.Edits)
	}
	if len(prod.PRs) != 1 || prod.PRs[0].Number != "4" || prod.PRs[0].URL != "" || prod.PRs[0].Link != "javascript:alert(1)" {
		t.Errorf("prod PR: a link that is not http(s) must not be a URL: %+v", prod.PRs)
	}
	if len(prod.Diffs) != 1 || !prod.Diffs[0].Failed || prod.Diffs[0].Summary == "" {
		t.Errorf("prod diffs: %+v", prod.Diffs)
	}
	if len(prod.Apps) != 0 {
		t.Errorf("a failed sync's apps counted: %+v", prod.Apps)
	}
	if (Edit{Created: true}).OldText() != "(unset)" || (Edit{}).OldText() != "" || (Edit{HasOld: true}).OldText() != "" || (Edit{HasOld: true, Old: float64(3)}).OldText() != "3" {
		t.Error("OldText")
	}
}
