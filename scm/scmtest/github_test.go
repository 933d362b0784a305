package scmtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

func ghClient(t *testing.T, g *GitHub, token string) *github.Client {
	t.Helper()
	c, err := github.NewClient(nil).WithAuthToken(token).WithEnterpriseURLs(g.APIURL(), g.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ghSetup starts a fake GitHub with acme/release holding two files.
func ghSetup(t *testing.T, opts ...Option) (*GitHub, *github.Client, string) {
	t.Helper()
	g := NewGitHub(t, opts...)
	head, err := g.CreateRepo("acme", "release", map[string]string{
		"apps/web/values.yaml": "image: v1\nreplicas: 1\n", "apps/api/values.yaml": "image: a1\n", "README.md": "release repo\n"})
	if err != nil {
		t.Fatal(err)
	}
	return g, ghClient(t, g, DefaultToken), head
}

// ghCommitFiles makes one commit on branch through the git data API (no clone), creating the
// branch from base when it does not exist. deletes are removed paths.
func ghCommitFiles(ctx context.Context, c *github.Client, branch, base string, files map[string]string, deletes []string, msg string) (string, error) {
	ref, _, err := c.Git.GetRef(ctx, "acme", "release", "heads/"+branch)
	if err != nil {
		var er *github.ErrorResponse
		if !errors.As(err, &er) || er.Response.StatusCode != 404 {
			return "", err
		}
		baseRef, _, err := c.Git.GetRef(ctx, "acme", "release", "heads/"+base)
		if err != nil {
			return "", err
		}
		if ref, _, err = c.Git.CreateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/" + branch), Object: baseRef.Object}); err != nil {
			return "", err
		}
	}
	parent, _, err := c.Git.GetCommit(ctx, "acme", "release", ref.Object.GetSHA())
	if err != nil {
		return "", err
	}
	var entries []*github.TreeEntry
	for p, content := range files {
		entries = append(entries, &github.TreeEntry{Path: github.String(p), Mode: github.String("100644"), Type: github.String("blob"), Content: github.String(content)})
	}
	for _, p := range deletes {
		entries = append(entries, &github.TreeEntry{Path: github.String(p), Mode: github.String("100644"), Type: github.String("blob")})
	}
	tree, _, err := c.Git.CreateTree(ctx, "acme", "release", parent.Tree.GetSHA(), entries)
	if err != nil {
		return "", err
	}
	commit, _, err := c.Git.CreateCommit(ctx, "acme", "release", &github.Commit{Message: github.String(msg), Tree: tree,
		Parents: []*github.Commit{{SHA: parent.SHA}}}, nil)
	if err != nil {
		return "", err
	}
	if _, _, err := c.Git.UpdateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/" + branch),
		Object: &github.GitObject{SHA: commit.SHA}}, false); err != nil {
		return "", err
	}
	return commit.GetSHA(), nil
}

func ghStatus(err error) int {
	var er *github.ErrorResponse
	if errors.As(err, &er) {
		return er.Response.StatusCode
	}
	return 0
}

func ghMessage(err error) string {
	var er *github.ErrorResponse
	if errors.As(err, &er) {
		return er.Message
	}
	return ""
}

func TestGitHubGitDataCommitVisibleToGitClone(t *testing.T) {
	g, c, head := ghSetup(t)
	ctx := context.Background()
	sha, err := ghCommitFiles(ctx, c, "prflow/bump", "main", map[string]string{
		"apps/web/values.yaml": "image: v2\nreplicas: 1\n", "apps/new/values.yaml": "image: n1\n"}, []string{"apps/api/values.yaml"}, "bump web")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustGit(t, dir, "clone", "--quiet", "--branch", "prflow/bump", authURL(t, g.Git().CloneURL("acme", "release"), "x", DefaultToken), "w")
	w := dir + "/w"
	if got := mustGit(t, w, "rev-parse", "HEAD"); got != sha {
		t.Fatalf("clone HEAD %s, API commit %s", got, sha)
	}
	if got := mustGit(t, w, "rev-parse", "HEAD^"); got != head {
		t.Fatalf("parent %s, want %s", got, head)
	}
	if got := mustGit(t, w, "show", "HEAD:apps/web/values.yaml"); got != "image: v2\nreplicas: 1" {
		t.Errorf("web values = %q", got)
	}
	if got := mustGit(t, w, "show", "HEAD:apps/new/values.yaml"); got != "image: n1" {
		t.Errorf("new values = %q", got)
	}
	if _, err := gitCLI(t, w, "cat-file", "-e", "HEAD:apps/api/values.yaml"); err == nil {
		t.Error("deleted file still in the commit")
	}
	if got := mustGit(t, w, "log", "-1", "--format=%an <%ae>|%s"); got != DefaultUser+" <"+DefaultUser+"@users.noreply.example.com>|bump web" {
		t.Errorf("author/subject = %q", got)
	}
	// And the other way: a commit pushed with git is visible through the API.
	mustGit(t, w, "commit", "-q", "--allow-empty", "-m", "from git")
	mustGit(t, w, "push", "-q", "origin", "HEAD:prflow/bump")
	pushed := mustGit(t, w, "rev-parse", "HEAD")
	ref, _, err := c.Git.GetRef(ctx, "acme", "release", "heads/prflow/bump")
	if err != nil || ref.Object.GetSHA() != pushed {
		t.Fatalf("GetRef after push = %v, %v; want %s", ref, err, pushed)
	}
	rc, _, err := c.Repositories.GetCommit(ctx, "acme", "release", pushed, nil)
	if err != nil || rc.Commit.GetMessage() != "from git" || len(rc.Parents) != 1 || rc.Parents[0].GetSHA() != sha {
		t.Fatalf("GetCommit = %+v, %v", rc, err)
	}
	// Trees: recursive listing of the API commit.
	tree, _, err := c.Git.GetTree(ctx, "acme", "release", sha, true)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, e := range tree.Entries {
		paths[e.GetPath()] = e.GetType()
	}
	if paths["apps"] != "tree" || paths["apps/new/values.yaml"] != "blob" || paths["README.md"] != "blob" || paths["apps/api/values.yaml"] != "" {
		t.Errorf("tree entries = %v", paths)
	}
	// Blobs round-trip.
	blob, _, err := c.Git.CreateBlob(ctx, "acme", "release", &github.Blob{Content: github.String("aGVsbG8="), Encoding: github.String("base64")})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Git.GetBlobRaw(ctx, "acme", "release", blob.GetSHA())
	if err != nil || string(got) != "hello" {
		t.Fatalf("blob = %q, %v", got, err)
	}
}

