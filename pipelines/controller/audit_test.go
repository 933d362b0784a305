package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/steps"
)

// TestAuditLog: a run started over the API, a start a policy denies and a cancel are in the
// audit log with who, when, what and from where; GET /api/v1/audit filters by actor, action,
// run and since; the bearer token used never appears in the log, only the user's name.
func TestAuditLog(t *testing.T) {
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	if err := audit.Setup(ctx, e.conn.JS, 1, 0); err != nil {
		t.Fatal(err)
	}
	e.ctl.audit = &audit.Log{JS: e.conn.JS}
	dir := t.TempDir()
	const token = "s3cr3t-audit-token-value"
	tokFile := filepath.Join(dir, "tok")
	pol := filepath.Join(dir, "policies")
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.yaml"), []byte("tokens:\n  - {user: alice, groups: [ops], token: 'file:"+tokFile+"'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Mkdir(pol, 0o755)
	if err := os.WriteFile(filepath.Join(pol, "run.rego"), []byte("package prflow.run\n\ndeny contains \"blocked pipelines may not run\" if input.pipeline.name == \"blocked\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(ctx, pol)
	if err != nil {
		t.Fatal(err)
	}
	e.ctl.policy = set
	auth, err := LoadAuth(filepath.Join(dir, "tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.ctl.Handler(auth))
	defer srv.Close()
	call := func(method, path string, body any) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		}
		req, _ := http.NewRequest(method, srv.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	src := func(name string) []byte {
		return []byte("name: " + name + "\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n")
	}
	code, body := call("POST", "/api/v1/runs", map[string]any{"file": "ok.yaml", "source": src("fine")})
	if code != http.StatusCreated {
		t.Fatalf("start: %d %s", code, body)
	}
	var run struct{ ID string }
	_ = json.Unmarshal([]byte(body), &run)
	if code, body = call("POST", "/api/v1/runs", map[string]any{"file": "b.yaml", "source": src("blocked")}); code != http.StatusForbidden || !strings.Contains(body, "blocked pipelines may not run") {
		t.Fatalf("denied start: %d %s", code, body)
	}
	if err := e.ctl.Cancel(ctx, "no-such-run", "bob"); err == nil {
		t.Fatal("cancel of an unknown run succeeded")
	}
	if err := e.ctl.Signal(ctx, run.ID, "s", "a", steps.Signal{Kind: "approval", User: "carol", Approve: false, Comment: "no"}); err != nil {
		t.Fatal(err)
	}

	entries := func(q string) []audit.Entry {
		t.Helper()
		code, body := call("GET", "/api/v1/audit"+q, nil)
		if code != http.StatusOK {
			t.Fatalf("audit%s: %d %s", q, code, body)
		}
		if strings.Contains(body, token) {
			t.Fatalf("audit%s shows the token: %s", q, body)
		}
		var list []audit.Entry
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatal(err)
		}
		return list
	}
	all := entries("?since=1h")
	if len(all) != 3 {
		t.Fatalf("want 3 entries (started, denied, rejected; a failed cancel is no action), got %+v", all)
	}
	st, den, rej := all[0], all[1], all[2]
	if rej.Action != audit.ApprovalRejected || rej.Actor != "carol" || rej.Run != run.ID || rej.Detail != "s.a" {
		t.Errorf("rejection entry %+v", rej)
	}
	if st.Action != audit.RunStarted || st.Actor != "alice" || st.Run != run.ID || !strings.HasPrefix(st.Remote, "127.0.0.1:") || st.Time.IsZero() {
		t.Errorf("start entry %+v", st)
	}
	if den.Action != audit.PolicyDenied || den.Actor != "alice" || !strings.Contains(den.Detail, "blocked pipelines may not run") || den.Run != "" {
		t.Errorf("denial entry %+v", den)
	}
	for q, want := range map[string]int{"?actor=alice": 2, "?actor=bob": 0, "?actor=carol": 1, "?action=policy.denied": 1,
		"?run=" + run.ID: 2, "?since=2099-01-01T00:00:00Z": 0} {
		if got := entries(q); len(got) != want {
			t.Errorf("audit%s: %d entries, want %d: %+v", q, len(got), want, got)
		}
	}
	if code, body := call("GET", "/api/v1/audit?since=yesterday", nil); code != http.StatusBadRequest || !strings.Contains(body, "since") {
		t.Errorf("bad since: %d %s", code, body)
	}
	// The stream itself, not only the API's view, holds no token.
	s, err := e.conn.JS.Stream(ctx, audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(m.Data), token) {
			t.Errorf("audit entry %d holds the token: %s", seq, m.Data)
		}
	}
}
