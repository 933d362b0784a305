package controller

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

// TestLinksNeverRelative: notifications, commit statuses and PR comments link to a run's page
// at --external-url; without one they carry no link at all, never a path alone (useless in
// an e-mail, a Slack message or a forge's status).
func TestLinksNeverRelative(t *testing.T) {
	for _, ext := range []string{"", "https://prflow.example/base/"} {
		c := &Controller{}
		c.SetFeedback(&Feedback{ExternalURL: ext, Statuses: true, Comments: true})
		want := ""
		if ext != "" {
			want = "https://prflow.example/base/ui/runs/t1"
		}
		if got := c.runURL("t1"); got != want {
			t.Errorf("external %q: notification link %q, want %q", ext, got, want)
		}
		r := feedbackRun()
		b := c.feedbackSnapshot(r)
		r.Stages[0].Status = pipelines.StSucceeded
		r.Stages[0].Steps[0].Status = pipelines.StSucceeded
		r.Stages[0].Steps[0].Outputs = map[string]any{"connector": "release", "repo": "acme/release", "prNumber": 9}
		jobs := c.feedbackJobs(b, r)
		if len(jobs) != 2 {
			t.Fatalf("external %q: %d jobs, want a status and a comment", ext, len(jobs))
		}
		if got := jobs[0].Inputs["targetUrl"]; got != want {
			t.Errorf("external %q: status target %q, want %q", ext, got, want)
		}
		body := jobs[1].Inputs["body"].(string)
		if ext == "" && (strings.Contains(body, "Run:") || strings.Contains(body, "/ui/runs")) {
			t.Errorf("comment without --external-url links the run:\n%s", body)
		}
		if ext != "" && !strings.Contains(body, "Run: "+want) {
			t.Errorf("comment lacks the link %s:\n%s", want, body)
		}
	}
	// Feedback off entirely (prflow dev without --serve): no link either.
	if got := (&Controller{}).runURL("t1"); got != "" {
		t.Errorf("no feedback: notification link %q", got)
	}
}
