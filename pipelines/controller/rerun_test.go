package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/steps"
)

// recordLog is where Record steps write which run, stage and step ran (one line each).
type recordLog struct {
	mu   sync.Mutex
	path string
}

// registerRecord adds the Record step to e's registry: it appends run/stage.step to a file
// (the side effect a test counts), fails while the file its failIf input names exists, and
// outputs its message input and a commit id naming the run and step.
func registerRecord(t *testing.T, e *env) *recordLog {
	rl := &recordLog{path: filepath.Join(t.TempDir(), "record.log")}
	e.reg.Register(steps.Definition{Type: "Record", New: func() steps.Step {
		return steps.StepFunc(func(_ context.Context, sc *steps.Context) (steps.Result, error) {
			rl.mu.Lock()
			f, err := os.OpenFile(rl.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintf(f, "%s/%s.%s\n", sc.RunID, sc.Stage, sc.StepID)
				f.Close()
			}
			rl.mu.Unlock()
			if p, _ := sc.Inputs["failIf"].(string); p != "" {
				if _, err := os.Stat(p); err == nil {
					return steps.Fail("failing while " + filepath.Base(p) + " exists"), nil
				}
			}
			return steps.Done(map[string]any{"commitId": sc.RunID + "/" + sc.Stage + "." + sc.StepID, "message": sc.Inputs["message"]}), nil
		})
	}})
	return rl
}

