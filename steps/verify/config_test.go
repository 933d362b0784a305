package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm/connector"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadMetricsConnectors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("file-password-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `metrics:
  - name: prom
    provider: prometheus
    baseURL: http://127.0.0.1:9090/
    auth: {username: verify, password: file:pw}
    timeout: 5s
  - name: prom-bearer
    provider: prometheus
    baseURL: https://prom.example.com
    auth: {token: env:PROM_TOKEN}
  - name: dd
    provider: datadog
    site: datadoghq.eu
    auth: {apiKey: env:DD_API_KEY, appKey: env:DD_APP_KEY}
`
	set, err := Parse([]byte(src), "metrics.yaml", dir, env(map[string]string{"PROM_TOKEN": "prom-token-1", "DD_API_KEY": "dd-api-1", "DD_APP_KEY": "dd-app-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(set.Names(), ","); got != "prom,prom-bearer,dd" {
		t.Fatalf("names %s", got)
	}
	c := set.configs[0]
	if c.BaseURL != "http://127.0.0.1:9090" || c.Password.Value() != "file-password-1" || c.Timeout.String() != "5s" {
		t.Fatalf("prom config %+v", c)
	}
	if set.configs[2].BaseURL != "https://api.datadoghq.eu" {
		t.Fatalf("datadog site → %s", set.configs[2].BaseURL)
	}
	secrets := strings.Join(set.Secrets(), ",")
	for _, s := range []string{"file-password-1", "prom-token-1", "dd-api-1", "dd-app-1"} {
		if !strings.Contains(secrets, s) {
			t.Errorf("Secrets lacks %s (it would not be masked)", s)
		}
	}
	// Printing the configuration shows no credential.
	if out := fmt.Sprintf("%+v %#v %v", set.configs, set.configs, set); strings.Contains(out, "prom-token-1") || strings.Contains(out, "dd-api-1") || strings.Contains(out, "file-password-1") {
		t.Fatalf("a secret printed: %s", out)
	}
	// No backend linked into this test binary: named, with what there is.
	if _, err := set.Provider(context.Background(), "prom"); err == nil || !strings.Contains(err.Error(), `provider "prometheus" is not available`) {
		t.Fatalf("unlinked provider: %v", err)
	}
	if _, err := set.Provider(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), `metrics connector "nope": not defined in metrics.yaml (have: [prom prom-bearer dd])`) {
		t.Fatalf("unknown connector: %v", err)
	}
}

func TestLoadMetricsConnectorsErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"not a list", "metrics: prom", `metrics.yaml:1:10: metrics: want a list, got "prom"`},
		{"unknown top key", "connectors: []", `metrics.yaml:1:1: connectors: unknown field; known fields: metrics`},
		{"unknown provider", "metrics:\n  - {name: a, provider: graphite, baseURL: http://x}", `metrics[0].provider: unknown provider "graphite" (one of prometheus, datadog)`},
		{"no name", "metrics:\n  - {provider: prometheus, baseURL: http://x}", `metrics.yaml:2:5: metrics[0].name: required`},
		{"bad name", "metrics:\n  - {name: 'Prom Main', provider: prometheus, baseURL: http://x}", `metrics[0].name: "Prom Main": use lower-case`},
		{"prom without url", "metrics:\n  - {name: a, provider: prometheus}", `metrics[0].baseURL: required`},
		{"url with credentials", "metrics:\n  - {name: a, provider: prometheus, baseURL: 'http://u:p@x'}", `metrics[0].baseURL: must not contain credentials`},
		{"ftp url", "metrics:\n  - {name: a, provider: prometheus, baseURL: 'ftp://x'}", `want an http(s) URL, got scheme "ftp"`},
		{"typo field", "metrics:\n  - {name: a, provider: prometheus, baseUrl: http://x}", `metrics.yaml:2:37: metrics[0].baseUrl: unknown field (did you mean "baseURL"?)`},
		{"bearer and basic", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, auth: {token: env:T, username: u, password: env:T}}", `set either token (bearer) or username and password (basic)`},
		{"user without password", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, auth: {username: u}}", `basic auth needs both username and password`},
		{"datadog keys on prom", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, auth: {apiKey: env:T}}", `metrics[0].auth.apiKey: only for provider datadog`},
		{"datadog without keys", "metrics:\n  - {name: d, provider: datadog}", `metrics[0].auth: provider datadog needs auth.apiKey and auth.appKey`},
		{"datadog token", "metrics:\n  - {name: d, provider: datadog, auth: {token: env:T, apiKey: env:T, appKey: env:T}}", `metrics[0].auth.token: not for provider datadog`},
		{"bad site", "metrics:\n  - {name: d, provider: datadog, site: 'evil.com/x?', auth: {apiKey: env:T, appKey: env:T}}", `metrics[0].site: "evil.com/x?" is not a Datadog site`},
		{"site on prom", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, site: datadoghq.com}", `metrics[0].site: only for provider datadog`},
		{"secret inline", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, auth: {token: hunter2-inline}}", `metrics[0].auth.token: want env:NAME or file:PATH`},
		{"missing env", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, auth: {token: env:NOPE}}", `environment variable NOPE is not set`},
		{"bad timeout", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x, timeout: soon}", `metrics[0].timeout:`},
		{"duplicate", "metrics:\n  - {name: a, provider: prometheus, baseURL: http://x}\n  - {name: a, provider: prometheus, baseURL: http://y}", `metrics[1].name: connector "a" is already defined at line 2`},
		{"empty", "", "empty file"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "metrics.yaml", t.TempDir(), env(map[string]string{"T": "tok-value-1"}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "tok-value-1") || strings.Contains(err.Error(), "hunter2-inline") {
			t.Errorf("%s: error shows a secret: %v", c.name, err)
		}
		var le *connector.LoadError
		if c.name != "empty" && !errors.As(err, &le) {
			t.Errorf("%s: not a LoadError: %T", c.name, err)
		}
	}
}
