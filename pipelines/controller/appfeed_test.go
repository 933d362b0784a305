package controller

import (
	"fmt"
	"testing"
	"time"
)

// recv waits for the next change delivered to s.
func recv(t *testing.T, s *AppSub, within time.Duration) (string, bool) {
	t.Helper()
	select {
	case k := <-s.Changes():
		return k, true
	case <-time.After(within):
		return "", false
	}
}

// TestAppFeedSlowSubscriberNeverBlocksTheOthers: a page that stops reading gets no more than
// its buffer and is told to re-read; a page on the same key keeps getting every change at
// once, and a page on another key gets none.
func TestAppFeedSlowSubscriberNeverBlocksTheOthers(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	e.start()
	slow, fast, other := e.ctl.SubscribeApps(), e.ctl.SubscribeApps(), e.ctl.SubscribeApps()
	defer slow.Close()
	defer fast.Close()
	defer other.Close()
	key := "sim.web-staging"
	for _, s := range []*AppSub{slow, fast} {
		s.SetKeys(map[string]bool{key: true})
	}
	other.SetKeys(map[string]bool{"sim.web-prod": true})
	const n = 5 * appSubBuffer
	for i := range n {
		e.put("web-staging", "staging-eu", fmt.Sprintf("Health%d", i))
		if k, ok := recv(t, fast, 20*time.Second); !ok || k != key {
			t.Fatalf("change %d did not reach the page that reads (%q, %v) while another page does not read", i, k, ok)
		}
	}
	if got := len(slow.Changes()); got != appSubBuffer {
		t.Fatalf("the page that does not read has %d changes queued, want its buffer (%d)", got, appSubBuffer)
	}
	select {
	case <-slow.Resync():
	default:
		t.Fatal("the page that fell behind was not told to re-read")
	}
	select {
	case <-fast.Resync():
		t.Fatal("a page that kept up was told to re-read")
	default:
	}
	if got := len(other.Changes()); got != 0 {
		t.Fatalf("a page on another app got %d changes", got)
	}
	// Closing (twice) removes it; changes go on to the others.
	slow.Close()
	slow.Close()
	if got := e.ctl.AppSubscribers(); got != 2 {
		t.Fatalf("%d subscribers after one closed, want 2", got)
	}
}

// TestAppFeedAfterServerRestart: the NATS server restarts; every page is told to re-read as
// soon as the controller reconnected, and a change made after the restart still reaches it
// through the controller's watch.
func TestAppFeedAfterServerRestart(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, true)
	e.put("web-staging", "staging-eu", "Healthy")
	e.start()
	s := e.ctl.SubscribeApps()
	defer s.Close()
	s.SetKeys(map[string]bool{"sim.web-staging": true})

	e.restartServer()
	select {
	case <-s.Resync():
	case <-time.After(20 * time.Second):
		t.Fatal("the page was not told to re-read after the reconnect")
	}
	e.putAfterRestart("sim.web-staging", `{"name":"web-staging","cluster":"staging-eu","health":"Degraded"}`)
	if k, ok := recv(t, s, 60*time.Second); !ok || k != "sim.web-staging" {
		t.Fatalf("a change after the restart never reached the page (%q, %v)", k, ok)
	}
}
