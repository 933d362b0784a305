package github

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

var hookSecret = []byte("It's a Secret to Everybody")

func sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func hookRequest(event string, body []byte, sig string) *http.Request {
	return scmconformance.HookRequest(hookFormat, event, "72d3162e-cc78-11e3-81ab-4c9367dc0958", body, sig)
}

func fixedParser() *WebhookParser {
	at := time.Date(2024, 5, 2, 8, 10, 0, 0, time.UTC)
	return &WebhookParser{Now: func() time.Time { return at }}
}

func TestParseWebhookEvents(t *testing.T) {
	at := time.Date(2024, 5, 2, 8, 10, 0, 0, time.UTC)
	tests := []struct {
		name  string
		event string
		file  string
		want  *scm.Event
	}{
		{
			name: "push", event: "push", file: "push.json",
			want: &scm.Event{
				Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Kind: scm.EventPush,
				Repo: "acme/deploy", Sender: "jdoe", Branch: "main",
				Before:   "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
				After:    "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
				Changed:  []string{"envs/prod/values.yaml", "envs/dev/config.json", "envs/old/config.json"},
				Received: at,
			},
		},
		{
			name: "branch deleted", event: "push", file: "push_branch_deleted.json",
			want: &scm.Event{
				Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Kind: scm.EventPush,
				Repo: "acme/deploy", Sender: "jdoe", Branch: "release/1.4", Deleted: true,
				Before:   "8d2c0b5e0cbd6f4f0d5e3d35e1d7a8b9c0d1e2f3",
				After:    scm.ZeroSHA,
				Received: at,
			},
		},
		{
			name: "draft marked ready", event: "pull_request", file: "pull_request_ready_for_review.json",
			want: &scm.Event{
				Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Kind: scm.EventPullRequest,
				Repo: "acme/deploy", Sender: "jdoe", Action: scm.PRReady, Received: at,
				PR: &scm.PullRequest{
					Number: 19, Title: "checkout: bump to v2.0.0", State: scm.PROpen,
					Head: "feature/checkout-v2", Base: "main",
					HeadSHA:      "cc00000000000000000000000000000000000019",
					Mergeability: scm.MergeUnknown, Labels: []string{"deploy"},
					URL: "https://github.com/acme/deploy/pull/19",
				},
			},
		},
		{
			name: "merged", event: "pull_request", file: "pull_request_closed.json",
			want: &scm.Event{
				Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Kind: scm.EventPullRequest,
				Repo: "acme/deploy", Sender: "jdoe", Action: scm.PRMergedEvt, Received: at,
				PR: &scm.PullRequest{
					Number: 17, Title: "prflow: promote checkout to prod", Body: "Updates envs/prod/config.json",
					State: scm.PRMerged, Head: "prflow/run-42/update", Base: "main",
					HeadSHA:      "4e5f60718293a4b5c6d7e8f90123459c1f4a2b3d",
					MergeSHA:     "9c1f4a2b3d4e5f60718293a4b5c6d7e8f9012345",
					Mergeability: scm.MergeUnknown, Labels: []string{"prflow", "env/prod"},
					URL: "https://github.com/acme/deploy/pull/17",
				},
			},
		},
		{
			name: "labeled", event: "pull_request", file: "pull_request_labeled.json",
			want: &scm.Event{
				Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Kind: scm.EventPullRequest,
				Repo: "acme/deploy", Sender: "reviewer", Action: scm.PRLabeled, Label: "approved", Received: at,
				PR: &scm.PullRequest{
					Number: 18, Title: "prflow: promote cart to staging", State: scm.PROpen, Draft: true,
					Head: "prflow/run-43/update", Base: "main",
					HeadSHA:      "bb00000000000000000000000000000000000002",
					Mergeability: scm.MergeBlocked, Labels: []string{"approved"},
					URL: "https://github.com/acme/deploy/pull/18",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := scmconformance.Testdata(t, tt.file)
			got, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.event, body, sign(hookSecret, body)), hookSecret))
			if err != nil {
				t.Fatal(err)
			}
			scmconformance.WantEvent(t, got, tt.want)
		})
	}
}

