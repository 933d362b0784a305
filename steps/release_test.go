package steps_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/gitengine"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

const valuesYAML = `# Helm values for the web service
replicaCount: 2   # scaled by HPA in prod

image:
  repository: registry.example.com/shop/web
  tag: "1.4.1"    # set by prflow
  pullPolicy: IfNotPresent

env:
  - name: LOG_LEVEL
    value: info
  - name: FEATURE_X
    value: "false"
`

// forge is one fake forge with a driver pointed at it.
type forge struct {
	name string
	p    scm.Provider
	f    *scmtest.Forge     // nil for local
	git  *scmtest.GitServer // the git server holding the repo
}

// branches returns every branch of acme/release and its head, as the git server has them.
func (fg forge) branches() (map[string]string, error) { return fg.git.Branches("acme", "release") }

func forges(t testing.TB) []forge {
	files := map[string]string{"envs/dev/values.yaml": valuesYAML, "envs/prod/config.json": "{\n  \"replicas\": 2,\n  \"image\": {\"tag\": \"1.4.1\"}\n}\n", "README.md": "release repo\n"}
	gh := githubRepo(t, "release", files)
	gl := scmtest.NewGitLab(t)
	bb := scmtest.NewBitbucket(t)
	out := []forge{gh,
		onForge(t, "gitlab", gl.Forge, gl.APIURL(), "release", files, gitlabDriver),
		onForge(t, "bitbucket", bb.Forge, bb.APIURL(), "release", files, bitbucketDriver)}
	// The local driver: a plain git remote (the same real git smart-HTTP server), no forge.
	gs := scmtest.NewGitServer(t)
	if _, err := gs.CreateRepo("acme", "release", files); err != nil {
		t.Fatal(err)
	}
	eng := gitengine.New(gitengine.WithBasicAuth("x-access-token", scmtest.DefaultToken), gitengine.WithTempDir(t.TempDir()))
	lp, err := local.New(gs.URL(), local.WithEngine(eng), local.WithIdentity(scm.Signature{Name: "prflow", Email: "prflow@example.com"}))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, forge{"local", lp, nil, gs})
	return out
}

// onForge creates acme/<repo> holding files on a started fake forge and points a driver at
// the fake's API (apiURL) with scmtest.DefaultToken.
func onForge[D scm.Provider](t testing.TB, name string, f *scmtest.Forge, apiURL, repo string, files map[string]string, newDriver func(apiURL string) (D, error)) forge {
	t.Helper()
	if _, err := f.CreateRepo("acme", repo, files); err != nil {
		t.Fatal(err)
	}
	p, err := newDriver(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	return forge{name, p, f, f.Git()}
}

func githubDriver(apiURL string) (*github.Driver, error) {
	return github.New(github.WithBaseURL(apiURL), github.WithToken(scmtest.DefaultToken))
}

func gitlabDriver(apiURL string) (*gitlab.Driver, error) {
	return gitlab.New(gitlab.WithBaseURL(apiURL), gitlab.WithToken(scmtest.DefaultToken))
}

func bitbucketDriver(apiURL string) (*bitbucket.Driver, error) {
	return bitbucket.New(bitbucket.WithBaseURL(apiURL), bitbucket.WithToken(scmtest.DefaultToken))
}

// githubRepo starts a fake GitHub holding acme/<repo> with files and a GitHub driver pointed
// at it.
func githubRepo(t testing.TB, repo string, files map[string]string) forge {
	t.Helper()
	gh := scmtest.NewGitHub(t)
	return onForge(t, "github", gh.Forge, gh.APIURL(), repo, files, githubDriver)
}

// eachForge runs f on every forge, each as a parallel subtest named after the forge.
func eachForge(t *testing.T, f func(t *testing.T, fg forge)) {
	for _, fg := range forges(t) {
		t.Run(fg.name, func(t *testing.T) {
			t.Parallel()
			f(t, fg)
		})
	}
}

// updateStep opens a stage's UpdateReleaseRepo step "update" on acme/release through the
// release connector; the step's other with: lines follow it.
const updateStep = `      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release`

func env(t *testing.T, fg forge, workers int) *ctltest.Env {
	return ctltest.New(t, ctltest.Options{Workers: workers, Concurrency: 8,
		Services: map[string]any{steps.ServiceSCM: connector.Static{"release": fg.p}},
		Tuning:   queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5}})
}

