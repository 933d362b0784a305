package bitbucket

import (
	"errors"
	"fmt"
	"net/http"

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
type WebhookParser scm.WebhookSettings

var _ scm.WebhookParser = (*WebhookParser)(nil)

// hookFormat is how Bitbucket Cloud signs, names and shapes its webhooks.
var hookFormat = &scm.HookFormat{
	Provider:        Name,
	EventHeader:     headerEvent,
	DeliveryHeaders: []string{headerDelivery},
	SignatureHeader: headerSignature,
	Parse:           parseHook,
}

// ParseWebhook verifies X-Hub-Signature (HMAC-SHA256) in constant time and returns the
// normalised events. A push carrying several branch updates (one git push of several refs)
// yields one event per branch, in the payload's order; tag pushes and other event keys
// return (nil, nil).
//
// go-bitbucket has no webhook types, so the payloads are decoded here. Bitbucket Cloud has no
// labels and no draft-ready event: pullrequest:updated (pushes and edits alike) is
// "synchronized", and no labeled, unlabeled, edited, ready_for_review or converted_to_draft
// action is ever sent.
func (p *WebhookParser) ParseWebhook(r *http.Request, secret []byte) ([]*scm.Event, error) {
	return scm.WebhookSettings(*p).Parse(r, secret, hookFormat)
}

func parseHook(_ *http.Request, h *scm.Hook) ([]*scm.Event, error) {
	switch h.Kind {
	case "repo:push":
		return parsePush(h.Body)
	case "repo:commit_status_created", "repo:commit_status_updated":
		return scm.OneEvent(parseCommitStatusEvent(h.Body))
	}
	if _, ok := prActions[h.Kind]; ok {
		return scm.OneEvent(parsePullRequestEvent(h.Kind, h.Body))
	}
	return nil, nil
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

// hookHead is what every Bitbucket event names: who acted, in which repository.
type hookHead struct {
	Actor      *hookActor `json:"actor"`
	Repository *hookRepo  `json:"repository"`
}

func (h *hookHead) head() *hookHead { return h }

// decodeHook decodes a payload into p and returns the event's repository and sender; a
// payload without repository.full_name is an error.
func decodeHook(data []byte, p interface{ head() *hookHead }) (*scm.Event, error) {
	if err := scm.DecodeWebhookJSON(data, p); err != nil {
		return nil, err
	}
	h := p.head()
	if h.Repository == nil || h.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	return &scm.Event{Repo: scm.Repo(h.Repository.FullName), Sender: h.Actor.name()}, nil
}

type hookPush struct {
	hookHead
	Push struct {
		Changes []struct {
			New *hookRefState `json:"new"`
			Old *hookRefState `json:"old"`
		} `json:"changes"`
	} `json:"push"`
}

type hookPREvent struct {
	hookHead
	PullRequest *apiPR `json:"pullrequest"`
}

func isBranch(s *hookRefState) bool {
	return s != nil && (s.Type == "branch" || s.Type == "named_branch") && s.Name != ""
}

func parsePush(data []byte) ([]*scm.Event, error) {
	var p hookPush
	base, err := decodeHook(data, &p)
	if err != nil {
		return nil, err
	}
	var out []*scm.Event
	seen := map[string]int{}
	for i, c := range p.Push.Changes {
		if !isBranch(c.New) && !isBranch(c.Old) {
			continue // tag or bookmark
		}
		ev := &scm.Event{Repo: base.Repo, Sender: base.Sender, Kind: scm.EventPush}
		if c.Old != nil {
			ev.Branch, ev.Before = c.Old.Name, c.Old.Target.Hash
		}
		if isBranch(c.New) {
			ev.Branch, ev.After = c.New.Name, c.New.Target.Hash
			ev.ChangedIncomplete = true // Bitbucket push webhooks list commits, never their files
		} else {
			ev.Deleted = true // Bitbucket sends new: null (and closed: true) for a deleted branch
		}
		if j, dup := seen[ev.Branch]; dup {
			// One git push moves a ref once; two changes of one branch cannot both be right.
			return nil, fmt.Errorf("push.changes[%d] changes branch %q again (after push.changes[%d])", i, ev.Branch, j)
		}
		seen[ev.Branch] = i
		out = append(out, ev)
	}
	return out, nil
}

// prActions maps the pullrequest:* event keys prflow uses to its actions. Bitbucket sends
// updated for pushes and for edits alike; consumers re-read the PR.
var prActions = map[string]scm.PRAction{
	"pullrequest:created":   scm.PROpened,
	"pullrequest:updated":   scm.PRSynchronize,
	"pullrequest:fulfilled": scm.PRMergedEvt,
	"pullrequest:rejected":  scm.PRClosedOnly,
}

func parsePullRequestEvent(kind string, data []byte) (*scm.Event, error) {
	var p hookPREvent
	ev, err := decodeHook(data, &p)
	if err != nil {
		return nil, err
	}
	pr := p.PullRequest
	if pr == nil {
		return nil, errors.New("payload has no pullrequest")
	}
	if pr.ID <= 0 {
		return nil, fmt.Errorf("payload has an invalid pullrequest.id %d", pr.ID)
	}
	ev.Kind, ev.Action, ev.PR = scm.EventPullRequest, prActions[kind], convertPR(pr)
	return ev, nil
}
