package bitbucket

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

var hookSecret = []byte("bb-hook-secret")

const deliveryID = "8f3c2a4e-0b1d-4c5e-9f6a-7b8c9d0e1f2a"

func sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func hookRequest(event string, body []byte, sig string) *http.Request {
	return scmconformance.HookRequest(hookFormat, event, deliveryID, body, sig)
}

var fixedTime = time.Date(2024, 5, 2, 8, 10, 0, 0, time.UTC)

func fixedParser() *WebhookParser {
	return &WebhookParser{Now: func() time.Time { return fixedTime }}
}

func TestParseWebhookEvents(t *testing.T) {
	tests := []struct {
		name  string
		event string
		file  string
		want  *scm.Event
	}{
		{
			name: "push", event: "repo:push", file: "push.json",
			want: &scm.Event{
				Provider: "bitbucket", DeliveryID: deliveryID, Kind: scm.EventPush, Repo: "acme/deploy",
				Sender: "jdoe", Branch: "main",
				Before:            "709d658dc5b6d6afcd46049c2f332ee3f515a67d",
				After:             "1e65c05c1d5171631d92438a13901ca7dae9618c",
				ChangedIncomplete: true, // Bitbucket lists no files
				Received:          fixedTime,
			},
		},
		{
			name: "fulfilled", event: "pullrequest:fulfilled", file: "pullrequest_fulfilled.json",
			want: &scm.Event{
				Provider: "bitbucket", DeliveryID: deliveryID, Kind: scm.EventPullRequest, Repo: "acme/deploy",
				Sender: "jdoe", Action: scm.PRMergedEvt, Received: fixedTime,
				PR: &scm.PullRequest{
					Number: 12, Title: "prflow: promote checkout to prod", Body: "Updates envs/prod/config.json",
					State: scm.PRMerged, Head: "prflow/run-42/update", Base: "main",
					HeadSHA: "d3a4f7c2b1e0", MergeSHA: "1e65c05c1d51", Mergeability: scm.MergeUnknown,
					URL: "https://bitbucket.org/acme/deploy/pull-requests/12",
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

func TestParseWebhookPRKeys(t *testing.T) {
	tests := []struct {
		key, state string
		want       scm.PRAction
	}{
		{"pullrequest:created", "OPEN", scm.PROpened},
		{"pullrequest:updated", "OPEN", scm.PRSynchronize},
		{"pullrequest:fulfilled", "MERGED", scm.PRMergedEvt},
		{"pullrequest:rejected", "DECLINED", scm.PRClosedOnly},
		{"pullrequest:approved", "OPEN", ""},
		{"pullrequest:comment_created", "OPEN", ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			body := []byte(`{"pullrequest":{"id":5,"state":"` + tt.state + `","merge_commit":{"hash":"mc"},` +
				`"source":{"branch":{"name":"f"},"commit":{"hash":"h"}},"destination":{"branch":{"name":"main"}}},` +
				`"repository":{"full_name":"ws/r"}}`)
			ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.key, body, sign(hookSecret, body)), hookSecret))
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if ev != nil {
					t.Fatalf("want ignored, got %+v", ev)
				}
				return
			}
			if ev == nil || ev.Action != tt.want || ev.PR.Head != "f" || ev.PR.HeadSHA != "h" {
				t.Fatalf("got %+v, want %q", ev, tt.want)
			}
			if (tt.want == scm.PRMergedEvt) != (ev.PR.MergeSHA == "mc") {
				t.Errorf("MergeSHA = %q for %s", ev.PR.MergeSHA, tt.key)
			}
		})
	}
}

