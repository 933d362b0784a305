package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// pullRequest is what the GitHub fake lists of a PR.
type pullRequest struct {
	Number int     `json:"number"`
	State  string  `json:"state"`
	Merged *string `json:"merged_at"`
	Head   struct {
		Ref string `json:"ref"`
	} `json:"head"`
}

// pulls lists every PR of acme/release on the GitHub fake, through its REST API.
func pulls(t *testing.T, gh *scmtest.GitHub) []pullRequest {
	t.Helper()
	req, _ := http.NewRequest("GET", gh.APIURL()+"repos/acme/release/pulls?state=all&per_page=100", nil)
	req.Header.Set("Authorization", "token "+scmtest.DefaultToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []pullRequest
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("list pulls: %v", err)
	}
	return out
}

// setValue sets a form field's value in the page.
func setValue(sel, v string) chromedp.Action {
	q, _ := json.Marshal(sel)
	val, _ := json.Marshal(v)
	return chromedp.Evaluate(`document.querySelector(`+string(q)+`).value = `+string(val), nil)
}

// actionViewport sets the tab's width (the page reflows as on a phone at 400).
func actionViewport(w int64) chromedp.Action { return chromedp.EmulateViewport(w, 900) }

// TestBrowserRetryFromFailedStage: a run whose staging approval was rejected shows "Retry from
// failed stage"; clicking it starts a new run in which dev is carried over — no second PR or
// merge for dev on the forge — and staging runs again: approved from the page, it opens and
// merges its PR, and the retry succeeds. The new run's page says what it retries and which
// stage it carried.
func TestBrowserRetryFromFailedStage(t *testing.T) {
	t.Parallel()
	e, gh, _ := newReleaseUIEnv(t)
	e.RegisterAgent("sim")
	first := e.Start(twoEnvPipeline, map[string]any{"tag": "3.1"})
	waitParked(t, e, first.ID, "staging", "gate")
	if err := e.Ctl.Decide(context.Background(), first.ID, controller.SignalRequest{Stage: "staging", Step: "gate", Approve: false, Comment: "not yet"},
		controller.User{Name: "alice", Groups: []string{"release"}}); err != nil {
		t.Fatal(err)
	}
	failed := e.Wait(first.ID, time.Minute)
	if failed.Status != pipelines.StFailed {
		t.Fatalf("first run %s, want failed (staging rejected)", failed.Status)
	}
	if prs := pulls(t, gh); len(prs) != 1 {
		t.Fatalf("first run opened %d PRs, want dev's only: %+v", len(prs), prs)
	}

	ctx := signedInTab(t, e.URL+"/ui/runs/"+first.ID, aliceToken)
	run(t, ctx, "buttons", chromedp.WaitVisible(`#retry button`, chromedp.ByQuery), chromedp.WaitVisible(`#rerun button`, chromedp.ByQuery))
	shot(t, ctx, "actions-failed-run")
	run(t, ctx, "retry", chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery), chromedp.Click(`#retry button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByID), chromedp.WaitVisible(`#origin`, chromedp.ByID))
	var loc string
	run(t, ctx, "location", chromedp.Location(&loc))
	retryID := strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], e.URL+"/ui/runs/")
	if retryID == first.ID || !strings.HasPrefix(retryID, "r") {
		t.Fatalf("after retry at %s", loc)
	}
	if got := text(t, ctx, `#flash`); got != "retry of "+first.ID+" started by alice" {
		t.Errorf("flash %q", got)
	}
	if got := text(t, ctx, `#origin`); got != "retry of "+first.ID+" from its failed stage" {
		t.Errorf("origin %q", got)
	}
	if got := text(t, ctx, `p.carried[data-carried="dev"]`); !strings.Contains(got, "stage dev carried over from "+first.ID+": not run again") {
		t.Errorf("carried note %q", got)
	}

	// Staging waits for its approval again; alice approves it on the page.
	waitParked(t, e, retryID, "staging", "gate")
	form := `[data-approval="staging.gate"] form.decide`
	run(t, ctx, "approve", chromedp.WaitVisible(form, chromedp.ByQuery))
	shot(t, ctx, "actions-retry-waiting")
	run(t, ctx, "approve click", chromedp.Click(form+` button.approve`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	done := e.Wait(retryID, time.Minute)
	if done.Status != pipelines.StSucceeded || done.RetryOf != first.ID {
		t.Fatalf("retry %s (%s), retryOf %q", done.Status, done.Error, done.RetryOf)
	}
	// dev: carried, its merge commit the first run's; no second PR or merge for it.
	if d, f := ctltest.Step(done, "dev", "merge"), ctltest.Step(failed, "dev", "merge"); done.Find("dev").CarriedFrom != first.ID ||
		d.Outputs["commitId"] != f.Outputs["commitId"] || !d.Started.Equal(f.Started) {
		t.Fatalf("dev in the retry: carried from %q, merge %v (first run's %v)", done.Find("dev").CarriedFrom, d.Outputs["commitId"], f.Outputs["commitId"])
	}
	prs := pulls(t, gh)
	if len(prs) != 2 {
		t.Fatalf("%d PRs after the retry, want 2 (dev's from the first run, staging's from the retry): %+v", len(prs), prs)
	}
	for _, pr := range prs {
		if pr.Merged == nil {
			t.Errorf("PR #%d (%s) not merged", pr.Number, pr.Head.Ref)
		}
	}
	run(t, ctx, "succeeded", chromedp.WaitVisible(`.runhead .st-succeeded`, chromedp.ByQuery))
	shot(t, ctx, "actions-retry-succeeded")
	run(t, ctx, "phone", actionViewport(400), chromedp.Reload(), chromedp.WaitVisible(`#origin`, chromedp.ByID))
	shot(t, ctx, "actions-retry-succeeded-400")
	run(t, ctx, "desktop", actionViewport(1400))
	// A run that succeeded offers a re-run, not a retry.
	var retries int
	run(t, ctx, "no retry", chromedp.WaitVisible(`#rerun button`, chromedp.ByQuery), chromedp.Evaluate(`document.querySelectorAll('#retry').length`, &retries))
	if retries != 0 {
		t.Error("a run that succeeded offers a retry from its failed stage")
	}
}

// TestBrowserRerun: a finished run's Re-run button starts a new run of the same pipeline and
// inputs, every stage, whose page names the run it re-runs.
func TestBrowserRerun(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	src := "name: again\ninputs: {tag: {type: string, required: true}}\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop, with: {outputs: {tag: \"${{ inputs.tag }}\"}}}\n"
	first := e.Wait(e.Start(src, map[string]any{"tag": "7.7"}).ID, 20*time.Second)
	ctx := signedInTab(t, e.URL+"/ui/runs/"+first.ID, bobToken)
	run(t, ctx, "rerun", chromedp.WaitVisible(`#rerun button`, chromedp.ByQuery), chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery),
		chromedp.Click(`#rerun button`, chromedp.ByQuery), chromedp.WaitVisible(`#origin`, chromedp.ByID))
	if got := text(t, ctx, `#origin`); got != "re-run of "+first.ID+" (same pipeline source and inputs)" {
		t.Errorf("origin %q", got)
	}
	var loc string
	run(t, ctx, "location", chromedp.Location(&loc))
	id := strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], e.URL+"/ui/runs/")
	r := e.Wait(id, 20*time.Second)
	if r.RerunOf != first.ID || r.Executor != "bob" || r.Status != pipelines.StSucceeded || ctltest.Step(r, "s", "a").Outputs["tag"] != "7.7" {
		t.Fatalf("rerun %s: rerunOf %q executor %s outputs %v", r.Status, r.RerunOf, r.Executor, ctltest.Step(r, "s", "a").Outputs)
	}
	shot(t, ctx, "actions-rerun")
}

