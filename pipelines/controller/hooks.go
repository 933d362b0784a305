package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
)

// DefaultMaxWebhookBody bounds webhook bodies when the config sets no maxBody.
const DefaultMaxWebhookBody = 1 << 20

// Webhooks is the server's webhook configuration (--webhooks FILE):
//
//	webhooks:
//	  - provider: github            # github | gitlab | bitbucket; served at /hooks/<provider>
//	    secret: env:GITHUB_WEBHOOK_SECRET   # or file:PATH; GitLab: the X-Gitlab-Token value
//	maxBody: 1MiB                   # optional, bytes
//
// Secrets are held as connector.Secret: they print as [redacted] and never reach a log or error.
type Webhooks struct {
	MaxBody int64
	secrets map[string]connector.Secret
}

// NewWebhooks builds a configuration in code (tests, `prflow dev`): provider → secret.
func NewWebhooks(maxBody int64, secrets map[string]string) *Webhooks {
	w := &Webhooks{MaxBody: maxBody, secrets: map[string]connector.Secret{}}
	for p, s := range secrets {
		w.secrets[p] = connector.NewSecret(s)
	}
	return w
}

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
			Provider yaml.Node `yaml:"provider"`
			Secret   yaml.Node `yaml:"secret"`
		} `yaml:"webhooks"`
		MaxBody int64 `yaml:"maxBody"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("webhooks file %s: %w", path, err)
	}
	if len(doc.Webhooks) == 0 {
		return nil, fmt.Errorf("webhooks file %s: webhooks: want a list of {provider, secret}", path)
	}
	if doc.MaxBody < 0 {
		return nil, fmt.Errorf("webhooks file %s: maxBody: must be ≥ 0", path)
	}
	w := &Webhooks{MaxBody: doc.MaxBody, secrets: map[string]connector.Secret{}}
	var errs []error
	for i, h := range doc.Webhooks {
		at := func(n *yaml.Node, field string) string {
			return fmt.Sprintf("%s:%d: webhooks[%d].%s", path, n.Line, i, field)
		}
		p := h.Provider.Value
		switch p {
		case "github", "gitlab", "bitbucket":
		default:
			errs = append(errs, fmt.Errorf("%s: %q is not github, gitlab or bitbucket", at(&h.Provider, "provider"), p))
			continue
		}
		if _, dup := w.secrets[p]; dup {
			errs = append(errs, fmt.Errorf("%s: %s is configured twice", at(&h.Provider, "provider"), p))
			continue
		}
		if h.Secret.Value == "" {
			errs = append(errs, fmt.Errorf("%s: required (env:NAME or file:PATH)", at(&h.Secret, "secret")))
			continue
		}
		s, err := connector.ResolveSecretRef(h.Secret.Value, filepath.Dir(path), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at(&h.Secret, "secret"), err))
			continue
		}
		w.secrets[p] = s
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return w, nil
}

// SetWebhooks enables /hooks/<provider> for the configured providers (nil disables them).
func (c *Controller) SetWebhooks(w *Webhooks) { c.webhooks.Store(w) }

// hookResponse is what /hooks/* answers.
type hookResponse struct {
	Status     string `json:"status"` // queued, duplicate, ignored
	DeliveryID string `json:"deliveryId,omitempty"`
	Subject    string `json:"subject,omitempty"`
}

// serveHook verifies a forge webhook, normalises it and publishes it to PRFLOW_SCM with the
// delivery id as Nats-Msg-Id, then answers at once; the SCM consumer does the rest. A bad or
// missing signature is 401, a malformed body 400, an oversized one 413: nothing is published.
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
	var parser scm.WebhookParser
	switch provider {
	case "github":
		parser = &github.WebhookParser{MaxBody: limit}
	case "gitlab":
		parser = &gitlab.WebhookParser{MaxBody: limit}
	case "bitbucket":
		parser = &bitbucket.WebhookParser{MaxBody: limit}
	}
	ev, err := parser.ParseWebhook(r, []byte(secret.Value()))
	if err != nil {
		code := http.StatusBadRequest
		switch {
		case errors.Is(err, scm.ErrBadSignature):
			code = http.StatusUnauthorized
		case errors.Is(err, scm.ErrTooLarge):
			code = http.StatusRequestEntityTooLarge
		}
		c.log.Warn("webhook rejected", "provider", provider, "status", code, "err", err, "remote", r.RemoteAddr)
		if code == http.StatusUnauthorized {
			err = errors.New("webhook signature missing or invalid")
		}
		writeErr(w, code, err)
		return
	}
	if ev == nil {
		writeJSON(w, http.StatusAccepted, hookResponse{Status: "ignored"})
		return
	}
	data, _ := json.Marshal(ev)
	subj := queue.SCMSubject(provider, string(ev.Kind))
	ack, err := c.conn.JS.Publish(r.Context(), subj, data, jetstream.WithMsgID(provider+"/"+ev.DeliveryID))
	if err != nil {
		c.log.Error("webhook not queued", "provider", provider, "delivery", ev.DeliveryID, "err", err)
		writeErr(w, http.StatusServiceUnavailable, errors.New("could not queue the event; the forge will redeliver"))
		return
	}
	resp := hookResponse{Status: "queued", DeliveryID: ev.DeliveryID, Subject: subj}
	if ack.Duplicate {
		resp.Status = "duplicate"
	}
	c.log.Info("webhook", "provider", provider, "kind", ev.Kind, "repo", ev.Repo, "delivery", ev.DeliveryID, "status", resp.Status)
	writeJSON(w, http.StatusAccepted, resp)
}
