package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

const envHookSecret = "ui-envs-hook-secret-0123456789"

func promoteDev(name string) string { return promoteEnvs(name, "dev") }

// promoteEnvs promotes inputs.tag through envs in order: per environment a stage that
// sets image.tag in envs/<env>/config.json and merges the PR.
func promoteEnvs(name string, envs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ninputs:\n  tag: {type: string, required: true}\nenvironments:\n", name)
	for _, e := range envs {
		fmt.Fprintf(&b, "  - {name: %s, clusters: [{name: %s-eu, agent: sim}]}\n", e, e)
	}
	b.WriteString("stages:\n")
	for _, e := range envs {
		fmt.Fprintf(&b, `  - id: %s
    environment: %s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: "envs/<+env.name>/config.json",
               variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}]}
      - id: merge
        type: MergePR
        with: {mergeStrategy: squash}
`, e, e)
	}
	return b.String()
}

// envsUI is a running prflow whose release repo lives in the fake GitHub, whose webhooks
// (prflow's merges, hand commits) reach the controller, with a live leader registration of
// the agent "sim" whose app records the test writes.
type envsUI struct {
	*uiEnv
	gh  *scmtest.GitHub
	ghp scm.Provider
}

func newEnvsUI(t *testing.T) *envsUI {
	t.Helper()
	e, gh, ghp := newReleaseUIEnv(t)
	e.Ctl.SetWebhooks(controller.NewWebhooks(0, map[string]string{"github": envHookSecret}))
	gh.RegisterWebhook(e.URL+"/hooks/github", envHookSecret)
	ctx, cancel := context.WithCancel(context.Background())
	done, err := agent.Heartbeat(ctx, e.Ctl.Buckets().Agents, time.Second, func() agent.Registration {
		return agent.Registration{Agent: "sim", Replica: "r1", Kind: "simulated", Leader: true, Healthy: true}
	}, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	return &envsUI{uiEnv: e, gh: gh, ghp: ghp}
}

// promote runs pipeline name to dev with tag and returns its merge commit.
func (e *envsUI) promote(name, tag string) (string, string) {
	e.T.Helper()
	r := e.Start(promoteDev(name), map[string]any{"tag": tag})
	f := e.Wait(r.ID, 90*time.Second)
	if f.Status != pipelines.StSucceeded {
		e.T.Fatalf("run %s: %s %s", r.ID, f.Status, f.Error)
	}
	c, _ := ctltest.Step(f, "dev", "merge").Outputs["commitId"].(string)
	return r.ID, c
}

// app writes the record the simulated agent reports for web-dev.
func (e *envsUI) app(sync, health, rev string) {
	e.T.Helper()
	st := agent.AppStatus{V: agent.Version, Agent: "sim", Name: "web-dev", Cluster: "dev-eu", Namespace: "web-dev", ApplicationSet: "web",
		Labels: map[string]string{"harness.io/envRef": "dev"}, Sync: sync, Health: health, SyncedRevision: rev, ConfirmedAt: time.Now()}
	b, _ := json.Marshal(st)
	if _, err := e.Ctl.Buckets().Apps.Put(context.Background(), agent.StatusKey("sim", "web-dev"), b); err != nil {
		e.T.Fatal(err)
	}
}

// noOverflow fails when the page is wider than the window (a horizontal scroll bar).
func noOverflow(t *testing.T, ctx context.Context, width int) {
	t.Helper()
	var w int
	run(t, ctx, "page width", chromedp.Evaluate(`document.documentElement.scrollWidth`, &w))
	if w > width {
		t.Errorf("at %d px the page is %d px wide", width, w)
	}
}

// TestBrowserEnvironmentChangedByRunAndByHand: two pipelines promoting dev make one card that
// names both and shows the newest value, the run that put it there and the app's live state;
// the history opens on click with old → new; a hand commit to dev's file shows "changed
// outside prflow" live, without a reload. The page works at 1400 and 400 px.
func TestBrowserEnvironmentChangedByRunAndByHand(t *testing.T) {
	t.Parallel()
	e := newEnvsUI(t)
	_, _ = e.promote("web-a", "1.5.0")
	runB, commitB := e.promote("web-b", "1.6.0")
	e.app("Synced", "Healthy", commitB)

	ctx := signedInTab(t, e.URL+"/ui/environments", bobToken)
	card := `article[data-env="dev"]`
	run(t, ctx, "dev synced", chromedp.WaitVisible(card+`[data-state="synced"]`, chromedp.ByQuery))
	var n int
	run(t, ctx, "dev cards", chromedp.Evaluate(`document.querySelectorAll('article[data-env="dev"]').length`, &n))
	if n != 1 {
		t.Fatalf("%d dev cards, want one across both pipelines", n)
	}
	if got := text(t, ctx, card+` [data-value="image.tag"]`); got != "1.6.0" {
		t.Errorf("desired image.tag %q, want 1.6.0", got)
	}
	for sel, want := range map[string]string{card + ` .pipes`: "web-a, web-b", card + ` p.by`: runB, card + ` [data-app="web-dev"]`: "Synced / Healthy",
		`section.envgroup h2`: "ApplicationSet web"} {
		if got := text(t, ctx, sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if got := text(t, ctx, card+` [data-has]`); got != "yes" {
		t.Errorf("has desired %q", got)
	}
	run(t, ctx, "open history", chromedp.Click(card+` details.history summary`, chromedp.ByQuery),
		chromedp.WaitVisible(card+` table.history tbody tr`, chromedp.ByQuery))
	if got := text(t, ctx, card+` table.history tbody tr:first-child`); !strings.Contains(got, "image.tag: 1.5.0 → 1.6.0") || !strings.Contains(got, runB) {
		t.Errorf("newest history row %q", got)
	}
	shot(t, ctx, "environments-1400")
	noOverflow(t, ctx, 1400)

	// A hand commit to dev's file, pushed to the release branch: shown live.
	run(t, ctx, "mark", chromedp.Evaluate(`window.prflowMarker = 7`, nil))
	head, err := e.ghp.Branch(context.Background(), "acme/release", "main")
	if err != nil {
		t.Fatal(err)
	}
	sha, err := e.ghp.Commit(context.Background(), "acme/release", scm.CommitInput{Branch: "main", Parent: head.SHA, Message: "hotfix by hand",
		Changes: []scm.FileChange{{Path: "envs/dev/config.json", Content: []byte(`{"image": {"tag": "1.6.1-hotfix"}}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "outside change shown", chromedp.WaitVisible(card+` [data-outside]`, chromedp.ByQuery))
	if got := text(t, ctx, card+` [data-outside]`); !strings.Contains(got, "changed outside prflow by ") || !strings.Contains(got, sha[:8]) || !strings.Contains(got, "envs/dev/config.json") {
		t.Errorf("outside change %q", got)
	}
	// A worker reads the file at the hand commit through the connector: its value is shown.
	run(t, ctx, "read value shown", chromedp.WaitVisible(card+` [data-read="read"]`, chromedp.ByQuery))
	if got := text(t, ctx, card+` [data-value="image.tag"]`); got != "1.6.1-hotfix" {
		t.Errorf("desired image.tag after the hand commit %q, want 1.6.1-hotfix (read at %s)", got, sha[:8])
	}
	if got := text(t, ctx, card+` [data-outside]`); !strings.Contains(got, "image.tag = 1.6.1-hotfix") {
		t.Errorf("outside change %q does not say the value", got)
	}
	var marker int
	run(t, ctx, "marker", chromedp.Evaluate(`window.prflowMarker || 0`, &marker))
	if marker != 7 {
		t.Error("the page was reloaded: the change was not pushed")
	}
	// The history panel the user opened stays open across the update.
	run(t, ctx, "history still open", chromedp.WaitVisible(card+` table.history`, chromedp.ByQuery))
	shot(t, ctx, "environments-outside-1400")

	run(t, ctx, "narrow", chromedp.EmulateViewport(400, 900), chromedp.Navigate(e.URL+"/ui/environments"), chromedp.WaitVisible(card, chromedp.ByQuery))
	noOverflow(t, ctx, 400)
	shot(t, ctx, "environments-400")
	run(t, ctx, "detail page", chromedp.Navigate(e.URL+"/ui/environments/dev"), chromedp.WaitVisible(card+` table.history tbody tr`, chromedp.ByQuery))
	noOverflow(t, ctx, 400)
	shot(t, ctx, "environment-dev-400")
	run(t, ctx, "wide again", chromedp.EmulateViewport(1400, 900))
}

// TestBrowserEnvironmentDrift: the simulated agent reporting an older revision, then
// Degraded, turns the card drifted with the reasons and since when, live; reporting the
// desired revision Synced and Healthy clears it.
func TestBrowserEnvironmentDrift(t *testing.T) {
	t.Parallel()
	e := newEnvsUI(t)
	_, old := e.promote("web", "2.0.0")
	_, cur := e.promote("web", "2.1.0")
	e.app("Synced", "Healthy", cur)
	ctx := signedInTab(t, e.URL+"/ui/environments", bobToken)
	card := `article[data-env="dev"]`
	run(t, ctx, "synced", chromedp.WaitVisible(card+`[data-state="synced"]`, chromedp.ByQuery))
	run(t, ctx, "mark", chromedp.Evaluate(`window.prflowMarker = 9`, nil))

	e.app("Synced", "Healthy", old)
	run(t, ctx, "drifted", chromedp.WaitVisible(card+`[data-state="drifted"] [data-badge="drift"]`, chromedp.ByQuery))
	if got := text(t, ctx, card+` [data-drift]`); !strings.Contains(got, "web-dev runs "+old[:7]+", not "+cur[:7]) {
		t.Errorf("drift reasons %q", got)
	}
	if got := text(t, ctx, card+` [data-badge="drift"]`); !strings.Contains(got, "drift since ") {
		t.Errorf("drift badge %q", got)
	}
	if got := text(t, ctx, card+` [data-has]`); got != "no" {
		t.Errorf("has desired %q, want no", got)
	}
	shot(t, ctx, "environments-drift-revision")

	e.app("OutOfSync", "Degraded", cur)
	run(t, ctx, "degraded", chromedp.WaitVisible(card+` .h-Degraded`, chromedp.ByQuery))
	if got := text(t, ctx, card+` [data-drift]`); !strings.Contains(got, "web-dev is Degraded") || !strings.Contains(got, "web-dev is OutOfSync") {
		t.Errorf("drift reasons %q", got)
	}
	shot(t, ctx, "environments-drift-degraded")

	e.app("Synced", "Healthy", cur)
	run(t, ctx, "converged", chromedp.WaitVisible(card+`[data-state="synced"]`, chromedp.ByQuery))
	var badges int
	run(t, ctx, "badges", chromedp.Evaluate(`document.querySelectorAll('article[data-env="dev"] [data-badge="drift"]').length`, &badges))
	if badges != 0 {
		t.Error("the drift badge stayed after the app converged")
	}
	var marker int
	run(t, ctx, "marker", chromedp.Evaluate(`window.prflowMarker || 0`, &marker))
	if marker != 9 {
		t.Error("the page was reloaded: the changes were not pushed")
	}
	shot(t, ctx, "environments-converged")
}

// TestBrowserEnvironmentRollBackFromHistory: dev was promoted to 1.5.0, then 1.6.0; the 1.5.0
// row of its history offers "Roll back to this", which starts a new run of the same pipeline
// with that run's inputs (through its gates): 1.5.0 is back in git, the environment's desired
// value says so and the history shows both promotions and the roll back. The newest row (what
// dev runs) offers no roll back; the card links to the promote form of its pipeline.
func TestBrowserEnvironmentRollBackFromHistory(t *testing.T) {
	t.Parallel()
	e := newEnvsUI(t)
	run15, _ := e.promote("web-a", "1.5.0")
	run16, commit16 := e.promote("web-a", "1.6.0")
	e.app("Synced", "Healthy", commit16)

	ctx := signedInTab(t, e.URL+"/ui/environments/dev", bobToken)
	card := `article[data-env="dev"]`
	run(t, ctx, "history", chromedp.WaitVisible(card+` table.history tbody tr`, chromedp.ByQuery))
	var n int
	run(t, ctx, "roll back buttons", chromedp.Evaluate(`document.querySelectorAll('[data-rollback]').length`, &n))
	if n != 1 {
		t.Fatalf("%d roll back buttons, want 1 (the 1.5.0 row only)", n)
	}
	run(t, ctx, "no roll back to what runs", chromedp.Evaluate(`document.querySelectorAll('tr[data-run="`+run16+`"] [data-rollback]').length`, &n))
	if n != 0 {
		t.Error("the promotion dev runs now offers a roll back to itself")
	}
	if got := attr(t, ctx, card+` a[data-promote]`, "href"); got != "/ui/promote?pipeline=web-a&env=dev" {
		t.Errorf("promote link %q", got)
	}
	shot(t, ctx, "environment-rollback-offer-1400")
	var path string
	run(t, ctx, "roll back", chromedp.Click(`tr[data-run="`+run15+`"] [data-rollback] button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#origin`, chromedp.ByID), chromedp.Evaluate(`location.pathname`, &path)) // only a re-run's page says what it re-runs
	id, ok := strings.CutPrefix(path, "/ui/runs/")
	if !ok || id == run15 || id == run16 {
		t.Fatalf("after roll back the browser is at %q, want a new run's page", path)
	}
	f := e.Wait(id, 90*time.Second)
	if f.Status != pipelines.StSucceeded || f.RerunOf != run15 {
		t.Fatalf("roll back run %s: %s (re-run of %q) %s", id, f.Status, f.RerunOf, f.Error)
	}
	b, err := e.ghp.ReadFile(context.Background(), "acme/release", "main", "envs/dev/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"1.5.0"`) {
		t.Fatalf("dev's file after the roll back:\n%s", b)
	}
	run(t, ctx, "back to dev", chromedp.Navigate(e.URL+"/ui/environments/dev"),
		chromedp.WaitVisible(card+` tr[data-run="`+id+`"]`, chromedp.ByQuery))
	if got := text(t, ctx, card+` [data-value="image.tag"]`); got != "1.5.0" {
		t.Errorf("desired image.tag after the roll back %q, want 1.5.0", got)
	}
	if got := text(t, ctx, card+` tr[data-run="`+id+`"]`); !strings.Contains(got, "image.tag: 1.6.0 → 1.5.0") {
		t.Errorf("roll back's history row %q", got)
	}
	run(t, ctx, "rows", chromedp.Evaluate(`document.querySelectorAll('`+card+` table.history tbody tr').length`, &n))
	if n != 3 {
		t.Errorf("%d history rows, want 3 (1.5.0, 1.6.0, the roll back)", n)
	}
	shot(t, ctx, "environment-rolled-back-1400")
}

// attr is the attribute name of the first element sel matches ("(missing)" when none does).
func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	var s string
	q, _ := json.Marshal(sel)
	n, _ := json.Marshal(name)
	run(t, ctx, "attribute of "+sel, chromedp.Evaluate(`(function(){var e=document.querySelector(`+string(q)+`);return e?(e.getAttribute(`+string(n)+`)||""):"(missing)"})()`, &s))
	return s
}

// TestPromoteFormPrefilledFromEnvironmentBefore: the Promote… link of staging opens the form
// prefilled with the inputs of the last promotion of dev, the environment before it; values
// given in the link win; dev, the first environment, is not prefilled.
func TestPromoteFormPrefilledFromEnvironmentBefore(t *testing.T) {
	t.Parallel()
	e := newEnvsUI(t)
	r := e.Start(promoteEnvs("web-two", "dev", "staging"), map[string]any{"tag": "2.0.0"})
	if f := e.Wait(r.ID, 90*time.Second); f.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s %s", r.ID, f.Status, f.Error)
	}
	c := signedIn(t, e.uiEnv, bobToken)
	valueOf := func(q string) string {
		t.Helper()
		code, _, body := do(t, c, "GET", e.URL+"/ui/promote?"+q, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("promote form %s: %d %s", q, code, body)
		}
		m := regexp.MustCompile(`name="in\.tag" value="([^"]*)"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("promote form %s has no tag field:\n%s", q, body)
		}
		return m[1]
	}
	if got := valueOf("pipeline=web-two&env=staging"); got != "2.0.0" {
		t.Errorf("staging's form prefilled with %q, want dev's 2.0.0", got)
	}
	if got := valueOf("pipeline=web-two&env=staging&in.tag=2.1.0"); got != "2.1.0" {
		t.Errorf("a value in the link gave %q, want 2.1.0", got)
	}
	if got := valueOf("pipeline=web-two&env=dev"); got != "" {
		t.Errorf("dev, the first environment, prefilled with %q", got)
	}
}
