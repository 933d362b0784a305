package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/steps"
)

const (
	auditToken   = "s3cr3t-audit-token-value"
	auditCIToken = "s3cr3t-ci-token-of-alice"
)

// auditAPI is a controller with an audit log behind its HTTP API, and alice's two tokens:
// auditToken (unnamed) and auditCIToken (named ci).
type auditAPI struct {
	t   *testing.T
	e   *env
	srv *httptest.Server
	log *audit.Log
}

func newAuditAPI(t *testing.T, opts ...func(*Controller)) *auditAPI {
	t.Helper()
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	if err := audit.Setup(ctx, e.conn.JS, 1, audit.DefaultRetention); err != nil {
		t.Fatal(err)
	}
	a := &auditAPI{t: t, e: e, log: &audit.Log{JS: e.conn.JS}}
	e.ctl.audit = a.log
	for _, o := range opts {
		o(e.ctl)
	}
	dir := t.TempDir()
	for name, tok := range map[string]string{"tok": auditToken, "ci": auditCIToken} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokens := "tokens:\n  - {user: alice, groups: [ops], token: 'file:" + filepath.Join(dir, "tok") + "'}\n" +
		"  - {user: alice, groups: [ops], token: 'file:" + filepath.Join(dir, "ci") + "', name: ci}\n"
	if err := os.WriteFile(filepath.Join(dir, "tokens.yaml"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policies")
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
	a.srv = httptest.NewServer(e.ctl.Handler(auth))
	t.Cleanup(a.srv.Close)
	return a
}

// call sends a request with a bearer token ("" sends none).
func (a *auditAPI) call(token, method, path string, body any) (int, string) {
	a.t.Helper()
	var text string
	if body != nil {
		b, _ := json.Marshal(body)
		text = string(b)
	}
	return callAPI(a.t, method, a.srv.URL+path, token, text)
}

// entries is GET /api/v1/audit?q, which must succeed and show no token.
func (a *auditAPI) entries(q string) []audit.Entry {
	a.t.Helper()
	code, body := a.call(auditToken, "GET", "/api/v1/audit"+q, nil)
	if code != http.StatusOK {
		a.t.Fatalf("audit%s: %d %s", q, code, body)
	}
	var list []audit.Entry
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		a.t.Fatal(err)
	}
	return list
}

// streamHolds fails the test if any message of the audit stream (data or headers) holds one
// of the secrets; it returns how many messages it read.
func (a *auditAPI) streamHolds(secrets ...string) int {
	a.t.Helper()
	ctx := context.Background()
	s, err := a.e.conn.JS.Stream(ctx, audit.Stream)
	if err != nil {
		a.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			a.t.Fatal(err)
		}
		n++
		raw := fmt.Sprintf("%s %v %s", m.Subject, m.Header, m.Data)
		for _, sec := range secrets {
			if strings.Contains(raw, sec) {
				a.t.Errorf("audit message %d holds a secret (%.6s…): %s", seq, sec, raw)
			}
		}
	}
	return n
}

func pipelineSource(name string) []byte {
	return []byte("name: " + name + "\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n")
}

// TestAuditLog: a run started over the API, a start a policy denies and a cancel are in the
// audit log with who, when, what and from where; GET /api/v1/audit filters by actor, action,
// run and since; the bearer token used never appears in the log, only the user's name.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	a := newAuditAPI(t)
	ctx := context.Background()
	code, body := a.call(auditToken, "POST", "/api/v1/runs", map[string]any{"file": "ok.yaml", "source": pipelineSource("fine")})
	if code != http.StatusCreated {
		t.Fatalf("start: %d %s", code, body)
	}
	var run struct{ ID string }
	_ = json.Unmarshal([]byte(body), &run)
	if code, body = a.call(auditToken, "POST", "/api/v1/runs", map[string]any{"file": "b.yaml", "source": pipelineSource("blocked")}); code != http.StatusForbidden || !strings.Contains(body, "blocked pipelines may not run") {
		t.Fatalf("denied start: %d %s", code, body)
	}
	if err := a.e.ctl.Cancel(ctx, "no-such-run", "bob"); err == nil {
		t.Fatal("cancel of an unknown run succeeded")
	}
	if err := a.e.ctl.Signal(ctx, run.ID, "s", "a", steps.Signal{Kind: "approval", User: "carol", Approve: false, Comment: "no"}); err != nil {
		t.Fatal(err)
	}

	all := a.entries("?since=1h&action=run.*,policy.*&action=approval.*")
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
	// alice: two starts (one denied), each with the token that authenticated it.
	for q, want := range map[string]int{"?actor=alice": 4, "?actor=bob": 0, "?actor=carol": 1, "?action=policy.denied": 1,
		"?action=token.used": 2, "?run=" + run.ID: 2, "?since=2099-01-01T00:00:00Z": 0, "?remote=127.0.0.1": 4, "?remote=10.0.0.1": 0} {
		if got := a.entries(q); len(got) != want {
			t.Errorf("audit%s: %d entries, want %d: %+v", q, len(got), want, got)
		}
	}
	if n := a.streamHolds(auditToken, auditCIToken); n != 5 {
		t.Errorf("the audit stream holds %d messages, want 5", n)
	}
}

