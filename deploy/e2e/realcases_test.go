package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/steps"
	"sigs.k8s.io/yaml"
)

const realImage = "registry.example.com/shop/web:"

// stageTimes logs how long each stage took, for the report (REALTIME lines).
func stageTimes(t *testing.T, name string, r *pipelines.Run) {
	var parts []string
	for _, st := range r.Stages {
		if !st.Started.IsZero() && !st.Ended.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %s %.1fs", st.ID, st.Status, st.Ended.Sub(st.Started).Seconds()))
		}
	}
	t.Logf("REALTIME %s: run %s in %.1fs; %s", name, r.Status, r.Ended.Sub(r.Started).Seconds(), strings.Join(parts, ", "))
}

// deployed checks that the cluster runs the tag in env (the ConfigMap the jsonnet app renders
// from config.json through the ApplicationSet: it changes only once the ApplicationSet was
// regenerated from the merged commit).
func (r *realEnv) deployed(env, tag string) {
	r.t.Helper()
	if cm := r.configMap(env); cm["image"] != realImage+tag {
		r.t.Errorf("%s: the cluster has image %q, want %s%s", env, cm["image"], realImage, tag)
	}
}

// Promotion dev → staging → prod: each stage merges, refreshes the ApplicationSet, syncs and
// waits for Synced/Healthy at a revision containing its merge; the cluster runs the new tag.
func TestRealPromotion(t *testing.T) {
	envs := []string{"dev", "staging", "prod"}
	r := realSetupAgent(t, envs...)
	run := r.e.Wait(r.e.Start(r.promotion(envs, envs, ""), map[string]any{"tag": "1.5.0"}).ID, 5*time.Minute)
	stageTimes(t, "promotion", run)
	if run.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", run.Status, run.Error, describeRun(run))
	}
	for _, e := range envs {
		if got := r.file("envs/" + e + "/config.json"); !strings.Contains(got, `"tag": "1.5.0"`) {
			t.Errorf("envs/%s/config.json: %s", e, got)
		}
		r.deployed(e, "1.5.0")
		apps := appsOut(ctltest.Step(run, e, "sync"))
		if len(apps) != 1 || apps[0]["health"] != "Healthy" || apps[0]["sync"] != "Synced" {
			t.Errorf("%s sync outputs: %v", e, apps)
		}
	}
}

// A Degraded prod (the Lua health check reads data.simulate) is reverted, the revert merged
// and prod synced again on it: git and the cluster are back on the old config.
func TestRealDegradedRollback(t *testing.T) {
	envs := []string{"dev", "prod"}
	r := realSetupAgent(t, envs...)
	before := r.file("envs/prod/config.json")
	run := r.e.Wait(r.e.Start(r.promotion(envs, []string{"dev", "{name: prod, set: {simulate: degraded}, create: true}"}, ""), map[string]any{"tag": "1.6.0"}).ID, 5*time.Minute)
	stageTimes(t, "degraded-rollback", run)
	if run.Status != pipelines.StFailed || !strings.Contains(run.Error, "Degraded") {
		t.Fatalf("run %s %q, want failed on prod's Degraded\n%s", run.Status, run.Error, describeRun(run))
	}
	if !strings.Contains(run.Error, "data.simulate is degraded") {
		t.Errorf("the error lacks the resource's health message: %q", run.Error)
	}
	if got := r.file("envs/prod/config.json"); got != before {
		t.Errorf("prod's config.json is not reverted:\n%s\nwant\n%s", got, before)
	}
	resync := ctltest.Step(run, "prod", "resync")
	if resync == nil || resync.Status != pipelines.StSucceeded {
		t.Fatalf("prod was not synced again after the revert\n%s", describeRun(run))
	}
	r.deployed("dev", "1.6.0")
	r.deployed("prod", "1.4.1")
	if cm := r.configMap("prod"); cm["simulate"] != "healthy" {
		t.Errorf("prod's ConfigMap after the rollback: %v", cm)
	}
	// Every branch the run opened (the promotions' and the revert's) is deleted once merged.
	if refs := r.git(t.TempDir(), "ls-remote", "--heads", r.url); strings.Count(refs, "refs/heads/") != 1 || !strings.Contains(refs, "refs/heads/main") {
		t.Errorf("branches left in the release repo:\n%s", refs)
	}
}

