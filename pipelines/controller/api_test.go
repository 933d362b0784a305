package controller

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// apiAuth is alice (release, token from the environment) and bob (a digest).
func apiAuth(t *testing.T) *Auth {
	t.Helper()
	t.Setenv("PRFLOW_TEST_ALICE", "alice-token-123456")
	return tokensAuth(t, "tokens:\n  - user: alice\n    groups: [release]\n    token: env:PRFLOW_TEST_ALICE\n"+
		"  - user: bob\n    token: sha256:"+sha256hex("bob-token-abcdefg")+"\n")
}

func TestAPI(t *testing.T) {
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(apiAuth(t))
	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		return callAPI(t, method, srv.URL+path, token, body)
	}
	for _, tok := range []string{"", "wrong-token-000"} {
		if code, _ := call("GET", "/api/v1/runs", tok, ""); code != 401 {
			t.Errorf("token %q: got %d, want 401", tok, code)
		}
	}
	if code, _ := call("GET", "/healthz", "", ""); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, _ := call("GET", "/readyz", "", ""); code != 200 {
		t.Errorf("readyz %d", code)
	}
	// Invalid pipeline: 422 with file:line detail, nothing stored.
	code, body := call("POST", "/api/v1/runs", "alice-token-123456", `{"file":"p.yaml","source":"`+b64("name: x\nstages:\n  - id: s\n    steps: [{id: a, type: Nope}]\n")+`"}`)
	if code != 422 || !strings.Contains(body, "p.yaml:4") {
		t.Errorf("invalid pipeline: %d %s", code, body)
	}
	if code, body := call("POST", "/api/v1/runs", "alice-token-123456", `{"nonsense": 1}`); code != 400 || !strings.Contains(body, "unknown field") {
		t.Errorf("bad body: %d %s", code, body)
	}
	if code, _ := call("POST", "/api/v1/runs", "alice-token-123456", `{"source":"`+strings.Repeat("A", MaxRequest)+`"}`); code != 400 {
		t.Errorf("oversized body: %d", code)
	}
	src := "name: api\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop, with: {message: hello from api}}\n"
	code, body = call("POST", "/api/v1/runs", "bob-token-abcdefg", `{"file":"api.yaml","source":"`+b64(src)+`"}`)
	if code != 201 {
		t.Fatalf("start: %d %s", code, body)
	}
	var run pipelines.Run
	_ = json.Unmarshal([]byte(body), &run)
	if run.Executor != "bob" {
		t.Errorf("executor %q, want the authenticated user", run.Executor)
	}
	e.wait(run.ID, 20*time.Second)
	code, body = call("GET", "/api/v1/runs/"+run.ID, "bob-token-abcdefg", "")
	if code != 200 || !strings.Contains(body, `"status": "succeeded"`) {
		t.Errorf("get: %d %s", code, body)
	}
	if code, _ := call("GET", "/api/v1/runs/nope", "bob-token-abcdefg", ""); code != 404 {
		t.Errorf("unknown run: %d", code)
	}
	code, body = call("GET", "/api/v1/runs", "bob-token-abcdefg", "")
	if code != 200 || !strings.Contains(body, run.ID) {
		t.Errorf("list: %d", code)
	}
	code, body = call("GET", "/api/v1/runs/"+run.ID+"/logs?step=s.a", "bob-token-abcdefg", "")
	sc := bufio.NewScanner(strings.NewReader(body))
	found := false
	for sc.Scan() {
		var l struct{ Msg, Stage, Step string }
		_ = json.Unmarshal(sc.Bytes(), &l)
		found = found || (l.Msg == "hello from api" && l.Stage == "s" && l.Step == "a")
	}
	if code != 200 || !found {
		t.Errorf("logs: %d %q", code, body)
	}
	if code, body := call("POST", "/api/v1/runs/"+run.ID+"/cancel", "bob-token-abcdefg", "{}"); code != 409 || !strings.Contains(body, "already succeeded") {
		t.Errorf("cancel finished run: %d %s", code, body)
	}
	code, body = call("GET", "/api/v1/workers", "alice-token-123456", "")
	if code != 200 || !strings.Contains(body, `"id": "w0"`) {
		t.Errorf("workers: %d %s", code, body)
	}
	code, body = call("GET", "/metrics", "", "")
	for _, want := range []string{`prflow_jobs_dispatched_total{type="Noop"}`, `prflow_jobs_completed_total{status="succeeded",type="Noop"}`,
		"prflow_step_duration_seconds_bucket", "prflow_parked_steps", "prflow_live_workers 1", `prflow_queue_depth{connector="",pool="default"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics missing %s", want)
		}
	}
}

func TestLoadAuthErrorsNeverShowTokens(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.yaml")
	_ = os.WriteFile(p, []byte("tokens:\n  - user: carol\n    token: short\n"), 0o600)
	if _, err := LoadAuth(p); err == nil || strings.Contains(err.Error(), "short\"") || !strings.Contains(err.Error(), "carol") {
		t.Errorf("short token: %v", err)
	}
	_ = os.WriteFile(p, []byte("tokens:\n  - user: dan\n    token: env:PRFLOW_NOT_SET_ANYWHERE\n"), 0o600)
	if _, err := LoadAuth(p); err == nil || !strings.Contains(err.Error(), "PRFLOW_NOT_SET_ANYWHERE is not set") {
		t.Errorf("missing env: %v", err)
	}
}