func TestParseWebhookPRActions(t *testing.T) {
	tests := []struct {
		action string
		merged bool
		want   scm.PRAction // "" = ignored
	}{
		{"opened", false, scm.PROpened},
		{"reopened", false, scm.PROpened},
		{"synchronize", false, scm.PRSynchronize},
		{"closed", false, scm.PRClosedOnly},
		{"closed", true, scm.PRMergedEvt},
		{"labeled", false, scm.PRLabeled},
		{"unlabeled", false, scm.PRUnlabeled},
		{"edited", false, scm.PREdited},
		{"ready_for_review", false, scm.PRReady},
		{"converted_to_draft", false, scm.PRToDraft},
		{"assigned", false, ""},
		{"review_requested", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			body := []byte(`{"action":"` + tt.action + `","pull_request":{"number":3,"state":"open","merged":` +
				map[bool]string{true: "true", false: "false"}[tt.merged] +
				`,"merge_commit_sha":"abc","head":{"ref":"f","sha":"h"},"base":{"ref":"main"}},"repository":{"full_name":"o/r"}}`)
			ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("pull_request", body, sign(hookSecret, body)), hookSecret))
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if ev != nil {
					t.Fatalf("want ignored, got %+v", ev)
				}
				return
			}
			if ev == nil || ev.Action != tt.want {
				t.Fatalf("got %+v, want action %q", ev, tt.want)
			}
			if tt.merged != (ev.PR.MergeSHA == "abc") {
				t.Errorf("MergeSHA = %q with merged=%v", ev.PR.MergeSHA, tt.merged)
			}
		})
	}
}

func TestParseWebhookSignature(t *testing.T) {
	body := scmconformance.Testdata(t, "push.json")
	good := sign(hookSecret, body)
	tests := []struct {
		name   string
		sig    string
		secret []byte
		allow  bool
	}{
		{name: "missing header", sig: "", secret: hookSecret},
		{name: "wrong secret", sig: sign([]byte("other"), body), secret: hookSecret},
		{name: "sha1 prefix", sig: "sha1=" + strings.TrimPrefix(good, "sha256="), secret: hookSecret},
		{name: "not hex", sig: "sha256=zz", secret: hookSecret},
		{name: "truncated", sig: good[:len(good)-2], secret: hookSecret},
		{name: "no secret configured", sig: good, secret: nil},
		{name: "secret enforced even when unsigned allowed", sig: "", secret: hookSecret, allow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &WebhookParser{AllowUnsigned: tt.allow}
			_, err := scmconformance.One(p.ParseWebhook(hookRequest("push", body, tt.sig), tt.secret))
			if !errors.Is(err, scm.ErrBadSignature) {
				t.Fatalf("err = %v, want ErrBadSignature", err)
			}
			if !strings.Contains(err.Error(), "72d3162e-cc78-11e3-81ab-4c9367dc0958") {
				t.Errorf("error does not name the delivery: %v", err)
			}
		})
	}
	t.Run("unsigned allowed without secret", func(t *testing.T) {
		p := &WebhookParser{AllowUnsigned: true}
		ev, err := scmconformance.One(p.ParseWebhook(hookRequest("push", body, ""), nil))
		if err != nil || ev == nil || ev.Branch != "main" {
			t.Fatalf("got %+v, %v", ev, err)
		}
	})
	t.Run("body tampered after signing", func(t *testing.T) {
		tampered := bytes.Replace(body, []byte("acme/deploy"), []byte("evil/deploy"), 1)
		_, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("push", tampered, good), hookSecret))
		if !errors.Is(err, scm.ErrBadSignature) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestParseWebhookErrors(t *testing.T) {
	big := bytes.Repeat([]byte(" "), 2048)
	tests := []struct {
		name    string
		event   string
		body    []byte
		max     int64
		chunked bool
		is      error
		msg     string
	}{
		{name: "too large by content-length", event: "push", body: big, max: 1024, is: scm.ErrTooLarge},
		{name: "too large chunked", event: "push", body: big, max: 1024, chunked: true, is: scm.ErrTooLarge},
		{name: "malformed json", event: "push", body: []byte(`{"ref": "refs/heads/main",`), msg: "malformed JSON"},
		{name: "wrong type", event: "pull_request", body: []byte(`{"action":"opened","pull_request":{"number":"7"}}`), msg: `field "pull_request.number"`},
		{name: "no repository", event: "push", body: []byte(`{"ref":"refs/heads/main"}`), msg: "repository.full_name"},
		{name: "no pull_request", event: "pull_request", body: []byte(`{"action":"opened","repository":{"full_name":"o/r"}}`), msg: "no pull_request"},
		{name: "no event header", event: "", body: []byte(`{}`), msg: "missing X-GitHub-Event"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hookRequest(tt.event, tt.body, sign(hookSecret, tt.body))
			if tt.chunked {
				r.ContentLength = -1
			}
			_, err := scmconformance.One((&WebhookParser{MaxBody: tt.max}).ParseWebhook(r, hookSecret))
			scmconformance.WantParseError(t, err, tt.is, tt.msg)
		})
	}
}

