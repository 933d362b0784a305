package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/queue"
)

// auditLimits opens a stopped server's data dir and reads the audit stream's limits back.
func auditLimits(t *testing.T, dataDir string) (time.Duration, int64) {
	t.Helper()
	conn, err := queue.Open(context.Background(), queue.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := conn.JS.Stream(context.Background(), audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Config.MaxAge, info.Config.MaxBytes
}

// TestServerAuditRetention: the audit-max-age and audit-max-bytes config keys and flags are
// the audit stream's limits (read back from NATS); a restart with other values updates the
// existing stream; bad values stop the server naming the flag or the config file's line.
func TestServerAuditRetention(t *testing.T) {
	dir := t.TempDir()
	tokens := cliTokens(t, dir)
	data := filepath.Join(dir, "data")

	cfg := writeFile(t, dir, "server.yaml", "audit-max-age: 720h\naudit-max-bytes: 64Mi\n")
	stop := startServerAt(t, freeAddr(t), "--config", cfg, "--tokens", tokens, "--data-dir", data)
	stop()
	if age, size := auditLimits(t, data); age != 720*time.Hour || size != 64<<20 {
		t.Fatalf("from the config file: max age %s, max bytes %d", age, size)
	}
	// Flags win over the file; the existing stream is updated.
	stop = startServerAt(t, freeAddr(t), "--config", cfg, "--tokens", tokens, "--data-dir", data, "--audit-max-age", "0", "--audit-max-bytes", "1073741824")
	stop()
	if age, size := auditLimits(t, data); age != 0 || size != 1<<30 {
		t.Fatalf("from the flags: max age %s, max bytes %d", age, size)
	}
	stop = startServerAt(t, freeAddr(t), "--tokens", tokens, "--data-dir", data)
	stop()
	if age, size := auditLimits(t, data); age != audit.DefaultRetention.MaxAge || size != -1 {
		t.Fatalf("defaults: max age %s, max bytes %d", age, size)
	}

	checkServerRefuses(t, tokens, cfg, filepath.Join(dir, "bad"), []badServerFlags{
		{args: []string{"--audit-max-age", "-1h"}, want: `invalid argument "-1h" for "--audit-max-age" flag: must not be negative`},
		{args: []string{"--audit-max-age", "90days"}, want: "want a duration such as 2160h"},
		{args: []string{"--audit-max-bytes", "lots"}, want: "want a size such as 1073741824, 512Mi or 10Gi"},
		{args: []string{"--audit-max-bytes", "-5Mi"}, want: "must not be negative"},
		{args: []string{"--audit-max-bytes", "5MB"}, want: "want a size such as"},
		{args: []string{"--audit-max-bytes", "9000000Ti"}, want: "is too large"},
		{file: "audit-max-age: 48h\naudit-max-bytes: 1.5\n", want: "server.yaml:2:18: audit-max-bytes: \"1.5\" is not a whole number of bytes"},
		{file: "audit-max-ages: 48h\n", want: `unknown key "audit-max-ages" for prflow server; did you mean "audit-max-age"?`},
	})
}