// Issue 20 #2 on the real Argo CD: the agent is down when FetchLinkedApps starts. The step
// parks saying so (holding no worker) instead of failing the stage into a rollback, and the
// run passes once the agent is back.
func TestRealFetchLinkedAppsAgentDown(t *testing.T) {
	r := realSetup(t, "dev")
	r.waitApps("dev")
	// The agent is live when the run starts (a run naming a dead agent is refused at start)
	// and dies while the stage waits for its approval.
	ag := r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	// preview: false, so FetchLinkedApps is the first step to meet the dead agent (a preview
	// parks on it the same way: TestPreviewWaitsForAnOfflineAgent).
	run := r.e.Start(r.promotion([]string{"dev"}, []string{"{name: dev, approval: {approvers: {users: [alice]}, timeout: 2m}}"}, "  preview: false\n"), map[string]any{"tag": "7.0.0"})
	r.waitStep(run.ID, "dev", "approval", time.Minute, func(st *pipelines.StepRun) bool { return st.Status == pipelines.StWaiting })
	ag.stop()
	if err := r.e.Ctl.Signal(context.Background(), run.ID, "dev", "approval", steps.Signal{Kind: "approval", User: "alice", Approve: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r.waitStep(run.ID, "dev", "apps", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "cannot see Argo CD")
	})
	time.Sleep(8 * time.Second) // longer than the 5 attempts in 7.5 s that used to fail the stage
	if cur, _ := r.e.Ctl.Get(context.Background(), run.ID); cur.Status.Terminal() {
		t.Fatalf("the run ended while the agent was down: %s %s", cur.Status, cur.Error)
	}
	t0 := time.Now()
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "fetch-agent-down", final)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %s\n%s", final.Status, final.Error, describeRun(final))
	}
	t.Logf("REALTIME run passed %.1fs after the agent came back", time.Since(t0).Seconds())
	r.deployed("dev", "7.0.0")
}

