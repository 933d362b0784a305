package controller_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

const hookSecret = "whsec-0123456789-do-not-log"

// hookEnv is a prflow whose HTTP handler serves webhooks, with a recorder of every message
// published on the job, event and SCM subjects (to look for secrets and count deliveries).
type hookEnv struct {
	*ctltest.Env
	srv  *httptest.Server
	mu   sync.Mutex
	msgs []*nats.Msg
}

func newHookEnv(t *testing.T, svc map[string]any, secrets []string, triggers map[string][]byte, maxBody int64, opts ...func(*ctltest.Options)) *hookEnv {
	t.Helper()
	o := ctltest.Options{Concurrency: 8, Services: svc, Secrets: secrets, Tuning: queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5}}
	for _, f := range opts {
		f(&o)
	}
	e := &hookEnv{Env: ctltest.New(t, o)}
	sub, err := e.Conn.NC.Subscribe("prflow.>", func(m *nats.Msg) {
		e.mu.Lock()
		e.msgs = append(e.msgs, m)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	e.Ctl.SetWebhooks(controller.NewWebhooks(maxBody, map[string]string{"github": hookSecret, "gitlab": hookSecret, "bitbucket": hookSecret}))
	if triggers != nil {
		ts, err := controller.NewTriggerSet(steps.Default, triggers)
		if err != nil {
			t.Fatal(err)
		}
		e.Ctl.SetTriggers(ts)
	}
	e.Ctl.SetFeedback(&controller.Feedback{ExternalURL: "https://prflow.example.test", Statuses: true, Comments: true})
	e.srv = httptest.NewServer(e.Ctl.Handler(&controller.Auth{}))
	t.Cleanup(e.srv.Close)
	return e
}

// post sends a webhook request and returns the status and body.
func (e *hookEnv) post(req *http.Request) (int, string) {
	e.T.Helper()
	return ctltest.Send(e.T, req)
}

// forgeHook is a delivery to /hooks/<provider> of body, a JSON payload as the forge sends it,
// with the forge's headers.
func (e *hookEnv) forgeHook(provider string, body []byte, header map[string]string) *http.Request {
	e.T.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/hooks/"+provider, bytes.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

// triggeredInputs is input name of every webhook-started run, sorted.
func (e *hookEnv) triggeredInputs(name string) string {
	e.T.Helper()
	var got []string
	for _, r := range e.triggeredRuns() {
		got = append(got, fmt.Sprint(r.Inputs[name]))
	}
	slices.Sort(got)
	return fmt.Sprint(got)
}

// scmCount is how many events PRFLOW_SCM holds.
func (e *hookEnv) scmCount() uint64 {
	e.T.Helper()
	s, err := e.Conn.JS.Stream(context.Background(), queue.StreamSCM)
	if err != nil {
		e.T.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.T.Fatal(err)
	}
	return info.State.Msgs
}

// triggeredRuns lists the runs a webhook started.
func (e *hookEnv) triggeredRuns() []*pipelines.Run {
	e.T.Helper()
	runs, err := e.Ctl.List(context.Background(), 100)
	if err != nil && err != jetstream.ErrNoKeysFound {
		e.T.Fatal(err)
	}
	var out []*pipelines.Run
	for _, r := range runs {
		if r.Trigger != nil && r.Trigger.Kind == "webhook" {
			out = append(out, r)
		}
	}
	return out
}

// waitTriggered waits until n webhook-started runs exist.
func (e *hookEnv) waitTriggered(n int) []*pipelines.Run {
	e.T.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runs := e.triggeredRuns()
		if len(runs) >= n {
			return runs
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("%d triggered runs, want %d\n%s", len(runs), n, e.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noSecrets fails if any secret appears in logs, run state, or any message on prflow.>.
func (e *hookEnv) noSecrets(secrets ...string) {
	e.T.Helper()
	var all bytes.Buffer
	all.WriteString(e.Logs.String())
	e.mu.Lock()
	for _, m := range e.msgs {
		all.Write(m.Data)
		all.WriteString(fmt.Sprint(m.Header))
	}
	n := len(e.msgs)
	e.mu.Unlock()
	runs, _ := e.Ctl.List(context.Background(), 1000)
	for _, r := range runs {
		b, _ := json.Marshal(r)
		all.Write(b)
	}
	if n == 0 || len(runs) == 0 {
		e.T.Fatalf("nothing to scan: %d messages, %d runs", n, len(runs))
	}
	for _, s := range secrets {
		if strings.Contains(all.String(), s) {
			e.T.Errorf("secret %.6s… found in logs, KV or messages", s)
		}
	}
}

// replayable returns a function that rebuilds req with the same body and headers: the forge's
// "Redeliver" button.
func replayable(t *testing.T, req *http.Request) func() *http.Request {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	return func() *http.Request {
		r := req.Clone(context.Background())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		return r
	}
}

var noopTrigger = `name: hello-hook
inputs:
  sha: {type: string, required: true}
  pr: {type: number, default: 0}
triggers:
  - name: merged
    connector: app
    pullRequest:
      repo: acme/web
      actions: [merged]
      branches: [main]
    inputs:
      sha: ${{ event.sha }}
      pr: ${{ event.pr.number }}
` + echoStage("sha")

// echoStage is the one stage of the trigger tests' pipelines: a Noop whose output is the input
// the trigger set.
func echoStage(input string) string {
	return "stages:\n  - id: build\n    steps:\n      - {id: say, type: Noop, with: {outputs: {" + input + `: "${{ inputs.` + input + ` }}"}}}` + "\n"
}

// readFile is a file's content (a forge's recorded payload).
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newGitHub is a fake GitHub holding repos (acme/<name>: files) and a provider on it.
func newGitHub(t *testing.T, repos map[string]map[string]string) (*scmtest.GitHub, scm.Provider) {
	t.Helper()
	gh := scmtest.NewGitHub(t)
	for _, name := range slices.Sorted(maps.Keys(repos)) {
		if _, err := gh.CreateRepo("acme", name, repos[name]); err != nil {
			t.Fatal(err)
		}
	}
	p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	return gh, p
}

// newForge is a fake GitLab or Bitbucket (kind) holding acme/web with files, a provider on it
// and the builder of its signed webhook requests.
func newForge(t *testing.T, kind string, files map[string]string) (*scmtest.Forge, scm.Provider, func(context.Context, string, string, scmtest.WebhookEvent) (*http.Request, error)) {
	t.Helper()
	var f *scmtest.Forge
	var p scm.Provider
	var err error
	var build func(context.Context, string, string, scmtest.WebhookEvent) (*http.Request, error)
	switch kind {
	case "gitlab":
		gl := scmtest.NewGitLab(t)
		f, build = gl.Forge, scmtest.GitLabWebhookRequest
		if _, err = gl.CreateRepo("acme", "web", files); err == nil {
			p, err = gitlab.New(gitlab.WithBaseURL(gl.APIURL()), gitlab.WithToken(scmtest.DefaultToken))
		}
	case "bitbucket":
		bb := scmtest.NewBitbucket(t)
		f, build = bb.Forge, scmtest.BitbucketWebhookRequest
		if _, err = bb.CreateRepo("acme", "web", files); err == nil {
			p, err = bitbucket.New(bitbucket.WithBaseURL(bb.APIURL()), bitbucket.WithToken(scmtest.DefaultToken))
		}
	default:
		t.Fatalf("no fake forge %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return f, p, build
}

// mergedPR makes a real merged PR on a fake forge's acme/web and returns its snapshot.
func mergedPR(t *testing.T, f *scmtest.Forge, p scm.Provider) scmtest.PullRequest {
	t.Helper()
	ctx := context.Background()
	main, err := p.Branch(ctx, "acme/web", "main")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(ctx, "acme/web", scm.CommitInput{Branch: "feature", Parent: main.SHA, Message: "feature",
		Changes: []scm.FileChange{{Path: "src/app.txt", Content: []byte("v2\n")}}}); err != nil {
		t.Fatal(err)
	}
	pr, err := p.OpenPR(ctx, "acme/web", scm.NewPR{Title: "Feature", Head: "feature", Base: "main"})
	if err != nil {
		t.Fatal(err)
	}
	var merged *scm.PullRequest
	for i := 0; i < 100; i++ {
		if merged, err = p.MergePR(ctx, "acme/web", pr.Number, scm.MergeInput{Method: scm.MergeCommit}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	snap, err := f.PullRequest("acme", "web", merged.Number)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestWebhookEndpoint: bad or missing signatures are 401, malformed bodies 400, oversized ones
// 413, and nothing is queued for any of them; a good delivery is queued once and a replay
// of it starts no second run.
func TestWebhookEndpoint(t *testing.T) {
	t.Parallel()
	gh, ghp := newGitHub(t, map[string]map[string]string{"web": {"src/app.txt": "v1\n"}})
	e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"app": ghp}}, []string{scmtest.DefaultToken},
		map[string][]byte{"hello.yaml": []byte(noopTrigger)}, 64<<10)
	url := e.srv.URL + "/hooks/github"
	pr := mergedPR(t, gh.Forge, ghp)
	ev := scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: pr}
	ctx := context.Background()

	bad, _ := scmtest.GitHubWebhookRequest(ctx, url, "wrong-secret", ev)
	unsigned, _ := scmtest.GitHubWebhookRequest(ctx, url, "", ev)
	garbage, _ := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, ev)
	body := []byte(`{"action": "closed", "pull_request": [1, 2`)
	garbage.Body, garbage.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	garbage.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(hookSecret, body))
	huge, _ := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web",
		PR: func() scmtest.PullRequest { p := pr; p.Body = strings.Repeat("x", 100<<10); return p }()})
	unknown, _ := scmtest.GitHubWebhookRequest(ctx, e.srv.URL+"/hooks/gitea", hookSecret, ev)
	for _, tc := range []struct {
		name string
		req  *http.Request
		code int
	}{
		{"wrong secret", bad, 401}, {"unsigned", unsigned, 401}, {"malformed", garbage, 400},
		{"too large", huge, 413}, {"unknown provider", unknown, 404},
	} {
		code, body := e.post(tc.req)
		if code != tc.code {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, code, body, tc.code)
		}
		if strings.Contains(body, hookSecret) {
			t.Errorf("%s: the response shows the secret", tc.name)
		}
	}
	if n := e.scmCount(); n != 0 {
		t.Fatalf("rejected webhooks queued %d events", n)
	}

	good, _ := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, ev)
	again := replayable(t, good)
	code, resp := e.post(again())
	if code != http.StatusAccepted || !strings.Contains(resp, `"queued"`) {
		t.Fatalf("good delivery: HTTP %d %s", code, resp)
	}
	runs := e.waitTriggered(1)
	code, resp = e.post(again()) // the forge redelivers the same delivery
	if code != http.StatusAccepted || !strings.Contains(resp, `"duplicate"`) {
		t.Fatalf("redelivery: HTTP %d %s", code, resp)
	}
	if n := e.scmCount(); n != 1 {
		t.Fatalf("PRFLOW_SCM holds %d events after a delivery and its replay, want 1", n)
	}
	// Past the dedup window (or replayed from the stream): the run id still says it ran.
	var sev scm.Event
	_ = json.Unmarshal(firstSCM(t, e), &sev)
	if err := e.Ctl.HandleSCMEvent(ctx, &sev); err != nil {
		t.Fatal(err)
	}
	r := e.Wait(runs[0].ID, 30*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("triggered run: %s %s", r.Status, r.Error)
	}
	if got := e.triggeredRuns(); len(got) != 1 {
		t.Fatalf("%d runs after a replay, want 1", len(got))
	}
	tr := r.Trigger
	if tr.Provider != "github" || tr.Repo != "acme/web" || tr.SHA != pr.MergeCommitSHA || tr.PR != pr.Number ||
		tr.Connector != "app" || tr.Trigger != "merged" || tr.DeliveryID == "" || r.Inputs["sha"] != pr.MergeCommitSHA {
		t.Errorf("run trigger: %+v inputs %v", tr, r.Inputs)
	}
	waitStatuses(t, gh.Forge, pr.MergeCommitSHA, map[string]string{"prflow/build": "success"})
	e.noSecrets(hookSecret, scmtest.DefaultToken)
}

