package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
	"github.com/prflow/prflow/yamlconf"
)

// DefaultMaxWebhookBody bounds webhook bodies when the config sets no maxBody: GitHub's 25 MB
// payload cap (GitHub does not redeliver a delivery that was refused).
const DefaultMaxWebhookBody = scm.DefaultMaxWebhookBody

// WebhookStore is the JetStream object store bucket that holds normalised events too large
// for one NATS message (a push of thousands of commits); PRFLOW_SCM then carries a stub that
// names the object. Objects live as long as the stream keeps events.
const WebhookStore = "PRFLOW_SCM_EVENTS"

// Webhooks is the server's webhook configuration (--webhooks FILE):
//
//	webhooks:
//	  - provider: github            # github | gitlab | bitbucket; served at /hooks/<provider>
//	    secret: env:GITHUB_WEBHOOK_SECRET   # or file:PATH; GitLab: the X-Gitlab-Token value
//	maxBody: 26214400               # optional: the body limit as a number of bytes; 0 or
//	                                # unset means 25 MiB (GitHub's cap)
//	readBudget: 67108864            # optional: body bytes read at once across requests; 0 or
//	                                # unset means 64 MiB; at least maxBody
//
// Secrets are held as connector.Secret: they print as [redacted] and never reach a log or error.
type Webhooks struct {
	MaxBody int64
	secrets map[string]connector.Secret
	budget  *scm.ReadBudget
}

// DefaultWebhookReadBudget bounds the webhook body bytes read and parsed at once when the
// config sets no readBudget: two bodies at the default limit.
const DefaultWebhookReadBudget = scm.DefaultWebhookReadBudget

// NewWebhooks builds a configuration in code (tests, `prflow dev`): provider → secret, with
// the default read budget (SetReadBudget changes it).
func NewWebhooks(maxBody int64, secrets map[string]string) *Webhooks {
	w := &Webhooks{MaxBody: maxBody, secrets: map[string]connector.Secret{}, budget: scm.NewReadBudget(0)}
	for p, s := range secrets {
		w.secrets[p] = connector.NewSecret(s)
	}
	return w
}

// SetReadBudget replaces the read budget with one of n bytes (0: the default). Call it
// before the configuration serves requests.
func (w *Webhooks) SetReadBudget(n int64) { w.budget = scm.NewReadBudget(n) }

// ReadBudget is the budget the configuration's webhooks share: how many body bytes are being
// read and parsed right now, out of how many.
func (w *Webhooks) ReadBudget() *scm.ReadBudget { return w.budget }

