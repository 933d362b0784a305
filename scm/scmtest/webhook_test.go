package scmtest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	gitlab "gitlab.com/gitlab-org/api/client-go"
)

func samplePR() PullRequest {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return PullRequest{ID: 77, Number: 7, Title: "Bump web", Body: "by prflow", Head: "prflow/bump", Base: "main",
		HeadSHA: strings.Repeat("a", 40), BaseSHA: strings.Repeat("b", 40), State: PROpen, Labels: []string{"prflow"},
		Author: "bot", CreatedAt: now, UpdatedAt: now}
}

func samplePush() PushEvent {
	c := PushCommit{Commit: Commit{SHA: strings.Repeat("c", 40), Tree: strings.Repeat("d", 40), Message: "bump\n",
		Author:    Signature{Name: "Bot", Email: "bot@example.com", When: time.Unix(1700000000, 0).UTC()},
		Committer: Signature{Name: "Bot", Email: "bot@example.com", When: time.Unix(1700000000, 0).UTC()}},
		Modified: []string{"apps/web/values.yaml"}}
	return PushEvent{Owner: "acme", Name: "release", Ref: "refs/heads/main", Before: strings.Repeat("b", 40),
		After: c.SHA, Commits: []PushCommit{c}, Pusher: "bot"}
}

func prEvent(action string, mutate func(*PullRequest)) PREvent {
	pr := samplePR()
	if mutate != nil {
		mutate(&pr)
	}
	return PREvent{Action: action, Owner: "acme", Name: "release", PR: pr, Before: strings.Repeat("e", 40), Label: "prflow", Sender: "bot"}
}

func merged(pr *PullRequest) {
	pr.State, pr.MergeCommitSHA, pr.MergedAt, pr.MergedBy = PRMerged, strings.Repeat("f", 40), time.Now(), "bot"
}

