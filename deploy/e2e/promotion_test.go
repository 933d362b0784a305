package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// The promotion tests run the whole path a `promotion:` pipeline takes in production: the
// controller and a worker on embedded NATS (ctltest), the real GitHub driver against the
// fake GitHub (real git merges and reverts in a bare repo served by git http-backend), and
// the simulated agent deploying that repo's ApplicationSet (git files generator over
// envs/*/config.json).

// The apps deploy the example release repo's manifests/web/web.jsonnet with each config's
// values as arguments (promoManifest), as on Argo CD: the preview renders it.
const promoAppSet = `apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: web}
spec:
  generators:
    - git: {repoURL: https://git.example/release.git, revision: main, files: [{path: "envs/*/config.json"}]}
  template:
    metadata:
      name: 'web-{{path.basename}}'
      labels: {harness.io/serviceRef: web, harness.io/envRef: '{{path.basename}}'}
    spec:
      project: default
      source:
        repoURL: https://git.example/release.git
        path: manifests/web
        targetRevision: main
        directory:
          include: '*.jsonnet'
          jsonnet:
            tlas:
              - {name: env, value: '{{path.basename}}'}
              - {name: image, value: '{{image.repository}}:{{image.tag}}'}
              - {name: replicas, value: '{{replicas}}'}
              - {name: simulate, value: '{{simulate}}'}
      destination: {name: '{{cluster.name}}', namespace: 'web-{{path.basename}}'}
`

// promoManifest is what every app of promoAppSet deploys.
var promoManifest = examples.ReleaseRepo()["manifests/web/web.jsonnet"]

// promoConfig is an environment's config file as a person wrote it: the run must leave any
// file it does not promote, or reverts, exactly like this.
func promoConfig(env string) string {
	return "{\n  \"env\": \"" + env + "\",\n  \"cluster\": {\"name\": \"" + env + "-eu\"},\n" +
		"  \"image\": {\"repository\": \"registry.example.com/shop/web\", \"tag\": \"1.4.1\"},\n  \"replicas\": 2\n}\n"
}

type promoStack struct {
	t  *testing.T
	e  *ctltest.Env
	gh *scmtest.GitHub
	p  scm.Provider
}

// newPromoStack seeds acme/release with the ApplicationSet and the given environments' config
// files and starts prflow and the simulated agent on it.
func newPromoStack(t *testing.T, envs ...string) *promoStack {
	return newPromoStackFiles(t, promoFiles(envs...))
}

// promoFiles is acme/release with the ApplicationSet and the given environments' config files.
func promoFiles(envs ...string) map[string]string {
	files := map[string]string{"appset.yaml": promoAppSet}
	for _, e := range envs {
		files["envs/"+e+"/config.json"] = promoConfig(e)
	}
	return files
}

func newPromoStackFiles(t *testing.T, files map[string]string) *promoStack {
	return newPromoStackFilesAgent(t, files, true)
}

// newPromoStackFilesAgent starts the stack, with the simulated agent when withAgent.
func newPromoStackFilesAgent(t *testing.T, files map[string]string, withAgent bool) *promoStack {
	if _, ok := files["manifests/web/web.jsonnet"]; !ok {
		files["manifests/web/web.jsonnet"] = promoManifest
	}
	return newPromoStackOpts(t, files, withAgent, ctltest.Options{Concurrency: 8})
}

// newPromoStackOpts seeds acme/release with files as they are and starts prflow with o, whose
// Services gain the release connector and whose Tuning is the promotion tests', with the
// simulated agent when withAgent.
func newPromoStackOpts(t *testing.T, files map[string]string, withAgent bool, o ctltest.Options) *promoStack {
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", files); err != nil {
		t.Fatal(err)
	}
	p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	services := map[string]any{steps.ServiceSCM: connector.Static{"release": p}}
	maps.Copy(services, o.Services)
	o.Services = services
	o.Tuning = queue.ConsumerTuning{AckWait: 10 * time.Second, MaxDeliver: 5}
	e := ctltest.New(t, o)
	s := &promoStack{t: t, e: e, gh: gh, p: p}
	if withAgent {
		s.startAgent()
	}
	return s
}