func firstSCM(t *testing.T, e *hookEnv) []byte {
	t.Helper()
	s, err := e.Conn.JS.Stream(context.Background(), queue.StreamSCM)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return m.Data
}

// waitStatuses waits until the newest status of each context on sha has the wanted state.
func waitStatuses(t *testing.T, f *scmtest.Forge, sha string, want map[string]string) []scmtest.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		all, err := f.Statuses("acme", "web", sha)
		if err != nil {
			t.Fatal(err)
		}
		latest := map[string]string{}
		for _, s := range all {
			latest[s.Context] = s.State
		}
		ok := true
		for c, st := range want {
			ok = ok && latest[c] == st
		}
		if ok {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("statuses on %.12s: %v, want %v", sha, latest, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onMergeEnv runs examples/pipelines/on-merge.yaml (after edit, when given) in a hook env: a
// GitHub fake holding acme/web and the example release repo as acme/release, and a simulated
// agent deploying the release repo.
func onMergeEnv(t *testing.T, edit func(src []byte) []byte) (*hookEnv, *scmtest.GitHub, scm.Provider) {
	t.Helper()
	gh, ghp := newGitHub(t, map[string]map[string]string{"web": {"src/app.txt": "v1\n"}, "release": examples.ReleaseRepo()})
	src, err := examples.FS.ReadFile("pipelines/on-merge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		src = edit(src)
	}
	e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"app": ghp, "release": ghp}}, []string{scmtest.DefaultToken},
		map[string][]byte{"examples/pipelines/on-merge.yaml": src}, 0)
	e.StartSimAgent(gh.Git().Dir("acme", "release")) // triggered runs naming it are refused until it is live
	return e, gh, ghp
}

