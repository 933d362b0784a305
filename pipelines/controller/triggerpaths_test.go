package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// pathsPromotion is examples/pipelines/on-merge.yaml with `paths` on its pullRequest trigger,
// a GitHub fake with acme/web and acme/release, and a simulated agent. It posts a signed
// PR-merged webhook for a PR changing src/app.txt and returns the finished run.
func pathsPromotion(t *testing.T, paths string) (*hookEnv, *scmtest.GitHub, scmtest.PullRequest, *pipelines.Run) {
	t.Helper()
	e, gh, ghp := onMergeEnv(t, func(src []byte) []byte {
		const anchor = "      branches: [main]\n"
		if !strings.Contains(string(src), anchor) {
			t.Fatal("on-merge.yaml changed: no branches line in its trigger")
		}
		return []byte(strings.Replace(string(src), anchor, anchor+"      paths: "+paths+"\n", 1))
	})

	pr := mergedPR(t, gh.Forge, ghp) // changes src/app.txt
	req, err := scmtest.GitHubWebhookRequest(context.Background(), e.srv.URL+"/hooks/github", hookSecret,
		scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: pr})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.post(req); code != http.StatusAccepted {
		t.Fatalf("webhook: HTTP %d %s", code, body)
	}
	runs := e.waitTriggered(1)
	return e, gh, pr, e.Wait(runs[0].ID, 90*time.Second)
}

// jobsOfType is how many jobs of a step type were published on prflow.jobs.>.
func (e *hookEnv) jobsOfType(typ string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, m := range e.msgs {
		if !strings.HasPrefix(m.Subject, "prflow.jobs.") {
			continue
		}
		var j struct{ Type string }
		if json.Unmarshal(m.Data, &j) == nil && j.Type == typ {
			n++
		}
	}
	return n
}

// TestTriggerPathsMatch: the PR webhook lists no files; the run's path check reads the PR's
// files through the app connector on a worker, src/app.txt matches, and the promotion runs to
// success with its usual prflow/<stage> statuses (none for the check itself).
func TestTriggerPathsMatch(t *testing.T) {
	t.Parallel()
	e, gh, pr, r := pathsPromotion(t, `["docs/**", "src/**"]`)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run: %s %s\n%s", r.Status, r.Error, e.Logs.String())
	}
	pc := r.Trigger.PathCheck
	if fmt.Sprint(r.Trigger.Paths) != "[docs/** src/**]" || pc == nil || pc.Status != pipelines.StSucceeded ||
		pc.Outputs["matched"] != true || fmt.Sprint(pc.Outputs["files"]) != "[src/app.txt]" {
		t.Fatalf("path check: paths %v, %+v", r.Trigger.Paths, pc)
	}
	for _, sr := range r.Stages {
		if sr.Status != pipelines.StSucceeded || sr.Started.Before(pc.Ended) {
			t.Errorf("stage %s: %s, started %v before the check ended %v", sr.ID, sr.Status, sr.Started, pc.Ended)
		}
	}
	if prs, _ := gh.PullRequests("acme", "release"); len(prs) != 2 {
		t.Errorf("%d release PRs, want 2 (dev, staging)", len(prs))
	}
	all := waitStatuses(t, gh.Forge, pr.MergeCommitSHA, map[string]string{"prflow/dev": "success", "prflow/staging": "success"})
	seen := map[string][]string{}
	for _, s := range all {
		seen[s.Context] = append(seen[s.Context], s.State)
	}
	if len(seen) != 2 || fmt.Sprint(seen["prflow/dev"]) != "[pending success]" || fmt.Sprint(seen["prflow/staging"]) != "[pending success]" {
		t.Errorf("statuses %v, want prflow/dev and prflow/staging [pending success]", seen)
	}
	if n := e.jobsOfType(steps.TypeTriggerPaths); n != 1 {
		t.Errorf("%d path check jobs, want 1", n)
	}
	e.noSecrets(hookSecret, scmtest.DefaultToken)
}

// TestTriggerPathsNoMatch: the PR changes no file under the trigger's paths; the run ends
// skipped with the reason, no stage ran, no release PR was opened and no commit status was set.
func TestTriggerPathsNoMatch(t *testing.T) {
	t.Parallel()
	e, gh, pr, r := pathsPromotion(t, `["services/web/**"]`)
	want := fmt.Sprintf("no changed file of PR #%d matches paths [services/web/**]", pr.Number)
	if r.Status != pipelines.StSkipped || r.Error != want {
		t.Fatalf("run: %s %q, want skipped %q\n%s", r.Status, r.Error, want, e.Logs.String())
	}
	if pc := r.Trigger.PathCheck; pc == nil || pc.Status != pipelines.StSucceeded || pc.Outputs["matched"] != false {
		t.Fatalf("path check %+v", pc)
	}
	for _, sr := range r.Stages {
		if sr.Status != pipelines.StSkipped || !sr.Started.IsZero() {
			t.Errorf("stage %s: %s (started %v)", sr.ID, sr.Status, sr.Started)
		}
		for _, st := range sr.Steps {
			if st.Status != pipelines.StSkipped || st.Attempt != 0 {
				t.Errorf("step %s/%s: %s attempt %d", sr.ID, st.ID, st.Status, st.Attempt)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // anything dispatched with the last update has had time to run
	if prs, _ := gh.PullRequests("acme", "release"); len(prs) != 0 {
		t.Errorf("%d release PRs opened by a skipped run", len(prs))
	}
	if st, _ := gh.Statuses("acme", "web", pr.MergeCommitSHA); len(st) != 0 {
		t.Errorf("commit statuses on a skipped run's commit: %+v", st)
	}
	if n := e.jobsOfType(steps.TypeCommitStatus); n != 0 {
		t.Errorf("%d commit status jobs for a skipped run", n)
	}
	if n := e.jobsOfType(steps.TypeTriggerPaths); n != 1 {
		t.Errorf("%d path check jobs, want 1", n)
	}
}
