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
	out := summaryOf(t, r, map[string]string{"envs/dev/config.json": `{"image": {"tag": "1.5.0"}}`}, now,
		"  dev: succeeded (already promoted: the release repo held every value; no PR, no merge)",
		"    envs/dev/config.json image.tag: 1.5.0 (already set at 0123456789ab)",
		"  qa: succeeded in",
		"    created (new in the release repo): envs/qa/config.json: image.tga (update)",
		"  warning: qa/update created what acme/release did not have",
	)
	if strings.Contains(out, "merged as") || strings.Contains(out, "qa: succeeded (already") {
		t.Errorf("summary claims a merge or an already-promoted qa:\n%s", out)
	}
}

// The summary's old value is the one the step recorded (the repo's start, `before`, is only a
// fallback for edits without one): a promotion after another shows the value it replaced,
// a created key shows (unset), a rollback's edit is marked, and a diff preview's summary is
// printed. The progress lines show old → new in the edits output too.
func TestSummaryPrintsRecordedOldValues(t *testing.T) {
	now := time.Now()
	edits := []any{map[string]any{"file": "envs/prod/config.json", "changes": []any{
		map[string]any{"key": "image.tag", "value": "1.6.0", "old": "1.5.0"},
		map[string]any{"key": "replicas", "value": float64(3), "old": float64(2)},
		map[string]any{"key": "cluster.zone", "value": "b", "created": true},
		map[string]any{"key": "legacy", "value": "x"},
	}}}
	revert := []any{map[string]any{"file": "envs/prod/config.json", "changes": []any{map[string]any{"key": "image.tag", "value": "1.5.0", "old": "1.6.0"}}}}
	apps := []any{map[string]any{"app": "web-prod", "agent": "sim", "resources": []any{map[string]any{"kind": "Deployment", "name": "web", "change": "changed"}}}}
	r := &pipelines.Run{ID: "r2", Status: pipelines.StFailed, Started: now, Ended: now, Stages: []*pipelines.StageRun{
		{ID: "prod", Status: pipelines.StFailed, Started: now, Ended: now, Steps: []*pipelines.StepRun{
			{ID: "update", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{"prNumber": 9, "prlink": "https://forge/pr/9", "edits": edits}},
			{ID: "preview", Type: "DiffPreview", Status: pipelines.StSucceeded, Outputs: map[string]any{"apps": apps, "summary": "web-prod: 1 changed", "changed": true}},
			{ID: "merge", Type: "MergePR", Status: pipelines.StSucceeded, Outputs: map[string]any{"commitId": "abc123"}},
			{ID: "sync", Type: "GitOpsSync", Status: pipelines.StFailed, Outputs: map[string]any{"applications": []any{map[string]any{"name": "web-prod", "health": "Degraded"}}}},
		}, Rollback: []*pipelines.StepRun{
			{ID: "revert", Type: "RevertPR", Status: pipelines.StSucceeded, Outputs: map[string]any{"edits": revert}},
			{ID: "never", Type: "UpdateReleaseRepo", Status: pipelines.StPending},
		}},
	}}
	out := summaryOf(t, r, map[string]string{"envs/prod/config.json": `{"image": {"tag": "1.4.1"}, "legacy": "w"}`}, now,
		"    envs/prod/config.json image.tag: 1.5.0 → 1.6.0\n",
		"    envs/prod/config.json replicas: 2 → 3\n",
		"    envs/prod/config.json cluster.zone: (unset) → b\n",
		"    envs/prod/config.json legacy: w → x\n", // not recorded: read from the start
		"    envs/prod/config.json image.tag: 1.6.0 → 1.5.0 (rollback revert)\n",
		"    PR #9 https://forge/pr/9 (update)\n",
		"    preview: web-prod: 1 changed (preview)\n",
		"    merged as commit abc123 (merge)\n",
	)
	if strings.Contains(out, "1.4.1") || strings.Contains(out, "Degraded") {
		t.Errorf("summary shows the repo's start instead of the recorded old value, or a failed sync's apps:\n%s", out)
	}
	lines := strings.Join(outputLines(map[string]any{"edits": edits, "apps": apps}), "\n")
	for _, want := range []string{"envs/prod/config.json image.tag=1.5.0 → 1.6.0", "cluster.zone=(unset) → b", "legacy=x", "apps: web-prod (1 resource changed)"} {
		if !strings.Contains(lines, want) {
			t.Errorf("output lines lack %q:\n%s", want, lines)
		}
	}
}

// summaryOf prints r's summary (before: the release repo's files at the start) and checks
// that it has each of the lines want; it returns the summary.
func summaryOf(t *testing.T, r *pipelines.Run, before map[string]string, now time.Time, want ...string) string {
	t.Helper()
	var b strings.Builder
	printSummary(&b, r, before, now)
	out := b.String()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("summary lacks %q:\n%s", w, out)
		}
	}
	return out
}
