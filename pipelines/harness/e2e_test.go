package harness_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/harness"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

const valuesYAML = `# web values
replicaCount: 2
image:
  repository: registry.example.com/web
  tag: "1.0.0"  # set by the pipeline
`

// The ApplicationSet makes one app per cluster-config/<env>/config.json.
var appSetYAML = harnessAppSet("shop", "cluster-config")

// harnessAppSet is the release repo's ApplicationSet of service svc: one app svc-<env> per
// dir/<env>/config.json, labelled for Harness, in namespace svc.
func harnessAppSet(svc, dir string) string {
	return strings.NewReplacer("SVC", svc, "DIR", dir).Replace(`apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: SVC}
spec:
  generators:
    - git: {repoURL: https://git.example/release.git, revision: main, files: [{path: "DIR/*/config.json"}]}
  template:
    metadata:
      name: 'SVC-{{env}}'
      labels: {harness.io/serviceRef: SVC, harness.io/envRef: '{{env}}'}
    spec:
      project: default
      source: {repoURL: https://git.example/release.git, path: 'DIR/{{env}}', targetRevision: main}
      destination: {name: '{{cluster}}', namespace: SVC}
`)
}

func config(env, cluster string) string {
	return fmt.Sprintf(`{"env": %q, "cluster": %q, "image": "shop:1"}`, env, cluster)
}

type kit struct {
	e   *ctltest.Env
	gh  *scmtest.GitHub
	p   scm.Provider
	dir string // the release repo's bare directory
}

// newKit starts a fake GitHub holding the release repo and a whole prflow whose controller
// converts Harness pipelines with testdata/map.yaml.
func newKit(t *testing.T, files map[string]string) *kit {
	t.Helper()
	m, err := harness.LoadMap("testdata/map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", files); err != nil {
		t.Fatal(err)
	}
	p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	conv := harness.Converter(m, steps.Default, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e := ctltest.New(t, ctltest.Options{Concurrency: 8,
		Services:   map[string]any{steps.ServiceSCM: connector.Static{"release": p}},
		Tuning:     queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5},
		Controller: []controller.Option{controller.WithSourceConverter(conv)}})
	return &kit{e: e, gh: gh, p: p, dir: gh.Git().Dir("acme", "release")}
}

// simAgent runs the simulated GitOps agent "eu" on the release repo.
func (k *kit) simAgent(t *testing.T) {
	t.Helper()
	sim, err := simagent.New(simagent.Options{AgentID: "eu", Repo: k.dir, Branch: "main", Delay: 30 * time.Millisecond,
		Step: 20 * time.Millisecond, Poll: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sim.Run(ctx, k.e.Conn) }()
	t.Cleanup(func() { cancel(); <-done })
	k.e.WaitAgent("eu")
}

func (k *kit) start(t *testing.T, file string, inputs map[string]any) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return k.e.Start(string(src), inputs).ID
}