const promote = `
name: promote
inputs:
  tag: {type: string, required: true}
  strategy: {type: string, default: squash}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: a}]
stages:
  - id: dev
    environment: dev
    steps:
` + updateStep + `
          filePath: "envs/<+env.name>/values.yaml"
          variables:
            - {name: image.tag, type: String, value: "${{ inputs.tag }}"}
            - {name: replicaCount, type: Number, value: "3"}
            - {name: "env[1].value", type: String, value: "true"}
      - id: merge
        type: MergePR
        with: {mergeStrategy: "${{ inputs.strategy }}", deleteSourceBranch: true}
  - id: newenv
    steps:
      - id: create
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: envs/qa/config.json
          create: true
          variables:
            - {name: cluster.name, type: String, value: qa}
            - {name: replicas, type: Number, value: "1"}
      - id: merge
        type: MergePR
`

func TestPromoteOnEveryForge(t *testing.T) {
	t.Parallel()
	eachForge(t, func(t *testing.T, fg forge) {
		e := env(t, fg, 1)
		e.RegisterAgent("a") // named by the environment, never asked: runs start only when it is live
		r := e.Wait(e.Start(promote, map[string]any{"tag": "1.5.0"}).ID, 90*time.Second)
		if r.Status != pipelines.StSucceeded {
			t.Fatalf("run: %s %s\n%s", r.Status, r.Error, e.Logs.String())
		}
		up := ctltest.Step(r, "dev", "update").Outputs
		if up["prNumber"] == "" || !strings.Contains(fmt.Sprint(up["prlink"]), fmt.Sprint(up["prNumber"])) ||
			!strings.HasPrefix(fmt.Sprint(up["ref"]), "prflow/promote/") || fmt.Sprint(up["changedFiles"]) != "[envs/dev/values.yaml]" {
			t.Errorf("UpdateReleaseRepo outputs: %#v", up)
		}
		merge := ctltest.Step(r, "dev", "merge").Outputs["commitId"].(string)
		got, err := fg.p.ReadFile(context.Background(), "acme/release", "main", "envs/dev/values.yaml")
		if err != nil {
			t.Fatal(err)
		}
		want := strings.NewReplacer(`tag: "1.4.1"`, `tag: "1.5.0"`, "replicaCount: 2 ", "replicaCount: 3 ",
			"value: \"false\"", "value: \"true\"").Replace(valuesYAML)
		if string(got) != want {
			t.Errorf("values.yaml after merge (only changed values may differ):\n%s\nwant:\n%s", got, want)
		}
		atMerge, _ := fg.p.ReadFile(context.Background(), "acme/release", merge, "envs/dev/values.yaml")
		if string(atMerge) != want {
			t.Errorf("MergePR commitId %s does not hold the change", merge)
		}
		created, err := fg.p.ReadFile(context.Background(), "acme/release", "main", "envs/qa/config.json")
		if err != nil || !strings.Contains(string(created), `"name": "qa"`) || !strings.Contains(string(created), `"replicas": 1`) {
			t.Errorf("new environment file: %v %s", err, created)
		}
	})
}

// TestRevertRestoresContent reverts a merge commit and a squash commit on every forge.
func TestRevertRestoresContent(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"merge", "squash"} {
		for _, fg := range forges(t) {
			t.Run(fg.name+"/"+strategy, func(t *testing.T) { t.Parallel(); revertRestores(t, fg, strategy) })
		}
	}
}

