package controller

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

func TestApprovalIdentityChecked(t *testing.T) {
	e := newEnv(t, envOpts{workers: 1})
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	_ = os.WriteFile(tokens, []byte(`tokens:
  - {user: alice, groups: [release], token: alice-token-1234}
  - {user: bob, groups: [release], token: bob-token-12345}
  - {user: mallory, groups: [dev], token: mallory-token-1}
  - {user: tester, groups: [release], token: tester-token-12}
`), 0o600)
	auth, err := LoadAuth(tokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.ctl.Handler(auth))
	defer srv.Close()
	src := `
name: gated
stages:
  - id: prod
    steps:
      - id: approve
        type: Approval
        timeout: 1m
        with:
          approvers: {users: [carol], groups: [release], minimumCount: 2, disallowPipelineExecutor: true}
          message: Promote to prod?
`
	r := e.startRun(src, nil) // started by "tester"
	deadline := time.Now().Add(20 * time.Second)
	for e.ctl.metrics.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("approval never parked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cur, _ := e.ctl.Get(t.Context(), r.ID)
	if w := cur.Stages[0].Steps[0].Wait; w == nil || !strings.Contains(w.Reason, "Promote to prod? — waiting for 2 more approval(s) from carol, group:release") {
		t.Fatalf("wait reason: %+v", w)
	}
	approve := func(token, comment string) {
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/runs/"+r.ID+"/signals",
			strings.NewReader(`{"stage":"prod","step":"approve","approve":true,"comment":"`+comment+`"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("approve: %v %v", err, resp.Status)
		}
		resp.Body.Close()
	}
	approve("mallory-token-1", "not my call")   // not an approver: ignored
	approve("tester-token-12", "my own change") // the executor: ignored
	approve("alice-token-1234", "lgtm")
	time.Sleep(300 * time.Millisecond)
	if cur, _ := e.ctl.Get(t.Context(), r.ID); cur.Status.Terminal() {
		t.Fatalf("finished with one valid approval: %s", cur.Status)
	}
	approve("bob-token-12345", "ship it")
	got := e.wait(r.ID, 20*time.Second)
	st := got.Stages[0].Steps[0]
	if got.Status != pipelines.StSucceeded {
		t.Fatalf("run: %s %s", got.Status, got.Error)
	}
	approvers, _ := st.Outputs["approvers"].([]any)
	if len(approvers) != 2 || approvers[0].(map[string]any)["user"] != "alice" || approvers[1].(map[string]any)["user"] != "bob" {
		t.Fatalf("approvers output: %#v", st.Outputs)
	}
}

func TestApprovalTimesOut(t *testing.T) {
	e := newEnv(t, envOpts{workers: 1})
	r := e.startRun("name: t\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Approval, timeout: 500ms, with: {approvers: [alice]}}\n", nil)
	got := e.wait(r.ID, 20*time.Second)
	if got.Status != pipelines.StFailed || !strings.Contains(got.Error, "approval timed out with 0 of 1 approvals") {
		t.Fatalf("%s %q", got.Status, got.Error)
	}
}
