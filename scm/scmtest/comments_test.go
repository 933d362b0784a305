package scmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// commentAPI is how one fake's comment endpoints are called, as its forge documents them.
type commentAPI struct {
	name        string
	forge       *Forge
	create      func(n int) string            // POST URL
	edit        func(n int, id string) string // edit URL
	method      string                        // edit method
	wrap        func(body string) any         // request body
	read        func(m map[string]any) string // the body in an answer
	limit       int
	invalidCode int // status of a missing or too long body
}

func commentAPIs(t *testing.T) []commentAPI {
	gh, gl, bb := NewGitHub(t), NewGitLab(t), NewBitbucket(t)
	return []commentAPI{{
		name: "github", forge: gh.Forge, method: http.MethodPatch, limit: GitHubMaxComment, invalidCode: 422,
		create: func(n int) string { return gh.APIURL() + "repos/acme/release/issues/" + strconv.Itoa(n) + "/comments" },
		edit:   func(_ int, id string) string { return gh.APIURL() + "repos/acme/release/issues/comments/" + id },
		wrap:   func(b string) any { return map[string]string{"body": b} },
		read:   func(m map[string]any) string { s, _ := m["body"].(string); return s },
	}, {
		name: "gitlab", forge: gl.Forge, method: http.MethodPut, limit: GitLabMaxComment, invalidCode: 400,
		create: func(n int) string {
			return gl.APIURL() + "/projects/acme%2Frelease/merge_requests/" + strconv.Itoa(n) + "/notes"
		},
		edit: func(n int, id string) string {
			return gl.APIURL() + "/projects/acme%2Frelease/merge_requests/" + strconv.Itoa(n) + "/notes/" + id
		},
		wrap: func(b string) any { return map[string]string{"body": b} },
		read: func(m map[string]any) string { s, _ := m["body"].(string); return s },
	}, {
		name: "bitbucket", forge: bb.Forge, method: http.MethodPut, limit: BitbucketMaxComment, invalidCode: 400,
		create: func(n int) string {
			return bb.APIURL() + "/repositories/acme/release/pullrequests/" + strconv.Itoa(n) + "/comments"
		},
		edit: func(n int, id string) string {
			return bb.APIURL() + "/repositories/acme/release/pullrequests/" + strconv.Itoa(n) + "/comments/" + id
		},
		wrap: func(b string) any { return map[string]any{"content": map[string]string{"raw": b}} },
		read: func(m map[string]any) string {
			c, _ := m["content"].(map[string]any)
			s, _ := c["raw"].(string)
			return s
		},
	}}
}

