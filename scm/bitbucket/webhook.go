package bitbucket

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prflow/prflow/scm"
)

// DefaultMaxWebhookBody caps webhook bodies when WebhookParser.MaxBody is zero.
const DefaultMaxWebhookBody = scm.DefaultMaxWebhookBody

// Webhook header names sent by Bitbucket Cloud.
const (
	headerEvent     = "X-Event-Key"
	headerDelivery  = "X-Request-UUID"
	headerSignature = "X-Hub-Signature" // sha256=<hex>, unlike GitHub's SHA-1 header of that name
)

// WebhookParser verifies and normalises Bitbucket Cloud webhooks (repo:push and
// pullrequest:*). The zero value is ready to use and refuses unsigned deliveries.
type WebhookParser struct {
	// MaxBody limits the request body in bytes; 0 means DefaultMaxWebhookBody.
	MaxBody int64
	// AllowUnsigned accepts deliveries without a signature when the secret is empty (local
	// development only); a configured secret is always enforced.
	AllowUnsigned bool
	// Now stamps Event.Received; nil means time.Now.
	Now func() time.Time
}

var _ scm.WebhookParser = (*WebhookParser)(nil)

// ParseWebhook verifies X-Hub-Signature (HMAC-SHA256) in constant time and returns the
// normalised event. A push carrying several branch updates yields the first branch update;
// tag pushes and other event keys return (nil, nil).
//
// go-bitbucket has no webhook types, so the payloads are decoded here. Bitbucket Cloud has no
// labels and no draft-ready event: pullrequest:updated (pushes and edits alike) is
// "synchronized", and no labeled, unlabeled, edited, ready_for_review or converted_to_draft
// action is ever sent.
func (p *WebhookParser) ParseWebhook(r *http.Request, secret []byte) (*scm.Event, error) {
	h, err := scm.ReadHook(r, Name, headerEvent, headerDelivery, p.MaxBody)
	if err != nil {
		return nil, err
	}
	if err := scm.VerifyHMACSHA256(headerSignature, r.Header.Get(headerSignature), h.Body, secret, p.AllowUnsigned); err != nil {
		return nil, h.Errorf("%w", err)
	}
	var ev *scm.Event
	switch h.Kind {
	case "":
		return nil, h.Errorf("missing %s header", headerEvent)
	case "repo:push":
		ev, err = parsePush(h.Body)
	case "pullrequest:created", "pullrequest:updated", "pullrequest:fulfilled", "pullrequest:rejected":
		ev, err = parsePullRequestEvent(h.Kind, h.Body)
	case "repo:commit_status_created", "repo:commit_status_updated":
		ev, err = parseCommitStatusEvent(h.Body)
	default:
		return nil, nil
	}
	return h.Finish(ev, err, p.Now)
}

type hookRepo struct {
	FullName string `json:"full_name"`
}

type hookActor struct {
	Nickname    string `json:"nickname"`
	DisplayName string `json:"display_name"`
}

func (a *hookActor) name() string {
	if a == nil {
		return ""
	}
	if a.Nickname != "" {
		return a.Nickname
	}
	return a.DisplayName
}

type hookRefState struct {
	Type   string `json:"type"` // branch, tag, named_branch, bookmark
	Name   string `json:"name"`
	Target struct {
		Hash string `json:"hash"`
	} `json:"target"`
}

type hookPush struct {
	Actor      *hookActor `json:"actor"`
	Repository *hookRepo  `json:"repository"`
	Push       struct {
		Changes []struct {
			New *hookRefState `json:"new"`
			Old *hookRefState `json:"old"`
		} `json:"changes"`
	} `json:"push"`
}

type hookPREvent struct {
	Actor       *hookActor `json:"actor"`
	Repository  *hookRepo  `json:"repository"`
	PullRequest *apiPR     `json:"pullrequest"`
}

func isBranch(s *hookRefState) bool {
	return s != nil && (s.Type == "branch" || s.Type == "named_branch") && s.Name != ""
}

func parsePush(data []byte) (*scm.Event, error) {
	var p hookPush
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	for _, c := range p.Push.Changes {
		if !isBranch(c.New) && !isBranch(c.Old) {
			continue // tag or bookmark
		}
		ev := &scm.Event{
			Kind:   scm.EventPush,
			Repo:   scm.Repo(p.Repository.FullName),
			Sender: p.Actor.name(),
		}
		if c.Old != nil {
			ev.Branch, ev.Before = c.Old.Name, c.Old.Target.Hash
		}
		if isBranch(c.New) {
			ev.Branch, ev.After = c.New.Name, c.New.Target.Hash
		} else {
			ev.Deleted = true // Bitbucket sends new: null (and closed: true) for a deleted branch
		}
		return ev, nil
	}
	return nil, nil
}

func parsePullRequestEvent(kind string, data []byte) (*scm.Event, error) {
	var p hookPREvent
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	pr := p.PullRequest
	if pr == nil {
		return nil, errors.New("payload has no pullrequest")
	}
	if pr.ID <= 0 {
		return nil, fmt.Errorf("payload has an invalid pullrequest.id %d", pr.ID)
	}
	var action scm.PRAction
	switch kind {
	case "pullrequest:created":
		action = scm.PROpened
	case "pullrequest:updated":
		// Bitbucket sends updated for pushes and for edits alike; consumers re-read the PR.
		action = scm.PRSynchronize
	case "pullrequest:fulfilled":
		action = scm.PRMergedEvt
	case "pullrequest:rejected":
		action = scm.PRClosedOnly
	}
	out := convertPR(pr)
	return &scm.Event{
		Kind:   scm.EventPullRequest,
		Repo:   scm.Repo(p.Repository.FullName),
		Sender: p.Actor.name(),
		Action: action,
		PR:     out,
	}, nil
}