// TestAuditFilterTypos: a misspelt parameter or action is refused with the closest name, not
// answered with every entry (or none).
func TestAuditFilterTypos(t *testing.T) {
	t.Parallel()
	a := newAuditAPI(t)
	for q, want := range map[string]string{
		"?actr=alice":             `unknown query parameter "actr" (did you mean "actor"?)`,
		"?action=token.usd":       `unknown action "token.usd"; did you mean "token.used"?`,
		"?action=webhok.*":        `unknown action "webhok.*"; did you mean "webhook.*"?`,
		"?action=run.started,x.y": `unknown action "x.y"`,
		"?action=run.>":           `unknown action "run.>"`,
		"?since=yesterday":        "since: want RFC3339 time or a duration",
		"?since=-1h":              "since: want RFC3339 time or a duration",
		"?limit=ten":              "limit: want a positive number",
		"?run=a&run=b":            "query parameter run is given 2 times",
	} {
		code, body := a.call(auditToken, "GET", "/api/v1/audit"+q, nil)
		var e apiError
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, want) {
			t.Errorf("audit%s: %d %s, want 400 with %q", q, code, body, want)
		}
	}
	for _, q := range []string{"?action=signal.wake", "?action=auth.*", "?action=webhook.accepted&action=webhook.rejected", "?remote=127.0.0.1&limit=5"} {
		if code, body := a.call(auditToken, "GET", "/api/v1/audit"+q, nil); code != http.StatusOK {
			t.Errorf("audit%s: %d %s", q, code, body)
		}
	}
}

// TestAuditTokenUse: a token that authenticates a request that changes something is recorded
// once per request with its user and name, never its value; reads are not recorded; failed
// authentications are, within a per-host budget that a brute force cannot exceed, and the
// next entry after the budget refills says how many were not recorded.
func TestAuditTokenUse(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := newAuditAPI(t, func(c *Controller) { c.auditLimit = audit.NewLimiter(audit.WithClock(clock)) })

	code, body := a.call(auditCIToken, "POST", "/api/v1/runs", map[string]any{"file": "ok.yaml", "source": pipelineSource("fine")})
	if code != http.StatusCreated {
		t.Fatalf("start: %d %s", code, body)
	}
	var run struct{ ID string }
	_ = json.Unmarshal([]byte(body), &run)
	for _, path := range []string{"/api/v1/runs", "/api/v1/runs/" + run.ID, "/api/v1/workers"} {
		if code, body := a.call(auditCIToken, "GET", path, nil); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	// The run may have ended already (409): the token was used all the same.
	cancelCode, body := a.call(auditToken, "POST", "/api/v1/runs/"+run.ID+"/cancel", nil)
	if cancelCode != http.StatusAccepted && cancelCode != http.StatusConflict {
		t.Fatalf("cancel: %d %s", cancelCode, body)
	}
	used := a.entries("?action=token.used")
	if len(used) != 2 {
		t.Fatalf("token.used entries: %+v, want 2 (the start and the cancel; reads are not recorded)", used)
	}
	if u := used[0]; u.Actor != "alice" || u.Detail != `token "ci" of alice: POST /api/v1/runs` || !strings.HasPrefix(u.Remote, "127.0.0.1:") || u.Time.IsZero() {
		t.Errorf("start's token entry: %+v", u)
	}
	if u := used[1]; u.Actor != "alice" || u.Detail != "token of alice: POST /api/v1/runs/"+run.ID+"/cancel" || u.Run != run.ID {
		t.Errorf("cancel's token entry: %+v", u)
	}

	// A brute force: 300 wrong tokens from one host, all refused; 5 entries (the budget).
	for i := range 300 {
		if code, _ := a.call(fmt.Sprintf("guess-%04d-of-a-token", i), "POST", "/api/v1/runs", map[string]any{}); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: HTTP %d", i, code)
		}
	}
	if code, _ := a.call("", "GET", "/api/v1/runs", nil); code != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d", code)
	}
	failed := a.entries("?action=auth.failed")
	if len(failed) != 5 {
		t.Fatalf("auth.failed entries after 301 failures from one host: %d, want 5", len(failed))
	}
	for _, f := range failed {
		if f.Actor != Unauthenticated || f.Detail != "POST /api/v1/runs: unknown bearer token" || !strings.HasPrefix(f.Remote, "127.0.0.1:") {
			t.Errorf("auth.failed entry: %+v", f)
		}
	}
	mu.Lock()
	now = now.Add(10 * time.Second) // one more entry's worth of budget
	mu.Unlock()
	if code, _ := a.call("", "GET", "/api/v1/runs", nil); code != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d", code)
	}
	failed = a.entries("?action=auth.failed")
	if len(failed) != 6 || failed[5].Detail != "GET /api/v1/runs: no bearer token (296 more from this host not recorded)" {
		t.Fatalf("auth.failed after the budget refilled: %+v", failed)
	}
	secrets := []string{auditToken, auditCIToken, "guess-"}
	want := 9 // run.started, 2 token.used, 6 auth.failed
	if cancelCode == http.StatusAccepted {
		want++ // run.cancelled
	}
	if n := a.streamHolds(secrets...); n != want {
		t.Errorf("the audit stream holds %d messages, want %d", n, want)
	}
}
