package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// TestUIAudit: a sign-in with an unknown token is an auth.failed entry; an action from a signed-in
// session (one that passed the CSRF and origin checks) is a token.used entry naming the user;
// pages and refused actions record nothing; no token reaches the audit stream.
func TestUIAudit(t *testing.T) {
	t.Parallel()
	e, r := newApprovalUIEnv(t, ctltest.Options{Audit: true})
	c := client(t)
	const wrong = "wrong-token-0123456789"
	if code, _, _ := do(t, c, "POST", e.URL+"/ui/login", url.Values{"token": {wrong}}, nil); code != http.StatusUnauthorized {
		t.Fatalf("sign-in with a wrong token: %d", code)
	}
	if code, _, _ := do(t, c, "POST", e.URL+"/ui/login", url.Values{"token": {aliceToken}}, nil); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", code)
	}
	runURL := e.URL + "/ui/runs/" + r.ID
	_, _, page := do(t, c, "GET", runURL, nil, nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the run page:\n%s", page)
	}
	if code, _, _ := do(t, c, "POST", runURL+"/cancel", url.Values{"csrf": {m[1] + "x"}}, nil); code != http.StatusForbidden {
		t.Fatalf("cancel with a wrong CSRF token: %d", code)
	}
	if code, _, _ := do(t, c, "POST", runURL+"/cancel", url.Values{"csrf": {m[1]}}, nil); code != http.StatusSeeOther {
		t.Fatalf("cancel: %d", code)
	}

	log := &audit.Log{JS: e.Conn.JS}
	ctx := context.Background()
	used, err := log.Query(ctx, audit.Filter{Actions: []string{audit.TokenUsed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != 1 || used[0].Actor != "alice" || used[0].Run != r.ID || used[0].Detail != "token of alice: POST /ui/runs/"+r.ID+"/cancel" ||
		!strings.HasPrefix(used[0].Remote, "127.0.0.1:") {
		t.Errorf("token.used entries: %+v", used)
	}
	failed, err := log.Query(ctx, audit.Filter{Actions: []string{audit.AuthFailed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].Actor != controller.Unauthenticated || failed[0].Detail != "POST /ui/login: UI sign-in with an unknown token" {
		t.Errorf("auth.failed entries: %+v", failed)
	}
	all, err := log.Query(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range all {
		for _, tok := range []string{wrong, aliceToken} {
			if strings.Contains(en.Detail+en.Actor+en.Remote, tok) {
				t.Errorf("audit entry holds a token: %+v", en)
			}
		}
	}
}
