package controller

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

const manualSrc = `
name: manual
stages:
  - id: prod
    onFailure: {manual: {timeout: 1h, approvers: ['group:sre']}}
    steps:
      - {id: verify, type: FailOnce}
      - {id: after, type: Noop}
    rollbackSteps:
      - {id: revert, type: Noop}
`

// waitIntervention waits until stage of run id is parked for an intervention.
func (e *env) waitIntervention(id, stage string) *pipelines.Run {
	e.t.Helper()
	var cur *pipelines.Run
	eventually(e.t, 30*time.Second, func() bool {
		cur, _ = e.ctl.Get(e.t.Context(), id)
		return cur != nil && cur.Find(stage) != nil && cur.Find(stage).Intervention != nil
	}, func() string { return "stage " + stage + " never waited for an intervention" })
	return cur
}

// TestInterveneAPI: the API refuses bad input (400 naming it), a caller outside the approvers
// (403), an unknown run (404); of two concurrent decisions exactly one is taken (200) and the
// other gets 409; a decision on a run that waits for none is 409.
func TestInterveneAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(tokensAuth(t, `tokens:
  - {user: alice, groups: [sre], token: sha256:`+sha256hex("alice-token-1234")+`}
  - {user: bob, groups: [sre], token: sha256:`+sha256hex("bob-token-12345")+`}
  - {user: mallory, groups: [dev], token: sha256:`+sha256hex("mallory-token-1")+`}
`))
	r := e.startRun(manualSrc, nil)
	cur := e.waitIntervention(r.ID, "prod")
	if cur.Shown() != pipelines.StWaitingIntervention || !strings.Contains(cur.Find("prod").Intervention.Error, "attempt 1 failed") {
		t.Fatalf("parked run: %s %+v", cur.Shown(), cur.Find("prod").Intervention)
	}
	url := srv.URL + "/api/v1/runs/" + r.ID + "/interventions/"
	for _, tc := range []struct {
		url, token, body string
		code             int
		says             string
	}{
		{url + "prod", "alice-token-1234", `{"action":"dance"}`, 400, `unknown action \"dance\" (want retry, ignore, abort, rollback)`},
		{url + "prod", "alice-token-1234", `{"action":"retry","force":true}`, 400, `unknown field \"force\"`},
		{url + "staging", "alice-token-1234", `{"action":"retry"}`, 400, `no stage \"staging\"`},
		{url + "prod", "mallory-token-1", `{"action":"ignore"}`, 403, "mallory may not decide on stage prod of run " + r.ID + " (approvers: group:sre)"},
		{srv.URL + "/api/v1/runs/r-nope/interventions/prod", "alice-token-1234", `{"action":"retry"}`, 404, "r-nope"},
	} {
		if code, body := callAPI(t, "POST", tc.url, tc.token, tc.body); code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s: %d %s, want %d %q", tc.url, tc.body, code, body, tc.code, tc.says)
		}
	}
	// Two decisions at once: one wins.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	bodies := make([]string, 2)
	for i, who := range []struct{ token, action string }{{"alice-token-1234", "retry"}, {"bob-token-12345", "abort"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], bodies[i] = callAPI(t, "POST", url+"prod", who.token, `{"action":"`+who.action+`","comment":"seen it"}`)
		}()
	}
	wg.Wait()
	win := -1
	for i, c := range codes {
		if c == 200 {
			if win >= 0 {
				t.Fatalf("both decisions taken: %v", bodies)
			}
			win = i
		} else if c != 409 || !strings.Contains(bodies[i], "not waiting for an intervention (already decided: ") {
			t.Fatalf("loser got %d %s", c, bodies[i])
		}
	}
	if win < 0 {
		t.Fatalf("no decision taken: %v %v", codes, bodies)
	}
	got := e.wait(r.ID, 30*time.Second)
	recs := got.Find("prod").Interventions
	if len(recs) != 1 || recs[0].Comment != "seen it" {
		t.Fatalf("records %+v", recs)
	}
	switch recs[0].Action {
	case "retry": // alice won: FailOnce passes on attempt 2
		if got.Status != pipelines.StSucceeded || recs[0].User != "alice" || step(got, "prod", "verify").Attempt != 2 {
			t.Fatalf("retry: run %s %q %+v", got.Status, got.Error, recs[0])
		}
	case "abort":
		if got.Status != pipelines.StFailed || recs[0].User != "bob" || !strings.Contains(got.Error, "aborted by bob") || step(got, "prod", "revert").Status != pipelines.StPending {
			t.Fatalf("abort: run %s %q %+v", got.Status, got.Error, recs[0])
		}
	default:
		t.Fatalf("record %+v", recs[0])
	}
	if code, body := callAPI(t, "POST", url+"prod", "alice-token-1234", `{"action":"retry"}`); code != 409 || !strings.Contains(body, "is not waiting for an intervention") {
		t.Fatalf("decision on a finished run: %d %s", code, body)
	}
}

// TestInterventionTimeoutAfterRestart: the parked stage is in the run record, so a restarted
// controller arms its deadline again, and the timeout rolls the stage back.
func TestInterventionTimeoutAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, envOpts{workers: 1, dir: dir})
	r := e.startRun(strings.Replace(manualSrc, "{timeout: 1h, approvers: ['group:sre']}", "{timeout: 4s, onTimeout: rollbackStage}", 1), nil)
	e.waitIntervention(r.ID, "prod")
	e.stop()
	e.start(envOpts{workers: 1, dir: dir})
	got := e.wait(r.ID, 60*time.Second)
	recs := got.Find("prod").Interventions
	if got.Status != pipelines.StFailed || len(recs) != 1 || !recs[0].TimedOut || recs[0].Outcome != "timed out after 4s: rolled back" ||
		step(got, "prod", "revert").Status != pipelines.StSucceeded || step(got, "prod", "after").Status != pipelines.StNotRun {
		t.Fatalf("run %s %q, records %+v", got.Status, got.Error, recs)
	}
	if !strings.Contains(got.Error, "timed out after 4s: rolled back") {
		t.Fatalf("run error %q does not say what the timeout did", got.Error)
	}
}
