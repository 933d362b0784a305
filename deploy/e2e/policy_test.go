package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// policyStack is the promotion stack (fake GitHub, controller and worker, simulated agent)
// with the repository's example policies plus one stage warning, loaded like the server
// loads --policies.
func policyStack(t *testing.T, stagingHealth string) (*ctltest.Env, *scmtest.GitHub) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"pipeline.rego", "run.rego", "stage.rego"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	warn := "package prflow.stage\n\nwarn contains sprintf(\"stage %s runs without a timeout\", [input.stage.id]) if input.stage.environment == \"prod\"\n"
	if err := os.WriteFile(filepath.Join(dir, "warn.rego"), []byte(warn), 0o644); err != nil {
		t.Fatal(err)
	}
	pe, err := policy.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := promoFiles("prod")
	files["manifests/web/web.jsonnet"] = promoManifest
	files["envs/staging/config.json"] = strings.Replace(promoConfig("staging"), `"replicas": 2`, `"replicas": 2, "simulate": "`+stagingHealth+`"`, 1)
	s := newPromoStackOpts(t, files, true, ctltest.Options{Concurrency: 4, Controller: []controller.Option{controller.WithPolicy(pe)}})
	e, ctx := s.e, context.Background()
	// The stage policy reads staging's live status: wait until the agent reported it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if en, err := e.Ctl.Buckets().Apps.Get(ctx, "sim.web-staging"); err == nil && strings.Contains(string(en.Value()), `"health":"`+stagingHealth+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never reported web-staging %s", stagingHealth)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e, s.gh
}

// prodOnly promotes to prod only; APPROVAL is replaced by an approval block or nothing.
const prodOnly = `name: promote-prod
inputs:
  tag: {type: string, required: true}
service: {name: web}
environments:
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
  syncTimeout: 1m
  environments:
    - {name: prod APPROVAL}
`

// withApproval gives prodOnly's prod an approval by alice.
const withApproval = ", approval: {approvers: {users: [alice]}, timeout: 1m}"

// startProd starts prodOnly, APPROVAL replaced by approval, with tag, as executor in group.
func startProd(e *ctltest.Env, approval, tag, executor, group string) (*pipelines.Run, error) {
	return e.Ctl.Start(context.Background(), controller.StartRequest{File: "prod.yaml",
		Source: []byte(strings.Replace(prodOnly, " APPROVAL", approval, 1)),
		Inputs: map[string]any{"tag": tag}, Executor: executor, Groups: []string{group}})
}

func noPRs(t *testing.T, gh *scmtest.GitHub) {
	t.Helper()
	prs, err := gh.PullRequests("acme", "release")
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 0 {
		t.Fatalf("policy denied, yet %d PRs were opened: %+v", len(prs), prs)
	}
}

// TestPolicyDeniesRunStart: a run the run and pipeline policies deny (prod without an
// Approval step, a tag that is not semver, a caller outside release-managers) is refused
// with every message before anything is stored, and the fake forge has no PR.
func TestPolicyDeniesRunStart(t *testing.T) {
	t.Parallel()
	e, gh := policyStack(t, "Healthy")
	_, err := startProd(e, "", "latest", "bob", "dev")
	if !errors.Is(err, policy.ErrDenied) {
		t.Fatalf("start: %v, want a policy denial", err)
	}
	for _, want := range []string{"stage prod deploys to prod without an Approval step"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("denial %q lacks %q", err, want)
		}
	}
	// With an approval step the pipeline policy passes; the run policy then names both of
	// its problems.
	_, err = startProd(e, withApproval, "latest", "bob", "dev")
	for _, want := range []string{`input tag: "latest" is not a semantic version`, "bob may not start runs that deploy to prod"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("denial %v lacks %q", err, want)
		}
	}
	runs, err := e.Ctl.List(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 {
		t.Errorf("%d runs stored after denials", len(runs))
	}
	noPRs(t, gh)
}

// TestPolicyDeniesStage: staging is Degraded, so the stage policy fails prod before any of
// its jobs (no approval asked, no PR), with the message in the stage's and the run's error,
// and the stage warning kept on the stage.
func TestPolicyDeniesStage(t *testing.T) {
	t.Parallel()
	e, gh := policyStack(t, "Degraded")
	r, err := startProd(e, withApproval, "1.5.0", "ann", "release-managers")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	r = e.Wait(r.ID, time.Minute)
	want := "staging app web-staging is Degraded, not Healthy"
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, want) {
		t.Fatalf("run %s: %q, want failed with %q\n%s", r.Status, r.Error, want, describeRun(r))
	}
	sr := r.Stages[0]
	if sr.Status != pipelines.StFailed || !strings.Contains(sr.Error, "denied by policy: "+want) {
		t.Errorf("stage %s: %s %q", sr.ID, sr.Status, sr.Error)
	}
	for _, st := range sr.Steps {
		if st.Status != pipelines.StNotRun || st.Attempt != 0 {
			t.Errorf("step %s: %s (attempt %d), want not run", st.ID, st.Status, st.Attempt)
		}
	}
	if len(sr.Warnings) != 1 || sr.Warnings[0] != "stage prod runs without a timeout" {
		t.Errorf("stage warnings %q", sr.Warnings)
	}
	noPRs(t, gh)
}

// TestPolicyAllowsStage: the same run goes through when staging is Healthy (the denial above
// came from staging's live status, not from the policy denying every prod stage).
func TestPolicyAllowsStage(t *testing.T) {
	t.Parallel()
	e, gh := policyStack(t, "Healthy")
	r, err := startProd(e, withApproval, "1.5.0-rc.1", "ann", "release-managers")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "pre-release") {
		t.Errorf("run warnings %q, want the pre-release warning", r.Warnings)
	}
	waitApproval(t, e, r.ID)
	_ = gh
}

// Issue 33: the stage policy sees what the stage's PR deploys (input.diff) after its preview
// and before its merge. The example policy denies replicas going to 0 in prod: the approved
// stage fails at its preview, nothing merges, and the cleanup closes the PR.
func TestPolicyDeniesTheDiffBeforeTheMerge(t *testing.T) {
	t.Parallel()
	e, gh := policyStack(t, "Healthy")
	r, err := startProd(e, withApproval+", set: {replicas: 0}", "1.5.0", "ann", "release-managers")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	waitApproval(t, e, r.ID)
	if err := e.Ctl.Signal(context.Background(), r.ID, "prod", "approval", steps.Signal{Kind: "approval", User: "alice", Approve: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r = e.Wait(r.ID, time.Minute)
	want := "step preview: denied by policy: ConfigMap web-prod/web: data.replicas goes to 0 in prod"
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, want) {
		t.Fatalf("run %s: %q, want failed with %q\n%s", r.Status, r.Error, want, describeRun(r))
	}
	pv := ctltest.Step(r, "prod", "preview")
	if pv.Status != pipelines.StFailed || pv.Outputs["changed"] != true {
		t.Errorf("preview: %s %v", pv.Status, pv.Outputs)
	}
	if m := ctltest.Step(r, "prod", "merge"); m.Status == pipelines.StSucceeded || m.Status == pipelines.StRunning {
		t.Errorf("merge: %s", m.Status)
	}
	prs, err := gh.PullRequests("acme", "release")
	if err != nil || len(prs) != 1 {
		t.Fatalf("PRs: %v %v", prs, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pr, _ := gh.PullRequest("acme", "release", prs[0].Number)
		if pr.State == scmtest.PRClosed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PR #%d is %s, want closed by the cleanup", pr.Number, pr.State)
		}
	}
}
