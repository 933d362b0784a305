package scm

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func sign(body, secret []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// testFormat is a forge that signs with HMAC-SHA256, prefers X-Retry-Key over X-Delivery and
// routes "thing" to a parser that records what it was given.
func testFormat(parsed *[]string) *HookFormat {
	return &HookFormat{
		Provider:        "testforge",
		EventHeader:     "X-Event",
		DeliveryHeaders: []string{"X-Retry-Key", "X-Delivery"},
		SignatureHeader: "X-Sig",
		Parse: func(r *http.Request, h *Hook) ([]*Event, error) {
			if parsed != nil {
				*parsed = append(*parsed, h.Kind+":"+string(h.Body))
			}
			switch h.Kind {
			case "thing":
				return []*Event{{Kind: EventPush, Repo: "o/r", Branch: "main"}}, nil
			case "two":
				return []*Event{{Kind: EventPush, Repo: "o/r", Branch: "main"}, {Kind: EventPush, Repo: "o/r", Branch: "dev"}}, nil
			case "broken":
				return nil, fmt.Errorf("payload has no %s", r.Header.Get("X-Missing"))
			}
			return nil, nil
		},
	}
}

func hookReq(kind string, body []byte, headers map[string]string) *http.Request {
	r := httptest.NewRequest("POST", "/hook", bytes.NewReader(body))
	if kind != "" {
		r.Header.Set("X-Event", kind)
	}
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

func TestWebhookSettingsParse(t *testing.T) {
	secret := []byte("s3cret-value")
	body := []byte(`{"ok":true}`)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := WebhookSettings{Now: func() time.Time { return at }}

	var parsed []string
	ev, err := one(s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, secret), "X-Delivery": "d-1"}), secret, testFormat(&parsed)))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Provider != "testforge" || ev.DeliveryID != "d-1" || !ev.Received.Equal(at) || ev.Branch != "main" {
		t.Errorf("event = %+v", ev)
	}
	if len(parsed) != 1 || parsed[0] != `thing:{"ok":true}` {
		t.Errorf("parser saw %q", parsed)
	}

	// The first delivery header the request carries names the delivery.
	ev, err = one(s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, secret), "X-Delivery": "d-2", "X-Retry-Key": "k-2"}), secret, testFormat(nil)))
	if err != nil || ev.DeliveryID != "k-2" {
		t.Errorf("with both delivery headers: %+v, %v", ev, err)
	}
	// None: a digest of the body, so that a redelivery still deduplicates.
	ev, err = one(s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, secret)}), secret, testFormat(nil)))
	if err != nil || !strings.HasPrefix(ev.DeliveryID, "sha256:") {
		t.Errorf("without a delivery header: %+v, %v", ev, err)
	}

	// Kinds the forge's parser does not use are (nil, nil).
	ev, err = one(s.Parse(hookReq("other", body, map[string]string{"X-Sig": sign(body, secret)}), secret, testFormat(nil)))
	if ev != nil || err != nil {
		t.Errorf("ignored kind: %+v, %v", ev, err)
	}

	// Parser errors name the forge, event and delivery.
	_, err = one(s.Parse(hookReq("broken", body, map[string]string{"X-Sig": sign(body, secret), "X-Delivery": "d-9", "X-Missing": "repository"}), secret, testFormat(nil)))
	if err == nil || err.Error() != "testforge webhook broken (delivery d-9): payload has no repository" {
		t.Errorf("parser error = %v", err)
	}
}

func TestWebhookSettingsParseRefusals(t *testing.T) {
	secret := []byte("s3cret-value")
	body := []byte(`{"ok":true}`)
	tests := []struct {
		name     string
		s        WebhookSettings
		kind     string
		sig      string
		secret   []byte
		sentinel error
		msg      string
	}{
		{name: "no secret configured", kind: "thing", sig: sign(body, secret), sentinel: ErrBadSignature, msg: "no webhook secret configured"},
		{name: "missing signature", kind: "thing", secret: secret, sentinel: ErrBadSignature, msg: "missing X-Sig header"},
		{name: "wrong scheme", kind: "thing", sig: "sha1=abcd", secret: secret, sentinel: ErrBadSignature, msg: "X-Sig is not of the form sha256=<hex>"},
		{name: "not hex", kind: "thing", sig: "sha256=zz", secret: secret, sentinel: ErrBadSignature, msg: "X-Sig is not hex"},
		{name: "wrong secret", kind: "thing", sig: sign(body, []byte("other")), secret: secret, sentinel: ErrBadSignature, msg: "X-Sig does not match the body"},
		// The signature is checked before the event header: an unsigned request learns nothing.
		{name: "unsigned and no event", sig: "", secret: secret, sentinel: ErrBadSignature, msg: "missing X-Sig header"},
		{name: "no event header", sig: sign(body, secret), secret: secret, msg: "missing X-Event header"},
		{name: "too large", s: WebhookSettings{MaxBody: 4}, kind: "thing", sig: sign(body, secret), secret: secret, sentinel: ErrTooLarge, msg: "exceeds the 4 byte limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parsed []string
			ev, err := one(tt.s.Parse(hookReq(tt.kind, body, map[string]string{"X-Sig": tt.sig}), tt.secret, testFormat(&parsed)))
			if err == nil || ev != nil {
				t.Fatalf("accepted: %+v", ev)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("err = %v, want %v", err, tt.sentinel)
			}
			if !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), "testforge webhook") {
				t.Errorf("err = %q, want it to name the forge and say %q", err, tt.msg)
			}
			if strings.Contains(err.Error(), string(secret)) {
				t.Errorf("the secret leaked into %q", err)
			}
			if len(parsed) != 0 {
				t.Errorf("a refused hook reached the parser: %q", parsed)
			}
		})
	}
}