// openTestPR makes acme/release with a branch and opens PR #n from it, behind the API.
func openTestPR(t *testing.T, f *Forge, branch string) int {
	t.Helper()
	if _, err := f.repoState("acme", "release"); err != nil {
		if _, err := f.CreateRepo("acme", "release", map[string]string{"README.md": "hi\n"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Git().Commit("acme", "release", branch, map[string]string{branch + ".txt": "x\n"}, nil, "change"); err != nil {
		t.Fatal(err)
	}
	rs, err := f.repoState("acme", "release")
	if err != nil {
		t.Fatal(err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	pr, err := f.openPR(context.Background(), rs, branch, "main", "t", "", DefaultUser, false)
	if err != nil {
		t.Fatal(err)
	}
	return pr.Number
}

// call sends method url with body as JSON with token and decodes a JSON object answer.
func (a commentAPI) call(t *testing.T, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: %d answer is not a JSON object: %q", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

func idOf(m map[string]any) string {
	f, _ := m["id"].(float64)
	return strconv.FormatInt(int64(f), 10)
}

// bodies is what the fake holds for PR n's comments, oldest first.
func bodies(t *testing.T, f *Forge, n int) []string {
	t.Helper()
	out, err := f.CommentBodies("acme", "release", n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFakesEditComments: each fake edits a comment as its forge does: 200 with the comment
// (same id, new body, a later update time), 403 for another user's comment or a locked
// conversation, 404 for a comment that is not there (or on another PR), the forge's
// validation error for an empty or too long body, and the limit itself accepted.
func TestFakesEditComments(t *testing.T) {
	for _, a := range commentAPIs(t) {
		t.Run(a.name, func(t *testing.T) {
			a.forge.AddToken("alice-token", "alice")
			n := openTestPR(t, a.forge, "feature")
			other := openTestPR(t, a.forge, "other")
			code, c := a.call(t, http.MethodPost, a.create(n), DefaultToken, a.wrap("first"))
			if code != 201 {
				t.Fatalf("create: %d %v", code, c)
			}
			id := idOf(c)
			time.Sleep(2 * time.Millisecond) // so the edit's time differs from the creation's
			code, e := a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap("edited ✅"))
			if code != 200 || idOf(e) != id || a.read(e) != "edited ✅" {
				t.Fatalf("edit: %d %v", code, e)
			}
			if e["updated_at"] == nil && e["updated_on"] == nil {
				t.Fatalf("edit answer has no update time: %v", e)
			}
			if pr, _ := a.forge.PullRequest("acme", "release", n); !pr.Comments[0].UpdatedAt.After(pr.Comments[0].CreatedAt) {
				t.Fatalf("edit left the update time at the creation time: %+v", pr.Comments[0])
			}
			if got := bodies(t, a.forge, n); !slices.Equal(got, []string{"edited ✅"}) {
				t.Fatalf("held after edit: %q", got)
			}

			code, m := a.call(t, a.method, a.edit(n, id), "alice-token", a.wrap("hijacked"))
			if code != 403 {
				t.Fatalf("edit of another user's comment: %d %v, want 403", code, m)
			}
			for _, missing := range []string{"999999", "abc"} {
				if code, m := a.call(t, a.method, a.edit(n, missing), DefaultToken, a.wrap("x")); code != 404 {
					t.Fatalf("edit of comment %s: %d %v, want 404", missing, code, m)
				}
			}
			if a.name != "github" { // GitHub addresses comments by repo: there is no PR in the URL
				if code, m := a.call(t, a.method, a.edit(other, id), DefaultToken, a.wrap("x")); code != 404 {
					t.Fatalf("edit of comment %s through PR %d: %d %v, want 404", id, other, code, m)
				}
			}
			if code, m := a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap("")); code != a.invalidCode {
				t.Fatalf("edit to an empty body: %d %v, want %d", code, m, a.invalidCode)
			}
			if code, m := a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap(strings.Repeat("é", a.limit+1))); code != a.invalidCode ||
				!strings.Contains(fmt.Sprint(m), strconv.Itoa(a.limit)) && !strings.Contains(fmt.Sprint(m), strconv.Itoa(a.limit+1)) {
				t.Fatalf("edit to %d characters: %d %v, want %d naming the limit", a.limit+1, code, m, a.invalidCode)
			}
			if code, m := a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap(strings.Repeat("é", a.limit))); code != 200 {
				t.Fatalf("edit to %d characters (the limit): %d %v", a.limit, code, m)
			}

			if err := a.forge.LockConversation("acme", "release", n, true); err != nil {
				t.Fatal(err)
			}
			if code, m := a.call(t, http.MethodPost, a.create(n), DefaultToken, a.wrap("locked")); code != 403 {
				t.Fatalf("comment on a locked conversation: %d %v, want 403", code, m)
			}
			if code, m := a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap("locked")); code != 403 {
				t.Fatalf("edit on a locked conversation: %d %v, want 403", code, m)
			}
			if err := a.forge.LockConversation("acme", "release", n, false); err != nil {
				t.Fatal(err)
			}
			if code, m := a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap("unlocked")); code != 200 {
				t.Fatalf("edit once unlocked: %d %v", code, m)
			}
			if got := bodies(t, a.forge, n); !slices.Equal(got, []string{"unlocked"}) {
				t.Fatalf("held at the end: %q", got)
			}
		})
	}
}

// TestFakesEditCommentsConcurrently: edits of one comment racing with new comments on the
// same PR all succeed; every new comment is kept with its own id and the edited comment
// holds one of the bodies sent.
func TestFakesEditCommentsConcurrently(t *testing.T) {
	for _, a := range commentAPIs(t) {
		t.Run(a.name, func(t *testing.T) {
			n := openTestPR(t, a.forge, "feature")
			_, c := a.call(t, http.MethodPost, a.create(n), DefaultToken, a.wrap("v0"))
			id := idOf(c)
			const k = 8
			var wg sync.WaitGroup
			codes := make([]int, 2*k)
			for i := range k {
				wg.Go(func() {
					codes[i], _ = a.call(t, a.method, a.edit(n, id), DefaultToken, a.wrap(fmt.Sprintf("v%d", i+1)))
				})
				wg.Go(func() {
					codes[k+i], _ = a.call(t, http.MethodPost, a.create(n), DefaultToken, a.wrap(fmt.Sprintf("new %d", i)))
				})
			}
			wg.Wait()
			for i, code := range codes {
				if want := map[bool]int{true: 200, false: 201}[i < k]; code != want {
					t.Fatalf("request %d: %d, want %d", i, code, want)
				}
			}
			pr, err := a.forge.PullRequest("acme", "release", n)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[int64]bool{}
			for _, cm := range pr.Comments {
				ids[cm.ID] = true
			}
			if len(pr.Comments) != k+1 || len(ids) != k+1 || strconv.FormatInt(pr.Comments[0].ID, 10) != id ||
				!slices.Contains([]string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"}, pr.Comments[0].Body) {
				t.Fatalf("comments after the race: %+v", pr.Comments)
			}
		})
	}
}