func TestGitHubRefErrors(t *testing.T) {
	_, c, head := ghSetup(t)
	ctx := context.Background()
	_, _, err := c.Git.CreateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/main"), Object: &github.GitObject{SHA: &head}})
	if ghStatus(err) != 422 || ghMessage(err) != "Reference already exists" {
		t.Errorf("create existing ref: %v", err)
	}
	missing := strings.Repeat("1", 40)
	_, _, err = c.Git.CreateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/x"), Object: &github.GitObject{SHA: &missing}})
	if ghStatus(err) != 422 || ghMessage(err) != "Object does not exist" {
		t.Errorf("create ref to missing object: %v", err)
	}
	_, _, err = c.Git.GetRef(ctx, "acme", "release", "heads/nope")
	if ghStatus(err) != 404 {
		t.Errorf("get missing ref: %v", err)
	}
	// Not a fast-forward: a commit whose parent is not the branch head.
	first, err := ghCommitFiles(ctx, c, "topic", "main", map[string]string{"a": "1"}, nil, "a")
	if err != nil {
		t.Fatal(err)
	}
	side, _, err := c.Git.CreateCommit(ctx, "acme", "release", &github.Commit{Message: github.String("side"),
		Tree: &github.Tree{SHA: github.String(emptyTreeSHA(t, c, head))}, Parents: []*github.Commit{{SHA: &head}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Git.UpdateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/topic"), Object: &github.GitObject{SHA: side.SHA}}, false)
	if ghStatus(err) != 422 || ghMessage(err) != "Update is not a fast forward" {
		t.Errorf("non-ff update: %v", err)
	}
	ref, _, _ := c.Git.GetRef(ctx, "acme", "release", "heads/topic")
	if ref.Object.GetSHA() != first {
		t.Errorf("rejected update moved the branch to %s", ref.Object.GetSHA())
	}
	if _, _, err = c.Git.UpdateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/topic"), Object: &github.GitObject{SHA: side.SHA}}, true); err != nil {
		t.Errorf("forced update: %v", err)
	}
	if _, err := c.Git.DeleteRef(ctx, "acme", "release", "heads/topic"); err != nil {
		t.Errorf("delete ref: %v", err)
	}
	if _, err := c.Git.DeleteRef(ctx, "acme", "release", "heads/topic"); ghStatus(err) != 422 {
		t.Errorf("delete missing ref: %v", err)
	}
}

func emptyTreeSHA(t *testing.T, c *github.Client, head string) string {
	t.Helper()
	tree, _, err := c.Git.CreateTree(context.Background(), "acme", "release", "", []*github.TreeEntry{
		{Path: github.String("only.txt"), Mode: github.String("100644"), Type: github.String("blob"), Content: github.String("x")}})
	if err != nil {
		t.Fatal(err)
	}
	return tree.GetSHA()
}

func TestGitHubContentsAPI(t *testing.T) {
	g, c, _ := ghSetup(t)
	ctx := context.Background()
	file, dir, _, err := c.Repositories.GetContents(ctx, "acme", "release", "apps/web/values.yaml", &github.RepositoryContentGetOptions{Ref: "main"})
	if err != nil || dir != nil {
		t.Fatalf("GetContents file: %v %v", err, dir)
	}
	content, err := file.GetContent()
	if err != nil || content != "image: v1\nreplicas: 1\n" || file.GetEncoding() != "base64" {
		t.Fatalf("content = %q, %v", content, err)
	}
	_, dir, _, err = c.Repositories.GetContents(ctx, "acme", "release", "apps", nil)
	if err != nil || len(dir) != 2 || dir[0].GetType() != "dir" || dir[0].GetName() != "api" {
		t.Fatalf("GetContents dir = %v, %v", dir, err)
	}
	_, _, resp, err := c.Repositories.GetContents(ctx, "acme", "release", "nope.yaml", nil)
	if ghStatus(err) != 404 || ghMessage(err) != "Not Found" || resp.StatusCode != 404 {
		t.Fatalf("missing file: %v", err)
	}
	rc, _, err := c.Repositories.DownloadContents(ctx, "acme", "release", "README.md", nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	if string(raw) != "release repo\n" {
		t.Errorf("download = %q", raw)
	}
	// UpdateFile needs the current blob SHA; a stale one is a 409.
	_, _, err = c.Repositories.UpdateFile(ctx, "acme", "release", "apps/web/values.yaml", &github.RepositoryContentFileOptions{
		Message: github.String("bump"), Content: []byte("image: v9\n"), SHA: github.String(strings.Repeat("a", 40)), Branch: github.String("main")})
	if ghStatus(err) != 409 {
		t.Fatalf("stale sha: %v", err)
	}
	res, _, err := c.Repositories.UpdateFile(ctx, "acme", "release", "apps/web/values.yaml", &github.RepositoryContentFileOptions{
		Message: github.String("bump"), Content: []byte("image: v9\n"), SHA: file.SHA, Branch: github.String("main")})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := g.Git().ReadFile("acme", "release", "main", "apps/web/values.yaml"); string(got) != "image: v9\n" {
		t.Errorf("after UpdateFile: %q", got)
	}
	if res.Commit.GetSHA() == "" || res.Content.GetSHA() == file.GetSHA() {
		t.Errorf("UpdateFile response = %+v", res)
	}
	_, _, err = c.Repositories.CreateFile(ctx, "acme", "release", "apps/web/values.yaml", &github.RepositoryContentFileOptions{
		Message: github.String("create over existing"), Content: []byte("x")})
	if ghStatus(err) != 422 {
		t.Errorf("create existing without sha: %v", err)
	}
}

func TestGitHubPullRequestLifecycleAndMergeMethods(t *testing.T) {
	tests := []struct {
		method      string
		wantParents int
	}{
		{"merge", 2},
		{"squash", 1},
		{"rebase", 1},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			g, c, _ := ghSetup(t)
			ctx := context.Background()
			first, err := ghCommitFiles(ctx, c, "feature", "main", map[string]string{"apps/web/values.yaml": "image: v2\nreplicas: 1\n"}, nil, "web v2")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ghCommitFiles(ctx, c, "feature", "main", map[string]string{"apps/api/values.yaml": "image: a2\n"}, nil, "api a2"); err != nil {
				t.Fatal(err)
			}
			// main moves on meanwhile, so rebase has to replay and merge has to merge.
			if _, err := g.Git().Commit("acme", "release", "main", map[string]string{"README.md": "changed on main\n"}, nil, "readme"); err != nil {
				t.Fatal(err)
			}
			pr, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String("Bump web"),
				Head: github.String("acme:feature"), Base: github.String("main"), Body: github.String("by prflow")})
			if err != nil {
				t.Fatal(err)
			}
			if pr.GetNumber() != 1 || pr.GetHTMLURL() != g.URL()+"/acme/release/pull/1" || pr.GetNodeID() == "" || pr.Mergeable != nil {
				t.Fatalf("created PR = number %d html %s node %q mergeable %v", pr.GetNumber(), pr.GetHTMLURL(), pr.GetNodeID(), pr.Mergeable)
			}
			got, _, err := c.PullRequests.Get(ctx, "acme", "release", 1)
			if err != nil || got.Mergeable != nil || got.GetMergeableState() != "unknown" {
				t.Fatalf("first GET: mergeable %v state %q, %v", got.Mergeable, got.GetMergeableState(), err)
			}
			got, _, err = c.PullRequests.Get(ctx, "acme", "release", 1)
			if err != nil || !got.GetMergeable() || got.GetMergeableState() != "clean" {
				t.Fatalf("second GET: mergeable %v state %q, %v", got.Mergeable, got.GetMergeableState(), err)
			}
			testMerge := got.GetMergeCommitSHA()
			if tm, err := g.Git().GetCommit("acme", "release", testMerge); err != nil || len(tm.Parents) != 2 {
				t.Fatalf("test merge commit %s: %+v %v", testMerge, tm, err)
			}
			files, _, err := c.PullRequests.ListFiles(ctx, "acme", "release", 1, nil)
			if err != nil || len(files) != 2 || files[0].GetFilename() != "apps/api/values.yaml" || files[1].GetStatus() != "modified" ||
				!strings.Contains(files[1].GetPatch(), "+image: v2") {
				t.Fatalf("files = %v, %v", files, err)
			}
			// Stale head SHA guard.
			_, _, err = c.PullRequests.Merge(ctx, "acme", "release", 1, "", &github.PullRequestOptions{SHA: first, MergeMethod: tc.method})
			if ghStatus(err) != 409 || ghMessage(err) != "Head branch was modified. Review and try the merge again." {
				t.Fatalf("stale sha merge: %v", err)
			}
			res, _, err := c.PullRequests.Merge(ctx, "acme", "release", 1, "", &github.PullRequestOptions{SHA: got.GetHead().GetSHA(), MergeMethod: tc.method})
			if err != nil || !res.GetMerged() {
				t.Fatalf("merge: %v %v", res, err)
			}
			branches, _ := g.Git().Branches("acme", "release")
			if branches["main"] != res.GetSHA() {
				t.Fatalf("main = %s, merge sha = %s", branches["main"], res.GetSHA())
			}
			mc, err := g.Git().GetCommit("acme", "release", res.GetSHA())
			if err != nil || len(mc.Parents) != tc.wantParents {
				t.Fatalf("merge commit parents = %v, %v; want %d", mc.Parents, err, tc.wantParents)
			}
			for path, want := range map[string]string{"apps/web/values.yaml": "image: v2\nreplicas: 1\n", "apps/api/values.yaml": "image: a2\n", "README.md": "changed on main\n"} {
				if data, _ := g.Git().ReadFile("acme", "release", "main", path); string(data) != want {
					t.Errorf("%s on main = %q, want %q", path, data, want)
				}
			}
			log, _ := g.Git().Log("acme", "release", "main")
			switch tc.method {
			case "rebase":
				if log[0].Title() != "api a2" || log[1].Title() != "web v2" || log[0].Committer.Name != "GitHub" || log[2].Title() != "readme" {
					t.Errorf("rebase log = %v / %v / %v", log[0].Title(), log[1].Title(), log[2].Title())
				}
			case "squash":
				if log[0].Title() != "Bump web (#1)" || !strings.Contains(log[0].Message, "* web v2") {
					t.Errorf("squash message = %q", log[0].Message)
				}
			case "merge":
				if log[0].Title() != "Merge pull request #1 from acme/feature" || mc.Parents[1] != got.GetHead().GetSHA() {
					t.Errorf("merge commit = %q parents %v", log[0].Title(), mc.Parents)
				}
			}
			after, _, err := c.PullRequests.Get(ctx, "acme", "release", 1)
			if err != nil || !after.GetMerged() || after.GetState() != "closed" || after.GetMergeCommitSHA() != res.GetSHA() || after.GetMergedBy().GetLogin() != DefaultUser {
				t.Fatalf("after merge: merged %v state %s sha %s, %v", after.GetMerged(), after.GetState(), after.GetMergeCommitSHA(), err)
			}
			merged, _, err := c.PullRequests.IsMerged(ctx, "acme", "release", 1)
			if err != nil || !merged {
				t.Errorf("IsMerged = %v, %v", merged, err)
			}
			_, _, err = c.PullRequests.Merge(ctx, "acme", "release", 1, "", &github.PullRequestOptions{MergeMethod: tc.method})
			if ghStatus(err) != 405 || ghMessage(err) != "Pull Request is not mergeable" {
				t.Errorf("merge of merged PR: %v", err)
			}
		})
	}
}