// A new environment is created through the ApplicationSet: its config.json is merged, the
// agent refreshes the ApplicationSet (annotation through Argo CD's API), the app appears and
// syncs. Argo CD's own poll would take up to 3 minutes (the stage's appWaitTimeout is 60s).
func TestRealNewEnvironment(t *testing.T) {
	for _, mode := range []string{argocd.RefreshAnnotate, argocd.RefreshWebhook} {
		t.Run(mode, func(t *testing.T) {
			r := realSetup(t, "dev")
			r.waitApps("dev")
			o := argocd.AppSetRefreshOptions{Mode: mode}
			if mode == argocd.RefreshWebhook {
				// up.sh runs the ApplicationSet controller with --webhook-addr on this port,
				// without webhook.github.secret (unsigned events are accepted).
				o.WebhookURL = "http://127.0.0.1:" + envOr("APPSET_WEBHOOK_PORT", "18087") + "/api/webhook"
			}
			r.startAgent(r.vars["ARGOCD_TOKEN"], o)
			src := r.promotion([]string{"qa"}, []string{"qa"}, "  appWaitTimeout: 60s\n  create: true # qa is a new environment: its config file does not exist yet\n")
			src = strings.Replace(src, "    image.tag:", "    env: qa\n    replicas: 1\n    image.repository: registry.example.com/shop/web\n    image.tag:", 1)
			start := time.Now()
			run := r.e.Wait(r.e.Start(src, map[string]any{"tag": "2.0.0"}).ID, 3*time.Minute)
			stageTimes(t, "new-environment-"+mode, run)
			if run.Status != pipelines.StSucceeded {
				t.Fatalf("run %s: %s\n%s", run.Status, run.Error, describeRun(run))
			}
			apps, _ := ctltest.Step(run, "qa", "apps").Outputs["apps"].([]any)
			if len(apps) != 1 || apps[0].(map[string]any)["name"] != r.id+"-qa" {
				t.Fatalf("linked apps: %v", apps)
			}
			r.deployed("qa", "2.0.0")
			t.Logf("REALTIME new environment (%s): merged to Healthy in %.1fs", mode, time.Since(start).Seconds())
		})
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Issue 14 against the real Argo CD: apps track main, several promotions merge into the one
// release repo at once; each GitOpsSync passes when its app is Synced/Healthy at a revision
// that contains its merge — often a later one — and the cluster has every change.
func TestRealConcurrentMerges(t *testing.T) {
	envs := []string{"e1", "e2", "e3", "e4"}
	r := realSetupAgent(t, envs...)
	var ids []string
	start := time.Now()
	for i, e := range envs {
		src := strings.Replace(r.promotion([]string{e}, []string{e}, ""), "name: "+r.id+"\n", fmt.Sprintf("name: %s-%d\n", r.id, i), 1)
		ids = append(ids, r.e.Start(src, map[string]any{"tag": "3.0." + fmt.Sprint(i)}).ID)
	}
	later := 0
	for i, id := range ids {
		run := r.e.Wait(id, 5*time.Minute)
		stageTimes(t, "concurrent-"+envs[i], run)
		if run.Status != pipelines.StSucceeded {
			t.Errorf("run %d (%s): %s %s\n%s", i, envs[i], run.Status, run.Error, describeRun(run))
			continue
		}
		merge := fmt.Sprint(ctltest.Step(run, envs[i], "merge").Outputs["commitId"])
		apps := appsOut(ctltest.Step(run, envs[i], "sync"))
		if len(apps) == 1 && apps[0]["syncedRevision"] != merge {
			later++
		}
		r.deployed(envs[i], "3.0."+fmt.Sprint(i))
	}
	t.Logf("REALTIME concurrent merges: %d runs in %.1fs; %d passed at a later revision containing their merge", len(ids), time.Since(start).Seconds(), later)
}

// The fault tests below make prod's change Progressing (data.simulate: progressing), so its
// GitOpsSync waits; the apps sync automatically. While prflow cannot see Argo CD, someone
// commits simulate: healthy on main and Argo CD auto-syncs it: the app is Synced/Healthy at a
// later commit containing prflow's merge. prflow must park on the stale view instead of timing
// out into a rollback, and pass once it sees Argo CD again.
const progressingProd = "{name: prod, set: {simulate: progressing}, create: true}"

// The agent's token is revoked and argocd-server restarted while prod's GitOpsSync waits (the
// issue-20 incident): the agent gets 401s, its view goes stale and the step parks saying so.
// Argo CD makes the app healthy meanwhile; with a new token the agent sees it and the run
// passes — nothing is reverted.
func TestRealTokenRevokedMidWait(t *testing.T) {
	r := realSetupWith(t, true, "prod")
	r.waitApps("prod")
	tok, tokID := r.mintToken()
	ag := r.startAgent(tok, argocd.AppSetRefreshOptions{})
	run := r.e.Start(r.promotion([]string{"prod"}, []string{progressingProd}, ""), map[string]any{"tag": "4.0.0"})
	r.waitStep(run.ID, "prod", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Progressing")
	})
	t0 := time.Now()
	if code, body := r.api("DELETE", "/api/v1/account/ci/token/"+tokID, nil); code != 200 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	srv := r.proc("argocd-server")
	r.stopProc(srv)
	r.startProc(srv)
	r.waitArgo()
	t.Logf("REALTIME token revoked and argocd-server restarted in %.1fs", time.Since(t0).Seconds())
	cur := r.waitStep(run.ID, "prod", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "cannot see Argo CD")
	})
	t.Logf("REALTIME parked on the stale view %.1fs after the revocation: %s", time.Since(t0).Seconds(), ctltest.Step(cur, "prod", "sync").Wait.Reason)
	r.setConfig("prod", "simulate", "healthy")
	r.pushEvent()
	r.waitHealthy("prod")
	time.Sleep(3 * time.Second)
	if cur, _ := r.e.Ctl.Get(context.Background(), run.ID); cur.Status.Terminal() {
		t.Fatalf("the run ended while the agent was blind: %s %s", cur.Status, cur.Error)
	}
	ag.stop()
	tok2, _ := r.mintToken()
	t1 := time.Now()
	r.startAgent(tok2, argocd.AppSetRefreshOptions{})
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "token-revoked", final)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %s\n%s", final.Status, final.Error, describeRun(final))
	}
	t.Logf("REALTIME passed %.1fs after the agent got a new token", time.Since(t1).Seconds())
	if got := r.file("envs/prod/config.json"); !strings.Contains(got, `"tag": "4.0.0"`) {
		t.Errorf("prod was reverted: %s", got)
	}
	r.deployed("prod", "4.0.0")
}

