package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/controller/ctltest/parallel"
	"github.com/prflow/prflow/pipelines/controller/ui"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// The browser tests drive a real headless Chromium (Debian package "chromium") with chromedp.
// Without a browser they fail; PRFLOW_UI_NO_BROWSER=1 is the only way to skip them.
// PRFLOW_UI_SCREENSHOTS=DIR saves a screenshot of each page they visit there.

const (
	aliceToken = "alice-token-0123456789" // group release: may approve
	bobToken   = "bob-token-0123456789"   // group dev: may not
)

// uiEnv is a running prflow (controller, worker) with the API and the UI on one test server.
type uiEnv struct {
	*ctltest.Env
	URL string
}

func newUIEnv(t *testing.T, o ctltest.Options, fb *controller.Feedback) *uiEnv {
	t.Helper()
	e := ctltest.New(t, o)
	dir := t.TempDir()
	for name, tok := range map[string]string{"alice": aliceToken, "bob": bobToken} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokens := filepath.Join(dir, "tokens.yaml")
	spec := fmt.Sprintf("tokens:\n  - {user: alice, groups: [release], token: \"file:%s\"}\n  - {user: bob, groups: [dev], token: \"file:%s\"}\n",
		filepath.Join(dir, "alice"), filepath.Join(dir, "bob"))
	if err := os.WriteFile(tokens, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := controller.LoadAuth(tokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ui.Wrap(e.Ctl.Handler(auth), ui.New(e.Ctl, auth, nil)))
	t.Cleanup(srv.Close)
	if fb != nil {
		fb.ExternalURL = srv.URL
		e.Ctl.SetFeedback(fb)
	}
	return &uiEnv{Env: e, URL: srv.URL}
}

// newReleaseUIEnv is newUIEnv with the GitHub fake holding the example release repo as
// acme/release, which steps reach through connector "release".
func newReleaseUIEnv(t *testing.T) (*uiEnv, *scmtest.GitHub, scm.Provider) {
	t.Helper()
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", examples.ReleaseRepo()); err != nil {
		t.Fatal(err)
	}
	ghp, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	e := newUIEnv(t, ctltest.Options{Services: map[string]any{steps.ServiceSCM: connector.Static{"release": ghp}}, Secrets: []string{scmtest.DefaultToken}}, nil)
	return e, gh, ghp
}

// One Chromium serves every test of the package (starting it is the slow part); each test
// gets a tab in a browser context of its own (as an incognito window: no cookies, none shared
// with the tests that run at the same time).
var (
	browserOnce sync.Once
	browserCtx  context.Context
	browserErr  error
	browserPath string
	stopBrowser = func() {}
)

func TestMain(m *testing.M) {
	parallel.Default(4) // the tests marked parallel mostly wait (docs/testing.md)
	code := m.Run()
	stopBrowser()
	os.Exit(code)
}

