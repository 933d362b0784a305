package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

const eventsHookSecret = "ui-hook-secret-0123456789"

const labelTrigger = `name: labels
inputs:
  label: {type: string, required: true}
triggers:
  - name: first-label
    pullRequest:
      repo: acme/web
      actions: [opened]
    inputs:
      label: ${{ event.pr.labels[0] }}
stages:
  - id: build
    steps:
      - {id: say, type: Noop, with: {outputs: {label: "${{ inputs.label }}"}}}
`

// postOpened sends a signed GitHub "PR opened" webhook for a PR without labels.
func postOpened(t *testing.T, e *uiEnv) string {
	t.Helper()
	pr := scmtest.PullRequest{Number: 5, Title: "t", Head: "feat", Base: "main", HeadSHA: strings.Repeat("b", 40), State: scmtest.PROpen}
	req, err := scmtest.GitHubWebhookRequest(context.Background(), e.URL+"/hooks/github", eventsHookSecret,
		scmtest.PREvent{Action: "opened", Owner: "acme", Name: "web", PR: pr, Sender: "octocat"})
	if err != nil {
		t.Fatal(err)
	}
	delivery := req.Header.Get("X-GitHub-Delivery")
	if code, b := ctltest.Send(t, req); code != http.StatusAccepted {
		t.Fatalf("webhook: HTTP %d %s", code, b)
	}
	return delivery
}

// TestBrowserEventListShowsTriggerFailure: a webhook whose trigger's input expression fails
// starts no run; the Events page lists the event, marked "trigger failed", with the error
// (pipeline, trigger, file:line, what failed).
func TestBrowserEventListShowsTriggerFailure(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{Audit: true}, nil)
	e.Ctl.SetWebhooks(controller.NewWebhooks(0, map[string]string{"github": eventsHookSecret}))
	ts, err := controller.NewTriggerSet(steps.Default, map[string][]byte{"labels.yaml": []byte(labelTrigger)})
	if err != nil {
		t.Fatal(err)
	}
	e.Ctl.SetTriggers(ts)
	delivery := postOpened(t, e)
	log := &audit.Log{JS: e.Conn.JS}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, _ := log.Query(context.Background(), audit.Filter{Actions: []string{audit.WebhookAccepted}}); len(got) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the event was never recorded")
		}
	}
	ctx := signedInTab(t, e.URL+"/ui/events", bobToken)
	row := `#events tr[data-delivery="` + delivery + `"]`
	run(t, ctx, "event row", chromedp.WaitVisible(row, chromedp.ByQuery))
	if got := text(t, ctx, row+` td:nth-child(2)`); got != "trigger failed" {
		t.Errorf("outcome cell %q", got)
	}
	want := "pipeline labels trigger first-label started no run: labels.yaml:10: triggers[0].inputs.label: ${{ event.pr.labels[0] }} (offset 0): event.pr.labels[0]: index 0 out of range (length 0)"
	if got := text(t, ctx, row+` .trigger-error`); got != want {
		t.Errorf("error shown %q\nwant %q", got, want)
	}
	if got := text(t, ctx, row+` td:nth-child(6)`); got != "none" {
		t.Errorf("runs cell %q, want none", got)
	}
	if got := text(t, ctx, `header.top nav a.on`); got != "Events" {
		t.Errorf("nav %q", got)
	}
	shot(t, ctx, "events")
}

// TestEventsPageWithoutAudit: without an audit log the page says events are not recorded,
// instead of an empty list that looks like "no events".
func TestEventsPageWithoutAudit(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	c := signedIn(t, e, bobToken)
	code, _, page := do(t, c, "GET", e.URL+"/ui/events", nil, nil)
	if code != http.StatusOK || !strings.Contains(page, "the audit log is off on this server: webhook events are not recorded") ||
		strings.Contains(page, "No webhook event recorded yet") {
		t.Errorf("HTTP %d:\n%s", code, page)
	}
}