func TestGitHubConflictIsDirtyAndBlocksMerge(t *testing.T) {
	g, c, _ := ghSetup(t, WithMergeabilityPolls(0))
	ctx := context.Background()
	for _, b := range []string{"one", "two"} {
		if _, err := ghCommitFiles(ctx, c, b, "main", map[string]string{"apps/web/values.yaml": "image: " + b + "\nreplicas: 1\n"}, nil, b); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String(b), Head: github.String(b), Base: github.String("main")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.PullRequests.Merge(ctx, "acme", "release", 1, "", &github.PullRequestOptions{MergeMethod: "squash"}); err != nil {
		t.Fatal(err)
	}
	pr, _, err := c.PullRequests.Get(ctx, "acme", "release", 2)
	if err != nil || pr.Mergeable == nil || pr.GetMergeable() || pr.GetMergeableState() != "dirty" {
		t.Fatalf("conflicting PR: mergeable %v state %q, %v", pr.Mergeable, pr.GetMergeableState(), err)
	}
	state, conflicts, err := g.Mergeability("acme", "release", 2)
	if err != nil || state != MergeDirty || len(conflicts) != 1 || conflicts[0] != "apps/web/values.yaml" {
		t.Errorf("Mergeability = %s %v %v", state, conflicts, err)
	}
	_, _, err = c.PullRequests.Merge(ctx, "acme", "release", 2, "", nil)
	if ghStatus(err) != 405 || ghMessage(err) != "Pull Request is not mergeable" {
		t.Fatalf("merging a dirty PR: %v", err)
	}
	// Forcing a state overrides the computation, for tests of the waiting logic.
	if err := g.ForceMergeState("acme", "release", 2, MergeUnknown); err != nil {
		t.Fatal(err)
	}
	pr, _, _ = c.PullRequests.Get(ctx, "acme", "release", 2)
	if pr.Mergeable != nil || pr.GetMergeableState() != "unknown" {
		t.Errorf("forced unknown: %v %q", pr.Mergeable, pr.GetMergeableState())
	}
	// Resolve by updating the branch: back to clean.
	_ = g.ForceMergeState("acme", "release", 2, "")
	if _, err := ghCommitFiles(ctx, c, "two", "main", map[string]string{"apps/web/values.yaml": "image: one\nreplicas: 1\n"}, nil, "resolve"); err != nil {
		t.Fatal(err)
	}
	pr, _, _ = c.PullRequests.Get(ctx, "acme", "release", 2)
	if !pr.GetMergeable() || pr.GetMergeableState() != "clean" {
		t.Errorf("after resolving: %v %q", pr.Mergeable, pr.GetMergeableState())
	}
}

func TestGitHubStatusesAndRequiredChecks(t *testing.T) {
	g, c, _ := ghSetup(t, WithMergeabilityPolls(0))
	ctx := context.Background()
	head, err := ghCommitFiles(ctx, c, "feature", "main", map[string]string{"x": "1"}, nil, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetRequiredStatusChecks("acme", "release", "main", "ci/build"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String("x"), Head: github.String("feature"), Base: github.String("main")}); err != nil {
		t.Fatal(err)
	}
	pr, _, _ := c.PullRequests.Get(ctx, "acme", "release", 1)
	if !pr.GetMergeable() || pr.GetMergeableState() != "blocked" {
		t.Fatalf("no status yet: %v %q", pr.Mergeable, pr.GetMergeableState())
	}
	_, _, err = c.PullRequests.Merge(ctx, "acme", "release", 1, "", nil)
	if ghStatus(err) != 405 || !strings.Contains(ghMessage(err), `"ci/build"`) {
		t.Fatalf("merge while blocked: %v", err)
	}
	for _, s := range []string{"pending", "failure", "success"} {
		if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "release", head, &github.RepoStatus{State: github.String(s), Context: github.String("ci/build"),
			TargetURL: github.String("https://ci.example/1")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Repositories.CreateStatus(ctx, "acme", "release", head, &github.RepoStatus{State: github.String("failure"), Context: github.String("lint")}); err != nil {
		t.Fatal(err)
	}
	combined, _, err := c.Repositories.GetCombinedStatus(ctx, "acme", "release", "feature", nil)
	if err != nil || combined.GetState() != "failure" || combined.GetTotalCount() != 2 || combined.GetSHA() != head {
		t.Fatalf("combined = %+v, %v", combined, err)
	}
	pr, _, _ = c.PullRequests.Get(ctx, "acme", "release", 1)
	if pr.GetMergeableState() != "unstable" {
		t.Fatalf("required success but lint failing: %q, want unstable", pr.GetMergeableState())
	}
	statuses, _, err := c.Repositories.ListStatuses(ctx, "acme", "release", head, nil)
	if err != nil || len(statuses) != 4 || statuses[0].GetContext() != "lint" {
		t.Errorf("list statuses = %d, %v", len(statuses), err)
	}
	_, _, err = c.Repositories.CreateStatus(ctx, "acme", "release", head, &github.RepoStatus{State: github.String("done")})
	if ghStatus(err) != 422 {
		t.Errorf("bad state: %v", err)
	}
	if _, _, err := c.PullRequests.Merge(ctx, "acme", "release", 1, "", nil); err != nil {
		t.Fatalf("merge once required check passed: %v", err)
	}
}

func TestGitHubPullRequestValidationAndListing(t *testing.T) {
	g, c, _ := ghSetup(t)
	ctx := context.Background()
	if _, err := ghCommitFiles(ctx, c, "prflow/a", "main", map[string]string{"a": "1"}, nil, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Git.CreateRef(ctx, "acme", "release", &github.Reference{Ref: github.String("refs/heads/empty"),
		Object: &github.GitObject{SHA: github.String(mustBranch(t, g, "main"))}}); err != nil {
		t.Fatal(err)
	}
	create := func(head, base string) error {
		_, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String("t"), Head: github.String(head), Base: github.String(base)})
		return err
	}
	if err := create("prflow/a", "main"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		head, base, want string
	}{
		{"prflow/a", "main", "A pull request already exists for acme:prflow/a."},
		{"empty", "main", "No commits between main and empty"},
		{"missing", "main", ""},
		{"prflow/a", "missing", ""},
	}
	for _, tc := range cases {
		err := create(tc.head, tc.base)
		var er *github.ErrorResponse
		if !errors.As(err, &er) || er.Response.StatusCode != 422 || er.Message != "Validation Failed" || len(er.Errors) != 1 {
			t.Errorf("create %s→%s: %v", tc.head, tc.base, err)
			continue
		}
		if tc.want != "" && er.Errors[0].Message != tc.want {
			t.Errorf("create %s→%s: error %q, want %q", tc.head, tc.base, er.Errors[0].Message, tc.want)
		}
	}
	list, _, err := c.PullRequests.List(ctx, "acme", "release", &github.PullRequestListOptions{Head: "acme:prflow/a", Base: "main", State: "all"})
	if err != nil || len(list) != 1 || list[0].GetHead().GetRef() != "prflow/a" {
		t.Fatalf("list by head = %v, %v", list, err)
	}
	list, _, _ = c.PullRequests.List(ctx, "acme", "release", &github.PullRequestListOptions{Head: "acme:other", State: "all"})
	if len(list) != 0 {
		t.Errorf("list by other head = %d PRs", len(list))
	}
	if _, _, err := c.PullRequests.Edit(ctx, "acme", "release", 1, &github.PullRequest{State: github.String("closed")}); err != nil {
		t.Fatal(err)
	}
	list, _, _ = c.PullRequests.List(ctx, "acme", "release", &github.PullRequestListOptions{Head: "acme:prflow/a"})
	if len(list) != 0 {
		t.Errorf("open list after close = %d", len(list))
	}
	_, _, err = c.PullRequests.Merge(ctx, "acme", "release", 1, "", nil)
	if ghStatus(err) != 405 {
		t.Errorf("merge closed PR: %v", err)
	}
	labels, _, err := c.Issues.AddLabelsToIssue(ctx, "acme", "release", 1, []string{"prflow", "env:prod"})
	if err != nil || len(labels) != 2 || labels[1].GetName() != "env:prod" {
		t.Fatalf("labels = %v, %v", labels, err)
	}
	cm, _, err := c.Issues.CreateComment(ctx, "acme", "release", 1, &github.IssueComment{Body: github.String("deployed")})
	if err != nil || cm.GetBody() != "deployed" || cm.GetUser().GetLogin() != DefaultUser {
		t.Fatalf("comment = %v, %v", cm, err)
	}
	pr, _, err := c.PullRequests.RequestReviewers(ctx, "acme", "release", 1, github.ReviewersRequest{Reviewers: []string{"alice"}})
	if err != nil || len(pr.RequestedReviewers) != 1 || pr.RequestedReviewers[0].GetLogin() != "alice" {
		t.Fatalf("reviewers = %v, %v", pr, err)
	}
	snap, err := g.PullRequest("acme", "release", 1)
	if err != nil || snap.State != PRClosed || len(snap.Labels) != 2 || len(snap.Comments) != 1 || snap.Reviewers[0] != "alice" {
		t.Fatalf("snapshot = %+v, %v", snap, err)
	}
}

func mustBranch(t *testing.T, g *GitHub, b string) string {
	t.Helper()
	br, err := g.Git().Branches("acme", "release")
	if err != nil || br[b] == "" {
		t.Fatalf("branch %s: %v %v", b, br, err)
	}
	return br[b]
}

func TestGitHubAuthAndNotFound(t *testing.T) {
	g, _, _ := ghSetup(t, WithToken("good", "alice"), WithToken("narrow", "bob", "acme/other"))
	ctx := context.Background()
	cases := []struct {
		name, token string
		repo        string
		status      int
		msg         string
	}{
		{"bad token", "bad", "release", 401, "Bad credentials"},
		{"unknown repo", "good", "missing", 404, "Not Found"},
		{"repo the token cannot see", "narrow", "release", 404, "Not Found"},
		{"ok", "good", "release", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := ghClient(t, g, tc.token).Repositories.Get(ctx, "acme", tc.repo)
			if resp == nil || resp.StatusCode != tc.status || (tc.msg != "" && ghMessage(err) != tc.msg) {
				t.Fatalf("status %v err %v; want %d %q", resp, err, tc.status, tc.msg)
			}
		})
	}
	resp, err := http.Get(g.APIURL() + "user")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no credentials: %d", resp.StatusCode)
	}
	user, _, err := ghClient(t, g, "good").Users.Get(ctx, "")
	if err != nil || user.GetLogin() != "alice" {
		t.Fatalf("user = %v, %v", user, err)
	}
}