func startBrowser() {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			browserPath = p
			break
		}
	}
	if browserPath == "" {
		return
	}
	dir, err := os.MkdirTemp("", "prflow-ui-chromium-")
	if err != nil {
		browserErr = err
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(dir), chromedp.WindowSize(1400, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	stopBrowser = func() { cancelB(); cancelA(); _ = os.RemoveAll(dir) }
	browserErr = chromedp.Run(ctx) // starts the browser
	browserCtx = ctx
}

// browser returns a new tab in a new browser context: no session from other tests.
func browser(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(startBrowser)
	if browserPath == "" {
		if os.Getenv("PRFLOW_UI_NO_BROWSER") == "1" {
			t.Skip("PRFLOW_UI_NO_BROWSER=1 and no Chromium: browser test skipped")
		}
		t.Fatal("no Chromium found (apt-get install chromium; .ci/run installs it); PRFLOW_UI_NO_BROWSER=1 skips the browser tests")
	}
	if browserErr != nil {
		t.Fatalf("start Chromium %s: %v", browserPath, browserErr)
	}
	b := cdp.WithExecutor(browserCtx, chromedp.FromContext(browserCtx).Browser)
	bc, err := target.CreateBrowserContext().Do(b)
	if err != nil {
		t.Fatalf("new browser context in Chromium: %v", err)
	}
	t.Cleanup(func() { _ = target.DisposeBrowserContext(bc).Do(b) })
	return openTab(t, bc)
}

type browserContextKey struct{}

// newTab opens another tab in ctx's browser context (signed in as ctx is).
func newTab(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	return openTab(t, ctx.Value(browserContextKey{}).(cdp.BrowserContextID))
}

// openTab opens a tab in browser context bc, in a window of its own: Chromium refuses a tab
// in a browser context that has no window ("no browser is open"), which is what
// chromedp.WithNewBrowserContext asks for.
func openTab(t *testing.T, bc cdp.BrowserContextID) context.Context {
	t.Helper()
	b := cdp.WithExecutor(browserCtx, chromedp.FromContext(browserCtx).Browser)
	tab, err := target.CreateTarget("about:blank").WithBrowserContextID(bc).WithNewWindow(true).Do(b)
	if err != nil {
		t.Fatalf("open a tab in Chromium: %v", err)
	}
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithTargetID(tab))
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute) // tests share the machine and the browser
	t.Cleanup(func() { cancelT(); cancel() })
	ctx = context.WithValue(ctx, browserContextKey{}, bc)
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("open a tab in Chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var html, loc string
		_ = chromedp.Run(context.WithoutCancel(ctx), chromedp.Location(&loc), chromedp.OuterHTML("body", &html, chromedp.ByQuery))
		t.Fatalf("%s: %v\nat %s:\n%.3000s", what, err, loc, html)
	}
}

// shot saves a full-page screenshot when PRFLOW_UI_SCREENSHOTS names a directory.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("PRFLOW_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	var png []byte
	run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(&png, 100))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signIn goes to url, is sent to the login form, signs in with token and lands on url.
func signIn(t *testing.T, ctx context.Context, url, token string) {
	t.Helper()
	run(t, ctx, "sign in", chromedp.Navigate(url), chromedp.WaitVisible(`#token`, chromedp.ByID),
		chromedp.SendKeys(`#token`, token, chromedp.ByID), chromedp.Submit(`#login`, chromedp.ByID),
		chromedp.WaitVisible(`header.top`, chromedp.ByQuery))
	var loc string
	run(t, ctx, "location", chromedp.Location(&loc))
	if loc != url {
		t.Fatalf("after sign-in at %s, want %s", loc, url)
	}
}

// signedInTab is a new browser tab (in a browser context of its own) signed in with token,
// at url.
func signedInTab(t *testing.T, url, token string) context.Context {
	t.Helper()
	ctx := browser(t)
	signIn(t, ctx, url, token)
	return ctx
}

// text reads an element's text in one step in the page: the live run body is replaced on
// every pushed update, so a node looked up first and read after may be gone.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	q, _ := json.Marshal(sel)
	run(t, ctx, "wait for "+sel, chromedp.WaitReady(sel, chromedp.ByQuery))
	run(t, ctx, "text of "+sel, chromedp.Evaluate(`(function(){var n=document.querySelector(`+string(q)+`);return n?n.textContent:"(missing)"})()`, &s))
	return strings.Join(strings.Fields(s), " ")
}

// prodPipeline is pipeline name with one stage, prod, in environment prod (cluster prod-eu of
// agent sim), running steps (the stage's list items, indented six spaces).
func prodPipeline(name, steps string) string {
	return `
name: ` + name + `
environments:
  - {name: prod, clusters: [{name: prod-eu, agent: sim}]}
stages:
  - id: prod
    environment: prod
    steps:` + steps
}