const promoteFormPipeline = `
name: release
description: Promote an image tag through dev and prod
inputs:
  tag: {type: string, required: true, description: the image tag to deploy}
  replicas: {type: number, default: 2, description: pods per cluster}
  canary: {type: boolean, default: false}
  region: {type: string, default: eu, allowed: [eu, us]}
environments:
  - {name: dev}
  - {name: prod}
triggers:
  - name: release
    push: {branches: ["release/*"]}
    inputs: {tag: "${{ event.after }}"}
stages:
  - id: dev
    environment: dev
    steps: [{id: s, type: Noop, with: {outputs: {tag: "${{ inputs.tag }}"}}}]
  - id: prod
    environment: prod
    steps: [{id: s, type: Noop}]
`

// promoteEnv is a UI whose server loaded the release pipeline, with a run policy that refuses
// the tag "latest".
func promoteEnv(t *testing.T) *uiEnv {
	t.Helper()
	dir := t.TempDir()
	rule := "package prflow.run\n\ndeny contains \"inputs.tag: latest is not a release tag\" if input.inputs.tag == \"latest\"\n"
	if err := os.WriteFile(filepath.Join(dir, "run.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	e := newUIEnv(t, ctltest.Options{Controller: []controller.Option{controller.WithPolicy(set)}, Audit: true}, nil)
	ts, err := controller.NewTriggerSet(steps.Default, map[string][]byte{"release.yaml": []byte(promoteFormPipeline)})
	if err != nil {
		t.Fatal(err)
	}
	e.Ctl.SetTriggers(ts)
	return e
}

// TestBrowserPromoteForm: /ui/promote?pipeline=release&env=prod&in.tag=… shows a form generated
// from the pipeline's typed inputs (required mark, defaults, an enum as a select, a checkbox,
// descriptions as help), prefilled from the query. A policy denial naming an input is shown
// next to that field with what was typed kept; a missing required input too; a valid form
// starts the run with the typed inputs and lands on its page.
func TestBrowserPromoteForm(t *testing.T) {
	t.Parallel()
	e := promoteEnv(t)
	ctx := signedInTab(t, e.URL+"/ui/promote?pipeline=release&env=prod&in.tag=1.4.2", aliceToken)
	var tag, replicas, region string
	var canary bool
	run(t, ctx, "form", chromedp.WaitVisible(`#promote`, chromedp.ByID),
		chromedp.Value(`[data-input="tag"] input`, &tag, chromedp.ByQuery), chromedp.Value(`[data-input="replicas"] input`, &replicas, chromedp.ByQuery),
		chromedp.Value(`[data-input="region"] select`, &region, chromedp.ByQuery), chromedp.Evaluate(`document.querySelector('[data-input="canary"] input').checked`, &canary))
	if tag != "1.4.2" || replicas != "2" || region != "eu" || canary {
		t.Fatalf("prefill and defaults: tag %q replicas %q region %q canary %v", tag, replicas, region, canary)
	}
	if got := text(t, ctx, `h1`); got != "Promote with release to prod" {
		t.Errorf("heading %q", got)
	}
	if got := text(t, ctx, `[data-input="tag"]`); !strings.Contains(got, "tag *") || !strings.Contains(got, "the image tag to deploy") {
		t.Errorf("tag field %q: want the required mark and the description", got)
	}
	var options string
	run(t, ctx, "options", chromedp.Evaluate(`Array.from(document.querySelectorAll('[data-input="region"] option')).map(o => o.value).join(",")`, &options))
	if options != "eu,us" {
		t.Errorf("region options %q", options)
	}
	shot(t, ctx, "promote-form")

	// Denied by policy: the reason next to tag, what was typed kept.
	run(t, ctx, "deny", setValue(`[data-input="tag"] input`, "latest"), setValue(`[data-input="replicas"] input`, "5"),
		chromedp.Click(`#start`, chromedp.ByID), chromedp.WaitVisible(`[data-input="tag"] .field-error`, chromedp.ByQuery))
	if got := text(t, ctx, `[data-input="tag"] .field-error`); !strings.Contains(got, "latest is not a release tag") {
		t.Errorf("tag error %q", got)
	}
	run(t, ctx, "kept", chromedp.Value(`[data-input="replicas"] input`, &replicas, chromedp.ByQuery))
	if replicas != "5" {
		t.Errorf("replicas after the refusal %q, want what was typed", replicas)
	}
	shot(t, ctx, "promote-denied")
	// A required input left empty and a number that is none: each said next to its field.
	run(t, ctx, "required", setValue(`[data-input="tag"] input`, ""), setValue(`[data-input="replicas"] input`, "three"),
		chromedp.Click(`#start`, chromedp.ByID), chromedp.WaitVisible(`[data-input="replicas"] .field-error`, chromedp.ByQuery))
	if got := text(t, ctx, `[data-input="tag"] .field-error`); got != `input "tag" is required` {
		t.Errorf("tag error %q", got)
	}
	if got := text(t, ctx, `[data-input="replicas"] .field-error`); got != `input "replicas": want a number, got "three"` {
		t.Errorf("replicas error %q", got)
	}
	run(t, ctx, "phone", actionViewport(400))
	shot(t, ctx, "promote-errors-400")
	run(t, ctx, "desktop", actionViewport(1400))

	run(t, ctx, "start", setValue(`[data-input="tag"] input`, "1.5.0"), setValue(`[data-input="replicas"] input`, "3"),
		setValue(`[data-input="region"] select`, "us"), chromedp.Click(`[data-input="canary"] input`, chromedp.ByQuery),
		chromedp.Click(`#start`, chromedp.ByID), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	var loc string
	run(t, ctx, "location", chromedp.Location(&loc))
	id := strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], e.URL+"/ui/runs/")
	r := e.Wait(id, 20*time.Second)
	if r.Pipeline != "release" || r.Status != pipelines.StSucceeded || r.Executor != "alice" ||
		r.Inputs["tag"] != "1.5.0" || r.Inputs["replicas"] != float64(3) || r.Inputs["canary"] != true || r.Inputs["region"] != "us" {
		t.Fatalf("promoted run %s %s by %s, inputs %#v", r.Pipeline, r.Status, r.Executor, r.Inputs)
	}
	shot(t, ctx, "promote-started")
	if got := text(t, ctx, `#flash`); got != "started by alice from the promote form" {
		t.Errorf("flash %q", got)
	}
}

// TestPromoteAndActionsRefused: the UI's action routes refuse what the API refuses, with the
// reason: no CSRF token, another site, an unknown pipeline or run, a run still going, a retry
// of a run that succeeded; a promote form sent twice (same key) starts one run.
func TestPromoteAndActionsRefused(t *testing.T) {
	t.Parallel()
	e := promoteEnv(t)
	parked := e.Start("name: parked\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Approval, timeout: 5m, with: {approvers: {users: [alice]}}}\n", nil)
	ok := e.Wait(e.Start("name: quick\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n", nil).ID, 20*time.Second)
	c := signedIn(t, e, aliceToken)
	_, _, page := do(t, c, "GET", e.URL+"/ui/promote?pipeline=release", nil, nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the promote page:\n%s", page)
	}
	csrf := m[1]
	form := url.Values{"csrf": {csrf}, "pipeline": {"release"}, "in.tag": {"2.0"}, "idem": {"form-key-1"}}
	for _, tc := range []struct {
		name, path string
		form       url.Values
		hdr        map[string]string
		code       int
		want       string
	}{
		{"no csrf", "/ui/promote", url.Values{"pipeline": {"release"}, "in.tag": {"2.0"}}, nil, 403, "CSRF token does not match"},
		{"another site", "/ui/promote", form, map[string]string{"Origin": "https://evil.example"}, 403, "cross-site request refused"},
		{"unknown pipeline", "/ui/promote", url.Values{"csrf": {csrf}, "pipeline": {"nope"}}, nil, 404, "no pipeline &#34;nope&#34;"},
		{"unknown input", "/ui/promote", url.Values{"csrf": {csrf}, "pipeline": {"release"}, "in.tag": {"1"}, "in.<script>": {"x"}}, nil, 422, "unknown input &#34;&lt;script&gt;&#34;"},
		{"rerun unknown run", "/ui/runs/rnope/rerun", url.Values{"csrf": {csrf}}, nil, 404, "run not found: rnope"},
		{"retry a waiting run", "/ui/runs/" + parked.ID + "/retry", url.Values{"csrf": {csrf}}, nil, 409, "wait for it to end or cancel it first"},
		{"retry a run that succeeded", "/ui/runs/" + ok.ID + "/retry", url.Values{"csrf": {csrf}}, nil, 409, "there is no failed stage to retry from"},
	} {
		code, _, body := do(t, c, "POST", e.URL+tc.path, tc.form, tc.hdr)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want %d with %q:\n%.2000s", tc.name, code, tc.code, tc.want, body)
		}
	}
	before, _ := e.Ctl.List(context.Background(), 0)
	var ids []string
	for range 2 {
		code, hdr, body := do(t, c, "POST", e.URL+"/ui/promote", form, nil)
		if code != http.StatusSeeOther {
			t.Fatalf("promote: %d %s", code, body)
		}
		ids = append(ids, hdr.Get("Location"))
	}
	after, _ := e.Ctl.List(context.Background(), 0)
	if len(after) != len(before)+1 || strings.SplitN(ids[0], "?", 2)[0] != strings.SplitN(ids[1], "?", 2)[0] || !strings.Contains(ids[1], "sent+before") {
		t.Fatalf("one form sent twice: %d runs (were %d), redirects %v", len(after), len(before), ids)
	}
}
