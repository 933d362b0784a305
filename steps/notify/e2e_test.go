package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
	"github.com/prflow/prflow/steps/notify"
)

// hook is a local HTTP receiver (Slack or webhook): it answers the programmed statuses first,
// then 200, keeps what it accepted, and checks the HMAC signature when it has a key.
type hook struct {
	mu       sync.Mutex
	fail     []int
	always   int // when set, every request gets it
	key      string
	accepted []map[string]any
	requests int
	badSig   int
	srv      *httptest.Server
}

func newHook(t *testing.T, key string) *hook {
	h := &hook{key: key}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.requests++
		if h.key != "" && r.Header.Get(notify.SignatureHeader) != notify.Sign(h.key, body) {
			h.badSig++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		code := http.StatusOK
		switch {
		case h.always != 0:
			code = h.always
		case len(h.fail) > 0:
			code, h.fail = h.fail[0], h.fail[1:]
		}
		if code == http.StatusOK {
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			h.accepted = append(h.accepted, m)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// program sets the statuses the next requests get (fail), or every request (always).
func (h *hook) program(always int, fail ...int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.always, h.fail = always, fail
}

func (h *hook) got() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.accepted)
}

func (h *hook) counts() (requests, badSig int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests, h.badSig
}

// wire records every message any client published on NATS (jobs, results, KV writes, logs):
// the test greps it for secrets.
type wire struct {
	mu   sync.Mutex
	msgs []string
}

func (w *wire) add(m *nats.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, m.Subject+" "+string(m.Data))
}

func (w *wire) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

type rig struct {
	e          *ctltest.Env
	slack, wh  *hook
	smtp       *notify.SMTPServer
	secrets    []string
	wire       *wire
	slackToken string
}

const (
	hmacKey  = "hmac-key-s3cr3t-0042"
	smtpPass = "smtp-pass-s3cr3t-0042"
)

