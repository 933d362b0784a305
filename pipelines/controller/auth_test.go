package controller

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm/connector"
)

// The tokens file takes the connectors file's secret syntax (one resolver), refuses a token
// written in the file, and reports each problem as file:line:col: field without the token.
func TestLoadAuthSecretSyntaxAndErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PRFLOW_TEST_TOK", "env-token-0123456789")
	t.Setenv("PRFLOW_TEST_SHORT", "short")
	_ = os.WriteFile(filepath.Join(dir, "carol.tok"), []byte("file-token-0123456789\n"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "empty.tok"), []byte("\n"), 0o600)

	good := "tokens:\n" +
		"  - user: alice\n    groups: [release]\n    token: env:PRFLOW_TEST_TOK\n    name: ci\n" +
		"  - user: bob\n    token: sha256:" + sha256hex("sha-token-0123456789") + "\n" +
		"  - user: carol\n    token: file:carol.tok\n" // relative to the tokens file
	p := filepath.Join(dir, "tokens.yaml")
	_ = os.WriteFile(p, []byte(good), 0o600)
	a, err := LoadAuth(p)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{"env-token-0123456789": "alice", "sha-token-0123456789": "bob", "file-token-0123456789": "carol"} {
		r := httptest.NewRequest("GET", "/api/v1/runs", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if u, ok := a.Authenticate(r); !ok || u.Name != want {
			t.Errorf("token of %s: got %v %v", want, u, ok)
		}
	}
	// The audit log names the token by its name in the file, never by its value.
	for tok, want := range map[string]string{"env-token-0123456789": `token "ci" of alice`, "sha-token-0123456789": "token of bob"} {
		r := httptest.NewRequest("POST", "/api/v1/runs", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if u, _ := a.Authenticate(r); u.TokenLabel() != want {
			t.Errorf("TokenLabel = %q, want %q", u.TokenLabel(), want)
		}
	}
	anon := &Auth{Anonymous: &User{Name: "dev"}}
	if u, _ := anon.Authenticate(httptest.NewRequest("POST", "/api/v1/runs", nil)); u.TokenLabel() != "" {
		t.Errorf("the anonymous user of prflow dev has a token label: %q", u.TokenLabel())
	}

	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"plain token refused", "tokens:\n  - user: dan\n    token: plain-token-0123456789\n",
			[]string{"t.yaml:3:12: tokens[0].token:", "want env:NAME, file:PATH or sha256:"}},
		{"typo in the prefix", "tokens:\n  - user: dan\n    token: evn:PRFLOW_TEST_TOK\n",
			[]string{"t.yaml:3:12: tokens[0].token:", "secrets cannot be written in this file"}},
		{"short token", "tokens:\n  - user: dan\n    token: env:PRFLOW_TEST_SHORT\n",
			[]string{"t.yaml:3:12: tokens[0].token: user dan:", "shorter than 8"}},
		{"unset env", "tokens:\n  - user: dan\n    token: env:PRFLOW_NOT_SET_ANYWHERE\n",
			[]string{"t.yaml:3:12", "PRFLOW_NOT_SET_ANYWHERE is not set"}},
		{"empty file", "tokens:\n  - user: dan\n    token: file:empty.tok\n", []string{"t.yaml:3:12", "is empty"}},
		{"bad digest", "tokens:\n  - user: dan\n    token: sha256:abc\n", []string{"t.yaml:3:12", "64 hex digits"}},
		{"unknown field", "tokens:\n  - user: dan\n    tokn: env:PRFLOW_TEST_TOK\n", []string{"t.yaml:3:5: tokens[0].tokn: unknown field", "t.yaml:2:5: tokens[0].token: required"}},
		{"name not a string", "tokens:\n  - user: dan\n    token: env:PRFLOW_TEST_TOK\n    name: [a, b]\n", []string{"t.yaml:4:11: tokens[0].name: want a name"}},
		{"missing user", "tokens:\n  - token: env:PRFLOW_TEST_TOK\n", []string{"t.yaml:2:5: tokens[0].user: required"}},
		{"groups not a list", "tokens:\n  - user: dan\n    groups: release\n    token: env:PRFLOW_TEST_TOK\n", []string{"t.yaml:3:13: tokens[0].groups: want a list"}},
		{"same token twice", "tokens:\n  - user: a\n    token: env:PRFLOW_TEST_TOK\n  - user: b\n    token: env:PRFLOW_TEST_TOK\n",
			[]string{"t.yaml:5:12: tokens[1].token: user b has the same token as tokens[0]"}},
		{"not a list", "tokens: {user: a}\n", []string{"t.yaml:1:9: tokens: want a list"}},
		{"empty", "", []string{"t.yaml: empty file"}},
		{"key given twice", "tokens:\n  - user: dan\n    user: eve\n    token: env:PRFLOW_TEST_TOK\n", []string{"t.yaml:3:5: tokens[0].user: set twice (first at line 2)"}},
		{"group not a name", "tokens:\n  - user: dan\n    groups: [ops, {a: b}]\n    token: env:PRFLOW_TEST_TOK\n", []string{"t.yaml:3:19: tokens[0].groups[1]: want a string, got a mapping"}},
		{"entry not a mapping", "tokens:\n  - dan\n", []string{`t.yaml:2:5: tokens[0]: want a mapping, got "dan"`}},
		{"invalid yaml", "tokens: [\n", []string{"t.yaml:1: YAML: did not find expected node content"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "t.yaml")
			_ = os.WriteFile(p, []byte(tc.yaml), 0o600)
			_, err := LoadAuth(p)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, secret := range []string{"plain-token-0123456789", "env-token-0123456789", "short\n", "\"short\""} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows a token: %v", err)
				}
			}
			var le *connector.LoadError
			if !errors.As(err, &le) {
				t.Errorf("not a *connector.LoadError: %T", err)
			}
		})
	}
}
