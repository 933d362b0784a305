package ui_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// twoEnvPipeline is promoteEnvs through dev and staging with an approval by group release
// (step gate) before staging's change.
var twoEnvPipeline = strings.Replace(promoteEnvs("promote-two", "dev", "staging"), "    environment: staging\n    steps:\n",
	"    environment: staging\n    steps:\n      - {id: gate, type: Approval, timeout: 5m, with: {approvers: {groups: [release], minimumCount: 1}}}\n", 1)

// TestEnvironmentsView: each environment's card shows the value and merge commit of the
// newest run that merged a change of it, and that run; a stage that merged nothing (its
// approval rejected) does not count.
func TestEnvironmentsView(t *testing.T) {
	t.Parallel()
	e, _, _ := newReleaseUIEnv(t)
	e.RegisterAgent("sim")
	alice := controller.User{Name: "alice", Groups: []string{"release"}}
	decide := func(id string, approve bool) {
		t.Helper()
		waitParked(t, e, id, "staging", "gate")
		if err := e.Ctl.Decide(context.Background(), id, controller.SignalRequest{Stage: "staging", Step: "gate", Approve: approve}, alice); err != nil {
			t.Fatal(err)
		}
	}
	// Run 1 puts 1.0 on both; run 2 puts 2.0 on dev and is rejected before staging.
	r1 := e.Start(twoEnvPipeline, map[string]any{"tag": "1.0"})
	decide(r1.ID, true)
	if f := e.Wait(r1.ID, 60*time.Second); f.Status != pipelines.StSucceeded {
		t.Fatalf("run 1: %s %s", f.Status, f.Error)
	}
	r2 := e.Start(twoEnvPipeline, map[string]any{"tag": "2.0"})
	decide(r2.ID, false)
	f2 := e.Wait(r2.ID, 60*time.Second)
	if f2.Status != pipelines.StFailed {
		t.Fatalf("run 2: %s, want failed (staging rejected)", f2.Status)
	}
	final1, _ := e.Ctl.Get(context.Background(), r1.ID)
	stagingCommit, _ := ctltest.Step(final1, "staging", "merge").Outputs["commitId"].(string)
	devCommit, _ := ctltest.Step(f2, "dev", "merge").Outputs["commitId"].(string)
	if stagingCommit == "" || devCommit == "" {
		t.Fatal("merge steps report no commitId")
	}

	c := signedIn(t, e, bobToken)
	// The model follows the runs' records as they are written (coalesced): wait until the
	// page shows run 2 in dev.
	page := waitPage(t, c, e.URL+"/ui/environments", func(p string) bool { return strings.Contains(p, `by run <a href="/ui/runs/`+r2.ID+`"`) })
	row := func(env string) string {
		m := regexp.MustCompile(`(?s)<article class="env[^"]*" id="env-` + env + `" data-env="` + env + `".*?</article>`).FindString(page)
		if m == "" {
			t.Fatalf("no card for %s:\n%s", env, page)
		}
		return m
	}
	for _, tc := range []struct{ env, value, commit, run string }{
		{"dev", `<code data-value="image.tag">2.0</code>`, devCommit, r2.ID},
		{"staging", `<code data-value="image.tag">1.0</code>`, stagingCommit, r1.ID},
	} {
		got := row(tc.env)
		for _, want := range []string{tc.value, `data-commit="` + tc.commit + `"`, `by run <a href="/ui/runs/` + tc.run + `"`, "<code>envs/" + tc.env + "/config.json</code>"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s card lacks %s:\n%s", tc.env, want, got)
			}
		}
	}
	// Both environments belong to one promotion: one group, dev before staging.
	if n := strings.Count(page, `<section class="envgroup"`); n != 1 || strings.Index(page, `data-env="dev"`) > strings.Index(page, `data-env="staging"`) {
		t.Errorf("%d groups, or staging before dev:\n%s", n, page)
	}
}

// waitPage gets url until ok accepts the page (models behind the pages are built as records
// are written, so a page can lag a moment behind a run that just ended); it fails the test
// with the last page after 20 s or on a status other than 200.
func waitPage(t *testing.T, c *http.Client, url string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, page := do(t, c, "GET", url, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", url, code, page)
		}
		if ok(page) {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: the page never showed what the test waits for:\n%s", url, page)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
