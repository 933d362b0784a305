package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/harness"
)

// A Harness PR pipeline imported through the map runs unchanged on each engine. The map is
// engine-neutral: deploymentRepo.applicationSet names the apps' parent (an Argo CD
// ApplicationSet, or the Flux Kustomization whose kustomize.toolkit.fluxcd.io/name label the
// generated Kustomizations carry), gitOpsClusters name the cluster as the agent reports it
// (in-cluster, or a Kustomization's spec.kubeConfig.secretRef.name) and the prflow agent.

// harnessEngineMap points appset.yaml's service shop and environment qa at agent "eu".
const harnessEngineMap = `services:
  shop:
    releaseRepo: {connector: release, repo: acme/release, branch: main, path: "envs/<+env.name>/config.json"}
    deploymentRepo: {DEPLOYMENT}
environments:
  qa: {gitOpsClusters: [qa_cluster]}
gitOpsClusters:
  qa_cluster: {name: in-cluster, agent: eu}
agents:
  harnessdevagent: eu
`

// shopQA is the app appset.yaml's qa stage deploys; the web-<env> apps (parent "web") run
// next to it and must not be linked.
var shopQA = engineApp{name: "shop-qa", path: "envs/qa", parent: "shop",
	labels: map[string]string{"harness.io/serviceRef": "shop", "harness.io/envRef": "qa"}}

// importAppSet converts testdata/appset.yaml strictly with harnessEngineMap, whose
// deploymentRepo is deployment; Fetch Linked Apps' 1m timeout becomes fetchTimeout.
func importAppSet(t *testing.T, deployment, fetchTimeout string) string {
	t.Helper()
	src, err := os.ReadFile("../../pipelines/harness/testdata/appset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const fetch = "identifier: fetchLinkedApps, timeout: 1m"
	if !strings.Contains(string(src), fetch) {
		t.Fatal("appset.yaml has no Fetch Linked Apps with timeout 1m")
	}
	text := strings.Replace(string(src), fetch, "identifier: fetchLinkedApps, timeout: "+fetchTimeout, 1)
	m, err := harness.ParseMap("map.yaml", []byte(strings.Replace(harnessEngineMap, "DEPLOYMENT", deployment, 1)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := harness.Convert("appset.yaml", []byte(text), harness.Options{Map: m})
	if err != nil {
		t.Fatalf("strict conversion: %v", err)
	}
	return string(res.Native)
}

// harnessEngineFiles are releaseFiles plus qa's manifest; qa's config.json is what the
// pipeline's Update Release Repo creates.
func harnessEngineFiles() map[string]string {
	files := releaseFiles()
	files["envs/qa/cm.yaml"] = configMap("shop-qa", "healthy")
	return files
}

// TestHarnessAppSetOnEachEngine: appset.yaml, imported strictly with a map pointing at agent
// "eu", runs Update Release Repo → Merge PR → Fetch Linked Apps → GitOps Sync on the fake
// Argo CD and on the fake Flux: it creates qa's config, links shop-qa only (by its parent, or
// by a label selector) and syncs it on the merge commit.
func TestHarnessAppSetOnEachEngine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, deployment string }{
		{"parent", "applicationSet: shop"},
		{"selector", `selector: "harness.io/serviceRef=shop"`},
	} {
		for _, eng := range engines {
			t.Run(c.name+"/"+eng.name, func(t *testing.T) {
				t.Parallel()
				testHarnessAppSet(t, eng, importAppSet(t, c.deployment, "1m"))
			})
		}
	}
}

// testHarnessAppSet runs the imported appset.yaml on eng and checks what it did.
func testHarnessAppSet(t *testing.T, eng engine, native string) {
	s := newPromoStackFilesAgent(t, harnessEngineFiles(), false)
	eng.start(t, s, append(webApps(), shopQA)...)
	r := s.e.Wait(s.e.Start(native, map[string]any{"image": "shop:2"}).ID, 3*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	got := s.file("envs/qa/config.json")
	for _, want := range []string{`"env": "qa"`, `"cluster": "in-cluster"`, `"image": "shop:2"`} {
		if !strings.Contains(got, want) {
			t.Errorf("created config lacks %s:\n%s", want, got)
		}
	}
	apps, _ := ctltest.Step(r, "qa", "fetchLinkedApps").Outputs["apps"].([]any)
	if len(apps) != 1 || apps[0].(map[string]any)["name"] != "shop-qa" {
		t.Errorf("linked apps %v, want only shop-qa", apps)
	}
	syncedOn(t, r, "qa", "sync", "shop-qa", fmt.Sprint(ctltest.Step(r, "qa", "mergePR").Outputs["commitId"]))
}

// TestHarnessMapWrongAppSetOnEachEngine: a map whose applicationSet names a parent agent "eu"
// has no apps of fails Fetch Linked Apps with an error naming that parent, the cluster and
// the agent, on each engine; nothing is synced.
func TestHarnessMapWrongAppSetOnEachEngine(t *testing.T) {
	t.Parallel()
	// 12s, not less: the step polls at 1, 3, 7 s, then every 5 s at most, aiming its last poll
	// at the deadline; 12s leaves 5 s between the last poll and the deadline, where 5s left 2 s
	// and, on a machine at load 25-30, a poll's listing of the apps was still running when the
	// deadline cut it ("timed out at …: list apps on agent eu: … context deadline exceeded").
	native := importAppSet(t, "applicationSet: shopp", "12s")
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			s := newPromoStackFilesAgent(t, harnessEngineFiles(), false)
			eng.start(t, s, append(webApps(), shopQA)...)
			r := s.e.Wait(s.e.Start(native, map[string]any{"image": "shop:2"}).ID, 3*time.Minute)
			fetch := ctltest.Step(r, "qa", "fetchLinkedApps")
			if r.Status != pipelines.StFailed || fetch == nil || fetch.Status != pipelines.StFailed {
				t.Fatalf("run %s %q, want Fetch Linked Apps failed\n%s", r.Status, r.Error, describeRun(r))
			}
			for _, want := range []string{"ApplicationSet shopp", "cluster in-cluster (agent eu)"} {
				if !strings.Contains(fetch.Error, want) {
					t.Errorf("Fetch Linked Apps' error %q does not name %s", fetch.Error, want)
				}
			}
			t.Logf("Fetch Linked Apps: %s", fetch.Error)
			if st := ctltest.Step(r, "qa", "sync"); st != nil && st.Status == pipelines.StSucceeded {
				t.Errorf("sync succeeded after a failed Fetch Linked Apps: %+v", st)
			}
		})
	}
}
