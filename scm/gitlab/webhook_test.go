package gitlab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

var hookSecret = []byte("s3cr3t-hook-token")

const deliveryID = "13792a34-cac6-4fda-95a8-c58e00a3954e"

func hookRequest(event string, body []byte, token string) *http.Request {
	return scmconformance.HookRequest(hookFormat, event, deliveryID, body, token)
}

var fixedTime = time.Date(2024, 5, 2, 8, 10, 0, 0, time.UTC)

func fixedParser() *WebhookParser {
	return &WebhookParser{Now: func() time.Time { return fixedTime }}
}

func TestParseWebhookEvents(t *testing.T) {
	// push.json as a project hook and as a system hook: the same event.
	push := &scm.Event{
		Provider: "gitlab", DeliveryID: deliveryID, Kind: scm.EventPush,
		Repo: "platform/gitops/deploy", Sender: "jsmith", Branch: "main",
		Before:   "95790bf891e76fee5e1747ab589903a6a1f80f22",
		After:    "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
		Changed:  []string{"apps/cart/values.yaml", "envs/dev/config.json", "envs/old/config.json"},
		Received: fixedTime,
	}
	tests := []struct {
		name  string
		event string
		file  string
		want  *scm.Event
	}{
		{name: "push", event: "Push Hook", file: "push.json", want: push},
		{name: "push as system hook", event: "System Hook", file: "push.json", want: push},
		{
			name: "merged", event: "Merge Request Hook", file: "merge_request_merge.json",
			want: &scm.Event{
				Provider: "gitlab", DeliveryID: deliveryID, Kind: scm.EventPullRequest,
				Repo: "platform/gitops/deploy", Sender: "root", Action: scm.PRMergedEvt, Received: fixedTime,
				PR: &scm.PullRequest{
					Number: 7, Title: "prflow: promote checkout to prod", Body: "Updates envs/prod/config.json",
					State: scm.PRMerged, Head: "prflow/run-42/update", Base: "main",
					HeadSHA:      "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
					MergeSHA:     "f0c6f0b5e5ea0ea1e2a9bc34e3a3df1bb3a0f6a2",
					Mergeability: scm.MergeBlocked, Labels: []string{"prflow"},
					URL: "https://gitlab.example.com/platform/gitops/deploy/-/merge_requests/7",
				},
			},
		},
		{
			name: "labeled", event: "Merge Request Hook", file: "merge_request_labeled.json",
			want: &scm.Event{
				Provider: "gitlab", DeliveryID: deliveryID, Kind: scm.EventPullRequest,
				Repo: "platform/gitops/deploy", Sender: "reviewer", Action: scm.PRLabeled, Label: "approved",
				Received: fixedTime,
				PR: &scm.PullRequest{
					Number: 8, Title: "Draft: promote cart", State: scm.PROpen, Draft: true,
					Head: "prflow/run-43/update", Base: "main",
					HeadSHA:      "1111111111111111111111111111111111111111",
					Mergeability: scm.MergeBlocked, Labels: []string{"prflow", "approved"},
					URL: "https://gitlab.example.com/platform/gitops/deploy/-/merge_requests/8",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := scmconformance.Testdata(t, tt.file)
			got, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.event, body, string(hookSecret)), hookSecret))
			if err != nil {
				t.Fatal(err)
			}
			scmconformance.WantEvent(t, got, tt.want)
		})
	}
}

