package scmconformance

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
)

// What every forge's webhook parser must hold to, for the drivers' webhook tests.

// Testdata reads testdata/name of the package under test.
func Testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// HookRequest is a delivery in format f: event in its event header, delivery in its delivery
// header, sig (a signature or token) in its signature header; each header is left out when "".
func HookRequest(f *scm.HookFormat, event, delivery string, body []byte, sig string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hooks/"+f.Provider, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if event != "" {
		r.Header.Set(f.EventHeader, event)
	}
	if delivery != "" {
		r.Header.Set(f.DeliveryHeaders[len(f.DeliveryHeaders)-1], delivery)
	}
	if sig != "" {
		r.Header.Set(f.SignatureHeader, sig)
	}
	return r
}

// One is the parse result of a delivery that carries at most one change.
func One(evs []*scm.Event, err error) (*scm.Event, error) {
	switch {
	case len(evs) > 1:
		return nil, fmt.Errorf("%d events, want at most one: %+v", len(evs), evs)
	case len(evs) == 0:
		return nil, err
	}
	return evs[0], err
}

// BenchParse measures p parsing a delivery of body in format f (event, sig; no delivery header)
// that holds one event, a request a round.
func BenchParse(b *testing.B, p scm.WebhookParser, f *scm.HookFormat, event string, body []byte, sig string, secret []byte) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		ev, err := One(p.ParseWebhook(HookRequest(f, event, "", body, sig), secret))
		if err != nil || ev == nil {
			b.Fatal(ev, err)
		}
	}
}

// WantEvent fails the test unless got is want, showing the PRs apart when both have one.
func WantEvent(t *testing.T, got, want *scm.Event) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
		if got != nil && got.PR != nil && want.PR != nil {
			t.Errorf("PR got  %+v\nPR want %+v", *got.PR, *want.PR)
		}
	}
}

// CheckEvents fails the test when the events of one delivery share a dedupe key or one of
// them lacks what its kind must carry (repo, delivery, provider; a push's branch; a PR
// event's PR and action; a status event's commit and state).
func CheckEvents(t *testing.T, provider string, evs []*scm.Event) {
	t.Helper()
	keys := map[string]bool{}
	for _, ev := range evs {
		if keys[ev.DedupeKey()] {
			t.Fatalf("two events of one delivery share the dedupe key %s", ev.DedupeKey())
		}
		keys[ev.DedupeKey()] = true
		if ev.Repo == "" || ev.DeliveryID == "" || ev.Provider != provider {
			t.Fatalf("event without repo/delivery: %+v", ev)
		}
		switch ev.Kind {
		case scm.EventPush:
			if ev.Branch == "" {
				t.Fatalf("push without branch: %+v", ev)
			}
		case scm.EventPullRequest:
			if ev.PR == nil || ev.PR.Number <= 0 || ev.Action == "" {
				t.Fatalf("PR event without PR: %+v", ev)
			}
		case scm.EventStatus:
			if ev.SHA == "" || ev.State == "" {
				t.Fatalf("status event without sha/state: %+v", ev)
			}
		default:
			t.Fatalf("unexpected kind %q", ev.Kind)
		}
	}
}

// WantParseError fails the test unless err is a refused delivery matching is (when set) and
// mentioning msg (when set).
func WantParseError(t *testing.T, err error, is error, msg string) {
	t.Helper()
	if err == nil {
		t.Fatal("want error")
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("err = %v, want %v", err, is)
	}
	if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Errorf("err = %v, want it to mention %q", err, msg)
	}
}
