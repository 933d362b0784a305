package scm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCapComment: a body over the limit is cut at a line boundary, never inside a UTF-8
// character, with the link line appended, and the result fits; open code fences and
// <details> blocks are closed so the rest of the comment still renders.
func TestCapComment(t *testing.T) {
	const more = "[full diff](https://prflow.example/runs/r1/diff)"
	lines := []string{"## web-prod", "<details><summary>Deployment web</summary>", "", "```diff",
		"-  replicas: 2", "+  replicas: 3 — ça déménage 🚀", "-  image: web:1.0", "+  image: web:1.1 ✅", "```", "</details>"}
	body := strings.Join(lines, "\n")
	if got := CapComment(body, len(body), more); got != body {
		t.Fatalf("a body that fits was changed: %q", got)
	}
	if got := CapComment(body, 0, more); got != body {
		t.Fatalf("max 0 (no limit) changed the body: %q", got)
	}
	for max := len(more) + 3; max < len(body); max++ {
		got := CapComment(body, max, more)
		if len(got) > max || !utf8.ValidString(got) || !strings.HasSuffix(got, "\n\n"+more) {
			t.Fatalf("max %d: %q (%d bytes): over the limit, invalid UTF-8 or no link", max, got, len(got))
		}
		kept := strings.TrimSuffix(got, "\n\n"+more)
		for strings.HasSuffix(kept, "\n</details>") {
			kept = strings.TrimSuffix(kept, "\n</details>")
		}
		kept = strings.TrimSuffix(kept, "\n```")
		if kept != "" && !strings.HasPrefix(body, kept) {
			t.Fatalf("max %d: kept %q is not a prefix of the body", max, kept)
		}
		if strings.Count(got, "```")%2 != 0 || strings.Count(got, "<details>") != strings.Count(got, "</details>") {
			t.Fatalf("max %d: %q leaves a fence or a <details> open", max, got)
		}
	}
	// One long line of 3- and 4-byte characters: cut between runes.
	long := strings.Repeat("€🚀", 1000)
	for _, max := range []int{len(more) + 3, len(more) + 4, len(more) + 5, len(more) + 6, 500, 4001} {
		got := CapComment(long, max, more)
		if len(got) > max || !utf8.ValidString(got) || !strings.HasSuffix(got, more) {
			t.Fatalf("max %d: %q", max, got)
		}
	}
	// A link longer than the limit: the link alone, cut at a rune boundary.
	if got := CapComment(body, 20, "voir le diff complet → "+more); len(got) > 20 || !utf8.ValidString(got) || !strings.HasPrefix(got, "voir") {
		t.Fatalf("link over the limit: %q", got)
	}
	// No link: only the cut text.
	if got := CapComment("line one\nline two\nline three", 18, ""); got != "line one\nline two" {
		t.Fatalf("no link: %q", got)
	}
}

// limited is a PR API with a small comment limit that keeps what it is sent.
type limited struct {
	PullRequests
	limit    int
	comments []PRComment
}

func (l *limited) MaxCommentBytes() int { return l.limit }
func (l *limited) ListComments(context.Context, Repo, int) ([]PRComment, error) {
	return append([]PRComment(nil), l.comments...), nil
}
func (l *limited) Comment(_ context.Context, _ Repo, _ int, body string) error {
	if len(body) > l.limit {
		return errors.New("body is too long")
	}
	l.comments = append(l.comments, PRComment{ID: string(rune('a' + len(l.comments))), Author: "bot", Body: body})
	return nil
}
func (l *limited) EditComment(_ context.Context, _ Repo, _ int, id, body string) error {
	for i := range l.comments {
		if l.comments[i].ID == id {
			if l.comments[i].Author != "bot" {
				return &Error{Op: "edit comment " + id, Err: ErrForbidden}
			}
			l.comments[i].Body = body
			return nil
		}
	}
	return ErrNotFound
}

