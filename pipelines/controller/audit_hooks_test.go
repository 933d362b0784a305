package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// auditMessages is every message of the audit stream, raw, with its headers.
func auditMessages(t *testing.T, e *hookEnv) []string {
	t.Helper()
	ctx := context.Background()
	s, err := e.Conn.JS.Stream(ctx, audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %v %s", m.Subject, m.Header, m.Data))
	}
	return out
}

// waitEntries waits until the audit log holds want entries matching f.
func waitEntries(t *testing.T, l *audit.Log, f audit.Filter, want int) []audit.Entry {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := l.Query(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= want {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d audit entries for %+v, want %d: %+v", len(got), f, want, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAuditWebhooks: every webhook refused before queueing is a webhook.rejected entry (forge,
// delivery id, remote, why) and every accepted event one webhook.accepted entry (forge and
// sender, delivery, remote, what it was about, the runs it started or "no trigger matched"),
// once, also when the forge redelivers it or the controller handles it again. No secret,
// signature or guessed token reaches the stream.
func TestAuditWebhooks(t *testing.T) {
	t.Parallel()
	gh, ghp := newGitHub(t, map[string]map[string]string{"web": {"src/app.txt": "v1\n"}})
	e := newHookEnv(t, map[string]any{steps.ServiceSCM: connector.Static{"app": ghp}}, []string{scmtest.DefaultToken},
		map[string][]byte{"hello.yaml": []byte(noopTrigger)}, 64<<10, func(o *ctltest.Options) { o.Audit = true })
	log := &audit.Log{JS: e.Conn.JS}
	ctx := context.Background()
	url := e.srv.URL + "/hooks/github"
	pr := mergedPR(t, gh.Forge, ghp)
	ev := scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web", PR: pr, Sender: "octocat"}

	const guess = "guessed-hook-secret-9876543210"
	forged, _ := scmtest.GitHubWebhookRequest(ctx, url, guess, ev)
	forgedSig, forgedDelivery := forged.Header.Get("X-Hub-Signature-256"), forged.Header.Get("X-GitHub-Delivery")
	glForged, _ := scmtest.GitLabWebhookRequest(ctx, e.srv.URL+"/hooks/gitlab", guess, ev)
	huge, _ := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, scmtest.PREvent{Action: "closed", Owner: "acme", Name: "web",
		PR: func() scmtest.PullRequest { p := pr; p.Body = strings.Repeat("x", 100<<10); return p }()})
	for _, tc := range []struct {
		req  *http.Request
		code int
	}{{forged, 401}, {glForged, 401}, {huge, 413}} {
		if code, body := e.post(tc.req); code != tc.code {
			t.Fatalf("%s: HTTP %d %s, want %d", tc.req.URL.Path, code, body, tc.code)
		}
	}

	good, _ := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, ev)
	goodSig, goodDelivery := good.Header.Get("X-Hub-Signature-256"), good.Header.Get("X-GitHub-Delivery")
	again := replayable(t, good)
	if code, body := e.post(again()); code != http.StatusAccepted {
		t.Fatalf("good delivery: HTTP %d %s", code, body)
	}
	runs := e.waitTriggered(1)
	if code, body := e.post(again()); code != http.StatusAccepted || !strings.Contains(body, "duplicate") {
		t.Fatalf("redelivery: HTTP %d %s", code, body)
	}
	push := scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/dev", Before: strings.Repeat("1", 40), After: strings.Repeat("2", 40)}
	pushReq, _ := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, push)
	if code, body := e.post(pushReq); code != http.StatusAccepted {
		t.Fatalf("push: HTTP %d %s", code, body)
	}
	waitEntries(t, log, audit.Filter{Actions: []string{audit.WebhookAccepted}}, 2)
	// The controller handles the PR event again (a redelivery from PRFLOW_SCM): no new entry.
	sev := firstSCMEvent(t, e)
	if err := e.Ctl.HandleSCMEvent(ctx, &sev); err != nil {
		t.Fatal(err)
	}

	all := waitEntries(t, log, audit.Filter{Actions: []string{"webhook.*"}}, 5)
	if len(all) != 5 {
		t.Fatalf("want 3 rejected and 2 accepted webhook entries, got %d: %+v", len(all), all)
	}
	rej, acc := all[:3], all[3:]
	for i, want := range []struct{ actor, delivery, detail string }{
		{"webhook:github", forgedDelivery, "signature missing or invalid (HTTP 401)"},
		{"webhook:gitlab", "", "signature missing or invalid (HTTP 401)"},
		{"webhook:github", huge.Header.Get("X-GitHub-Delivery"), "body too large (HTTP 413)"},
	} {
		r := rej[i]
		if r.Action != audit.WebhookRejected || r.Actor != want.actor || r.Detail != want.detail || !strings.HasPrefix(r.Remote, "127.0.0.1:") ||
			r.Time.IsZero() || (want.delivery != "" && r.Delivery != want.delivery) || len(r.Runs) != 0 {
			t.Errorf("rejected entry %d: %+v, want %+v", i, r, want)
		}
	}
	if rej[1].Delivery == "" {
		t.Errorf("the GitLab rejection has no delivery id: %+v", rej[1])
	}
	pa := acc[0]
	if pa.Action != audit.WebhookAccepted || pa.Actor != "webhook:github:octocat" || pa.Delivery != goodDelivery ||
		!strings.HasPrefix(pa.Remote, "127.0.0.1:") || !slices.Equal(pa.Runs, []string{runs[0].ID}) ||
		!strings.Contains(pa.Detail, fmt.Sprintf("pull request acme/web#%d merged (feature into main)", pr.Number)) ||
		!strings.HasSuffix(pa.Detail, ": started "+runs[0].ID) {
		t.Errorf("accepted PR entry: %+v (run %s)", pa, runs[0].ID)
	}
	pu := acc[1]
	if pu.Action != audit.WebhookAccepted || !strings.HasPrefix(pu.Actor, "webhook:github") || len(pu.Runs) != 0 ||
		!strings.Contains(pu.Detail, "push to acme/web branch dev at 222222222222") || !strings.HasSuffix(pu.Detail, ": no trigger matched") {
		t.Errorf("accepted push entry: %+v", pu)
	}
	// The run's own entry says where the webhook came from; filtering by the run finds both.
	byRun, err := log.Query(ctx, audit.Filter{Run: runs[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(byRun) != 2 || byRun[0].Action != audit.RunStarted || byRun[0].Actor != "webhook:github:octocat" ||
		byRun[0].Remote != pa.Remote || byRun[1].Action != audit.WebhookAccepted {
		t.Errorf("entries of run %s: %+v", runs[0].ID, byRun)
	}
	if got, _ := log.Query(ctx, audit.Filter{Remote: "127.0.0.1"}); len(got) != 6 {
		t.Errorf("entries from 127.0.0.1: %d, want 6 (5 webhook, 1 run.started)", len(got))
	}
	msgs := auditMessages(t, e)
	if len(msgs) != 6 {
		t.Errorf("the audit stream holds %d messages, want 6:\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
	for _, m := range msgs {
		for name, secret := range map[string]string{"webhook secret": hookSecret, "guessed secret": guess, "forged signature": forgedSig,
			"signature": goodSig, "forge token": scmtest.DefaultToken, "body": strings.Repeat("x", 64)} {
			if strings.Contains(m, secret) || strings.Contains(m, strings.TrimPrefix(secret, "sha256=")) {
				t.Errorf("audit message holds the %s: %s", name, m)
			}
		}
	}
	e.noSecrets(hookSecret, guess, scmtest.DefaultToken)
}

// firstSCMEvent is the first event PRFLOW_SCM holds, decoded.
func firstSCMEvent(t *testing.T, e *hookEnv) scm.Event {
	t.Helper()
	var ev scm.Event
	if err := json.Unmarshal(firstSCM(t, e), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

var failingTrigger = `name: labels
inputs:
  label: {type: string, required: true}
triggers:
  - name: first-label
    pullRequest:
      repo: acme/web
      actions: [opened]
    inputs:
      label: ${{ event.pr.labels[0] }}
  - name: any
    pullRequest:
      repo: acme/web
      actions: [opened]
    inputs:
      label: none
` + echoStage("label")

// TestAuditTriggerExpressionFailed: a trigger whose input expression fails on the event (the
// PR has no label) starts no run; that is recorded on the event's webhook.accepted entry with
// the pipeline, trigger, file:line and the error, next to the run the other trigger started.
// The event is not retried (the error would be the same) and no secret is recorded.
func TestAuditTriggerExpressionFailed(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, map[string][]byte{"labels.yaml": []byte(failingTrigger)}, 0, func(o *ctltest.Options) { o.Audit = true })
	log := &audit.Log{JS: e.Conn.JS}
	ctx := context.Background()
	pr := scmtest.PullRequest{Number: 12, Title: "t", Head: "feat", Base: "main", HeadSHA: strings.Repeat("a", 40), State: scmtest.PROpen}
	req, err := scmtest.GitHubWebhookRequest(ctx, e.srv.URL+"/hooks/github", hookSecret, scmtest.PREvent{Action: "opened", Owner: "acme", Name: "web", PR: pr, Sender: "octocat"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.post(req); code != http.StatusAccepted {
		t.Fatalf("HTTP %d %s", code, body)
	}
	runs := e.waitTriggered(1)
	got := waitEntries(t, log, audit.Filter{Actions: []string{audit.WebhookAccepted}}, 1)
	if len(got) != 1 {
		t.Fatalf("entries %+v", got)
	}
	a := got[0]
	const wantErr = "pipeline labels trigger first-label started no run: labels.yaml:10: triggers[0].inputs.label: ${{ event.pr.labels[0] }} (offset 0): event.pr.labels[0]: index 0 out of range (length 0)"
	if len(a.Errors) != 1 || a.Errors[0] != wantErr {
		t.Errorf("errors %q\nwant [%q]", a.Errors, wantErr)
	}
	if !strings.Contains(a.Detail, "started "+runs[0].ID) || !strings.Contains(a.Detail, "1 trigger(s) failed") || len(a.Runs) != 1 {
		t.Errorf("detail %q, runs %v", a.Detail, a.Runs)
	}
	time.Sleep(300 * time.Millisecond) // a retry of the event would start or record more by now
	if n := len(e.triggeredRuns()); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
	if again, _ := log.Query(ctx, audit.Filter{Actions: []string{audit.WebhookAccepted}}); len(again) != 1 {
		t.Errorf("%d webhook.accepted entries, want 1", len(again))
	}
	if !strings.Contains(e.Logs.String(), "trigger expression failed") {
		t.Error("the failure is not logged")
	}
	e.noSecrets(hookSecret)
}

// TestAuditPathsOnPartialList: a new Bitbucket branch has no before commit to compare with
// and its webhook lists no files, so the push trigger's paths are decided on that (empty)
// list: no run, and the event's webhook.accepted entry and the log say the decision was made
// without the full list.
func TestAuditPathsOnPartialList(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, map[string][]byte{"push.yaml": []byte(pushPathsTrigger)}, 0, func(o *ctltest.Options) { o.Audit = true })
	log := &audit.Log{JS: e.Conn.JS}
	req, err := scmtest.BitbucketWebhookRequest(context.Background(), e.srv.URL+"/hooks/bitbucket", hookSecret,
		scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/main", After: strings.Repeat("4", 40), Pusher: "jdoe"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.post(req); code != http.StatusAccepted {
		t.Fatalf("HTTP %d %s", code, body)
	}
	got := waitEntries(t, log, audit.Filter{Actions: []string{audit.WebhookAccepted}}, 1)
	const want = "no trigger matched; pipeline on-web-push trigger web: paths no match on the 0 files the webhook listed, which may not be all the push changed"
	if len(got) != 1 || !strings.HasSuffix(got[0].Detail, want) {
		t.Fatalf("entries %+v, want detail ending %q", got, want)
	}
	if !strings.Contains(e.Logs.String(), "trigger paths decided on an incomplete file list") {
		t.Error("not logged")
	}
	if n := len(e.triggeredRuns()); n != 0 {
		t.Errorf("%d runs", n)
	}
}
