package queue

import (
	"testing"
	"time"
)

// Requests share a context until its deadline comes within D; the next one then gets a fresh
// context, and the one before stays usable until its own deadline.
func TestSharedDeadline(t *testing.T) {
	const d = 100 * time.Millisecond
	s := &SharedDeadline{D: d}
	defer s.Stop()
	first := s.Context()
	if dl, ok := first.Deadline(); !ok || time.Until(dl) < d || time.Until(dl) > 2*d {
		t.Fatalf("deadline %v away, want between %v and %v", time.Until(dl), d, 2*d)
	}
	if s.Context() != first {
		t.Fatal("a second request right away got a context of its own")
	}
	time.Sleep(d + 10*time.Millisecond)
	second := s.Context()
	if second == first {
		t.Fatal("no fresh context once the deadline came within D")
	}
	if first.Err() != nil {
		t.Fatalf("the previous context was cut short: %v", first.Err())
	}
	if dl, _ := second.Deadline(); time.Until(dl) < d {
		t.Fatalf("fresh context's deadline only %v away", time.Until(dl))
	}
}
