package github

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
)

// DefaultMaxWebhookBody caps webhook bodies when WebhookParser.MaxBody is zero: GitHub's own
// 25 MB payload cap (a push of thousands of commits comes close; GitHub does not redeliver a
// refused one).
const DefaultMaxWebhookBody = scm.DefaultMaxWebhookBody

// Webhook header names sent by GitHub and GitHub Enterprise.
const (
	headerEvent     = "X-GitHub-Event" // gh.EventTypeHeader, spelled as GitHub documents it
	headerDelivery  = "X-GitHub-Delivery"
	headerSignature = gh.SHA256SignatureHeader
)

// WebhookParser verifies and normalises GitHub webhooks (push, pull_request, status and
// checks). The zero value is ready to use and refuses unsigned deliveries.
type WebhookParser scm.WebhookSettings

var _ scm.WebhookParser = (*WebhookParser)(nil)

// hookFormat is how GitHub signs, names and shapes its webhooks.
var hookFormat = &scm.HookFormat{
	Provider:        Name,
	EventHeader:     headerEvent,
	DeliveryHeaders: []string{headerDelivery},
	SignatureHeader: headerSignature,
	// GitHub sends one delivery per pushed ref and per PR action: never more than one event.
	Parse: func(r *http.Request, h *scm.Hook) ([]*scm.Event, error) { return scm.OneEvent(parseHook(r, h)) },
}

// ParseWebhook verifies X-Hub-Signature-256 (HMAC-SHA256) in constant time and returns the
// normalised event, decoded by go-github's ParseWebHook. Event kinds prflow does not use
// (ping, issues, tag pushes, …) return (nil, nil).
//
// go-github's decoding costs more than the hand-written structs it replaced (measured with
// BenchmarkParseWebhook* on a loaded 2-core machine: about 2× the time and 2-6× the
// allocations, ≈0.5 ms for a PR event and ≈0.1 s for a 2,048-commit push). That is far below
// the rate forges deliver at, so one maintained decoder wins over a second one.
func (p *WebhookParser) ParseWebhook(r *http.Request, secret []byte) ([]*scm.Event, error) {
	return scm.WebhookSettings(*p).Parse(r, secret, hookFormat)
}

func parseHook(r *http.Request, h *scm.Hook) (*scm.Event, error) {
	switch h.Kind {
	case "push", "pull_request", "status", "check_run", "check_suite":
	default:
		return nil, nil
	}
	payload, err := jsonPayload(r.Header.Get("Content-Type"), h.Body)
	if err != nil {
		return nil, err
	}
	parsed, err := gh.ParseWebHook(h.Kind, payload)
	if err != nil {
		parsed, err = parseRead(h.Kind, payload, err)
		if err != nil {
			return nil, err
		}
	}
	return normalise(parsed)
}

// normalise turns a payload decoded by go-github into prflow's event.
func normalise(parsed any) (*scm.Event, error) {
	switch e := parsed.(type) {
	case *gh.PushEvent:
		return normPush(e)
	case *gh.PullRequestEvent:
		return normPullRequest(e)
	case *gh.StatusEvent:
		return normStatus(e)
	case *gh.CheckRunEvent:
		return normCheckRun(e)
	case *gh.CheckSuiteEvent:
		return normCheckSuite(e)
	}
	return nil, nil
}

// readFields are the payload fields prflow reads, per event kind: a nested key means "keep
// this object, with only these fields"; nil keeps the value whole. Arrays apply the element's
// fields to each element. TestParseWebhookOctokitExamples checks that dropping everything else
// changes no event.
var readFields = func() map[string]fields {
	common := fields{"action": nil, "repository": {"full_name": nil}, "sender": {"login": nil}}
	with := func(more fields) fields {
		out := fields{}
		for k, v := range common {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	return map[string]fields{
		"push": with(fields{"ref": nil, "before": nil, "after": nil, "deleted": nil,
			"commits": {"added": nil, "modified": nil, "removed": nil}}),
		"pull_request": with(fields{"label": {"name": nil}, "pull_request": {"number": nil, "title": nil, "body": nil,
			"state": nil, "merged": nil, "draft": nil, "head": {"ref": nil, "sha": nil}, "base": {"ref": nil},
			"mergeable": nil, "mergeable_state": nil, "html_url": nil, "merge_commit_sha": nil, "labels": {"name": nil}}}),
		"status":      with(fields{"sha": nil, "context": nil, "state": nil}),
		"check_run":   with(fields{"check_run": {"head_sha": nil, "name": nil, "status": nil, "conclusion": nil}}),
		"check_suite": with(fields{"check_suite": {"head_sha": nil, "status": nil, "conclusion": nil}}),
	}
}()

type fields map[string]fields

// parseRead decodes a payload go-github refused (strictErr) again with only the fields prflow
// reads: GitHub does not redeliver a refused delivery, so a malformed field prflow never looks
// at (an odd app.created_at in a check_run) must not lose the event. A malformed field prflow
// does read is still an error.
func parseRead(kind string, payload []byte, strictErr error) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, scm.WebhookJSONError(strictErr) // not JSON at all: say what go-github said
	}
	slim, err := json.Marshal(keepFields(doc, readFields[kind]))
	if err != nil {
		return nil, scm.WebhookJSONError(strictErr)
	}
	parsed, err := gh.ParseWebHook(kind, slim)
	if err != nil {
		return nil, scm.WebhookJSONError(err)
	}
	return parsed, nil
}

