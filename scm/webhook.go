package scm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// EventKind is the kind of a normalised webhook event.
type EventKind string

const (
	EventPush        EventKind = "push"
	EventPullRequest EventKind = "pull_request"
	EventStatus      EventKind = "status" // commit status / check run finished
)

// PRAction is what happened to a PR.
type PRAction string

const (
	PROpened      PRAction = "opened"
	PRSynchronize PRAction = "synchronized"
	PRClosedOnly  PRAction = "closed" // closed without merge
	PRMergedEvt   PRAction = "merged"
	PRLabeled     PRAction = "labeled"
	PRUnlabeled   PRAction = "unlabeled"
	PREdited      PRAction = "edited"             // title, body or base branch changed
	PRReady       PRAction = "ready_for_review"   // a draft was marked ready
	PRToDraft     PRAction = "converted_to_draft" // a ready PR went back to draft
)

// PRActions lists every PRAction a trigger may name, in the order docs list them.
var PRActions = []PRAction{PROpened, PRSynchronize, PRMergedEvt, PRClosedOnly, PRLabeled, PRUnlabeled, PREdited, PRReady, PRToDraft}

// ZeroSHA is the commit id forges send as a push's after (or before) when the branch was
// deleted (or created).
const ZeroSHA = "0000000000000000000000000000000000000000"

// DefaultMaxWebhookBody bounds webhook bodies when a parser or the server sets no limit: GitHub
// caps payloads at 25 MB and does not redeliver one that was refused, so the limit is its cap.
const DefaultMaxWebhookBody = 25 << 20

// Event is one forge webhook, normalised across GitHub, GitLab and Bitbucket.
type Event struct {
	Provider   string    `json:"provider"`
	DeliveryID string    `json:"deliveryId"`
	Kind       EventKind `json:"kind"`
	Repo       Repo      `json:"repo"`
	Sender     string    `json:"sender,omitempty"`
	// Push
	Branch  string   `json:"branch,omitempty"`
	Before  string   `json:"before,omitempty"`
	After   string   `json:"after,omitempty"`
	Changed []string `json:"changed,omitempty"` // paths added/modified/removed, when the forge sends them
	// ChangedIncomplete is set when Changed may miss paths the push changed: Bitbucket push
	// webhooks list no files, GitLab's list only the newest 20 commits, GitHub's at most 2,048.
	ChangedIncomplete bool `json:"changedIncomplete,omitempty"`
	// Deleted is set on the push that deleted Branch (after is the zero SHA or absent).
	Deleted bool `json:"deleted,omitempty"`
	// Pull request
	Action   PRAction     `json:"action,omitempty"`
	PR       *PullRequest `json:"pr,omitempty"`
	Label    string       `json:"label,omitempty"` // for labeled and unlabeled: the label added or removed
	Received time.Time    `json:"received"`

	// StoredAs names the object (in the server's webhook object store) that holds the whole
	// event when it was too large for one NATS message; the message then carries only this
	// stub. Readers load the event back before using it.
	StoredAs string `json:"storedAs,omitempty"`

	// Status: a commit status or check finished (or changed) on SHA.
	SHA     string      `json:"sha,omitempty"`
	Context string      `json:"context,omitempty"` // status context, check name, pipeline
	State   StatusState `json:"state,omitempty"`
}

// ErrBadSignature is returned when a webhook's signature or token is missing or wrong.
var ErrBadSignature = errors.New("webhook signature missing or invalid")

// ErrTooLarge is returned when a webhook body exceeds the size limit.
var ErrTooLarge = errors.New("webhook body too large")

// WebhookParser verifies and parses one forge's webhooks. Ignored event kinds return no event
// (nil, nil). One delivery may carry several changes (a Bitbucket push that moves several
// branches, a GitLab merge request update with new commits and a label): each is its own event,
// in the order the payload lists them, all with the delivery's id (DedupeKey tells them apart).
type WebhookParser interface {
	ParseWebhook(r *http.Request, secret []byte) ([]*Event, error)
}

