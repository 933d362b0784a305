package ui_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// promotePipeline opens a (recorded) release-repo PR, then waits for an approval: the Noop's
// outputs have the shape UpdateReleaseRepo's have (edits, prlink, prNumber).
var promotePipeline = prodPipeline("promote", `
      - id: update
        type: Noop
        with:
          outputs:
            prNumber: 7
            prlink: "https://forge.example/acme/release/pull/7"
            edits:
              - file: envs/prod/values.yaml
                changes:
                  - {key: image.tag, value: "1.4.2"}
                  - {key: replicas, value: 3}
      - id: approve
        type: Approval
        timeout: 5m
        with:
          approvers: {groups: [release], minimumCount: 1}
          message: Promote 1.4.2 to prod?
`)

var rowRE = regexp.MustCompile(`data-run="([^"]+)"`)

func listed(t *testing.T, c *http.Client, u string) []string {
	t.Helper()
	code, _, page := do(t, c, "GET", u, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%.2000s", u, code, page)
	}
	var ids []string
	for _, m := range rowRE.FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestRunsFilterWaiting: the runs page's "waiting" filter finds every run with a parked step
// (before, it compared the run's own status, which is never "waiting", and found nothing),
// "waitingApproval" only the run waiting for a person, and the unfiltered list puts that run
// first, above newer ones.
func TestRunsFilterWaiting(t *testing.T) {
	t.Parallel()
	e, srv := newAnonUI(t, "dev")
	e.RegisterAgent("sim")
	gated := startParked(t, &uiEnv{Env: e}, promotePipeline, "prod", "approve")
	for time.Now().Unix() <= gated.Created.Unix() { // later runs get ids that sort after it
		time.Sleep(50 * time.Millisecond)
	}
	soak := startParked(t, &uiEnv{Env: e}, "name: soak\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10m}}\n", "s", "w")
	done := e.Start("name: quick\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n", nil)
	e.Wait(done.ID, 20*time.Second)
	c := client(t)

	if got := listed(t, c, srv.URL+"/ui/"); strings.Join(got, " ") != strings.Join([]string{gated.ID, done.ID, soak.ID}, " ") {
		t.Errorf("runs list order %v: want the approval first, then newest first", got)
	}
	if got := listed(t, c, srv.URL+"/ui/?status=waiting"); strings.Join(got, " ") != gated.ID+" "+soak.ID {
		t.Errorf("status=waiting lists %v, want %s and %s", got, gated.ID, soak.ID)
	}
	if got := listed(t, c, srv.URL+"/ui/?status=waitingApproval"); strings.Join(got, " ") != gated.ID {
		t.Errorf("status=waitingApproval lists %v, want only %s", got, gated.ID)
	}
	_, _, page := do(t, c, "GET", srv.URL+"/ui/", nil, nil)
	if !strings.Contains(page, `<span class="st st-waitingApproval">waitingApproval</span>`) {
		t.Errorf("the approval's row does not show waitingApproval")
	}
	if code, _, body := do(t, c, "GET", srv.URL+"/ui/?status=waitingapproval", nil, nil); code != http.StatusBadRequest || !strings.Contains(body, "waitingApproval") {
		t.Errorf("misspelt filter: %d %.300s", code, body)
	}
}

// TestBrowserApprovalCard: the run page of a run waiting for an approval opens with a card
// that says what is approved (environment, file, key → new value), links the PR, and has the
// Approve button on the first screen of a 400×800 phone as of a 1400×900 desktop; the runs
// page's waitingApproval filter lists the run.
func TestBrowserApprovalCard(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	e.RegisterAgent("sim")
	r := startParked(t, e, promotePipeline, "prod", "approve")
	ctx := signedInTab(t, e.URL+"/ui/?status=waitingApproval", aliceToken)
	row := `tr[data-run="` + r.ID + `"]`
	run(t, ctx, "filtered row", chromedp.WaitVisible(row, chromedp.ByQuery))
	if got := text(t, ctx, row+` .st`); got != "waitingApproval" {
		t.Errorf("status cell %q", got)
	}
	card := `[data-approval="prod.approve"]`
	for _, size := range []struct {
		name string
		w, h int64
	}{{"approval-card-400", 400, 800}, {"approval-card-1400", 1400, 900}} {
		run(t, ctx, "open "+size.name, chromedp.EmulateViewport(size.w, size.h), chromedp.Navigate(e.URL+"/ui/runs/"+r.ID),
			chromedp.WaitVisible(card+` button.approve`, chromedp.ByQuery))
		got := text(t, ctx, card)
		for _, want := range []string{"environment prod", "Promote 1.4.2 to prod?", "envs/prod/values.yaml", "image.tag", "→ 1.4.2", "replicas", "→ 3", "PR #7"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: card %q lacks %q", size.name, got, want)
			}
		}
		var href string
		run(t, ctx, "PR link", chromedp.AttributeValue(card+` .pr a`, "href", &href, nil, chromedp.ByQuery))
		if href != "https://forge.example/acme/release/pull/7" {
			t.Errorf("PR link %q", href)
		}
		// The Approve button lies wholly inside the first screen, and nothing is wider than it.
		var fits bool
		run(t, ctx, "button position", chromedp.Evaluate(`(function(){var b=document.querySelector('`+card+` button.approve').getBoundingClientRect();
			return window.scrollY===0 && b.top>=0 && b.bottom<=window.innerHeight && b.right<=window.innerWidth &&
			document.documentElement.scrollWidth<=window.innerWidth})()`, &fits))
		if !fits {
			t.Errorf("%s: the Approve button is not on the first screen (or the page scrolls sideways)", size.name)
		}
		shot(t, ctx, size.name)
	}
	run(t, ctx, "reset viewport", chromedp.EmulateViewport(1400, 900))
}
