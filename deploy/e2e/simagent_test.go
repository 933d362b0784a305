package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/pipelines"
)

const simAppSet = `apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: web}
spec:
  generators:
    - git: {repoURL: https://git.example/release.git, revision: main, files: [{path: "envs/*/config.json"}]}
  template:
    metadata:
      name: 'web-{{env}}'
      labels: {harness.io/serviceRef: web, harness.io/envRef: '{{env}}'}
    spec:
      project: default
      source: {repoURL: https://git.example/release.git, path: 'envs/{{env}}', targetRevision: main}
      destination: {name: '{{cluster}}', namespace: web}
`

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t *testing.T, dir, p, content string) {
	t.Helper()
	full := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSimulatedAgentPipeline is `prflow dev`'s path: a merge to the release repo, then
// FetchLinkedApps and GitOpsSync against the simulated agent. The dev config says
// simulate: degraded, so the gate fails on degradedStateTimeout; staging's is healthy.
func TestSimulatedAgentPipeline(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	dir := t.TempDir()
	gitIn(t, dir, "init", "-q", "-b", "main")
	writeFile(t, dir, "appset.yaml", simAppSet)
	writeFile(t, dir, "envs/dev/config.json", `{"env": "dev", "cluster": "dev-eu", "image": "web:1"}`)
	writeFile(t, dir, "envs/staging/config.json", `{"env": "staging", "cluster": "staging-eu", "image": "web:1"}`)
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "commit", "-q", "-m", "initial")

	runSimAgent(t, simagent.Options{Repo: dir}, s.conn)

	// The release PR merges: dev gets a new image and simulate: degraded, staging a new image.
	gitIn(t, dir, "checkout", "-q", "-b", "release")
	writeFile(t, dir, "envs/dev/config.json", `{"env": "dev", "cluster": "dev-eu", "image": "web:2", "simulate": "degraded"}`)
	writeFile(t, dir, "envs/staging/config.json", `{"env": "staging", "cluster": "staging-eu", "image": "web:2"}`)
	gitIn(t, dir, "commit", "-q", "-am", "release web:2")
	gitIn(t, dir, "checkout", "-q", "main")
	gitIn(t, dir, "merge", "-q", "--no-ff", "-m", "Merge release", "release")
	merged := gitIn(t, dir, "rev-parse", "HEAD")

	src := `name: sim
inputs:
  commit: {type: string}
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
  - name: staging
    clusters: [{name: staging-eu, agent: sim}]
stages:
  - id: staging
    environment: staging
    steps:
      - {id: merge, type: MergePR, with: {commit: "${{ inputs.commit }}"}}
      - {id: linked, type: FetchLinkedApps, timeout: 30s}
      - {id: sync, type: GitOpsSync, timeout: 30s, with: {waitTillHealthy: true}}
  - id: dev
    environment: dev
    needs: []
    steps:
      - {id: merge, type: MergePR, with: {commit: "${{ inputs.commit }}"}}
      - {id: linked, type: FetchLinkedApps, timeout: 30s}
      - {id: sync, type: GitOpsSync, timeout: 30s, with: {waitTillHealthy: true, degradedStateTimeout: 1s}}
`
	// The run-start check refuses an agent that has not registered yet: wait for it (on a busy
	// machine the git commands above no longer cover its start).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if regs, _ := s.client.Registered(s.ctx, "sim"); len(regs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the simulated agent did not register in 30s")
		}
	}
	r := s.wait(s.start(src, map[string]any{"commit": merged}).ID, 60*time.Second)
	stg := appsOut(step(r, "staging", "sync"))
	if r.Find("staging").Status != pipelines.StSucceeded || len(stg) != 1 || stg[0]["name"] != "web-staging" ||
		stg[0]["health"] != "Healthy" || stg[0]["syncedRevision"] != merged {
		t.Fatalf("staging: %s %v\n%s", r.Find("staging").Status, stg, describeRun(r))
	}
	dev := step(r, "dev", "sync")
	if r.Find("dev").Status != pipelines.StFailed || !strings.Contains(dev.Error, "web-dev (agent sim): Degraded for longer than degradedStateTimeout 1s") {
		t.Fatalf("dev: %s %q", r.Find("dev").Status, dev.Error)
	}
}