// TestTriggeredPromotionGitHub is the whole path of examples/pipelines/on-merge.yaml: a signed
// PR-merged webhook → a run → release PRs → merges → syncs (simulated agent) → healthy, with
// prflow/<stage> statuses pending then success on the merge commit and a summary comment on
// every release PR.
func TestTriggeredPromotionGitHub(t *testing.T) {
	e, gh, ghp := onMergeEnv(t, nil)

	pr := mergedPR(t, gh.Forge, ghp)
	req, err := scmtest.GitHubWebhookRequest(context.Background(), e.srv.URL+"/hooks/github", hookSecret,
		scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: pr})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, body := e.post(req); code != http.StatusAccepted {
		t.Fatalf("webhook: HTTP %d %s", code, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the webhook took %s to answer", d)
	}
	runs := e.waitTriggered(1)
	r := e.Wait(runs[0].ID, 90*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run: %s %s\n%s", r.Status, r.Error, e.Logs.String())
	}
	tag := pr.MergeCommitSHA[:12]
	if r.Inputs["tag"] != tag || r.Inputs["pr"] != float64(pr.Number) && r.Inputs["pr"] != pr.Number {
		t.Errorf("inputs from the event: %v (want tag %s, pr %d)", r.Inputs, tag, pr.Number)
	}
	for _, env := range []string{"dev", "staging"} {
		cfg, err := ghp.ReadFile(context.Background(), "acme/release", "main", "envs/"+env+"/config.json")
		if err != nil || !strings.Contains(string(cfg), `"tag": "`+tag+`"`) {
			t.Errorf("%s config after the run: %v\n%s", env, err, cfg)
		}
		sync := ctltest.Step(r, env, "sync")
		if sync == nil || !strings.Contains(fmt.Sprint(sync.Outputs), "Healthy") {
			t.Errorf("%s sync outputs: %v", env, sync)
		}
		// The release PR got a summary comment naming the run and the triggering PR.
		n := ctltest.Step(r, env, "update").Outputs["prNumber"]
		num := int(n.(float64))
		waitComment(t, gh.Forge, "release", num, r.ID)
		rp, _ := gh.PullRequest("acme", "release", num)
		// Besides the summary, the promotion's preview keeps its own comment (issue 33).
		var summaries, previews []string
		for _, c := range rp.Comments {
			if strings.Contains(c.Body, "prflow diff preview") {
				previews = append(previews, c.Body)
			} else {
				summaries = append(summaries, c.Body)
			}
		}
		if len(summaries) != 1 || len(previews) != 1 {
			t.Fatalf("release PR #%d has %d summary and %d preview comments, want 1 each", num, len(summaries), len(previews))
		}
		body := summaries[0]
		if !strings.Contains(body, "`envs/"+env+"/config.json`: image.tag = `"+tag+"`") || !strings.Contains(body, fmt.Sprintf("acme/web#%d (merged)", pr.Number)) ||
			!strings.Contains(body, "https://prflow.example.test/ui/runs/"+r.ID) {
			t.Errorf("comment on release PR #%d:\n%s", num, body)
		}
	}
	all := waitStatuses(t, gh.Forge, pr.MergeCommitSHA, map[string]string{"prflow/dev": "success", "prflow/staging": "success"})
	seen := map[string][]string{}
	for _, s := range all {
		seen[s.Context] = append(seen[s.Context], s.State)
		if s.TargetURL != "https://prflow.example.test/ui/runs/"+r.ID {
			t.Errorf("status %s links to %q", s.Context, s.TargetURL)
		}
	}
	for _, c := range []string{"prflow/dev", "prflow/staging"} {
		if fmt.Sprint(seen[c]) != "[pending success]" {
			t.Errorf("%s went %v, want [pending success]", c, seen[c])
		}
	}
	e.noSecrets(hookSecret, scmtest.DefaultToken)
}

