// Package duration parses the timeout strings pipelines use: Go durations plus days and weeks
// ("10m", "1d", "1w2d3h", "1h30m"), as Harness writes them.
//
// It imports nothing of prflow and sits under steps, the lowest layer that reads such
// durations (Wait, GitOpsSync, stage gates), so that steps and pipelines above it both use it.
package duration

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Parse reads a duration such as "90s", "10m", "1d", "2w", "1d12h".
func Parse(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty duration")
	}
	var total time.Duration
	rest := in
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("bad duration %q: expected a number at %q", in, rest)
		}
		j := i
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') && rest[j] != '.' {
			j++
		}
		num, unit := rest[:i], rest[i:j]
		rest = rest[j:]
		var mult time.Duration
		switch unit {
		case "w":
			mult = 7 * 24 * time.Hour
		case "d":
			mult = 24 * time.Hour
		case "h":
			mult = time.Hour
		case "m":
			mult = time.Minute
		case "s":
			mult = time.Second
		case "ms":
			mult = time.Millisecond
		case "":
			return 0, fmt.Errorf("bad duration %q: missing unit after %s (use s, m, h, d or w)", in, num)
		default:
			return 0, fmt.Errorf("bad duration %q: unknown unit %q (use ms, s, m, h, d or w)", in, unit)
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("bad duration %q: %w", in, err)
		}
		total += time.Duration(f * float64(mult))
	}
	if total < 0 {
		return 0, fmt.Errorf("bad duration %q: negative", in)
	}
	return total, nil
}