// WebhookSettings are the settings every forge's webhook parser takes. Each driver's
// WebhookParser is this type with the forge's ParseWebhook, so the zero value is ready to use
// and refuses unsigned deliveries.
type WebhookSettings struct {
	// MaxBody limits the request body in bytes; 0 means DefaultMaxWebhookBody.
	MaxBody int64
	// AllowUnsigned accepts deliveries without a signature or token when the secret is empty.
	// It exists for local development only; a configured secret is always enforced.
	AllowUnsigned bool
	// Now stamps Event.Received; nil means time.Now.
	Now func() time.Time
	// MemBody is how much of a body is held in memory while it is read and verified; the rest
	// is spilled to a temporary file in TempDir ("" means os.TempDir()) and only loaded once
	// the signature matched. 0 means DefaultWebhookMemBody.
	MemBody int64
	TempDir string
	// Budget, when set, bounds the body bytes read and parsed at once across requests (one
	// budget shared by every parser of a server): a request over it is ErrBusy, unread.
	Budget *ReadBudget
}

// HookFormat is what one forge's webhooks differ in: headers, signature scheme and payloads.
type HookFormat struct {
	Provider    string
	EventHeader string
	// DeliveryHeaders name the delivery id; the first one the request carries is used.
	DeliveryHeaders []string
	// SignatureHeader carries the signature or token.
	SignatureHeader string
	// Token, when set, makes SignatureHeader a shared token (GitLab's X-Gitlab-Token) that
	// Token compares with the secret before any body byte is read. Without it the header is
	// "sha256=<hex HMAC-SHA256 of the body>" (GitHub, Bitbucket Cloud): its form is checked
	// before the body is read and the HMAC while it is read.
	Token func(headerName, token string, secret []byte) error
	// Parse normalises a verified hook that names its event into one event per change it
	// carries; none (nil, nil) ignores it.
	Parse func(r *http.Request, h *Hook) ([]*Event, error)
}

// Parse reads, verifies and normalises one webhook in format f. Everything that can be
// refused without the body is, before a byte of it is read: no secret, a missing or malformed
// signature header, a wrong GitLab token, a Content-Length over MaxBody, a full Budget. The
// body is then read with its HMAC computed as it arrives (past MemBody into a temporary file,
// removed before Parse returns) and handed to the forge's parser only once the HMAC matched.
// Errors name the forge, event and delivery.
func (s WebhookSettings) Parse(r *http.Request, secret []byte, f *HookFormat) ([]*Event, error) {
	delivery := f.DeliveryHeaders[len(f.DeliveryHeaders)-1]
	for _, name := range f.DeliveryHeaders {
		if r.Header.Get(name) != "" {
			delivery = name
			break
		}
	}
	h := newHook(r, f.Provider, f.EventHeader, delivery)
	want, err := s.expectedMAC(r, secret, f)
	if err != nil {
		return nil, h.Errorf("%w", err)
	}
	release, err := s.readVerified(r, h, f, secret, want)
	defer release() // held through the parse: the decoded payload is the larger part
	if err != nil {
		return nil, h.Errorf("%w", err)
	}
	if h.Kind == "" {
		return nil, h.Errorf("missing %s header", f.EventHeader)
	}
	evs, err := f.Parse(r, h)
	return h.Finish(evs, err, s.Now)
}

// DecodeWebhookJSON decodes a webhook payload; errors say where the payload is malformed.
func DecodeWebhookJSON(data []byte, v any) error {
	return WebhookJSONError(json.Unmarshal(data, v))
}

// WebhookJSONError words a JSON decoding error (ours or a forge client's) by where the payload
// is malformed; nil stays nil.
func WebhookJSONError(err error) error {
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("malformed JSON at byte %d: %w", syn.Offset, err)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Errorf("malformed JSON: field %q has type %s, want %s", typ.Field, typ.Value, typ.Type)
	}
	return fmt.Errorf("malformed JSON: %w", err)
}

