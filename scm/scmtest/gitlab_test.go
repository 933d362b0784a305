package scmtest

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go"
)

const glProject = "group/sub/release"

func glSetup(t *testing.T, opts ...Option) (*GitLab, *gitlab.Client) {
	t.Helper()
	g := NewGitLab(t, opts...)
	if _, err := g.CreateRepo("group/sub", "release", map[string]string{
		"apps/web/values.yaml": "image: v1\n", "apps/api/values.yaml": "image: a1\n"}); err != nil {
		t.Fatal(err)
	}
	return g, glClient(t, g, DefaultToken)
}

func glClient(t *testing.T, g *GitLab, token string, opts ...gitlab.ClientOptionFunc) *gitlab.Client {
	t.Helper()
	c, err := gitlab.NewClient(token, append([]gitlab.ClientOptionFunc{gitlab.WithBaseURL(g.APIURL())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func glCommit(c *gitlab.Client, branch, start string, files map[string]string, msg string) (*gitlab.Commit, error) {
	opt := &gitlab.CreateCommitOptions{Branch: gitlab.Ptr(branch), CommitMessage: gitlab.Ptr(msg)}
	if start != "" {
		opt.StartBranch = gitlab.Ptr(start)
	}
	for p, content := range files {
		opt.Actions = append(opt.Actions, &gitlab.CommitActionOptions{Action: gitlab.Ptr(gitlab.FileUpdate), FilePath: gitlab.Ptr(p), Content: gitlab.Ptr(content)})
	}
	cm, _, err := c.Commits.CreateCommit(glProject, opt)
	return cm, err
}

// glMsg returns the message of a GitLab error body; client-go renders {"message": "x"} as
// "{message: x}".
func glMsg(err error) string {
	var er *gitlab.ErrorResponse
	if errors.As(err, &er) {
		return strings.TrimSuffix(strings.TrimPrefix(er.Message, "{message: "), "}")
	}
	return ""
}

func TestGitLabCommitActionsAndFiles(t *testing.T) {
	g, c := glSetup(t)
	file, _, err := c.RepositoryFiles.GetFile(glProject, "apps/web/values.yaml", &gitlab.GetFileOptions{Ref: gitlab.Ptr("main")})
	if err != nil || file.Encoding != "base64" || file.LastCommitID == "" || file.BlobID == "" {
		t.Fatalf("GetFile = %+v, %v", file, err)
	}
	cm, _, err := c.Commits.CreateCommit(glProject, &gitlab.CreateCommitOptions{
		Branch: gitlab.Ptr("prflow/bump"), StartBranch: gitlab.Ptr("main"), CommitMessage: gitlab.Ptr("bump"),
		AuthorName: gitlab.Ptr("Bot"), AuthorEmail: gitlab.Ptr("bot@example.com"),
		Actions: []*gitlab.CommitActionOptions{
			{Action: gitlab.Ptr(gitlab.FileUpdate), FilePath: gitlab.Ptr("apps/web/values.yaml"), Content: gitlab.Ptr("image: v2\n"), LastCommitID: gitlab.Ptr(file.LastCommitID)},
			{Action: gitlab.Ptr(gitlab.FileCreate), FilePath: gitlab.Ptr("apps/new/values.yaml"), Content: gitlab.Ptr("aW1hZ2U6IG4x"), Encoding: gitlab.Ptr("base64")},
			{Action: gitlab.Ptr(gitlab.FileMove), FilePath: gitlab.Ptr("apps/api2/values.yaml"), PreviousPath: gitlab.Ptr("apps/api/values.yaml")},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if cm.AuthorName != "Bot" || len(cm.ParentIDs) != 1 || cm.Stats == nil || cm.Stats.Additions != 3 || cm.Stats.Deletions != 2 {
		t.Errorf("commit = %+v stats %+v", cm, cm.Stats)
	}
	gs := g.Git()
	for p, want := range map[string]string{"apps/web/values.yaml": "image: v2\n", "apps/new/values.yaml": "image: n1", "apps/api2/values.yaml": "image: a1\n"} {
		if got, err := gs.ReadFile("group/sub", "release", "prflow/bump", p); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", p, got, err)
		}
	}
	if _, err := gs.ReadFile("group/sub", "release", "prflow/bump", "apps/api/values.yaml"); !errors.Is(err, ErrNotFound) {
		t.Errorf("moved file still at old path: %v", err)
	}
	raw, _, err := c.RepositoryFiles.GetRawFile(glProject, "apps/web/values.yaml", &gitlab.GetRawFileOptions{Ref: gitlab.Ptr("prflow/bump")})
	if err != nil || string(raw) != "image: v2\n" {
		t.Errorf("raw = %q, %v", raw, err)
	}
	meta, _, err := c.RepositoryFiles.GetFileMetaData(glProject, "apps/web/values.yaml", &gitlab.GetFileMetaDataOptions{Ref: gitlab.Ptr("prflow/bump")})
	if err != nil || meta.LastCommitID != cm.ID || meta.Size != int64(len("image: v2\n")) {
		t.Errorf("metadata = %+v, %v", meta, err)
	}

	// Error answers, table-driven.
	cases := []struct {
		name   string
		opt    *gitlab.CreateCommitOptions
		status int
		msg    string
	}{
		{"stale last_commit_id", &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("prflow/bump"), CommitMessage: gitlab.Ptr("x"),
			Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileUpdate), FilePath: gitlab.Ptr("apps/web/values.yaml"),
				Content: gitlab.Ptr("x"), LastCommitID: gitlab.Ptr(file.LastCommitID)}}},
			400, "You are attempting to update a file that has changed since you started editing it."},
		{"update missing file", &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("prflow/bump"), CommitMessage: gitlab.Ptr("x"),
			Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileUpdate), FilePath: gitlab.Ptr("nope"), Content: gitlab.Ptr("x")}}},
			400, "A file with this name doesn't exist"},
		{"create existing file", &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("prflow/bump"), CommitMessage: gitlab.Ptr("x"),
			Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileCreate), FilePath: gitlab.Ptr("apps/web/values.yaml"), Content: gitlab.Ptr("x")}}},
			400, "A file with this name already exists"},
		{"missing branch without start", &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("nobranch"), CommitMessage: gitlab.Ptr("x"),
			Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileCreate), FilePath: gitlab.Ptr("a"), Content: gitlab.Ptr("x")}}},
			400, "You can only create or edit files when you are on a branch"},
		{"existing branch with start_branch", &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("prflow/bump"), StartBranch: gitlab.Ptr("main"), CommitMessage: gitlab.Ptr("x"),
			Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileCreate), FilePath: gitlab.Ptr("a"), Content: gitlab.Ptr("x")}}},
			400, "A branch called 'prflow/bump' already exists. Switch to that branch in order to make changes"},
	}
	before, _ := gs.Branches("group/sub", "release")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := c.Commits.CreateCommit(glProject, tc.opt)
			if resp == nil || resp.StatusCode != tc.status || glMsg(err) != tc.msg {
				t.Fatalf("got %v / %q, want %d %q", err, glMsg(err), tc.status, tc.msg)
			}
		})
	}
	after, _ := gs.Branches("group/sub", "release")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("failed commits moved branches: %v → %v", before, after)
	}
	if _, err := glCommit(c, "main", "", map[string]string{"apps/web/values.yaml": "image: main\n"}, "on main"); err != nil {
		t.Fatal(err)
	}
	br, _, err := c.Branches.GetBranch(glProject, "prflow/bump")
	if err != nil || br.Commit.ID != cm.ID || br.Name != "prflow/bump" {
		t.Fatalf("GetBranch = %+v, %v", br, err)
	}
	_, _, err = c.Branches.GetBranch(glProject, "nope")
	if !errors.Is(err, gitlab.ErrNotFound) {
		t.Errorf("missing branch: %v", err)
	}
}