func waitComment(t *testing.T, f *scmtest.Forge, repo string, n int, run string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pr, err := f.PullRequest("acme", repo, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pr.Comments {
			// The run's summary comment (a promotion's diff preview names the run too).
			if strings.Contains(c.Body, run) && !strings.Contains(c.Body, "prflow diff preview") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no comment naming run %s on %s#%d: %v", run, repo, n, pr.Comments)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTriggeredRunGitLabAndBitbucket: the same trigger path for GitLab and Bitbucket: their
// signed webhooks start the run and the statuses land on their commits.
func TestTriggeredRunGitLabAndBitbucket(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"gitlab", "bitbucket"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each forge has its own fake and prflow
			f, p, build := newForge(t, kind, map[string]string{"src/app.txt": "v1\n"})
			e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"app": p}}, []string{scmtest.DefaultToken},
				map[string][]byte{"hello.yaml": []byte(noopTrigger)}, 0)
			pr := mergedPR(t, f, p)
			url := e.srv.URL + "/hooks/" + kind
			bad, _ := build(context.Background(), url, "wrong", scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: pr})
			if code, body := e.post(bad); code != http.StatusUnauthorized {
				t.Fatalf("bad secret: HTTP %d %s", code, body)
			}
			req, err := build(context.Background(), url, hookSecret, scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: pr})
			if err != nil {
				t.Fatal(err)
			}
			if code, body := e.post(req); code != http.StatusAccepted {
				t.Fatalf("webhook: HTTP %d %s", code, body)
			}
			runs := e.waitTriggered(1)
			r := e.Wait(runs[0].ID, 30*time.Second)
			if r.Status != pipelines.StSucceeded || r.Trigger.Provider != kind || r.Trigger.SHA == "" || r.Trigger.PR != pr.Number {
				t.Fatalf("run: %s %s trigger %+v", r.Status, r.Error, r.Trigger)
			}
			// Bitbucket's webhooks carry abbreviated hashes; its API takes them as they are.
			if len(r.Trigger.SHA) < 12 || !strings.HasPrefix(pr.MergeCommitSHA, r.Trigger.SHA) {
				t.Errorf("trigger sha %s, want the merge commit %s", r.Trigger.SHA, pr.MergeCommitSHA)
			}
			waitStatuses(t, f, pr.MergeCommitSHA, map[string]string{"prflow/build": "success"})
			e.noSecrets(hookSecret, scmtest.DefaultToken)
		})
	}
}

// TestWaitForMergeWokenByWebhook: a parked waitForMerge step continues when the forge's
// PR-merged webhook arrives (its poll is a minute: the test ends long before), and fails when
// the PR is closed unmerged.
func TestWaitForMergeWokenByWebhook(t *testing.T) {
	t.Parallel()
	gh, ghp := newGitHub(t, map[string]map[string]string{"release": {"envs/prod/config.json": "{\n  \"replicas\": 2\n}\n"}})
	e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"release": ghp}}, []string{scmtest.DefaultToken}, nil, 0)
	gh.RegisterWebhook(e.srv.URL+"/hooks/github", hookSecret) // the fake forge sends real signed webhooks
	src := `
name: review
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        timeout: 10m
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, waitForMerge: true,
               variables: [{name: replicas, type: Number, value: "4"}]}
`
	ids := []string{e.Start(src, nil).ID, e.Start(src, nil).ID}
	prs, parked := e.ParkedPRs(ids, "s", "update", 30*time.Second)
	for _, st := range parked {
		if st.Wait == nil || st.Wait.Poll < time.Minute {
			t.Fatalf("waitForMerge polls every %v; the test needs a slow poll", st.Wait)
		}
	}
	start := time.Now()
	merged, err := ghp.MergePR(context.Background(), "acme/release", prs[ids[0]], scm.MergeInput{Method: scm.MergeCommit})
	if err != nil {
		t.Fatal(err)
	}
	if err := ghp.ClosePR(context.Background(), "acme/release", prs[ids[1]]); err != nil {
		t.Fatal(err)
	}
	r0 := e.Wait(ids[0], 45*time.Second)
	r1 := e.Wait(ids[1], 45*time.Second)
	if d := time.Since(start); d > 45*time.Second {
		t.Errorf("woken after %s: that is the poll, not the webhook", d)
	}
	st0 := ctltest.Step(r0, "s", "update")
	if r0.Status != pipelines.StSucceeded || st0.Outputs["commitId"] != merged.MergeSHA ||
		!strings.HasPrefix(st0.WakeReason, fmt.Sprintf("event pr:github:acme/release#%d", prs[ids[0]])) {
		t.Errorf("merged: %s %s wake %q outputs %v", r0.Status, r0.Error, st0.WakeReason, st0.Outputs)
	}
	st1 := ctltest.Step(r1, "s", "update")
	if r1.Status != pipelines.StFailed || !strings.Contains(r1.Error, "was closed without being merged") ||
		!strings.HasPrefix(st1.WakeReason, "event pr:github:") {
		t.Errorf("closed: %s %s wake %q", r1.Status, r1.Error, st1.WakeReason)
	}
	if n := e.scmCount(); n < 2 {
		t.Errorf("PRFLOW_SCM holds %d events; the forge's webhooks did not go through it", n)
	}
	e.noSecrets(hookSecret, scmtest.DefaultToken)
}