// file returns a file of the release repo's main branch, or "" when it does not exist.
func (s *promoStack) file(path string) string {
	s.t.Helper()
	b, err := s.p.ReadFile(context.Background(), "acme/release", "main", path)
	if errors.Is(err, scm.ErrNotFound) {
		return ""
	}
	if err != nil {
		s.t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// waitEnvStep waits up to a minute until step stage.stepID of run id satisfies cond and
// returns the run; the test fails, naming what it waited for, when the run ends first.
func waitEnvStep(t *testing.T, e *ctltest.Env, id, stage, stepID, what string, cond func(*pipelines.StepRun) bool) *pipelines.Run {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		cur, err := e.Ctl.Get(context.Background(), id)
		if err == nil {
			if st := ctltest.Step(cur, stage, stepID); st != nil && cond(st) {
				return cur
			}
		}
		if time.Now().After(deadline) || (cur != nil && cur.Status.Terminal()) {
			t.Fatalf("step %s.%s: %s: not so after a minute or the run ended (%v)\n%s", stage, stepID, what, err, describeRun(cur))
		}
	}
}

// waitApproval waits until prod's approval step of run id waits for a person.
func waitApproval(t *testing.T, e *ctltest.Env, id string) {
	t.Helper()
	waitEnvStep(t, e, id, "prod", "approval", "waiting for its approval", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting
	})
}

// syncedOn checks that a stage's GitOpsSync step (or rollback step) left its one app Synced
// and Healthy on the given commit.
func syncedOn(t *testing.T, r *pipelines.Run, stage, stepID, app, sha string) {
	t.Helper()
	st := ctltest.Step(r, stage, stepID)
	apps := appsOut(st)
	if st.Status != pipelines.StSucceeded || len(apps) != 1 || apps[0]["name"] != app || apps[0]["health"] != "Healthy" ||
		apps[0]["sync"] != "Synced" || apps[0]["syncedRevision"] != sha || sha == "" {
		t.Errorf("%s.%s: %s, apps %v, want %s Healthy on %s", stage, stepID, st.Status, apps, app, sha)
	}
}

const promoPipeline = `name: promote-web
inputs:
  tag: {type: string, required: true}
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
  - name: staging
    clusters: [{name: staging-eu, agent: sim}]
  - name: prod
    clusters: [{name: prod-eu, agent: sim}]
promotion:
  applicationSet: web
  connector: release
  repo: acme/release
  filePath: "envs/<+env.name>/config.json"
  set:
    image.tag: "${{ inputs.tag }}"
  mergeStrategy: MERGE
  syncTimeout: 1m
  degradedTimeout: 1s
  environments:
    - dev
    - {name: staging, soak: 300ms}
    - PROD
`

