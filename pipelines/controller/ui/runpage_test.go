package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// hostileName is a resource name as a compromised repo could make it; the page must show it
// as text.
const hostileName = `<img src=x onerror="document.body.dataset.pwned=1">`

// diffOutputs is a DiffPreview step's outputs (apps: agent.AppDiff list, summary, changed)
// as JSON, which the run's Noop step returns as its outputs: the run record then holds what a
// DiffPreview step would store, through the worker and KV.
func diffOutputs(t *testing.T, summary string, apps ...agent.AppDiff) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"apps": apps, "summary": summary, "changed": true})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func devDiff(t *testing.T) string {
	return diffOutputs(t, "web-dev: 2 changed, 1 added; web-dev-worker: 1 changed (truncated)",
		agent.AppDiff{App: "web-dev", Agent: "sim", Unchanged: 4, Resources: []agent.ResourceDiff{
			{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web", Change: agent.ChangeChanged,
				Paths: []string{"spec.replicas", "spec.template.spec.containers[0].image"},
				Diff:  "--- a/Deployment/shop/web\n+++ b/Deployment/shop/web\n@@ -5,7 +5,7 @@\n spec:\n-  replicas: 2\n+  replicas: 3\n   template:\n     spec:\n       containers:\n-      - image: registry.example.com/shop/web:1.4.1\n+      - image: registry.example.com/shop/web:1.5.0\n"},
			{Kind: "Secret", Namespace: "shop", Name: "web-env", Change: agent.ChangeChanged, Paths: []string{"data.API_KEY"}, Masked: true,
				Diff: "--- a/Secret/shop/web-env\n+++ b/Secret/shop/web-env\n@@ -3,1 +3,1 @@\n-  API_KEY: (changed)\n+  API_KEY: (changed)\n"},
			{Kind: "ConfigMap", Namespace: "shop", Name: hostileName, Change: agent.ChangeAdded,
				Diff: "--- /dev/null\n+++ b/ConfigMap/shop/x\n@@ -0,0 +1,3 @@\n+kind: ConfigMap\n+data:\n+  motd: \"<b>hi</b>\"\n"},
		}},
		agent.AppDiff{App: "web-dev-worker", Agent: "sim", Unchanged: 2, Truncated: true, Resources: []agent.ResourceDiff{
			{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "worker", Change: agent.ChangeChanged, Paths: []string{"spec.template.spec.containers[0].image"},
				Diff: "--- a/Deployment/shop/worker\n+++ b/Deployment/shop/worker\n@@ -9,1 +9,1 @@\n-      - image: registry.example.com/shop/worker:1.4.1\n+      - image: registry.example.com/shop/worker:1.5.0\n"},
		}})
}

func prodDiff(t *testing.T) string {
	return diffOutputs(t, "web-prod: 1 changed (Deployment shop/web)",
		agent.AppDiff{App: "web-prod", Agent: "sim", Unchanged: 5, Resources: []agent.ResourceDiff{
			{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web", Change: agent.ChangeChanged, Paths: []string{"spec.template.spec.containers[0].image"},
				Diff: "--- a/Deployment/shop/web\n+++ b/Deployment/shop/web\n@@ -12,1 +12,1 @@\n-      - image: registry.example.com/shop/web:1.4.1\n+      - image: registry.example.com/shop/web:1.5.0\n"},
		}})
}

// promoteWithPreview is the example promotion with a diff preview before each merge and an
// approval before prod's: real UpdateReleaseRepo and MergePR steps on the GitHub fake, the
// simulated agent syncing the apps.
func promoteWithPreview(t *testing.T) string {
	return `
name: promote-preview
service: {name: web}
inputs:
  tag: {type: string, default: "1.5.0"}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
  - name: prod
    clusters: [{name: prod-eu, agent: sim}]
stages:
  - id: dev
    environment: dev
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: "envs/<+env.name>/config.json"
          variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}, {name: replicas, type: Number, value: "3"}]
      - id: preview
        type: Noop
        with: {outputs: ` + devDiff(t) + `}
      - {id: merge, type: MergePR, with: {mergeStrategy: squash, deleteSourceBranch: true}}
      - {id: apps, type: FetchLinkedApps, timeout: 2m}
      - {id: sync, type: GitOpsSync, timeout: 5m, with: {waitTillHealthy: true, failOnTimeout: true}}
    rollbackSteps:
      - {id: undo, type: Noop}
  - id: prod
    environment: prod
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: "envs/<+env.name>/config.json"
          variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}, {name: region, type: String, value: eu-west-1, create: true}]
      - id: preview
        type: Noop
        with: {outputs: ` + prodDiff(t) + `}
      - id: approve
        type: Approval
        timeout: 10m
        with:
          approvers: {groups: [release], minimumCount: 1}
          message: Promote to prod?
      - {id: merge, type: MergePR, with: {mergeStrategy: squash, deleteSourceBranch: true}}
      - {id: apps, type: FetchLinkedApps, timeout: 2m}
      - {id: sync, type: GitOpsSync, timeout: 5m, with: {waitTillHealthy: true, failOnTimeout: true}}
    rollbackSteps:
      - {id: undo, type: Noop}
`
}

