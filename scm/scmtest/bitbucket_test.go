package scmtest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/ktrysmt/go-bitbucket"
)

func bbSetup(t *testing.T, opts ...Option) (*Bitbucket, *bitbucket.Client) {
	t.Helper()
	b := NewBitbucket(t, opts...)
	if _, err := b.CreateRepo("acme", "release", map[string]string{"apps/web/values.yaml": "image: v1\n", "README.md": "hi\n"}); err != nil {
		t.Fatal(err)
	}
	return b, bbClient(t, b, DefaultToken)
}

func bbClient(t *testing.T, b *Bitbucket, token string) *bitbucket.Client {
	t.Helper()
	c, err := bitbucket.NewOAuthbearerTokenWithBaseUrlStr(token, b.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	c.HttpClient = &http.Client{Timeout: 10 * time.Second}
	return c
}

func bbStatusCode(err error) int {
	var ue *bitbucket.UnexpectedResponseStatusError
	if errors.As(err, &ue) {
		return ue.StatusCode
	}
	return 0
}

func bbBody(err error) string {
	var ue *bitbucket.UnexpectedResponseStatusError
	if errors.As(err, &ue) {
		return string(ue.Body)
	}
	return ""
}

func bbWrite(c *bitbucket.Client, branch string, files map[string]string, deletes []string, msg string) error {
	return c.Repositories.Repository.WriteFileContent(&bitbucket.RepositoryContentWriteOptions{Owner: "acme", RepoSlug: "release",
		Branch: branch, Files: files, FilesToDelete: deletes, Message: msg, Author: "Bot <bot@example.com>"})
}

// bbPostSrc posts to /src with the parents guard, which go-bitbucket does not expose.
func bbPostSrc(t *testing.T, b *Bitbucket, branch, parent string, files map[string]string) int {
	t.Helper()
	form := url.Values{"branch": {branch}, "message": {"guarded"}}
	if parent != "" {
		form.Set("parents", parent)
	}
	for k, v := range files {
		form.Set(k, v)
	}
	req, _ := http.NewRequest("POST", b.APIURL()+"/repositories/acme/release/src", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+DefaultToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func bbCreatePR(c *bitbucket.Client, src, dst, title string) (map[string]any, error) {
	res, err := c.Repositories.PullRequests.Create(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release",
		Title: title, SourceBranch: src, DestinationBranch: dst})
	if err != nil {
		return nil, err
	}
	return res.(map[string]any), nil
}

func dig(m any, path ...string) any {
	for _, p := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[p]
	}
	return m
}

func TestBitbucketRepoBranchesAndSrc(t *testing.T) {
	b, c := bbSetup(t)
	repo, err := c.Repositories.Repository.Get(&bitbucket.RepositoryOptions{Owner: "acme", RepoSlug: "release"})
	if err != nil || repo.Full_name != "acme/release" || repo.Mainbranch.Name != "main" || repo.CreatedOnTime == nil {
		t.Fatalf("repo = %+v, %v", repo, err)
	}
	user, err := c.User.Profile()
	if err != nil || user.Username != DefaultUser || user.Uuid == "" {
		t.Fatalf("user = %+v, %v", user, err)
	}
	main, err := c.Repositories.Repository.GetBranch(&bitbucket.RepositoryBranchOptions{Owner: "acme", RepoSlug: "release", BranchName: "main"})
	if err != nil {
		t.Fatal(err)
	}
	head := main.Target["hash"].(string)
	if _, err := c.Repositories.Repository.CreateBranch(&bitbucket.RepositoryBranchCreationOptions{Owner: "acme", RepoSlug: "release",
		Name: "prflow/bump", Target: bitbucket.RepositoryBranchTarget{Hash: head}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Repositories.Repository.CreateBranch(&bitbucket.RepositoryBranchCreationOptions{Owner: "acme", RepoSlug: "release",
		Name: "prflow/bump", Target: bitbucket.RepositoryBranchTarget{Hash: head}})
	if bbStatusCode(err) != 400 || !strings.Contains(bbBody(err), "BRANCH_ALREADY_EXISTS") {
		t.Fatalf("duplicate branch: %v %s", err, bbBody(err))
	}
	if err := bbWrite(c, "prflow/bump", map[string]string{"apps/web/values.yaml": "image: v2\n", "apps/new/x.yaml": "n: 1\n"}, []string{"README.md"}, "bump"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Repositories.Repository.GetFileContent(&bitbucket.RepositoryFilesOptions{Owner: "acme", RepoSlug: "release", Ref: "prflow/bump", Path: "apps/web/values.yaml"})
	if err != nil || string(got) != "image: v2\n" {
		t.Fatalf("file via branch with slash = %q, %v", got, err)
	}
	files, err := c.Repositories.Repository.ListFiles(&bitbucket.RepositoryFilesOptions{Owner: "acme", RepoSlug: "release", Ref: "prflow/bump", Path: "apps"})
	if err != nil || len(files) != 2 || files[0].Path != "apps/new" || files[0].Type != "commit_directory" {
		t.Fatalf("dir listing = %+v, %v", files, err)
	}
	if _, err := b.Git().ReadFile("acme", "release", "prflow/bump", "README.md"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted file still present: %v", err)
	}
	br, err := c.Repositories.Repository.GetBranch(&bitbucket.RepositoryBranchOptions{Owner: "acme", RepoSlug: "release", BranchName: "prflow/bump"})
	if err != nil {
		t.Fatal(err)
	}
	sha := br.Target["hash"].(string)
	commit, err := c.Repositories.Commits.GetCommit(&bitbucket.CommitsOptions{Owner: "acme", RepoSlug: "release", Revision: sha})
	if err != nil || dig(commit, "author", "raw") != "Bot <bot@example.com>" || dig(commit, "message") != "bump\n" {
		t.Fatalf("commit = %v, %v", commit, err)
	}
	if parents := commit.(map[string]any)["parents"].([]any); len(parents) != 1 || dig(parents[0], "hash") != head {
		t.Errorf("parents = %v", parents)
	}
	ds, err := c.Repositories.Diff.GetDiffStat(&bitbucket.DiffStatOptions{Owner: "acme", RepoSlug: "release", Spec: sha})
	if err != nil || len(ds.DiffStats) != 3 {
		t.Fatalf("diffstat = %+v, %v", ds, err)
	}
	statuses := map[string]string{}
	for _, d := range ds.DiffStats {
		p := d.New
		if p == nil {
			p = d.Old
		}
		statuses[p["path"].(string)] = d.Status
	}
	if statuses["README.md"] != "removed" || statuses["apps/new/x.yaml"] != "added" || statuses["apps/web/values.yaml"] != "modified" {
		t.Errorf("diffstat statuses = %v", statuses)
	}
	// The parents guard: a stale parent is a 409 and changes nothing.
	if code := bbPostSrc(t, b, "prflow/bump", head, map[string]string{"x": "1"}); code != 409 {
		t.Errorf("stale parent: %d, want 409", code)
	}
	if code := bbPostSrc(t, b, "prflow/bump", sha, map[string]string{"x": "1"}); code != 201 {
		t.Errorf("fresh parent: %d, want 201", code)
	}
	if err := c.Repositories.Repository.DeleteBranch(&bitbucket.RepositoryBranchDeleteOptions{Owner: "acme", RepoSlug: "release", RefName: "prflow/bump"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Repositories.Repository.GetBranch(&bitbucket.RepositoryBranchOptions{Owner: "acme", RepoSlug: "release", BranchName: "prflow/bump"})
	if bbStatusCode(err) != 404 {
		t.Errorf("deleted branch: %v", err)
	}
}

func TestBitbucketPullRequestsAndMergeStrategies(t *testing.T) {
	tests := []struct {
		strategy    bitbucket.PullRequestsMergeStrategy
		diverge     bool // main moves before the merge
		wantParents int
		wantErr     string
	}{
		{bitbucket.MergeCommit, true, 2, ""},
		{bitbucket.Squash, true, 1, ""},
		{bitbucket.FastForward, false, 1, ""},
		{bitbucket.FastForward, true, 0, "Fast-forward merge is not possible"},
		{bitbucket.RebaseMerge, true, 2, ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s diverged=%v", tc.strategy, tc.diverge), func(t *testing.T) {
			b, c := bbSetup(t)
			if err := bbWrite(c, "feature", map[string]string{"apps/web/values.yaml": "image: v2\n"}, nil, "web v2"); err != nil {
				t.Fatal(err)
			}
			if tc.diverge {
				if _, err := b.Git().Commit("acme", "release", "main", map[string]string{"other.txt": "o"}, nil, "other"); err != nil {
					t.Fatal(err)
				}
			}
			pr, err := bbCreatePR(c, "feature", "main", "Bump web")
			if err != nil {
				t.Fatal(err)
			}
			branches, _ := b.Git().Branches("acme", "release")
			if dig(pr, "id") != float64(1) || dig(pr, "state") != "OPEN" || dig(pr, "source", "commit", "hash") != branches["feature"][:12] ||
				dig(pr, "links", "html", "href") != b.URL()+"/acme/release/pull-requests/1" {
				t.Fatalf("created PR = %v", pr)
			}
			_, err = bbCreatePR(c, "feature", "main", "again")
			if bbStatusCode(err) != 400 {
				t.Fatalf("duplicate PR: %v", err)
			}
			list, err := c.Repositories.PullRequests.List(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release",
				Query: `source.branch.name = "feature" AND destination.branch.name = "main"`})
			if err != nil || len(list.(map[string]any)["values"].([]any)) != 1 {
				t.Fatalf("list = %v, %v", list, err)
			}
			res, err := c.Repositories.PullRequests.Merge(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "1",
				MergeStrategy: tc.strategy, CloseSourceBranch: true})
			if tc.wantErr != "" {
				if bbStatusCode(err) != 400 || !strings.Contains(bbBody(err), tc.wantErr) {
					t.Fatalf("merge: %v %s, want 400 %q", err, bbBody(err), tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("merge: %v %s", err, bbBody(err))
			}
			after, _ := b.Git().Branches("acme", "release")
			if dig(res, "state") != "MERGED" || dig(res, "merge_commit", "hash") != after["main"][:12] || after["feature"] != "" {
				t.Fatalf("merged PR = %v, branches %v", res, after)
			}
			mc, _ := b.Git().GetCommit("acme", "release", "main")
			if len(mc.Parents) != tc.wantParents {
				t.Errorf("merge result parents = %d, want %d", len(mc.Parents), tc.wantParents)
			}
			if got, _ := b.Git().ReadFile("acme", "release", "main", "apps/web/values.yaml"); string(got) != "image: v2\n" {
				t.Errorf("main after merge: %q", got)
			}
			_, err = c.Repositories.PullRequests.Merge(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "1"})
			if bbStatusCode(err) != 400 || !strings.Contains(bbBody(err), "already been merged") {
				t.Errorf("merge merged PR: %v %s", err, bbBody(err))
			}
		})
	}
}

func TestBitbucketConflictsStatusesAndDecline(t *testing.T) {
	b, c := bbSetup(t)
	for _, br := range []string{"one", "two"} {
		if err := bbWrite(c, br, map[string]string{"apps/web/values.yaml": "image: " + br + "\n"}, nil, br); err != nil {
			t.Fatal(err)
		}
		if _, err := bbCreatePR(c, br, "main", br); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetRequiredStatusChecks("acme", "release", "main", "ci"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Repositories.PullRequests.Merge(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "1"})
	if bbStatusCode(err) != 400 || !strings.Contains(bbBody(err), "merge checks") {
		t.Fatalf("merge without build: %v %s", err, bbBody(err))
	}
	heads, _ := b.Git().Branches("acme", "release")
	for _, state := range []string{"INPROGRESS", "SUCCESSFUL"} {
		if _, err := c.Repositories.Commits.CreateCommitStatus(&bitbucket.CommitsOptions{Owner: "acme", RepoSlug: "release", Revision: heads["one"]},
			&bitbucket.CommitStatusOptions{Key: "ci", State: state, Url: "https://ci/1", Name: "CI"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Repositories.Commits.CreateCommitStatus(&bitbucket.CommitsOptions{Owner: "acme", RepoSlug: "release", Revision: heads["one"]},
		&bitbucket.CommitStatusOptions{Key: "ci", State: "DONE", Url: "https://ci/1"})
	if bbStatusCode(err) != 400 {
		t.Errorf("bad state: %v", err)
	}
	st, err := c.Repositories.Commits.GetCommitStatuses(&bitbucket.CommitsOptions{Owner: "acme", RepoSlug: "release", Revision: heads["one"]})
	if vals := dig(st, "values"); err != nil || len(vals.([]any)) != 1 || dig(vals.([]any)[0], "state") != "SUCCESSFUL" {
		t.Fatalf("statuses (same key replaces) = %v, %v", st, err)
	}
	if _, err := c.Repositories.PullRequests.Merge(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "1"}); err != nil {
		t.Fatalf("merge with passing build: %v %s", err, bbBody(err))
	}
	// PR 2 now conflicts: its diffstat flags the file, merging fails.
	resp, err := http.NewRequest("GET", b.APIURL()+"/repositories/acme/release/pullrequests/2/diffstat", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Set("Authorization", "Bearer "+DefaultToken)
	r, err := http.DefaultClient.Do(resp)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(body), `"status":"merge conflict"`) {
		t.Errorf("PR diffstat = %s", body)
	}
	if err := b.SetRequiredStatusChecks("acme", "release", "main"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Repositories.PullRequests.Merge(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "2"})
	if bbStatusCode(err) != 400 || !strings.Contains(bbBody(err), "Conflicts during merge.") {
		t.Fatalf("conflicting merge: %v %s", err, bbBody(err))
	}
	cm, err := c.Repositories.PullRequests.AddComment(&bitbucket.PullRequestCommentOptions{Owner: "acme", RepoSlug: "release", PullRequestID: "2", Content: "conflict"})
	if err != nil || dig(cm, "content", "raw") != "conflict" {
		t.Fatalf("comment = %v, %v", cm, err)
	}
	dec, err := c.Repositories.PullRequests.Decline(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "2"})
	if err != nil || dig(dec, "state") != "DECLINED" {
		t.Fatalf("decline = %v, %v", dec, err)
	}
	list, _ := c.Repositories.PullRequests.List(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", States: []string{"DECLINED"}})
	if vals := dig(list, "values").([]any); len(vals) != 1 || dig(vals[0], "id") != float64(2) {
		t.Errorf("declined list = %v", list)
	}
	if _, err := c.Repositories.PullRequests.List(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", Query: `bogus ==`}); bbStatusCode(err) != 400 {
		t.Errorf("bad query: %v", err)
	}
}

func TestBitbucketAuthNotFoundAndRateLimit(t *testing.T) {
	b, c := bbSetup(t)
	_, err := bbClient(t, b, "nope").Repositories.Repository.Get(&bitbucket.RepositoryOptions{Owner: "acme", RepoSlug: "release"})
	if bbStatusCode(err) != 401 {
		t.Fatalf("bad token: %v", err)
	}
	basic, err := bitbucket.NewBasicAuthWithBaseUrlStr("x-token-auth", DefaultToken, b.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := basic.Repositories.Repository.Get(&bitbucket.RepositoryOptions{Owner: "acme", RepoSlug: "release"}); err != nil {
		t.Fatalf("basic auth: %v", err)
	}
	_, err = c.Repositories.Repository.Get(&bitbucket.RepositoryOptions{Owner: "acme", RepoSlug: "missing"})
	if bbStatusCode(err) != 404 || !strings.Contains(bbBody(err), `"type":"error"`) {
		t.Fatalf("missing repo: %v %s", err, bbBody(err))
	}
	if err := b.RateLimitNext(1, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = c.Repositories.Repository.Get(&bitbucket.RepositoryOptions{Owner: "acme", RepoSlug: "release"})
	if bbStatusCode(err) != 429 {
		t.Fatalf("rate limited: %v", err)
	}
	if _, err := c.Repositories.Repository.Get(&bitbucket.RepositoryOptions{Owner: "acme", RepoSlug: "release"}); err != nil {
		t.Fatalf("after the limit: %v", err)
	}
	calls := b.Calls()
	last := calls[len(calls)-2]
	if last.Status != 429 || !last.Faulted {
		t.Errorf("recorded call = %+v", last)
	}
	// Every answer carries the rate-limit headers.
	req, _ := http.NewRequest("GET", b.APIURL()+"/repositories/acme/release", nil)
	req.Header.Set("Authorization", "Bearer "+DefaultToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-RateLimit-Limit") != "1000" || resp.Header.Get("X-RateLimit-Resource") == "" {
		t.Errorf("headers = %v", resp.Header)
	}
}

// TestBitbucketConcurrentGuardedCommits: ten writers post to /src with parents = the head they
// read; each lands or gets 409, retries land everything, nothing is lost.
func TestBitbucketConcurrentGuardedCommits(t *testing.T) {
	b, _ := bbSetup(t)
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for attempt := 0; attempt < 50; attempt++ {
				br, _ := b.Git().Branches("acme", "release")
				switch code := bbPostSrc(t, b, "main", br["main"], map[string]string{fmt.Sprintf("w/%d", i): "x"}); code {
				case 201:
					return
				case 409:
					mu.Lock()
					conflicts++
					mu.Unlock()
				default:
					t.Errorf("writer %d: status %d", i, code)
					return
				}
			}
			t.Errorf("writer %d never landed", i)
		}(i)
	}
	wg.Wait()
	log, _ := b.Git().Log("acme", "release", "main")
	if len(log) != n+1 {
		t.Fatalf("main has %d commits, want %d", len(log), n+1)
	}
	for i := 0; i < n; i++ {
		if _, err := b.Git().ReadFile("acme", "release", "main", fmt.Sprintf("w/%d", i)); err != nil {
			t.Errorf("writer %d lost: %v", i, err)
		}
	}
	t.Logf("%d writers, %d stale-parent 409s retried", n, conflicts)
}

func TestBitbucketWebhooks(t *testing.T) {
	var keys hookEvents
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := github.ValidateSignature(r.Header.Get("X-Hub-Signature"), body, []byte("s3cret")); err != nil || r.Header.Get("X-Request-UUID") == "" {
			http.Error(w, "bad signature", 401)
			return
		}
		keys.add(r.Header.Get("X-Event-Key"))
	}))
	defer recv.Close()
	b, c := bbSetup(t, WithWebhook(recv.URL, "s3cret"))
	if err := bbWrite(c, "f", map[string]string{"f": "1"}, nil, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := bbCreatePR(c, "f", "main", "f"); err != nil {
		t.Fatal(err)
	}
	if err := bbWrite(c, "f", map[string]string{"f": "2"}, nil, "f2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Repositories.PullRequests.Merge(&bitbucket.PullRequestsOptions{Owner: "acme", RepoSlug: "release", ID: "1"}); err != nil {
		t.Fatal(err)
	}
	keys.want(t, b.Forge, "repo:push,pullrequest:created,repo:push,pullrequest:updated,repo:push,pullrequest:fulfilled")
}
