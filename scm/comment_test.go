package scm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCommentMarker: whatever the key holds, the marker stays one HTML comment (nothing of it
// shows on the forge), and distinct plain keys give distinct markers.
func TestCommentMarker(t *testing.T) {
	for _, key := range []string{"run-1/dev/comment", "a-->b", "x--y---z", "new\nline", "end-", "<script>"} {
		m := CommentMarker(key)
		body := strings.TrimSuffix(strings.TrimPrefix(m, "<!--"), "-->")
		if !strings.HasPrefix(m, "<!-- prflow:") || !strings.HasSuffix(m, " -->") || strings.Contains(body, "--") ||
			strings.Contains(body, ">") || strings.Contains(m, "\n") {
			t.Errorf("CommentMarker(%q) = %q: not a single closed HTML comment", key, m)
		}
	}
	if CommentMarker("r1/dev/a") == CommentMarker("r1/dev/b") {
		t.Error("distinct keys share a marker")
	}
}

// listFails is a PR API whose comment listing fails; CommentOnce must not post blind then.
type listFails struct {
	PullRequests
	err    error
	posted int
}

func (l *listFails) ListComments(context.Context, Repo, int) ([]PRComment, error) { return nil, l.err }
func (l *listFails) Comment(context.Context, Repo, int, string) error {
	l.posted++
	return nil
}

// TestCommentOnceListErrors: a transient listing error is returned (the job retries) without
// posting; a forge that cannot list comments at all gets the comment (at least once).
func TestCommentOnceListErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantPosted bool
	}{
		{"transient", &Error{Op: "list comments", Err: ErrRateLimited}, false},
		{"not supported", ErrNotSupported, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &listFails{err: tc.err}
			posted, err := CommentOnce(context.Background(), l, "acme/web", 1, "k", "hello")
			if posted != tc.wantPosted || (l.posted == 1) != tc.wantPosted {
				t.Fatalf("posted = %v (%d calls), want %v", posted, l.posted, tc.wantPosted)
			}
			if !tc.wantPosted && !errors.Is(err, ErrRateLimited) {
				t.Fatalf("err = %v, want the listing error", err)
			}
		})
	}
}