func (k *kit) read(t *testing.T, path string) string {
	t.Helper()
	b, err := k.p.ReadFile(context.Background(), "acme/release", "main", path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// waitStep waits until a step is parked (an approval waiting for people).
func (k *kit) waitStep(t *testing.T, run, stage, step string, want pipelines.Status) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := k.e.Ctl.Get(context.Background(), run); err == nil {
			if st := ctltest.Step(r, stage, step); st != nil && st.Status == want {
				return
			}
			if r.Status.Terminal() {
				t.Fatalf("run ended (%s: %s) before %s.%s was %s\n%s", r.Status, r.Error, stage, step, want, k.e.Logs.String())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s.%s never became %s", stage, step, want)
}

// succeeded waits (within at most) until run ends, which must be a success.
func (k *kit) succeeded(t *testing.T, run string, within time.Duration) *pipelines.Run {
	t.Helper()
	r := k.e.Wait(run, within)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s %s\n%s", run, r.Status, r.Error, k.e.Logs.String())
	}
	return r
}

func (k *kit) approve(t *testing.T, run, stage, step string, ok bool) {
	t.Helper()
	sig := steps.Signal{Kind: "approval", User: "alice", Groups: []string{"release_managers"}, Approve: ok, Comment: "looked", At: time.Now()}
	if err := k.e.Ctl.Signal(context.Background(), run, stage, step, sig); err != nil {
		t.Fatal(err)
	}
}

// A Harness PR pipeline with an approval runs unchanged: the PR opens with the Harness title,
// waits for a release manager, and merges after the approval arrives through the Signal API.
func TestHarnessApprovalPipeline(t *testing.T) {
	k := newKit(t, map[string]string{"envs/dev/values.yaml": valuesYAML})
	k.e.RegisterAgent("eu") // the pipeline names agent "eu" (never asked here): runs start only when it is live
	run := k.start(t, "testdata/approval.yaml", map[string]any{"tag": "1.5.0"})
	k.waitStep(t, run, "dev", "approve", pipelines.StWaiting)
	if got := k.read(t, "envs/dev/values.yaml"); got != valuesYAML {
		t.Fatalf("main changed before the approval:\n%s", got)
	}
	k.approve(t, run, "dev", "approve", true)
	r := k.succeeded(t, run, 60*time.Second)
	want := strings.Replace(valuesYAML, `tag: "1.0.0"`, `tag: "1.5.0"`, 1)
	if got := k.read(t, "envs/dev/values.yaml"); got != want {
		t.Errorf("values.yaml after merge:\n%s\nwant:\n%s", got, want)
	}
	up := ctltest.Step(r, "dev", "updateReleaseRepo").Outputs
	n := 0
	fmt.Sscan(fmt.Sprint(up["prNumber"]), &n)
	pr, err := k.gh.PullRequest("acme", "release", n)
	if err != nil || pr.Title != "Promote 1.5.0 to dev" {
		t.Errorf("PR %d: title %q (%v), want the prTitle expression resolved", n, pr.Title, err)
	}
	ap := ctltest.Step(r, "dev", "approve").Outputs
	if !strings.Contains(fmt.Sprint(ap["approvers"]), "alice") {
		t.Errorf("approval outputs: %v", ap)
	}
}

// StageRollback runs the rollback steps when a step fails: RevertPR reverts the merge commit
// read through a Harness step-group path, its PR is merged and the file is restored; the
// stage after it does not run.
func TestHarnessStageRollback(t *testing.T) {
	k := newKit(t, map[string]string{"envs/dev/values.yaml": valuesYAML})
	k.e.RegisterAgent("eu") // the pipeline names agent "eu" (never asked here): runs start only when it is live
	run := k.start(t, "testdata/rollback.yaml", map[string]any{"tag": "2.0.0"})
	k.waitStep(t, run, "dev", "verify", pipelines.StWaiting)
	if got := k.read(t, "envs/dev/values.yaml"); !strings.Contains(got, `tag: "2.0.0"`) {
		t.Fatalf("the change was not merged before verification:\n%s", got)
	}
	k.approve(t, run, "dev", "verify", false) // rejected: the step fails
	r := k.e.Wait(run, 60*time.Second)
	if r.Status == pipelines.StSucceeded {
		t.Fatalf("run succeeded after a rejection")
	}
	rb := ctltest.Step(r, "dev", "mergeRevertPR")
	if rb == nil || rb.Status != pipelines.StSucceeded {
		t.Fatalf("rollback did not merge the revert PR: %+v\n%s", rb, k.e.Logs.String())
	}
	if got := k.read(t, "envs/dev/values.yaml"); got != valuesYAML {
		t.Errorf("values.yaml after rollback:\n%s\nwant the original:\n%s", got, valuesYAML)
	}
	merge := ctltest.Step(r, "dev", "release_mergePR").Outputs["commitId"]
	if rv := ctltest.Step(r, "dev", "revertPR"); rv == nil || merge == "" || !strings.Contains(fmt.Sprint(rv.Outputs), "prNumber") {
		t.Errorf("revertPR: %+v (merge %v)", rv, merge)
	}
	if st := r.Find("after"); st.Status != pipelines.StNotRun || st.Error != "dev failed" {
		t.Errorf("stage after a rolled back stage: %s %q, want notRun because dev failed", st.Status, st.Error)
	}
}

// An ApplicationSet pipeline creates a new environment: the config file does not exist, so
// Update Release Repo creates it; the ApplicationSet generates shop-qa, Fetch Linked Apps
// finds it and GitOps Sync waits until it is healthy on the merge commit.
func TestHarnessApplicationSetNewEnvironment(t *testing.T) {
	k := newKit(t, map[string]string{"appset.yaml": appSetYAML, "cluster-config/dev/config.json": config("dev", "prod-eu")})
	k.simAgent(t)
	r := k.succeeded(t, k.start(t, "testdata/appset.yaml", map[string]any{"image": "shop:2"}), 90*time.Second)
	got := k.read(t, "cluster-config/qa/config.json")
	for _, want := range []string{`"env": "qa"`, `"cluster": "dev-eu"`, `"image": "shop:2"`} {
		if !strings.Contains(got, want) {
			t.Errorf("created config lacks %s:\n%s", want, got)
		}
	}
	apps := fmt.Sprint(ctltest.Step(r, "qa", "fetchLinkedApps").Outputs["apps"])
	if !strings.Contains(apps, "shop-qa") || strings.Contains(apps, "shop-dev") {
		t.Errorf("linked apps: %s (want shop-qa only: shop-dev runs on another cluster)", apps)
	}
	merge := ctltest.Step(r, "qa", "mergePR").Outputs["commitId"]
	synced := ctltest.Step(r, "qa", "sync").Outputs["applications"]
	s := fmt.Sprint(synced)
	if !strings.Contains(s, "shop-qa") || !strings.Contains(s, "Healthy") || !strings.Contains(s, fmt.Sprint(merge)) {
		t.Errorf("sync outputs %s, want shop-qa Healthy at %v", s, merge)
	}
}

// Many apps: one GitOpsSync over applicationRegex, and a step matrix over
// <+pipeline.variables.apps.split(',')> syncing one app each; a stage matrix over the same list.
func TestHarnessSyncManyApps(t *testing.T) {
	files := map[string]string{"appset.yaml": appSetYAML}
	for _, env := range []string{"dev", "a", "b", "c"} {
		files["cluster-config/"+env+"/config.json"] = config(env, "dev-eu")
	}
	k := newKit(t, files)
	k.simAgent(t)
	r := k.succeeded(t, k.start(t, "testdata/matrix.yaml", map[string]any{"apps": "shop-a,shop-c"}), 90*time.Second)
	all := fmt.Sprint(ctltest.Step(r, "dev", "syncAll").Outputs["applications"])
	for _, app := range []string{"shop-dev", "shop-a", "shop-b", "shop-c"} {
		if !strings.Contains(all, app) {
			t.Errorf("syncAll did not sync %s: %s", app, all)
		}
	}
	for i, app := range []string{"shop-a", "shop-c"} {
		st := ctltest.Step(r, "dev", fmt.Sprintf("syncEach_%d", i))
		if st == nil {
			t.Fatalf("no matrix step syncEach_%d", i)
		}
		got := fmt.Sprint(st.Outputs["applications"])
		if !strings.Contains(got, app) || strings.Count(got, "name:shop-") != 1 {
			t.Errorf("syncEach_%d synced %s, want only %s", i, got, app)
		}
	}
	if ctltest.Step(r, "dev", "syncEach_2") != nil {
		t.Error("a third matrix step for two apps")
	}
	for _, id := range []string{"report_0", "report_1"} {
		if s := r.Find(id); s == nil || s.Status != pipelines.StSucceeded {
			t.Errorf("matrix stage %s: %+v", id, s)
		}
	}
}

// Runs store the converted native text: a controller restarted without the mapping file (and
// without the converter) resumes a parked Harness run and finishes it.
func TestHarnessRunSurvivesRestartWithoutMap(t *testing.T) {
	k := newKit(t, map[string]string{"envs/dev/values.yaml": valuesYAML})
	dir := t.TempDir()
	k.e.Stop()
	m, _ := harness.LoadMap("testdata/map.yaml")
	conv := harness.Converter(m, steps.Default, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	svc := map[string]any{steps.ServiceSCM: connector.Static{"release": k.p}}
	k.e = ctltest.New(t, ctltest.Options{Dir: dir, Services: svc, Controller: []controller.Option{controller.WithSourceConverter(conv)}})
	k.e.RegisterAgent("eu")
	run := k.start(t, "testdata/approval.yaml", map[string]any{"tag": "3.0.0"})
	k.waitStep(t, run, "dev", "approve", pipelines.StWaiting)
	k.e.Stop()

	k.e = ctltest.New(t, ctltest.Options{Dir: dir, Services: svc}) // no converter, no map
	k.approve(t, run, "dev", "approve", true)
	k.succeeded(t, run, 60*time.Second)
	if got := k.read(t, "envs/dev/values.yaml"); !strings.Contains(got, `tag: "3.0.0"`) {
		t.Errorf("values.yaml after the restarted run:\n%s", got)
	}
}

// The web ApplicationSet makes one app per envs/<env>/config.json, labelled for Harness.
var webAppSetYAML = harnessAppSet("web", "envs")

// The goal of issue 15: a GitOps PR pipeline as the Harness UI saves it (service runtime
// inputs, stage-level gitOpsEnabled, the empty lists the UI writes, Get App Details, Harness
// agent ids, notification rules) runs in strict mode from the PR to the synced app.
func TestHarnessUIPipelineEndToEnd(t *testing.T) {
	k := newKit(t, map[string]string{"appset.yaml": webAppSetYAML, "envs/dev/values.yaml": valuesYAML,
		"envs/dev/config.json": `{"env": "dev", "cluster": "dev-eu"}`})
	k.simAgent(t)
	run := k.start(t, "testdata/ui_pr.yaml", map[string]any{"tag": "4.0.0"})
	k.waitStep(t, run, "promote_dev", "approveMerge", pipelines.StWaiting)
	k.approve(t, run, "promote_dev", "approveMerge", true)
	r := k.succeeded(t, run, 90*time.Second)
	if got := k.read(t, "envs/dev/values.yaml"); !strings.Contains(got, `tag: "4.0.0"`) {
		t.Errorf("values.yaml after the run:\n%s", got)
	}
	if r.Inputs["web_primaryArtifactRef"] != "web_image" {
		t.Errorf("artifact input kept with the run: %v", r.Inputs)
	}
	details := fmt.Sprint(ctltest.Step(r, "promote_dev", "getAppDetails").Outputs["applications"])
	if !strings.Contains(details, "name:web-dev") || !strings.Contains(details, "agent:eu") {
		t.Errorf("GetAppDetails outputs %s", details)
	}
	merge := ctltest.Step(r, "promote_dev", "mergePR").Outputs["commitId"]
	synced := fmt.Sprint(ctltest.Step(r, "promote_dev", "syncWeb").Outputs["applications"])
	if !strings.Contains(synced, "web-dev") || !strings.Contains(synced, fmt.Sprint(merge)) {
		t.Errorf("sync outputs %s, want web-dev at %v", synced, merge)
	}
}

// Update GitOps App as the Harness UI saves it runs in strict mode end to end on the simulated
// agent: the app's source changes (the release repo does not), it turns OutOfSync, GitOps Sync
// syncs it without an app list, and Get App Details reads it through the update's outcome.
// With verify=yes a rejected approval rolls the stage back: the Rollback tab's Update GitOps
// App puts the Helm parameter back and the app is synced again.
func TestHarnessUpdateGitOpsAppEndToEnd(t *testing.T) {
	files := map[string]string{"appset.yaml": webAppSetYAML, "envs/dev/config.json": `{"env": "dev", "cluster": "dev-eu"}`}
	k := newKit(t, files)
	k.simAgent(t)
	r := k.succeeded(t, k.start(t, "testdata/ui_update.yaml", map[string]any{"tag": "5.0.0"}), 90*time.Second)
	upd := ctltest.Step(r, "update_dev", "updateApp").Outputs
	if after := fmt.Sprint(upd["sourceAfter"]); !strings.Contains(after, "name:image.tag") || !strings.Contains(after, "value:5.0.0") ||
		fmt.Sprint(upd["application"].(map[string]any)["agent"]) != "eu" {
		t.Errorf("updateApp outputs %v", upd)
	}
	if synced := fmt.Sprint(ctltest.Step(r, "update_dev", "syncApp").Outputs["applications"]); !strings.Contains(synced, "web-dev") || !strings.Contains(synced, "Healthy") {
		t.Errorf("syncApp outputs %s, want web-dev Healthy", synced)
	}
	if d := fmt.Sprint(ctltest.Step(r, "update_dev", "getAppDetails").Outputs["applications"]); !strings.Contains(d, "sync:Synced") || !strings.Contains(d, "name:web-dev") {
		t.Errorf("getAppDetails outputs %s", d)
	}
	if st := ctltest.Step(r, "update_dev", "verify"); st.Status != pipelines.StSkipped {
		t.Errorf("verify: %s, want skipped (verify=no)", st.Status)
	}
	if got := k.read(t, "envs/dev/config.json"); got != files["envs/dev/config.json"] {
		t.Errorf("the release repo changed: %s", got)
	}

	run := k.start(t, "testdata/ui_update.yaml", map[string]any{"tag": "6.0.0", "verify": "yes"})
	k.waitStep(t, run, "update_dev", "verify", pipelines.StWaiting)
	k.approve(t, run, "update_dev", "verify", false)
	r = k.e.Wait(run, 90*time.Second)
	if r.Status == pipelines.StSucceeded {
		t.Fatalf("run succeeded after a rejection")
	}
	rb := ctltest.Step(r, "update_dev", "revertApp")
	if rb == nil || rb.Status != pipelines.StSucceeded || rb.Outputs["changed"] != true {
		t.Fatalf("revertApp: %+v\n%s", rb, k.e.Logs.String())
	}
	// The second run found 5.0.0 (the first run's value) and put it back.
	if after := fmt.Sprint(rb.Outputs["sourceAfter"]); !strings.Contains(after, "value:5.0.0") || strings.Contains(after, "6.0.0") {
		t.Errorf("source after the rollback %s, want image.tag 5.0.0 again", after)
	}
	if rs := ctltest.Step(r, "update_dev", "syncReverted"); rs == nil || rs.Status != pipelines.StSucceeded {
		t.Errorf("syncReverted: %+v", rs)
	}
}

// An imported pipeline keeps Harness's behaviour of creating a key the file lacks (here a
// mistyped or new image.tag), but says so: the step's created output lists it and the run
// carries a warning naming the file and key.
func TestHarnessImportCreatesAndWarns(t *testing.T) {
	noTag := "# web values\nreplicaCount: 2\nimage:\n  repository: registry.example.com/web\n"
	k := newKit(t, map[string]string{"envs/dev/values.yaml": noTag})
	k.e.RegisterAgent("eu")
	run := k.start(t, "testdata/approval.yaml", map[string]any{"tag": "1.5.0"})
	k.waitStep(t, run, "dev", "approve", pipelines.StWaiting)
	k.approve(t, run, "dev", "approve", true)
	r := k.succeeded(t, run, 60*time.Second)
	if got := k.read(t, "envs/dev/values.yaml"); got != noTag+"  tag: 1.5.0\n" {
		t.Errorf("values.yaml:\n%s", got)
	}
	up := ctltest.Step(r, "dev", "updateReleaseRepo").Outputs
	if got := fmt.Sprint(up["created"]); got != "[envs/dev/values.yaml: image.tag]" {
		t.Errorf("created output %s, want [envs/dev/values.yaml: image.tag]", got)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "dev/updateReleaseRepo created") || !strings.Contains(r.Warnings[0], "envs/dev/values.yaml: image.tag") {
		t.Errorf("run warnings %q, want one naming the step, file and key", r.Warnings)
	}
}
