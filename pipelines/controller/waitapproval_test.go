package controller

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// gatedSrc parks on an Approval that one member of group release may give (steps may be
// appended).
const gatedSrc = `
name: gated
stages:
  - id: prod
    steps:
      - id: approve
        type: Approval
        timeout: 5m
        with: {approvers: {groups: [release], minimumCount: 1}}
`

// TestWaitingApprovalStatus: a run parked on an Approval reads as waitingApproval in the API
// list (listed before newer runs) and in GET /api/v1/runs/{id}, while KV keeps running; once
// approved it reads running again (its next step, a Wait, parks on time, not on a person).
func TestWaitingApprovalStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(&Auth{Anonymous: &User{Name: "alice", Groups: []string{"release"}}})
	gated := e.startRun(gatedSrc+`      - id: soak
        type: Wait
        with: {duration: 10m}
`, nil)
	waitStep(t, e, gated.ID, "approve", pipelines.StWaiting)
	// A newer run that finishes: newest first would put it above the waiting one. Run ids
	// sort by the second they were made in, so the newer one starts in a later second.
	for time.Now().Unix() <= gated.Created.Unix() {
		time.Sleep(50 * time.Millisecond)
	}
	newer := e.startRun("name: quick\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n", nil)
	e.wait(newer.ID, 20*time.Second)

	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var list []pipelines.Run
	get("/api/v1/runs", &list)
	if len(list) != 2 || list[0].ID != gated.ID || list[0].Status != pipelines.StWaitingApproval || list[1].Status != pipelines.StSucceeded {
		t.Fatalf("list: want %s waitingApproval first, then %s succeeded; got %+v", gated.ID, newer.ID, statuses(list))
	}
	var one pipelines.Run
	get("/api/v1/runs/"+gated.ID, &one)
	if one.Status != pipelines.StWaitingApproval {
		t.Fatalf("GET run: status %s, want waitingApproval", one.Status)
	}
	if stored, _ := e.ctl.Get(t.Context(), gated.ID); stored.Status != pipelines.StRunning {
		t.Fatalf("KV holds %s: waitingApproval must be derived, never stored", stored.Status)
	}

	resp, err := http.Post(srv.URL+"/api/v1/runs/"+gated.ID+"/signals", "application/json",
		strings.NewReader(`{"stage":"prod","step":"approve","approve":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("approve: %s", resp.Status)
	}
	waitStep(t, e, gated.ID, "soak", pipelines.StWaiting)
	get("/api/v1/runs/"+gated.ID, &one)
	if one.Status != pipelines.StRunning {
		t.Fatalf("after approval: status %s, want running", one.Status)
	}
	get("/api/v1/runs", &list)
	if list[0].ID != newer.ID || list[1].Status != pipelines.StRunning {
		t.Fatalf("after approval the list is newest first again: %+v", statuses(list))
	}
}

func statuses(runs []pipelines.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID+"="+string(r.Status))
	}
	return out
}

func waitStep(t *testing.T, e *env, id, step string, want pipelines.Status) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, err := e.ctl.Get(t.Context(), id); err == nil && r.Stages[0].Step(step, false).Status == want {
			return
		}
		if time.Now().After(deadline) {
			r, _ := e.ctl.Get(t.Context(), id)
			t.Fatalf("step %s of run %s never %s: %+v", step, id, want, r)
		}
	}
}