func TestParseWebhookMRActions(t *testing.T) {
	tests := []struct {
		name, action, state, extra string
		want                       scm.PRAction
		label                      string
	}{
		{name: "open", action: "open", state: "opened", want: scm.PROpened},
		{name: "reopen", action: "reopen", state: "opened", want: scm.PROpened},
		{name: "close", action: "close", state: "closed", want: scm.PRClosedOnly},
		{name: "merge", action: "merge", state: "merged", want: scm.PRMergedEvt},
		{name: "update with new commits", action: "update", state: "opened", extra: `,"oldrev":"abc"`, want: scm.PRSynchronize},
		{name: "update without changes", action: "update", state: "opened"},
		{name: "title edited", action: "update", state: "opened", extra: `},"changes":{"title":{"previous":"WIP","current":"Bump"}`, want: scm.PREdited},
		{name: "target branch edited", action: "update", state: "opened", extra: `},"changes":{"target_branch":{"previous":"main","current":"release"}`, want: scm.PREdited},
		{name: "marked ready", action: "update", state: "opened", extra: `},"changes":{"draft":{"previous":true,"current":false}`, want: scm.PRReady},
		{name: "marked draft", action: "update", state: "opened", extra: `},"changes":{"draft":{"previous":false,"current":true}`, want: scm.PRToDraft},
		{name: "label removed", action: "update", state: "opened", extra: `},"changes":{"labels":{"previous":[{"title":"deploy"},{"title":"x"}],"current":[{"title":"x"}]}`, want: scm.PRUnlabeled, label: "deploy"},
		{name: "label added", action: "update", state: "opened", extra: `},"changes":{"labels":{"previous":[],"current":[{"title":"deploy"}]}`, want: scm.PRLabeled, label: "deploy"},
		{name: "approved", action: "approved", state: "opened"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"g/p"},` +
				`"object_attributes":{"iid":3,"state":"` + tt.state + `","action":"` + tt.action + `","merge_commit_sha":"m1"` + tt.extra + `}}`)
			ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("Merge Request Hook", body, string(hookSecret)), hookSecret))
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
				t.Fatalf("got %+v, want %q", ev, tt.want)
			}
			if ev.Label != tt.label {
				t.Errorf("Label = %q, want %q", ev.Label, tt.label)
			}
			if (tt.want == scm.PRMergedEvt) != (ev.PR.MergeSHA == "m1") {
				t.Errorf("MergeSHA = %q for action %s", ev.PR.MergeSHA, tt.action)
			}
		})
	}
}

func TestParseWebhookToken(t *testing.T) {
	body := scmconformance.Testdata(t, "push.json")
	tests := []struct {
		name   string
		token  string
		secret []byte
		allow  bool
	}{
		{name: "missing", token: "", secret: hookSecret},
		{name: "wrong", token: "s3cr3t-hook-tokeN", secret: hookSecret},
		{name: "prefix of secret", token: "s3cr3t", secret: hookSecret},
		{name: "secret plus suffix", token: string(hookSecret) + "x", secret: hookSecret},
		{name: "no secret configured", token: string(hookSecret)},
		{name: "secret enforced when unsigned allowed", token: "", secret: hookSecret, allow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scmconformance.One((&WebhookParser{AllowUnsigned: tt.allow}).ParseWebhook(hookRequest("Push Hook", body, tt.token), tt.secret))
			if !errors.Is(err, scm.ErrBadSignature) {
				t.Fatalf("err = %v, want ErrBadSignature", err)
			}
			if strings.Contains(err.Error(), string(hookSecret)) {
				t.Errorf("error leaks the secret: %v", err)
			}
		})
	}
	t.Run("unsigned allowed without secret", func(t *testing.T) {
		ev, err := scmconformance.One((&WebhookParser{AllowUnsigned: true}).ParseWebhook(hookRequest("Push Hook", body, ""), nil))
		if err != nil || ev == nil || ev.Repo != "platform/gitops/deploy" {
			t.Fatalf("got %+v, %v", ev, err)
		}
	})
}

func TestParseWebhookErrors(t *testing.T) {
	big := bytes.Repeat([]byte(" "), 4096)
	tests := []struct {
		name    string
		event   string
		body    []byte
		max     int64
		chunked bool
		is      error
		msg     string
	}{
		{name: "too large", event: "Push Hook", body: big, max: 1024, is: scm.ErrTooLarge},
		{name: "too large chunked", event: "Push Hook", body: big, max: 1024, chunked: true, is: scm.ErrTooLarge},
		{name: "malformed", event: "Push Hook", body: []byte(`{"object_kind":"push",`), msg: "malformed JSON at byte"},
		{name: "bad iid type", event: "Merge Request Hook", body: []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"g/p"},"object_attributes":{"iid":"x"}}`), msg: `"object_attributes.iid"`},
		{name: "no object_kind", event: "Push Hook", body: []byte(`{}`), msg: "no object_kind"},
		{name: "no project", event: "Push Hook", body: []byte(`{"object_kind":"push","ref":"refs/heads/main"}`), msg: "project.path_with_namespace"},
		{name: "no attributes", event: "Merge Request Hook", body: []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"g/p"}}`), msg: "no object_attributes"},
		{name: "no event header", body: []byte(`{}`), msg: "missing X-Gitlab-Event"},
		{name: "header and object_kind disagree", event: "Push Hook", body: []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"g/p"},"object_attributes":{"iid":3,"action":"merge","state":"merged"}}`),
			msg: `X-Gitlab-Event is "Push Hook" but the body's object_kind is "merge_request"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hookRequest(tt.event, tt.body, string(hookSecret))
			if tt.chunked {
				r.ContentLength = -1
			}
			_, err := scmconformance.One((&WebhookParser{MaxBody: tt.max}).ParseWebhook(r, hookSecret))
			scmconformance.WantParseError(t, err, tt.is, tt.msg)
			if !strings.Contains(err.Error(), deliveryID) {
				t.Errorf("error does not name the delivery: %v", err)
			}
		})
	}
}

func TestParseWebhookIgnored(t *testing.T) {
	for _, tt := range []struct{ event, body string }{
		{"Tag Push Hook", `{"object_kind":"tag_push"}`},
		{"Note Hook", `{"object_kind":"note"}`},
		{"System Hook", `{"object_kind":"repository_update"}`},
		{"Push Hook", `{"object_kind":"push","ref":"refs/tags/v1","project":{"path_with_namespace":"g/p"}}`},
	} {
		ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.event, []byte(tt.body), string(hookSecret)), hookSecret))
		if ev != nil || err != nil {
			t.Errorf("%s: got %+v, %v; want ignored", tt.event, ev, err)
		}
	}
}

func FuzzParseWebhook(f *testing.F) {
	f.Add("Push Hook", scmconformance.Testdata(f, "push.json"), true)
	f.Add("Pipeline Hook", []byte(`{"object_kind":"pipeline","object_attributes":{"sha":"ab12","status":"success"},"project":{"path_with_namespace":"g/p"}}`), true)
	f.Add("Merge Request Hook", scmconformance.Testdata(f, "merge_request_merge.json"), true)
	f.Add("Merge Request Hook", scmconformance.Testdata(f, "merge_request_labeled.json"), true)
	f.Add("System Hook", []byte(`{"object_kind":"merge_request","object_attributes":{"iid":1,"action":"update","oldrev":"x"}}`), false)
	p := &WebhookParser{MaxBody: 64 << 10}
	f.Fuzz(func(t *testing.T, event string, body []byte, withToken bool) {
		token := "nope"
		if withToken {
			token = string(hookSecret)
		}
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(headerEvent, event)
		r.Header.Set(headerToken, token)
		evs, err := p.ParseWebhook(r, hookSecret)
		if !withToken {
			if len(body) <= 64<<10 && !errors.Is(err, scm.ErrBadSignature) {
				t.Fatalf("bad token accepted: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		scmconformance.CheckEvents(t, Name, evs)
		for _, ev := range evs {
			if ev.Action == scm.PRLabeled && ev.Label == "" {
				t.Fatalf("labeled without label: %+v", ev)
			}
		}
	})
}

func TestParseWebhookBranchDeleted(t *testing.T) {
	body := scmconformance.Testdata(t, "push_branch_deleted.json")
	ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("Push Hook", body, string(hookSecret)), hookSecret))
	if err != nil {
		t.Fatal(err)
	}
	want := &scm.Event{Provider: "gitlab", DeliveryID: deliveryID, Kind: scm.EventPush, Repo: "platform/gitops/deploy",
		Sender: "jsmith", Branch: "release/1.4", Before: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", After: scm.ZeroSHA,
		Deleted: true, Received: fixedTime}
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("got  %+v\nwant %+v", ev, want)
	}
}

// A system hook's X-Gitlab-Event names no kind: the body's object_kind does.
func TestParseWebhookSystemHook(t *testing.T) {
	body := scmconformance.Testdata(t, "push.json")
	ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("System Hook", body, string(hookSecret)), hookSecret))
	if err != nil || ev == nil || ev.Kind != scm.EventPush || ev.Branch != "main" {
		t.Fatalf("got %+v, %v", ev, err)
	}
	body = scmconformance.Testdata(t, "merge_request_merge.json")
	ev, err = scmconformance.One(fixedParser().ParseWebhook(hookRequest("System Hook", body, string(hookSecret)), hookSecret))
	if err != nil || ev == nil || ev.Kind != scm.EventPullRequest || ev.Action != scm.PRMergedEvt {
		t.Fatalf("got %+v, %v", ev, err)
	}
}

// GitLab keeps Idempotency-Key across retries of one delivery, while X-Gitlab-Event-UUID may
// change: the delivery id is the key when there is one.
func TestParseWebhookIdempotencyKey(t *testing.T) {
	body := scmconformance.Testdata(t, "push.json")
	r := hookRequest("Push Hook", body, string(hookSecret))
	r.Header.Set("Idempotency-Key", "908a6d9e-45fd-46c8-97e6-c4f350f219dd")
	ev, err := scmconformance.One(fixedParser().ParseWebhook(r, hookSecret))
	if err != nil {
		t.Fatal(err)
	}
	if ev.DeliveryID != "908a6d9e-45fd-46c8-97e6-c4f350f219dd" {
		t.Errorf("DeliveryID = %q, want the Idempotency-Key", ev.DeliveryID)
	}
	ev, err = scmconformance.One(fixedParser().ParseWebhook(hookRequest("Push Hook", body, string(hookSecret)), hookSecret))
	if err != nil || ev.DeliveryID != deliveryID {
		t.Errorf("without Idempotency-Key: DeliveryID = %q, %v; want the event UUID", ev.DeliveryID, err)
	}
}

// TestParseWebhookMRUpdateSeveralActions: GitLab sends one update hook for a push to the
// MR's branch that also added two labels, removed one and changed the title. Each change is an
// event of its own (GitHub sends a delivery for each), so `actions: [labeled]` fires too; each
// has its own dedupe key and its own copy of the PR.
func TestParseWebhookMRUpdateSeveralActions(t *testing.T) {
	body := scmconformance.Testdata(t, "merge_request_update_several.json")
	evs, err := fixedParser().ParseWebhook(hookRequest("Merge Request Hook", body, string(hookSecret)), hookSecret)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	keys := map[string]bool{}
	for _, ev := range evs {
		got = append(got, string(ev.Action)+":"+ev.Label)
		keys[ev.DedupeKey()] = true
		if ev.PR == nil || ev.PR.Number != 8 || ev.DeliveryID != deliveryID || ev.Repo == "" {
			t.Errorf("event %+v", ev)
		}
	}
	want := "[synchronized: labeled:approved labeled:deploy unlabeled:wip edited:]"
	if fmt.Sprint(got) != want {
		t.Fatalf("actions %v, want %s", got, want)
	}
	if len(keys) != len(evs) {
		t.Errorf("dedupe keys %v are not distinct", keys)
	}
	evs[0].PR.Labels[0] = "changed"
	if evs[1].PR.Labels[0] == "changed" {
		t.Error("events share one PR")
	}
}

// TestParseWebhookClosedExcludesMerged: on every forge `closed` is a PR closed without being
// merged and `merged` a merged one; a merge is never also `closed` (README, triggers).
func TestParseWebhookClosedExcludesMerged(t *testing.T) {
	for _, tt := range []struct{ action, state, want string }{
		{"close", "closed", "[closed]"},
		{"merge", "merged", "[merged]"},
	} {
		body := []byte(`{"object_kind":"merge_request","project":{"path_with_namespace":"g/p"},` +
			`"object_attributes":{"iid":3,"state":"` + tt.state + `","action":"` + tt.action + `"}}`)
		evs, err := fixedParser().ParseWebhook(hookRequest("Merge Request Hook", body, string(hookSecret)), hookSecret)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, string(ev.Action))
		}
		if fmt.Sprint(got) != tt.want {
			t.Errorf("%s: actions %v, want %s", tt.action, got, tt.want)
		}
	}
}

// TestParseWebhookPushOverTwentyCommits: GitLab lists only the newest 20 commits of a push
// (total_commits_count counts all): the event says its file list is incomplete; a push it
// lists whole does not.
func TestParseWebhookPushOverTwentyCommits(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(scmconformance.Testdata(t, "push.json"), &doc); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		total      int
		incomplete bool
	}{{2, false}, {25, true}} {
		doc["total_commits_count"] = tt.total
		body, _ := json.Marshal(doc)
		ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("Push Hook", body, string(hookSecret)), hookSecret))
		if err != nil || ev == nil {
			t.Fatalf("%d commits: %+v, %v", tt.total, ev, err)
		}
		if ev.ChangedIncomplete != tt.incomplete || len(ev.Changed) == 0 {
			t.Errorf("%d commits, 2 listed: ChangedIncomplete %v, changed %v", tt.total, ev.ChangedIncomplete, ev.Changed)
		}
	}
}