func revertRestores(t *testing.T, fg forge, strategy string) {
	e := env(t, fg, 1)
	before, _ := fg.p.ReadFile(context.Background(), "acme/release", "main", "envs/dev/values.yaml")
	src := `
name: revert
inputs:
  strategy: {type: string}
stages:
  - id: dev
    steps:
` + updateStep + `
          filePath: envs/dev/values.yaml
          variables: [{name: image.tag, value: "9.9.9"}, {name: extra.added, type: Boolean, value: "true", create: true}]
      - id: merge
        type: MergePR
        with: {mergeStrategy: "${{ inputs.strategy }}"}
      - {id: gate, type: Approval, timeout: 1s, with: {approvers: [nobody]}}
    rollbackSteps:
      - id: revert
        type: RevertPR
        with: {commitId: "${{ steps.merge.outputs.commitId }}"}
      - id: mergeRevert
        type: MergePR
  - id: newenv
    needs: []
    steps:
      - id: create
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: "${{ '../outside.json' }}", variables: [{name: a, value: b}]}
`
	r := e.Wait(e.Start(src, map[string]any{"strategy": strategy}).ID, 90*time.Second)
	if r.Status != pipelines.StFailed {
		t.Fatalf("run: %s %s", r.Status, r.Error)
	}
	if st := ctltest.Step(r, "newenv", "create"); st.Status != pipelines.StFailed || !strings.Contains(st.Error, `filePath: file path "../outside.json" leaves the repository`) {
		t.Errorf("path escape: %s %q", st.Status, st.Error)
	}
	if st := ctltest.Step(r, "dev", "mergeRevert"); st.Status != pipelines.StSucceeded {
		t.Fatalf("revert merge: %s %s\n%s", st.Status, st.Error, e.Logs.String())
	}
	after, _ := fg.p.ReadFile(context.Background(), "acme/release", "main", "envs/dev/values.yaml")
	if string(after) != string(before) {
		t.Errorf("revert of the %s commit did not restore the file:\n%s\nwant:\n%s", strategy, after, before)
	}
	if _, err := fg.p.ReadFile(context.Background(), "acme/release", "main", "outside.json"); err == nil {
		t.Error("a rejected path was written")
	}
	// The rollback leaves nothing behind: the revert PR's branch goes with its merge (MergePR
	// deletes a revert PR's source branch unless told deleteSourceBranch: false).
	branches, err := fg.branches()
	if err != nil {
		t.Fatal(err)
	}
	for b := range branches {
		if strings.HasSuffix(b, "-revert") {
			t.Errorf("revert branch %s left behind after its PR was merged", b)
		}
	}
}

// TestConcurrentPromotionsSameFile: n runs change different keys of one file at once. Each
// PR conflicts with the ones merged before it; MergePR rebuilds it on the new base: by moving
// its branch (GitHub, GitLab, local) or, on Bitbucket, whose API cannot move a branch off its
// history, as a new PR that replaces the declined one. Every forge ends with n merged PRs and
// all n changes. n is 8, 6 on the local driver, whose rebuilds are real fetches, rebases and
// pushes (about n²/2 of them: 8 took 50 s of a loaded 2-core machine); 20 everywhere with
// PRFLOW_TEST_LONG=1 (`task test-long`). The forges run in parallel.
func TestConcurrentPromotionsSameFile(t *testing.T) {
	t.Parallel()
	eachForge(t, concurrentPromotions)
}

