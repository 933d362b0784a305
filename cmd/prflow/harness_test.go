package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
)

const fixtures = "../../pipelines/harness/testdata/"

// `prflow import harness` prints native YAML that the native loader accepts as is.
func TestImportHarness(t *testing.T) {
	out, err := run(t, "import", "harness", fixtures+"rollback.yaml", "--harness-map", fixtures+"map.yaml")
	if err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	p, err := pipelines.Load("imported.yaml", []byte(out), steps.Default)
	if err != nil {
		t.Fatalf("imported pipeline does not load: %v\n%s", err, out)
	}
	if p.Name != "rollback" || p.Stage("dev") == nil || len(p.Stage("dev").Rollback) != 2 {
		t.Errorf("imported pipeline: %+v", p)
	}
	if _, err := run(t, "import", "harness", fixtures+"map.yaml"); err == nil {
		t.Error("importing a non-Harness file succeeded")
	}
}

func TestValidateHarness(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte(`pipeline:
  identifier: bad
  stages:
    - stage:
        identifier: s
        type: Custom
        spec:
          execution:
            steps:
              - step: {identifier: sh, type: ShellScript, spec: {}}
`), 0o644)
	out, err := run(t, "validate", bad, "--harness-map", fixtures+"map.yaml")
	if err == nil || !strings.Contains(out, bad+":10:") || !strings.Contains(out, "pipeline.stages[0].stage.spec.execution.steps[0].step.type") {
		t.Fatalf("validate bad Harness file: %v\n%s", err, out)
	}
	if out, err := run(t, "validate", bad, "--harness-map", fixtures+"map.yaml", "--allow-unsupported"); err == nil || !strings.Contains(out, "warning:") {
		t.Errorf("with --allow-unsupported the stage has no step left and must still fail: %v\n%s", err, out)
	}
	out, err = run(t, "validate", fixtures+"matrix.yaml", "--harness-map", fixtures+"map.yaml")
	if err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("validate good Harness file: %v\n%s", err, out)
	}
	if out, err := run(t, "validate", fixtures+"approval.yaml"); err == nil || !strings.Contains(out, "--harness-map") {
		t.Errorf("without a map: %v\n%s", err, out)
	}
}

