package scm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

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
	// Pull request
	Action   PRAction     `json:"action,omitempty"`
	PR       *PullRequest `json:"pr,omitempty"`
	Label    string       `json:"label,omitempty"` // for labeled
	Received time.Time    `json:"received"`

	// Status: a commit status or check finished (or changed) on SHA.
	SHA     string      `json:"sha,omitempty"`
	Context string      `json:"context,omitempty"` // status context, check name, pipeline
	State   StatusState `json:"state,omitempty"`
}

// ErrBadSignature is returned when a webhook's signature or token is missing or wrong.
var ErrBadSignature = errors.New("webhook signature missing or invalid")

// ErrTooLarge is returned when a webhook body exceeds the size limit.
var ErrTooLarge = errors.New("webhook body too large")

// WebhookParser verifies and parses one forge's webhooks. Ignored event kinds return (nil, nil).
type WebhookParser interface {
	ParseWebhook(r *http.Request, secret []byte) (*Event, error)
}

// ReadWebhookBody reads a webhook body of at most limit bytes; a larger one is ErrTooLarge.
func ReadWebhookBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil {
		return nil, errors.New("empty body")
	}
	if r.ContentLength > limit {
		return nil, fmt.Errorf("body of %d bytes exceeds the %d byte limit: %w", r.ContentLength, limit, ErrTooLarge)
	}
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("body exceeds the %d byte limit: %w", limit, ErrTooLarge)
		}
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}

// VerifyHMACSHA256 checks a "sha256=<hex HMAC-SHA256(body)>" signature header (GitHub's
// X-Hub-Signature-256, Bitbucket Cloud's X-Hub-Signature) in constant time. Without a secret
// it fails unless allowUnsigned (dev setups) is set.
func VerifyHMACSHA256(headerName, header string, body, secret []byte, allowUnsigned bool) error {
	if len(secret) == 0 {
		if allowUnsigned {
			return nil
		}
		return fmt.Errorf("no webhook secret configured: %w", ErrBadSignature)
	}
	if header == "" {
		return fmt.Errorf("missing %s header: %w", headerName, ErrBadSignature)
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return fmt.Errorf("%s is not of the form sha256=<hex>: %w", headerName, ErrBadSignature)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("%s is not hex: %w", headerName, ErrBadSignature)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("%s does not match the body: %w", headerName, ErrBadSignature)
	}
	return nil
}

// DecodeWebhookJSON decodes a webhook payload; errors say where the payload is malformed.
func DecodeWebhookJSON(data []byte, v any) error {
	err := json.Unmarshal(data, v)
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
