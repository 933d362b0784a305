package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm/scmtest"
)

// TestServerWebhookFlags: bad --webhooks and --pipelines files stop the server with
// file:line:field; good ones serve /hooks/github and start the triggered pipeline.
func TestServerWebhookFlags(t *testing.T) {
	dir := t.TempDir()
	tokens := cliTokens(t, dir)
	t.Setenv("PRFLOW_TEST_HOOK_SECRET", "hook-secret-0123456789")
	badHooks := writeFile(t, dir, "bad-hooks.yaml", "webhooks:\n  - provider: github\n    secret: literally-the-secret\n")
	if _, err := run(t, "server", "--tokens", tokens, "--webhooks", badHooks, "--data-dir", filepath.Join(dir, "n0")); err == nil ||
		!strings.Contains(err.Error(), "bad-hooks.yaml:3:13: webhooks[0].secret") || strings.Contains(err.Error(), "literally-the-secret") {
		t.Fatalf("bad webhooks file: %v", err)
	}
	hooks := writeFile(t, dir, "hooks.yaml", "webhooks:\n  - provider: github\n    secret: env:PRFLOW_TEST_HOOK_SECRET\n")
	pdir := filepath.Join(dir, "pipelines")
	_ = os.MkdirAll(pdir, 0o755)
	_ = os.WriteFile(filepath.Join(pdir, "bad.yaml"), []byte("name: b\ntriggers: [{push: {}, if: '${{ inputs.x }}'}]\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"), 0o644)
	if _, err := run(t, "server", "--tokens", tokens, "--webhooks", hooks, "--pipelines", pdir, "--data-dir", filepath.Join(dir, "n1")); err == nil ||
		!strings.Contains(err.Error(), "bad.yaml:2:") || !strings.Contains(err.Error(), "triggers[0].if") {
		t.Fatalf("bad pipelines dir: %v", err)
	}
	_ = os.WriteFile(filepath.Join(pdir, "bad.yaml"), []byte("name: hooked\ntriggers: [{push: {repo: acme/web, branches: [main]}}]\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"), 0o644)

	addr := startServer(t, "--tokens", tokens, "--data-dir", filepath.Join(dir, "n2"), "--webhooks", hooks, "--pipelines", pdir, "--external-url", "https://prflow.example.test")
	push := scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/main", Before: strings.Repeat("1", 40), After: strings.Repeat("2", 40)}
	req, err := scmtest.GitHubWebhookRequest(context.Background(), "http://"+addr+"/hooks/github", "hook-secret-0123456789", push)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook: HTTP %d %s", resp.StatusCode, b)
	}
	var runs []struct {
		ID       string `json:"id"`
		Pipeline string `json:"pipeline"`
		Trigger  *struct {
			Provider, Repo, SHA string
		} `json:"trigger"`
	}
	for i := 0; i < 200 && len(runs) == 0; i++ {
		r, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/runs", nil)
		r.Header.Set("Authorization", "Bearer cli-token-0123456789")
		if resp, err := http.DefaultClient.Do(r); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&runs)
			resp.Body.Close()
		}
		time.Sleep(25 * time.Millisecond)
	}
	if len(runs) != 1 || runs[0].Pipeline != "hooked" || runs[0].Trigger == nil || runs[0].Trigger.SHA != strings.Repeat("2", 40) ||
		runs[0].Trigger.Repo != "acme/web" {
		t.Fatalf("runs after the push webhook: %+v", runs)
	}
}