func TestParseWebhookPushShapes(t *testing.T) {
	tests := []struct {
		name                  string
		changes               string
		branch, before, after string
		ignored, deleted      bool
	}{
		{name: "created branch", changes: `[{"old":null,"new":{"type":"branch","name":"feat","target":{"hash":"n1"}}}]`, branch: "feat", after: "n1"},
		{name: "deleted branch", changes: `[{"old":{"type":"branch","name":"feat","target":{"hash":"o1"}},"new":null,"closed":true}]`, branch: "feat", before: "o1", deleted: true},
		{name: "tag then branch", changes: `[{"new":{"type":"tag","name":"v1","target":{"hash":"t"}}},{"new":{"type":"branch","name":"main","target":{"hash":"n2"}}}]`, branch: "main", after: "n2"},
		{name: "tag only", changes: `[{"new":{"type":"tag","name":"v1","target":{"hash":"t"}}}]`, ignored: true},
		{name: "no changes", changes: `[]`, ignored: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(`{"push":{"changes":` + tt.changes + `},"repository":{"full_name":"ws/r"},"actor":{"display_name":"Only Display"}}`)
			ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("repo:push", body, sign(hookSecret, body)), hookSecret))
			if err != nil {
				t.Fatal(err)
			}
			if tt.ignored {
				if ev != nil {
					t.Fatalf("want ignored, got %+v", ev)
				}
				return
			}
			if ev == nil || ev.Branch != tt.branch || ev.Before != tt.before || ev.After != tt.after || ev.Sender != "Only Display" || ev.Deleted != tt.deleted {
				t.Fatalf("got %+v", ev)
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
		{name: "missing", secret: hookSecret},
		{name: "wrong secret", sig: sign([]byte("x"), body), secret: hookSecret},
		{name: "sha1 form", sig: "sha1=" + strings.TrimPrefix(good, "sha256="), secret: hookSecret},
		{name: "not hex", sig: "sha256=xyz", secret: hookSecret},
		{name: "no secret configured", sig: good},
		{name: "secret enforced when unsigned allowed", secret: hookSecret, allow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scmconformance.One((&WebhookParser{AllowUnsigned: tt.allow}).ParseWebhook(hookRequest("repo:push", body, tt.sig), tt.secret))
			if !errors.Is(err, scm.ErrBadSignature) {
				t.Fatalf("err = %v, want ErrBadSignature", err)
			}
			if !strings.Contains(err.Error(), deliveryID) {
				t.Errorf("error does not name the delivery: %v", err)
			}
		})
	}
	t.Run("tampered", func(t *testing.T) {
		tampered := bytes.Replace(body, []byte(`"main"`), []byte(`"prod"`), 1)
		_, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("repo:push", tampered, good), hookSecret))
		if !errors.Is(err, scm.ErrBadSignature) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unsigned allowed without secret", func(t *testing.T) {
		ev, err := scmconformance.One((&WebhookParser{AllowUnsigned: true}).ParseWebhook(hookRequest("repo:push", body, ""), nil))
		if err != nil || ev == nil || ev.Branch != "main" {
			t.Fatalf("got %+v, %v", ev, err)
		}
	})
}

