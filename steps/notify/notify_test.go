package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/yamlconf"
)

func env(vals map[string]string) Option {
	return WithLookup(func(k string) (string, bool) { v, ok := vals[k]; return v, ok })
}

// Mistakes in a notifiers file are refused with the file, line and field, all at once; a
// secret written in plain text is refused, and no secret value is part of an error.
func TestParseErrors(t *testing.T) {
	const plainURL = "https://hooks.slack.com/services/T0/B0/plainsecretvalue"
	cases := []struct {
		name, src string
		want      []string
	}{
		{"plain URL", "channels:\n  - name: team\n    type: slack\n    url: " + plainURL + "\n", []string{"n.yaml:4:10: channels[0].url:", "env:NAME or file:PATH"}},
		{"unknown type", "channels:\n  - {name: team, type: teams, url: env:X}\n", []string{"n.yaml:2:", "unknown channel type \"teams\""}},
		{"typo field", "channels:\n  - name: team\n    type: slack\n    ulr: env:SLACK\n", []string{"n.yaml:4:5: channels[0].ulr: unknown field (did you mean \"url\"?)", "channels[0].url: required"}},
		{"field of another type", "channels:\n  - {name: hook, type: webhook, url: env:U, secret: env:K, to: [a@b.c]}\n", []string{"channels[0].to: not a field of a webhook channel"}},
		{"webhook without secret", "channels:\n  - {name: hook, type: webhook, url: env:U}\n", []string{"channels[0].secret: required"}},
		{"missing env", "channels:\n  - {name: team, type: slack, url: env:NOPE}\n", []string{"environment variable NOPE is not set"}},
		{"bad name", "channels:\n  - {name: 9team, type: slack, url: env:U}\n", []string{"channels[0].name: \"9team\""}},
		{"duplicate", "channels:\n  - {name: a, type: slack, url: env:U}\n  - {name: a, type: slack, url: env:U}\n", []string{"n.yaml:3:", "defined twice"}},
		{"attempts", "channels:\n  - {name: a, type: slack, url: env:U, attempts: 0}\n", []string{"channels[0].attempts: want a whole number from 1 to 20"}},
		{"email", "channels:\n  - name: mail\n    type: email\n    smtp: {address: nohostport, starttls: maybe, username: u}\n    from: not-an-address\n    to: []\n",
			[]string{"channels[0].smtp.address: want host:port", "channels[0].smtp.starttls: want true or false", "channels[0].smtp.password: required", "channels[0].from: \"not-an-address\" is not an email address", "channels[0].to: empty"}},
		{"not a list", "channels: {name: a}\n", []string{"want a list of channels"}},
		{"key set twice", "channels:\n  - name: a\n    type: slack\n    name: b\n    url: env:U\n", []string{"n.yaml:4:5: channels[0].name: set twice (first at line 2)"}},
		{"one recipient, not an address", "channels:\n  - {name: m, type: email, smtp: {address: h:25}, from: a@b.c, to: nobody}\n", []string{`n.yaml:2:68: channels[0].to[0]: "nobody" is not an email address`}},
		{"timeout not a duration", "channels:\n  - {name: a, type: slack, url: env:U, timeout: soon}\n", []string{`n.yaml:2:49: channels[0].timeout: want a duration such as 10s, got "soon"`}},
		{"syntax error", "channels:\n  - name: a\n   type: slack\n", []string{"n.yaml:3: YAML: "}},
		{"empty", "# none yet\n", []string{"n.yaml: empty file"}},
	}
	vals := map[string]string{"U": "https://example.com/u-secret-value", "K": "k-secret-value", "SLACK": "https://example.com/slack-secret"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("n.yaml", []byte(tc.src), t.TempDir(), env(vals))
			if err == nil {
				t.Fatal("parsed")
			}
			if le := (*yamlconf.Error)(nil); !errors.As(err, &le) || le.File != "n.yaml" {
				t.Errorf("not a *yamlconf.Error naming the file: %#v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
			for _, s := range []string{"plainsecretvalue", "u-secret-value", "k-secret-value", "slack-secret"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error shows a secret (%s): %q", s, err)
				}
			}
		})
	}
}

