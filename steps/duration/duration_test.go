package duration

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	ok := map[string]time.Duration{
		"10m": 10 * time.Minute, "1d": 24 * time.Hour, "1w2d": 9 * 24 * time.Hour,
		"1h30m": 90 * time.Minute, "90s": 90 * time.Second, "250ms": 250 * time.Millisecond,
		"1.5h": 90 * time.Minute, " 5m ": 5 * time.Minute,
	}
	for in, want := range ok {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "10", "m", "10x", "1d-", "abc", "1..5h"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded, want error", bad)
		}
	}
}
