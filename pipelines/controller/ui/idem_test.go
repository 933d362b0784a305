package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

var idemRE = regexp.MustCompile(`name="idem" value="([^"]+)"`)

// The run page's forms carry an idempotency key of their own, new with every rendering: the
// same form sent twice (a double click, the browser resending after a lost answer) decides or
// cancels once and answers the repeat as done; the key with another action is refused.
func TestFormsActOnce(t *testing.T) {
	t.Parallel()
	e, r := newApprovalUIEnv(t, ctltest.Options{})
	c := signedIn(t, e, aliceToken)
	runURL := e.URL + "/ui/runs/" + r.ID
	_, _, page := do(t, c, "GET", runURL, nil, nil)
	keys := idemRE.FindAllStringSubmatch(page, -1)
	if len(keys) != 2 || keys[0][1] == keys[1][1] {
		t.Fatalf("want a key of its own in the cancel and the decide form, got %q", keys)
	}
	_, _, again := do(t, c, "GET", runURL, nil, nil)
	if k := idemRE.FindAllStringSubmatch(again, -1); len(k) != 2 || k[0][1] == keys[0][1] || k[1][1] == keys[1][1] {
		t.Fatalf("a new rendering reuses keys: %q then %q", keys, k)
	}
	csrf := csrfRE.FindStringSubmatch(page)[1]
	decideKey := idemRE.FindAllStringSubmatch(page, -1)[1][1]
	form := url.Values{"csrf": {csrf}, "idem": {decideKey}, "stage": {"prod"}, "step": {"approve"}, "decision": {"approve"}, "comment": {"ship it"}}
	code, h, body := do(t, c, "POST", runURL+"/decide", form, nil)
	if code != http.StatusSeeOther || strings.Contains(h.Get("Location"), "sent+before") {
		t.Fatalf("decide: %d %s %s", code, h.Get("Location"), body)
	}
	final := e.Wait(r.ID, 30*time.Second)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", final.Status, final.Error)
	}
	// Sent again after the step ended: without the key this would be refused ("already
	// succeeded"); with it the answer is the first one's.
	code, h, body = do(t, c, "POST", runURL+"/decide", form, nil)
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "approved+by+alice+%28this+form+was+sent+before") {
		t.Fatalf("decide again: %d %s %s", code, h.Get("Location"), body)
	}
	if cur, _ := e.Ctl.Get(context.Background(), r.ID); len(ctltest.Step(cur, "prod", "approve").Signals) != 1 {
		t.Fatalf("signals: %+v", ctltest.Step(cur, "prod", "approve").Signals)
	}
	form.Set("decision", "reject")
	if code, _, body := do(t, c, "POST", runURL+"/decide", form, nil); code != http.StatusUnprocessableEntity || !strings.Contains(body, "another action") {
		t.Errorf("the key with another decision: %d %s", code, body)
	}
	form.Set("idem", "bad key!")
	if code, _, body := do(t, c, "POST", runURL+"/decide", form, nil); code != http.StatusBadRequest || !strings.Contains(body, "Idempotency-Key header has") {
		t.Errorf("a bad key: %d %s", code, body)
	}

	// Cancel: the same form twice cancels once, and says so.
	r2 := startParked(t, e, approvalPipeline, "prod", "approve")
	_, _, page = do(t, c, "GET", e.URL+"/ui/runs/"+r2.ID, nil, nil)
	cancelForm := url.Values{"csrf": {csrf}, "idem": {idemRE.FindStringSubmatch(page)[1]}}
	for i, want := range []string{"cancel+requested+by+alice", "cancel+requested+by+alice+%28this+form+was+sent+before"} {
		if i == 1 {
			if final := e.Wait(r2.ID, 30*time.Second); final.Status != pipelines.StCancelled {
				t.Fatalf("after cancel the run is %s", final.Status)
			}
		}
		code, h, body := do(t, c, "POST", e.URL+"/ui/runs/"+r2.ID+"/cancel", cancelForm, nil)
		if code != http.StatusSeeOther || !strings.HasSuffix(strings.SplitN(h.Get("Location"), "%3A", 2)[0], want) {
			t.Fatalf("cancel %d: %d %s %s", i+1, code, h.Get("Location"), body)
		}
	}
}

// In a real browser: the approval form sends its idempotency key, and the browser sending the
// same form again after the step was approved (as a resend after a lost answer does) gets the
// first answer back instead of a refusal or a second decision.
func TestBrowserFormResentActsOnce(t *testing.T) {
	t.Parallel()
	e, r := newApprovalUIEnv(t, ctltest.Options{})
	ctx := signedInTab(t, e.URL+"/ui/runs/"+r.ID, aliceToken)
	form := `[data-approval="prod.approve"] form.decide`
	var key string
	// The form as the browser sends it, kept (across the page change) to send again.
	keep := `(function(){var f=document.querySelector('` + form + `');var d=new URLSearchParams(new FormData(f));d.set("decision","approve");` +
		`sessionStorage.setItem("sentForm",JSON.stringify({action:f.action,body:d.toString()}));return d.get("idem")||""})()`
	run(t, ctx, "approve", chromedp.WaitVisible(form, chromedp.ByQuery), chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery),
		chromedp.Evaluate(keep, &key), chromedp.Click(form+` button.approve`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	if !regexp.MustCompile(`^ui-[A-Za-z0-9_-]{24}$`).MatchString(key) {
		t.Fatalf("the form's idempotency key %q", key)
	}
	if got := text(t, ctx, `#flash`); got != "prod.approve approved by alice" {
		t.Errorf("flash %q", got)
	}
	if final := e.Wait(r.ID, 30*time.Second); final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s", final.Status)
	}
	var landed string
	resend := `(function(){var f=JSON.parse(sessionStorage.getItem("sentForm"));` +
		`return fetch(f.action,{method:"POST",body:f.body,headers:{"Content-Type":"application/x-www-form-urlencoded"}}).then(function(r){return r.status+" "+decodeURIComponent(r.url.replace(/\+/g," "))})})()`
	run(t, ctx, "resend", chromedp.Evaluate(resend, &landed, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if !strings.HasPrefix(landed, "200 ") || !strings.Contains(landed, "approved by alice (this form was sent before") {
		t.Fatalf("the form sent again landed on %q", landed)
	}
	if cur, _ := e.Ctl.Get(context.Background(), r.ID); len(ctltest.Step(cur, "prod", "approve").Signals) != 1 {
		t.Fatalf("signals: %+v", ctltest.Step(cur, "prod", "approve").Signals)
	}
}