// argocd-server is stopped for 10 s while prod's GitOpsSync waits; Argo CD's controller makes
// the app healthy meanwhile. The step parks on the stale view and passes once the agent sees
// Argo CD again.
func TestRealArgoServerStoppedMidWait(t *testing.T) {
	r := realSetupWith(t, true, "prod")
	r.waitApps("prod")
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	run := r.e.Start(r.promotion([]string{"prod"}, []string{progressingProd}, ""), map[string]any{"tag": "5.0.0"})
	r.waitStep(run.ID, "prod", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Progressing")
	})
	srv := r.proc("argocd-server")
	t0 := time.Now()
	r.stopProc(srv)
	r.setConfig("prod", "simulate", "healthy")
	r.pushEvent()
	time.Sleep(10 * time.Second)
	if cur, _ := r.e.Ctl.Get(context.Background(), run.ID); cur.Status.Terminal() {
		t.Fatalf("the run ended while argocd-server was down: %s %s", cur.Status, cur.Error)
	} else if st := ctltest.Step(cur, "prod", "sync"); st.Wait == nil || !strings.Contains(st.Wait.Reason, "cannot see Argo CD") {
		t.Errorf("while argocd-server is down the step waits for: %+v", st.Wait)
	}
	r.startProc(srv)
	r.waitArgo()
	t1 := time.Now()
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "argocd-server-stopped", final)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %s\n%s", final.Status, final.Error, describeRun(final))
	}
	t.Logf("REALTIME argocd-server down %.1fs; run passed %.1fs after it answered again", t1.Sub(t0).Seconds(), time.Since(t1).Seconds())
	r.deployed("prod", "5.0.0")
}

// A real `prflow agent` process (the leader) is SIGKILLed while prod's GitOpsSync waits; a
// second process (a follower) takes the lead within the lease TTL and the run passes.
func TestRealAgentKilledMidWait(t *testing.T) {
	r := realSetupWith(t, true, "prod")
	r.waitApps("prod")
	bin := buildPrflow(t)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(r.vars["ARGOCD_TOKEN"]), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	start := func(replica string) *exec.Cmd {
		cmd := exec.Command(bin, "agent", "--nats", r.e.Conn.ClientURL(), "--agent-id", "real", "--replica", replica,
			"--argocd-url", r.vars["ARGOCD_URL"], "--argocd-token-file", tokFile)
		lf, _ := os.Create(filepath.Join(logs, replica+".log"))
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			lf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(logs, replica+".log"))
				t.Logf("agent %s log:\n%s", replica, tail(string(b), 5000))
			}
		})
		return cmd
	}
	a1 := start("a1")
	r.waitFresh()
	start("a2")
	time.Sleep(3 * time.Second) // a2 registers as a follower
	run := r.e.Start(r.promotion([]string{"prod"}, []string{progressingProd}, ""), map[string]any{"tag": "6.0.0"})
	r.waitStep(run.ID, "prod", "sync", 2*time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "Progressing")
	})
	t0 := time.Now()
	_ = a1.Process.Signal(syscall.SIGKILL)
	r.setConfig("prod", "simulate", "healthy")
	r.pushEvent()
	r.waitFresh()
	t.Logf("REALTIME agent leader SIGKILLed: the follower has a fresh view after %.1fs", time.Since(t0).Seconds())
	final := r.e.Wait(run.ID, 3*time.Minute)
	stageTimes(t, "agent-killed", final)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s %s\n%s", final.Status, final.Error, describeRun(final))
	}
	t.Logf("REALTIME run passed %.1fs after the kill", time.Since(t0).Seconds())
	r.deployed("prod", "6.0.0")
}

var (
	prflowBin  string
	prflowOnce sync.Once
	prflowErr  error
)

// buildPrflow builds the prflow binary once per test process.
func buildPrflow(t *testing.T) string {
	t.Helper()
	prflowOnce.Do(func() {
		dir, err := os.MkdirTemp("", "prflow-real-")
		if err != nil {
			prflowErr = err
			return
		}
		prflowBin = filepath.Join(dir, "prflow")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", prflowBin, "../../cmd/prflow").CombinedOutput()
		if err != nil {
			prflowErr = fmt.Errorf("go build prflow: %v\n%s", err, out)
		}
	})
	if prflowErr != nil {
		t.Fatal(prflowErr)
	}
	return prflowBin
}

