// Package spelling finds the name a mistyped one was probably meant to be, for the "did you
// mean" hints of every loader and API that refuses an unknown name (pipeline fields, step
// inputs, config keys, audit filters, notifier files). It sits under steps/ so that every
// layer from steps up may use it; it imports nothing of ours.
package spelling

import "strings"

// Distance is the Levenshtein distance between a and b (bytes; names are ASCII).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Closest returns the candidate closest to s, ignoring case, when it is close enough to be a
// likely typo (2 edits, 3 for names of 9 bytes or more), else "".
func Closest(s string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if d := Distance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(s) >= 9 {
		limit = 3
	}
	if bestD <= limit {
		return best
	}
	return ""
}
