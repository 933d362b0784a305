package main

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines/controller/oidc/oidctest"
)

// TestCanIOIDCLogin: `prflow server --oidc FILE --rbac FILE`; bob (group dev at the provider)
// signs in with `prflow login` (device flow), and `prflow can-i` is answered by the server for
// him: his groups from the ID token decide, as in the UI and the API.
func TestCanIOIDCLogin(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, dir, "rbac.yaml", "policy.default: role:readonly\npolicy.csv: |\n  p, role:release-manager, runs, *, */*, allow\n  p, role:developer, *, *, */dev, allow\n  g, release, role:release-manager\n  g, dev, role:developer\n")
	base, idp := startOIDCServer(t, dir, oidctest.User{ID: "u-bob", Username: "bob", Email: "bob@example.com", Groups: []string{"dev"}}, "--rbac", pol)

	// Not signed in: can-i cannot answer, and says how to sign in (not "no").
	if out, err := run(t, "can-i", "cancel", "runs", "web/dev", "--server", base); err == nil || !strings.Contains(err.Error(), "prflow login") {
		t.Fatalf("can-i before login: %q %v, want a hint at prflow login", out, err)
	}
	loginByDevice(t, base, idp, "bob")

	for _, c := range []struct {
		args []string
		yes  bool
		msg  string
	}{
		{[]string{"cancel", "runs", "web/dev"}, true, ""},
		{[]string{"approve", "approvals", "api/dev"}, true, ""},
		{[]string{"cancel", "runs", "web/prod"}, false, "bob (groups dev) may not cancel runs web/prod"},
		{[]string{"rollback", "environments", "web/prod"}, false, "bob (groups dev) may not rollback environments web/prod"},
		{[]string{"get", "runs", "web/prod"}, true, ""}, // the default role
	} {
		o, err := run(t, append(append([]string{"can-i"}, c.args...), "--server", base)...)
		if c.yes && (err != nil || strings.TrimSpace(o) != "yes") {
			t.Errorf("%v: %q %v, want yes", c.args, o, err)
		}
		if !c.yes {
			var ec exitCoder
			if err == nil || !asExit(err, &ec) || ec.ExitCode() != 1 || strings.TrimSpace(o) != "no" || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%v: %q %v, want no (exit 1) with %q", c.args, o, err, c.msg)
			}
		}
	}
	// The server answers only for the signed-in user: --as needs a policy file here.
	if _, err := run(t, "can-i", "cancel", "runs", "web/prod", "--as", "alice", "--server", base); err == nil || !strings.Contains(err.Error(), "--as and --groups need --rbac FILE") {
		t.Fatalf("can-i --as against the server: %v", err)
	}
}