func TestParseWebhookErrors(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 4096)
	tests := []struct {
		name    string
		event   string
		body    []byte
		max     int64
		chunked bool
		is      error
		msg     string
	}{
		{name: "too large", event: "repo:push", body: big, max: 1000, is: scm.ErrTooLarge},
		{name: "too large chunked", event: "repo:push", body: big, max: 1000, chunked: true, is: scm.ErrTooLarge},
		{name: "malformed", event: "repo:push", body: []byte(`{"push":`), msg: "malformed JSON"},
		{name: "bad id type", event: "pullrequest:created", body: []byte(`{"pullrequest":{"id":"1"},"repository":{"full_name":"a/b"}}`), msg: `"pullrequest.id"`},
		{name: "no repository", event: "repo:push", body: []byte(`{"push":{"changes":[]}}`), msg: "repository.full_name"},
		{name: "no pullrequest", event: "pullrequest:created", body: []byte(`{"repository":{"full_name":"a/b"}}`), msg: "no pullrequest"},
		{name: "no event header", body: []byte(`{}`), msg: "missing X-Event-Key"},
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

func FuzzParseWebhook(f *testing.F) {
	f.Add("repo:push", scmconformance.Testdata(f, "push.json"), true)
	f.Add("repo:commit_status_updated", []byte(`{"repository":{"full_name":"a/b"},"commit_status":{"key":"k","state":"FAILED","commit":{"hash":"ab12"}}}`), true)
	f.Add("pullrequest:fulfilled", scmconformance.Testdata(f, "pullrequest_fulfilled.json"), true)
	f.Add("pullrequest:updated", []byte(`{"pullrequest":{"id":1,"source":{"commit":null}},"repository":{"full_name":"a/b"}}`), false)
	p := &WebhookParser{MaxBody: 64 << 10}
	f.Fuzz(func(t *testing.T, event string, body []byte, signed bool) {
		sig := "sha256=00"
		if signed {
			sig = sign(hookSecret, body)
		}
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(headerEvent, event)
		r.Header.Set(headerSignature, sig)
		evs, err := p.ParseWebhook(r, hookSecret)
		if !signed {
			if len(body) <= 64<<10 && !errors.Is(err, scm.ErrBadSignature) {
				t.Fatalf("unsigned body accepted: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		scmconformance.CheckEvents(t, Name, evs)
	})
}

// TestParseWebhookPushSeveralBranches: one git push that updates main, pushes a tag, creates
// release/2.0 and deletes old-feature is one Bitbucket delivery with four push.changes. Every
// branch change is its own event (the tag is not one), in the payload's order, all with the
// delivery's id and each with its own dedupe key, so JetStream keeps all three and a
// redelivery of the same body gives the same keys again.
func TestParseWebhookPushSeveralBranches(t *testing.T) {
	body := scmconformance.Testdata(t, "push_several_branches.json")
	parse := func() []*scm.Event {
		t.Helper()
		evs, err := fixedParser().ParseWebhook(hookRequest("repo:push", body, sign(hookSecret, body)), hookSecret)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	evs := parse()
	type change struct {
		branch, before, after string
		deleted               bool
	}
	want := []change{
		{"main", "709d658dc5b6d6afcd46049c2f332ee3f515a67d", "1e65c05c1d5171631d92438a13901ca7dae9618c", false},
		{"release/2.0", "", "2a1b8c4d5e6f708192a3b4c5d6e7f8091a2b3c4d", false},
		{"old-feature", "5c6d7e8f9012a3b4c5d6e7f8091a2b3c4d5e6f70", "", true},
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	keys := map[string]bool{}
	for i, ev := range evs {
		got := change{ev.Branch, ev.Before, ev.After, ev.Deleted}
		if got != want[i] || ev.Kind != scm.EventPush || ev.Repo != "acme/deploy" || ev.Sender != "jdoe" ||
			ev.Provider != Name || ev.DeliveryID != deliveryID {
			t.Errorf("event %d: %+v, want %+v", i, ev, want[i])
		}
		keys[ev.DedupeKey()] = true
	}
	if len(keys) != len(want) {
		t.Errorf("dedupe keys %v: want %d distinct", keys, len(want))
	}
	for i, ev := range parse() {
		if !keys[ev.DedupeKey()] {
			t.Errorf("redelivery event %d has the new dedupe key %s", i, ev.DedupeKey())
		}
	}
}

// TestParseWebhookPushSameBranchTwice: a payload that moves one branch twice is refused (400)
// with the changes it names; it is not two runs of one branch.
func TestParseWebhookPushSameBranchTwice(t *testing.T) {
	body := []byte(`{"repository":{"full_name":"acme/deploy"},"push":{"changes":[
		{"new":{"type":"branch","name":"main","target":{"hash":"aa"}},"old":null},
		{"new":{"type":"tag","name":"v1","target":{"hash":"aa"}},"old":null},
		{"new":{"type":"branch","name":"main","target":{"hash":"bb"}},"old":null}]}}`)
	evs, err := fixedParser().ParseWebhook(hookRequest("repo:push", body, sign(hookSecret, body)), hookSecret)
	if err == nil || !strings.Contains(err.Error(), `push.changes[2] changes branch "main" again (after push.changes[0])`) {
		t.Fatalf("got %+v, %v; want the duplicate branch refused", evs, err)
	}
}