// DedupeKey identifies one event for de-duplication: the delivery id with what the event is
// about. A redelivery has the same key; a different event that reuses a delivery id (GitLab
// sends one X-Gitlab-Event-UUID for the hooks one action fans out to) does not.
func (e *Event) DedupeKey() string {
	var obj string
	switch e.Kind {
	case EventPush:
		obj = e.Branch + "@" + e.After
		if e.Deleted {
			obj = e.Branch + "@deleted"
		}
	case EventPullRequest:
		n := 0
		if e.PR != nil {
			n = e.PR.Number
		}
		obj = fmt.Sprintf("#%d/%s", n, e.Action)
		if e.Label != "" {
			obj += "/" + e.Label
		}
	case EventStatus:
		obj = e.SHA + "/" + e.Context + "/" + string(e.State)
	}
	return e.Provider + "/" + e.DeliveryID + "/" + string(e.Kind) + "/" + obj
}

// Hook is one webhook request as every forge parser first reads it: its event name and
// delivery id headers and its body, read within the size limit. The parts that differ per forge
// (signature scheme, payload shapes) stay in the driver packages.
type Hook struct {
	Provider string
	Kind     string // the event name header's value
	Delivery string // the delivery id header's value, or a digest of the body when absent
	Body     []byte
	where    string
}

// ReadHook reads r's event name and delivery headers and its body (at most maxBody bytes; 0
// means DefaultMaxWebhookBody) without verifying anything. Errors name the forge, event and
// delivery.
func ReadHook(r *http.Request, provider, eventHeader, deliveryHeader string, maxBody int64) (*Hook, error) {
	h := newHook(r, provider, eventHeader, deliveryHeader)
	release, err := WebhookSettings{MaxBody: maxBody}.readVerified(r, h, nil, nil, nil)
	release()
	if err != nil {
		return nil, h.Errorf("%w", err)
	}
	return h, nil
}

func newHook(r *http.Request, provider, eventHeader, deliveryHeader string) *Hook {
	h := &Hook{Provider: provider, Kind: r.Header.Get(eventHeader), Delivery: r.Header.Get(deliveryHeader)}
	h.where = provider + " webhook"
	if h.Kind != "" {
		h.where += " " + h.Kind
	}
	if h.Delivery != "" {
		h.where += " (delivery " + h.Delivery + ")"
	}
	return h
}

// Errorf wraps an error with the webhook it is about (forge, event, delivery).
func (h *Hook) Errorf(format string, args ...any) error {
	return fmt.Errorf(h.where+": "+format, args...)
}

// Finish stamps parsed events with the forge, delivery id and receive time; no event (ignored
// kind) or an error is passed through, the error wrapped with where it came from.
func (h *Hook) Finish(evs []*Event, err error, now func() time.Time) ([]*Event, error) {
	if err != nil {
		return nil, h.Errorf("%w", err)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	if now == nil {
		now = time.Now
	}
	at := now()
	for _, ev := range evs {
		ev.Provider = h.Provider
		ev.DeliveryID = h.Delivery
		ev.Received = at
	}
	return evs, nil
}

// OneEvent is a driver's parse result for a payload that carries at most one change.
func OneEvent(ev *Event, err error) ([]*Event, error) {
	if err != nil || ev == nil {
		return nil, err
	}
	return []*Event{ev}, nil
}

// ChangedPaths merges the added, modified and removed lists of a push's commits, first seen
// first, without repeats.
func ChangedPaths(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, list := range lists {
		for _, f := range list {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// IsZeroSHA reports whether sha is absent or the all-zero id forges use for "no commit".
func IsZeroSHA(sha string) bool { return strings.Trim(sha, "0") == "" }

// BranchOfRef returns the branch a pushed ref names; tags and other refs give false.
func BranchOfRef(ref string) (string, bool) {
	b, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok || b == "" {
		return "", false
	}
	return b, true
}