func TestGitHubRateLimits(t *testing.T) {
	g, c, _ := ghSetup(t)
	ctx := context.Background()
	_, r1, err := c.Repositories.Get(ctx, "acme", "release")
	if err != nil {
		t.Fatal(err)
	}
	_, r2, _ := c.Repositories.Get(ctx, "acme", "release")
	if r1.Rate.Limit != 5000 || r2.Rate.Remaining != r1.Rate.Remaining-1 || r1.Rate.Reset.IsZero() {
		t.Fatalf("rate headers: %+v then %+v", r1.Rate, r2.Rate)
	}
	if err := g.RateLimitNext(1, SecondaryRateLimit, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Repositories.Get(ctx, "acme", "release")
	var abuse *github.AbuseRateLimitError
	if !errors.As(err, &abuse) || abuse.RetryAfter == nil || *abuse.RetryAfter != 30*time.Second {
		t.Fatalf("secondary limit: %T %v", err, err)
	}
	// go-github now refuses calls locally until Retry-After has passed; use a fresh client.
	if _, _, err := c.Repositories.Get(ctx, "acme", "release"); !errors.As(err, &abuse) {
		t.Fatalf("client-side secondary limit: %v", err)
	}
	c = ghClient(t, g, DefaultToken)
	if err := g.RateLimitNext(1, SecondaryRateLimit429, time.Second); err != nil {
		t.Fatal(err)
	}
	_, resp, err := c.Repositories.Get(ctx, "acme", "release")
	if ghStatus(err) != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("secondary 429: %v", err)
	}
	if err := g.RateLimitNext(1, PrimaryRateLimit, time.Hour); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Repositories.Get(ctx, "acme", "release")
	var rl *github.RateLimitError
	if !errors.As(err, &rl) || rl.Rate.Remaining != 0 || time.Until(rl.Rate.Reset.Time) < 50*time.Minute {
		t.Fatalf("primary limit: %T %v", err, err)
	}
	// go-github now refuses locally until the reset, without calling the server.
	before := len(g.Calls())
	_, _, err = c.Repositories.Get(ctx, "acme", "release")
	if !errors.As(err, &rl) || len(g.Calls()) != before {
		t.Fatalf("client-side limit: %v, calls %d→%d", err, before, len(g.Calls()))
	}
}