func concurrentPromotions(t *testing.T, fg forge) {
	e := env(t, fg, 2)
	n := ctltest.Pick(8, 20)
	if fg.name == "local" {
		n = ctltest.Pick(6, 20)
	}
	src := `
name: many
inputs: {key: {type: string}}
stages:
  - id: s
    steps:
` + updateStep + `
          filePath: envs/prod/config.json
          variables: [{name: "keys.${{ inputs.key }}", type: String, value: "${{ inputs.key }}", create: true}]
      - id: merge
        type: MergePR
`
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.Start(src, map[string]any{"key": fmt.Sprintf("k%02d", i)}).ID
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	mergedPRs := map[int]string{}
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Wait(id, 3*time.Minute)
			if r.Status != pipelines.StSucceeded {
				t.Errorf("run %s: %s %s", id, r.Status, r.Error)
				return
			}
			out := ctltest.Step(r, "s", "merge").Outputs
			num, _ := out["prNumber"].(float64)
			mu.Lock()
			defer mu.Unlock()
			if prev, dup := mergedPRs[int(num)]; dup || num == 0 {
				t.Errorf("run %s reports PR #%v merged, as does run %s", id, out["prNumber"], prev)
			}
			mergedPRs[int(num)] = fmt.Sprint(out["commitId"])
		}()
	}
	wg.Wait()
	got, _ := fg.p.ReadFile(context.Background(), "acme/release", "main", "envs/prod/config.json")
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf(`"k%02d": "k%02d"`, i, i); !strings.Contains(string(got), k) {
			t.Errorf("change %s lost:\n%s", k, got)
		}
	}
	merged := 0
	for num, commit := range mergedPRs {
		pr, err := fg.p.GetPR(context.Background(), "acme/release", num)
		if err != nil || pr.State != scm.PRMerged || pr.MergeSHA != commit {
			t.Errorf("PR #%d: %v state %v merge %v, the run reported merge %s", num, err, pr.State, pr.MergeSHA, commit)
			continue
		}
		merged++
	}
	if merged != n {
		t.Errorf("%d PRs merged, want %d", merged, n)
	}
	if fg.f == nil {
		return
	}
	// Nothing else is left open. Only on Bitbucket may a PR be declined, and only when a
	// later PR from the same work branch's rebuilt line (<branch>.rN) replaced it.
	prs, _ := fg.f.PullRequests("acme", "release")
	replaced := 0
	for _, pr := range prs {
		if pr.State == scmtest.PRMerged {
			continue
		}
		root, _, _ := strings.Cut(pr.Head, ".r")
		found := false
		for _, later := range prs {
			found = found || later.Number > pr.Number && strings.HasPrefix(later.Head, root+".r")
		}
		if pr.State != scmtest.PRClosed || fg.name != "bitbucket" || !found {
			t.Errorf("PR #%d (%s) is %s (replaced by a rebuilt PR: %v)", pr.Number, pr.Head, pr.State, found)
			continue
		}
		replaced++
	}
	if len(prs) != n+replaced {
		t.Errorf("%d PRs, want %d merged + %d replaced", len(prs), n, replaced)
	}
	t.Logf("%s: %d PRs merged, %d rebuilt as new PRs", fg.name, merged, replaced)
}

func approve(e *ctltest.Env, run, stage, step string) error {
	return e.Ctl.Signal(context.Background(), run, stage, step, steps.Signal{Kind: "approval", User: "tester2", Approve: true, At: time.Now()})
}

func TestWaitForMerge(t *testing.T) {
	t.Parallel()
	fg := forges(t)[0]
	e := env(t, fg, 1)
	src := `
name: review
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        timeout: 1m
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, waitForMerge: true, gitRestraint: true,
               variables: [{name: replicas, type: Number, value: "4"}]}
`
	ids := []string{e.Start(src, nil).ID, e.Start(src, nil).ID}
	prs, _ := e.ParkedPRs(ids, "s", "update", 30*time.Second)
	// A person merges the first PR and closes the second; the steps wake (poll fallback or a
	// webhook) and finish accordingly.
	merged, err := fg.p.MergePR(context.Background(), "acme/release", prs[ids[0]], scm.MergeInput{Method: scm.MergeCommit})
	if err != nil {
		t.Fatal(err)
	}
	if err := fg.p.ClosePR(context.Background(), "acme/release", prs[ids[1]]); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := e.Ctl.WakeTopic(context.Background(), fmt.Sprintf("pr:github:acme/release#%d", prs[id])); err != nil {
			t.Fatal(err)
		}
	}
	r0 := e.Wait(ids[0], 30*time.Second)
	if r0.Status != pipelines.StSucceeded || ctltest.Step(r0, "s", "update").Outputs["commitId"] != merged.MergeSHA {
		t.Errorf("merged: %s %s %v", r0.Status, r0.Error, ctltest.Step(r0, "s", "update").Outputs)
	}
	r1 := e.Wait(ids[1], 30*time.Second)
	if r1.Status != pipelines.StFailed || !strings.Contains(r1.Error, "was closed without being merged") {
		t.Errorf("closed: %s %s", r1.Status, r1.Error)
	}
}
