package scm

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The forges' limits on a PR comment. They count characters; a body capped at as many UTF-8
// bytes is never longer than that in characters (nor in UTF-16 units), so drivers report
// them as bytes.
const (
	GitHubMaxComment    = 65_536
	GitLabMaxComment    = 1_000_000
	BitbucketMaxComment = 32_767 // "less than 32768 characters"
)

// CommentLimiter is implemented by drivers whose forge caps the size of a comment.
type CommentLimiter interface {
	// MaxCommentBytes is the longest comment body the forge takes, in UTF-8 bytes.
	MaxCommentBytes() int
}

// CommentLimit is p's comment size limit in bytes, 0 when p names none.
func CommentLimit(p any) int {
	if l, ok := p.(CommentLimiter); ok {
		return max(l.MaxCommentBytes(), 0)
	}
	return 0
}

// CommentBudget is how many bytes of body UpsertComment can post on p under key: the forge's
// limit less the marker line it appends; 0 when p names no limit. Callers cap with it:
// CapComment(body, CommentBudget(p, key), link).
func CommentBudget(p any, key string) int {
	lim := CommentLimit(p)
	if lim == 0 {
		return 0
	}
	return max(lim-len(markerSuffix(key)), 1)
}

// markerSuffix is what UpsertComment and CommentOnce append to a body.
func markerSuffix(key string) string { return "\n\n" + CommentMarker(key) + "\n" }

// ParseCommentID reads a comment id as the REST forges number them (a positive integer).
func ParseCommentID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("comment id %q is not a positive number", id)
	}
	return n, nil
}

// CapComment returns body when it fits in max bytes (max <= 0: no limit). Otherwise it keeps
// the longest prefix that ends at a line boundary (inside one over-long line, at a rune
// boundary: never in the middle of a UTF-8 character), closes a code fence and <details>
// blocks the cut left open so the rest still renders, and appends more (say, a link to the
// full text) on a line of its own; the result is at most max bytes. When more alone does not
// fit, it is what is returned, cut at a rune boundary.
func CapComment(body string, max int, more string) string {
	if max <= 0 || len(body) <= max {
		return body
	}
	tail := ""
	if more != "" {
		tail = "\n\n" + more
	}
	if len(tail) >= max {
		return strings.TrimLeft(cutRunes(tail, max), "\n")
	}
	budget := max - len(tail)
	for budget > 0 {
		kept := cutLines(body, budget)
		closing := closers(kept)
		if over := len(kept) + len(closing) + len(tail) - max; over > 0 {
			budget -= over
			continue
		}
		return kept + closing + tail
	}
	return strings.TrimLeft(tail, "\n")
}

// cutLines is s's longest prefix of at most n bytes that ends before a newline, or, when the
// first line alone is longer, that ends at a rune boundary.
func cutLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if i := strings.LastIndexByte(s[:n+1], '\n'); i >= 0 {
		return strings.TrimRight(s[:i], "\r")
	}
	return cutRunes(s, n)
}

// cutRunes is s's longest prefix of at most n bytes that does not split a rune.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// closers closes what a cut left open: a ``` or ~~~ code fence, then <details> blocks.
func closers(s string) string {
	var fence string
	for line := range strings.Lines(s) {
		t := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
		case fence != "" && strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "":
			fence = ""
		}
	}
	out := ""
	if fence != "" {
		out += "\n" + fence
	}
	if open := strings.Count(s, "<details") - strings.Count(s, "</details>"); open > 0 {
		out += strings.Repeat("\n</details>", open)
	}
	return out
}