func TestGitLabMergeRequestFlow(t *testing.T) {
	tests := []struct {
		name        string
		squash      bool
		wantParents int
	}{{"merge commit", false, 2}, {"squash", true, 2}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, c := glSetup(t)
			if _, _, err := c.Branches.CreateBranch(glProject, &gitlab.CreateBranchOptions{Branch: gitlab.Ptr("feature"), Ref: gitlab.Ptr("main")}); err != nil {
				t.Fatal(err)
			}
			_, resp, err := c.Branches.CreateBranch(glProject, &gitlab.CreateBranchOptions{Branch: gitlab.Ptr("feature"), Ref: gitlab.Ptr("main")})
			if resp.StatusCode != 400 || glMsg(err) != "Branch already exists" {
				t.Fatalf("duplicate branch: %v", err)
			}
			for i, v := range []string{"v2", "v3"} {
				if _, err := glCommit(c, "feature", "", map[string]string{"apps/web/values.yaml": "image: " + v + "\n"}, fmt.Sprintf("step %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			mr, _, err := c.MergeRequests.CreateMergeRequest(glProject, &gitlab.CreateMergeRequestOptions{Title: gitlab.Ptr("Bump web"),
				SourceBranch: gitlab.Ptr("feature"), TargetBranch: gitlab.Ptr("main"), Labels: &gitlab.LabelOptions{"prflow", "env:dev"}})
			if err != nil {
				t.Fatal(err)
			}
			if mr.IID != 1 || mr.WebURL != g.URL()+"/group/sub/release/-/merge_requests/1" || mr.State != "opened" || len(mr.Labels) != 2 {
				t.Fatalf("created MR = iid %d url %s state %s labels %v", mr.IID, mr.WebURL, mr.State, mr.Labels)
			}
			_, resp, err = c.MergeRequests.CreateMergeRequest(glProject, &gitlab.CreateMergeRequestOptions{Title: gitlab.Ptr("again"),
				SourceBranch: gitlab.Ptr("feature"), TargetBranch: gitlab.Ptr("main")})
			if resp.StatusCode != 409 || !strings.Contains(glMsg(err), "Another open merge request already exists for this source branch: !1") {
				t.Fatalf("duplicate MR: %v", err)
			}
			got, _, err := c.MergeRequests.GetMergeRequest(glProject, 1, nil)
			if err != nil || got.DetailedMergeStatus != "checking" {
				t.Fatalf("first read: %q, %v", got.DetailedMergeStatus, err)
			}
			got, _, _ = c.MergeRequests.GetMergeRequest(glProject, 1, nil)
			if got.DetailedMergeStatus != "mergeable" || got.HasConflicts || got.SHA == "" {
				t.Fatalf("second read: %q conflicts %v sha %q", got.DetailedMergeStatus, got.HasConflicts, got.SHA)
			}
			list, _, err := c.MergeRequests.ListProjectMergeRequests(glProject, &gitlab.ListProjectMergeRequestsOptions{
				SourceBranch: gitlab.Ptr("feature"), TargetBranch: gitlab.Ptr("main"), State: gitlab.Ptr("opened")})
			if err != nil || len(list) != 1 || list[0].IID != 1 {
				t.Fatalf("list = %v, %v", list, err)
			}
			changes, _, err := c.MergeRequests.ListMergeRequestDiffs(glProject, 1, nil)
			if err != nil || len(changes) != 1 || changes[0].NewPath != "apps/web/values.yaml" || !strings.Contains(changes[0].Diff, "+image: v3") {
				t.Fatalf("diffs = %v, %v", changes, err)
			}
			_, resp, err = c.MergeRequests.AcceptMergeRequest(glProject, 1, &gitlab.AcceptMergeRequestOptions{SHA: gitlab.Ptr(strings.Repeat("0", 40))})
			if resp.StatusCode != 409 || glMsg(err) != "SHA does not match HEAD of source branch: "+got.SHA {
				t.Fatalf("stale sha: %v", err)
			}
			merged, _, err := c.MergeRequests.AcceptMergeRequest(glProject, 1, &gitlab.AcceptMergeRequestOptions{SHA: gitlab.Ptr(got.SHA),
				Squash: gitlab.Ptr(tc.squash), ShouldRemoveSourceBranch: gitlab.Ptr(true)})
			if err != nil || merged.State != "merged" || merged.MergeCommitSHA == "" {
				t.Fatalf("merge = %+v, %v", merged, err)
			}
			branches, _ := g.Git().Branches("group/sub", "release")
			if branches["main"] != merged.MergeCommitSHA || branches["feature"] != "" {
				t.Fatalf("branches after merge = %v (merge %s)", branches, merged.MergeCommitSHA)
			}
			mc, _ := g.Git().GetCommit("group/sub", "release", merged.MergeCommitSHA)
			if len(mc.Parents) != tc.wantParents || !strings.HasPrefix(mc.Message, "Merge branch 'feature' into 'main'") {
				t.Fatalf("merge commit %+v", mc)
			}
			if tc.squash {
				sq, err := g.Git().GetCommit("group/sub", "release", merged.SquashCommitSHA)
				if err != nil || mc.Parents[1] != sq.SHA || len(sq.Parents) != 1 || sq.Title() != "Bump web" {
					t.Fatalf("squash commit %+v (%v), merge parents %v", sq, err, mc.Parents)
				}
			} else if merged.SquashCommitSHA != "" {
				t.Errorf("squash sha without squash: %s", merged.SquashCommitSHA)
			}
			_, resp, err = c.MergeRequests.AcceptMergeRequest(glProject, 1, nil)
			if resp.StatusCode != 405 {
				t.Errorf("merge merged MR: %v", err)
			}
			note, _, err := c.Notes.CreateMergeRequestNote(glProject, 1, &gitlab.CreateMergeRequestNoteOptions{Body: gitlab.Ptr("shipped")})
			if err != nil || note.Body != "shipped" || note.Author.Username != DefaultUser {
				t.Errorf("note = %+v, %v", note, err)
			}
		})
	}
}