var approvalPipeline = prodPipeline("gated", `
      - id: approve
        type: Approval
        timeout: 5m
        with:
          approvers: {groups: [release], minimumCount: 1}
          message: Promote to prod?
      - id: after
        type: Noop
        with: {outputs: {commitId: 0123456789abcdef0123456789abcdef01234567, prlink: "https://forge.example/acme/release/pull/7"}}
`)

func waitParked(t *testing.T, e *uiEnv, id, stage, step string) {
	t.Helper()
	// A generous bound: a promotion's dev stage runs first, with other tests at the same time.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		r, err := e.Ctl.Get(context.Background(), id)
		if err == nil {
			if st := ctltest.Step(r, stage, step); st != nil && st.Status == pipelines.StWaiting && st.Wait != nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s.%s of run %s never parked", stage, step, id)
		}
	}
}

// startParked starts src and waits until its step stage.step is parked.
func startParked(t *testing.T, e *uiEnv, src, stage, step string) *pipelines.Run {
	t.Helper()
	r := e.Start(src, nil)
	waitParked(t, e, r.ID, stage, step)
	return r
}

// newApprovalUIEnv is newUIEnv with agent sim registered and a run of approvalPipeline
// parked at its prod approval.
func newApprovalUIEnv(t *testing.T, o ctltest.Options) (*uiEnv, *pipelines.Run) {
	t.Helper()
	e := newUIEnv(t, o, nil)
	e.RegisterAgent("sim")
	return e, startParked(t, e, approvalPipeline, "prod", "approve")
}

// TestBrowserRunList: a run the test starts is listed (pipeline, status), newest first, and
// the filters keep or drop it.
func TestBrowserRunList(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	old := e.Start("name: older\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n", nil)
	e.Wait(old.ID, 20*time.Second)
	r := e.Start("name: listed\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n", nil)
	e.Wait(r.ID, 20*time.Second)
	ctx := signedInTab(t, e.URL+"/ui/", bobToken)
	row := `tr[data-run="` + r.ID + `"]`
	run(t, ctx, "run row", chromedp.WaitVisible(row, chromedp.ByQuery))
	if got := text(t, ctx, row+` td:nth-child(2)`); got != "listed" {
		t.Errorf("pipeline cell %q", got)
	}
	if got := text(t, ctx, row+` .st`); got != "succeeded" {
		t.Errorf("status cell %q", got)
	}
	var first string
	run(t, ctx, "first row", chromedp.AttributeValue(`#runs tbody tr`, "data-run", &first, nil, chromedp.ByQuery))
	if first != r.ID {
		t.Errorf("first row is %s, want the newest run %s", first, r.ID)
	}
	shot(t, ctx, "runs")
	// Filters: another pipeline hides it; its own pipeline and status keep it.
	run(t, ctx, "filter", chromedp.Navigate(e.URL+"/ui/?pipeline=older"), chromedp.WaitVisible(`#runs`, chromedp.ByID))
	var n int
	run(t, ctx, "count", chromedp.Evaluate(`document.querySelectorAll('tr[data-run="`+r.ID+`"]').length`, &n))
	if n != 0 {
		t.Errorf("pipeline=older still lists run %s", r.ID)
	}
	run(t, ctx, "filter 2", chromedp.Navigate(e.URL+"/ui/?pipeline=listed&status=succeeded"), chromedp.WaitVisible(row, chromedp.ByQuery))
	run(t, ctx, "filter 3", chromedp.Navigate(e.URL+"/ui/?status=failed"), chromedp.WaitVisible(`p.empty`, chromedp.ByQuery))
}

