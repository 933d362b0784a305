package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/harness"
	"github.com/prflow/prflow/steps/verify/verifytest"
)

// cvMap maps pipelines/harness/testdata/pr_cv.yaml onto the verify stack: the release repo on
// the fake GitHub, the simulated agent, and a real Prometheus as web's health source (the
// map's count and interval win over the sample's 10m duration, so the test takes seconds).
const cvMap = `services:
  web:
    releaseRepo: {connector: release, repo: acme/release, branch: main, path: "envs/<+env.name>/config.json"}
    artifacts: {primaryArtifactRef: web_image}
environments:
  prod: {gitOpsClusters: [prod_cluster]}
gitOpsClusters:
  prod_cluster: {name: prod-eu, agent: sim}
agents:
  harnessdevagent: sim
monitoredServices:
  web:
    metrics:
      - name: errors
        provider: prom
        query: 'sum(rate(http_requests_total{app="web-<+env.name>",code="500"}[4s])) / sum(rate(http_requests_total{app="web-<+env.name>"}[4s]))'
        interval: 1s
        count: 3
        failureCondition: result > 0.05
`

// cvRollback gives the sample's empty rollbackSteps what a GitOps stage rolls back with.
const cvRollback = `rollbackSteps:
              - step:
                  type: RevertPR
                  name: Revert PR
                  identifier: revertPR
                  timeout: 10m
                  spec:
                    commitId: <+execution.steps.mergePR.mergePROutcome.commitId>
                    prTitle: Revert web
              - step:
                  type: MergePR
                  name: Merge Revert PR
                  identifier: mergeRevertPR
                  timeout: 10m
                  spec: {deleteSourceBranch: true}
              - step:
                  type: GitOpsSync
                  name: Resync
                  identifier: resync
                  timeout: 10m
                  spec:
                    applicationsList:
                      - {applicationName: web-prod, agentId: harnessdevagent}`

// TestHarnessPRPipelineCV: Harness's PR pipeline with CV, converted in strict mode with a map,
// runs on the simulated agent with a real Prometheus as its health source. A good release
// passes Verify. A bad one (synced and Healthy, but serving errors) fails Verify; the stage
// waits for a manual intervention, nobody decides, and the timeout rolls the stage back
// (RevertPR, MergePR, GitOpsSync): prod is back on the good release.
func TestHarnessPRPipelineCV(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../pipelines/harness/testdata/pr_cv.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The sample waits 2h for a person; the test waits 5s.
	text := strings.ReplaceAll(string(src), "timeout: 2h\n                            onTimeout", "timeout: 5s\n                            onTimeout")
	text = strings.Replace(text, "rollbackSteps: []", cvRollback, 1)
	mapFile := t.TempDir() + "/map.yaml"
	if err := os.WriteFile(mapFile, []byte(cvMap), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := harness.LoadMap(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := harness.Convert("pr_cv.yaml", []byte(text), harness.Options{Map: m})
	if err != nil {
		t.Fatalf("strict conversion: %v", err)
	}

	app := verifytest.NewAppLabelled(0, `app="web-prod"`)
	defer app.Close()
	prom := verifytest.StartPrometheus(t, strings.TrimPrefix(app.URL, "http://"))
	prom.WaitSamples(t, `sum(rate(http_requests_total{app="web-prod"}[4s])) > 0`)
	s := newVerifyStack(t, prom.URL)

	r := s.e.Wait(s.e.Start(string(res.Native), map[string]any{"deploy_updateReleaseRepo_image_tag": "1.5.0"}).ID, 3*time.Minute)
	if r.Status != pipelines.StSucceeded || ctltest.Step(r, "deploy", "verify").Outputs["verdict"] != "successful" {
		t.Fatalf("good release: run %s %q\n%s", r.Status, r.Error, describeRun(r))
	}
	good := s.file("envs/prod/config.json")
	if !strings.Contains(good, `"image_tag": "1.5.0"`) {
		t.Fatalf("prod is not on 1.5.0:\n%s", good)
	}

	app.SetErrorRatio(0.3)
	id := s.e.Start(string(res.Native), map[string]any{"deploy_updateReleaseRepo_image_tag": "1.6.0"}).ID
	deadline := time.Now().Add(2 * time.Minute)
	for cur, _ := s.e.Ctl.Get(t.Context(), id); cur == nil || cur.Find("deploy").Intervention == nil; cur, _ = s.e.Ctl.Get(t.Context(), id) {
		if time.Now().After(deadline) || (cur != nil && cur.Status.Terminal()) {
			t.Fatalf("bad release never waited for an intervention\n%s", describeRun(cur))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r = s.e.Wait(id, 2*time.Minute)
	recs := r.Find("deploy").Interventions
	if r.Status != pipelines.StFailed || len(recs) != 1 || !recs[0].TimedOut || recs[0].Outcome != "timed out after 5s: rolled back" ||
		!strings.Contains(recs[0].Error, "verification failed") {
		t.Fatalf("bad release: run %s %q, interventions %+v\n%s", r.Status, r.Error, recs, describeRun(r))
	}
	for _, sid := range []string{"revertPR", "mergeRevertPR", "resync"} {
		if st := r.Find("deploy").Step(sid, true); st == nil || st.Status != pipelines.StSucceeded {
			t.Fatalf("rollback step %s: %+v\n%s", sid, st, describeRun(r))
		}
	}
	if got := s.file("envs/prod/config.json"); got != good {
		t.Fatalf("prod's config.json is not back on the good release:\n%s", got)
	}
}
