package gitlab

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
)

// DefaultMaxWebhookBody caps webhook bodies when WebhookParser.MaxBody is zero.
const DefaultMaxWebhookBody = 1 << 20

// Webhook header names sent by GitLab (SaaS and self-managed).
const (
	headerEvent    = "X-Gitlab-Event"
	headerToken    = "X-Gitlab-Token"
	headerDelivery = "X-Gitlab-Event-UUID"
)

// WebhookParser verifies and normalises GitLab webhooks (push and merge request, also when
// sent as system hooks). The zero value is ready to use and refuses deliveries without a token.
type WebhookParser struct {
	// MaxBody limits the request body in bytes; 0 means DefaultMaxWebhookBody.
	MaxBody int64
	// AllowUnsigned accepts deliveries without a token when the secret is empty (local
	// development only); a configured secret is always enforced.
	AllowUnsigned bool
	// Now stamps Event.Received; nil means time.Now.
	Now func() time.Time
}

var _ scm.WebhookParser = (*WebhookParser)(nil)

// ParseWebhook checks X-Gitlab-Token against secret in constant time and returns the
// normalised event. Other hook kinds (tag push, notes, pipelines, …) return (nil, nil).
func (p *WebhookParser) ParseWebhook(r *http.Request, secret []byte) (*scm.Event, error) {
	kind := r.Header.Get(headerEvent)
	where := "gitlab webhook"
	if kind != "" {
		where += " " + strings.ToLower(kind)
	}
	delivery := r.Header.Get(headerDelivery)
	if delivery != "" {
		where += " (delivery " + delivery + ")"
	}
	body, err := scm.ReadWebhookBody(r, p.maxBody())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := verifyToken(r.Header.Get(headerToken), secret, p.AllowUnsigned); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	switch kind {
	case "Push Hook", "Merge Request Hook", "System Hook", "Pipeline Hook":
	case "":
		return nil, fmt.Errorf("%s: missing %s header", where, headerEvent)
	default:
		return nil, nil
	}
	var head struct {
		ObjectKind string `json:"object_kind"`
	}
	if err := scm.DecodeWebhookJSON(body, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if delivery == "" {
		sum := sha256.Sum256(body)
		delivery = "sha256:" + hex.EncodeToString(sum[:])
	}
	var ev *scm.Event
	switch head.ObjectKind {
	case "push":
		ev, err = parsePush(body)
	case "merge_request":
		ev, err = parseMergeRequestEvent(body)
	case "pipeline":
		ev, err = parsePipelineEvent(body)
	case "":
		return nil, fmt.Errorf("%s: payload has no object_kind", where)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if ev == nil {
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

// verifyToken compares digests of the token and the secret so that neither the content nor
// the length of the secret leaks through timing.
func verifyToken(token string, secret []byte, allowUnsigned bool) error {
	if len(secret) == 0 {
		if allowUnsigned {
			return nil
		}
		return fmt.Errorf("no webhook secret configured: %w", scm.ErrBadSignature)
	}
	if token == "" {
		return fmt.Errorf("missing %s header: %w", headerToken, scm.ErrBadSignature)
	}
	got := sha256.Sum256([]byte(token))
	want := sha256.Sum256(secret)
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return fmt.Errorf("%s does not match: %w", headerToken, scm.ErrBadSignature)
	}
	return nil
}

type hookProject struct {
	PathWithNamespace string `json:"path_with_namespace"`
}

type hookCommit struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Removed  []string `json:"removed"`
}

type hookPush struct {
	Ref          string       `json:"ref"`
	Before       string       `json:"before"`
	After        string       `json:"after"`
	UserUsername string       `json:"user_username"`
	Project      *hookProject `json:"project"`
	Commits      []hookCommit `json:"commits"`
}

type hookLabel struct {
	Title string `json:"title"`
}

type hookMRAttrs struct {
	IID                 int         `json:"iid"`
	Title               string      `json:"title"`
	Description         string      `json:"description"`
	State               string      `json:"state"`
	Action              string      `json:"action"`
	SourceBranch        string      `json:"source_branch"`
	TargetBranch        string      `json:"target_branch"`
	MergeCommitSHA      string      `json:"merge_commit_sha"`
	MergeStatus         string      `json:"merge_status"`
	DetailedMergeStatus string      `json:"detailed_merge_status"`
	URL                 string      `json:"url"`
	Draft               bool        `json:"draft"`
	WorkInProgress      bool        `json:"work_in_progress"`
	OldRev              string      `json:"oldrev"`
	Labels              []hookLabel `json:"labels"`
	LastCommit          struct {
		ID string `json:"id"`
	} `json:"last_commit"`
}

type hookMREvent struct {
	User *struct {
		Username string `json:"username"`
	} `json:"user"`
	Project          *hookProject `json:"project"`
	ObjectAttributes *hookMRAttrs `json:"object_attributes"`
	Labels           []hookLabel  `json:"labels"`
	Changes          struct {
		Labels *struct {
			Previous []hookLabel `json:"previous"`
			Current  []hookLabel `json:"current"`
		} `json:"labels"`
	} `json:"changes"`
}

func parsePush(data []byte) (*scm.Event, error) {
	var p hookPush
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Project == nil || p.Project.PathWithNamespace == "" {
		return nil, errors.New("payload has no project.path_with_namespace")
	}
	branch, ok := strings.CutPrefix(p.Ref, "refs/heads/")
	if !ok || branch == "" {
		return nil, nil
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
		Repo:    scm.Repo(p.Project.PathWithNamespace),
		Sender:  p.UserUsername,
		Branch:  branch,
		Before:  p.Before,
		After:   p.After,
		Changed: changed,
	}, nil
}

func parseMergeRequestEvent(data []byte) (*scm.Event, error) {
	var p hookMREvent
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Project == nil || p.Project.PathWithNamespace == "" {
		return nil, errors.New("payload has no project.path_with_namespace")
	}
	a := p.ObjectAttributes
	if a == nil {
		return nil, errors.New("payload has no object_attributes")
	}
	if a.IID <= 0 {
		return nil, fmt.Errorf("payload has an invalid object_attributes.iid %d", a.IID)
	}
	var action scm.PRAction
	var label string
	switch a.Action {
	case "open", "reopen":
		action = scm.PROpened
	case "close":
		action = scm.PRClosedOnly
	case "merge":
		action = scm.PRMergedEvt
	case "update":
		// One delivery carries one action: new commits (oldrev set) win over label changes.
		if a.OldRev != "" {
			action = scm.PRSynchronize
		} else if added := addedLabels(p); len(added) > 0 {
			action, label = scm.PRLabeled, added[0]
		} else {
			return nil, nil
		}
	default:
		return nil, nil
	}
	labels := p.Labels
	if len(labels) == 0 {
		labels = a.Labels
	}
	pr := &scm.PullRequest{
		Number:       a.IID,
		Title:        a.Title,
		Body:         a.Description,
		State:        mrState(a.State),
		Draft:        a.Draft || a.WorkInProgress,
		Head:         a.SourceBranch,
		Base:         a.TargetBranch,
		HeadSHA:      a.LastCommit.ID,
		Mergeability: mergeability(a.DetailedMergeStatus, a.MergeStatus, false),
		URL:          a.URL,
	}
	if pr.State == scm.PRMerged {
		pr.MergeSHA = a.MergeCommitSHA
	}
	for _, l := range labels {
		pr.Labels = append(pr.Labels, l.Title)
	}
	ev := &scm.Event{
		Kind:   scm.EventPullRequest,
		Repo:   scm.Repo(p.Project.PathWithNamespace),
		Action: action,
		Label:  label,
		PR:     pr,
	}
	if p.User != nil {
		ev.Sender = p.User.Username
	}
	return ev, nil
}

// addedLabels lists labels present in changes.labels.current but not in .previous.
func addedLabels(p hookMREvent) []string {
	if p.Changes.Labels == nil {
		return nil
	}
	had := map[string]bool{}
	for _, l := range p.Changes.Labels.Previous {
		had[l.Title] = true
	}
	var out []string
	for _, l := range p.Changes.Labels.Current {
		if l.Title != "" && !had[l.Title] {
			out = append(out, l.Title)
		}
	}
	return out
}