func TestParseAll(t *testing.T) {
	src := `
channels:
  - {name: team, type: slack, url: env:SLACK}
  - {name: hook, type: webhook, url: env:HOOK, secret: env:KEY, attempts: 2, timeout: 3s}
  - name: mail
    type: email
    smtp: {address: "127.0.0.1:2525", starttls: false, username: prflow, password: env:PASS}
    from: prflow <prflow@example.com>
    to: [a@example.com, "B <b@example.com>"]
`
	s, err := Parse("n.yaml", []byte(src), "", env(map[string]string{"SLACK": "https://s/x1", "HOOK": "https://h/x2", "KEY": "key-3", "PASS": "pass-4"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Channels(), ","); got != "hook,mail,team" {
		t.Errorf("channels %s", got)
	}
	if s.Attempts("hook") != 2 || s.Attempts("team") != DefaultAttempts {
		t.Errorf("attempts %d %d", s.Attempts("hook"), s.Attempts("team"))
	}
	if !sameSet(s.Secrets(), []string{"https://s/x1", "https://h/x2", "key-3", "pass-4"}) {
		t.Errorf("secrets %q", s.Secrets())
	}
	err = s.Send(context.Background(), "nope", steps.Notification{})
	if err == nil || !steps.IsTerminal(err) || !strings.Contains(err.Error(), `no channel "nope"`) {
		t.Errorf("unknown channel: %v", err)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// receiver is a local HTTP endpoint answering with a status per request (then 200).
type receiver struct {
	mu     sync.Mutex
	codes  []int
	bodies [][]byte
	heads  []http.Header
	srv    *httptest.Server
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{codes: codes}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		code := http.StatusOK
		if len(r.codes) > 0 {
			code, r.codes = r.codes[0], r.codes[1:]
		}
		if code == http.StatusOK {
			r.bodies = append(r.bodies, b)
			r.heads = append(r.heads, req.Header.Clone())
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() ([][]byte, []http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...), append([]http.Header(nil), r.heads...)
}

var sample = steps.Notification{ID: "r1/stage.failed:deploy:hook", Event: "stage.failed", Run: "r1", Pipeline: "p", Stage: "deploy",
	Status: "failed", Message: "GitOpsSync: app web is Degraded", URL: "https://prflow.example.com/ui/runs/r1", Time: time.Unix(1700000000, 0).UTC()}

// The webhook channel posts the notification as JSON with an HMAC-SHA256 signature of the
// exact body, the event and a delivery id a receiver can deduplicate on.
func TestWebhookSigned(t *testing.T) {
	rc := newReceiver(t)
	s, err := Parse("n.yaml", []byte("channels:\n  - {name: hook, type: webhook, url: env:U, secret: env:K}\n"), "",
		env(map[string]string{"U": rc.srv.URL + "/hook/tok-secret", "K": "hmac-key"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), "hook", sample); err != nil {
		t.Fatal(err)
	}
	bodies, heads := rc.got()
	if len(bodies) != 1 {
		t.Fatalf("%d deliveries", len(bodies))
	}
	if got, want := heads[0].Get(SignatureHeader), Sign("hmac-key", bodies[0]); got != want || !strings.HasPrefix(got, "sha256=") {
		t.Errorf("signature %q, want %q", got, want)
	}
	if Sign("other-key", bodies[0]) == heads[0].Get(SignatureHeader) {
		t.Error("the signature does not depend on the key")
	}
	if heads[0].Get(DeliveryHeader) != sample.ID || heads[0].Get(EventHeader) != "stage.failed" || heads[0].Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", heads[0])
	}
	var got steps.Notification
	if err := json.Unmarshal(bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(sample.Time) {
		t.Errorf("time %v, want %v", got.Time, sample.Time)
	}
	want := sample
	got.Time, want.Time = time.Time{}, time.Time{}
	if got != want {
		t.Errorf("body %+v\nwant %+v", got, want)
	}
}

// 5xx, 429 and timeouts are transient (retried); another 4xx is terminal; neither error shows
// the URL, which holds the credential.
func TestHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		code     int
		terminal bool
	}{{500, false}, {503, false}, {429, false}, {404, true}, {400, true}} {
		rc := newReceiver(t, tc.code)
		url := rc.srv.URL + "/services/T0/B0/slack-secret-path"
		s, err := Parse("n.yaml", []byte("channels:\n  - {name: team, type: slack, url: env:U}\n"), "", env(map[string]string{"U": url}))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), "team", sample)
		if err == nil || steps.IsTerminal(err) != tc.terminal {
			t.Errorf("%d: err %v, terminal %v", tc.code, err, steps.IsTerminal(err))
			continue
		}
		if strings.Contains(err.Error(), "slack-secret-path") {
			t.Errorf("%d: error shows the URL: %v", tc.code, err)
		}
	}
	// A receiver that is down: transient, no URL in the error.
	rc := newReceiver(t)
	url := rc.srv.URL + "/hook/secret-path-2"
	rc.srv.Close()
	s, err := Parse("n.yaml", []byte("channels:\n  - {name: hook, type: webhook, url: env:U, secret: env:K, timeout: 2s}\n"), "", env(map[string]string{"U": url, "K": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(context.Background(), "hook", sample)
	if err == nil || steps.IsTerminal(err) || strings.Contains(err.Error(), "secret-path-2") {
		t.Errorf("receiver down: %v", err)
	}
}

// The slack channel posts Slack's incoming-webhook payload: escaped text with a link.
func TestSlackPayload(t *testing.T) {
	rc := newReceiver(t)
	s, err := Parse("n.yaml", []byte("channels:\n  - {name: team, type: slack, url: env:U}\n"), "", env(map[string]string{"U": rc.srv.URL + "/services/x"}))
	if err != nil {
		t.Fatal(err)
	}
	n := sample
	n.Message = "value <b> & more"
	if err := s.Send(context.Background(), "team", n); err != nil {
		t.Fatal(err)
	}
	bodies, _ := rc.got()
	var p map[string]string
	if len(bodies) != 1 || json.Unmarshal(bodies[0], &p) != nil {
		t.Fatalf("bodies %q", bodies)
	}
	want := "prflow stage.failed: run r1 of pipeline p, stage deploy (failed)\n> value &lt;b&gt; &amp; more\n<https://prflow.example.com/ui/runs/r1|Open the run>"
	if p["text"] != want || len(p) != 1 {
		t.Errorf("payload %q\nwant text %q", p, want)
	}
}

// The email channel sends one mail through a local SMTP server, authenticating with the
// password from the secret reference; 4xx replies are transient, 5xx terminal; STARTTLS is
// required unless turned off.
func TestEmail(t *testing.T) {
	srv := NewSMTPServer(t)
	srv.SetAuth("prflow", "smtp-pass-value")
	src := "channels:\n  - name: mail\n    type: email\n    smtp: {address: \"" + srv.Addr + "\", starttls: false, username: prflow, password: env:P}\n    from: prflow <prflow@example.com>\n    to: [dev@example.com]\n    subject: \"[prod]\"\n"
	s, err := Parse("n.yaml", []byte(src), "", env(map[string]string{"P": "smtp-pass-value"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), "mail", sample); err != nil {
		t.Fatal(err)
	}
	mails := srv.Mails()
	if len(mails) != 1 {
		t.Fatalf("%d mails", len(mails))
	}
	m := mails[0]
	if m.From != "prflow@example.com" || strings.Join(m.To, ",") != "dev@example.com" || m.Auth != "prflow:smtp-pass-value" {
		t.Errorf("mail %+v", m)
	}
	for _, w := range []string{"Subject: [prod]: prflow stage.failed: run r1 of pipeline p, stage deploy (failed)\r\n", "X-Prflow-Event: stage.failed\r\n",
		"Message-ID: <", "\r\n\r\nprflow stage.failed", "GitOpsSync: app web is Degraded\r\n", "Run: https://prflow.example.com/ui/runs/r1\r\n"} {
		if !strings.Contains(m.Data, w) {
			t.Errorf("mail lacks %q:\n%s", w, m.Data)
		}
	}

	srv.FailRCPT("451 4.3.0 try again later")
	err = s.Send(context.Background(), "mail", sample)
	if err == nil || steps.IsTerminal(err) || !strings.Contains(err.Error(), "451") {
		t.Errorf("4xx: %v (terminal %v)", err, steps.IsTerminal(err))
	}
	srv.FailRCPT("550 5.1.1 no such user")
	err = s.Send(context.Background(), "mail", sample)
	if err == nil || !steps.IsTerminal(err) || !strings.Contains(err.Error(), "550") {
		t.Errorf("5xx: %v (terminal %v)", err, steps.IsTerminal(err))
	}
	if len(srv.Mails()) != 1 {
		t.Errorf("failed sends delivered mail: %d", len(srv.Mails()))
	}

	// A wrong password: terminal, and the password is not in the error.
	bad, err := Parse("n.yaml", []byte(src), "", env(map[string]string{"P": "wrong-pass-value"}))
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Send(context.Background(), "mail", sample)
	if err == nil || !steps.IsTerminal(err) || strings.Contains(err.Error(), "wrong-pass-value") {
		t.Errorf("bad password: %v", err)
	}

	// STARTTLS on (the default) with a server that does not offer it: refused, nothing sent.
	tls, err := Parse("n.yaml", []byte(strings.Replace(src, "starttls: false, ", "", 1)), "", env(map[string]string{"P": "smtp-pass-value"}))
	if err != nil {
		t.Fatal(err)
	}
	err = tls.Send(context.Background(), "mail", sample)
	if err == nil || !steps.IsTerminal(err) || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("no STARTTLS: %v", err)
	}
	if len(srv.Mails()) != 1 {
		t.Errorf("%d mails", len(srv.Mails()))
	}
}
