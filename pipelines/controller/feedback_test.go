package controller

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

func feedbackRun() *pipelines.Run {
	return &pipelines.Run{ID: "t1", Pipeline: "p", Executor: "webhook:github",
		Trigger: &pipelines.TriggerInfo{Kind: "webhook", Provider: "github", Repo: "acme/web", SHA: "abc", PR: 3, Connector: "app"},
		Stages: []*pipelines.StageRun{
			{ID: "dev", Status: pipelines.StPending, Steps: []*pipelines.StepRun{{ID: "update", Type: "UpdateReleaseRepo", Status: pipelines.StPending}},
				Rollback: []*pipelines.StepRun{{ID: "revert", Type: "RevertPR", Status: pipelines.StPending}}},
			{ID: "prod", Status: pipelines.StPending},
		}}
}

// TestFeedbackJobs: which notification jobs each transition makes, and their idempotency keys.
func TestFeedbackJobs(t *testing.T) {
	c := &Controller{}
	c.SetFeedback(&Feedback{ExternalURL: "https://x.test/", Statuses: true, Comments: true, Pool: "notify"})
	r := feedbackRun()
	ids := func(before *fbSnapshot) []string {
		var out []string
		for _, j := range c.feedbackJobs(before, r) {
			if j.Pool != "notify" || j.Attempt != 1 || len(j.Connectors) != 1 {
				t.Errorf("job %s: pool %s attempt %d connectors %v", j.ID(), j.Pool, j.Attempt, j.Connectors)
			}
			out = append(out, j.ID()+" "+j.Type+" "+j.Connectors[0])
		}
		return out
	}
	b := c.feedbackSnapshot(r)
	r.Stages[0].Status = pipelines.StRunning
	if got := strings.Join(ids(b), "|"); got != "t1/dev/prflow-status-pending/1/0 CommitStatus app" {
		t.Errorf("stage start: %s", got)
	}
	b = c.feedbackSnapshot(r)
	if got := ids(b); len(got) != 0 {
		t.Errorf("no change: %v", got)
	}
	r.Stages[0].Steps[0].Status = pipelines.StSucceeded
	r.Stages[0].Steps[0].Outputs = map[string]any{"connector": "release", "repo": "acme/release", "prNumber": float64(9),
		"changedFiles": []any{"envs/dev/a.yaml"}}
	if got := strings.Join(ids(b), "|"); got != "t1/dev/prflow-comment-update/1/0 PRComment release" {
		t.Errorf("PR opened: %s", got)
	}
	b = c.feedbackSnapshot(r)
	r.Stages[0].Status = pipelines.StFailed
	r.Stages[0].Error = "sync failed"
	r.Stages[0].Rollback[0].Status = pipelines.StSucceeded
	r.Stages[0].Rollback[0].Outputs = map[string]any{"connector": "release", "repo": "acme/release", "prNumber": 10}
	jobs := c.feedbackJobs(b, r)
	if len(jobs) != 2 || jobs[0].ID() != "t1/dev/prflow-status-failure/1/0" || jobs[0].Inputs["description"] != "p dev: failed: sync failed" ||
		jobs[0].Inputs["targetUrl"] != "https://x.test/ui/runs/t1" || jobs[0].Inputs["sha"] != "abc" || jobs[0].Inputs["context"] != "prflow/dev" ||
		jobs[1].ID() != "t1/dev/rb.prflow-comment-revert/1/0" || !strings.Contains(jobs[1].Inputs["body"].(string), "reverts an earlier release") ||
		jobs[1].Inputs["prNumber"] != 10 {
		for _, j := range jobs {
			t.Logf("%s %v", j.ID(), j.Inputs)
		}
		t.Fatal("stage failure and revert PR: unexpected jobs")
	}

	// A run without a trigger connector gets comments but no statuses; feedback off gets nothing.
	r = feedbackRun()
	r.Trigger.Connector = ""
	b = c.feedbackSnapshot(r)
	r.Stages[0].Status = pipelines.StRunning
	if got := ids(b); len(got) != 0 {
		t.Errorf("statuses without a connector: %v", got)
	}
	c.SetFeedback(nil)
	if c.feedbackSnapshot(r) != nil || c.feedbackJobs(nil, r) != nil {
		t.Error("feedback off still makes jobs")
	}
}

func TestClip(t *testing.T) {
	if got := clip(strings.Repeat("é", 100), 141); len(got) > 141 || !strings.HasSuffix(got, "…") {
		t.Errorf("clip: %q (%d bytes)", got, len(got))
	}
}