// What `prflow validate` and `prflow import harness` print for bad Harness input: every problem
// of a file in one report, each at file:line:col of its field; a map file's YAML error at the
// mistake's line, "YAML:" once; the Notifications-PR-Pipeline sample refused without a
// channel for its user group and converted with one.
func TestHarnessCLIReports(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string { return writeFile(t, dir, name, src) }
	three := write("three.yaml", `pipeline:
  identifier: three
  stages:
    - stage:
        identifier: s
        type: Custom
        spec:
          execution:
            steps:
              - step: {identifier: a, type: HarnessApproval, spec: {approvers: {userGroups: [rm], minimumCount: one}}}
              - step: {identifier: w, type: Wait, spec: {duraton: 1m}}
              - step: {identifier: sh, type: ShellScript, spec: {}}
`)
	badMap := write("map.yaml", "services:\n  web:\n    releaseRepo:\n      connector: release\n     repo: acme/release\n")
	mapSrc, err := os.ReadFile(fixtures + "notifications_pr_map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	noGroups := write("no_groups.yaml", string(mapSrc[:strings.Index(string(mapSrc), "notifications:")]))
	sample := fixtures + "notifications_pr.yaml"
	for _, tc := range []struct {
		name    string
		args    []string
		ok      bool
		want    []string // in this order
		notWant []string
	}{
		{"three problems at once", []string{"validate", three, "--harness-map", fixtures + "map.yaml"}, false,
			[]string{three + ":10:113: pipeline.stages[0].stage.spec.execution.steps[0].step.spec.approvers.minimumCount: want a whole number",
				three + ":11:58: pipeline.stages[0].stage.spec.execution.steps[1].step.spec.duraton: unknown field \"duraton\" (did you mean \"duration\"?)",
				three + ":12:46: pipeline.stages[0].stage.spec.execution.steps[2].step.type: unsupported: step type \"ShellScript\""}, nil},
		{"map syntax error, once for two files", []string{"validate", fixtures + "approval.yaml", fixtures + "rollback.yaml", "--harness-map", badMap}, false,
			[]string{badMap + ":5: YAML: did not find expected key"}, []string{"YAML: yaml", "line 2"}},
		{"sample without a channel for its user group", []string{"import", "harness", sample, "--harness-map", noGroups}, false,
			[]string{sample + ":116:15: pipeline.notificationRules[0].notificationMethod.spec.userGroups[0]: unsupported: notification rule \"notify_release_mail\": user group \"release_approvers\""}, []string{"channel:"}},
		{"sample with the map", []string{"import", "harness", sample, "--harness-map", fixtures + "notifications_pr_map.yaml", "--set", "Stage1_updateReleaseRepo_replicaCount=2"}, true,
			[]string{"notifications:", "- on: [run.succeeded]", "channel: release-mail"}, []string{"warning:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.args...)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v\n%s", err, tc.ok, out)
			}
			if file, _, _ := strings.Cut(tc.want[0], ":"); !tc.ok && strings.Count(out, file+":") != len(tc.want) {
				t.Errorf("want exactly %d problems:\n%s", len(tc.want), out)
			}
			rest := out
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks (after what came before) %q:\n%s", w, out)
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// The server converts Harness sources with its --harness-map; bad ones are refused with the
// Harness path and line, and nothing is started.
func TestServerRunsHarnessYAML(t *testing.T) {
	dir := t.TempDir()
	tokens := cliTokens(t, dir)
	natsAddr := freeAddr(t)
	addr := startServer(t, "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"), "--harness-map", fixtures+"map.yaml", "--nats-listen", natsAddr)
	common := []string{"--server", "http://" + addr, "--token", "env:PRFLOW_TEST_TOKEN"}
	// The converted pipeline names connector "release" and agent "eu": refused until they are live.
	out, err := run(t, append([]string{"run", fixtures + "approval.yaml", "--set", "tag=1.2.3"}, common...)...)
	if err == nil || !strings.Contains(err.Error(), `refused: connector "release": pool "default" has no live worker; agent "eu" is not registered (registered: none)`) {
		t.Fatalf("without a worker and agent: %v %s", err, out)
	}
	liveWorkerAndAgent(t, "nats://"+natsAddr, "release", "eu")
	out, err = run(t, append([]string{"run", fixtures + "approval.yaml", "--set", "tag=1.2.3"}, common...)...)
	if err != nil || !strings.Contains(out, "started") {
		t.Fatalf("server-side conversion: %v %s", err, out)
	}
	out, err = run(t, append([]string{"status", strings.Fields(out)[1]}, common...)...)
	if err != nil || !strings.Contains(out, "updateReleaseRepo") {
		t.Errorf("status of the converted run: %v\n%s", err, out)
	}
	out, err = run(t, append([]string{"run", fixtures + "approval.yaml", "--harness-map", fixtures + "map.yaml", "--set", "tag=1"}, common...)...)
	if err != nil || !strings.Contains(out, "started") {
		t.Fatalf("client-side conversion: %v %s", err, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	src, _ := os.ReadFile(fixtures + "approval.yaml")
	_ = os.WriteFile(bad, []byte(strings.Replace(string(src), "type: MergePR", "type: ShellScript", 1)), 0o644)
	if _, err := run(t, append([]string{"run", bad}, common...)...); err == nil || !strings.Contains(err.Error(), "step.type") {
		t.Errorf("bad Harness file: %v", err)
	}
}

// liveWorkerAndAgent runs a `prflow worker` holding connector (a connectors file naming it) and
// registers agent the way agents do, on the NATS server at url, until the test ends.
func liveWorkerAndAgent(t *testing.T, url, conn, agentID string) {
	t.Helper()
	t.Setenv("PRFLOW_TEST_GH", "gh-token-0123456789")
	cf := filepath.Join(t.TempDir(), "connectors.yaml")
	_ = os.WriteFile(cf, []byte("connectors:\n  - name: "+conn+"\n    provider: github\n    baseURL: http://127.0.0.1:9/api/v3/\n    auth: {token: env:PRFLOW_TEST_GH}\n"), 0o600)
	startCmd(t, "worker", "--nats", url, "--connectors", cf, "--log-level", "error", "--id", "w-"+conn)
	ctx, cancel := context.WithCancel(context.Background())
	qc, err := queue.Open(ctx, queue.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	b, err := queue.OpenBuckets(ctx, qc.JS)
	if err != nil {
		t.Fatal(err)
	}
	done, err := agent.Heartbeat(ctx, b.Agents, 0, func() agent.Registration {
		return agent.Registration{Agent: agentID, Replica: "test", Kind: "simulated", Healthy: true}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done; qc.Close() })
	waitWorkerKV(t, ctx, b, "w-"+conn)
}

// `prflow dev` runs a Harness pipeline as the UI saves it: --harness-map converts it (strict),
// --agent-id names the simulated agent as the map does, and --user/--groups make the API's
// caller a member of the group the approval names, so `prflow approve` lets it finish.
func TestDevRunsHarnessUIPipeline(t *testing.T) {
	addr := freeAddr(t)
	out := startCmd(t, "dev", "--log-level", "warn", "--pipeline", fixtures+"ui_pr.yaml", "--harness-map", fixtures+"dev_map.yaml",
		"--agent-id", "eu", "--serve", "--listen", addr, "--user", "alice", "--groups", "release_managers,ops", "--set", "tag=1.6.0")
	var runID string
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline) && !strings.Contains(out.String(), "waiting"); time.Sleep(50 * time.Millisecond) {
	}
	runID = devRunID(out.String())
	if runID == "" || !strings.Contains(out.String(), `agent "eu"`) {
		t.Fatalf("dev did not start the run on agent eu:\n%s", out.String())
	}
	if res, err := run(t, "approve", runID, "promote_dev.approveMerge", "--server", "http://"+addr); err != nil {
		t.Fatalf("approve as alice (release_managers): %v\n%s", err, res)
	}
	for ; time.Now().Before(deadline) && !strings.Contains(out.String(), "(Ctrl-C to stop)"); time.Sleep(50 * time.Millisecond) {
	}
	got := out.String()
	if !strings.Contains(got, "(Ctrl-C to stop)") || !strings.Contains(got, "step promote_dev.syncWeb (GitOpsSync): succeeded") ||
		!strings.Contains(got, "step promote_dev.getAppDetails (GetAppDetails): succeeded") {
		t.Fatalf("the run did not finish:\n%s", got)
	}
	if !strings.Contains(got, "notificationRules[0].notificationMethod.spec.userGroups[0]: not carried") || strings.Count(got, "notificationRules") != 1 {
		t.Errorf("the notification rules must be reported once:\n%s", got)
	}
}

// The approval names a group the dev caller is not in: the API refuses the decision.
func TestDevUserOutsideTheApproversIsRefused(t *testing.T) {
	addr := freeAddr(t)
	out := startCmd(t, "dev", "--log-level", "warn", "--pipeline", fixtures+"ui_pr.yaml", "--harness-map", fixtures+"dev_map.yaml",
		"--agent-id", "eu", "--serve", "--listen", addr, "--set", "tag=1.6.1")
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline) && !strings.Contains(out.String(), "waiting"); time.Sleep(50 * time.Millisecond) {
	}
	id := devRunID(out.String())
	if id == "" {
		t.Fatalf("dev output:\n%s", out.String())
	}
	if res, err := run(t, "approve", id, "promote_dev.approveMerge", "--server", "http://"+addr); err == nil || !strings.Contains(err.Error(), "dev is not an approver") {
		t.Fatalf("user dev (group dev) on a step for release_managers: %v %s", err, res)
	}
}

// devRunID is the run id `prflow dev` prints ("prflow dev: run ID of pipeline …").
func devRunID(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "prflow" && f[1] == "dev:" && f[2] == "run" {
			return f[3]
		}
	}
	return ""
}

// `prflow validate` accepts the UI-saved pipeline in strict mode, printing the one warning
// about its notification rules.
func TestValidateHarnessUIPipeline(t *testing.T) {
	out, err := run(t, "validate", fixtures+"ui_pr.yaml", "--harness-map", fixtures+"map.yaml")
	if err != nil || !strings.Contains(out, "ok") || strings.Count(out, "warning:") != 1 || !strings.Contains(out, "notificationRules[0].notificationMethod.spec.userGroups[0]: not carried") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
}

// `prflow validate` accepts the UI-saved Update GitOps App pipeline in strict mode, and
// `prflow dev` runs it on the simulated agent: the app is updated and synced without the
// release repo changing.
func TestDevRunsHarnessUpdateGitOpsApp(t *testing.T) {
	out, err := run(t, "validate", fixtures+"ui_update.yaml", "--harness-map", fixtures+"map.yaml")
	if err != nil || !strings.Contains(out, "ok") || strings.Contains(out, "warning:") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	out, err = run(t, "dev", "--log-level", "warn", "--pipeline", fixtures+"ui_update.yaml", "--harness-map", fixtures+"dev_map.yaml",
		"--agent-id", "eu", "--set", "tag=1.7.0")
	if err != nil {
		t.Fatalf("dev: %v\n%s", err, out)
	}
	for _, want := range []string{"step update_dev.updateApp (UpdateGitOpsApp): succeeded", "step update_dev.syncApp (GitOpsSync): succeeded",
		"step update_dev.getAppDetails (GetAppDetails): succeeded", "1.7.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev output lacks %q:\n%s", want, out)
		}
	}
}
