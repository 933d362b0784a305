package controller

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

func TestApprovalIdentityChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	// Tokens files hold references, never tokens: digests here.
	srv := e.serve(tokensAuth(t, `tokens:
  - {user: alice, groups: [release], token: sha256:`+sha256hex("alice-token-1234")+`}
  - {user: bob, groups: [release], token: sha256:`+sha256hex("bob-token-12345")+`}
  - {user: mallory, groups: [dev], token: sha256:`+sha256hex("mallory-token-1")+`}
  - {user: tester, groups: [release], token: sha256:`+sha256hex("tester-token-12")+`}
`))
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
	approveAs := func(token, comment string, want int, wantMsg string) {
		t.Helper()
		code, body := callAPI(t, "POST", srv.URL+"/api/v1/runs/"+r.ID+"/signals", token,
			`{"stage":"prod","step":"approve","approve":true,"comment":"`+comment+`"}`)
		if code != want || !strings.Contains(body, wantMsg) {
			t.Fatalf("approve: got %d %s %s, want %d %q", code, http.StatusText(code), body, want, wantMsg)
		}
	}
	approve := func(token, comment string) { t.Helper(); approveAs(token, comment, 202, "") }
	// Refused up front, not accepted and then ignored by the step.
	approveAs("mallory-token-1", "not my call", 403, `mallory is not an approver of step prod.approve (approvers: carol, group:release)`)
	approveAs("tester-token-12", "my own change", 403, `tester started run `+r.ID+` and may not decide on its approvals`)
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
	t.Parallel()
	// The step must park before its timeout to time out as an approval: 500 ms was too short
	// on a machine at load 35.
	e := newEnv(t, envOpts{workers: 1})
	r := e.startRun("name: t\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Approval, timeout: 3s, with: {approvers: [alice]}}\n", nil)
	got := e.wait(r.ID, 20*time.Second)
	if got.Status != pipelines.StFailed || !strings.Contains(got.Error, "approval timed out with 0 of 1 approvals") {
		t.Fatalf("%s %q", got.Status, got.Error)
	}
}

// TestSignalRefusals: a decision on a run or step that does not exist is 404, and on a step that
// is not waiting for an approval (a Wait step, a finished step) is 409; nothing is recorded.
func TestSignalRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(&Auth{Anonymous: &User{Name: "alice", Groups: []string{"release"}}})
	r := e.startRun(`
name: mixed
stages:
  - id: s
    steps:
      - {id: done, type: Noop}
      - {id: sleep, type: Wait, with: {duration: 1m}}
`, nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		cur, _ := e.ctl.Get(t.Context(), r.ID)
		if st := cur.Stages[0].Steps[1]; st.Status == pipelines.StWaiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Wait step never parked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		name, run, body string
		want            int
		msg             string
	}{
		{"unknown run", "r000000000000nosuchrun", `{"stage":"s","step":"sleep","approve":true}`, 404, "run not found"},
		{"unknown step", r.ID, `{"stage":"s","step":"nope","approve":true}`, 404, "has no step s.nope"},
		{"unknown stage", r.ID, `{"stage":"x","step":"sleep","approve":true}`, 404, "has no step x.sleep"},
		{"finished step", r.ID, `{"stage":"s","step":"done","approve":true}`, 409, "step s.done is already succeeded"},
		{"not an approval", r.ID, `{"stage":"s","step":"sleep","approve":true}`, 409, "step s.sleep is not waiting for an approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/api/v1/runs/"+tc.run+"/signals", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.msg) {
				t.Fatalf("got %s %s, want %d %q", resp.Status, body, tc.want, tc.msg)
			}
		})
	}
	if cur, _ := e.ctl.Get(t.Context(), r.ID); len(cur.Stages[0].Steps[1].Signals) != 0 {
		t.Fatalf("a refused decision was recorded: %+v", cur.Stages[0].Steps[1].Signals)
	}
}

// TestApprovalParksWithoutExecutionLease: an Approval job only reads its inputs and the run's
// decisions, so the worker parks it without writing an execution lease to prflow-locks (one
// server write per park and per decision fewer; a lease only keeps side effects from running
// twice at once). The run still parks, is approved and succeeds.
func TestApprovalParksWithoutExecutionLease(t *testing.T) {
	e := newEnv(t, envOpts{workers: 1})
	r := e.startRun(gatedSrc, nil)
	waitStep(t, e, r.ID, "approve", pipelines.StWaiting)
	// A lease lives in the bucket for its TTL (30 s) after its job settled: any written would be here.
	ctx := context.Background()
	execLeases := func() []string {
		t.Helper()
		lister, err := e.ctl.Buckets().Locks.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range lister.Keys() {
			if strings.HasPrefix(k, "exec.") {
				out = append(out, k)
			}
		}
		return out
	}
	if got := execLeases(); len(got) != 0 {
		t.Fatalf("parking an Approval wrote execution leases %v", got)
	}
	if err := e.ctl.Decide(ctx, r.ID, SignalRequest{Stage: "prod", Step: "approve", Approve: true}, User{Name: "alice", Groups: []string{"release"}}); err != nil {
		t.Fatal(err)
	}
	if done := e.wait(r.ID, 2*time.Minute); done.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", done.Status, done.Error)
	}
	if got := execLeases(); len(got) != 0 {
		t.Fatalf("the approved Approval's job wrote execution leases %v", got)
	}
}
