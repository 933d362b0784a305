package ui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// verify times out (a failed step): the stage waits for a decision by group release.
const interventionPipeline = `
name: verified
environments:
  - {name: prod, clusters: [{name: prod-eu, agent: sim}]}
stages:
  - id: prod
    environment: prod
    onFailure: {manual: {timeout: 2h, onTimeout: rollbackStage, approvers: ['group:release']}}
    steps:
      - {id: verify, type: Wait, timeout: 1s, with: {duration: 1h}}
      - {id: after, type: Noop}
    rollbackSteps:
      - {id: revert, type: Noop}
`

func waitIntervention(t *testing.T, e *uiEnv, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, err := e.Ctl.Get(context.Background(), id); err == nil && r.Find("prod").Intervention != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never waited for an intervention", id)
		}
	}
}

// TestBrowserInterventionCard: the run page leads with the intervention card (what failed,
// how long is left, what the timeout does, four buttons) at 400 and 1400 px; bob, outside the
// approvers, sees why he may not decide instead of buttons; alice rolls the stage back from
// the card, and the page records who did it.
func TestBrowserInterventionCard(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	e.RegisterAgent("sim")
	r := e.Start(interventionPipeline, nil)
	waitIntervention(t, e, r.ID)
	ctx := browser(t)
	url := e.URL + "/ui/runs/" + r.ID
	card := `[data-intervention="prod"]`

	signIn(t, ctx, url, bobToken)
	run(t, ctx, "bob's card", chromedp.WaitVisible(card, chromedp.ByQuery))
	if got := text(t, ctx, card); !strings.Contains(got, "bob is not among the approvers") || strings.Contains(got, "Retry") {
		t.Errorf("bob's card %q: want the reason and no buttons", got)
	}
	run(t, ctx, "sign out", chromedp.Navigate(e.URL+"/ui/login"))
	ctx = signedInTab(t, url, aliceToken)
	if got := text(t, ctx, `.runhead`); !strings.Contains(got, string(pipelines.StWaitingIntervention)) {
		t.Errorf("run head %q does not say it waits for an intervention", got)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"intervention-card-400", 400, 800}, {"intervention-card-1400", 1400, 900}} {
		run(t, ctx, "open "+size.name, chromedp.EmulateViewport(size.w, size.h), chromedp.Navigate(url),
			chromedp.WaitVisible(card+` button[value=retry]`, chromedp.ByQuery))
		got := text(t, ctx, card)
		for _, want := range []string{"verify failed in environment prod", "timed out", "left: at", "the stage rolls back", "Retry", "Ignore", "Roll back stage", "Abort"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: card %q lacks %q", size.name, got, want)
			}
		}
		var fits bool
		run(t, ctx, "buttons on screen", chromedp.Evaluate(`(function(){var b=document.querySelector('`+card+` button[value=abort]').getBoundingClientRect();
			return b.top>=0 && b.bottom<=window.innerHeight && b.right<=window.innerWidth && document.documentElement.scrollWidth<=window.innerWidth})()`, &fits))
		if !fits {
			t.Errorf("%s: the buttons are not all on the first screen (or the page scrolls sideways)", size.name)
		}
		shot(t, ctx, size.name)
	}
	run(t, ctx, "reset viewport", chromedp.EmulateViewport(1400, 900))
	run(t, ctx, "roll back", chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery),
		chromedp.SendKeys(card+` input[name=comment]`, "error rate too high", chromedp.ByQuery),
		chromedp.Click(card+` button[value=rollback]`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	if got := text(t, ctx, `#flash`); got != "prod.verify rolled back by alice" {
		t.Errorf("flash %q", got)
	}
	final := e.Wait(r.ID, 30*time.Second)
	if final.Status != pipelines.StFailed || ctltest.Step(final, "prod", "revert").Status != pipelines.StSucceeded {
		t.Fatalf("run %s %q", final.Status, final.Error)
	}
	run(t, ctx, "page shows it", chromedp.WaitVisible(`.runhead .st-failed`, chromedp.ByQuery))
	if got := text(t, ctx, `[data-stage="prod"] .intervened`); !strings.Contains(got, "verify: rolled back by alice") || !strings.Contains(got, "error rate too high") {
		t.Errorf("decision line %q", got)
	}
	shot(t, ctx, "intervention-decided")
}
