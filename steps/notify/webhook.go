package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// Headers of webhook deliveries.
const (
	// SignatureHeader carries "sha256=" + the hex HMAC-SHA256 of the body under the channel's
	// secret (the scheme GitHub webhooks use), so a receiver can check the sender.
	SignatureHeader = "X-Prflow-Signature"
	// DeliveryHeader is the notification id: the same on every delivery of one event to one
	// channel, so a receiver can drop a repeat.
	DeliveryHeader = "X-Prflow-Delivery"
	// EventHeader is the event (run.failed, …).
	EventHeader = "X-Prflow-Event"
)

// webhook posts the notification as JSON, signed.
type webhook struct {
	url, key connector.Secret
	client   *http.Client
}

func (w *webhook) secrets() []string { return []string{w.url.Value(), w.key.Value()} }

func (w *webhook) send(ctx context.Context, n steps.Notification) error {
	data, err := json.Marshal(n)
	if err != nil {
		return steps.Terminal(err)
	}
	return post(ctx, w.client, w.url.Value(), data, map[string]string{
		SignatureHeader: Sign(w.key.Value(), data), DeliveryHeader: n.ID, EventHeader: n.Event})
}

// Sign is the signature header value of body under key.
func Sign(key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// post sends a JSON body. 2xx is success; 408, 429 and 5xx, timeouts and network errors are
// transient; any other status is terminal. Errors never contain the URL (it is a secret).
func post(ctx context.Context, client *http.Client, target string, data []byte, headers map[string]string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(data))
	if err != nil {
		return steps.Terminalf("the configured URL does not parse")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "prflow")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text holds the URL
		}
		return fmt.Errorf("POST to the channel's URL: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return steps.Terminalf("the receiver refused the notification: %s", resp.Status)
}
