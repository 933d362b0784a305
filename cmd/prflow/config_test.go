package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// roleCommand returns the named command of a fresh root with its flags parsed from args, as
// cobra does before PreRunE.
func roleCommand(t *testing.T, role string, args ...string) *cobra.Command {
	t.Helper()
	root := newRoot()
	for _, c := range root.Commands() {
		if c.Name() == role {
			if err := c.ParseFlags(args); err != nil {
				t.Fatalf("parse %v: %v", args, err)
			}
			return c
		}
	}
	t.Fatalf("no command %q", role)
	return nil
}

func flagValue(t *testing.T, c *cobra.Command, name string) string {
	t.Helper()
	f := c.Flags().Lookup(name)
	if f == nil {
		t.Fatalf("prflow %s has no flag %q", c.Name(), name)
	}
	return f.Value.String()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prflow.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clearConfigEnv unsets the variables the role flags read, so the machine's environment does not
// change what the file sets.
func clearConfigEnv(t *testing.T) {
	for _, k := range []string{"PRFLOW_NATS", "PRFLOW_SERVER", "PRFLOW_AGENT_ID", "POD_NAME", "PRFLOW_CONFIG", "PRFLOW_TOKEN"} {
		t.Setenv(k, "")
	}
}

// The examples in deploy/config are what the Kubernetes manifests mount: each must load into its
// role strictly and set what it says.
func TestConfigExamplesLoad(t *testing.T) {
	clearConfigEnv(t)
	cases := []struct {
		role string
		want map[string]string
	}{
		{"server", map[string]string{"nats": "nats://nats:4222", "replicas": "3", "listen": ":8080", "log-format": "json",
			"tokens": "/etc/prflow/secrets/tokens.yaml", "pr-comments": "true", "audit-max-age": "2160h0m0s", "audit-max-bytes": "10737418240"}},
		{"worker", map[string]string{"nats": "nats://nats:4222", "pool": "[default]", "concurrency": "4", "ack-wait": "1m0s",
			"max-deliver": "5", "connectors": "/etc/prflow/secrets/connectors.yaml"}},
		{"agent", map[string]string{"nats": "nats://nats:4222", "agent-id": "prod-eu", "argocd-timeout": "30s",
			"argocd-token-file": "/etc/prflow/secrets/argocd-token"}},
	}
	for _, tc := range cases {
		t.Run(tc.role, func(t *testing.T) {
			c := roleCommand(t, tc.role)
			file := filepath.Join("..", "..", "deploy", "config", tc.role+".yaml")
			if err := applyConfigFile(c, file); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got := flagValue(t, c, k); got != v {
					t.Errorf("%s: %s = %q, want %q", file, k, got, v)
				}
			}
		})
	}
	// Every example file is one of the roles: a new file needs a case here.
	files, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "config", "*.yaml"))
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if base != "kustomization" && !strings.Contains("server worker agent", base) {
			t.Errorf("%s: not the example of a role", f)
		}
	}
}