// TestBrowserRunPageLive: the run page shows a parked approval, and turns to succeeded when the
// approval arrives through the API — pushed over SSE, without a reload.
func TestBrowserRunPageLive(t *testing.T) {
	t.Parallel()
	e, r := newApprovalUIEnv(t, ctltest.Options{})
	url := e.URL + "/ui/runs/" + r.ID
	ctx := signedInTab(t, url, bobToken)
	if got := text(t, ctx, `.runhead .st`); got != "waitingApproval" {
		t.Fatalf("run status on the page: %q, want waitingApproval", got)
	}
	if got := text(t, ctx, `[data-step="prod.approve"] .reason`); !strings.Contains(got, "Promote to prod?") {
		t.Errorf("wait reason: %q", got)
	}
	// bob is not an approver: no buttons, and the page says why.
	if got := text(t, ctx, `[data-approval="prod.approve"]`); !strings.Contains(got, "bob is not an approver") {
		t.Errorf("bob's view of the approval: %q", got)
	}
	shot(t, ctx, "run-waiting")
	// A marker in the page's JavaScript state survives only if the page is not reloaded.
	run(t, ctx, "mark", chromedp.Evaluate(`window.prflowMarker = 42`, nil))
	if err := e.Ctl.Decide(context.Background(), r.ID, controller.SignalRequest{Stage: "prod", Step: "approve", Approve: true, Comment: "from the API"},
		controller.User{Name: "alice", Groups: []string{"release"}}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "live update to succeeded", chromedp.WaitVisible(`.runhead .st-succeeded`, chromedp.ByQuery))
	var marker int
	run(t, ctx, "marker", chromedp.Evaluate(`window.prflowMarker || 0`, &marker))
	if marker != 42 {
		t.Fatal("the page was reloaded: the update was not pushed")
	}
	// Outputs: the commit SHA short with a copy button, the PR link clickable.
	if got := text(t, ctx, `[data-step="prod.after"] code.sha`); got != "01234567" {
		t.Errorf("short SHA %q", got)
	}
	var href string
	run(t, ctx, "pr link", chromedp.AttributeValue(`[data-step="prod.after"] a[href^="https://forge.example"]`, "href", &href, nil, chromedp.ByQuery))
	if href != "https://forge.example/acme/release/pull/7" {
		t.Errorf("PR link %q", href)
	}
	run(t, ctx, "logs end", chromedp.WaitVisible(`body[data-ended="true"]`, chromedp.ByQuery))
	shot(t, ctx, "run-succeeded")
}

// TestBrowserApproveFromPage: an approver approves from the page with a comment; the parked
// approval is released and the run succeeds with the decision recorded.
func TestBrowserApproveFromPage(t *testing.T) {
	t.Parallel()
	e, r := newApprovalUIEnv(t, ctltest.Options{})
	url := e.URL + "/ui/runs/" + r.ID
	ctx := signedInTab(t, url, aliceToken)
	form := `[data-approval="prod.approve"] form.decide`
	// body[data-live] says the live stream has delivered the run (which re-renders the body);
	// what is typed before or after that stays.
	run(t, ctx, "approve", chromedp.WaitVisible(form, chromedp.ByQuery), chromedp.WaitReady(`body[data-live="true"]`, chromedp.ByQuery),
		chromedp.SendKeys(form+` input[name=comment]`, "looks good", chromedp.ByQuery))
	shot(t, ctx, "run-approval")
	run(t, ctx, "click approve", chromedp.Click(form+` button.approve`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByID))
	if got := text(t, ctx, `#flash`); got != "prod.approve approved by alice" {
		t.Errorf("flash %q", got)
	}
	final := e.Wait(r.ID, 30*time.Second)
	st := ctltest.Step(final, "prod", "approve")
	if final.Status != pipelines.StSucceeded || len(st.Signals) != 1 || st.Signals[0].User != "alice" || st.Signals[0].Comment != "looks good" {
		t.Fatalf("run %s, approval signals %+v", final.Status, st.Signals)
	}
	run(t, ctx, "page shows it", chromedp.WaitVisible(`.runhead .st-succeeded`, chromedp.ByQuery))
	if got := text(t, ctx, `[data-step="prod.approve"] .decision`); !strings.Contains(got, "alice approved") || !strings.Contains(got, "looks good") {
		t.Errorf("decision line %q", got)
	}
	// The environments view names the run that put prod where it is.
	run(t, ctx, "environments", chromedp.Navigate(e.URL+"/ui/environments"), chromedp.WaitVisible(`article[data-env="prod"]`, chromedp.ByQuery))
	if got := text(t, ctx, `article[data-env="prod"]`); !strings.Contains(got, r.ID) {
		t.Errorf("environments: prod row %q does not name run %s", got, r.ID)
	}
	shot(t, ctx, "environments")
	run(t, ctx, "workers", chromedp.Navigate(e.URL+"/ui/workers"), chromedp.WaitVisible(`tr[data-worker="w0"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-agent="sim"]`, chromedp.ByQuery))
	if got := text(t, ctx, `tr[data-worker="w0"]`); !strings.Contains(got, "default") || !strings.Contains(got, "/ 4") {
		t.Errorf("worker row %q: want its pool and load", got)
	}
	shot(t, ctx, "workers")
}

