package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/scm/scmtest"
)

// lockedBuffer is written by the command's progress output and its log handler at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCtx(context.Background(), args...)
}

// TestDevRunsExample: by default prflow dev prints progress and no log lines (logs are at
// warn), step outputs as whole key: value lines, and a summary of what changed per
// environment (old → new value, PR, merge commit, app health, duration).
func TestDevRunsExample(t *testing.T) {
	out, err := run(t, "dev")
	if err != nil {
		t.Fatalf("prflow dev: %v\n%s", err, out)
	}
	for _, want := range []string{"stage dev: succeeded", "stage prod: succeeded", "succeeded",
		"summary: run ", "  dev: succeeded in ", "envs/dev/config.json image.tag: 1.4.1 → 1.5.0", "envs/prod/config.json image.tag: 1.4.1 → 1.5.0",
		"apps: web-prod Synced/Healthy (sync)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, re := range []string{`(?m)^\s+prlink: http://127\.0\.0\.1:\d+/acme/release\.git#pr/1$`, `(?m)^\s+commitId: [0-9a-f]{40}$`,
		`(?m)^    PR #3 http://\S+#pr/3 \(update\)$`, `(?m)^    merged as commit [0-9a-f]{40} \(merge\)$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "level=INFO") {
		t.Errorf("info logs mixed into the progress:\n%s", out)
	}
}

func TestDevFailingPipelineExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "fail.yaml", "name: f\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10s}, timeout: 200ms}\n")
	logFile := filepath.Join(dir, "dev.log")
	out, err := run(t, "dev", "--log-file", logFile, "--pipeline", p)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("want exit 2 with the timeout, got %v\n%s", err, out)
	}
	if !strings.Contains(out, "summary: run ") || !strings.Contains(out, "  s: failed") || strings.Contains(out, "level=") {
		t.Errorf("want a summary and no log lines:\n%s", out)
	}
	// --log-file takes the logs, at info.
	if logs, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(logs), "level=INFO") {
		t.Errorf("log file: %v\n%s", err, logs)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("name: g\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"), 0o644)
	_ = os.WriteFile(bad, []byte("name: b\nstages:\n  - id: s\n    steps: [{id: a, type: Nope}]\n"), 0o644)
	if out, err := run(t, "validate", good); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("good: %v %s", err, out)
	}
	out, err := run(t, "validate", good, bad)
	if err == nil || !strings.Contains(out, bad+":4:") || !strings.Contains(out, `unknown step type "Nope"`) {
		t.Fatalf("bad: %v\n%s", err, out)
	}
}

func TestServeRefusesNonLoopbackWithoutAuth(t *testing.T) {
	_, err := run(t, "dev", "--serve", "--listen", "0.0.0.0:0", "--log-level", "error")
	if err == nil || !strings.Contains(err.Error(), "only on loopback") {
		t.Fatalf("got %v", err)
	}
}

func TestServerAndClientCommands(t *testing.T) {
	dir := t.TempDir()
	tokens := cliTokens(t, dir)
	addr := startServer(t, "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"))
	p := writeFile(t, dir, "p.yaml", "name: cli\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n")
	common := []string{"--server", "http://" + addr, "--token", "env:PRFLOW_TEST_TOKEN"}
	out, err := run(t, append([]string{"run", p}, common...)...)
	if err != nil || !strings.Contains(out, "started") {
		t.Fatalf("run: %v %s", err, out)
	}
	id := strings.Fields(out)[1]
	out, err = run(t, append([]string{"status", id}, common...)...)
	if err != nil || !strings.Contains(out, "run "+id) {
		t.Fatalf("status: %v %s", err, out)
	}
	if _, err := run(t, "status", id, "--server", "http://"+addr, "--token", "wrong-token-xx"); err == nil || !strings.Contains(err.Error(), "bearer token") ||
		!strings.Contains(err.Error(), "--token or PRFLOW_TOKEN") || strings.Contains(err.Error(), "{") {
		t.Fatalf("bad token: want the server's reason and a hint at --token/PRFLOW_TOKEN, got %v", err)
	}
	// PRFLOW_TOKEN takes the same env:/file: syntax as --token.
	tokFile := writeFile(t, dir, "token", "cli-token-0123456789\n")
	t.Setenv("PRFLOW_TOKEN", "file:"+tokFile)
	if out, err := run(t, "status", id, "--server", "http://"+addr); err != nil || !strings.Contains(out, "run "+id) {
		t.Fatalf("PRFLOW_TOKEN=file:PATH: %v %s", err, out)
	}
	t.Setenv("PRFLOW_TOKEN", "file:"+filepath.Join(dir, "nope"))
	if _, err := run(t, "status", id, "--server", "http://"+addr); err == nil || !strings.Contains(err.Error(), "PRFLOW_TOKEN: read secret file") {
		t.Fatalf("PRFLOW_TOKEN=file:missing: %v", err)
	}
	t.Setenv("PRFLOW_TOKEN", "")
	if _, err := run(t, "logs", id, "--server", "http://"+addr); err == nil || !strings.Contains(err.Error(), "no token given") {
		t.Fatalf("logs without a token: %v", err)
	}
	if _, err := run(t, "logs", id, "--server", "http://"+freeAddr(t), "--token", "x"); err == nil || !strings.Contains(err.Error(), "is `prflow server` running?") {
		t.Fatalf("logs with no server: %v", err)
	}
}

func TestConnectorsCheck(t *testing.T) {
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", map[string]string{"a.txt": "x\n"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PRFLOW_TEST_GH", scmtest.DefaultToken)
	t.Setenv("PRFLOW_TEST_GH_BAD", "wrong-token-value")
	p := filepath.Join(t.TempDir(), "connectors.yaml")
	_ = os.WriteFile(p, []byte("connectors:\n  - name: good\n    provider: github\n    baseURL: "+gh.APIURL()+"\n    auth: {token: env:PRFLOW_TEST_GH}\n"+
		"  - name: bad\n    provider: github\n    baseURL: "+gh.APIURL()+"\n    auth: {token: env:PRFLOW_TEST_GH_BAD}\n"), 0o600)
	out, err := run(t, "connectors", "check", p, "--repo", "good=acme/release", "--repo", "good=acme/missing")
	if err == nil {
		t.Fatalf("want failure:\n%s", out)
	}
	for _, want := range []string{"✓ good (github)", "✓ acme/release", "✗ acme/missing", "✗ bad (github)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "wrong-token-value") || strings.Contains(out, scmtest.DefaultToken) {
		t.Errorf("a token was printed:\n%s", out)
	}
	_ = os.WriteFile(p, []byte("connectors:\n  - name: x\n    provider: nosuch\n"), 0o600)
	if out, err := run(t, "connectors", "check", p); err == nil || !strings.Contains(err.Error()+out, "connectors.yaml:3") {
		t.Errorf("bad file: %v %s", err, out)
	}
}

// The second example: prod turns Degraded, and its rollback reverts the merge, merges the
// revert and syncs again; the run fails with the reason.
func TestDevRollbackExample(t *testing.T) {
	out, err := run(t, "dev", "--log-level", "warn", "--pipeline", "../../examples/pipelines/rollback.yaml")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "Degraded for longer than degradedStateTimeout") {
		t.Fatalf("want exit 2 with the degraded reason, got %v\n%s", err, out)
	}
	for _, want := range []string{"stage dev: succeeded", "rollback step prod.revert (RevertPR): succeeded",
		"rollback step prod.mergeRevert (MergePR): succeeded", "rollback step prod.resync (GitOpsSync): succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestStageGate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gate.yaml")
	_ = os.WriteFile(p, []byte(`
name: gated
service: {name: web}
environments:
  - {name: dev, clusters: [{name: dev-eu, agent: sim}]}
  - {name: staging, clusters: [{name: staging-eu, agent: sim}]}
stages:
  - id: dev
    environment: dev
    gate: {condition: '${{ all(apps, .health == "Healthy" && .sync == "Synced") }}', soak: 1500ms}
    steps:
      - {id: update, type: UpdateReleaseRepo, with: {connector: release, repo: acme/release, filePath: "envs/<+env.name>/config.json", variables: [{name: image.tag, value: "2.0"}]}}
      - {id: merge, type: MergePR}
      - {id: apps, type: FetchLinkedApps}
      - {id: sync, type: GitOpsSync, with: {waitTillHealthy: true}}
  - id: staging
    environment: staging
    gate: {condition: '<+apps[0].health> == "Degraded"', timeout: 2s}
    steps:
      - {id: apps, type: FetchLinkedApps}
`), 0o644)
	out, err := run(t, "dev", "--log-level", "warn", "--pipeline", p)
	if err == nil || !strings.Contains(err.Error(), `stage staging: step gate: timed out`) && !strings.Contains(err.Error(), "not met in time") {
		t.Fatalf("want the staging gate to fail in time, got %v\n%s", err, out)
	}
	if !strings.Contains(out, "step dev.gate (StageGate): waiting soaking") || !strings.Contains(out, "step dev.gate (StageGate): succeeded") {
		t.Errorf("dev gate did not soak then pass:\n%s", out)
	}
}

// startServer runs `prflow server --listen <free loopback port> --log-level warn ARGS…` until the
// test ends, waits until it is ready and returns its address; at the end the server must stop
// cleanly on cancel.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	t.Cleanup(startServerAt(t, addr, args...))
	return addr
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startServerAt starts a server on addr, waits until it is ready and returns a func that
// stops it (and checks that it stopped cleanly).
func startServerAt(t *testing.T, addr string, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetArgs(append([]string{"server", "--listen", addr, "--log-level", "warn"}, args...))
		done <- root.ExecuteContext(ctx)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server exit: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("server did not stop on cancel")
		}
	}
	for i := 0; i < 400; i++ {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	return stop
}

// writeFile writes src to dir/name (mode 0600: some are secrets) and returns its path.
func writeFile(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tokensFile writes dir/tokens.yaml with one token, user's, read from the environment
// variable env (set here to token); it returns the file's path.
func tokensFile(t *testing.T, dir, user, env, token string) string {
	t.Helper()
	t.Setenv(env, token)
	p := writeFile(t, dir, "tokens.yaml", "tokens:\n  - user: "+user+"\n    token: env:"+env+"\n")
	return p
}

// cliTokens is tokensFile for user cli with PRFLOW_TEST_TOKEN (the token the tests' clients send).
func cliTokens(t *testing.T, dir string) string {
	t.Helper()
	return tokensFile(t, dir, "cli", "PRFLOW_TEST_TOKEN", "cli-token-0123456789")
}

// badServerFlags is a `prflow server` that must refuse to start: flags args, or (file set) a
// config file with this content; want is in its error.
type badServerFlags struct {
	args []string
	file string
	want string
}

// checkServerRefuses runs each case's server (its config file written to cfg, its data in
// dataDir) and checks that it stops with the error it wants.
func checkServerRefuses(t *testing.T, tokens, cfg, dataDir string, cases []badServerFlags) {
	t.Helper()
	for _, tc := range cases {
		args := append([]string{"server", "--tokens", tokens, "--data-dir", dataDir}, tc.args...)
		if tc.file != "" {
			_ = os.WriteFile(cfg, []byte(tc.file), 0o644)
			args = append(args, "--config", cfg)
		}
		if _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: %v, want an error with %q", tc.args, tc.file, err, tc.want)
		}
	}
}

// goCmd runs a prflow command in the background: its output (stdout and stderr) goes to the
// returned buffer, its result to the channel.
func goCmd(ctx context.Context, args ...string) (*lockedBuffer, chan error) {
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetOut(out)
		root.SetErr(out)
		root.SetArgs(args)
		done <- root.ExecuteContext(ctx)
	}()
	return out, done
}

// waitOutput polls out until re matches it (a minute at most) and returns the submatches;
// failing, it says fail and the output.
func waitOutput(t *testing.T, out *lockedBuffer, re *regexp.Regexp, fail string) []string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", fail, out)
		}
	}
}

// startCmd runs a long-running prflow command (worker, agent) until the test ends.
func startCmd(t *testing.T, args ...string) *lockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, done := goCmd(ctx, args...)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("prflow %s: %v\n%s", args[0], err, out)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("prflow %s did not stop on cancel", args[0])
		}
	})
	return out
}
