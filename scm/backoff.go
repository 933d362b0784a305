package scm

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the pause before retry number attempt (from 1): base·2^(attempt-1) capped at
// ceiling, with "equal jitter" (between half and all of it) so that racing workers spread out.
// The forge transport and the git engine retry with it.
func Backoff(base, ceiling time.Duration, attempt int) time.Duration {
	d := base << min(max(attempt, 1)-1, 20)
	if d > ceiling || d <= 0 {
		d = ceiling
	}
	half := d / 2
	return half + rand.N(half+1)
}

// Sleep waits d (the pause Backoff chose) or until ctx ends, whichever is first: nil after the
// pause, the context's error when it ended first.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