func TestGitLabConflictsPipelinesAndRevert(t *testing.T) {
	g, c := glSetup(t, WithMergeabilityPolls(0))
	pid, err := g.ProjectID(glProject)
	if err != nil {
		t.Fatal(err)
	}
	// The numeric id works wherever the path does.
	if p, _, err := c.Projects.GetProject(pid, nil); err != nil || p.PathWithNamespace != glProject || p.DefaultBranch != "main" || p.HTTPURLToRepo != g.Git().CloneURL("group/sub", "release") {
		t.Fatalf("GetProject(%d) = %+v, %v", pid, p, err)
	}
	for _, b := range []string{"a", "b"} {
		if _, err := glCommit(c, b, "main", map[string]string{"apps/web/values.yaml": "image: " + b + "\n"}, b); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.MergeRequests.CreateMergeRequest(pid, &gitlab.CreateMergeRequestOptions{Title: gitlab.Ptr(b),
			SourceBranch: gitlab.Ptr(b), TargetBranch: gitlab.Ptr("main")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.SetRequiredStatusChecks("group/sub", "release", "main", "ci"); err != nil {
		t.Fatal(err)
	}
	mr, _, _ := c.MergeRequests.GetMergeRequest(pid, 1, nil)
	if mr.DetailedMergeStatus != "ci_must_pass" {
		t.Fatalf("without pipeline: %q", mr.DetailedMergeStatus)
	}
	if _, resp, err := c.MergeRequests.AcceptMergeRequest(pid, 1, nil); resp.StatusCode != 405 {
		t.Fatalf("merge while ci must pass: %v", err)
	}
	st, _, err := c.Commits.SetCommitStatus(pid, mr.SHA, &gitlab.SetCommitStatusOptions{State: gitlab.Running, Name: gitlab.Ptr("ci"), TargetURL: gitlab.Ptr("https://ci/1")})
	if err != nil || st.Status != "running" || st.Name != "ci" {
		t.Fatalf("status = %+v, %v", st, err)
	}
	mr, _, _ = c.MergeRequests.GetMergeRequest(pid, 1, nil)
	if mr.DetailedMergeStatus != "ci_still_running" {
		t.Fatalf("running pipeline: %q", mr.DetailedMergeStatus)
	}
	if _, _, err := c.Commits.SetCommitStatus(pid, mr.SHA, &gitlab.SetCommitStatusOptions{State: gitlab.Success, Name: gitlab.Ptr("ci")}); err != nil {
		t.Fatal(err)
	}
	_, resp, err := c.Commits.SetCommitStatus(pid, mr.SHA, &gitlab.SetCommitStatusOptions{State: "bogus", Name: gitlab.Ptr("ci")})
	if resp.StatusCode != 400 {
		t.Errorf("bad state: %v", err)
	}
	merged, _, err := c.MergeRequests.AcceptMergeRequest(pid, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	mr2, _, _ := c.MergeRequests.GetMergeRequest(pid, 2, nil)
	if mr2.DetailedMergeStatus != "conflict" || !mr2.HasConflicts {
		t.Fatalf("conflicting MR: %q conflicts %v", mr2.DetailedMergeStatus, mr2.HasConflicts)
	}
	if _, resp, err := c.MergeRequests.AcceptMergeRequest(pid, 2, nil); resp.StatusCode != 406 || glMsg(err) != "Branch cannot be merged" {
		t.Fatalf("merge with conflict: %v", err)
	}
	// Revert the merge commit (mainline 1) onto a new branch, as RevertPR does.
	if _, _, err := c.Branches.CreateBranch(pid, &gitlab.CreateBranchOptions{Branch: gitlab.Ptr("revert-1"), Ref: gitlab.Ptr("main")}); err != nil {
		t.Fatal(err)
	}
	rv, _, err := c.Commits.RevertCommit(pid, merged.MergeCommitSHA, &gitlab.RevertCommitOptions{Branch: gitlab.Ptr("revert-1")})
	if err != nil || !strings.HasPrefix(rv.Title, `Revert "Merge branch 'a' into 'main'"`) || rv.ParentIDs[0] != merged.MergeCommitSHA {
		t.Fatalf("revert = %+v, %v", rv, err)
	}
	if got, _ := g.Git().ReadFile("group/sub", "release", "revert-1", "apps/web/values.yaml"); string(got) != "image: v1\n" {
		t.Errorf("after revert: %q", got)
	}
	_, resp, err = c.Commits.RevertCommit(pid, merged.MergeCommitSHA, &gitlab.RevertCommitOptions{Branch: gitlab.Ptr("revert-1")})
	if resp.StatusCode != 400 || !strings.Contains(glMsg(err), "cannot revert this commit automatically") {
		t.Errorf("second revert: %v", err)
	}
	diff, _, err := c.Commits.GetCommitDiff(pid, rv.ID, nil)
	if err != nil || len(diff) != 1 || !strings.Contains(diff[0].Diff, "-image: a") {
		t.Errorf("revert diff = %v, %v", diff, err)
	}
}

func TestGitLabAuthRateLimitAndFaults(t *testing.T) {
	g, c := glSetup(t, WithToken("tok", "alice", "group/sub/release"))
	if _, err := g.CreateRepo("group", "other", nil); err != nil {
		t.Fatal(err)
	}
	_, resp, err := glClient(t, g, "wrong").Users.CurrentUser()
	if resp == nil || resp.StatusCode != 401 || glMsg(err) != "401 Unauthorized" {
		t.Fatalf("bad token: %v", err)
	}
	c = glClient(t, g, "tok")
	u, resp, err := c.Users.CurrentUser()
	if err != nil || u.Username != "alice" || resp.Header.Get("RateLimit-Limit") == "" || resp.Header.Get("RateLimit-Remaining") == "" {
		t.Fatalf("user = %+v, %v, headers %v", u, err, resp.Header)
	}
	if _, _, err := c.Projects.GetProject("group/other", nil); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("invisible project: %v", err)
	}
	if _, _, err := c.Projects.GetProject("group/missing", nil); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("missing project: %v", err)
	}
	// Without retries the 429 reaches the caller with its headers.
	noRetry := glClient(t, g, "tok", gitlab.WithoutRetries())
	if err := g.RateLimitNext(1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	_, resp, err = noRetry.Projects.GetProject(glProject, nil)
	if !gitlab.HasStatusCode(err, 429) || resp.Header.Get("Retry-After") != "2" || resp.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("rate limited: %v %v", err, resp.Header)
	}
	// With its default retries client-go waits for RateLimit-Reset and succeeds.
	if err := g.RateLimitNext(1, time.Second); err != nil {
		t.Fatal(err)
	}
	g.ResetCalls()
	if _, _, err := c.Projects.GetProject(glProject, nil); err != nil {
		t.Fatalf("retried after 429: %v", err)
	}
	calls := g.Calls()
	if len(calls) != 2 || calls[0].Status != 429 || calls[1].Status != 200 {
		t.Fatalf("calls = %+v", calls)
	}
	// A 502 on a POST is retried by client-go too: the commit API must not apply twice.
	if err := g.InjectFault(Fault{Method: "POST", PathPattern: `/repository/commits$`, Status: 502, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := glCommit(c, "main", "", map[string]string{"apps/web/values.yaml": "image: retried\n"}, "retried"); err != nil {
		t.Fatal(err)
	}
	log, _ := g.Git().Log("group/sub", "release", "main")
	if len(log) != 2 {
		t.Errorf("main has %d commits after a retried commit, want 2", len(log))
	}
	if !strings.Contains(calls[0].Path, "group%2Fsub%2Frelease") {
		t.Errorf("recorded path %q is not the escaped path", calls[0].Path)
	}
}

// TestGitLabConcurrentCommits: GitLab applies each commit to the branch's current head, so ten
// concurrent writers of different files all land; writers guarding the same file with
// last_commit_id get the "changed since you started editing" 400 except one.
func TestGitLabConcurrentCommits(t *testing.T) {
	g, c := glSetup(t)
	file, _, err := c.RepositoryFiles.GetFile(glProject, "apps/web/values.yaml", &gitlab.GetFileOptions{Ref: gitlab.Ptr("main")})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	okGuarded, conflicts := 0, 0
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			if _, err := glCommit(c, "main", "", nil, "noop"); err == nil {
				errs <- fmt.Errorf("commit without actions accepted")
			}
			opt := &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("main"), CommitMessage: gitlab.Ptr(fmt.Sprint("add ", i)),
				Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileCreate), FilePath: gitlab.Ptr(fmt.Sprintf("w/%d", i)), Content: gitlab.Ptr("x")}}}
			if _, _, err := c.Commits.CreateCommit(glProject, opt); err != nil {
				errs <- fmt.Errorf("writer %d: %v", i, err)
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			opt := &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("main"), CommitMessage: gitlab.Ptr(fmt.Sprint("guarded ", i)),
				Actions: []*gitlab.CommitActionOptions{{Action: gitlab.Ptr(gitlab.FileUpdate), FilePath: gitlab.Ptr("apps/web/values.yaml"),
					Content: gitlab.Ptr(fmt.Sprintf("image: g%d\n", i)), LastCommitID: gitlab.Ptr(file.LastCommitID)}}}
			_, _, err := c.Commits.CreateCommit(glProject, opt)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				okGuarded++
			case glMsg(err) == "You are attempting to update a file that has changed since you started editing it.":
				conflicts++
			default:
				errs <- fmt.Errorf("guarded writer %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if okGuarded != 1 || conflicts != n-1 {
		t.Errorf("guarded writers: %d landed, %d conflicts; want 1 and %d", okGuarded, conflicts, n-1)
	}
	log, _ := g.Git().Log("group/sub", "release", "main")
	if len(log) != 1+n+1 {
		t.Errorf("main has %d commits, want %d", len(log), n+2)
	}
	for i := 0; i < n; i++ {
		if _, err := g.Git().ReadFile("group/sub", "release", "main", fmt.Sprintf("w/%d", i)); err != nil {
			t.Errorf("writer %d lost: %v", i, err)
		}
	}
}

