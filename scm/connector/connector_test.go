package connector_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
)

const (
	ghToken = "ghp_env_secret_0123456789"
	glToken = "glpat-file-secret-abcdef"
)

func env(m map[string]string) connector.LoadOption {
	return connector.WithLookupEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testCA(t *testing.T) string {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

func testKey(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func TestLoadFullFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gl-token", glToken+"\n")
	writeFile(t, dir, "ca.pem", testCA(t))
	key := testKey(t)
	writeFile(t, dir, "app.pem", key)
	path := writeFile(t, dir, "connectors.yaml", `
connectors:
  - name: gh
    provider: github
    baseURL: https://github.example.com/api/v3
    auth:
      token: env:GH_TOKEN
      username: x-access-token
    caFile: ca.pem
    author: {name: prflow bot, email: bot@example.com}
    rateLimit: {rps: 2.5, burst: 5}
  - name: gl
    provider: gitlab
    auth: {token: "file:gl-token"}
    insecureSkipVerify: true
  - name: app
    provider: github
    auth:
      githubApp: {appID: 12, installationID: 34, privateKeyFile: app.pem}
  - name: dev
    provider: local
    baseURL: /srv/git
`)
	set, err := connector.Load(path, env(map[string]string{"GH_TOKEN": ghToken}))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(set.Names()); got != "[gh gl app dev]" {
		t.Fatalf("names = %s", got)
	}
	gh, _ := set.Config("gh")
	if gh.Auth.Token.Value() != ghToken || gh.Auth.Username != "x-access-token" || gh.BaseURL != "https://github.example.com/api/v3" ||
		len(gh.CA) == 0 || gh.Author.Email != "bot@example.com" || gh.RateLimit.RPS != 2.5 || gh.RateLimit.Burst != 5 ||
		gh.Source != path+":3" {
		t.Fatalf("gh = %+v", gh)
	}
	gl, _ := set.Config("gl")
	if gl.Auth.Token.Value() != glToken || !gl.InsecureSkipVerify {
		t.Fatalf("gl token from file (trimmed) = %v", gl.Auth.Token.Value() == glToken)
	}
	app, _ := set.Config("app")
	if app.Auth.GitHubApp == nil || app.Auth.GitHubApp.AppID != 12 || app.Auth.GitHubApp.InstallationID != 34 || app.Auth.GitHubApp.PrivateKey.Value() != key {
		t.Fatalf("app = %+v", app.Auth.GitHubApp)
	}
	secrets := set.Secrets()
	for _, want := range []string{ghToken, glToken, key} {
		if !contains(secrets, want) {
			t.Fatalf("Secrets() misses a credential (%d listed)", len(secrets))
		}
	}
	if _, err := gh.TLSConfig(); err != nil {
		t.Fatal(err)
	}

	// No representation of the configs shows a secret.
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("connector", "config", gh, "token", gh.Auth.Token, "app", app)
	js, _ := json.Marshal([]connector.Config{gh, gl, app})
	ym, _ := yaml.Marshal(gh)
	outputs := map[string]string{
		"%v": fmt.Sprintf("%v", gh), "%+v": fmt.Sprintf("%+v %+v", gh, app.Auth.GitHubApp), "%#v": fmt.Sprintf("%#v %#v", gh, gl),
		"%s": fmt.Sprintf("%s", gh.Auth.Token), "%x": fmt.Sprintf("%x", gh.Auth.Token), "%q": fmt.Sprintf("%q", gh.Auth.Token),
		"json": string(js), "yaml": string(ym), "slog": logs.String(), "set": fmt.Sprintf("%+v", set),
		"unexported field": fmt.Sprintf("%+v %#v", holder{gh, app}, holder{gl, app}),
	}
	for name, out := range outputs {
		for _, s := range []string{ghToken, glToken, "PRIVATE KEY", fmt.Sprintf("%x", ghToken)} {
			if strings.Contains(out, s) {
				t.Fatalf("%s output reveals a secret: %s", name, out)
			}
		}
	}
	if !strings.Contains(outputs["%v"], "[redacted]") {
		t.Fatalf("secret not marked as redacted: %s", outputs["%v"])
	}
}

// holder hides configs in unexported fields, where fmt cannot call their methods.
type holder struct{ a, b connector.Config }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestParseBareList(t *testing.T) {
	set, err := connector.Parse([]byte("- name: dev\n  provider: local\n  baseURL: http://git.local/repos\n"), "inline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := set.Config("dev"); !ok || c.BaseURL != "http://git.local/repos" {
		t.Fatalf("%+v", c)
	}
}

// TestLoadErrors checks each mistake is reported at its file:line:column and field, and that
// a secret written inline is never echoed.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "empty-token", "\n")
	writeFile(t, dir, "not-ca.pem", "hello")
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"unknown field with hint", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    baseUrl: /y\n",
			[]string{"c.yaml:5:5", "connectors[0].baseUrl", `did you mean "baseURL"`}},
		{"missing name", "connectors:\n  - provider: local\n    baseURL: /x\n", []string{"c.yaml:2:5", "connectors[0].name: required"}},
		{"bad name", "connectors:\n  - name: Bad Name\n    provider: local\n    baseURL: /x\n", []string{"c.yaml:2:11", "connectors[0].name"}},
		{"duplicate name", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n  - name: a\n    provider: local\n    baseURL: /y\n",
			[]string{"c.yaml:5:5", "connectors[1].name", "already defined at line 2"}},
		{"unknown provider", "connectors:\n  - name: a\n    provider: gitea\n", []string{"c.yaml:3:15", `unknown provider "gitea"`}},
		{"missing env", "connectors:\n  - name: a\n    provider: github\n    auth: {token: env:NOPE}\n",
			[]string{"c.yaml:4:19", "connectors[0].auth.token", "NOPE is not set"}},
		{"inline secret", "connectors:\n  - name: a\n    provider: github\n    auth:\n      token: ghp_inline_secret_value\n",
			[]string{"c.yaml:5:14", "connectors[0].auth.token", "want env:NAME or file:PATH"}},
		{"digest where the value is sent", "connectors:\n  - name: a\n    provider: github\n    auth: {token: sha256:0123}\n",
			[]string{"c.yaml:4:19", "connectors[0].auth.token", "sha256: is a digest"}},
		{"missing secret file", "connectors:\n  - name: a\n    provider: gitlab\n    auth: {token: file:nope.txt}\n",
			[]string{"c.yaml:4:19", "nope.txt", "no such file"}},
		{"empty secret file", "connectors:\n  - name: a\n    provider: gitlab\n    auth: {token: file:empty-token}\n",
			[]string{"connectors[0].auth.token", "is empty"}},
		{"no auth for a forge", "connectors:\n  - name: a\n    provider: bitbucket\n", []string{"c.yaml:2:5", "needs auth.token"}},
		{"http scheme required", "connectors:\n  - name: a\n    provider: github\n    baseURL: ftp://x\n    auth: {token: env:T}\n",
			[]string{"c.yaml:4:14", `scheme "ftp"`}},
		{"credentials in URL", "connectors:\n  - name: a\n    provider: github\n    baseURL: https://u:p@x\n    auth: {token: env:T}\n",
			[]string{"connectors[0].baseURL", "must not contain credentials"}},
		{"local without base", "connectors:\n  - name: a\n    provider: local\n", []string{"connectors[0].baseURL", "required for provider local"}},
		{"ca not pem", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    caFile: not-ca.pem\n",
			[]string{"c.yaml:5:13", "holds no PEM certificate"}},
		{"author without email", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    author: {name: bot}\n",
			[]string{"connectors[0].author", "needs both name and email"}},
		{"negative rps", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    rateLimit: {rps: -1}\n",
			[]string{"connectors[0].rateLimit.rps", "negative"}},
		{"burst not a number", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    rateLimit: {burst: lots}\n",
			[]string{"connectors[0].rateLimit.burst", "whole number"}},
		{"rps not a number", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    rateLimit: {rps: fast}\n",
			[]string{"c.yaml:5:", "connectors[0].rateLimit.rps", "want a number, got"}},
		{"rps a list", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    rateLimit: {rps: [1]}\n",
			[]string{"connectors[0].rateLimit.rps", "want a number, got"}},
		{"negative burst", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    rateLimit: {burst: -3}\n",
			[]string{"connectors[0].rateLimit.burst", "must not be negative"}},
		{"app id not whole", "connectors:\n  - name: a\n    provider: github\n    auth:\n      githubApp: {appID: 1.5, installationID: 2, privateKeyFile: none.pem}\n",
			[]string{"githubApp.appID", "want a whole number, got"}},
		{"insecure not bool", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    insecureSkipVerify: maybe\n",
			[]string{"connectors[0].insecureSkipVerify", "true or false"}},
		{"app on gitlab", "connectors:\n  - name: a\n    provider: gitlab\n    auth:\n      githubApp: {appID: 1, installationID: 2, privateKeyFile: none.pem}\n",
			[]string{"only for provider github", "none.pem"}},
		{"app incomplete", "connectors:\n  - name: a\n    provider: github\n    auth:\n      githubApp: {appID: 1}\n",
			[]string{"githubApp.installationID: required", "githubApp.privateKeyFile: required"}},
		{"not a list", "connectors: {name: a}\n", []string{"c.yaml:1:13", "want a list"}},
		{"no connectors key", "other: 1\n", []string{"unknown field"}},
		{"invalid yaml", "connectors: [\n", []string{"c.yaml:1: YAML: did not find expected node content"}},
		{"empty", "", []string{"empty file"}},
		{"key given twice", "connectors:\n  - name: a\n    provider: local\n    baseURL: /x\n    provider: github\n",
			[]string{"c.yaml:5:5: connectors[0].provider: set twice (first at line 3)"}},
		{"bad value and missing field together", "connectors:\n  - name: [a]\n    provider: local\n",
			[]string{"c.yaml:2:11: connectors[0].name: want a string, got a list", "connectors[0].baseURL: required for provider local"}},
		{"over the size limit", "connectors:\n" + strings.Repeat("  - {name: a, provider: local, baseURL: /x}\n", 5<<20/45), []string{"bytes; the limit is"}},
		{"an entry that is not a mapping", "connectors:\n  - github\n", []string{"c.yaml:2:5: connectors[0]: want a mapping, got \"github\""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, "c.yaml", tc.yaml)
			_, err := connector.Load(path, env(map[string]string{"T": "token-value-1234"}))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "ghp_inline_secret_value") || strings.Contains(err.Error(), "token-value-1234") {
				t.Fatalf("error echoes a secret: %v", err)
			}
			var le *connector.LoadError
			if !errors.As(err, &le) || le.File != path {
				t.Fatalf("not a *LoadError for %s: %T", path, err)
			}
		})
	}
}

