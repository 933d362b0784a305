package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// Issue 33: a promotion stage previews what its PR deploys (the simulated agent renders the
// release repo's Jsonnet at the PR's head) before it merges, on the PR and in the run; a PR
// that changes nothing deployed fails before the merge.

// previewPipeline promotes dev only; SET is the promotion's set: and EXTRA more promotion
// fields (indented two spaces).
const previewPipeline = `name: preview-dev
inputs:
  tag: {type: string, default: "1.5.0"}
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
promotion:
  applicationSet: web
  connector: release
  repo: acme/release
  filePath: "envs/<+env.name>/config.json"
  set: SET
  syncTimeout: 1m
EXTRA  environments: [dev]
`

func previewSrc(set, extra string) string {
	return strings.NewReplacer("SET", set, "EXTRA", extra).Replace(previewPipeline)
}

// prComments returns the bodies of the PR's comments that carry the diff preview.
func prComments(t *testing.T, gh *scmtest.GitHub, number int) []string {
	t.Helper()
	pr, err := gh.PullRequest("acme", "release", number)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range pr.Comments {
		if strings.Contains(c.Body, "prflow diff preview") {
			out = append(out, c.Body)
		}
	}
	return out
}

func diffStatus(t *testing.T, gh *scmtest.GitHub, sha string) *scmtest.Status {
	t.Helper()
	sts, err := gh.Statuses("acme", "release", sha)
	if err != nil {
		t.Fatal(err)
	}
	var last *scmtest.Status
	for i := range sts {
		if sts[i].Context == steps.StatusDiff {
			last = &sts[i]
		}
	}
	return last
}

// waitDeployed waits until the agent deployed app (its first sync after start), so a preview
// compares with what it runs rather than with nothing.
func (s *promoStack) waitDeployed(app string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		en, err := s.e.Ctl.Buckets().Apps.Get(context.Background(), "sim."+app)
		if err == nil && strings.Contains(string(en.Value()), `"sync":"Synced"`) && strings.Contains(string(en.Value()), `"health":"Healthy"`) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the agent never deployed %s", app)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func prNumberOf(t *testing.T, st *pipelines.StepRun) int {
	t.Helper()
	n, ok := st.Outputs["prNumber"].(float64)
	if !ok {
		t.Fatalf("step %s has no prNumber: %v", st.ID, st.Outputs)
	}
	return int(n)
}