func TestGitHubWebhookRequestParsesWithGoGitHub(t *testing.T) {
	tests := []struct {
		name  string
		ev    WebhookEvent
		check func(t *testing.T, ev any)
	}{
		{"opened", prEvent("opened", nil), func(t *testing.T, ev any) {
			e := ev.(*github.PullRequestEvent)
			if e.GetAction() != "opened" || e.GetNumber() != 7 || e.GetPullRequest().GetHead().GetRef() != "prflow/bump" ||
				e.GetRepo().GetFullName() != "acme/release" || e.GetPullRequest().GetHTMLURL() != "https://scm.example.test/acme/release/pull/7" {
				t.Errorf("event = %+v", e)
			}
		}},
		{"synchronize", prEvent("synchronize", nil), func(t *testing.T, ev any) {
			e := ev.(*github.PullRequestEvent)
			if e.GetAction() != "synchronize" || e.GetBefore() != strings.Repeat("e", 40) || e.GetAfter() != strings.Repeat("a", 40) {
				t.Errorf("before/after = %s/%s", e.GetBefore(), e.GetAfter())
			}
		}},
		{"closed merged", prEvent("closed", merged), func(t *testing.T, ev any) {
			e := ev.(*github.PullRequestEvent)
			if e.GetAction() != "closed" || !e.GetPullRequest().GetMerged() || e.GetPullRequest().GetMergeCommitSHA() != strings.Repeat("f", 40) {
				t.Errorf("merged event = %+v", e.GetPullRequest())
			}
		}},
		{"labeled", prEvent("labeled", nil), func(t *testing.T, ev any) {
			if e := ev.(*github.PullRequestEvent); e.GetLabel().GetName() != "prflow" {
				t.Errorf("label = %v", e.GetLabel())
			}
		}},
		{"push", samplePush(), func(t *testing.T, ev any) {
			e := ev.(*github.PushEvent)
			if e.GetRef() != "refs/heads/main" || e.GetAfter() != strings.Repeat("c", 40) || len(e.Commits) != 1 ||
				e.Commits[0].Modified[0] != "apps/web/values.yaml" || e.GetHeadCommit().GetID() != strings.Repeat("c", 40) {
				t.Errorf("push = %+v", e)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := GitHubWebhookRequest(context.Background(), "http://receiver.test/hook", "s3cret", tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			payload, err := github.ValidatePayload(req, []byte("s3cret"))
			if err != nil {
				t.Fatalf("signature: %v", err)
			}
			if github.DeliveryID(req) == "" || !strings.HasPrefix(req.Header.Get("X-Hub-Signature-256"), "sha256=") {
				t.Errorf("headers = %v", req.Header)
			}
			ev, err := github.ParseWebHook(github.WebHookType(req), payload)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, ev)
		})
	}
	req, _ := GitHubWebhookRequest(context.Background(), "http://receiver.test/hook", "s3cret", samplePush())
	if _, err := github.ValidatePayload(req, []byte("wrong")); err == nil {
		t.Error("payload validated with the wrong secret")
	}
	if _, err := GitHubWebhookRequest(context.Background(), "http://receiver.test/hook", "s", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil event: %v", err)
	}
}

func TestGitLabWebhookRequestParsesWithClientGo(t *testing.T) {
	tests := []struct {
		name, wantAction string
		ev               PREvent
	}{
		{"opened", "open", prEvent("opened", nil)},
		{"synchronize", "update", prEvent("synchronize", nil)},
		{"closed merged", "merge", prEvent("closed", merged)},
		{"closed", "close", prEvent("closed", func(p *PullRequest) { p.State = PRClosed })},
		{"labeled", "update", prEvent("labeled", nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := GitLabWebhookRequest(context.Background(), "http://receiver.test/hook", "tok", tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if gitlab.HookEventToken(req) != "tok" || req.Header.Get("X-Gitlab-Event-UUID") == "" {
				t.Fatalf("headers = %v", req.Header)
			}
			body, _ := io.ReadAll(req.Body)
			ev, err := gitlab.ParseWebhook(gitlab.HookEventType(req), body)
			if err != nil {
				t.Fatal(err)
			}
			e := ev.(*gitlab.MergeEvent)
			a := e.ObjectAttributes
			if a.Action != tc.wantAction || a.IID != 7 || a.SourceBranch != "prflow/bump" || a.LastCommit.ID != strings.Repeat("a", 40) ||
				e.Project.PathWithNamespace != "acme/release" {
				t.Errorf("attributes = %+v", a)
			}
			if tc.name == "synchronize" && a.OldRev != strings.Repeat("e", 40) {
				t.Errorf("oldrev = %q", a.OldRev)
			}
			if tc.name == "labeled" && (len(e.Changes.Labels.Current) != 1 || len(e.Changes.Labels.Previous) != 0) {
				t.Errorf("label changes = %+v", e.Changes.Labels)
			}
			if tc.name == "closed merged" && (a.State != "merged" || a.MergeCommitSHA != strings.Repeat("f", 40)) {
				t.Errorf("merged attributes = %+v", a)
			}
		})
	}
	req, err := GitLabWebhookRequest(context.Background(), "http://receiver.test/hook", "tok", samplePush())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	ev, err := gitlab.ParseWebhook(gitlab.HookEventType(req), body)
	if err != nil {
		t.Fatal(err)
	}
	if p := ev.(*gitlab.PushEvent); p.Ref != "refs/heads/main" || len(p.Commits) != 1 || p.Commits[0].Modified[0] != "apps/web/values.yaml" || p.TotalCommitsCount != 1 {
		t.Errorf("push = %+v", p)
	}
}

func TestBitbucketWebhookRequestKeysAndSignature(t *testing.T) {
	tests := []struct {
		ev      WebhookEvent
		wantKey string
	}{
		{prEvent("opened", nil), "pullrequest:created"},
		{prEvent("synchronize", nil), "pullrequest:updated"},
		{prEvent("closed", merged), "pullrequest:fulfilled"},
		{prEvent("closed", func(p *PullRequest) { p.State = PRClosed }), "pullrequest:rejected"},
		{samplePush(), "repo:push"},
	}
	for _, tc := range tests {
		t.Run(tc.wantKey, func(t *testing.T) {
			req, err := BitbucketWebhookRequest(context.Background(), "http://receiver.test/hook", "s3cret", tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(req.Body)
			if err := github.ValidateSignature(req.Header.Get("X-Hub-Signature"), body, []byte("s3cret")); err != nil {
				t.Fatalf("signature: %v", err)
			}
			if req.Header.Get("X-Event-Key") != tc.wantKey || req.Header.Get("X-Request-UUID") == "" {
				t.Fatalf("headers = %v", req.Header)
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			if tc.wantKey == "repo:push" {
				change := dig(m, "push").(map[string]any)["changes"].([]any)[0]
				if dig(change, "new", "target", "hash") != strings.Repeat("c", 40) || dig(change, "new", "name") != "main" {
					t.Errorf("push change = %v", change)
				}
				return
			}
			if dig(m, "pullrequest", "id") != float64(7) || dig(m, "pullrequest", "source", "branch", "name") != "prflow/bump" ||
				dig(m, "repository", "full_name") != "acme/release" {
				t.Errorf("payload = %v", m)
			}
		})
	}
	req, _ := BitbucketWebhookRequest(context.Background(), "http://receiver.test/hook", "", samplePush())
	if req.Header.Get("X-Hub-Signature") != "" {
		t.Error("signed without a secret")
	}
	if _, err := BitbucketWebhookRequest(context.Background(), "::bad url", "s", samplePush()); err == nil {
		t.Error("bad URL accepted")
	}
	var _ http.Handler = (*Bitbucket)(nil)
}

// hookEvents is what a test's webhook receiver saw, in the order it arrived.
type hookEvents struct {
	mu  sync.Mutex
	got []string
}

func (h *hookEvents) add(event string) {
	h.mu.Lock()
	h.got = append(h.got, event)
	h.mu.Unlock()
}

// want waits until f has sent every delivery, then compares what arrived with want (the
// events joined by commas).
func (h *hookEvents) want(t *testing.T, f *Forge, want string) {
	t.Helper()
	if err := f.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := strings.Join(h.got, ","); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}
