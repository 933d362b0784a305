package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/verify"
	"github.com/prflow/prflow/steps/verify/prometheus"
	"github.com/prflow/prflow/steps/verify/verifytest"
)

// The Verify step end to end: prod is promoted through the release repo (UpdateReleaseRepo,
// MergePR, real git on the fake GitHub), deployed by the simulated agent (GitOpsSync), then
// verified against a real Prometheus scraping the app. A bad release — synced and Healthy but
// serving errors — fails Verify and the stage rolls back: RevertPR, MergePR, GitOpsSync.

const verifyPipeline = `name: verify-web
inputs:
  tag: {type: string, required: true}
service: {name: web}
environments:
  - name: prod
    clusters: [{name: prod-eu, agent: sim}]
stages:
  - id: prod
    environment: prod
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: envs/prod/config.json
          variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}]
      - {id: merge, type: MergePR, with: {connector: release, repo: acme/release, mergeStrategy: merge, deleteSourceBranch: true}}
      - {id: apps, type: FetchLinkedApps, with: {applicationSet: web}}
      - {id: sync, type: GitOpsSync, timeout: 1m, with: {waitTillHealthy: true, failOnTimeout: true}}
      - id: verify
        type: Verify
        timeout: 2m
        with:
          metrics:
            - name: errors
              provider: prom
              query: 'sum(rate(http_requests_total{app="web-${{ env.name }}",code="500"}[4s])) / sum(rate(http_requests_total{app="web-${{ env.name }}"}[4s]))'
              interval: 1s
              count: 3
              successCondition: result < 0.05
              failOnNoAnalysis: fail
    rollbackSteps:
      - id: revert
        type: RevertPR
        when: '${{ steps.merge.status == "succeeded" }}'
        with: {connector: release, repo: acme/release, commitId: "${{ steps.merge.outputs.commitId }}"}
      - id: mergeRevert
        type: MergePR
        when: '${{ steps.revert.status == "succeeded" }}'
        with: {connector: release, repo: acme/release, mergeStrategy: merge}
      - id: resync
        type: GitOpsSync
        timeout: 1m
        when: '${{ steps.mergeRevert.status == "succeeded" }}'
        with: {waitTillHealthy: true, failOnTimeout: true}
`

func newVerifyStack(t *testing.T, promURL string) *promoStack {
	metrics := verify.Static{"prom": &prometheus.Client{BaseURL: promURL, HTTP: &http.Client{Timeout: 5 * time.Second}}}
	return newPromoStackOpts(t, promoFiles("prod"), true, ctltest.Options{Concurrency: 8,
		Services: map[string]any{steps.ServiceMetrics: metrics}})
}

func TestVerifyFailureRollsBackTheStage(t *testing.T) {
	t.Parallel()
	app := verifytest.NewAppLabelled(0, `app="web-prod"`)
	defer app.Close()
	prom := verifytest.StartPrometheus(t, strings.TrimPrefix(app.URL, "http://"))
	prom.WaitSamples(t, `sum(rate(http_requests_total{app="web-prod"}[4s])) > 0`)
	s := newVerifyStack(t, prom.URL)
	before := s.file("envs/prod/config.json")

	// A good release passes its verification and stays.
	r := s.e.Wait(s.e.Start(verifyPipeline, map[string]any{"tag": "1.5.0"}).ID, 3*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("good release: run %s %q\n%s", r.Status, r.Error, describeRun(r))
	}
	v := ctltest.Step(r, "prod", "verify")
	if v.Outputs["verdict"] != "successful" || !strings.HasPrefix(fmt.Sprint(v.Outputs["charts"].(map[string]any)["errors"]), "<svg") {
		t.Fatalf("verify outputs %v", v.Outputs)
	}
	if got := s.file("envs/prod/config.json"); !strings.Contains(got, `"tag": "1.5.0"`) {
		t.Fatalf("prod is not on 1.5.0:\n%s", got)
	}
	if u := r.Find("prod").Step("revert", true); u != nil && u.Status == pipelines.StSucceeded {
		t.Fatal("a good release was reverted")
	}
	good := s.file("envs/prod/config.json")

	// A bad release: synced and Healthy, but a third of its requests fail.
	app.SetErrorRatio(0.3)
	r = s.e.Wait(s.e.Start(verifyPipeline, map[string]any{"tag": "1.6.0"}).ID, 3*time.Minute)
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "stage prod: step verify: verification failed: errors:") {
		t.Fatalf("bad release: run %s %q\n%s", r.Status, r.Error, describeRun(r))
	}
	if st := ctltest.Step(r, "prod", "sync"); st.Status != pipelines.StSucceeded {
		t.Fatalf("sync %s: the release must have deployed fine", st.Status)
	}
	v = ctltest.Step(r, "prod", "verify")
	if v.Outputs["verdict"] != "failed" {
		t.Fatalf("verify outputs %v", v.Outputs)
	}
	for _, id := range []string{"revert", "mergeRevert", "resync"} {
		if st := r.Find("prod").Step(id, true); st == nil || st.Status != pipelines.StSucceeded {
			t.Fatalf("rollback step %s: %+v\n%s", id, st, describeRun(r))
		}
	}
	if got := s.file("envs/prod/config.json"); got != good || got == before {
		t.Fatalf("prod's config.json is not back on the good release:\n%s", got)
	}
	syncedOn(t, r, "prod", "resync", "web-prod", fmt.Sprint(ctltest.Step(r, "prod", "mergeRevert").Outputs["commitId"]))
}
