package main

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// The dev summary says when a stage was already promoted (no PR, no merge: never "merged as"),
// lists what an edit created, and repeats the run's warnings.
func TestSummaryMarksAlreadyPromotedAndCreated(t *testing.T) {
	now := time.Now()
	edits := []any{map[string]any{"file": "envs/dev/config.json", "changes": []any{map[string]any{"key": "image.tag", "value": "1.5.0"}}}}
	r := &pipelines.Run{ID: "r1", Status: pipelines.StSucceeded, Started: now, Ended: now,
		Warnings: []string{"qa/update created what acme/release did not have (Harness behaviour; set create: true, or fix a typo): envs/qa/config.json: image.tga"},
		Stages: []*pipelines.StageRun{
			{ID: "dev", Status: pipelines.StSucceeded, Started: now, Ended: now, Steps: []*pipelines.StepRun{
				{ID: "update", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{
					"alreadyPromoted": true, "revision": "0123456789abcdef0123", "prNumber": "", "commitId": "", "edits": edits}},
				{ID: "merge", Type: "MergePR", Status: pipelines.StSucceeded, Outputs: map[string]any{"alreadyPromoted": true, "commitId": "", "revision": "0123456789abcdef0123"}},
			}},
			{ID: "qa", Status: pipelines.StSucceeded, Started: now, Ended: now, Steps: []*pipelines.StepRun{
				{ID: "update", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{
					"prNumber": 7, "prlink": "https://forge/pr/7", "created": []any{"envs/qa/config.json: image.tga"}}},
			}},
		}}
	var b strings.Builder
	printSummary(&b, r, map[string]string{"envs/dev/config.json": `{"image": {"tag": "1.5.0"}}`}, now)
	out := b.String()
	for _, want := range []string{
		"  dev: succeeded (already promoted: the release repo held every value; no PR, no merge)",
		"    envs/dev/config.json image.tag: 1.5.0 (already set at 0123456789ab)",
		"  qa: succeeded in",
		"    created (new in the release repo): envs/qa/config.json: image.tga (update)",
		"  warning: qa/update created what acme/release did not have",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "merged as") || strings.Contains(out, "qa: succeeded (already") {
		t.Errorf("summary claims a merge or an already-promoted qa:\n%s", out)
	}
}