// Issue 20 #6: examples/release-repo deploys on a real Argo CD as it is. The repo is the
// example's files byte for byte; its appset.yaml is applied with only what its own comment
// says to adapt (repoURL, and the destination: realenv has one cluster, so the configs'
// dev-eu/staging-eu/prod-eu become it), in the AppProject "shop" it names. Then
// examples/pipelines/promote.yaml runs with its agent, repo and cluster names pointed at
// realenv, and the cluster runs the new tag in every environment.
func TestRealExampleReleaseRepo(t *testing.T) {
	files := map[string]string{}
	root := "../../examples/release-repo"
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var set map[string]any
	if err := yaml.Unmarshal([]byte(files["appset.yaml"]), &set); err != nil {
		t.Fatalf("examples/release-repo/appset.yaml: %v", err)
	}
	r := realSetupOpts(t, realOpts{id: "web", files: files, appSet: func(r *realEnv) map[string]any {
		if code, body := r.api("POST", "/api/v1/projects?upsert=true", map[string]any{"project": map[string]any{
			"metadata": map[string]any{"name": "shop"},
			"spec": map[string]any{"sourceRepos": []string{"*"},
				"destinations":             []any{map[string]any{"server": "*", "namespace": "*"}},
				"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}}}}}); code != 200 {
			t.Fatalf("create AppProject shop: %d %s", code, body)
		}
		spec := set["spec"].(map[string]any)
		spec["generators"].([]any)[0].(map[string]any)["git"].(map[string]any)["repoURL"] = r.url
		tmpl := spec["template"].(map[string]any)["spec"].(map[string]any)
		tmpl["source"].(map[string]any)["repoURL"] = r.url
		tmpl["destination"] = map[string]any{"server": "https://kubernetes.default.svc", "namespace": "web-{{path.basename}}"}
		return set
	}})
	envs := []string{"dev", "staging", "prod"}
	r.waitApps(envs...)
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	src, err := os.ReadFile("../../examples/pipelines/promote.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pipe := strings.NewReplacer("agent: sim", "agent: real", "repo: acme/release", "repo: "+r.repo,
		"dev-eu", "in-cluster", "staging-eu", "in-cluster", "prod-eu", "in-cluster").Replace(string(src))
	run := r.e.Wait(r.e.Start(pipe, map[string]any{"tag": "1.5.0"}).ID, 5*time.Minute)
	stageTimes(t, "example-release-repo", run)
	if run.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", run.Status, run.Error, describeRun(run))
	}
	for _, e := range envs {
		r.deployed(e, "1.5.0")
		if apps := appsOut(ctltest.Step(run, e, "sync")); len(apps) != 1 || apps[0]["name"] != "web-"+e || apps[0]["health"] != "Healthy" {
			t.Errorf("%s sync outputs: %v", e, apps)
		}
	}
}

// A deny sync window on the apps' AppProject parks GitOpsSync — no sync is asked of Argo CD,
// which would refuse it — with the window's end as the reason, and the step syncs once the
// window has passed. Real time: the window started at the top of this minute and lasts 4
// minutes, so at least 3 are left for the setup and the park.
func TestRealSyncWindow(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute)
	end := start.Add(4 * time.Minute)
	window := map[string]any{"kind": "deny", "schedule": fmt.Sprintf("%d %d * * *", start.Minute(), start.Hour()),
		"duration": "4m", "timeZone": "UTC", "applications": []any{"*"}}
	r := realSetupProject(t, false, []map[string]any{window}, "dev")
	r.waitApps("dev")
	app := r.id + "-dev"
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})

	// Argo CD itself reports the window and refuses a sync during it.
	code, body := r.api("GET", "/api/v1/applications/"+app+"/syncwindows", nil)
	if code != 200 || !strings.Contains(string(body), `"canSync":false`) {
		t.Fatalf("Argo CD's syncwindows of %s: %d %s", app, code, body)
	}
	if code, body := r.api("POST", "/api/v1/applications/"+app+"/sync", map[string]any{"name": app}); code != 403 ||
		!strings.Contains(string(body), "blocked by sync window") {
		t.Fatalf("a sync during the window: %d %s (want 403 blocked by sync window)", code, body)
	}

	src := fmt.Sprintf(`name: %s
environments:
  - name: dev
    clusters: [{name: in-cluster, agent: real}]
stages:
  - id: dev
    environment: dev
    steps:
      - id: sync
        type: GitOpsSync
        timeout: 7m
        with:
          applicationsList: [{agentId: real, applicationName: %s}]
          waitTillHealthy: true
`, r.id, app)
	run := r.e.Start(src, nil)
	want := "blocked by sync window until " + end.Format(time.RFC3339)
	r.waitStep(run.ID, "dev", "sync", time.Minute, func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.HasPrefix(st.Wait.Reason, want)
	})
	done := r.e.Wait(run.ID, 8*time.Minute)
	if done.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", done.Status, done.Error, describeRun(done))
	}
	st := ctltest.Step(done, "dev", "sync")
	if st.Ended.Before(end) {
		t.Fatalf("the sync step ended at %s, before the window closed at %s", st.Ended, end)
	}
	apps := appsOut(st)
	if len(apps) != 1 || apps[0]["sync"] != "Synced" || apps[0]["health"] != "Healthy" {
		t.Fatalf("sync outputs: %v", apps)
	}
	t.Logf("window closed %s; the step finished %s after", end.Format(time.RFC3339), st.Ended.Sub(end))
}

