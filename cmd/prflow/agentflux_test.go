package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --engine: an unknown engine, a missing kubeconfig and a cluster without Flux are refused at
// start with errors naming what is wrong.
func TestAgentEngineFlags(t *testing.T) {
	if _, err := run(t, "agent", "--embedded", "--agent-id", "x", "--engine", "fluxcd"); err == nil ||
		!strings.Contains(err.Error(), `--engine "fluxcd": want argocd or flux`) {
		t.Errorf("--engine fluxcd: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	if _, err := run(t, "agent", "--embedded", "--agent-id", "x", "--engine", "flux", "--kubeconfig", missing); err == nil ||
		!strings.Contains(err.Error(), "--kubeconfig "+missing) {
		t.Errorf("missing kubeconfig: %v", err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "agent", "--embedded", "--agent-id", "x", "--engine", "flux", "--kubeconfig", kc); err == nil ||
		!strings.Contains(err.Error(), "list kustomizations") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable cluster: %v", err)
	}
}