func TestPromotionThroughEnvironments(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev", "staging", "prod")
	src := strings.NewReplacer("MERGE", "squash", "PROD", "{name: prod, approval: {approvers: {users: [alice]}, timeout: 1m}}").Replace(promoPipeline)
	run := s.e.Start(src, map[string]any{"tag": "1.5.0"})
	waitApproval(t, s.e, run.ID) // prod waits for alice before it opens its PR
	if got := s.file("envs/prod/config.json"); got != promoConfig("prod") {
		t.Fatalf("prod changed before its approval:\n%s", got)
	}
	if err := s.e.Ctl.Signal(context.Background(), run.ID, "prod", "approval", steps.Signal{Kind: "approval", User: "alice", Approve: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r := s.e.Wait(run.ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	for _, env := range []string{"dev", "staging", "prod"} {
		want := strings.Replace(promoConfig(env), `"tag": "1.4.1"`, `"tag": "1.5.0"`, 1)
		if got := s.file("envs/" + env + "/config.json"); got != want {
			t.Errorf("envs/%s/config.json:\n%s\nwant\n%s", env, got, want)
		}
		merge := ctltest.Step(r, env, "merge")
		syncedOn(t, r, env, "sync", "web-"+env, fmt.Sprint(merge.Outputs["commitId"]))
		if rb := ctltest.Step(r, env, "revert"); rb.Status != pipelines.StPending {
			t.Errorf("%s rolled back: %s", env, rb.Status)
		}
	}
	if a := ctltest.Step(r, "prod", "approval"); a.Status != pipelines.StSucceeded || !strings.Contains(fmt.Sprint(a.Outputs["approvers"]), "alice") {
		t.Errorf("prod approval: %v", a.Outputs)
	}
	if g := ctltest.Step(r, "staging", "gate"); g.Status != pipelines.StSucceeded {
		t.Errorf("staging soak: %s %s", g.Status, g.Error)
	}
	prs, _ := s.gh.PullRequests("acme", "release")
	if len(prs) != 3 {
		t.Errorf("%d PRs, want one per environment", len(prs))
	}
}

// Environments often share one cluster (a namespace each). Each stage must then link, sync
// and gate only its own environment's app, never another environment's app that the same
// ApplicationSet generated on that cluster (a dev stage must not sync prod).
func TestPromotionEnvironmentsSharingACluster(t *testing.T) {
	t.Parallel()
	files := map[string]string{"appset.yaml": promoAppSet}
	for _, e := range []string{"dev", "staging", "prod"} {
		files["envs/"+e+"/config.json"] = strings.Replace(promoConfig(e), e+"-eu", "in-cluster", 1)
	}
	s := newPromoStackFiles(t, files)
	src := strings.NewReplacer("MERGE", "merge", "PROD", "prod", "dev-eu", "in-cluster", "staging-eu", "in-cluster", "prod-eu", "in-cluster").Replace(promoPipeline)
	r := s.e.Wait(s.e.Start(src, map[string]any{"tag": "1.5.0"}).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	for _, env := range []string{"dev", "staging", "prod"} {
		if apps, _ := ctltest.Step(r, env, "apps").Outputs["apps"].([]any); len(apps) != 1 || apps[0].(map[string]any)["name"] != "web-"+env {
			t.Errorf("%s: linked apps %v, want only web-%s", env, apps, env)
		}
		merge := ctltest.Step(r, env, "merge")
		syncedOn(t, r, env, "sync", "web-"+env, fmt.Sprint(merge.Outputs["commitId"]))
	}
}

func TestPromotionRollsBackADegradedEnvironment(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev", "staging", "prod")
	// prod's change also tells the simulated agent to turn the app Degraded.
	src := strings.NewReplacer("MERGE", "merge", "    - PROD\n", "    - {name: prod, set: {simulate: degraded}, create: true}\n").Replace(promoPipeline)
	before := s.file("envs/prod/config.json")
	r := s.e.Wait(s.e.Start(src, map[string]any{"tag": "1.6.0"}).ID, 2*time.Minute)
	if r.Status != pipelines.StFailed || !strings.HasPrefix(r.Error, "stage prod: step sync:") ||
		!strings.Contains(r.Error, "web-prod (agent sim): Degraded for longer than degradedStateTimeout 1s") {
		t.Fatalf("run %s %q, want failed naming prod\n%s", r.Status, r.Error, describeRun(r))
	}
	for _, env := range []string{"dev", "staging"} {
		if st := r.Find(env).Status; st != pipelines.StSucceeded {
			t.Errorf("stage %s: %s", env, st)
		}
		if got := s.file("envs/" + env + "/config.json"); !strings.Contains(got, `"tag": "1.6.0"`) {
			t.Errorf("%s is not on the new version:\n%s", env, got)
		}
	}
	if got := s.file("envs/prod/config.json"); got != before {
		t.Errorf("prod's config.json is not back to what it was:\n%q\nwant\n%q", got, before)
	}
	// The revert is a PR of its own, merged; prod is synced again on that merge.
	merged := fmt.Sprint(ctltest.Step(r, "prod", "merge").Outputs["commitId"])
	revert := ctltest.Step(r, "prod", "revert")
	mergeRevert := ctltest.Step(r, "prod", "mergeRevert")
	num, _ := revert.Outputs["prNumber"].(float64)
	pr, err := s.gh.PullRequest("acme", "release", int(num))
	if err != nil || pr.State != scmtest.PRMerged || pr.MergeCommitSHA != mergeRevert.Outputs["commitId"] || !strings.Contains(pr.Title+pr.Body, merged[:7]) {
		t.Errorf("revert PR #%v: %+v %v (reverting %s)", revert.Outputs["prNumber"], pr, err, merged)
	}
	syncedOn(t, r, "prod", "resync", "web-prod", fmt.Sprint(mergeRevert.Outputs["commitId"]))
}

func TestPromotionCreatesAnEnvironment(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	if got := s.file("envs/qa/config.json"); got != "" {
		t.Fatalf("qa exists before the run:\n%s", got)
	}
	src := `name: new-env
inputs:
  tag: {type: string, required: true}
service: {name: web}
promotion:
  applicationSet: web
  connector: release
  repo: acme/release
  filePath: "envs/<+env.name>/config.json"
  set: {image.tag: "${{ inputs.tag }}", replicas: 1}
  syncTimeout: 1m
  environments:
    - name: qa
      clusters: [{name: qa-eu, agent: sim}]
      set: {cluster.name: qa-eu}
      create: true
`
	r := s.e.Wait(s.e.Start(src, map[string]any{"tag": "2.0.0"}).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	got := s.file("envs/qa/config.json")
	for _, want := range []string{`"tag": "2.0.0"`, `"replicas": 1`, `"name": "qa-eu"`} {
		if !strings.Contains(got, want) {
			t.Errorf("envs/qa/config.json lacks %s:\n%s", want, got)
		}
	}
	if up := ctltest.Step(r, "qa", "update"); fmt.Sprint(up.Outputs["changedFiles"]) != "[envs/qa/config.json]" {
		t.Errorf("changed files: %v", up.Outputs["changedFiles"])
	}
	apps, _ := ctltest.Step(r, "qa", "apps").Outputs["apps"].([]any)
	if len(apps) != 1 || apps[0].(map[string]any)["name"] != "web-qa" || apps[0].(map[string]any)["cluster"] != "qa-eu" {
		t.Errorf("the ApplicationSet did not generate web-qa: %v", apps)
	}
	syncedOn(t, r, "qa", "sync", "web-qa", fmt.Sprint(ctltest.Step(r, "qa", "merge").Outputs["commitId"]))
	if got := s.file("envs/dev/config.json"); got != promoConfig("dev") {
		t.Errorf("dev changed:\n%s", got)
	}
}

// With mergedBy: people, prflow opens each environment's PR and waits; once a person merges
// it, the environment syncs on that merge commit.
func TestPromotionWaitsForPeopleToMerge(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	src := `name: reviewed
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
promotion:
  applicationSet: web
  connector: release
  repo: acme/release
  filePath: "envs/<+env.name>/config.json"
  set: {image.tag: "3.0.0"}
  mergedBy: people
  syncTimeout: 1m
  environments: [dev]
`
	run := s.e.Start(src, nil)
	var pr int
	deadline := time.Now().Add(30 * time.Second)
	for pr == 0 {
		cur, _ := s.e.Ctl.Get(context.Background(), run.ID)
		if st := ctltest.Step(cur, "dev", "update"); st != nil && st.Status == pipelines.StWaiting {
			if prs, _ := s.gh.PullRequests("acme", "release"); len(prs) == 1 && prs[0].State == scmtest.PROpen {
				pr = prs[0].Number
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the update step did not wait on its PR\n%s", describeRun(cur))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.file("envs/dev/config.json"); got != promoConfig("dev") {
		t.Fatalf("main changed before anyone merged:\n%s", got)
	}
	merged, err := s.p.MergePR(context.Background(), "acme/release", pr, scm.MergeInput{Method: scm.MergeCommit})
	if err != nil {
		t.Fatal(err)
	}
	// The webhook (another part of prflow) wakes the step; without it the poll would, later.
	if err := s.e.Ctl.WakeTopic(context.Background(), fmt.Sprintf("pr:github:acme/release#%d", pr)); err != nil {
		t.Fatal(err)
	}
	r := s.e.Wait(run.ID, time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if up := ctltest.Step(r, "dev", "update"); up.Outputs["commitId"] != merged.MergeSHA {
		t.Errorf("update commitId %v, want the merge %s", up.Outputs["commitId"], merged.MergeSHA)
	}
	syncedOn(t, r, "dev", "sync", "web-dev", merged.MergeSHA)
	if got := s.file("envs/dev/config.json"); !strings.Contains(got, `"tag": "3.0.0"`) {
		t.Errorf("dev config:\n%s", got)
	}
}

// Re-running a promotion with the inputs it already promoted (a retry after a failure past
// the merges, or a second click) used to fail in the first environment with "no files
// changed". Each environment now finds its values on main and its app Synced and Healthy at
// a revision containing main's head: the stage succeeds as alreadyPromoted with no PR, no
// merge commit, and nothing for a rollback to revert.
func TestPromotionRerunIsAlreadyPromoted(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev", "staging", "prod")
	src := strings.NewReplacer("MERGE", "merge", "PROD", "prod").Replace(promoPipeline)
	first := s.e.Wait(s.e.Start(src, map[string]any{"tag": "1.5.0"}).ID, 2*time.Minute)
	if first.Status != pipelines.StSucceeded {
		t.Fatalf("first run %s: %s\n%s", first.Status, first.Error, describeRun(first))
	}
	head, err := s.p.Branch(context.Background(), "acme/release", "main")
	if err != nil {
		t.Fatal(err)
	}
	prsBefore, _ := s.gh.PullRequests("acme", "release")

	r := s.e.Wait(s.e.Start(src, map[string]any{"tag": "1.5.0"}).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("re-run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	for _, env := range []string{"dev", "staging", "prod"} {
		up := ctltest.Step(r, env, "update").Outputs
		if up["alreadyPromoted"] != true || up["prNumber"] != "" || up["commitId"] != "" || up["revision"] != head.SHA {
			t.Errorf("%s update outputs %v, want alreadyPromoted at %s without a PR or commit", env, up, head.SHA)
		}
		m := ctltest.Step(r, env, "merge").Outputs
		if m["alreadyPromoted"] != true || m["commitId"] != "" || m["revision"] != head.SHA {
			t.Errorf("%s merge outputs %v, want alreadyPromoted, no merge commit", env, m)
		}
		syncedOn(t, r, env, "sync", "web-"+env, head.SHA)
		if rb := ctltest.Step(r, env, "revert"); rb.Status != pipelines.StPending {
			t.Errorf("%s rolled back: %s", env, rb.Status)
		}
	}
	after, err := s.p.Branch(context.Background(), "acme/release", "main")
	if err != nil || after.SHA != head.SHA {
		t.Errorf("main moved from %s to %s (%v): the re-run committed something", head.SHA, after.SHA, err)
	}
	if prs, _ := s.gh.PullRequests("acme", "release"); len(prs) != len(prsBefore) {
		t.Errorf("%d PRs after the re-run, %d before: it opened a PR", len(prs), len(prsBefore))
	}
}