// TestUpsertCommentCapsToTheForgeLimit: a body over the driver's limit is cut to fit with a
// note instead of failing on the forge, the marker kept; CommentBudget leaves room for it.
func TestUpsertCommentCapsToTheForgeLimit(t *testing.T) {
	l := &limited{limit: 200}
	body := strings.Repeat("ligne accentuée é\n", 40)
	if CommentBudget(l, "k") >= l.limit || CommentBudget(l, "k")+len(markerSuffix("k")) != l.limit {
		t.Fatalf("CommentBudget = %d for a limit of %d", CommentBudget(l, "k"), l.limit)
	}
	got, err := UpsertComment(context.Background(), l, "acme/web", 1, "k", body)
	if err != nil || got != CommentPosted {
		t.Fatalf("UpsertComment = %q, %v", got, err)
	}
	c := l.comments[0].Body
	if len(c) > l.limit || !utf8.ValidString(c) || !strings.Contains(c, CommentMarker("k")) || !strings.Contains(c, "cut to fit") {
		t.Fatalf("posted %q (%d bytes)", c, len(c))
	}
	// The same long body again is unchanged, not edited on every re-push.
	if got, err := UpsertComment(context.Background(), l, "acme/web", 1, "k", body); err != nil || got != CommentUnchanged {
		t.Fatalf("second UpsertComment = %q, %v", got, err)
	}
	if CommentLimit(struct{}{}) != 0 || CommentBudget(struct{}{}, "k") != 0 {
		t.Fatal("a driver without a limit has one")
	}
}

// TestUpsertCommentIgnoresAPastedMarker: someone who pastes prflow's marker into a comment of
// their own does not make UpsertComment edit theirs (the forge would refuse) or post anew.
func TestUpsertCommentIgnoresAPastedMarker(t *testing.T) {
	l := &limited{limit: 1 << 16}
	ctx := context.Background()
	if _, err := UpsertComment(ctx, l, "acme/web", 1, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	l.comments = append(l.comments, PRComment{ID: "z", Author: "alice", Body: "> v1\n" + CommentMarker("k") + "\nwhy?"})
	got, err := UpsertComment(ctx, l, "acme/web", 1, "k", "v2")
	if err != nil || got != CommentUpdated {
		t.Fatalf("UpsertComment = %q, %v; want prflow's own comment updated", got, err)
	}
	if len(l.comments) != 2 || !strings.HasPrefix(l.comments[0].Body, "v2") || !strings.HasPrefix(l.comments[1].Body, "> v1") {
		t.Fatalf("comments = %+v", l.comments)
	}
}

// TestUpsertCommentRefused: a forge that refuses the edit returns an error matching
// ErrForbidden (the step records a warning and goes on) and posts nothing else.
func TestUpsertCommentRefused(t *testing.T) {
	l := &limited{limit: 1 << 16}
	l.comments = []PRComment{{ID: "a", Author: "someone", Body: "old\n\n" + CommentMarker("k") + "\n"}}
	_, err := UpsertComment(context.Background(), l, "acme/web", 1, "k", "new")
	if !errors.Is(err, ErrForbidden) || len(l.comments) != 1 {
		t.Fatalf("err = %v, comments = %+v; want ErrForbidden and nothing posted", err, l.comments)
	}
}

// noEdit is a PR API whose driver cannot edit comments.
type noEdit struct{ limited }

func (n *noEdit) EditComment(context.Context, Repo, int, string, string) error {
	return &Error{Op: "edit comment", Err: ErrNotSupported}
}

// TestUpsertCommentWithoutEdits: where the driver cannot edit, a changed body is posted anew
// and an unchanged one is still left alone.
func TestUpsertCommentWithoutEdits(t *testing.T) {
	n := &noEdit{limited{limit: 1 << 16}}
	ctx := context.Background()
	for i, tc := range []struct{ body, want string }{{"v1", CommentPosted}, {"v1", CommentUnchanged}, {"v2", CommentPosted}} {
		if got, err := UpsertComment(ctx, n, "acme/web", 1, "k", tc.body); err != nil || got != tc.want {
			t.Fatalf("#%d UpsertComment(%q) = %q, %v; want %q", i+1, tc.body, got, err, tc.want)
		}
	}
	if len(n.comments) != 2 {
		t.Fatalf("comments = %+v", n.comments)
	}
}