func newRig(t *testing.T, attempts string, workers int) *rig {
	t.Helper()
	r := &rig{slack: newHook(t, ""), wh: newHook(t, hmacKey), smtp: notify.NewSMTPServer(t), wire: &wire{}}
	r.smtp.SetAuth("prflow", smtpPass)
	r.slackToken = "T000/B000/slacks3cr3tpath0042"
	vals := map[string]string{
		"SLACK_URL": r.slack.srv.URL + "/services/" + r.slackToken,
		"HOOK_URL":  r.wh.srv.URL + "/hooks/hooks3cr3tpath0042",
		"HOOK_KEY":  hmacKey,
		"SMTP_PASS": smtpPass,
	}
	src := `
channels:
  - {name: team, type: slack, url: env:SLACK_URL, attempts: ` + attempts + `}
  - {name: hook, type: webhook, url: env:HOOK_URL, secret: env:HOOK_KEY, attempts: ` + attempts + `}
  - name: mail
    type: email
    smtp: {address: "` + r.smtp.Addr + `", starttls: false, username: prflow, password: env:SMTP_PASS}
    from: prflow@example.com
    to: [dev@example.com]
    attempts: ` + attempts + `
`
	set, err := notify.Parse("notifiers.yaml", []byte(src), "", notify.WithLookup(func(k string) (string, bool) { v, ok := vals[k]; return v, ok }))
	if err != nil {
		t.Fatal(err)
	}
	r.secrets = set.Secrets()
	r.e = ctltest.New(t, ctltest.Options{Workers: workers, Services: map[string]any{steps.ServiceNotify: set}, Secrets: set.Secrets()})
	sub, err := r.e.Conn.NC.Subscribe(">", r.wire.add)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

// events lists "event stage" of what a receiver accepted, sorted.
func events(list []map[string]any, key string) []string {
	var out []string
	for _, m := range list {
		s := strOf(m[key])
		if st := strOf(m["stage"]); st != "" {
			s += " " + st
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func strOf(v any) string { s, _ := v.(string); return s }

// slackEvents reads the event names out of Slack texts ("prflow <event>: run …").
func slackEvents(list []map[string]any) []string {
	var out []string
	for _, m := range list {
		text := strOf(m["text"])
		ev, _, _ := strings.Cut(strings.TrimPrefix(text, "prflow "), ":")
		if i := strings.Index(text, ", stage "); i >= 0 {
			rest := text[i+len(", stage "):]
			ev += " " + strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == ',' })[0]
		}
		out = append(out, ev)
	}
	sort.Strings(out)
	return out
}

func mailEvents(ms []notify.Mail) []string {
	var out []string
	for _, m := range ms {
		for _, l := range strings.Split(m.Data, "\r\n") {
			if v, ok := strings.CutPrefix(l, "X-Prflow-Event: "); ok {
				out = append(out, v)
			}
		}
	}
	sort.Strings(out)
	return out
}

// until polls cond for up to d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

const e2ePipeline = `
name: notified
notifications:
  - on: [run.started, approval.waiting, stage.failed, run.failed]
    channel: team
  - on: [stage.succeeded, run.failed]
    stages: [build]
    channel: hook
  - on: run.failed
    channel: mail
stages:
  - id: build
    steps:
      - {id: compile, type: Noop}
  - id: gate
    steps:
      - {id: approve, type: Approval, with: {approvers: [alice]}}
`

// End to end: a run that starts, passes a stage, waits for an approval that is refused and
// fails sends exactly one message per matching event to each channel — Slack, a signed
// webhook and email — and no secret of any channel reaches NATS (jobs, results, KV, logs) or
// the logs; without --external-url no message carries a (relative) link to the run; a repeated notification job (a redelivery after a crash past the dedup window)
// sends nothing.
func TestNotificationsEndToEnd(t *testing.T) {
	r := newRig(t, "3", 2)
	run := r.e.Start(e2ePipeline, nil)
	until(t, 30*time.Second, "approval.waiting on slack", func() bool { return slices.Contains(slackEvents(r.slack.got()), "approval.waiting gate") })
	if err := r.e.Ctl.Signal(context.Background(), run.ID, "gate", "approve", steps.Signal{Kind: "approval", User: "alice", Approve: false, Comment: "not today", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	final := r.e.Wait(run.ID, 30*time.Second)
	if final.Status != pipelines.StFailed {
		t.Fatalf("run %s: %s", final.Status, final.Error)
	}
	wantSlack := []string{"approval.waiting gate", "run.failed", "run.started", "stage.failed gate"}
	wantHook := []string{"run.failed", "stage.succeeded build"}
	until(t, 30*time.Second, "all notifications", func() bool {
		return len(r.slack.got()) >= len(wantSlack) && len(r.wh.got()) >= len(wantHook) && len(r.smtp.Mails()) >= 1
	})
	time.Sleep(1500 * time.Millisecond) // anything doubled would arrive by now
	if got := slackEvents(r.slack.got()); !slices.Equal(got, wantSlack) {
		t.Errorf("slack got %q, want %q", got, wantSlack)
	}
	if got := events(r.wh.got(), "event"); !slices.Equal(got, wantHook) {
		t.Errorf("webhook got %q, want %q", got, wantHook)
	}
	if got := mailEvents(r.smtp.Mails()); !slices.Equal(got, []string{"run.failed"}) {
		t.Errorf("mail got %q, want one run.failed", got)
	}
	if _, bad := r.wh.counts(); bad != 0 {
		t.Errorf("%d webhook deliveries with a bad signature", bad)
	}
	for _, m := range r.wh.got() {
		if m["run"] != run.ID || m["pipeline"] != "notified" || m["url"] != nil || m["id"] == "" || m["status"] == "" {
			t.Errorf("webhook body %v", m)
		}
		if m["event"] == "run.failed" && !strings.Contains(strOf(m["message"]), "rejected by alice: not today") {
			t.Errorf("run.failed message %q", m["message"])
		}
	}
	if mail := r.smtp.Mails()[0]; mail.Auth != "prflow:"+smtpPass || strings.Contains(mail.Data, "/ui/runs/") {
		t.Errorf("mail %+v", mail)
	}
	if len(final.Warnings) != 0 {
		t.Errorf("warnings %q", final.Warnings)
	}

	// A redelivery after the dedup window: the same job again (new Nats-Msg-Id). The worker
	// finds it marked sent and sends nothing.
	key, err := queue.LoadResultKey(context.Background(), r.e.Conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	j := &envelope.Job{V: envelope.Version, Run: run.ID, Pipeline: "notified", Stage: pipelines.NotifyStage,
		Step: pipelines.NotifyStep(pipelines.EvRunFailed, "", "", "mail"), Type: steps.TypeNotify, Pool: pipelines.DefaultPool, Attempt: 1,
		Connectors: []string{steps.NotifyRoute("mail")}, Inputs: map[string]any{"channel": "mail", "event": pipelines.EvRunFailed, "status": "failed"}}
	j.Token = queue.JobToken(key, j.ID())
	data, _ := json.Marshal(j)
	skipped := strings.Count(r.e.Logs.String(), "notification already sent")
	if _, err := queue.Publish(context.Background(), r.e.Conn.JS, j.Subject(), data, "redelivery/"+j.ID(), 0); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "the repeated job to be taken", func() bool {
		return strings.Count(r.e.Logs.String(), "notification already sent") > skipped || len(r.smtp.Mails()) > 1
	})
	if n := len(r.smtp.Mails()); n != 1 {
		t.Errorf("%d mails after a redelivery, want 1", n)
	}

	// No secret anywhere: every NATS message any client sent, and every log line.
	for _, s := range append(slices.Clone(r.secrets), r.slackToken, "hooks3cr3tpath0042") {
		for _, m := range r.wire.all() {
			if strings.Contains(m, s) {
				t.Errorf("secret %q on NATS: %.300s", s, m)
				break
			}
		}
		if strings.Contains(r.e.Logs.String(), s) {
			t.Errorf("secret %q in the logs", s)
		}
	}
	if len(r.wire.all()) < 10 {
		t.Errorf("the wire recorded only %d messages", len(r.wire.all()))
	}
}

// succeeded runs a one-step pipeline that notifies channel on run.succeeded and waits for the
// run to succeed.
func (r *rig) succeeded(t *testing.T, name, channel string) *pipelines.Run {
	t.Helper()
	run := r.e.Start(`
name: `+name+`
notifications:
  - {on: [run.succeeded], channel: `+channel+`}
stages:
  - id: s
    steps: [{id: a, type: Noop}]
`, nil)
	if final := r.e.Wait(run.ID, 30*time.Second); final.Status != pipelines.StSucceeded {
		t.Fatalf("run %s", final.Status)
	}
	return run
}

// A receiver that fails twice (503) and then answers is retried with backoff and gets the
// notification once; the run has no warning.
func TestNotificationRetried(t *testing.T) {
	r := newRig(t, "4", 1)
	r.wh.program(0, 503, 503)
	run := r.succeeded(t, "retried", "hook")
	until(t, 30*time.Second, "the webhook", func() bool { return len(r.wh.got()) == 1 })
	time.Sleep(1500 * time.Millisecond)
	if req, _ := r.wh.counts(); req != 3 || len(r.wh.got()) != 1 {
		t.Errorf("%d requests, %d accepted; want 3 and 1", req, len(r.wh.got()))
	}
	cur, err := r.e.Ctl.Get(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Warnings) != 0 {
		t.Errorf("warnings %q", cur.Warnings)
	}
}

// A receiver that always fails: the notification is given up after the channel's attempts,
// the run still succeeds, and the failure is recorded on it as one warning (without the URL).
func TestNotificationGivenUp(t *testing.T) {
	r := newRig(t, "2", 1)
	r.slack.program(http.StatusBadGateway)
	run := r.succeeded(t, "given-up", "team")
	var cur *pipelines.Run
	until(t, 30*time.Second, "the warning", func() bool {
		var err error
		cur, err = r.e.Ctl.Get(context.Background(), run.ID)
		return err == nil && len(cur.Warnings) > 0
	})
	time.Sleep(time.Second)
	cur, _ = r.e.Ctl.Get(context.Background(), run.ID)
	if cur.Status != pipelines.StSucceeded || len(cur.Warnings) != 1 {
		t.Fatalf("status %s, warnings %q", cur.Status, cur.Warnings)
	}
	w := cur.Warnings[0]
	for _, want := range []string{"notification run.succeeded to channel team not sent", "gave up after 2 attempts", "502"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if strings.Contains(w, r.slackToken) || strings.Contains(w, r.slack.srv.URL) {
		t.Errorf("warning shows the URL: %q", w)
	}
	if req, _ := r.slack.counts(); req != 2 {
		t.Errorf("%d requests, want 2", req)
	}
}

// A pipeline naming a channel no live worker has is refused at start: nothing is stored or
// sent, and the error names the channel.
func TestUnknownChannelRefused(t *testing.T) {
	r := newRig(t, "2", 1)
	_, err := r.e.Ctl.Start(context.Background(), controller.StartRequest{File: "p.yaml", Executor: "tester", Source: []byte(`
name: refused
notifications:
  - {on: [run.started], channel: team}
  - {on: [run.failed], channel: pager}
stages:
  - id: s
    steps: [{id: a, type: Noop}]
`)})
	if !errors.Is(err, controller.ErrRefused) || !strings.Contains(err.Error(), `notification channel "pager"`) || strings.Contains(err.Error(), `"team"`) {
		t.Fatalf("start: %v", err)
	}
	runs, err := r.e.Ctl.Buckets().Runs.ListKeys(context.Background())
	if err == nil {
		for k := range runs.Keys() {
			t.Errorf("a run was stored: %s", k)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(r.slack.got()); n != 0 {
		t.Errorf("%d slack messages from a refused run", n)
	}
}
