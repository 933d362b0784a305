package rbac

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustParse(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := Parse("policy.yaml", []byte(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

var (
	alice = Subject{Name: "alice", Groups: []string{"developers"}}
	bob   = Subject{Name: "bob"}
	carol = Subject{Name: "carol", Groups: []string{"developers", "release-managers"}}
)

func TestGlobObjects(t *testing.T) {
	p := mustParse(t, `
policy.csv: |
  p, bob, runs, cancel, web/prod-*, allow
  p, bob, runs, get, */prod, allow
  p, bob, runs, start, "{web,api}/dev", allow
`)
	for _, c := range []struct {
		act, obj string
		want     bool
	}{
		{Cancel, "web/prod-eu", true},
		{Cancel, "web/prod-", true},
		{Cancel, "web/prod", false},
		{Cancel, "api/prod-eu", false},
		{Cancel, "web/staging", false},
		{Get, "web/prod", true},
		{Get, "api/prod", true},
		{Get, "web/prod-eu", false},
		{Get, "a/b/prod", true}, // * crosses "/": an object is matched whole
		{Start, "web/dev", true},
		{Start, "api/dev", true},
		{Start, "db/dev", false},
		{Retry, "web/prod-eu", false},
	} {
		if got := p.Allowed(bob, Runs, c.act, c.obj); got != c.want {
			t.Errorf("bob %s runs %s = %v, want %v", c.act, c.obj, got, c.want)
		}
	}
	if p.Allowed(alice, Runs, Cancel, "web/prod-eu") {
		t.Error("alice has no line and no default role, but was allowed")
	}
}

func TestDenyOverridesAllow(t *testing.T) {
	p := mustParse(t, `
policy.default: role:readonly
policy.csv: |
  p, role:dev, *, *, *, allow
  p, role:dev, *, *, */prod, deny
  p, release-managers, runs, *, */prod, allow
  g, developers, role:dev
`)
	if !p.Allowed(alice, Runs, Cancel, "web/dev") {
		t.Error("developer may cancel in dev")
	}
	if p.Allowed(alice, Runs, Cancel, "web/prod") {
		t.Error("developer cancelled in prod despite the deny")
	}
	if !p.Allowed(alice, Runs, Get, "web/prod") {
		// The deny of role:dev covers get as well: deny wins even over the default role.
	} else {
		t.Error("deny on */prod for role:dev must win over role:readonly's get")
	}
	// carol is a developer and a release manager: the developers' deny wins over her allow.
	if p.Allowed(carol, Runs, Start, "web/prod") {
		t.Error("a deny of one of carol's groups must win over an allow of another")
	}
	if !p.Allowed(bob, Runs, Get, "web/prod") || p.Allowed(bob, Runs, Cancel, "web/prod") {
		t.Error("bob has only the default role:readonly")
	}
}

func TestGroupToRole(t *testing.T) {
	p := mustParse(t, `
policy.csv: |
  p, role:release, runs, *, web/prod, allow
  p, role:release, approvals, approve, web/prod, allow
  p, role:lead, runs, retry, */*, allow
  g, release-managers, role:release
  g, role:release, role:lead
  g, dave, role:admin
`)
	if !p.Allowed(carol, Runs, Cancel, "web/prod") || !p.Allowed(carol, Approvals, Approve, "web/prod") {
		t.Error("carol's group release-managers gives role:release")
	}
	if !p.Allowed(carol, Runs, Retry, "api/dev") {
		t.Error("role:release inherits role:lead")
	}
	if p.Allowed(alice, Runs, Cancel, "web/prod") {
		t.Error("alice is not a release manager")
	}
	if !p.Allowed(Subject{Name: "dave"}, Audit, Get, "*") || !p.Allowed(Subject{Name: "dave"}, Environments, Rollback, "x/y") {
		t.Error("dave is admin")
	}
	// A group called like a user gets nothing of hers: subjects are names, and a request
	// with no name is refused.
	if p.Allowed(Subject{Groups: []string{"release-managers"}}, Runs, Cancel, "web/prod") {
		t.Error("a request without a user name was allowed")
	}
}

func TestBuiltinRoles(t *testing.T) {
	p := mustParse(t, "policy.default: role:readonly\npolicy.csv: |\n  g, admins, role:admin\n")
	for _, r := range Resources {
		for _, a := range Actions[r] {
			if got := p.Allowed(bob, r, a, "web/prod"); got != (a == Get) {
				t.Errorf("readonly %s %s = %v", a, r, got)
			}
			if !p.Allowed(Subject{Name: "x", Groups: []string{"admins"}}, r, a, "web/prod") {
				t.Errorf("admin may not %s %s", a, r)
			}
		}
	}
	o := Open()
	if !o.IsOpen() || !o.Allowed(bob, Runs, Cancel, "a/b") {
		t.Error("without a policy file everyone is admin")
	}
}

// The file's keys are checked as every config file's: a misspelt key gets a hint, a key
// given twice names the first, a value of the wrong kind says what was wanted.
func TestParseKeyMistakes(t *testing.T) {
	for src, want := range map[string]string{
		"policy.defualt: role:readonly\npolicy.csv: |\n  g, a, role:admin\n":     `r.yaml:1:1: policy.defualt: unknown field (did you mean "policy.default"?)`,
		"policy.csv: |\n  g, a, role:admin\npolicy.csv: |\n  g, b, role:admin\n": "r.yaml:3:1: policy.csv: set twice (first at line 1)",
		"policy.default: [role:readonly]\npolicy.csv: |\n  g, a, role:admin\n":   "r.yaml:1:17: policy.default: want a role name like role:readonly, got a list",
		"policy.csv: |\n  g, a, role:admin\n    bad: indent\n x\n":               "r.yaml:4: YAML: ",
	} {
		if _, err := Parse("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v\nwant %q", src, err, want)
		}
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	_, err := Parse("rbac.yaml", []byte(`policy.default: role:nobody
policy.csv: |
  # comment
  p, role:dev, runs, approve, */dev, allow
  p, role:dev, deploys, get, */dev
  p, role:dev, runs, get, dev, allow
  p, role:dev, runs, get, */dev, maybe
  p, role:dev, runs, get, web/[dev, allow
  g, developers, role:deev
  x, what
  p, role:dev, runs
  g, bob, admin
extra: 1
`))
	if err == nil {
		t.Fatal("a broken policy loaded")
	}
	msg := err.Error()
	for _, want := range []string{
		"rbac.yaml:1:17: policy.default: role:nobody has no p line",
		`rbac.yaml:4: resource runs has no action "approve" (its actions: get, start, cancel, retry, or *)`,
		`rbac.yaml:5: unknown resource "deploys"`,
		`rbac.yaml:6: object "dev": want PIPELINE/ENV`,
		`rbac.yaml:7: effect "maybe": want allow or deny`,
		`rbac.yaml:8: object "web/[dev" is not a valid glob`,
		"rbac.yaml:9: role:deev has no p line",
		`rbac.yaml:10: unknown line kind "x"`,
		"rbac.yaml:11: want p, SUBJECT, RESOURCE, ACTION, PIPELINE/ENV[, allow|deny], got 3 fields",
		`rbac.yaml:12: g gives a role: want role:NAME as the third field, got "admin"`,
		`rbac.yaml:13:1: extra: unknown field; known fields: policy.default, policy.csv`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	for _, bad := range []string{"", "[1, 2]", "policy.csv: [a]", "policy.csv: >\n  p, a, runs, get, */*\n  g, b, role:admin\n", ":::"} {
		if _, err := Parse("f.yaml", []byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Errorf("Parse(%q) = %v, want an error naming the file", bad, err)
		}
	}
}

func TestDeniedNamesWhat(t *testing.T) {
	p := mustParse(t, "policy.csv: |\n  p, bob, runs, get, */*\n")
	err := p.Check(Subject{Name: "bob", Groups: []string{"ops"}}, Runs, Cancel, "web/prod")
	if err == nil || err.Error() != "permission denied: bob (groups ops) may not cancel runs web/prod (rbac: runs, cancel, web/prod)" {
		t.Fatalf("Check = %v", err)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	// Through a rename, as editors and Kubernetes ConfigMap updates do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const bobGets = "policy.csv: |\n  p, bob, runs, get, */*\n"
const bobCancels = "policy.csv: |\n  p, bob, runs, get, */*\n  p, bob, runs, cancel, web/*\n"

func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rbac.yaml")
	writeFile(t, path, bobGets)
	var logs bytes.Buffer
	f, err := OpenFile(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Policy().Allowed(bob, Runs, Cancel, "web/prod") {
		t.Fatal("bob may not cancel yet")
	}
	writeFile(t, path, bobCancels)
	if !f.Policy().Allowed(bob, Runs, Cancel, "web/prod") {
		t.Fatal("the request after the edit did not use the edited policy")
	}
	// An edit in place (same inode, same size would be possible) is seen too.
	if err := os.WriteFile(path, []byte(bobGets), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !f.Policy().Allowed(bob, Runs, Cancel, "web/prod") })

	// A broken edit: the last good policy stays, the error names the line, once in the log.
	writeFile(t, path, bobCancels+"  p, bob, runs, fly, */*\n")
	for range 3 {
		if f.Policy().Allowed(bob, Runs, Cancel, "web/prod") || !f.Policy().Allowed(bob, Runs, Get, "web/prod") {
			t.Fatal("a broken edit changed the policy in force")
		}
	}
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), path+":4: resource runs has no action \"fly\"") {
		t.Fatalf("Err = %v", err)
	}
	if n := strings.Count(logs.String(), "rbac policy not reloaded"); n != 1 {
		t.Fatalf("the broken edit was logged %d times, want once:\n%s", n, logs.String())
	}
	// The file removed: still the last good policy.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !f.Policy().Allowed(bob, Runs, Get, "web/prod") || f.Err() == nil {
		t.Fatal("a removed file must keep the last good policy and say why")
	}
	// Fixed: the error clears.
	writeFile(t, path, bobCancels)
	if !f.Policy().Allowed(bob, Runs, Cancel, "web/prod") || f.Err() != nil {
		t.Fatalf("the fixed file is not in force (err %v)", f.Err())
	}
	if _, err := OpenFile(filepath.Join(dir, "none.yaml"), nil); err == nil {
		t.Fatal("a missing file opened")
	}
	writeFile(t, path, "policy.csv: |\n  p, bob\n")
	if _, err := OpenFile(path, nil); err == nil || !strings.Contains(err.Error(), path+":2:") {
		t.Fatalf("a broken file opened: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConcurrentReload decides from many goroutines while the file flips between two
// policies: every answer is one of the two policies' (never a half-loaded one), run with -race.
func TestConcurrentReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rbac.yaml")
	writeFile(t, path, bobGets)
	f, err := OpenFile(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := f.Policy()
				// Both versions allow get; cancel only on web/*, never on api/*.
				if !p.Allowed(bob, Runs, Get, fmt.Sprintf("web/e%d", i)) || p.Allowed(bob, Runs, Cancel, "api/prod") {
					mu.Lock()
					bad = append(bad, "inconsistent answer")
					mu.Unlock()
				}
			}
		}()
	}
	for i := range 40 {
		text := bobGets
		if i%2 == 0 {
			text = bobCancels
		}
		if i%7 == 3 {
			text = "policy.csv: |\n  p, bob, runs\n" // broken: keeps the last good one
		}
		writeFile(t, path, text)
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d inconsistent answers during reloads", len(bad))
	}
}

// BenchmarkAllowed: one decision against a policy of roles, groups, globs and a deny (what
// every API request and every listed run costs).
func BenchmarkAllowed(b *testing.B) {
	p, err := Parse("bench.yaml", []byte(`policy.default: role:readonly
policy.csv: |
  p, role:dev, *, *, */dev, allow
  p, role:dev, runs, cancel, web/dev, deny
  p, role:release, *, *, "*/{prod,prod-*}", allow
  g, developers, role:dev
  g, release-managers, role:release
`))
	if err != nil {
		b.Fatal(err)
	}
	s := Subject{Name: "carol", Groups: []string{"developers", "release-managers", "qa"}}
	b.ReportAllocs()
	for b.Loop() {
		if !p.Allowed(s, Runs, Cancel, "web/prod-eu") {
			b.Fatal("refused")
		}
	}
}
