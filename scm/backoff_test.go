package scm

import (
	"context"
	"errors"
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

// Sleep waits the pause, ends early with the context's error, and does not wait at all for a
// pause of zero.
func TestSleep(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep(20ms) = %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start = time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
		t.Errorf("Sleep(1h) with a cancelled context = %v after %v", err, time.Since(start))
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(0) after cancel = %v, want the context's error", err)
	}
	if err := Sleep(context.Background(), -time.Second); err != nil {
		t.Errorf("Sleep(-1s) = %v", err)
	}
}