// UpdateGitOpsApp on a real Argo CD: the step pins a standalone app's targetRevision to a
// commit through the agent (a JSON patch that tests resourceVersion), GitOpsSync deploys it,
// and Argo CD's own record shows the new target; the step's outputs give the source before
// and after.
func TestRealUpdateGitOpsApp(t *testing.T) {
	r := realSetup(t, "dev")
	app := r.id + "-pinned"
	pin := r.git(t.TempDir(), "ls-remote", r.url, "refs/heads/main")[:40]
	code, body := r.api("POST", "/api/v1/applications", map[string]any{
		"metadata": map[string]any{"name": app, "labels": map[string]string{"harness.io/serviceRef": r.id, "harness.io/envRef": "dev"}},
		"spec": map[string]any{"project": "default",
			"source": map[string]any{"repoURL": r.url, "path": "manifests/web", "targetRevision": "main",
				"directory": map[string]any{"include": "*.jsonnet", "jsonnet": map[string]any{"tlas": []any{
					map[string]any{"name": "env", "value": "pinned"}, map[string]any{"name": "image", "value": "x:1"},
					map[string]any{"name": "replicas", "value": "1"}, map[string]any{"name": "simulate", "value": "healthy"}}}}},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": app},
			"syncPolicy":  map[string]any{"syncOptions": []string{"CreateNamespace=true"}}},
	})
	if code != 200 {
		t.Fatalf("create app: %d %s", code, body)
	}
	t.Cleanup(func() { r.api("DELETE", "/api/v1/applications/"+app+"?cascade=true", nil) })
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	src := fmt.Sprintf(`name: %s
service: {name: %s}
environments: [{name: dev, clusters: [{name: in-cluster, agent: real}]}]
stages:
  - id: dev
    environment: dev
    steps:
      - {id: update, type: UpdateGitOpsApp, with: {agentId: real, applicationName: %s, targetRevision: %s}}
      - {id: sync, type: GitOpsSync, timeout: 2m, with: {waitTillHealthy: true}}
`, r.id, r.id, app, pin)
	run := r.e.Wait(r.e.Start(src, nil).ID, 3*time.Minute)
	stageTimes(t, "update-gitops-app", run)
	if run.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", run.Status, run.Error, describeRun(run))
	}
	code, body = r.api("GET", "/api/v1/applications/"+app, nil)
	var a struct {
		Spec struct {
			Source struct{ TargetRevision string } `json:"source"`
		} `json:"spec"`
		Status struct {
			Sync struct{ Status, Revision string } `json:"sync"`
		} `json:"status"`
	}
	if code != 200 || json.Unmarshal(body, &a) != nil || a.Spec.Source.TargetRevision != pin || a.Status.Sync.Status != "Synced" || a.Status.Sync.Revision != pin {
		t.Fatalf("Argo CD's app after the run: %d target %q sync %+v (want %s Synced)", code, a.Spec.Source.TargetRevision, a.Status.Sync, pin)
	}
	up := ctltest.Step(run, "dev", "update")
	if fmt.Sprint(up.Outputs["sourceBefore"]) == fmt.Sprint(up.Outputs["sourceAfter"]) || !strings.Contains(fmt.Sprint(up.Outputs["sourceAfter"]), pin) {
		t.Errorf("update outputs: before %v after %v", up.Outputs["sourceBefore"], up.Outputs["sourceAfter"])
	}
	if apps := appsOut(ctltest.Step(run, "dev", "sync")); len(apps) != 1 || apps[0]["name"] != app || apps[0]["health"] != "Healthy" {
		t.Errorf("sync outputs: %v", apps)
	}
}