// keepFields returns v with only the fields f names (f nil: all of v).
func keepFields(v any, f fields) any {
	if f == nil {
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(f))
		for k, sub := range f {
			if fv, ok := x[k]; ok {
				out[k] = keepFields(fv, sub)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = keepFields(e, f)
		}
		return out
	}
	return v // a scalar where an object was expected: go-github will say so
}

// jsonPayload returns the JSON document; GitHub hooks may be configured to send it as the
// "payload" field of a form. (go-github's ValidatePayloadFromBody does this too, but refuses
// any content type spelled other than exactly "application/json".)
func jsonPayload(contentType string, body []byte) ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("malformed form body: %w", err)
	}
	p := form.Get("payload")
	if p == "" {
		return nil, errors.New(`form body has no "payload" field`)
	}
	return []byte(p), nil
}

func repoName(r interface{ GetFullName() string }) (scm.Repo, error) {
	if n := r.GetFullName(); n != "" {
		return scm.Repo(n), nil
	}
	return "", errors.New("payload has no repository.full_name")
}

func normPush(p *gh.PushEvent) (*scm.Event, error) {
	repo, err := repoName(p.GetRepo())
	if err != nil {
		return nil, err
	}
	branch, ok := scm.BranchOfRef(p.GetRef())
	if !ok {
		return nil, nil // tag pushes and odd refs are not used
	}
	var lists [][]string
	for _, c := range p.Commits {
		lists = append(lists, c.Added, c.Modified, c.Removed)
	}
	deleted := p.GetDeleted() || (p.After != nil && scm.IsZeroSHA(p.GetAfter()))
	return &scm.Event{
		Kind:    scm.EventPush,
		Repo:    repo,
		Sender:  p.GetSender().GetLogin(),
		Branch:  branch,
		Before:  p.GetBefore(),
		After:   p.GetAfter(),
		Changed: scm.ChangedPaths(lists...),
		Deleted: deleted,
		// GitHub lists at most maxPushCommits commits (with their files) and no total count.
		ChangedIncomplete: !deleted && len(p.Commits) >= maxPushCommits,
	}, nil
}

// maxPushCommits is how many commits a GitHub push webhook lists at most.
const maxPushCommits = 2048

// prActions maps GitHub's pull_request actions to prflow's; others (assigned, review_requested,
// locked, …) are ignored.
var prActions = map[string]scm.PRAction{
	"opened": scm.PROpened, "reopened": scm.PROpened, "synchronize": scm.PRSynchronize,
	"labeled": scm.PRLabeled, "unlabeled": scm.PRUnlabeled, "edited": scm.PREdited,
	"ready_for_review": scm.PRReady, "converted_to_draft": scm.PRToDraft,
}

func normPullRequest(p *gh.PullRequestEvent) (*scm.Event, error) {
	repo, err := repoName(p.GetRepo())
	if err != nil {
		return nil, err
	}
	pr := p.PullRequest
	if pr == nil {
		return nil, errors.New("payload has no pull_request")
	}
	if pr.GetNumber() <= 0 {
		return nil, fmt.Errorf("payload has an invalid pull_request.number %d", pr.GetNumber())
	}
	action, ok := prActions[p.GetAction()]
	if p.GetAction() == "closed" {
		action, ok = scm.PRClosedOnly, true
		if pr.GetMerged() {
			action = scm.PRMergedEvt
		}
	}
	if !ok {
		return nil, nil
	}
	out := convertPR(pr)
	ev := &scm.Event{
		Kind:   scm.EventPullRequest,
		Repo:   repo,
		Sender: p.GetSender().GetLogin(),
		Action: action,
		PR:     out,
	}
	if action == scm.PRLabeled || action == scm.PRUnlabeled {
		ev.Label = p.GetLabel().GetName()
	}
	return ev, nil
}
