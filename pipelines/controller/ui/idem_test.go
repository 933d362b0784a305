package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

var idemRE = regexp.MustCompile(`name="idem" value="([^"]+)"`)

// The run page's forms carry an idempotency key of their own, new with every rendering: the
// same form sent twice (a double click, the browser resending after a lost answer) decides or
// cancels once and answers the repeat as done; the key with another action is refused.
func TestFormsActOnce(t *testing.T) {
	e := newUIEnv(t, ctltest.Options{}, nil)
	e.RegisterAgent("sim")
	r := e.Start(approvalPipeline, nil)
	waitParked(t, e, r.ID, "prod", "approve")
	c := client(t)
	runURL := e.URL + "/ui/runs/" + r.ID
	if code, _, _ := do(t, c, "POST", e.URL+"/ui/login", url.Values{"token": {aliceToken}}, nil); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
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
	r2 := e.Start(approvalPipeline, nil)
	waitParked(t, e, r2.ID, "prod", "approve")
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
