package scm

import (
	"testing"
	"time"
)

// Backoff doubles from base, stops at max, and jitters within the upper half of the step;
// a huge attempt or a zero/negative step never overflows past max.
func TestBackoff(t *testing.T) {
	base, max := 100*time.Millisecond, 2*time.Second
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		5: 1600 * time.Millisecond, 6: 2 * time.Second, 40: 2 * time.Second, 1 << 30: 2 * time.Second} {
		lo, hi := want, time.Duration(0)
		for range 200 {
			d := Backoff(base, max, attempt)
			lo, hi = min(lo, d), maxDur(hi, d)
		}
		if lo < want/2 || hi > want {
			t.Errorf("attempt %d: %v..%v, want within [%v, %v]", attempt, lo, hi, want/2, want)
		}
		if hi == lo {
			t.Errorf("attempt %d: no jitter (%v every time)", attempt, lo)
		}
	}
	if d := Backoff(base, max, 0); d < base/2 || d > base {
		t.Errorf("attempt 0: %v, want the first step", d)
	}
	if d := Backoff(time.Duration(1)<<62, time.Minute, 3); d > time.Minute || d < 30*time.Second {
		t.Errorf("overflowing step: %v, want capped at a minute", d)
	}
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