func TestWebhookSettingsAllowUnsigned(t *testing.T) {
	body := []byte(`{}`)
	s := WebhookSettings{AllowUnsigned: true}
	ev, err := one(s.Parse(hookReq("thing", body, nil), nil, testFormat(nil)))
	if err != nil || ev == nil {
		t.Fatalf("unsigned delivery with no secret: %+v, %v", ev, err)
	}
	// A configured secret is always enforced.
	_, err = one(s.Parse(hookReq("thing", body, nil), []byte("s"), testFormat(nil)))
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("missing signature with a secret set: %v", err)
	}
	_, err = one(s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, []byte("x"))}), []byte("s"), testFormat(nil)))
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("wrong signature with a secret set: %v", err)
	}
}

// One format value serves concurrent deliveries (the drivers keep theirs in a package variable).
func TestWebhookSettingsParseConcurrent(t *testing.T) {
	secret := []byte("k")
	f := testFormat(nil)
	s := WebhookSettings{}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			body := []byte(fmt.Sprintf(`{"n":%d}`, i))
			ev, err := one(s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, secret), "X-Delivery": fmt.Sprint(i)}), secret, f))
			if err != nil {
				errs <- err
				return
			}
			if ev.DeliveryID != fmt.Sprint(i) {
				errs <- fmt.Errorf("delivery %d came back as %q", i, ev.DeliveryID)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A token format (GitLab) is checked from the header alone: Token runs only with a secret and
// a header, and a wrong token is refused before the body is read.
func TestWebhookSettingsTokenFormat(t *testing.T) {
	calls := 0
	f := testFormat(nil)
	f.Token = func(name, token string, secret []byte) error {
		calls++
		if token != string(secret) {
			return fmt.Errorf("%s does not match: %w", name, ErrBadSignature)
		}
		return nil
	}
	body := []byte(`{}`)
	if _, err := (WebhookSettings{AllowUnsigned: true}).Parse(hookReq("thing", body, nil), nil, f); err != nil || calls != 0 {
		t.Errorf("allowUnsigned without secret: %v, %d checks", err, calls)
	}
	if _, err := (WebhookSettings{}).Parse(hookReq("thing", body, map[string]string{"X-Sig": "v"}), nil, f); !errors.Is(err, ErrBadSignature) || calls != 0 {
		t.Errorf("no secret: %v, %d checks", err, calls)
	}
	if _, err := (WebhookSettings{AllowUnsigned: true}).Parse(hookReq("thing", body, nil), []byte("s"), f); !errors.Is(err, ErrBadSignature) || calls != 0 {
		t.Errorf("secret but no header: %v, %d checks", err, calls)
	}
	if _, err := (WebhookSettings{}).Parse(hookReq("thing", body, map[string]string{"X-Sig": "s"}), []byte("s"), f); err != nil || calls != 1 {
		t.Errorf("secret and the right token: %v, %d checks", err, calls)
	}
	r := hookReq("thing", body, map[string]string{"X-Sig": "wrong"})
	cr := &countingReader{r: r.Body}
	r.Body = cr
	if _, err := (WebhookSettings{}).Parse(r, []byte("s"), f); !errors.Is(err, ErrBadSignature) || calls != 2 || cr.n.Load() != 0 {
		t.Errorf("wrong token: %v, %d checks, %d body bytes read", err, calls, cr.n.Load())
	}
}

// one is the parse result of a delivery that carries at most one change.
func one(evs []*Event, err error) (*Event, error) {
	switch {
	case len(evs) > 1:
		return nil, fmt.Errorf("%d events, want at most one", len(evs))
	case len(evs) == 0:
		return nil, err
	}
	return evs[0], err
}

// TestWebhookSettingsParseSeveral: every event of a delivery that carries several changes is
// stamped with the forge, the delivery and the receive time, and each has its own dedupe key.
func TestWebhookSettingsParseSeveral(t *testing.T) {
	secret := []byte("s3cret-value")
	body := []byte(`{"ok":true}`)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := WebhookSettings{Now: func() time.Time { return at }}
	evs, err := s.Parse(hookReq("two", body, map[string]string{"X-Sig": sign(body, secret), "X-Delivery": "d-7"}), secret, testFormat(nil))
	if err != nil || len(evs) != 2 {
		t.Fatalf("%+v, %v", evs, err)
	}
	for _, ev := range evs {
		if ev.Provider != "testforge" || ev.DeliveryID != "d-7" || !ev.Received.Equal(at) {
			t.Errorf("event %+v", ev)
		}
	}
	if evs[0].DedupeKey() == evs[1].DedupeKey() {
		t.Errorf("both events have the dedupe key %s", evs[0].DedupeKey())
	}
}