func TestConfigStrictErrors(t *testing.T) {
	clearConfigEnv(t)
	cases := []struct {
		name, role, body string
		want             []string // all in the error
	}{
		{"unknown key with a suggestion", "worker", "nats: nats://n:4222\nconcurency: 3\n",
			[]string{":2:1:", `unknown key "concurency" for prflow worker`, `did you mean "concurrency"?`}},
		{"unknown key far from any flag", "server", "log-level: info\nfrobnicate: 1\n",
			[]string{":2:1:", `unknown key "frobnicate"`, "keys are its flags:", "tokens"}},
		{"another role's key", "server", "connectors: /x.yaml\n", []string{":1:1:", `unknown key "connectors" for prflow server`}},
		{"the config key itself", "agent", "config: other.yaml\n", []string{":1:1:", `unknown key "config"`}},
		{"repeated key", "worker", "pool: [a]\nconcurrency: 2\npool: [b]\n", []string{":3:1:", `"pool" is set twice (first at line 1)`}},
		{"bad number", "worker", "concurrency: four\n", []string{":1:14:", "concurrency:", "invalid syntax"}},
		{"bad duration", "worker", "ack-wait: soon\n", []string{":1:11:", "ack-wait:", "soon"}},
		{"list for a single value", "worker", "concurrency: [1, 2]\n", []string{":1:14:", "takes one int value, not a list"}},
		{"mapping for a value", "agent", "argocd-url: {host: x}\n", []string{":1:13:", "argocd-url: takes a string value, not a mapping"}},
		{"null value", "agent", "agent-id:\n", []string{":1:", "agent-id: no value"}},
		{"top level is a list", "server", "- listen: :8080\n", []string{":1:1:", "want a mapping"}},
		{"two documents", "server", "listen: :1\n---\nlisten: :2\n", []string{":2:1: more than one YAML document"}},
		{"bad YAML", "server", "listen: [\n", []string{"prflow.yaml"}},
		{"nested list item", "worker", "pool: [[a]]\n", []string{"pool: list items must be plain values"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, tc.body)
			err := applyConfigFile(roleCommand(t, tc.role), p)
			if err == nil {
				t.Fatalf("no error for %q", tc.body)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error is not ErrConfig: %v", err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error does not name the file %s: %v", p, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
	if err := applyConfigFile(roleCommand(t, "server"), filepath.Join(t.TempDir(), "missing.yaml")); err == nil ||
		!errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Every problem in the file is reported at once, each at its line and column.
func TestConfigReportsEveryProblem(t *testing.T) {
	clearConfigEnv(t)
	p := writeConfig(t, "concurency: 3\nack-wait: soon\npool: [a]\npool: [b]\n")
	err := applyConfigFile(roleCommand(t, "worker"), p)
	if err == nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, w := range []string{p + `:1:1: unknown key "concurency" for prflow worker; did you mean "concurrency"?`,
		p + ":2:11: ack-wait: ", p + `:4:1: "pool" is set twice (first at line 3)`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

// The environment variable each flag of a --config command reads (flagEnv) is the one its
// help names: the file loses to it, so the two must not drift apart.
func TestFlagEnvMatchesHelp(t *testing.T) {
	envInHelp := regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]*)`)
	named := map[string]bool{}
	for _, role := range configRoles {
		c := roleCommand(t, role)
		check := func(f *pflag.Flag) {
			m := envInHelp.FindStringSubmatch(f.Usage)
			if m == nil {
				if env, ok := flagEnv[f.Name]; ok {
					t.Errorf("prflow %s --%s: flagEnv says %s, its help names none", role, f.Name, env)
				}
				return
			}
			named[f.Name] = true
			if flagEnv[f.Name] != m[1] {
				t.Errorf("prflow %s --%s: help names %s, flagEnv %q", role, f.Name, m[1], flagEnv[f.Name])
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
	}
	for name := range flagEnv {
		if !named[name] {
			t.Errorf("flagEnv has %s, which no flag's help names", name)
		}
	}
}

// Flags on the command line and the environment variables the flags name win over the file.
func TestConfigPrecedence(t *testing.T) {
	clearConfigEnv(t)
	p := writeConfig(t, "nats: nats://file:4222\nconcurrency: 7\npool: [a, b]\nlog-level: debug\n")

	c := roleCommand(t, "worker", "--concurrency", "2")
	if err := applyConfigFile(c, p); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"concurrency": "2", "nats": "nats://file:4222", "pool": "[a,b]", "log-level": "debug"} {
		if got := flagValue(t, c, k); got != v {
			t.Errorf("flag beats file: %s = %q, want %q", k, got, v)
		}
	}

	t.Setenv("PRFLOW_NATS", "nats://env:4222")
	c = roleCommand(t, "worker")
	if err := applyConfigFile(c, p); err != nil {
		t.Fatal(err)
	}
	if got := flagValue(t, c, "nats"); got != "nats://env:4222" {
		t.Errorf("env beats file: nats = %q", got)
	}
	if got := flagValue(t, c, "concurrency"); got != "7" {
		t.Errorf("file beats default: concurrency = %q", got)
	}

	// The agent's replica name comes from POD_NAME in Kubernetes (downward API).
	t.Setenv("POD_NAME", "agent-7f9c")
	c = roleCommand(t, "agent")
	if err := applyConfigFile(c, writeConfig(t, "replica: from-file\nagent-id: eu\n")); err != nil {
		t.Fatal(err)
	}
	if got := flagValue(t, c, "replica"); got != "agent-7f9c" {
		t.Errorf("POD_NAME beats file: replica = %q", got)
	}
	if got := flagValue(t, c, "agent-id"); got != "eu" {
		t.Errorf("agent-id = %q", got)
	}

	// A single value for a list flag is a one-item list; an empty file sets nothing.
	c = roleCommand(t, "worker")
	if err := applyConfigFile(c, writeConfig(t, "pool: release\n")); err != nil {
		t.Fatal(err)
	}
	if got := flagValue(t, c, "pool"); got != "[release]" {
		t.Errorf("pool = %q", got)
	}
	c = roleCommand(t, "worker")
	if err := applyConfigFile(c, writeConfig(t, "# nothing yet\n")); err != nil {
		t.Errorf("empty file: %v", err)
	}
}

// --config goes through the command's run: the file's values reach the role, and a bad file
// stops it before anything starts.
func TestConfigFlagAppliesBeforeRun(t *testing.T) {
	clearConfigEnv(t)
	p := writeConfig(t, "nats: nats://127.0.0.1:1\nlog-level: shouting\n")
	for _, role := range configRoles {
		_, err := run(t, role, "--config", p)
		if err == nil || !strings.Contains(err.Error(), "--log-level") || !strings.Contains(err.Error(), "shouting") {
			t.Errorf("prflow %s --config: want the file's log-level refused, got %v", role, err)
		}
	}
	bad := writeConfig(t, "nats: nats://127.0.0.1:1\nlisten-addr: :1\n")
	_, err := run(t, "server", "--config", bad)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `unknown key "listen-addr"`) {
		t.Errorf("server with a bad file: %v", err)
	}
	// PRFLOW_CONFIG names the file when --config is not given.
	t.Setenv("PRFLOW_CONFIG", bad)
	if _, err := run(t, "worker"); !errors.Is(err, ErrConfig) {
		t.Errorf("PRFLOW_CONFIG not read: %v", err)
	}
	// Client commands take no --config.
	if _, err := run(t, "status", "--config", p); err == nil || !strings.Contains(err.Error(), "unknown flag: --config") {
		t.Errorf("status --config: %v", err)
	}
}