// TestLoadWebhooks: the webhooks file resolves env:/file: secrets and names file:line:field on
// errors, never the secret.
func TestLoadWebhooks(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PRFLOW_TEST_HOOK", hookSecret)
	if err := os.WriteFile(filepath.Join(dir, "gl.secret"), []byte(hookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(good, []byte("webhooks:\n  - provider: github\n    secret: env:PRFLOW_TEST_HOOK\n  - provider: gitlab\n    secret: file:gl.secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := controller.LoadWebhooks(good)
	if err != nil || fmt.Sprint(w.Providers()) != "[github gitlab]" {
		t.Fatalf("good file: %v %v", w, err)
	}
	if s := fmt.Sprintf("%v %+v %#v", w, w, w); strings.Contains(s, hookSecret) {
		t.Errorf("printing the config shows the secret: %s", s)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("webhooks:\n  - provider: gitea\n    secret: env:X\n  - provider: github\n    secret: "+hookSecret+"\n  - provider: gitlab\n    secret: env:PRFLOW_TEST_UNSET_VAR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = controller.LoadWebhooks(bad)
	msg := fmt.Sprint(err)
	for _, want := range []string{"bad.yaml:2:15: webhooks[0].provider", "bad.yaml:5:13: webhooks[1].secret: want env:NAME or file:PATH",
		"bad.yaml:7:13: webhooks[2].secret: environment variable PRFLOW_TEST_UNSET_VAR"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, hookSecret) {
		t.Errorf("the error shows the secret: %s", msg)
	}
	// Every problem at once, each at its line and column: an unknown key, a value of the
	// wrong kind, a budget below the body limit.
	if err := os.WriteFile(bad, []byte("webhooks:\n  - provider: github\n    secret: env:PRFLOW_TEST_HOOK\n    secrets: env:X\nmaxBody: lots\nreadBudget: 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = controller.LoadWebhooks(bad)
	want := bad + ":4:5: webhooks[0].secrets: unknown field (did you mean \"secret\"?); known fields: provider, secret\n" +
		bad + ":5:10: maxBody: want a whole number, got \"lots\"\n" +
		bad + ":6:13: readBudget: 10 is less than the 26214400 byte body limit (maxBody): no delivery at the limit could ever be read"
	if fmt.Sprint(err) != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// TestMergePRWokenByStatusWebhook: MergePR parked on a PR that required checks block wakes
// when the forge's status webhook for the PR's head arrives (its poll is 30 s: the test ends
// before), then merges.
func TestMergePRWokenByStatusWebhook(t *testing.T) {
	t.Parallel()
	gh, ghp := newGitHub(t, map[string]map[string]string{"release": {"envs/prod/config.json": "{\n  \"replicas\": 2\n}\n"}})
	if err := gh.SetRequiredStatusChecks("acme", "release", "main", "ci/build"); err != nil {
		t.Fatal(err)
	}
	e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"release": ghp}}, []string{scmtest.DefaultToken}, nil, 0)
	src := `
name: checked
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json,
               variables: [{name: replicas, type: Number, value: "4"}]}
      - {id: merge, type: MergePR, timeout: 10m}
`
	id := e.Start(src, nil).ID
	var head string
	deadline := time.Now().Add(30 * time.Second)
	for head == "" {
		cur, _ := e.Ctl.Get(context.Background(), id)
		if st := ctltest.Step(cur, "s", "merge"); st.Status == pipelines.StWaiting {
			if st.Wait.Poll < 30*time.Second {
				t.Fatalf("MergePR polls every %s; the test needs a slow poll", st.Wait.Poll)
			}
			head, _ = ctltest.Step(cur, "s", "update").Outputs["commitId"].(string)
		}
		if time.Now().After(deadline) {
			t.Fatalf("MergePR did not park on the blocked PR: %+v", ctltest.Step(cur, "s", "merge"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := ghp.SetStatus(context.Background(), "acme/release", head, scm.Status{Context: "ci/build", State: scm.StatusSuccess}); err != nil {
		t.Fatal(err)
	}
	// GitHub's `status` webhook for that commit.
	body, _ := json.Marshal(map[string]any{"id": 1, "sha": head, "name": "acme/release", "context": "ci/build", "state": "success",
		"target_url": nil, "description": nil, "branches": []any{}, "repository": map[string]any{"full_name": "acme/release", "name": "release"},
		"sender": map[string]any{"login": "ci-bot"}})
	req := e.forgeHook("github", body, map[string]string{"X-GitHub-Event": "status", "X-GitHub-Delivery": "status-delivery-1",
		"X-Hub-Signature-256": "sha256=" + hmacHex(hookSecret, body)})
	if code, resp := e.post(req); code != http.StatusAccepted {
		t.Fatalf("status webhook: HTTP %d %s", code, resp)
	}
	r := e.Wait(id, 25*time.Second)
	merge := ctltest.Step(r, "s", "merge")
	if r.Status != pipelines.StSucceeded || !strings.HasPrefix(merge.WakeReason, "event commit:github:acme/release@"+head[:12]) {
		t.Fatalf("run %s %s; merge woken by %q after %s", r.Status, r.Error, merge.WakeReason, time.Since(start))
	}
	if pr, _ := gh.PullRequest("acme", "release", int(ctltest.Step(r, "s", "update").Outputs["prNumber"].(float64))); pr.State != scmtest.PRMerged {
		t.Errorf("release PR is %s", pr.State)
	}
}

// TestLoadTriggerDir: --pipelines DIR keeps the files with triggers and reports every broken
// file with file:line:field.
func TestLoadTriggerDir(t *testing.T) {
	dir := t.TempDir()
	src, err := examples.FS.ReadFile("pipelines/on-merge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := examples.FS.ReadFile("pipelines/hello.yaml")
	for name, body := range map[string][]byte{"on-merge.yaml": src, "hello.yaml": plain, "notes.txt": []byte("not a pipeline")} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := controller.LoadTriggerDir(dir, steps.Default)
	if err != nil || len(ts.Pipelines) != 1 || ts.Pipelines[0].Name != "on-merge" || ts.Pipelines[0].Triggers[0].Connector != "app" {
		t.Fatalf("got %+v, %v", ts, err)
	}
	bad := strings.Replace(string(src), "actions: [merged]", "actions: [merged, reopend]", 1)
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = controller.LoadTriggerDir(dir, steps.Default)
	if err == nil || !strings.Contains(err.Error(), "broken.yaml:") || !strings.Contains(err.Error(), `triggers[0].pullRequest.actions[1]: unknown action "reopend"`) {
		t.Fatalf("broken file: %v", err)
	}
}

var pushTrigger = `name: on-push
inputs:
  sha: {type: string, required: true}
triggers:
  - name: web
    push:
      provider: github
      repo: acme/web
      branches: [main, "release/*"]
      paths: ["services/web/**"]
    inputs:
      sha: ${{ event.after }}
` + echoStage("sha")

// bigPush is a push of n commits, each touching ten files of its own, the last one also
// services/web/app.go: GitHub lists up to 2,048 commits in one push payload.
func bigPush(n int, after string) scmtest.PushEvent {
	ev := scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/main", Before: strings.Repeat("a", 40), After: after, Pusher: "jdoe"}
	for i := range n {
		c := scmtest.PushCommit{Commit: scmtest.Commit{SHA: fmt.Sprintf("%040x", i+1), Message: "generated change"}}
		for j := range 10 {
			c.Modified = append(c.Modified, fmt.Sprintf("platform/generated/tenants/tenant-%05d/overlays/values-%02d.yaml", i, j))
		}
		if i == n-1 {
			c.Modified = append(c.Modified, "services/web/app.go")
		}
		ev.Commits = append(ev.Commits, c)
	}
	return ev
}

// TestWebhookLargePush: a real-sized push (2,048 commits, a body over 1 MiB and a normalised
// event over NATS's max payload) is accepted under the default limit, kept in the object store
// and starts its run; its redelivery is a duplicate.
func TestWebhookLargePush(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, map[string][]byte{"push.yaml": []byte(pushTrigger)}, 0)
	after := strings.Repeat("b", 40)
	req, err := scmtest.GitHubWebhookRequest(context.Background(), e.srv.URL+"/hooks/github", hookSecret, bigPush(2048, after))
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength <= 1<<20 {
		t.Fatalf("body of %d bytes: the test wants one over the old 1 MiB limit", req.ContentLength)
	}
	again := replayable(t, req)
	code, resp := e.post(again())
	if code != http.StatusAccepted || !strings.Contains(resp, `"queued"`) {
		t.Fatalf("large push: HTTP %d %s", code, resp)
	}
	msg := firstSCM(t, e)
	if int64(len(msg)) >= e.Conn.NC.MaxPayload() {
		t.Fatalf("PRFLOW_SCM message of %d bytes", len(msg))
	}
	var stub scm.Event
	if err := json.Unmarshal(msg, &stub); err != nil || stub.StoredAs == "" || len(stub.Changed) != 0 {
		t.Fatalf("message is not a stub naming the stored event: %v %.200s", err, msg)
	}
	store, err := e.Conn.JS.ObjectStore(context.Background(), controller.WebhookStore)
	if err != nil {
		t.Fatal(err)
	}
	info, err := store.GetInfo(context.Background(), stub.StoredAs)
	if err != nil || int64(info.Size) <= e.Conn.NC.MaxPayload() {
		t.Fatalf("stored event: %+v %v", info, err)
	}
	runs := e.waitTriggered(1)
	if runs[0].Inputs["sha"] != after {
		t.Errorf("run inputs %v, want sha %s", runs[0].Inputs, after)
	}
	if code, resp := e.post(again()); code != http.StatusAccepted || !strings.Contains(resp, `"duplicate"`) {
		t.Fatalf("redelivery: HTTP %d %s", code, resp)
	}
	if r := e.Wait(runs[0].ID, 30*time.Second); r.Status != pipelines.StSucceeded {
		t.Fatalf("run: %s %s", r.Status, r.Error)
	}
}

// TestWebhookBranchDeletionDoesNotTrigger: deleting release/1.4 is a push with after = zeros;
// the push trigger on release/* does not fire, the next real push does.
func TestWebhookBranchDeletionDoesNotTrigger(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, map[string][]byte{"push.yaml": []byte(pushTrigger)}, 0)
	url := e.srv.URL + "/hooks/github"
	del := scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/release/1.4", Before: strings.Repeat("c", 40), Pusher: "jdoe"}
	push := bigPush(1, strings.Repeat("d", 40))
	push.Ref = "refs/heads/release/1.5"
	for _, ev := range []scmtest.PushEvent{del, push} {
		req, err := scmtest.GitHubWebhookRequest(context.Background(), url, hookSecret, ev)
		if err != nil {
			t.Fatal(err)
		}
		if code, resp := e.post(req); code != http.StatusAccepted || !strings.Contains(resp, `"queued"`) {
			t.Fatalf("%s: HTTP %d %s", ev.Ref, code, resp)
		}
	}
	runs := e.waitTriggered(1)
	time.Sleep(200 * time.Millisecond) // events are handled in order; a second run would be there
	if runs = e.triggeredRuns(); len(runs) != 1 || runs[0].Inputs["sha"] != push.After {
		for _, r := range runs {
			t.Logf("run %s inputs %v", r.ID, r.Inputs)
		}
		t.Fatalf("%d runs, want 1 from the push to release/1.5", len(runs))
	}
}

// TestGitLabWebhookDedupe: GitLab's Idempotency-Key stays the same across retries of one
// delivery while X-Gitlab-Event-UUID may not; one UUID may be shared by different events (an
// MR merge and the push it made). Retries are duplicates; different events are all queued.
func TestGitLabWebhookDedupe(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, nil, 0)
	url := e.srv.URL + "/hooks/gitlab"
	ctx := context.Background()
	push := bigPush(1, strings.Repeat("e", 40))
	mr := scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: scmtest.PullRequest{Number: 4, Title: "t",
		Head: "feat", Base: "main", HeadSHA: strings.Repeat("f", 40), State: scmtest.PRMerged, MergeCommitSHA: push.After}}
	send := func(ev scmtest.WebhookEvent, uuid, key string) string {
		t.Helper()
		req, err := scmtest.GitLabWebhookRequest(ctx, url, hookSecret, ev)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Gitlab-Event-UUID", uuid)
		if key == "" {
			req.Header.Del("Idempotency-Key")
		} else {
			req.Header.Set("Idempotency-Key", key)
		}
		code, resp := e.post(req)
		if code != http.StatusAccepted {
			t.Fatalf("HTTP %d %s", code, resp)
		}
		var r struct{ Status string }
		_ = json.Unmarshal([]byte(resp), &r)
		return r.Status
	}
	steps := []struct {
		what      string
		ev        scmtest.WebhookEvent
		uuid, key string
		want      string
	}{
		{"MR merged", mr, "uuid-1", "", "queued"},
		{"push sharing the MR's event UUID", push, "uuid-1", "", "queued"},
		{"push with an idempotency key", push, "uuid-2", "key-1", "queued"},
		{"its retry: new UUID, same key", push, "uuid-3", "key-1", "duplicate"},
		{"an MR event reusing that key", mr, "uuid-4", "key-1", "queued"},
		{"the same UUID again without a key", push, "uuid-1", "", "duplicate"},
	}
	for _, s := range steps {
		if got := send(s.ev, s.uuid, s.key); got != s.want {
			t.Errorf("%s: %s, want %s", s.what, got, s.want)
		}
	}
	if n := e.scmCount(); n != 4 {
		t.Errorf("PRFLOW_SCM holds %d events, want 4", n)
	}
}

var readyTrigger = `name: on-ready
inputs:
  branch: {type: string, required: true}
triggers:
  - name: ready
    pullRequest:
      repo: acme/web
      actions: [opened, ready_for_review]
      branches: [main]
    if: ${{ !event.pr.draft }}
    inputs:
      branch: ${{ event.pr.headBranch }}
` + echoStage("branch")

// TestWebhookDraftMarkedReady: a PR opened as a draft starts nothing; marking it ready does
// (GitHub: action ready_for_review; GitLab: an update whose changes clear the draft flag).
func TestWebhookDraftMarkedReady(t *testing.T) {
	t.Parallel()
	for _, forge := range []struct {
		name  string
		build func(context.Context, string, string, scmtest.WebhookEvent) (*http.Request, error)
	}{{"github", scmtest.GitHubWebhookRequest}, {"gitlab", scmtest.GitLabWebhookRequest}} {
		t.Run(forge.name, func(t *testing.T) {
			e := newHookEnv(t, nil, nil, map[string][]byte{"ready.yaml": []byte(readyTrigger)}, 0)
			pr := scmtest.PullRequest{Number: 9, Title: "checkout v2", Head: "feature/checkout-v2", Base: "main",
				HeadSHA: strings.Repeat("9", 40), State: scmtest.PROpen, Draft: true, Author: "jdoe"}
			send := func(action string, pr scmtest.PullRequest) {
				t.Helper()
				req, err := forge.build(context.Background(), e.srv.URL+"/hooks/"+forge.name, hookSecret,
					scmtest.PREvent{Action: action, Owner: "acme", Name: "web", PR: pr})
				if err != nil {
					t.Fatal(err)
				}
				if code, resp := e.post(req); code != http.StatusAccepted || !strings.Contains(resp, `"queued"`) {
					t.Fatalf("%s: HTTP %d %s", action, code, resp)
				}
			}
			send("opened", pr)
			pr.Draft = false
			send("ready_for_review", pr)
			runs := e.waitTriggered(1)
			time.Sleep(200 * time.Millisecond) // events are handled in order; a run for the draft would be there
			if runs = e.triggeredRuns(); len(runs) != 1 || runs[0].Inputs["branch"] != "feature/checkout-v2" || runs[0].Trigger.Action != "ready_for_review" {
				for _, r := range runs {
					t.Logf("run %s trigger %+v inputs %v", r.ID, r.Trigger, r.Inputs)
				}
				t.Fatalf("%d runs, want 1 started by ready_for_review", len(runs))
			}
		})
	}
}

var anyBranchTrigger = `name: on-any-push
inputs:
  branch: {type: string, required: true}
triggers:
  - name: any
    push:
      provider: bitbucket
      repo: acme/deploy
      deleted: true
    inputs:
      branch: ${{ event.branch }}
` + echoStage("branch")

// TestBitbucketPushSeveralBranches: one Bitbucket delivery whose push moves three branches
// (and a tag) starts one run per branch, not only the first; the answer lists each event.
// Redelivering it (same X-Request-UUID) queues nothing and starts nothing new.
func TestBitbucketPushSeveralBranches(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, map[string][]byte{"push.yaml": []byte(anyBranchTrigger)}, 0)
	body := readFile(t, "../../scm/bitbucket/testdata/push_several_branches.json")
	send := func() hookAnswer {
		t.Helper()
		code, resp := e.post(e.forgeHook("bitbucket", body, map[string]string{"X-Event-Key": "repo:push",
			"X-Request-UUID": "6c1e2d3f-4a5b-4c6d-8e7f-901a2b3c4d5e", "X-Hub-Signature": "sha256=" + hmacHex(hookSecret, body)}))
		if code != http.StatusAccepted {
			t.Fatalf("HTTP %d %s", code, resp)
		}
		var a hookAnswer
		if err := json.Unmarshal([]byte(resp), &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := send()
	if a.Status != "queued" || len(a.Events) != 3 {
		t.Fatalf("answer %+v, want 3 queued events", a)
	}
	e.waitTriggered(3)
	time.Sleep(200 * time.Millisecond) // a fourth run would be there by now
	again := send()
	if again.Status != "duplicate" || len(again.Events) != 3 {
		t.Errorf("redelivery: %+v, want 3 duplicates", again)
	}
	time.Sleep(200 * time.Millisecond)
	if branches := e.triggeredInputs("branch"); branches != "[main old-feature release/2.0]" {
		t.Errorf("runs for branches %v, want main, old-feature and release/2.0", branches)
	}
	if n := e.scmCount(); n != 3 {
		t.Errorf("PRFLOW_SCM holds %d events, want 3", n)
	}
}

// hookAnswer is what /hooks/* answers.
type hookAnswer struct {
	Status string
	Events []struct{ Kind, Branch, Action, Label, Status string }
}

var labeledTrigger = `name: on-label
inputs:
  what: {type: string, required: true}
triggers:
  - name: deploy-label
    pullRequest:
      repo: platform/gitops/deploy
      actions: [labeled]
    if: ${{ event.label == 'deploy' }}
    inputs:
      what: ${{ event.action + ':' + event.label }}
  - name: pushed
    pullRequest:
      repo: platform/gitops/deploy
      actions: [synchronized]
    inputs:
      what: ${{ event.action }}
` + echoStage("what")

// TestGitLabMRUpdateWithCommitsAndLabel: one GitLab update hook carries new commits, labels
// added and removed and a title edit. A labeled trigger fires (it did not when the update
// gave only synchronized), and so does a synchronized one; each once.
func TestGitLabMRUpdateWithCommitsAndLabel(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, map[string][]byte{"label.yaml": []byte(labeledTrigger)}, 0)
	body := readFile(t, "../../scm/gitlab/testdata/merge_request_update_several.json")
	code, resp := e.post(e.forgeHook("gitlab", body, map[string]string{"X-Gitlab-Event": "Merge Request Hook",
		"X-Gitlab-Event-UUID": "3c2b1a09-8f7e-4d6c-b5a4-93827160f5e4", "X-Gitlab-Token": hookSecret}))
	var a hookAnswer
	if code != http.StatusAccepted || json.Unmarshal([]byte(resp), &a) != nil || len(a.Events) != 5 {
		t.Fatalf("HTTP %d %s, want 5 events", code, resp)
	}
	e.waitTriggered(2)
	time.Sleep(200 * time.Millisecond) // a third run would be there by now
	if got := e.triggeredInputs("what"); got != "[labeled:deploy synchronized]" {
		t.Errorf("runs %v, want one for the deploy label and one for the new commits", got)
	}
}

var pushPathsTrigger = `name: on-web-push
inputs:
  sha: {type: string, required: true}
triggers:
  - name: web
    connector: app
    push:
      repo: acme/web
      branches: [main]
      paths: ["services/web/**"]
    inputs:
      sha: ${{ event.after }}
` + echoStage("sha")

// TestPushPathsIncompletePayload: a Bitbucket push lists no files and a GitLab push of 25
// commits lists the newest 20 only; the one commit that touches services/web is the oldest.
// Before, the path trigger never fired on Bitbucket and missed the GitLab push. Now the run's
// first job compares before..after through the connector on a worker (the forge fake's
// compare API): it matches and the run succeeds; a push touching only docs ends skipped.
func TestPushPathsIncompletePayload(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"gitlab", "bitbucket"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each forge has its own fake and prflow
			_, p, build := newForge(t, kind, map[string]string{"README.md": "v1\n"})
			e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"app": p}}, []string{scmtest.DefaultToken},
				map[string][]byte{"push.yaml": []byte(pushPathsTrigger)}, 0)
			ctx := context.Background()
			main, err := p.Branch(ctx, "acme/web", "main")
			if err != nil {
				t.Fatal(err)
			}
			// 25 commits on a side branch; only the first touches services/web.
			var commits []scmtest.PushCommit
			parent := main.SHA
			for i := range 25 {
				path := fmt.Sprintf("docs/page%02d.md", i)
				if i == 0 {
					path = "services/web/app.go"
				}
				sha, err := p.Commit(ctx, "acme/web", scm.CommitInput{Branch: "feature", Parent: parent, Message: "change " + path,
					Changes: []scm.FileChange{{Path: path, Content: []byte("x\n")}}})
				if err != nil {
					t.Fatal(err)
				}
				commits = append(commits, scmtest.PushCommit{Commit: scmtest.Commit{SHA: sha, Message: "change " + path}, Added: []string{path}})
				parent = sha
			}
			docsOnly, err := p.Commit(ctx, "acme/web", scm.CommitInput{Branch: "docs", Parent: main.SHA, Message: "docs",
				Changes: []scm.FileChange{{Path: "docs/only.md", Content: []byte("x\n")}}})
			if err != nil {
				t.Fatal(err)
			}
			url := e.srv.URL + "/hooks/" + kind
			send := func(after string, commits []scmtest.PushCommit) {
				t.Helper()
				req, err := build(ctx, url, hookSecret, scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/main",
					Before: main.SHA, After: after, Commits: commits, TotalCommits: len(commits), Pusher: "jdoe"})
				if err != nil {
					t.Fatal(err)
				}
				if code, body := e.post(req); code != http.StatusAccepted || !strings.Contains(body, `"queued"`) {
					t.Fatalf("push: HTTP %d %s", code, body)
				}
			}
			send(parent, commits)
			runs := e.waitTriggered(1)
			r := e.Wait(runs[0].ID, 60*time.Second)
			pc := r.Trigger.PathCheck
			if r.Status != pipelines.StSucceeded || pc == nil || pc.Outputs["matched"] != true || fmt.Sprint(pc.Outputs["files"]) != "[services/web/app.go]" {
				t.Fatalf("run: %s %q, path check %+v\n%s", r.Status, r.Error, pc, e.Logs.String())
			}
			if n := e.jobsOfType(steps.TypeTriggerPaths); n != 1 {
				t.Errorf("%d path check jobs, want 1", n)
			}

			send(docsOnly, []scmtest.PushCommit{{Commit: scmtest.Commit{SHA: docsOnly, Message: "docs"}, Added: []string{"docs/only.md"}}})
			if kind == "gitlab" {
				// GitLab listed this push whole: decided at once, no run.
				time.Sleep(500 * time.Millisecond)
				if n := len(e.triggeredRuns()); n != 1 {
					t.Fatalf("%d runs, want none for a push listing only docs", n-1)
				}
			} else {
				var skipped *pipelines.Run
				for _, x := range e.waitTriggered(2) {
					if x.ID != r.ID {
						skipped = e.Wait(x.ID, 60*time.Second)
					}
				}
				want := "no changed file of the push " + main.SHA[:12] + ".." + docsOnly[:12] + " matches paths [services/web/**]"
				if skipped.Status != pipelines.StSkipped || skipped.Error != want {
					t.Errorf("docs-only push: %s %q, want skipped %q", skipped.Status, skipped.Error, want)
				}
			}
			e.noSecrets(hookSecret, scmtest.DefaultToken)
		})
	}
}