// previewEnv is a prflow with the UI, the GitHub fake holding the example release repo as
// acme/release, and a simulated agent deploying it.
func previewEnv(t *testing.T) *uiEnv {
	t.Helper()
	e, gh, _ := newReleaseUIEnv(t)
	e.StartSimAgent(gh.Git().Dir("acme", "release"))
	return e
}

// section returns the HTML of the element that starts with start, to its closing tag.
func section(t *testing.T, page, start, end string) string {
	t.Helper()
	i := strings.Index(page, start)
	if i < 0 {
		t.Fatalf("page has no %q:\n%.3000s", start, page)
	}
	j := strings.Index(page[i:], end)
	if j < 0 {
		t.Fatalf("no %q after %q", end, start)
	}
	return page[i : i+j]
}

// summaryRow is the text of the summary row of stage id (to the next row or the table's end).
func summaryRow(t *testing.T, page, id string) string {
	t.Helper()
	row := section(t, page, `data-summary="`+id+`"`, `</section>`)
	if i := strings.Index(row[1:], `data-summary="`); i >= 0 {
		row = row[:i+1]
	}
	return plain(row)
}

var tagsRE = regexp.MustCompile(`<[^>]*>`)

// plain is the text of an HTML fragment, white space collapsed.
func plain(html string) string {
	return strings.Join(strings.Fields(strings.NewReplacer("&#43;", "+", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&quot;", `"`, "&amp;", "&").Replace(tagsRE.ReplaceAllString(html, " "))), " ")
}

// TestRunPageSummaryApprovalAndDiff: the run page of a promotion parked on prod's approval,
// as its HTML says: the approval card names the environment, each key old → new (a created
// key as new), the PR link and the diff summary, with the decide form before the diffs; the
// page leads with a summary per stage (old → new, PR, merge commit, apps' health); outputs
// are readable fields; the diff is rendered per app and resource, lines classed for colour,
// a Secret marked masked, a truncated app marked, hostile names escaped; the rollback steps
// that have not run are collapsed. Then approved: the summary has prod's merge and the
// rollbacks say "not needed".
func TestRunPageSummaryApprovalAndDiff(t *testing.T) {
	t.Parallel()
	e := previewEnv(t)
	r := startParked(t, e, promoteWithPreview(t), "prod", "approve")
	c := signedIn(t, e, aliceToken)
	runURL := e.URL + "/ui/runs/" + r.ID
	code, _, page := do(t, c, "GET", runURL, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("run page: %d\n%.2000s", code, page)
	}
	cur, _ := e.Ctl.Get(context.Background(), r.ID)
	prodPR := ctltest.Step(cur, "prod", "update").Outputs["prlink"].(string)
	devMerge := ctltest.Step(cur, "dev", "merge").Outputs["commitId"].(string)

	card := section(t, page, `<section class="approval"`, "</section>")
	cardText := plain(card)
	for _, want := range []string{"Approve environment prod", "envs/prod/config.json", "image.tag 1.4.1 → 1.5.0", "region new → eu-west-1",
		"web-prod: 1 changed (Deployment shop/web)", "Promote to prod?"} {
		if !strings.Contains(cardText, want) {
			t.Errorf("approval card lacks %q: %s", want, cardText)
		}
	}
	if !strings.Contains(card, `href="`+prodPR+`"`) {
		t.Errorf("approval card does not link the PR %s:\n%s", prodPR, card)
	}
	if f, d := strings.Index(card, `<form method="post" action="/ui/runs/`+r.ID+`/decide"`), strings.Index(card, `<details class="appdiff"`); f < 0 || d < 0 || f > d {
		t.Errorf("the decide form (at %d) is not before the card's diffs (at %d)", f, d)
	}
	if strings.Index(page, `<section class="approval"`) > strings.Index(page, `<section class="summary"`) {
		t.Error("the approval card is not above the summary")
	}

	sum := section(t, page, `<section class="summary"`, "</section>")
	dev := summaryRow(t, sum+"</section>", "dev")
	for _, want := range []string{"dev succeeded", "environment dev", "image.tag 1.4.1 → 1.5.0", "replicas 2 → 3", "PR #", "merged " + devMerge[:8],
		"web-dev: 2 changed, 1 added", "web-dev Synced Healthy"} {
		if !strings.Contains(dev, want) {
			t.Errorf("summary of dev lacks %q: %s", want, dev)
		}
	}
	prod := summaryRow(t, sum+"</section>", "prod")
	for _, want := range []string{"prod running", "image.tag 1.4.1 → 1.5.0", "region new → eu-west-1", "PR #"} {
		if !strings.Contains(prod, want) {
			t.Errorf("summary of prod lacks %q: %s", want, prod)
		}
	}
	if strings.Contains(prod, "merged") {
		t.Errorf("the summary claims a prod merge before the approval: %s", prod)
	}

	// Outputs: readable, never Go's map printing or a JSON blob.
	lanes := section(t, page, `<div class="lanes">`, `<section class="diffs">`)
	for _, bad := range []string{"map[", `{&#34;`, `{"`, "[{"} {
		if strings.Contains(lanes, bad) {
			t.Errorf("the stages show raw %q:\n%s", bad, lanes)
		}
	}
	devUpdate := plain(section(t, page, `data-step="dev.update"`, `data-step="dev.preview"`))
	if !strings.Contains(devUpdate, "image.tag 1.4.1 → 1.5.0") || !strings.Contains(devUpdate, "prlink http") {
		t.Errorf("dev.update's outputs: %s", devUpdate)
	}
	if p := plain(section(t, page, `data-step="dev.preview"`, `data-step="dev.merge"`)); !strings.Contains(p, "web-dev: 2 changed, 1 added") || !strings.Contains(p, "show the diff") {
		t.Errorf("dev.preview in its lane: %s", p)
	}

	// The diff: per app (collapsed), per resource, coloured lines, masked, truncated, escaped.
	diffs := section(t, page, `<section class="diffs">`, `<section class="logs">`)
	devDiffHTML := section(t, diffs, `data-diff="dev.preview"`, `data-diff="prod.preview"`)
	if n := strings.Count(devDiffHTML, `<details class="appdiff"`); n != 2 {
		t.Errorf("dev's diff has %d app sections, want 2 (web-dev, web-dev-worker)", n)
	}
	if strings.Contains(devDiffHTML, `<details class="appdiff" open`) {
		t.Error("an app diff is open by default; they start collapsed")
	}
	web := section(t, devDiffHTML, `data-app="web-dev"`, `data-app="web-dev-worker"`)
	for _, want := range []string{
		`<span class="del"><i class="m">-</i>  <b class="yk">replicas:</b> 2</span>`, `<span class="add"><i class="m">+</i>  <b class="yk">replicas:</b> 3</span>`,
		`<span class="add"><i class="m">+</i>      - <b class="yk">image:</b> registry.example.com/shop/web:1.5.0</span>`,
		`<span class="ctx"><i class="m"> </i>    <b class="yk">spec:</b></span>`, `<span class="hunk">@@ -5,7 +5,7 @@</span>`,
		`<span class="file">+++ b/Deployment/shop/web</span>`,
		`<code>Deployment shop/web</code>`, `<code>spec.replicas</code>`, `+1 added`, `~2 changed`, `4 unchanged`,
		`<code>Secret shop/web-env</code> <span class="badge warn" title="Secret values never leave the agent">masked</span>`,
		`&lt;img src=x onerror=&#34;document.body.dataset.pwned=1&#34;&gt;`, `&lt;b&gt;hi&lt;/b&gt;`,
	} {
		if !strings.Contains(web, want) {
			t.Errorf("web-dev's diff lacks %s", want)
		}
	}
	if strings.Contains(page, hostileName) || strings.Contains(page, "<b>hi</b>") {
		t.Error("a resource name or diff line reached the page unescaped")
	}
	worker := section(t, devDiffHTML, `data-app="web-dev-worker"`, `</details>`)
	if !strings.Contains(worker, `<span class="badge warn">truncated</span>`) || !strings.Contains(worker, "cut at the agent's size limit") {
		t.Errorf("web-dev-worker's diff is not marked truncated:\n%s", worker)
	}

	// Rollback steps that have not run: collapsed, and say so.
	if rb := section(t, page, `<details class="rollback" id="rb-dev"`, "</details>"); !strings.Contains(plain(rb), "rollback: not run (only if the stage is rolled back) (1 step)") {
		t.Errorf("dev's rollback while the run goes on: %s", plain(rb))
	}
	if strings.Contains(page, "<h3>Rollback</h3>") {
		t.Error("a rollback that did not run is shown expanded")
	}

	// Approved: prod merges and syncs; the summary has prod's merge and health, and the
	// rollbacks are "not needed".
	if err := e.Ctl.Decide(context.Background(), r.ID, controller.SignalRequest{Stage: "prod", Step: "approve", Approve: true},
		controller.User{Name: "alice", Groups: []string{"release"}}); err != nil {
		t.Fatal(err)
	}
	final := e.Wait(r.ID, 90*time.Second)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", final.Status, final.Error)
	}
	_, _, page = do(t, c, "GET", runURL, nil, nil)
	prod = summaryRow(t, page, "prod")
	prodMerge := ctltest.Step(final, "prod", "merge").Outputs["commitId"].(string)
	for _, want := range []string{"prod succeeded", "merged " + prodMerge[:8], "web-prod Synced Healthy"} {
		if !strings.Contains(prod, want) {
			t.Errorf("summary of prod after the run lacks %q: %s", want, prod)
		}
	}
	for _, s := range []string{"dev", "prod"} {
		if rb := section(t, page, `<details class="rollback" id="rb-`+s+`"`, "</details>"); !strings.Contains(plain(rb), "rollback: not needed") {
			t.Errorf("%s's rollback after success: %s", s, plain(rb))
		}
	}
	if strings.Contains(page, `<section class="approval"`) {
		t.Error("the approval card is still shown after the approval")
	}
}

// viewport sets the tab's window to w×h CSS pixels (400 is a phone).
func viewport(t *testing.T, ctx context.Context, w, h int64) {
	t.Helper()
	run(t, ctx, "viewport", chromedp.EmulateViewport(w, h), chromedp.Evaluate(`window.scrollTo(0, 0)`, nil))
}

// TestBrowserRunSummaryAndDiff: in Chromium, the run page of a promotion waiting for prod's
// approval has the Approve button on the first screen at 400 px, the card saying old → new;
// a collapsed app diff opens on a click with its added and removed lines coloured; a hostile
// resource name runs no script; approving from the card updates the page live, keeps the
// opened diff open, and the summary then shows prod merged and healthy with the rollbacks
// "not needed".
func TestBrowserRunSummaryAndDiff(t *testing.T) {
	t.Parallel()
	e := previewEnv(t)
	r := startParked(t, e, promoteWithPreview(t), "prod", "approve")
	url := e.URL + "/ui/runs/" + r.ID
	ctx := signedInTab(t, url, aliceToken)
	run(t, ctx, "live", chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery))
	card := `[data-approval="prod.approve"]`
	if got := text(t, ctx, card+` table.edits`); !strings.Contains(got, "image.tag 1.4.1 → 1.5.0") || !strings.Contains(got, "region new → eu-west-1") {
		t.Errorf("approval card edits: %q", got)
	}

	// A phone: the Approve button is on the first screen, without scrolling.
	viewport(t, ctx, 400, 800)
	var onScreen bool
	run(t, ctx, "approve button position", chromedp.Evaluate(`(function(){var b=document.querySelector('`+card+` button.approve');
		if(!b) return false; var r=b.getBoundingClientRect(); return r.top>=0 && r.bottom<=window.innerHeight && r.right<=window.innerWidth})()`, &onScreen))
	if !onScreen {
		var at string
		run(t, ctx, "where", chromedp.Evaluate(`JSON.stringify(document.querySelector('`+card+` button.approve').getBoundingClientRect())+" in "+window.innerWidth+"x"+window.innerHeight`, &at))
		t.Errorf("at 400 px the Approve button is not on the first screen: %s", at)
	}
	var wide bool
	run(t, ctx, "no sideways scroll", chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &wide))
	if wide {
		t.Error("at 400 px the page scrolls sideways")
	}
	shot(t, ctx, "run-approval-400")
	viewport(t, ctx, 1400, 900)
	shot(t, ctx, "run-approval-1400")

	// The dev diff: collapsed, opens on a click; + and - lines coloured differently.
	app := `#diff-dev-preview-sim-web-dev`
	var open bool
	run(t, ctx, "collapsed", chromedp.Evaluate(`document.querySelector('`+app+`').open`, &open))
	if open {
		t.Error("the app diff starts open")
	}
	run(t, ctx, "open the diff", chromedp.Click(app+` > summary`, chromedp.ByQuery), chromedp.WaitVisible(app+` pre.udiff span.add`, chromedp.ByQuery))
	var add, del, ctxLine string
	run(t, ctx, "colours", chromedp.Evaluate(`getComputedStyle(document.querySelector('`+app+` pre.udiff span.add')).backgroundColor`, &add),
		chromedp.Evaluate(`getComputedStyle(document.querySelector('`+app+` pre.udiff span.del')).backgroundColor`, &del),
		chromedp.Evaluate(`getComputedStyle(document.querySelector('`+app+` pre.udiff span.ctx')).backgroundColor`, &ctxLine))
	if add == del || add == ctxLine || del == ctxLine {
		t.Errorf("diff lines not coloured apart: add %s, del %s, context %s", add, del, ctxLine)
	}
	if got := text(t, ctx, app+` .res.ch-changed`); !strings.Contains(got, "Deployment shop/web") || !strings.Contains(got, "spec.replicas") {
		t.Errorf("first resource: %q", got)
	}
	var pwned string
	run(t, ctx, "no script ran", chromedp.Evaluate(`document.body.dataset.pwned || ""`, &pwned))
	if pwned != "" {
		t.Fatal("a resource name from the diff ran a script")
	}
	run(t, ctx, "scroll to the diff", chromedp.ScrollIntoView(app, chromedp.ByQuery))
	shot(t, ctx, "run-diff-1400")

	// Approve from the card: the page updates live, the opened diff stays open.
	run(t, ctx, "approve", chromedp.Click(card+` button.approve`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	final := e.Wait(r.ID, 90*time.Second)
	if final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", final.Status, final.Error)
	}
	run(t, ctx, "succeeded", chromedp.WaitVisible(`.runhead .st-succeeded`, chromedp.ByQuery),
		chromedp.WaitVisible(`[data-summary="prod"] code.sha`, chromedp.ByQuery))
	if got := text(t, ctx, `[data-summary="prod"]`); !strings.Contains(got, "merged "+ctltest.Step(final, "prod", "merge").Outputs["commitId"].(string)[:8]) ||
		!strings.Contains(got, "web-prod Synced Healthy") {
		t.Errorf("prod's summary after the run: %q", got)
	}
	run(t, ctx, "still open", chromedp.Evaluate(`document.querySelector('`+app+`').open`, &open))
	if !open {
		t.Error("a live update closed the diff someone opened")
	}
	if got := text(t, ctx, `#rb-dev > summary`); got != "rollback: not needed (1 step)" {
		t.Errorf("dev's rollback: %q", got)
	}
	var rbShown bool
	run(t, ctx, "rollback hidden", chromedp.Evaluate(`document.querySelector('#rb-dev').open || document.querySelector('[data-step="dev.undo"]').checkVisibility()`, &rbShown))
	if rbShown {
		t.Error("the rollback step that will not run is shown")
	}
	run(t, ctx, "top", chromedp.Evaluate(`document.querySelector('`+app+`').open = false; window.scrollTo(0, 0)`, nil))
	shot(t, ctx, "run-summary-1400")
	viewport(t, ctx, 400, 800)
	shot(t, ctx, "run-summary-400")
}

// TestBrowserRollbackShownWhenRun: a stage whose rollback ran shows its rollback steps (not
// collapsed), with their status.
func TestBrowserRollbackShownWhenRun(t *testing.T) {
	t.Parallel()
	e := previewEnv(t)
	r := e.Start(`
name: rolls-back
stages:
  - id: dev
    onFailure: rollbackStage
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/dev/config.json, variables: [{name: image.tga, type: String, value: "1.5.0"}]}
    rollbackSteps:
      - {id: undo, type: Noop, with: {outputs: {reverted: true}}}
`, nil)
	final := e.Wait(r.ID, 60*time.Second)
	if st := ctltest.Step(final, "dev", "update"); st.Status != pipelines.StFailed || !strings.Contains(st.Error, "image.tga") {
		t.Fatalf("update: %s %s", st.Status, st.Error)
	}
	if rb := final.Stages[0].Rollback[0]; rb.Status != pipelines.StSucceeded {
		t.Fatalf("the rollback step did not run: %s", rb.Status)
	}
	ctx := signedInTab(t, e.URL+"/ui/runs/"+r.ID, bobToken)
	run(t, ctx, "rollback shown", chromedp.WaitVisible(`[data-step="dev.undo"]`, chromedp.ByQuery))
	if got := text(t, ctx, `[data-step="dev.undo"]`); !strings.Contains(got, "succeeded") {
		t.Errorf("rollback step: %q", got)
	}
	if k, v := text(t, ctx, `[data-step="dev.undo"] dl.outputs dt`), text(t, ctx, `[data-step="dev.undo"] dl.outputs dd`); k != "reverted" || v != "true" {
		t.Errorf("rollback step's output: %q: %q", k, v)
	}
	var collapsed int
	run(t, ctx, "not collapsed", chromedp.Evaluate(`document.querySelectorAll('details.rollback').length`, &collapsed))
	if collapsed != 0 {
		t.Error("a rollback that ran is collapsed")
	}
	if got := text(t, ctx, `[data-summary="dev"]`); !strings.Contains(got, "failed") || !strings.Contains(got, "no release-repo change") {
		t.Errorf("dev's summary: %q", got)
	}
	shot(t, ctx, "run-rolled-back")
}

// TestBrowserApprovalCardManyKeysOnPhone: a stage that set twelve keys in three files, one a
// 300-character value and one holding markup, still has the Approve button on a phone's first
// screen: the card lists four keys and collapses the rest as "8 more keys"; nothing scrolls
// sideways and the markup is text.
func TestBrowserApprovalCardManyKeysOnPhone(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	e.RegisterAgent("sim")
	var files []string
	for f, file := range []string{"envs/prod/values.yaml", "envs/prod/worker.yaml", "envs/prod/config.json"} {
		var ch []string
		for k := 0; k < 4; k++ {
			v := `"1.5.` + string(rune('0'+k)) + `"`
			switch {
			case f == 0 && k == 1:
				v = `"` + strings.Repeat("x", 300) + `"`
			case f == 0 && k == 2:
				v = `"<script>document.body.dataset.pwned=1</script>"`
			}
			ch = append(ch, `{key: key`+string(rune('a'+f))+string(rune('0'+k))+`, value: `+v+`, old: "1.4.0"}`)
		}
		files = append(files, `{file: `+file+`, changes: [`+strings.Join(ch, ", ")+`]}`)
	}
	r := startParked(t, e, prodPipeline("wide", `
      - id: update
        type: Noop
        with: {outputs: {prNumber: 7, prlink: "https://forge.example/acme/release/pull/7", edits: [`+strings.Join(files, ", ")+`]}}
      - id: approve
        type: Approval
        timeout: 5m
        with: {approvers: {groups: [release], minimumCount: 1}, message: "Promote?"}
`), "prod", "approve")
	ctx := signedInTab(t, e.URL+"/ui/runs/"+r.ID, aliceToken)
	viewport(t, ctx, 400, 800)
	card := `[data-approval="prod.approve"]`
	run(t, ctx, "card", chromedp.WaitVisible(card+` button.approve`, chromedp.ByQuery))
	var onScreen, wide bool
	run(t, ctx, "approve button position", chromedp.Evaluate(`(function(){var r=document.querySelector('`+card+` button.approve').getBoundingClientRect();
		return r.top>=0 && r.bottom<=window.innerHeight && r.right<=window.innerWidth})()`, &onScreen),
		chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &wide))
	if !onScreen {
		t.Error("with twelve keys the Approve button is not on a phone's first screen")
	}
	if wide {
		t.Error("a long value makes the page scroll sideways at 400 px")
	}
	if got := text(t, ctx, card+` details.more-edits > summary`); got != "8 more keys" {
		t.Errorf("collapsed keys: %q", got)
	}
	var rows int
	run(t, ctx, "rows", chromedp.Evaluate(`document.querySelectorAll('`+card+` details.more-edits tr:not(.file)').length`, &rows))
	if rows != 8 {
		t.Errorf("%d keys behind '8 more keys'", rows)
	}
	if got := text(t, ctx, card); !strings.Contains(got, "<script>document.body.dataset.pwned=1</script>") {
		t.Errorf("the markup value is not shown as text: %q", got)
	}
	var pwned string
	run(t, ctx, "no script ran", chromedp.Evaluate(`document.body.dataset.pwned || ""`, &pwned))
	if pwned != "" {
		t.Fatal("a value from the edits output ran a script")
	}
	shot(t, ctx, "run-approval-many-keys-400")
}