func TestGitHubFaultInjection(t *testing.T) {
	g, c, _ := ghSetup(t)
	ctx := context.Background()
	if err := g.InjectFault(Fault{Method: "GET", PathPattern: `/repos/acme/release$`, Status: 502, Body: "bad gateway", Times: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, _, err := c.Repositories.Get(ctx, "acme", "release"); ghStatus(err) != 502 {
			t.Fatalf("call %d: %v, want 502", i, err)
		}
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "release"); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	// Go's transport retries an idempotent request once when a reused connection is dropped, so
	// drop every attempt until cleared.
	if err := g.InjectFault(Fault{PathPattern: `/pulls$`, Drop: true}); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.PullRequests.List(ctx, "acme", "release", nil)
	if err == nil || ghStatus(err) != 0 {
		t.Fatalf("dropped connection: %v", err)
	}
	g.ClearFaults()
	if err := g.InjectFault(Fault{PathPattern: `/pulls$`, Delay: 20 * time.Millisecond, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PullRequests.List(ctx, "acme", "release", nil); err != nil {
		t.Fatalf("delayed call: %v", err)
	}
	var failed502, dropped, delayed int
	for _, cl := range g.Calls() {
		switch {
		case cl.Faulted && cl.Status == 502:
			failed502++
		case cl.Faulted && cl.Status == 0:
			dropped++
		case !cl.Faulted && strings.HasSuffix(cl.Path, "/pulls"):
			delayed++
		}
	}
	if failed502 != 2 || dropped < 1 || delayed != 1 {
		t.Errorf("calls: %d×502, %d dropped, %d delayed-then-served", failed502, dropped, delayed)
	}
	// A delay longer than the caller's deadline surfaces as the caller's timeout.
	if err := g.InjectFault(Fault{PathPattern: `/pulls$`, Delay: 5 * time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := c.PullRequests.List(tctx, "acme", "release", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delay past deadline: %v", err)
	}
}

func TestGitHubBaseModifiedRace(t *testing.T) {
	g, c, _ := ghSetup(t, WithMergeabilityPolls(0))
	ctx := context.Background()
	if _, err := ghCommitFiles(ctx, c, "f", "main", map[string]string{"f": "1"}, nil, "f"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String("f"), Head: github.String("f"), Base: github.String("main")}); err != nil {
		t.Fatal(err)
	}
	before := mustBranch(t, g, "main")
	g.InjectBaseModified(1)
	_, _, err := c.PullRequests.Merge(ctx, "acme", "release", 1, "", nil)
	if ghStatus(err) != 405 || ghMessage(err) != "Base branch was modified. Review and try the merge again." {
		t.Fatalf("injected race: %v", err)
	}
	if mustBranch(t, g, "main") != before {
		t.Fatal("failed merge moved main")
	}
	if _, _, err := c.PullRequests.Merge(ctx, "acme", "release", 1, "", nil); err != nil {
		t.Fatalf("retry after the race: %v", err)
	}
}

// TestGitHubConcurrentGuardedCommits: ten writers commit to one branch through the git data API
// (GetRef → CreateTree → CreateCommit → UpdateRef force=false). Each attempt either lands or gets
// 422 "Update is not a fast forward"; retrying the losers lands everything; nothing is lost.
func TestGitHubConcurrentGuardedCommits(t *testing.T) {
	g, c, _ := ghSetup(t)
	ctx := context.Background()
	const n = 10
	var mu sync.Mutex
	landed := map[string]int{} // sha → writer
	rejected := 0
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for attempt := 0; attempt < 50; attempt++ {
				sha, err := ghCommitFiles(ctx, c, "main", "main", map[string]string{fmt.Sprintf("w/%d.txt", i): fmt.Sprint(attempt)}, nil, fmt.Sprintf("writer %d", i))
				if err == nil {
					mu.Lock()
					landed[sha] = i
					mu.Unlock()
					return
				}
				if ghStatus(err) != 422 || ghMessage(err) != "Update is not a fast forward" {
					errs <- fmt.Errorf("writer %d: %v", i, err)
					return
				}
				mu.Lock()
				rejected++
				mu.Unlock()
			}
			errs <- fmt.Errorf("writer %d never landed", i)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	log, err := g.Git().Log("acme", "release", "main")
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != n+1 || len(landed) != n {
		t.Fatalf("main has %d commits, %d reported landed; want %d", len(log), len(landed), n)
	}
	for _, cm := range log[:n] {
		if _, ok := landed[cm.SHA]; !ok {
			t.Errorf("commit %s on main was not reported as landed", cm.SHA)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := g.Git().ReadFile("acme", "release", "main", fmt.Sprintf("w/%d.txt", i)); err != nil {
			t.Errorf("writer %d's file lost: %v", i, err)
		}
	}
	t.Logf("%d writers, %d fast-forward rejections retried", n, rejected)
}

func TestGitHubWebhooks(t *testing.T) {
	type got struct {
		event string
		ev    any
	}
	ch := make(chan got, 20)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, err := github.ValidatePayload(r, []byte("s3cret"))
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		ev, err := github.ParseWebHook(github.WebHookType(r), payload)
		if err != nil || github.DeliveryID(r) == "" {
			http.Error(w, "bad payload", 400)
			return
		}
		ch <- got{github.WebHookType(r), ev}
	}))
	defer recv.Close()
	g, c, _ := ghSetup(t, WithWebhook(recv.URL, "s3cret"), WithMergeabilityPolls(0))
	ctx := context.Background()
	if _, err := ghCommitFiles(ctx, c, "f", "main", map[string]string{"f": "1"}, nil, "f"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String("f"), Head: github.String("f"), Base: github.String("main")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ghCommitFiles(ctx, c, "f", "main", map[string]string{"f": "2"}, nil, "f2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Issues.AddLabelsToIssue(ctx, "acme", "release", 1, []string{"prflow"}); err != nil {
		t.Fatal(err)
	}
	res, _, err := c.PullRequests.Merge(ctx, "acme", "release", 1, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WaitWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	close(ch)
	var seq []string
	for e := range ch {
		switch ev := e.ev.(type) {
		case *github.PushEvent:
			seq = append(seq, "push:"+ev.GetRef())
			if ev.GetRef() == "refs/heads/main" && (ev.GetAfter() != res.GetSHA() || ev.GetRepo().GetFullName() != "acme/release") {
				t.Errorf("push to main: after %s repo %s", ev.GetAfter(), ev.GetRepo().GetFullName())
			}
		case *github.PullRequestEvent:
			a := ev.GetAction()
			if a == "closed" && ev.GetPullRequest().GetMerged() {
				a = "closed+merged"
				if ev.GetPullRequest().GetMergeCommitSHA() != res.GetSHA() {
					t.Errorf("merged event sha %s", ev.GetPullRequest().GetMergeCommitSHA())
				}
			}
			if a == "labeled" && ev.GetLabel().GetName() != "prflow" {
				t.Errorf("label = %q", ev.GetLabel().GetName())
			}
			seq = append(seq, "pr:"+a)
		default:
			t.Errorf("unexpected event %s %T", e.event, e.ev)
		}
	}
	want := "push:refs/heads/f,push:refs/heads/f,pr:opened,push:refs/heads/f,pr:synchronize,pr:labeled,push:refs/heads/main,pr:closed+merged"
	if strings.Join(seq, ",") != want {
		t.Errorf("events:\n got %s\nwant %s", strings.Join(seq, ","), want)
	}
	for _, d := range g.Deliveries() {
		if d.Status != 200 || d.ID == "" {
			t.Errorf("delivery %+v", d)
		}
	}
}

// TestHandlersMountedTogether is how `prflow dev` runs the kit: one listener, the git server under
// /git/ and a fake forge at the root, no testing.TB.
func TestHandlersMountedTogether(t *testing.T) {
	gs, err := OpenGitServer(t.TempDir(), WithToken("dev", "dev-user"))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	gh, err := NewGitHubHandler(gs, WithToken("dev", "dev-user"))
	if err != nil {
		t.Fatal(err)
	}
	defer gh.Close()
	mux := http.NewServeMux()
	mux.Handle("/git/", http.StripPrefix("/git", gs))
	mux.Handle("/", gh)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	gs.SetBaseURL(srv.URL + "/git")
	if _, err := gh.CreateRepo("acme", "release", map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	c, err := github.NewClient(nil).WithAuthToken("dev").WithEnterpriseURLs(srv.URL+"/api/v3/", srv.URL+"/api/v3/")
	if err != nil {
		t.Fatal(err)
	}
	repo, _, err := c.Repositories.Get(context.Background(), "acme", "release")
	if err != nil || repo.GetCloneURL() != srv.URL+"/git/acme/release.git" || repo.GetHTMLURL() != srv.URL+"/acme/release" {
		t.Fatalf("repo = clone %q html %q, %v", repo.GetCloneURL(), repo.GetHTMLURL(), err)
	}
	dir := t.TempDir()
	mustGit(t, dir, "clone", "-q", authURL(t, repo.GetCloneURL(), "x", "dev"), "w")
	if got := mustGit(t, dir+"/w", "show", "HEAD:a"); got != "1" {
		t.Fatalf("cloned a = %q", got)
	}
}
