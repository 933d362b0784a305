package github

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
)

// DefaultMaxWebhookBody caps webhook bodies when WebhookParser.MaxBody is zero. GitHub itself
// truncates payloads at 25 MB, but the events prflow consumes are far below 1 MiB.
const DefaultMaxWebhookBody = 1 << 20

// Webhook header names sent by GitHub and GitHub Enterprise.
const (
	headerEvent     = "X-GitHub-Event"
	headerDelivery  = "X-GitHub-Delivery"
	headerSignature = "X-Hub-Signature-256"
)

// WebhookParser verifies and normalises GitHub webhooks (push and pull_request). The zero
// value is ready to use and refuses unsigned deliveries.
type WebhookParser struct {
	// MaxBody limits the request body in bytes; 0 means DefaultMaxWebhookBody.
	MaxBody int64
	// AllowUnsigned accepts deliveries without a signature when the secret is empty. It
	// exists for local development only; a configured secret is always enforced.
	AllowUnsigned bool
	// Now stamps Event.Received; nil means time.Now.
	Now func() time.Time
}

var _ scm.WebhookParser = (*WebhookParser)(nil)

// ParseWebhook verifies X-Hub-Signature-256 in constant time and returns the normalised event.
// Event kinds prflow does not use (ping, issues, tag pushes, …) return (nil, nil).
func (p *WebhookParser) ParseWebhook(r *http.Request, secret []byte) (*scm.Event, error) {
	kind := r.Header.Get(headerEvent)
	where := "github webhook"
	if kind != "" {
		where += " " + kind
	}
	delivery := r.Header.Get(headerDelivery)
	if delivery != "" {
		where += " (delivery " + delivery + ")"
	}
	body, err := scm.ReadWebhookBody(r, p.maxBody())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := scm.VerifyHMACSHA256(headerSignature, r.Header.Get(headerSignature), body, secret, p.AllowUnsigned); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if kind == "" {
		return nil, fmt.Errorf("%s: missing %s header", where, headerEvent)
	}
	payload, err := jsonPayload(r.Header.Get("Content-Type"), body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if delivery == "" {
		// Redeliveries of the same body must still deduplicate downstream.
		sum := sha256.Sum256(body)
		delivery = "sha256:" + hex.EncodeToString(sum[:])
	}
	var ev *scm.Event
	switch kind {
	case "push":
		ev, err = parsePush(payload)
	case "pull_request":
		ev, err = parsePullRequestEvent(payload)
	case "status", "check_run", "check_suite":
		ev, err = parseStatusEvent(kind, payload)
	default:
		return nil, nil
	}
	if err != nil || ev == nil {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return nil, nil
	}
	ev.Provider = Name
	ev.DeliveryID = delivery
	ev.Received = p.now()
	return ev, nil
}

func (p *WebhookParser) maxBody() int64 {
	if p.MaxBody > 0 {
		return p.MaxBody
	}
	return DefaultMaxWebhookBody
}

func (p *WebhookParser) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// jsonPayload returns the JSON document; GitHub hooks may be configured to send it as the
// "payload" field of a form.
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

type hookRepo struct {
	FullName string `json:"full_name"`
}

type hookUser struct {
	Login string `json:"login"`
}

type hookCommit struct {
	Added    []string `json:"added"`
	Removed  []string `json:"removed"`
	Modified []string `json:"modified"`
}

type hookPush struct {
	Ref        string       `json:"ref"`
	Before     string       `json:"before"`
	After      string       `json:"after"`
	Repository *hookRepo    `json:"repository"`
	Sender     hookUser     `json:"sender"`
	Commits    []hookCommit `json:"commits"`
}

type hookBranch struct {
	Ref string `json:"ref"`
	SHA string `json:"sha"`
}

type hookLabel struct {
	Name string `json:"name"`
}

type hookPR struct {
	Number         int         `json:"number"`
	Title          string      `json:"title"`
	Body           *string     `json:"body"`
	State          string      `json:"state"`
	Draft          bool        `json:"draft"`
	Merged         bool        `json:"merged"`
	MergeCommitSHA *string     `json:"merge_commit_sha"`
	Mergeable      *bool       `json:"mergeable"`
	MergeableState string      `json:"mergeable_state"`
	HTMLURL        string      `json:"html_url"`
	Head           hookBranch  `json:"head"`
	Base           hookBranch  `json:"base"`
	Labels         []hookLabel `json:"labels"`
}

type hookPREvent struct {
	Action      string     `json:"action"`
	PullRequest *hookPR    `json:"pull_request"`
	Label       *hookLabel `json:"label"`
	Repository  *hookRepo  `json:"repository"`
	Sender      hookUser   `json:"sender"`
}

func parsePush(data []byte) (*scm.Event, error) {
	var p hookPush
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	branch, ok := strings.CutPrefix(p.Ref, "refs/heads/")
	if !ok || branch == "" {
		return nil, nil // tag pushes and odd refs are not used
	}
	var changed []string
	seen := map[string]bool{}
	for _, c := range p.Commits {
		for _, list := range [][]string{c.Added, c.Modified, c.Removed} {
			for _, f := range list {
				if !seen[f] {
					seen[f] = true
					changed = append(changed, f)
				}
			}
		}
	}
	return &scm.Event{
		Kind:    scm.EventPush,
		Repo:    scm.Repo(p.Repository.FullName),
		Sender:  p.Sender.Login,
		Branch:  branch,
		Before:  p.Before,
		After:   p.After,
		Changed: changed,
	}, nil
}

func parsePullRequestEvent(data []byte) (*scm.Event, error) {
	var p hookPREvent
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	if p.PullRequest == nil {
		return nil, errors.New("payload has no pull_request")
	}
	if p.PullRequest.Number <= 0 {
		return nil, fmt.Errorf("payload has an invalid pull_request.number %d", p.PullRequest.Number)
	}
	var action scm.PRAction
	switch p.Action {
	case "opened", "reopened":
		action = scm.PROpened
	case "synchronize":
		action = scm.PRSynchronize
	case "closed":
		action = scm.PRClosedOnly
		if p.PullRequest.Merged {
			action = scm.PRMergedEvt
		}
	case "labeled":
		action = scm.PRLabeled
	default:
		return nil, nil
	}
	pr := p.PullRequest
	out := &scm.PullRequest{
		Number:       pr.Number,
		Title:        pr.Title,
		State:        prState(pr.State, pr.Merged),
		Draft:        pr.Draft,
		Head:         pr.Head.Ref,
		Base:         pr.Base.Ref,
		HeadSHA:      pr.Head.SHA,
		Mergeability: mergeability(pr.Mergeable, pr.MergeableState),
		URL:          pr.HTMLURL,
	}
	if pr.Body != nil {
		out.Body = *pr.Body
	}
	if pr.Merged && pr.MergeCommitSHA != nil {
		out.MergeSHA = *pr.MergeCommitSHA
	}
	for _, l := range pr.Labels {
		out.Labels = append(out.Labels, l.Name)
	}
	ev := &scm.Event{
		Kind:   scm.EventPullRequest,
		Repo:   scm.Repo(p.Repository.FullName),
		Sender: p.Sender.Login,
		Action: action,
		PR:     out,
	}
	if action == scm.PRLabeled && p.Label != nil {
		ev.Label = p.Label.Name
	}
	return ev, nil
}
