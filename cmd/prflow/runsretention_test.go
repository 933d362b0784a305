package main

import (
	"path/filepath"
	"testing"
)

// TestServerRunsRetentionFlags: --runs-keep-days and --runs-keep-count (and their config
// keys) take whole non-negative numbers; anything else stops the server naming the flag or
// the config file's line, before it touches NATS.
func TestServerRunsRetentionFlags(t *testing.T) {
	dir := t.TempDir()
	tokens := cliTokens(t, dir)
	cfg := writeFile(t, dir, "server.yaml", "runs-keep-days: 7\nruns-keep-count: 5000\n")
	stop := startServerAt(t, freeAddr(t), "--config", cfg, "--tokens", tokens, "--data-dir", filepath.Join(dir, "data"))
	stop()
	checkServerRefuses(t, tokens, cfg, filepath.Join(dir, "bad"), []badServerFlags{
		{args: []string{"--runs-keep-days", "-1"}, want: `invalid argument "-1" for "--runs-keep-days" flag: must not be negative`},
		{args: []string{"--runs-keep-days", "90d"}, want: `want a whole number of days such as 90, got "90d"`},
		{args: []string{"--runs-keep-days", "2160h"}, want: "want a whole number of days"},
		{args: []string{"--runs-keep-days", "99999999"}, want: "more than 100 years"},
		{args: []string{"--runs-keep-count", "-5"}, want: `invalid argument "-5" for "--runs-keep-count" flag: must not be negative`},
		{args: []string{"--runs-keep-count", "lots"}, want: "want a whole number such as 10000"},
		{file: "runs-keep-days: 30\nruns-keep-count: many\n", want: "server.yaml:2"},
		{file: "runs-keep-day: 30\n", want: `unknown key "runs-keep-day" for prflow server; did you mean "runs-keep-days"?`},
	})
}
