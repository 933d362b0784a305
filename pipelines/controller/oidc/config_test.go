package oidc_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines/controller/oidc"
)

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SHORT_KEY", "too-short")
	t.Setenv("THE_SECRET", "s3cr3t-value-never-printed")
	file := filepath.Join(dir, "oidc.yaml")
	writeFile(t, file, `issuer: ftp://idp.example.com
clientID: prflow
clientSecret: s3cr3t-written-in-the-file
scopes: [profile]
groupClaim: groups
sessionKey: env:SHORT_KEY
audiences: prflow
`)
	_, err := oidc.LoadConfig(file, "https://prflow.example.com")
	if err == nil {
		t.Fatal("bad file accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		file + ":1:9: issuer: want an https URL",
		file + ":3:15: clientSecret: want env:NAME or file:PATH",
		file + ":4:9: scopes: must contain openid",
		file + ":5:1: groupClaim: unknown field",
		file + ":6:13: sessionKey: the key is shorter than 32 characters",
		file + ":7:12: audiences: want a list of strings",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "too-short") {
		t.Fatalf("a secret is in the error:\n%s", msg)
	}

	writeFile(t, file, "issuer: https://idp.example.com\nclientID: prflow\nclientSecret: env:THE_SECRET\nsessionKey: env:THE_SECRET_KEY_UNSET\n")
	if _, err := oidc.LoadConfig(file, "https://prflow.example.com"); err == nil || !strings.Contains(err.Error(), ":4:13: sessionKey:") {
		t.Fatalf("unset env: %v", err)
	}
	t.Setenv("KEY", strings.Repeat("k", 40))
	writeFile(t, file, "issuer: https://idp.example.com\nclientID: prflow\nclientSecret: env:THE_SECRET\nsessionKey: env:KEY\n")
	if _, err := oidc.LoadConfig(file, ""); err == nil || !strings.Contains(err.Error(), "--oidc needs --external-url") {
		t.Fatalf("no external URL: %v", err)
	}
	if _, err := oidc.LoadConfig(file, "http://prflow.example.com"); err == nil || !strings.Contains(err.Error(), "https --external-url") {
		t.Fatalf("http external URL off loopback: %v", err)
	}
	c, err := oidc.LoadConfig(file, "https://prflow.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	if c.RedirectURL != "https://prflow.example.com/ui/oidc/callback" || c.GroupsClaim != "groups" || c.Name != "idp.example.com" ||
		strings.Join(c.Audiences, ",") != "prflow" || c.ClientSecret.Value() != "s3cr3t-value-never-printed" {
		t.Fatalf("defaults: %+v", c)
	}
}

// Mistakes in the file's YAML itself are reported at their line and column, with a hint for
// a misspelt key.
func TestLoadConfigYAMLMistakes(t *testing.T) {
	t.Setenv("THE_SECRET", "s3cr3t-value-never-printed")
	t.Setenv("KEY", strings.Repeat("k", 40))
	const good = "issuer: https://idp.example.com\nclientID: prflow\nclientSecret: env:THE_SECRET\nsessionKey: env:KEY\n"
	for _, tc := range []struct{ name, src, want string }{
		{"misspelt key", good + "groupClaim: groups\n", `:5:1: groupClaim: unknown field (did you mean "groupsClaim"?)`},
		{"key set twice", good + "clientID: other\n", ":5:1: clientID: set twice (first at line 2)"},
		{"not a mapping", "- issuer\n", ":1:1: want a mapping, got a list"},
		{"empty list item", good + "scopes: [openid, '']\n", ":5:18: scopes[1]: want a non-empty string"},
		{"syntax error", good + "scopes: [openid\n", ":5: YAML: did not find expected ',' or ']'"},
		{"empty", "", ": empty file: want issuer, clientID, clientSecret, sessionKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "oidc.yaml")
			writeFile(t, file, tc.src)
			_, err := oidc.LoadConfig(file, "https://prflow.example.com")
			if err == nil || !strings.Contains(err.Error(), file+tc.want) {
				t.Fatalf("got %v\nwant %q", err, file+tc.want)
			}
		})
	}
}