// Providers lists the configured providers.
func (w *Webhooks) Providers() []string {
	var out []string
	for _, p := range []string{"github", "gitlab", "bitbucket"} {
		if _, ok := w.secrets[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

// LoadWebhooks reads a webhooks file. Errors name file:line and the field, never a secret.
func LoadWebhooks(path string) (*Webhooks, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("webhooks file: %w", err)
	}
	var doc struct {
		Webhooks []struct {
			Provider string `yaml:"provider"`
			Secret   string `yaml:"secret"`
		} `yaml:"webhooks" want:"a list of {provider, secret}"`
		MaxBody    int64 `yaml:"maxBody"`
		ReadBudget int64 `yaml:"readBudget"`
	}
	d, err := yamlconf.Load(path, data, &doc, "webhooks: [{provider, secret}]")
	if d == nil || d.Root == nil {
		return nil, err
	}
	if len(doc.Webhooks) == 0 && !d.Bad("webhooks") {
		d.Errorf("webhooks", "want a list of {provider, secret}")
	}
	if doc.MaxBody < 0 {
		d.Errorf("maxBody", "must be ≥ 0")
	}
	maxBody := doc.MaxBody
	if maxBody <= 0 {
		maxBody = DefaultMaxWebhookBody
	}
	switch {
	case doc.ReadBudget < 0:
		d.Errorf("readBudget", "must be ≥ 0")
	case doc.ReadBudget > 0 && doc.ReadBudget < maxBody:
		d.Errorf("readBudget", "%d is less than the %d byte body limit (maxBody): no delivery at the limit could ever be read", doc.ReadBudget, maxBody)
	}
	w := &Webhooks{MaxBody: doc.MaxBody, secrets: map[string]connector.Secret{}, budget: scm.NewReadBudget(max(doc.ReadBudget, 0))}
	for i, h := range doc.Webhooks {
		at := yamlconf.Index("webhooks", i)
		if d.Bad(at) {
			continue
		}
		p := h.Provider
		switch p {
		case "github", "gitlab", "bitbucket":
		default:
			d.Errorf(at+".provider", "%q is not github, gitlab or bitbucket", p)
			continue
		}
		if _, dup := w.secrets[p]; dup {
			d.Errorf(at+".provider", "%s is configured twice", p)
			continue
		}
		if h.Secret == "" {
			if !d.Bad(at + ".secret") {
				d.Errorf(at+".secret", "required (env:NAME or file:PATH)")
			}
			continue
		}
		s, err := connector.ResolveSecretRef(h.Secret, filepath.Dir(path), nil)
		if err != nil {
			d.Errorf(at+".secret", "%v", err)
			continue
		}
		w.secrets[p] = s
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return w, nil
}

// SetWebhooks enables /hooks/<provider> for the configured providers (nil disables them).
func (c *Controller) SetWebhooks(w *Webhooks) { c.webhooks.Store(w) }

// hookRemoteHeader carries the address a webhook came from on its PRFLOW_SCM message.
const hookRemoteHeader = "Prflow-Remote"

// hookResponse is what /hooks/* answers.
type hookResponse struct {
	Status     string `json:"status"` // queued (one event or more was new), duplicate, ignored
	DeliveryID string `json:"deliveryId,omitempty"`
	Subject    string `json:"subject,omitempty"`
	// Events are the events the delivery carried (one per branch of a push, per action of a
	// GitLab merge request update) and whether each was queued or a duplicate.
	Events []hookEventStatus `json:"events,omitempty"`
}

// hookEventStatus is one event of a delivery in the /hooks/* answer.
type hookEventStatus struct {
	Kind   string `json:"kind"`
	Branch string `json:"branch,omitempty"`
	Action string `json:"action,omitempty"`
	Label  string `json:"label,omitempty"`
	Status string `json:"status"` // queued, duplicate
}

// hookRetryAfter is the Retry-After (seconds) of a webhook refused because the read budget
// is full: long enough for the bodies being read to finish.
const hookRetryAfter = "10"

// serveHook verifies a forge webhook, normalises it and publishes it to PRFLOW_SCM with the
// delivery id as Nats-Msg-Id, then answers at once; the SCM consumer does the rest. A bad or
// missing signature is 401, a malformed body 400, an oversized one 413, one that would take
// the server over its read budget 503 with Retry-After, a body not sent within the server's
// read timeout 408: nothing is published. Unsigned, oversized and over-budget requests are
// refused before their body is read.
func (c *Controller) serveHook(w http.ResponseWriter, r *http.Request) {
	provider := r.PathValue("provider")
	cfg := c.webhooks.Load()
	var secret connector.Secret
	ok := false
	if cfg != nil {
		secret, ok = cfg.secrets[provider]
	}
	if !ok {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no webhook configured for %q", provider))
		return
	}
	limit := cfg.MaxBody
	if limit <= 0 {
		limit = DefaultMaxWebhookBody
	}
	settings := scm.WebhookSettings{MaxBody: limit, Budget: cfg.budget}
	var parser scm.WebhookParser
	switch provider {
	case "github":
		p := github.WebhookParser(settings)
		parser = &p
	case "gitlab":
		p := gitlab.WebhookParser(settings)
		parser = &p
	case "bitbucket":
		p := bitbucket.WebhookParser(settings)
		parser = &p
	}
	evs, err := parser.ParseWebhook(r, []byte(secret.Value()))
	if err != nil {
		code := http.StatusBadRequest
		switch {
		case errors.Is(err, scm.ErrBadSignature):
			code = http.StatusUnauthorized
		case errors.Is(err, scm.ErrTooLarge):
			code = http.StatusRequestEntityTooLarge
		case errors.Is(err, scm.ErrBusy), errors.Is(err, scm.ErrSpill):
			code = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", hookRetryAfter)
		case errors.Is(err, os.ErrDeadlineExceeded):
			code = http.StatusRequestTimeout
		}
		c.log.Warn("webhook rejected", "provider", provider, "status", code, "err", err, "remote", r.RemoteAddr)
		c.recordHookRejected(r, provider, code) // audit.go
		if code == http.StatusUnauthorized {
			err = errors.New("webhook signature missing or invalid")
		}
		writeErr(w, code, err)
		drainRefused(w, r, limit)
		return
	}
	if len(evs) == 0 {
		writeJSON(w, http.StatusAccepted, hookResponse{Status: "ignored"})
		return
	}
	// One delivery may carry several changes (a Bitbucket push of several branches): each is
	// published on its own, so each starts its runs. If one cannot be queued the forge is told
	// to redeliver; the events already queued are then duplicates.
	resp := hookResponse{Status: "duplicate", DeliveryID: evs[0].DeliveryID}
	for _, ev := range evs {
		subj := queue.SCMSubject(provider, string(ev.Kind))
		data, err := c.eventMessage(r.Context(), ev)
		var ack *jetstream.PubAck
		if err == nil {
			// The dedupe key is the delivery with what the event is about: a redelivery is a
			// duplicate, another event of the same delivery (GitLab reuses delivery ids, a
			// Bitbucket push names several branches) is not.
			// The remote address travels with the event for its audit entry (webhook.accepted),
			// written once the consumer knows which runs the event started.
			msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{hookRemoteHeader: []string{r.RemoteAddr}}}
			ack, err = c.conn.JS.PublishMsg(r.Context(), msg, jetstream.WithMsgID(ev.DedupeKey()))
		}
		if err != nil {
			c.log.Error("webhook not queued", "provider", provider, "delivery", ev.DeliveryID, "event", ev.DedupeKey(), "err", err)
			writeErr(w, http.StatusServiceUnavailable, errors.New("could not queue the event: redeliver it from the forge's webhook settings"))
			return
		}
		status := "queued"
		if ack.Duplicate {
			status = "duplicate"
		} else {
			resp.Status = "queued"
		}
		if resp.Subject == "" {
			resp.Subject = subj
		}
		resp.Events = append(resp.Events, hookEventStatus{Kind: string(ev.Kind), Branch: ev.Branch, Action: string(ev.Action), Label: ev.Label, Status: status})
		c.log.Info("webhook", "provider", provider, "kind", ev.Kind, "repo", ev.Repo, "branch", ev.Branch, "action", ev.Action,
			"delivery", ev.DeliveryID, "status", status)
	}
	writeJSON(w, http.StatusAccepted, resp)
}

// drainRefused discards what is left of a refused delivery's body once the answer is out, so
// that a sender still writing it reads the 401 or 503 (and its Retry-After) rather than a
// connection reset: net/http discards only 256 KiB of an unread body before closing. Nothing
// is kept, the server's body deadline bounds how long it takes, and a body declared over the
// limit is not drained.
func drainRefused(w http.ResponseWriter, r *http.Request, limit int64) {
	if r.Body == nil || r.ContentLength > limit {
		return
	}
	_ = http.NewResponseController(w).Flush()
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, limit+1))
}