func TestGitLabWebhooks(t *testing.T) {
	var events hookEvents
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gitlab.HookEventToken(r) != "tok3n" || r.Header.Get("X-Gitlab-Event-UUID") == "" {
			http.Error(w, "bad token", 401)
			return
		}
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		ev, err := gitlab.ParseWebhook(gitlab.HookEventType(r), body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		switch e := ev.(type) {
		case *gitlab.MergeEvent:
			events.add("mr:" + e.ObjectAttributes.Action + ":" + e.ObjectAttributes.State)
		case *gitlab.PushEvent:
			events.add(fmt.Sprintf("push:%s:%d", e.Ref, len(e.Commits)))
		}
	}))
	defer recv.Close()
	g, c := glSetup(t, WithWebhook(recv.URL, "tok3n"), WithMergeabilityPolls(0))
	if _, err := glCommit(c, "f", "main", map[string]string{"apps/web/values.yaml": "image: f\n"}, "f"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.MergeRequests.CreateMergeRequest(glProject, &gitlab.CreateMergeRequestOptions{Title: gitlab.Ptr("f"),
		SourceBranch: gitlab.Ptr("f"), TargetBranch: gitlab.Ptr("main")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.MergeRequests.AcceptMergeRequest(glProject, 1, nil); err != nil {
		t.Fatal(err)
	}
	events.want(t, g.Forge, "push:refs/heads/f:1,mr:open:opened,push:refs/heads/main:2,mr:merge:merged")
}