// ran lists the lines of run id.
func (rl *recordLog) ran(id string) []string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	b, _ := os.ReadFile(rl.path)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if rest, ok := strings.CutPrefix(l, id+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

func promoSource(failIf string) string {
	return `
name: promo
inputs:
  tag: {type: string, required: true}
stages:
  - id: dev
    steps:
      - {id: update, type: Record}
      - {id: merge, type: Record}
  - id: prod
    steps:
      - {id: update, type: Record, with: {failIf: "` + failIf + `", message: "${{ stages.dev.steps.merge.outputs.commitId }} ${{ inputs.tag }}"}}
      - {id: merge, type: Record}
`
}

func decodeRun(t *testing.T, body string) *pipelines.Run {
	t.Helper()
	var r pipelines.Run
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.ID == "" {
		t.Fatalf("not a run: %v %s", err, body)
	}
	return &r
}

// TestRerunAndRetryAPI: POST /runs/{id}/retry of a failed run starts a new run whose succeeded
// stage is carried over (not run again: no second side effect) with its outputs resolving in
// the failed stage; /rerun runs every stage again with the same inputs. Both are refused for
// an unknown or running run, a retry for a run that succeeded; both are audited with who and
// of which run, and a run policy can deny them.
func TestRerunAndRetryAPI(t *testing.T) {
	t.Parallel()
	a := newAuditAPI(t)
	rl := registerRecord(t, a.e)
	gate := filepath.Join(t.TempDir(), "prod-broken")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := a.call(auditToken, "POST", "/api/v1/runs", map[string]any{"file": "promo.yaml", "source": promoSource(gate), "inputs": map[string]any{"tag": "1.2"}})
	if code != http.StatusCreated {
		t.Fatalf("start: %d %s", code, body)
	}
	first := a.e.wait(decodeRun(t, body).ID, time.Minute)
	if first.Status != pipelines.StFailed || first.Find("prod").Status != pipelines.StFailed {
		t.Fatalf("first run %s: %s", first.Status, first.Error)
	}

	t.Run("unknown run", func(t *testing.T) {
		for _, action := range []string{"rerun", "retry"} {
			code, body := a.call(auditToken, "POST", "/api/v1/runs/rnope/"+action, nil)
			if code != http.StatusNotFound || !strings.Contains(body, "run not found: rnope") {
				t.Errorf("%s of an unknown run: %d %s", action, code, body)
			}
		}
	})
	t.Run("no token", func(t *testing.T) {
		if code, body := a.call("", "POST", "/api/v1/runs/"+first.ID+"/retry", nil); code != http.StatusUnauthorized {
			t.Errorf("retry without a token: %d %s", code, body)
		}
	})
	t.Run("hostile body", func(t *testing.T) {
		code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/rerun", map[string]any{"inputs": map[string]any{"tag": "evil"}})
		if code != http.StatusBadRequest || !strings.Contains(body, `unknown field \"inputs\"`) {
			t.Errorf("rerun with other inputs: %d %s", code, body)
		}
	})
	t.Run("running run", func(t *testing.T) {
		park := a.e.startRun("name: parked\nstages:\n  - id: s\n    steps:\n      - {id: ok, type: Park}\n", nil)
		eventually(t, 30*time.Second, func() bool {
			r, _ := a.e.ctl.Get(context.Background(), park.ID)
			return r != nil && r.WaitingApproval()
		}, func() string { return "the parked run never waited for its approval" })
		for _, action := range []string{"rerun", "retry"} {
			code, body := a.call(auditToken, "POST", "/api/v1/runs/"+park.ID+"/"+action, nil)
			if code != http.StatusConflict || !strings.Contains(body, "it is waitingApproval; wait for it to end or cancel it first") {
				t.Errorf("%s of a waiting run: %d %s", action, code, body)
			}
		}
	})

	var retried *pipelines.Run
	t.Run("retry from the failed stage", func(t *testing.T) {
		if err := os.Remove(gate); err != nil { // prod is fixed
			t.Fatal(err)
		}
		code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/retry", nil)
		if code != http.StatusCreated {
			t.Fatalf("retry: %d %s", code, body)
		}
		r := decodeRun(t, body)
		if r.RetryOf != first.ID || r.Executor != "alice" || r.Inputs["tag"] != "1.2" {
			t.Fatalf("retry run: retryOf %q executor %q inputs %v", r.RetryOf, r.Executor, r.Inputs)
		}
		retried = a.e.wait(r.ID, time.Minute)
		if retried.Status != pipelines.StSucceeded {
			t.Fatalf("retry %s: %s", retried.Status, retried.Error)
		}
		if got := rl.ran(retried.ID); strings.Join(got, ",") != "prod.update,prod.merge" {
			t.Fatalf("the retry ran %v; dev succeeded before and must not run again", got)
		}
		if got := rl.ran(first.ID); strings.Join(got, ",") != "dev.update,dev.merge,prod.update" {
			t.Fatalf("the first run's steps ran again: %v", got)
		}
		dev := retried.Find("dev")
		if dev.CarriedFrom != first.ID || dev.Status != pipelines.StSucceeded {
			t.Fatalf("dev: %s carried from %q", dev.Status, dev.CarriedFrom)
		}
		if got := step(retried, "prod", "update").Outputs["message"]; got != first.ID+"/dev.merge 1.2" {
			t.Fatalf("prod.update message %v: dev's carried merge commit must resolve", got)
		}
	})
	t.Run("retry of a run that succeeded", func(t *testing.T) {
		code, body := a.call(auditToken, "POST", "/api/v1/runs/"+retried.ID+"/retry", nil)
		if code != http.StatusConflict || !strings.Contains(body, "it succeeded, there is no failed stage to retry from") {
			t.Fatalf("retry of a succeeded run: %d %s", code, body)
		}
	})
	t.Run("rerun", func(t *testing.T) {
		code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/rerun", struct{}{})
		if code != http.StatusCreated {
			t.Fatalf("rerun: %d %s", code, body)
		}
		r := decodeRun(t, body)
		if r.RerunOf != first.ID || r.RetryOf != "" || r.Spec != first.Spec || r.Inputs["tag"] != "1.2" {
			t.Fatalf("rerun: rerunOf %q spec %s (want %s) inputs %v", r.RerunOf, r.Spec, first.Spec, r.Inputs)
		}
		done := a.e.wait(r.ID, time.Minute)
		if got := rl.ran(done.ID); done.Status != pipelines.StSucceeded || strings.Join(got, ",") != "dev.update,dev.merge,prod.update,prod.merge" {
			t.Fatalf("rerun %s ran %v", done.Status, got)
		}
		for _, s := range done.Stages {
			if s.CarriedFrom != "" {
				t.Fatalf("a re-run carried %s over", s.ID)
			}
		}
	})
	t.Run("audited", func(t *testing.T) {
		var retryEntry, rerunEntry bool
		for _, e := range a.entries("?action=run.started") {
			if e.Actor != "alice" {
				continue
			}
			retryEntry = retryEntry || e.Run == retried.ID && strings.Contains(e.Detail, "retry of "+first.ID+" from its failed stage; carried over: dev")
			rerunEntry = rerunEntry || strings.Contains(e.Detail, "re-run of "+first.ID)
		}
		if !retryEntry || !rerunEntry {
			t.Fatalf("audit log lacks the retry (%v) or the re-run (%v): %+v", retryEntry, rerunEntry, a.entries("?action=run.started"))
		}
	})
	t.Run("policy denies", func(t *testing.T) {
		dir := t.TempDir()
		rule := "package prflow.run\n\ndeny contains \"retries and re-runs of promo need a change ticket\" if {\n\tinput.run.retryOf\n}\n\ndeny contains \"retries and re-runs of promo need a change ticket\" if {\n\tinput.run.rerunOf\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "run.rego"), []byte(rule), 0o644); err != nil {
			t.Fatal(err)
		}
		set, err := policy.Load(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		a.e.ctl.policy = set
		before := countRuns(t, a.e.ctl)
		for _, action := range []string{"rerun", "retry"} {
			code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/"+action, nil)
			if code != http.StatusForbidden || !strings.Contains(body, "need a change ticket") {
				t.Errorf("%s under a denying policy: %d %s", action, code, body)
			}
		}
		if after := countRuns(t, a.e.ctl); after != before {
			t.Fatalf("a denied re-run or retry stored a run: %d runs, were %d", after, before)
		}
		denied := a.entries("?action=" + audit.PolicyDenied)
		if len(denied) < 2 || denied[0].Actor != "alice" {
			t.Fatalf("denials not audited: %+v", denied)
		}
		// A plain start of the same pipeline is not a re-run: the policy lets it through.
		code, body := a.call(auditToken, "POST", "/api/v1/runs", map[string]any{"file": "promo.yaml", "source": promoSource(""), "inputs": map[string]any{"tag": "2"}})
		if code != http.StatusCreated {
			t.Fatalf("a plain start under the retry policy: %d %s", code, body)
		}
	})
}

// TestRetryWithChangedSource: a retry may bring a fixed pipeline source; one that drops a stage
// that succeeded, or changes its steps, is refused with the reason and starts nothing.
func TestRetryWithChangedSource(t *testing.T) {
	t.Parallel()
	a := newAuditAPI(t)
	rl := registerRecord(t, a.e)
	gate := filepath.Join(t.TempDir(), "broken")
	_ = os.WriteFile(gate, nil, 0o644)
	first := a.e.wait(a.e.startRun(promoSource(gate), map[string]any{"tag": "1"}).ID, time.Minute)
	if first.Status != pipelines.StFailed {
		t.Fatalf("first run %s", first.Status)
	}
	before := countRuns(t, a.e.ctl)
	for name, src := range map[string]string{
		"stage gone":    strings.Replace(strings.Replace(promoSource(""), "id: dev", "id: staging", 1), "stages.dev.", "stages.staging.", 1),
		"steps changed": strings.Replace(promoSource(""), "{id: update, type: Record}", "{id: render, type: Record}", 1),
	} {
		code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/retry", RetryRequest{File: "fixed.yaml", Source: SourceText(src)})
		if code != http.StatusConflict || !strings.Contains(body, "cannot retry run "+first.ID+" from its failed stage") {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	if after := countRuns(t, a.e.ctl); after != before {
		t.Fatalf("a refused retry stored a run")
	}
	// The fix: prod no longer fails; dev is carried over.
	fixed := strings.Replace(promoSource(""), "failIf: \"\", ", "", 1)
	code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/retry", RetryRequest{File: "fixed.yaml", Source: SourceText(fixed)})
	if code != http.StatusCreated {
		t.Fatalf("retry with the fixed source: %d %s", code, body)
	}
	r := a.e.wait(decodeRun(t, body).ID, time.Minute)
	// A run whose stored source is gone cannot be started again: said so, nothing started.
	if err := a.e.ctl.b.Specs.Delete(context.Background(), first.Spec); err != nil {
		t.Fatal(err)
	}
	if code, body := a.call(auditToken, "POST", "/api/v1/runs/"+first.ID+"/rerun", nil); code != http.StatusConflict || !strings.Contains(body, "its pipeline source "+first.Spec) {
		t.Errorf("rerun without a stored source: %d %s", code, body)
	}
	if r.Status != pipelines.StSucceeded || r.Spec == first.Spec || r.Find("dev").CarriedFrom != first.ID || strings.Join(rl.ran(r.ID), ",") != "prod.update,prod.merge" {
		t.Fatalf("retry with a fixed source: %s spec %s, dev from %q, ran %v", r.Status, r.Spec, r.Find("dev").CarriedFrom, rl.ran(r.ID))
	}
}

// TestRetryIdempotencyKey: the same retry sent twice with one Idempotency-Key starts one run;
// the key sent with a re-run of the same run is another request (refused, nothing started).
func TestRetryIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := newAuditAPI(t)
	registerRecord(t, a.e)
	gate := filepath.Join(t.TempDir(), "broken")
	_ = os.WriteFile(gate, nil, 0o644)
	first := a.e.wait(a.e.startRun(promoSource(gate), map[string]any{"tag": "1"}).ID, time.Minute)
	send := func(action string) (int, string, string) {
		req, _ := http.NewRequest("POST", a.srv.URL+"/api/v1/runs/"+first.ID+"/"+action, nil)
		req.Header.Set("Authorization", "Bearer "+auditToken)
		req.Header.Set(IdempotencyHeader, "retry-key-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		b.WriteString(readAll(resp))
		return resp.StatusCode, b.String(), resp.Header.Get(ReplayedHeader)
	}
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, _ := send("retry")
			if code != http.StatusCreated && code != http.StatusOK {
				t.Errorf("retry %d: %d %s", i, code, body)
				return
			}
			ids[i] = decodeRun(t, body).ID
		}()
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("one key started several retries: %v", ids)
		}
	}
	if code, body, _ := send("rerun"); code != http.StatusUnprocessableEntity || !strings.Contains(body, "another") {
		t.Fatalf("the key of a retry reused for a re-run: %d %s", code, body)
	}
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// countRuns is how many runs are stored.
func countRuns(t *testing.T, c *Controller) int {
	t.Helper()
	list, err := c.List(context.Background(), 0)
	if err != nil && !strings.Contains(err.Error(), "no keys found") {
		t.Fatal(err)
	}
	return len(list)
}