// TestBrowserBadToken: a wrong token is refused with a clear message and no session.
func TestBrowserBadToken(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	ctx := browser(t)
	run(t, ctx, "bad token", chromedp.Navigate(e.URL+"/ui/"), chromedp.WaitVisible(`#token`, chromedp.ByID),
		chromedp.SendKeys(`#token`, "not-a-token-of-anyone", chromedp.ByID), chromedp.Submit(`#login`, chromedp.ByID),
		chromedp.WaitVisible(`#error`, chromedp.ByID))
	if got := text(t, ctx, `#error`); !strings.Contains(got, "this token is not valid") {
		t.Errorf("error %q", got)
	}
	shot(t, ctx, "login-refused")
	var loc string
	run(t, ctx, "still out", chromedp.Navigate(e.URL+"/ui/"), chromedp.WaitVisible(`#token`, chromedp.ByID), chromedp.Location(&loc))
	if !strings.Contains(loc, "/ui/login") {
		t.Errorf("after a refused token /ui/ is at %s, want the login form", loc)
	}
}

// TestBrowserCommitStatusLink: the Details link of a commit status, as the GitHub fake
// records it, opens the run's page (through the login form).
func TestBrowserCommitStatusLink(t *testing.T) {
	t.Parallel()
	gh := scmtest.NewGitHub(t)
	sha, err := gh.CreateRepo("acme", "web", map[string]string{"app.txt": "v1\n"})
	if err != nil {
		t.Fatal(err)
	}
	ghp, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	e := newUIEnv(t, ctltest.Options{Services: map[string]any{steps.ServiceSCM: connector.Static{"app": ghp}}, Secrets: []string{scmtest.DefaultToken}},
		&controller.Feedback{Statuses: true})
	r, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "t.yaml", Executor: "tester",
		Source:  []byte("name: linked\nstages:\n  - id: build\n    steps:\n      - {id: a, type: Noop}\n"),
		Trigger: &pipelines.TriggerInfo{Kind: "webhook", Provider: "github", Event: "push", Repo: "acme/web", SHA: sha, Connector: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	e.Wait(r.ID, 20*time.Second)
	var target string
	for deadline := time.Now().Add(20 * time.Second); target == ""; time.Sleep(20 * time.Millisecond) {
		all, err := gh.Statuses("acme", "web", sha)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.Context == "prflow/build" && s.State == "success" {
				target = s.TargetURL
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no success status on %s: %+v", sha, all)
		}
	}
	if want := e.URL + "/ui/runs/" + r.ID; target != want {
		t.Fatalf("status links to %s, want %s", target, want)
	}
	ctx := signedInTab(t, target, bobToken)
	if got := text(t, ctx, `.runhead h1 code`); got != r.ID {
		t.Errorf("run page heading %q", got)
	}
	if got := text(t, ctx, `.runhead`); !strings.Contains(got, "github acme/web") || !strings.Contains(got, sha[:8]) {
		t.Errorf("trigger on the run page: %q", got)
	}
	shot(t, ctx, "run-from-status")
}