func TestPreviewShowsWhatThePRDeploysBeforeTheMerge(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	s.waitDeployed("web-dev")
	r := s.e.Wait(s.e.Start(previewSrc(`{image.tag: "${{ inputs.tag }}"}`, ""), nil).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	pv := ctltest.Step(r, "dev", "preview")
	want := "web-dev: 1 changed (ConfigMap web-dev/web: data.image)"
	if pv.Status != pipelines.StSucceeded || pv.Outputs["changed"] != true || pv.Outputs["summary"] != want {
		t.Fatalf("preview: %s %v, want summary %q", pv.Status, pv.Outputs, want)
	}
	apps, _ := pv.Outputs["apps"].([]any)
	if len(apps) != 1 {
		t.Fatalf("apps: %v", apps)
	}
	up := ctltest.Step(r, "dev", "update")
	if pv.Outputs["revision"] != up.Outputs["commitId"] {
		t.Errorf("previewed %v, the PR's head is %v", pv.Outputs["revision"], up.Outputs["commitId"])
	}
	comments := prComments(t, s.gh, prNumberOf(t, up))
	if len(comments) != 1 || !strings.Contains(comments[0], "- "+want) ||
		!strings.Contains(comments[0], "+  image: registry.example.com/shop/web:1.5.0") || !strings.Contains(comments[0], "<details>") {
		t.Fatalf("PR comments: %q", comments)
	}
	if st := diffStatus(t, s.gh, fmt.Sprint(up.Outputs["commitId"])); st == nil || st.State != "success" || st.Description != "1 app changes" {
		t.Fatalf("status %s: %+v", steps.StatusDiff, st)
	}
	// The merge ran after the preview and deployed it.
	syncedOn(t, r, "dev", "sync", "web-dev", fmt.Sprint(ctltest.Step(r, "dev", "merge").Outputs["commitId"]))
}

// A mistyped key, created because the step allows new keys, edits the file but changes no
// rendered resource: the stage fails at the preview, before the merge, naming the key; the
// cleanup closes the PR and deletes its branch, and main has no merge commit.
func TestPreviewOfANoopPromotionFailsBeforeTheMerge(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	before, err := s.p.Branch(context.Background(), "acme/release", "main")
	if err != nil {
		t.Fatal(err)
	}
	r := s.e.Wait(s.e.Start(previewSrc(`{image.tga: "${{ inputs.tag }}"}`, "  create: true\n"), nil).ID, 2*time.Minute)
	want := "the PR changes no resource of web-dev: image.tga is not used by the chart or manifests (set allowNoop: true to merge anyway)"
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "step preview: "+want) {
		t.Fatalf("run %s %q, want failed with %q\n%s", r.Status, r.Error, want, describeRun(r))
	}
	if m := ctltest.Step(r, "dev", "merge"); m.Status == pipelines.StSucceeded || m.Status == pipelines.StRunning {
		t.Fatalf("merge ran: %s", m.Status)
	}
	after, err := s.p.Branch(context.Background(), "acme/release", "main")
	if err != nil || after.SHA != before.SHA {
		t.Fatalf("main moved from %s to %s (%v): something merged", before.SHA, after.SHA, err)
	}
	up := ctltest.Step(r, "dev", "update")
	n := prNumberOf(t, up)
	deadline := time.Now().Add(30 * time.Second)
	for {
		pr, err := s.gh.PullRequest("acme", "release", n)
		_, berr := s.p.Branch(context.Background(), "acme/release", fmt.Sprint(up.Outputs["ref"]))
		if err == nil && pr.State == scmtest.PRClosed && errors.Is(berr, scm.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PR #%d: %+v %v, branch: %v; want closed and its branch deleted by the cleanup", n, pr.State, err, berr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := diffStatus(t, s.gh, fmt.Sprint(up.Outputs["commitId"])); st == nil || st.State != "failure" || !strings.Contains(st.Description, "changes no resource of web-dev") {
		t.Fatalf("status %s: %+v", steps.StatusDiff, st)
	}
	if c := prComments(t, s.gh, n); len(c) != 1 || !strings.Contains(c[0], "**Not merged: "+want) || !strings.Contains(c[0], "- web-dev: no change") {
		t.Fatalf("PR comments: %q", c)
	}
}

func TestPreviewAllowNoopMerges(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	r := s.e.Wait(s.e.Start(previewSrc(`{image.tga: "${{ inputs.tag }}"}`, "  create: true\n  allowNoop: true\n"), nil).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	pv := ctltest.Step(r, "dev", "preview")
	if pv.Outputs["changed"] != false || pv.Outputs["summary"] != "web-dev: no change" {
		t.Fatalf("preview: %v", pv.Outputs)
	}
	if got := s.file("envs/dev/config.json"); !strings.Contains(got, `"tga": "1.5.0"`) {
		t.Fatalf("not merged:\n%s", got)
	}
	up := ctltest.Step(r, "dev", "update")
	if st := diffStatus(t, s.gh, fmt.Sprint(up.Outputs["commitId"])); st == nil || st.State != "success" || !strings.Contains(st.Description, "allowNoop") {
		t.Fatalf("status %s: %+v", steps.StatusDiff, st)
	}
}

// A forge that refuses comments does not fail the preview: the run goes on and carries a
// warning naming the PR.
func TestPreviewCommentRefusedIsAWarning(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	if err := s.gh.InjectFault(scmtest.Fault{Method: "POST", PathPattern: `/issues/\d+/comments$`, Status: 403,
		Body: `{"message": "Resource not accessible by integration"}`}); err != nil {
		t.Fatal(err)
	}
	r := s.e.Wait(s.e.Start(previewSrc(`{image.tag: "${{ inputs.tag }}"}`, ""), nil).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	found := false
	for _, w := range r.Warnings {
		found = found || strings.Contains(w, "dev/preview: the diff comment on PR #1 of acme/release could not be posted")
	}
	if !found {
		t.Fatalf("warnings %q", r.Warnings)
	}
	if c := prComments(t, s.gh, 1); len(c) != 0 {
		t.Fatalf("comments %q", c)
	}
}

// A new environment's config file makes the ApplicationSet generate a new app: the preview
// says it creates it, with its resources.
func TestPreviewOfANewEnvironmentCreatesItsApp(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	src := `name: new-env
service: {name: web}
promotion:
  applicationSet: web
  connector: release
  repo: acme/release
  filePath: "envs/<+env.name>/config.json"
  set: {image.tag: "2.0.0", image.repository: registry.example.com/shop/web, replicas: 1}
  syncTimeout: 1m
  environments:
    - name: qa
      clusters: [{name: qa-eu, agent: sim}]
      set: {cluster.name: qa-eu}
      create: true
`
	r := s.e.Wait(s.e.Start(src, nil).ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	pv := ctltest.Step(r, "qa", "preview")
	if want := "web-qa: creates app web-qa with 1 resource (ConfigMap web-qa/web)"; pv.Outputs["summary"] != want {
		t.Fatalf("preview summary %q, want %q", pv.Outputs["summary"], want)
	}
}

// An agent that is offline when the preview runs parks it: no "no change", no merge. When
// the agent comes, the preview runs and the promotion goes on.
func TestPreviewWaitsForAnOfflineAgent(t *testing.T) {
	t.Parallel()
	s := newPromoStackNoAgent(t, "dev")
	run := s.e.Start(previewSrc(`{image.tag: "${{ inputs.tag }}"}`, ""), nil)
	waitEnvStep(t, s.e, run.ID, "dev", "preview", "waiting for the agent", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "waiting to preview the PR's diff")
	})
	if got := s.file("envs/dev/config.json"); got != promoConfig("dev") {
		t.Fatalf("merged while the preview waited:\n%s", got)
	}
	s.startAgent()
	r := s.e.Wait(run.ID, 2*time.Minute)
	if r.Status != pipelines.StSucceeded || ctltest.Step(r, "dev", "preview").Outputs["changed"] != true {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
}

// newPromoStackNoAgent is newPromoStack with an agent registration but no agent behind it;
// startAgent starts it.
func newPromoStackNoAgent(t *testing.T, envs ...string) *promoStack {
	s := newPromoStackFilesAgent(t, promoFiles(envs...), false)
	// Registered (runs naming it start) but not answering: requests find no agent.
	s.e.RegisterAgent("sim")
	return s
}

func (s *promoStack) startAgent() {
	s.t.Helper()
	runSimAgent(s.t, simagent.Options{AgentID: "sim", Repo: s.gh.Git().Dir("acme", "release"), Branch: "main"}, s.e.Conn)
	s.e.WaitAgent("sim")
}

// stagePipeline is one dev stage written by hand: an update of image.tag (KEY) and the steps
// STEPS after it.
const stagePipeline = `name: hand-written
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
stages:
  - id: dev
    environment: dev
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: envs/dev/config.json
          create: true
          variables: [{name: KEY, type: String, value: "1.7.0"}]
STEPS`

// countDiffs counts the diff requests agent sim receives.
func countDiffs(t *testing.T, s *promoStack) func() int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	sub, err := s.e.Conn.NC.Subscribe(agent.Subject("sim", "diff"), func(*nats.Msg) { mu.Lock(); n++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() int {
		_ = s.e.Conn.NC.Flush()
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// MergePR with preview: true previews before it merges (same code as DiffPreview); after a
// DiffPreview of the same head in the stage it asks no agent again, and a no-op PR is not
// merged.
func TestMergePRPreview(t *testing.T) {
	t.Parallel()
	t.Run("after a DiffPreview of the same head, no second agent call", func(t *testing.T) {
		t.Parallel()
		s := newPromoStack(t, "dev")
		s.waitDeployed("web-dev")
		diffs := countDiffs(t, s)
		src := strings.NewReplacer("KEY", "image.tag", "STEPS", `      - {id: preview, type: DiffPreview, with: {applicationSet: web}}
      - {id: merge, type: MergePR, with: {preview: true, applicationSet: web}}
`).Replace(stagePipeline)
		r := s.e.Wait(s.e.Start(src, nil).ID, 2*time.Minute)
		if r.Status != pipelines.StSucceeded {
			t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
		}
		m := ctltest.Step(r, "dev", "merge")
		pv, _ := m.Outputs["preview"].(map[string]any)
		if pv["summary"] != "web-dev: 1 changed (ConfigMap web-dev/web: data.image)" || m.Outputs["commitId"] == "" {
			t.Fatalf("merge outputs: %v", m.Outputs)
		}
		if n := diffs(); n != 1 {
			t.Fatalf("%d diff requests, want 1 (the MergePR reuses the DiffPreview of the same head)", n)
		}
		if c := prComments(t, s.gh, 1); len(c) != 1 {
			t.Fatalf("%d preview comments, want one per run and environment: %q", len(c), c)
		}
	})
	t.Run("a PR that changes nothing is not merged", func(t *testing.T) {
		t.Parallel()
		s := newPromoStack(t, "dev")
		diffs := countDiffs(t, s)
		before := s.file("envs/dev/config.json")
		src := strings.NewReplacer("KEY", "image.tga", "STEPS", `      - {id: merge, type: MergePR, with: {preview: true, applicationSet: web}}
`).Replace(stagePipeline)
		r := s.e.Wait(s.e.Start(src, nil).ID, 2*time.Minute)
		want := "step merge: the PR changes no resource of web-dev: image.tga is not used by the chart or manifests"
		if r.Status != pipelines.StFailed || !strings.Contains(r.Error, want) {
			t.Fatalf("run %s %q, want %q\n%s", r.Status, r.Error, want, describeRun(r))
		}
		if got := s.file("envs/dev/config.json"); got != before {
			t.Fatalf("merged:\n%s", got)
		}
		if n := diffs(); n != 1 {
			t.Fatalf("%d diff requests, want 1", n)
		}
	})
}

// The preview comment is one per run and environment: a re-run of the step after the PR's
// head moved (a re-push) updates it instead of adding one, and a long diff is cut at
// maxCommentBytes with a link to the run page.
func TestPreviewCommentUpdatedInPlaceAndCapped(t *testing.T) {
	t.Parallel()
	s := newPromoStack(t, "dev")
	s.waitDeployed("web-dev")
	ctx := context.Background()
	repo := scm.Repo("acme/release")
	main, err := s.p.Branch(ctx, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	push := func(parent, tag string) string {
		t.Helper()
		cfg := strings.Replace(promoConfig("dev"), `"tag": "1.4.1"`, `"tag": "`+tag+`"`, 1)
		// A long label makes the diff longer than the comment's cap.
		manifest := strings.Replace(promoManifest, "labels: {", "labels: { note: '"+strings.Repeat("x", 900)+"', ", 1)
		sha, err := s.p.Commit(ctx, repo, scm.CommitInput{Branch: "preview-me", Parent: parent, Message: "tag " + tag,
			Changes: []scm.FileChange{{Path: "envs/dev/config.json", Content: []byte(cfg)}, {Path: "manifests/web/web.jsonnet", Content: []byte(manifest)}}})
		if err != nil {
			t.Fatal(err)
		}
		return sha
	}
	head1 := push(main.SHA, "1.8.0")
	pr, err := s.p.OpenPR(ctx, repo, scm.NewPR{Title: "preview me", Head: "preview-me", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := steps.Default.Lookup(steps.TypeDiffPreview)
	b, _ := queue.OpenBuckets(ctx, s.e.Conn.JS)
	svc := steps.NewServices(map[string]any{steps.ServiceSCM: connector.Static{"release": s.p},
		steps.ServiceGitOps: agent.NewClient(s.e.Conn.NC, b.Apps, b.Agents)})
	run := func(head string) steps.Result {
		t.Helper()
		sc := &steps.Context{RunID: "r1", Pipeline: "p", Stage: "dev", StepID: "preview", Type: steps.TypeDiffPreview,
			Attempt: 1, Delivery: 1, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: svc,
			Env:    &steps.Environment{Name: "dev", Clusters: []steps.Cluster{{Name: "dev-eu", Agent: "sim"}}},
			Inputs: map[string]any{"applicationSet": "web", "maxCommentBytes": 1500, "runUrl": "https://prflow.example/ui/runs/r1"},
			Priors: []steps.Prior{{ID: "update", Type: "UpdateReleaseRepo", Outputs: map[string]any{"prNumber": pr.Number,
				"commitId": head, "connector": "release", "repo": "acme/release"}}}}
		res, err := def.New().Run(ctx, sc)
		if err != nil || res.Status != steps.Succeeded {
			t.Fatalf("preview of %s: %+v %v", head, res, err)
		}
		return res
	}
	first := run(head1)
	if first.Outputs["comment"] != scm.CommentPosted {
		t.Fatalf("first preview: comment %v", first.Outputs["comment"])
	}
	head2 := push(head1, "1.9.0")
	second := run(head2)
	comments := prComments(t, s.gh, pr.Number)
	last := comments[len(comments)-1]
	if !strings.Contains(last, "web-dev: 1 changed (ConfigMap web-dev/web: data.image, metadata.labels.note)") ||
		!strings.Contains(last, "PR head `"+head2[:12]+"`") || strings.Contains(last, head1[:12]) {
		t.Fatalf("the newest comment is not the second preview:\n%s", last)
	}
	// Until the driver can edit comments (scm.CommentEditor), UpsertComment posts the new body.
	if _, edits := s.p.(scm.CommentEditor); edits {
		if second.Outputs["comment"] != scm.CommentUpdated || len(comments) != 1 {
			t.Fatalf("re-run: comment %v, %d preview comments, want the one updated in place", second.Outputs["comment"], len(comments))
		}
	} else if second.Outputs["comment"] != scm.CommentPosted || len(comments) != 2 {
		t.Fatalf("re-run: comment %v, %d preview comments", second.Outputs["comment"], len(comments))
	}
	for _, c := range comments {
		if len(c) > 1500 {
			t.Errorf("comment of %d bytes, cap 1500:\n%s", len(c), c)
		}
	}
	if !strings.Contains(last, "the full diff: https://prflow.example/ui/runs/r1") || strings.Contains(last, "```diff") {
		t.Fatalf("capped comment:\n%s", last)
	}
	// The same head again: the body is the same, the comment is left alone.
	if third := run(head2); third.Outputs["comment"] != scm.CommentUnchanged {
		t.Fatalf("third preview: comment %v", third.Outputs["comment"])
	}
}
