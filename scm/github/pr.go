package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// FindPR returns the newest PR (highest number) from head into base in any state, read in
// full so that Mergeability is known. head may be "branch" (same repository) or "owner:branch".
func (d *Driver) FindPR(ctx context.Context, repo scm.Repo, head, base string) (*scm.PullRequest, error) {
	op := fmt.Sprintf("find PR %s into %s", head, base)
	owner, name, err := splitRepo(repo, scm.CheckHeadBase(head, base))
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	qualified := head
	if !strings.Contains(head, ":") {
		qualified = owner + ":" + head
	}
	opts := &gh.PullRequestListOptions{State: "all", Head: qualified, Base: base, ListOptions: gh.ListOptions{PerPage: 100}}
	newest := 0
	for {
		prs, resp, err := d.client.PullRequests.List(ctx, owner, name, opts)
		if err != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		for _, pr := range prs {
			// Guard against servers that ignore the head/base filters.
			if pr.GetHead().GetRef() != branchOf(head) || pr.GetBase().GetRef() != base {
				continue
			}
			newest = max(newest, pr.GetNumber())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return scm.GetNewest(ctx, d, Name, op, repo, "pull request", head, base, newest)
}

func branchOf(head string) string {
	if _, b, ok := strings.Cut(head, ":"); ok {
		return b
	}
	return head
}

// OpenPR opens a PR, then adds labels and requests reviewers ("org/team" names a team). An
// open PR that already exists for the same head and base is adopted instead of failing.
func (d *Driver) OpenPR(ctx context.Context, repo scm.Repo, in scm.NewPR) (*scm.PullRequest, error) {
	op := fmt.Sprintf("open PR %s into %s", in.Head, in.Base)
	owner, name, err := splitRepo(repo, in.Check())
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	// A replayed create answers 422 "already exists" and the PR is adopted below.
	pr, resp, err := d.client.PullRequests.Create(transport.Guarded(ctx), owner, name, &gh.NewPullRequest{
		Title: str(in.Title), Head: str(in.Head), Base: str(in.Base), Body: str(in.Body), Draft: &in.Draft,
	})
	var out *scm.PullRequest
	switch {
	case err == nil:
		out = convertPR(pr)
		d.log.Info("github PR opened", "repo", string(repo), "number", out.Number, "head", in.Head, "base", in.Base)
	case resp != nil && resp.StatusCode == http.StatusUnprocessableEntity && strings.Contains(err.Error(), "already exists"):
		existing, ferr := d.FindPR(ctx, repo, in.Head, in.Base)
		if ferr != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		out = existing
	default:
		return nil, d.wrap(op, repo, resp, err)
	}
	if len(in.Labels) > 0 {
		labels, resp, err := d.client.Issues.AddLabelsToIssue(transport.Guarded(ctx), owner, name, out.Number, in.Labels)
		if err != nil {
			return nil, d.wrap(fmt.Sprintf("add labels to PR #%d", out.Number), repo, resp, err)
		}
		out.Labels = out.Labels[:0]
		for _, l := range labels {
			out.Labels = append(out.Labels, l.GetName())
		}
	}
	if len(in.Reviewers) > 0 {
		var req gh.ReviewersRequest
		for _, r := range in.Reviewers {
			if _, team, ok := strings.Cut(r, "/"); ok {
				req.TeamReviewers = append(req.TeamReviewers, team)
			} else {
				req.Reviewers = append(req.Reviewers, r)
			}
		}
		if _, resp, err := d.client.PullRequests.RequestReviewers(transport.Guarded(ctx), owner, name, out.Number, req); err != nil {
			return nil, d.wrap(fmt.Sprintf("request reviewers on PR #%d", out.Number), repo, resp, err)
		}
	}
	return out, nil
}

// GetPR reads one PR.
func (d *Driver) GetPR(ctx context.Context, repo scm.Repo, number int) (*scm.PullRequest, error) {
	op := fmt.Sprintf("get PR #%d", number)
	owner, name, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	pr, resp, err := d.client.PullRequests.Get(ctx, owner, name, number)
	if err != nil {
		return nil, d.wrap(op, repo, resp, err)
	}
	return convertPR(pr), nil
}

// MergePR merges with the head-SHA guard when in.SHA is set. A stale SHA (409) is
// ErrConflict; 405 "Base branch was modified" is transient (ErrBaseBranchModified); any other
// refusal is a *scm.NotMergeableError with GitHub's reason. A PR that is already merged at the
// expected head is returned as success so that redelivered jobs are harmless.
func (d *Driver) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	op := fmt.Sprintf("merge PR #%d", number)
	owner, name, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	method := in.Method
	switch method {
	case "":
		method = scm.MergeCommit
	case scm.MergeCommit, scm.Squash, scm.Rebase:
	default:
		return nil, d.wrap(op, repo, nil, fmt.Errorf("unknown merge method %q (want merge, squash or rebase)", in.Method))
	}
	title, body, _ := strings.Cut(in.Message, "\n")
	res, resp, err := d.client.PullRequests.Merge(ctx, owner, name, number, strings.TrimLeft(body, "\n"), &gh.PullRequestOptions{
		CommitTitle: title, SHA: in.SHA, MergeMethod: string(method),
	})
	var pr *scm.PullRequest
	if err != nil {
		if pr, err = d.mergeError(ctx, op, repo, number, in, resp, err); err != nil {
			return nil, err
		}
		d.log.Info("github PR was already merged", "repo", string(repo), "number", number, "sha", pr.MergeSHA)
	} else {
		// The merge answer carries the merge commit: no need to read the PR again, unless the
		// source branch is to be deleted and the caller did not name it.
		pr = &scm.PullRequest{Number: number, State: scm.PRMerged, MergeSHA: res.GetSHA(), HeadSHA: in.SHA, Head: in.Head}
		if pr.MergeSHA == "" || (in.DeleteBranch && pr.Head == "") {
			full, err := d.GetPR(ctx, repo, number)
			if err != nil {
				return nil, err
			}
			full.State = scm.PRMerged
			if pr.MergeSHA != "" {
				full.MergeSHA = pr.MergeSHA
			}
			pr = full
		}
		d.log.Info("github PR merged", "repo", string(repo), "number", number, "method", string(method), "sha", pr.MergeSHA)
	}
	if in.DeleteBranch && pr.Head != "" {
		if err := d.DeleteBranch(ctx, repo, pr.Head); err != nil && !errors.Is(err, scm.ErrNotFound) {
			d.log.Warn("github: delete merged branch failed", "repo", string(repo), "branch", pr.Head, "err", err.Error())
		}
	}
	return pr, nil
}

// mergeError classifies a failed merge; it returns the PR when it turns out to be merged
// already at the expected head.
func (d *Driver) mergeError(ctx context.Context, op string, repo scm.Repo, number int, in scm.MergeInput, resp *gh.Response, err error) (*scm.PullRequest, error) {
	var er *gh.ErrorResponse
	if resp == nil || !errors.As(err, &er) {
		return nil, d.wrap(op, repo, resp, err)
	}
	msg := d.describe(er)
	e := &scm.Error{Provider: Name, Op: op, Repo: repo, Status: resp.StatusCode}
	switch resp.StatusCode {
	case http.StatusConflict:
		e.Err = &scm.ConflictError{Msg: fmt.Sprintf("head moved away from %s: %s", in.SHA, msg)}
		return nil, e
	case http.StatusMethodNotAllowed, http.StatusUnprocessableEntity:
		if strings.Contains(strings.ToLower(msg), "base branch was modified") {
			e.Err = &transientError{msg: msg, base: ErrBaseBranchModified}
			return nil, e
		}
		// Already merged (a redelivered job) is success; closed is a clear refusal.
		pr, gerr := d.GetPR(ctx, repo, number)
		if gerr == nil {
			done, rerr := in.Refused(pr, "PR", "pull request", msg)
			if done {
				return pr, nil
			}
			if rerr != nil {
				e.Err = rerr
				return nil, e
			}
		}
		nm := &scm.NotMergeableError{Msg: msg}
		if lower := strings.ToLower(msg); gerr == nil && (strings.Contains(lower, "not mergeable") || strings.Contains(lower, "can't be rebased")) {
			nm.Files = d.conflictFiles(ctx, repo, pr.Base, pr.HeadSHA)
		}
		e.Err = nm
		return nil, e
	}
	return nil, d.wrap(op, repo, resp, err)
}

// conflictFiles names the files a refused merge conflicts on, best effort: GitHub does not
// say, so they are the files both the PR and its base changed since their merge base, to
// different contents (compared by blob SHA). Errors leave the list empty.
func (d *Driver) conflictFiles(ctx context.Context, repo scm.Repo, base, head string) []string {
	owner, name, err := splitRepo(repo)
	if err != nil || base == "" || head == "" {
		return nil
	}
	ours, _, err := d.client.Repositories.CompareCommits(ctx, owner, name, base, head, &gh.ListOptions{PerPage: 100})
	if err != nil || ours.GetMergeBaseCommit().GetSHA() == "" {
		return nil
	}
	theirs, _, err := d.client.Repositories.CompareCommits(ctx, owner, name, ours.GetMergeBaseCommit().GetSHA(), base, &gh.ListOptions{PerPage: 100})
	if err != nil {
		return nil
	}
	baseSide := map[string]string{}
	for _, f := range theirs.Files {
		baseSide[f.GetFilename()] = f.GetSHA()
		if p := f.GetPreviousFilename(); p != "" {
			baseSide[p] = ""
		}
	}
	var files []string
	for _, f := range ours.Files {
		for _, p := range []string{f.GetFilename(), f.GetPreviousFilename()} {
			if sha, ok := baseSide[p]; ok && p != "" && (sha != f.GetSHA() || p != f.GetFilename()) && !slices.Contains(files, p) {
				files = append(files, p)
			}
		}
	}
	sort.Strings(files)
	return files
}

// ClosePR closes without merging.
func (d *Driver) ClosePR(ctx context.Context, repo scm.Repo, number int) error {
	op := fmt.Sprintf("close PR #%d", number)
	owner, name, err := splitRepo(repo)
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, resp, err := d.client.PullRequests.Edit(ctx, owner, name, number, &gh.PullRequest{State: str("closed")})
	return d.wrap(op, repo, resp, err)
}

// Comment adds a conversation comment to a PR.
func (d *Driver) Comment(ctx context.Context, repo scm.Repo, number int, body string) error {
	op := fmt.Sprintf("comment on PR #%d", number)
	owner, name, err := splitRepo(repo, scm.CheckComment(body))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, resp, err := d.client.Issues.CreateComment(ctx, owner, name, number, &gh.IssueComment{Body: str(body)})
	return d.wrap(op, repo, resp, err)
}

// EditComment replaces the body of comment id (ListComments' ID) of PR number. GitHub
// addresses issue comments by repo and id, so the PR number only names the call.
func (d *Driver) EditComment(ctx context.Context, repo scm.Repo, number int, id, body string) error {
	op := fmt.Sprintf("edit comment %s on PR #%d", id, number)
	cid, idErr := scm.ParseCommentID(id)
	owner, name, err := splitRepo(repo, idErr, scm.CheckComment(body))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, resp, err := d.client.Issues.EditComment(ctx, owner, name, cid, &gh.IssueComment{Body: str(body)})
	return d.wrap(op, repo, resp, err)
}

// MaxCommentBytes is GitHub's limit on a comment (65,536 characters; bytes never count fewer).
func (d *Driver) MaxCommentBytes() int { return scm.GitHubMaxComment }

// ListComments lists a PR's conversation comments (the issue comments API), oldest first.
func (d *Driver) ListComments(ctx context.Context, repo scm.Repo, number int) ([]scm.PRComment, error) {
	op := fmt.Sprintf("list comments of PR #%d", number)
	owner, name, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	opts := &gh.IssueListCommentsOptions{ListOptions: gh.ListOptions{PerPage: 100}}
	var out []scm.PRComment
	for {
		cs, resp, err := d.client.Issues.ListComments(ctx, owner, name, number, opts)
		if err != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		for _, c := range cs {
			out = append(out, scm.PRComment{ID: strconv.FormatInt(c.GetID(), 10), Author: c.GetUser().GetLogin(), Body: c.GetBody()})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// ChangedFiles lists the paths a PR changes; a rename lists both names.
func (d *Driver) ChangedFiles(ctx context.Context, repo scm.Repo, number int) ([]string, error) {
	op := fmt.Sprintf("list files of PR #%d", number)
	owner, name, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	opts := &gh.ListOptions{PerPage: 100}
	var out []string
	for {
		files, resp, err := d.client.PullRequests.ListFiles(ctx, owner, name, number, opts)
		if err != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		for _, f := range files {
			if p := f.GetPreviousFilename(); p != "" {
				out = append(out, p)
			}
			out = append(out, f.GetFilename())
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

func convertPR(pr *gh.PullRequest) *scm.PullRequest {
	out := &scm.PullRequest{
		Number:       pr.GetNumber(),
		Title:        pr.GetTitle(),
		Body:         pr.GetBody(),
		State:        prState(pr.GetState(), pr.GetMerged()),
		Draft:        pr.GetDraft(),
		Head:         pr.GetHead().GetRef(),
		Base:         pr.GetBase().GetRef(),
		HeadSHA:      pr.GetHead().GetSHA(),
		Mergeability: mergeability(pr.Mergeable, pr.GetMergeableState()),
		URL:          pr.GetHTMLURL(),
	}
	if out.State == scm.PRMerged {
		out.MergeSHA = pr.GetMergeCommitSHA()
	}
	for _, l := range pr.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	return out
}

// prState folds GitHub's open/closed + merged flag into scm.PRState.
func prState(state string, merged bool) scm.PRState {
	switch {
	case merged:
		return scm.PRMerged
	case state == "closed":
		return scm.PRClosed
	default:
		return scm.PROpen
	}
}

// mergeability reads GitHub's mergeable (null while GitHub computes it) and mergeable_state.
func mergeability(mergeable *bool, state string) scm.Mergeability {
	if mergeable == nil {
		return scm.MergeUnknown
	}
	if !*mergeable || state == "dirty" {
		return scm.MergeDirty
	}
	switch state {
	case "blocked", "behind", "draft":
		return scm.MergeBlocked
	case "unknown":
		return scm.MergeUnknown
	default: // clean, unstable (non-required checks failing), has_hooks
		return scm.MergeClean
	}
}
