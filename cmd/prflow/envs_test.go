package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/scmtest"
)

const envsPipeline = `name: web
inputs:
  tag: {type: string, required: true}
environments:
  - {name: dev, clusters: [{name: dev-eu, agent: sim}]}
stages:
  - id: dev
    environment: dev
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: "envs/<+env.name>/config.json",
               variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}]}
      - id: merge
        type: MergePR
        with: {connector: release, repo: acme/release, mergeStrategy: squash}
`

// TestEnvCommands: against a real server and worker (the fake GitHub as the release repo's
// forge), envs, env NAME and history ENV print what a promotion changed and what the agent
// reports, as tables, wide tables, JSON and YAML; an unknown environment or a bad flag fails
// with the reason.
func TestEnvCommands(t *testing.T) {
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", examples.ReleaseRepo()); err != nil {
		t.Fatal(err)
	}
	e := newTruthEnv(t)
	t.Setenv("PRFLOW_TEST_GH", scmtest.DefaultToken)
	cf := filepath.Join(t.TempDir(), "connectors.yaml")
	_ = os.WriteFile(cf, []byte("connectors:\n  - name: release\n    provider: github\n    baseURL: "+gh.APIURL()+"\n    auth: {token: env:PRFLOW_TEST_GH}\n"), 0o600)
	startCmd(t, "worker", "--nats", e.nats, "--connectors", cf, "--log-level", "error", "--id", "w-release")

	ctx, cancel := context.WithCancel(context.Background())
	qc, err := queue.Open(ctx, queue.Options{URL: e.nats})
	if err != nil {
		t.Fatal(err)
	}
	b, err := queue.OpenBuckets(ctx, qc.JS)
	if err != nil {
		t.Fatal(err)
	}
	done, err := agent.Heartbeat(ctx, b.Agents, time.Second, func() agent.Registration {
		return agent.Registration{Agent: "sim", Replica: "test", Kind: "simulated", Leader: true, Healthy: true}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done; qc.Close() })
	waitWorkerKV(t, ctx, b, "w-release")

	id := e.start(t, e.pipeline(t, envsPipeline), "-f", "--set", "tag=7.1.0")
	out, err := run(t, append([]string{"status", id, "-o", "json"}, e.cli...)...)
	var r pipelines.Run
	if err != nil || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	merged, _ := r.Find("dev").Step("merge", false).Outputs["commitId"].(string)
	st := agent.AppStatus{V: agent.Version, Agent: "sim", Name: "web-dev", Cluster: "dev-eu", ApplicationSet: "web",
		Labels: map[string]string{"harness.io/envRef": "dev"}, Sync: "Synced", Health: "Healthy", SyncedRevision: merged, ConfirmedAt: time.Now()}
	raw, _ := json.Marshal(st)
	if _, err := b.Apps.Put(ctx, agent.StatusKey("sim", "web-dev"), raw); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err = run(t, append([]string{"envs", "-o", "json"}, e.cli...)...)
		var envs []environments.Environment
		if err == nil && json.Unmarshal([]byte(out), &envs) == nil && len(envs) == 1 && envs[0].State == "synced" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev never synced: %v\n%s", err, out)
		}
	}

	t.Run("envs table", func(t *testing.T) {
		out, err := run(t, append([]string{"envs"}, e.cli...)...)
		t.Log(out)
		if h := strings.Join(headerOf(out), " "); err != nil || h != "GROUP ENVIRONMENT STATE DESIRED COMMIT BY APPS AGE" {
			t.Fatalf("%v header %q\n%s", err, h, out)
		}
		for _, want := range []string{"appset:web", "dev", "synced", "image.tag=7.1.0", merged[:7], id, "1/1 ok"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})
	t.Run("envs wide and yaml", func(t *testing.T) {
		out, err := run(t, append([]string{"envs", "-o", "wide"}, e.cli...)...)
		if err != nil || !strings.HasSuffix(strings.Join(headerOf(out), " "), "PIPELINES LIVE DRIFT") || !strings.Contains(out, "web-dev Synced/Healthy@"+merged[:7]) {
			t.Errorf("wide: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"envs", "-o", "yaml"}, e.cli...)...)
		var doc []map[string]any
		if err != nil || yaml.Unmarshal([]byte(out), &doc) != nil || len(doc) != 1 || doc[0]["name"] != "dev" || doc[0]["state"] != "synced" {
			t.Errorf("yaml: %v\n%s", err, out)
		}
	})
	t.Run("env", func(t *testing.T) {
		// The worker (another process, holding the token) reads the file at the merge
		// commit through the connector; `env` says so.
		out, err := pollCmd(t, 30*time.Second, "read from "+merged[:7]+" through the connector", append([]string{"env", "dev"}, e.cli...)...)
		t.Log(out)
		if !strings.Contains(out, "read from "+merged[:7]+" through the connector") || strings.Contains(out, "disagrees") {
			t.Errorf("env dev does not show the read of %s:\n%s", merged[:7], out)
		}
		for _, want := range []string{"environment dev", "state: synced", "envs/dev/config.json: image.tag = 7.1.0", "by run " + id, "PR http", "web-dev", "HAS DESIRED"} {
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("%v: no %q in\n%s", err, want, out)
			}
		}
		out, err = run(t, append([]string{"env", "dev", "-o", "json"}, e.cli...)...)
		var env environments.Environment
		if err != nil || json.Unmarshal([]byte(out), &env) != nil || env.Desired.Commit != merged || len(env.Apps) != 1 || env.Apps[0].HasDesired != "yes" {
			t.Errorf("json: %v\n%s", err, out)
		}
	})
	t.Run("history", func(t *testing.T) {
		out, err := pollCmd(t, 20*time.Second, "succeeded", append([]string{"history", "dev"}, e.cli...)...)
		t.Log(out)
		if h := strings.Join(headerOf(out), " "); err != nil || h != "AGE RESULT CHANGE RUN STAGE PIPELINE BY" {
			t.Fatalf("%v header %q\n%s", err, h, out)
		}
		if !strings.Contains(out, "→ 7.1.0") || !strings.Contains(out, id) || !strings.Contains(out, "cli") {
			t.Errorf("history row:\n%s", out)
		}
		out, err = run(t, append([]string{"history", "dev", "-o", "wide"}, e.cli...)...)
		if err != nil || !strings.Contains(out, "tag=7.1.0") || !strings.Contains(out, merged[:7]) {
			t.Errorf("wide: %v\n%s", err, out)
		}
	})
	t.Run("mistakes", func(t *testing.T) {
		if out, err := run(t, append([]string{"env", "nope"}, e.cli...)...); err == nil || !strings.Contains(err.Error(), `environment not found: "nope"`) {
			t.Errorf("unknown environment: %v\n%s", err, out)
		}
		if out, err := run(t, append([]string{"history", "nope"}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "environment not found") {
			t.Errorf("history of an unknown environment: %v\n%s", err, out)
		}
		if _, err := run(t, append([]string{"history", "dev", "--limit", "0"}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "--limit 0") {
			t.Errorf("--limit 0: %v", err)
		}
		if _, err := run(t, append([]string{"envs", "-o", "xml"}, e.cli...)...); err == nil || !strings.Contains(err.Error(), `"xml"`) {
			t.Errorf("-o xml: %v", err)
		}
	})
}

// pollCmd runs the command args until it succeeds with want in its output or within has
// passed; it returns the last output and error (the caller checks them).
func pollCmd(t *testing.T, within time.Duration, want string, args ...string) (string, error) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		out, err := run(t, args...)
		if err == nil && strings.Contains(out, want) || time.Now().After(deadline) {
			return out, err
		}
	}
}