func TestParseWebhookIgnored(t *testing.T) {
	for _, tt := range []struct{ event, body string }{
		{"ping", `{"zen":"Keep it logically awesome.","hook_id":1}`},
		{"issues", `{"action":"opened"}`},
		{"push", `{"ref":"refs/tags/v1.0.0","repository":{"full_name":"o/r"}}`},
	} {
		body := []byte(tt.body)
		ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.event, body, sign(hookSecret, body)), hookSecret))
		if ev != nil || err != nil {
			t.Errorf("%s: got %+v, %v; want ignored", tt.event, ev, err)
		}
	}
}

func TestParseWebhookFormEncodedAndDeliveryFallback(t *testing.T) {
	payload := scmconformance.Testdata(t, "push.json")
	body := []byte("payload=" + url.QueryEscape(string(payload)))
	r := hookRequest("push", body, sign(hookSecret, body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Del(headerDelivery)
	ev, err := scmconformance.One(fixedParser().ParseWebhook(r, hookSecret))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Repo != "acme/deploy" || ev.Branch != "main" {
		t.Errorf("got %+v", ev)
	}
	sum := sha256.Sum256(body)
	if want := "sha256:" + hex.EncodeToString(sum[:]); ev.DeliveryID != want {
		t.Errorf("DeliveryID = %q, want %q", ev.DeliveryID, want)
	}
}

func FuzzParseWebhook(f *testing.F) {
	for _, seed := range []struct{ event, file string }{
		{"push", "push.json"}, {"pull_request", "pull_request_closed.json"}, {"pull_request", "pull_request_labeled.json"},
	} {
		f.Add(seed.event, scmconformance.Testdata(f, seed.file), true)
	}
	f.Add("pull_request", []byte(`{"action":"closed","pull_request":{"number":1,"merged":true,"merge_commit_sha":null}}`), true)
	f.Add("push", []byte(`{"ref":"refs/heads/"}`), false)
	f.Add("check_run", []byte(`{"action":"completed","check_run":{"head_sha":"ab12","name":"t","status":"completed","conclusion":"success"},"repository":{"full_name":"a/b"}}`), true)
	// A field prflow does not read, malformed (octokit's check_run rerequested example).
	f.Add("check_run", []byte(`{"action":"rerequested","check_run":{"head_sha":"ab12","app":{"created_at":"2018-04-25 20:42:10"}},"repository":{"full_name":"a/b"}}`), true)
	p := &WebhookParser{MaxBody: 64 << 10}
	f.Fuzz(func(t *testing.T, event string, body []byte, signed bool) {
		sig := "sha256=00"
		if signed {
			sig = sign(hookSecret, body)
		}
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(headerEvent, event)
		r.Header.Set(headerSignature, sig)
		ev, err := scmconformance.One(p.ParseWebhook(r, hookSecret))
		if !signed {
			if len(body) <= 64<<10 && !errors.Is(err, scm.ErrBadSignature) {
				t.Fatalf("unsigned body accepted: %v", err)
			}
			return
		}
		if err != nil || ev == nil {
			return
		}
		scmconformance.CheckEvents(t, Name, []*scm.Event{ev})
	})
}