// eventMessage encodes ev for PRFLOW_SCM. An event larger than the connection's max payload
// is put in the WebhookStore object store and the message carries a stub naming it.
func (c *Controller) eventMessage(ctx context.Context, ev *scm.Event) ([]byte, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	// Leave room for the headers (Nats-Msg-Id) that travel in the same message.
	if int64(len(data)) <= c.conn.NC.MaxPayload()-4096 {
		return data, nil
	}
	store, err := c.webhookStore(ctx)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(ev.DedupeKey()))
	name := hex.EncodeToString(sum[:])
	if _, err := store.PutBytes(ctx, name, data); err != nil {
		return nil, fmt.Errorf("store %d-byte event in %s: %w", len(data), WebhookStore, err)
	}
	stub := scm.Event{Provider: ev.Provider, DeliveryID: ev.DeliveryID, Kind: ev.Kind, Repo: ev.Repo, Sender: ev.Sender,
		Branch: ev.Branch, Before: ev.Before, After: ev.After, Deleted: ev.Deleted, Action: ev.Action, Label: ev.Label,
		Received: ev.Received, SHA: ev.SHA, StoredAs: name}
	c.log.Info("webhook event stored in the object store", "provider", ev.Provider, "delivery", ev.DeliveryID,
		"bytes", len(data), "object", name)
	return json.Marshal(&stub)
}

func (c *Controller) webhookStore(ctx context.Context) (jetstream.ObjectStore, error) {
	store, err := c.conn.JS.ObjectStore(ctx, WebhookStore)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		store, err = c.conn.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: WebhookStore,
			Description: "normalised webhook events too large for one PRFLOW_SCM message",
			TTL:         7 * 24 * time.Hour, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) { // another replica made it first
			store, err = c.conn.JS.ObjectStore(ctx, WebhookStore)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", WebhookStore, err)
	}
	return store, nil
}

// loadStoredEvent replaces a stub (ev.StoredAs set) with the event it names; others are left
// as they are.
func (c *Controller) loadStoredEvent(ctx context.Context, ev *scm.Event) error {
	if ev.StoredAs == "" {
		return nil
	}
	store, err := c.webhookStore(ctx)
	if err != nil {
		return err
	}
	data, err := store.GetBytes(ctx, ev.StoredAs)
	if err != nil {
		return fmt.Errorf("%s event %s: load %s from %s: %w", ev.Provider, ev.DeliveryID, ev.StoredAs, WebhookStore, err)
	}
	var full scm.Event
	if err := json.Unmarshal(data, &full); err != nil {
		return fmt.Errorf("%s event %s: stored object %s: %w", ev.Provider, ev.DeliveryID, ev.StoredAs, err)
	}
	if full.DeliveryID != ev.DeliveryID || full.Provider != ev.Provider {
		return fmt.Errorf("%s event %s: stored object %s holds delivery %s/%s", ev.Provider, ev.DeliveryID, ev.StoredAs, full.Provider, full.DeliveryID)
	}
	*ev = full
	return nil
}