func TestLoadReportsAllErrors(t *testing.T) {
	_, err := connector.Parse([]byte("connectors:\n  - name: a\n    provider: nope\n  - name: b\n    provider: local\n"), "c.yaml")
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:15") || !strings.Contains(err.Error(), "connectors[1].baseURL") {
		t.Fatalf("want both problems reported: %v", err)
	}
}

func TestProviderRegistryAndCache(t *testing.T) {
	reg := connector.NewRegistry()
	builds := 0
	var gotDeps connector.Deps
	reg.Register("local", func(c connector.Config, d connector.Deps) (scm.Provider, error) {
		builds++
		gotDeps = d
		return local.New(c.BaseURL)
	})
	set, err := connector.Parse([]byte("connectors:\n  - name: dev\n    provider: local\n    baseURL: /srv/git\n  - name: gh\n    provider: github\n    auth: {token: env:T}\n"),
		"c.yaml", connector.WithRegistry(reg), env(map[string]string{"T": "tok-123456"}), connector.WithDeps(connector.Deps{TempDir: "/scratch"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p1, err := set.Provider(ctx, "dev")
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := set.Provider(ctx, "dev")
	if p1 != p2 || builds != 1 || gotDeps.TempDir != "/scratch" || p1.Name() != "local" {
		t.Fatalf("provider not cached (%d builds) or deps lost (%+v)", builds, gotDeps)
	}
	if _, err := set.Provider(ctx, "nope"); !errors.Is(err, connector.ErrUnknownConnector) || !strings.Contains(err.Error(), "[dev gh]") {
		t.Fatalf("unknown connector: %v", err)
	}
	if _, err := set.Provider(ctx, "gh"); err == nil || !strings.Contains(err.Error(), `provider "github" is not available`) || !strings.Contains(err.Error(), "[local]") {
		t.Fatalf("unregistered driver: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("registering a provider twice must panic")
			}
		}()
		reg.Register("local", func(connector.Config, connector.Deps) (scm.Provider, error) { return nil, nil })
	}()
	if !contains(connector.Registered(), "local") {
		t.Fatalf("the local driver registers itself in the default registry: %v", connector.Registered())
	}
}

// TestCheck runs the real local driver against a git smart-HTTP server.
func TestCheck(t *testing.T) {
	srv := scmtest.NewGitServer(t)
	if _, err := srv.CreateRepo("acme", "release", map[string]string{"a": "a"}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`connectors:
  - name: good
    provider: local
    baseURL: %s
    auth: {token: env:GOOD, username: bot}
    author: {name: prflow, email: prflow@example.com}
  - name: badtoken
    provider: local
    baseURL: %s
    auth: {token: env:BAD}
  - name: gh
    provider: github
    auth: {token: env:GOOD}
`, srv.URL(), srv.URL())
	reg := connector.NewRegistry()
	reg.Register("local", local.FromConfig)
	set, err := connector.Parse([]byte(cfg), "c.yaml", connector.WithRegistry(reg),
		env(map[string]string{"GOOD": scmtest.DefaultToken, "BAD": "wrong-token-value"}), connector.WithDeps(connector.Deps{TempDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	results := set.Check(context.Background(), map[string][]scm.Repo{
		"good":     {"acme/release", "acme/missing"},
		"badtoken": {"acme/release"},
		"ghost":    {"x/y"},
	})
	if len(results) != 4 {
		t.Fatalf("%d results: %+v", len(results), results)
	}
	good, bad, gh, ghost := results[0], results[1], results[2], results[3]
	if good.Err != nil || good.Identity.Login != "bot" || good.Identity.Email != "prflow@example.com" || good.OK() ||
		good.Repos[0].Err != nil || !errors.Is(good.Repos[1].Err, scm.ErrNotFound) {
		t.Fatalf("good = %+v", good)
	}
	if bad.OK() || !errors.Is(bad.Repos[0].Err, scm.ErrUnauthorized) || strings.Contains(bad.Repos[0].Err.Error(), "wrong-token-value") {
		t.Fatalf("badtoken = %+v", bad)
	}
	if gh.OK() || gh.Err == nil || !strings.Contains(gh.Err.Error(), "not available") {
		t.Fatalf("gh = %+v", gh)
	}
	if ghost.Connector != "ghost" || !errors.Is(ghost.Err, connector.ErrUnknownConnector) {
		t.Fatalf("ghost = %+v", ghost)
	}
}

func TestHTTPClientUsesTransportStack(t *testing.T) {
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.WriteHeader(204)
	}))
	defer srv.Close()
	set, err := connector.Parse([]byte("- name: gh\n  provider: github\n  auth: {token: env:T}\n  rateLimit: {rps: 100, burst: 10}\n"), "c.yaml", env(map[string]string{"T": "tok-abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := set.Config("gh")
	client, err := c.HTTPClient(connector.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(srv.URL)
	if err != nil || resp.StatusCode != 204 || auth != "" {
		t.Fatalf("%v %v (the transport must not add credentials itself: %q)", resp, err, auth)
	}
	resp.Body.Close()
}

func TestStatic(t *testing.T) {
	var p scm.Provider // nil is enough: Static only looks names up
	s := connector.Static{"release": p, "app": p}
	if _, err := s.Provider(context.Background(), "release"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Provider(context.Background(), "relase")
	if err == nil || !strings.Contains(err.Error(), `"relase"`) || !strings.Contains(err.Error(), "[app release]") {
		t.Errorf("unknown connector: %v", err)
	}
}

// A REST driver's factory starts from ForgeClient: a GitHub App is refused by the forges that
// take only tokens, naming the connector and never the key; a bad CA fails the same way.
func TestForgeClient(t *testing.T) {
	app := connector.Config{Name: "gl", Provider: "gitlab", Auth: connector.Auth{
		GitHubApp: &connector.GitHubApp{AppID: 1, InstallationID: 2, PrivateKey: connector.NewSecret("-----BEGIN KEY-----sekrit")}}}
	if _, err := app.ForgeClient(connector.Deps{}, "gitlab", false); err == nil ||
		err.Error() != "gitlab connector gl: auth.githubApp is for GitHub; use auth.token" {
		t.Fatalf("app on a token-only forge: %v", err)
	}
	if hc, err := app.ForgeClient(connector.Deps{}, "github", true); err != nil || hc == nil {
		t.Fatalf("app on GitHub: %v", err)
	}
	badCA := connector.Config{Name: "gh", Provider: "github", CA: []byte("not a PEM"), Auth: connector.Auth{Token: connector.NewSecret("tok-abcdef")}}
	_, err := badCA.ForgeClient(connector.Deps{}, "github", true)
	if err == nil || !strings.HasPrefix(err.Error(), "github connector gh: ") || strings.Contains(err.Error(), "tok-abcdef") {
		t.Fatalf("bad CA: %v", err)
	}
	cause := errors.New("boom")
	if err := connector.ForgeError("bitbucket", badCA, cause); !errors.Is(err, cause) || err.Error() != "bitbucket connector gh: boom" {
		t.Fatalf("ForgeError: %v", err)
	}
}

// BuildForge hands a driver's constructor the connector's client and names its errors; a
// GitHub App on a token-only forge is refused before the constructor runs.
func TestBuildForge(t *testing.T) {
	c := connector.Config{Name: "gl", Provider: "gitlab", Auth: connector.Auth{Token: connector.NewSecret("tok-abcdef")}}
	var got *http.Client
	p, err := connector.BuildForge("gitlab", c, connector.Deps{}, false, func(hc *http.Client) (*local.Provider, error) {
		got = hc
		return local.New(t.TempDir())
	})
	if err != nil || p == nil || got == nil {
		t.Fatalf("BuildForge = %v, %v (client %v)", p, err, got)
	}

	cause := errors.New("bad base URL")
	p, err = connector.BuildForge("gitlab", c, connector.Deps{}, false, func(*http.Client) (*local.Provider, error) {
		return nil, cause
	})
	if p != nil || !errors.Is(err, cause) || err.Error() != "gitlab connector gl: bad base URL" {
		t.Fatalf("constructor error: %v, %v", p, err)
	}

	app := c
	app.Auth = connector.Auth{GitHubApp: &connector.GitHubApp{AppID: 1, InstallationID: 2, PrivateKey: connector.NewSecret("-----BEGIN KEY-----sekrit")}}
	built := false
	_, err = connector.BuildForge("gitlab", app, connector.Deps{}, false, func(*http.Client) (*local.Provider, error) {
		built = true
		return nil, nil
	})
	if err == nil || built || strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("app on a token-only forge: %v (constructor ran: %v)", err, built)
	}
}
