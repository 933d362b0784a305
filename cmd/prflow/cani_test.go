package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const caniPolicy = `policy.default: role:readonly
policy.csv: |
  p, role:release, *, *, */prod, allow
  p, role:dev, *, *, */dev, allow
  p, role:dev, runs, cancel, web/dev, deny
  g, release-managers, role:release
  g, developers, role:dev
`

// TestCanIOffline: yes exits 0, no exits 1 with the reason; globs, groups and deny decide
// as on the server; mistakes are named.
func TestCanIOffline(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "rbac.yaml")
	if err := os.WriteFile(pol, []byte(caniPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		yes  bool
		msg  string
	}{
		{[]string{"cancel", "runs", "web/prod", "--as", "alice", "--groups", "release-managers"}, true, ""},
		{[]string{"cancel", "runs", "web/prod", "--as", "bob", "--groups", "developers"}, false, "bob (groups developers) may not cancel runs web/prod"},
		{[]string{"start", "runs", "api/dev", "--as", "bob", "--groups", "developers"}, true, ""},
		{[]string{"cancel", "runs", "web/dev", "--as", "bob", "--groups", "developers"}, false, "may not cancel runs web/dev"}, // deny wins
		{[]string{"get", "audit", "*", "--as", "nobody"}, true, ""},                                                            // default role:readonly
		{[]string{"rollback", "environments", "web/prod", "--as", "nobody"}, false, "nobody may not rollback environments web/prod"},
	} {
		out, err := run(t, append(append([]string{"can-i"}, c.args...), "--rbac", pol)...)
		if c.yes && (err != nil || strings.TrimSpace(out) != "yes") {
			t.Errorf("%v: %q %v, want yes", c.args, out, err)
		}
		if !c.yes {
			var ec exitCoder
			if err == nil || !asExit(err, &ec) || ec.ExitCode() != 1 || strings.TrimSpace(out) != "no" || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%v: %q %v, want no (exit 1) with %q", c.args, out, err, c.msg)
			}
		}
	}
	bad := writeFile(t, dir, "bad.yaml", "policy.csv: |\n  p, x, runs, get, */*\n  p, x, runs, fly, */*\n")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"fly", "runs", "web/prod", "--rbac", pol, "--as", "a"}, `action "fly": resource runs takes get, start, cancel, retry`},
		{[]string{"get", "deploys", "web/prod", "--rbac", pol, "--as", "a"}, `resource "deploys"`},
		{[]string{"get", "runs", "prod", "--rbac", pol, "--as", "a"}, `object "prod": want PIPELINE/ENV`},
		{[]string{"get", "runs", "web/prod", "--rbac", pol}, "--rbac FILE needs --as USER"},
		{[]string{"get", "runs", "web/prod", "--as", "a"}, "--as and --groups need --rbac FILE"},
		{[]string{"get", "runs", "web/prod", "--rbac", bad, "--as", "a"}, bad + `:3: resource runs has no action "fly"`},
		{[]string{"get", "runs", "web/prod", "--rbac", filepath.Join(dir, "none.yaml"), "--as", "a"}, "no such file"},
	} {
		if _, err := run(t, append([]string{"can-i"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v, want %q", c.args, err, c.msg)
		}
	}
}

// TestServerRBAC: prflow server --rbac decides the API (can-i asks it for the token's user,
// cancel is refused with the permission named); without --rbac it warns at start.
func TestServerRBAC(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PRFLOW_TEST_ALICE", "alice-token-0123456789")
	t.Setenv("PRFLOW_TEST_BOB", "bob-token-01234567890")
	tokens := writeFile(t, dir, "tokens.yaml", "tokens:\n  - {user: alice, groups: [release-managers], token: env:PRFLOW_TEST_ALICE}\n  - {user: bob, groups: [developers], token: env:PRFLOW_TEST_BOB}\n")
	pol := writeFile(t, dir, "rbac.yaml", caniPolicy)
	addr := startServer(t, "--tokens", tokens, "--rbac", pol, "--data-dir", filepath.Join(dir, "nats"))
	alice := []string{"--server", "http://" + addr, "--token", "env:PRFLOW_TEST_ALICE"}
	bob := []string{"--server", "http://" + addr, "--token", "env:PRFLOW_TEST_BOB"}
	if out, err := run(t, append([]string{"can-i", "cancel", "runs", "web/prod"}, alice...)...); err != nil || strings.TrimSpace(out) != "yes" {
		t.Fatalf("alice: %q %v", out, err)
	}
	if out, err := run(t, append([]string{"can-i", "cancel", "runs", "web/prod"}, bob...)...); err == nil || strings.TrimSpace(out) != "no" || !strings.Contains(err.Error(), "bob (groups developers) may not cancel runs web/prod") {
		t.Fatalf("bob: %q %v", out, err)
	}
	p := writeFile(t, dir, "web.yaml", "name: web\nenvironments: [{name: prod}]\nstages:\n  - {id: prod, environment: prod, steps: [{id: w, type: Approval, timeout: 5m, with: {approvers: {users: [alice]}}}]}\n")
	out, err := run(t, append([]string{"run", p}, alice...)...)
	if err != nil {
		t.Fatalf("run: %v %s", err, out)
	}
	id := strings.Fields(out)[1]
	if _, err := run(t, append([]string{"cancel", id}, bob...)...); err == nil || !strings.Contains(err.Error(), "may not cancel runs web/prod") {
		t.Fatalf("bob's cancel: %v", err)
	}
	if out, err := run(t, append([]string{"cancel", id}, alice...)...); err != nil {
		t.Fatalf("alice's cancel: %v %s", err, out)
	}

	// Without --rbac: a warning at start.
	out2 := startCmd(t, "server", "--listen", freeAddr(t), "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats2"))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out2.String(), "--rbac is unset: every authenticated caller may do everything") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning without --rbac:\n%s", out2)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
