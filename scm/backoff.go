package scm

import (
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
