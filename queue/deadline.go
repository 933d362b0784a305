package queue

import (
	"context"
	"sync"
	"time"
)

// SharedDeadline hands out one context for many NATS requests, its deadline between D and 2D
// away. nats.go otherwise needs a context, and a timer, per request: a visible cost at
// thousands of requests a second. A context is cancelled only two generations later, when
// its deadline has passed anyway, so no request is cut short. Safe for concurrent use.
type SharedDeadline struct {
	Parent context.Context // nil: context.Background()
	D      time.Duration

	mu         sync.Mutex
	ctx        context.Context
	until      time.Time
	cur, older context.CancelFunc
}

// Context returns a context whose deadline is at least D away.
func (s *SharedDeadline) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Until(s.until) < s.D {
		if s.older != nil {
			s.older()
		}
		s.older = s.cur
		parent := s.Parent
		if parent == nil {
			parent = context.Background()
		}
		s.until = time.Now().Add(2 * s.D)
		s.ctx, s.cur = context.WithDeadline(parent, s.until)
	}
	return s.ctx
}

// Stop releases the contexts handed out.
func (s *SharedDeadline) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range []context.CancelFunc{s.older, s.cur} {
		if cancel != nil {
			cancel()
		}
	}
}
