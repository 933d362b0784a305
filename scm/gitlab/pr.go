package gitlab

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// FindPR returns the newest MR (highest IID) from head into base in any state.
func (d *Driver) FindPR(ctx context.Context, repo scm.Repo, head, base string) (*scm.PullRequest, error) {
	op := fmt.Sprintf("find MR %s into %s", head, base)
	pid, err := projectID(repo, scm.CheckHeadBase(head, base))
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	opts := &gl.ListProjectMergeRequestsOptions{
		ListOptions:  gl.ListOptions{PerPage: 100},
		SourceBranch: ptr(head), TargetBranch: ptr(base), State: ptr("all"),
		OrderBy: ptr("created_at"), Sort: ptr("desc"),
	}
	newest := 0
	for {
		mrs, resp, err := d.client.MergeRequests.ListProjectMergeRequests(pid, opts, gl.WithContext(ctx))
		if err != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		for _, mr := range mrs {
			if mr.SourceBranch != head || mr.TargetBranch != base {
				continue
			}
			newest = max(newest, int(mr.IID))
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return scm.GetNewest(ctx, d, Name, op, repo, "merge request", head, base, newest)
}

// OpenPR opens an MR with labels and reviewers (usernames, resolved to ids). A draft gets
// GitLab's "Draft: " title prefix. An open MR that already exists for the same branches is
// adopted instead of failing.
func (d *Driver) OpenPR(ctx context.Context, repo scm.Repo, in scm.NewPR) (*scm.PullRequest, error) {
	op := fmt.Sprintf("open MR %s into %s", in.Head, in.Base)
	pid, err := projectID(repo, in.Check())
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	title := in.Title
	if in.Draft && !strings.HasPrefix(strings.ToLower(title), "draft:") {
		title = "Draft: " + title
	}
	opts := &gl.CreateMergeRequestOptions{
		Title: ptr(title), Description: ptr(in.Body), SourceBranch: ptr(in.Head), TargetBranch: ptr(in.Base),
	}
	if len(in.Labels) > 0 {
		opts.Labels = ptr(gl.LabelOptions(in.Labels))
	}
	if len(in.Reviewers) > 0 {
		ids, err := d.userIDs(ctx, op, repo, in.Reviewers)
		if err != nil {
			return nil, err
		}
		opts.ReviewerIDs = &ids
	}
	// A replayed create answers 409 and the open MR is adopted below.
	mr, resp, err := d.client.MergeRequests.CreateMergeRequest(pid, opts, gl.WithContext(transport.Guarded(ctx)))
	if err != nil {
		if hasStatus(resp, http.StatusConflict) {
			// "Another open merge request already exists for this source branch"
			if existing, ferr := d.FindPR(ctx, repo, in.Head, in.Base); ferr == nil && existing.State == scm.PROpen {
				return existing, nil
			}
		}
		return nil, d.wrap(op, repo, resp, err)
	}
	d.log.Info("gitlab MR opened", "repo", string(repo), "iid", mr.IID, "head", in.Head, "base", in.Base)
	return convertMR(mr), nil
}

func (d *Driver) userIDs(ctx context.Context, op string, repo scm.Repo, names []string) ([]int64, error) {
	ids := make([]int64, 0, len(names))
	for _, n := range names {
		users, resp, err := d.client.Users.ListUsers(&gl.ListUsersOptions{Username: ptr(n)}, gl.WithContext(ctx))
		if err != nil {
			return nil, d.wrap(op+": look up reviewer "+n, repo, resp, err)
		}
		if len(users) == 0 {
			return nil, &scm.Error{Provider: Name, Op: op, Repo: repo,
				Err: fmt.Errorf("%w: reviewer %q is not a GitLab user", scm.ErrNotFound, n)}
		}
		ids = append(ids, users[0].ID)
	}
	return ids, nil
}

// GetPR reads one MR by IID.
func (d *Driver) GetPR(ctx context.Context, repo scm.Repo, number int) (*scm.PullRequest, error) {
	op := fmt.Sprintf("get MR !%d", number)
	pid, err := projectID(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	mr, resp, err := d.client.MergeRequests.GetMergeRequest(pid, int64(number), nil, gl.WithContext(ctx))
	if err != nil {
		return nil, d.wrap(op, repo, resp, err)
	}
	return convertMR(mr), nil
}

// MergePR accepts the MR with the head-SHA guard when in.SHA is set: 409 (SHA does not match)
// is ErrConflict; 405/406/422 are a *scm.NotMergeableError with GitLab's reason. Rebase is
// a project setting on GitLab (merge method), not a per-merge choice: ErrNotSupported.
func (d *Driver) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	op := fmt.Sprintf("merge MR !%d", number)
	pid, err := projectID(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	opts := &gl.AcceptMergeRequestOptions{}
	switch in.Method {
	case "", scm.MergeCommit:
		opts.Squash = ptr(false)
		if in.Message != "" {
			opts.MergeCommitMessage = ptr(in.Message)
		}
	case scm.Squash:
		opts.Squash = ptr(true)
		if in.Message != "" {
			opts.SquashCommitMessage = ptr(in.Message)
		}
	case scm.Rebase:
		return nil, d.wrap(op, repo, nil, fmt.Errorf("%w: GitLab sets rebase/fast-forward per project (merge method), use merge or squash", scm.ErrNotSupported))
	default:
		return nil, d.wrap(op, repo, nil, fmt.Errorf("unknown merge method %q (want merge, squash or rebase)", in.Method))
	}
	if in.SHA != "" {
		opts.SHA = ptr(in.SHA)
	}
	if in.DeleteBranch {
		opts.ShouldRemoveSourceBranch = ptr(true)
	}
	mr, resp, err := d.client.MergeRequests.AcceptMergeRequest(pid, int64(number), opts, gl.WithContext(ctx))
	if err != nil {
		return d.mergeError(ctx, op, repo, number, in, resp, err)
	}
	out := convertMR(mr)
	if out.State != scm.PRMerged {
		return nil, &scm.Error{Provider: Name, Op: op, Repo: repo, Status: resp.StatusCode,
			Err: &scm.NotMergeableError{Msg: fmt.Sprintf("GitLab accepted the merge but the MR is %s (%s)", mr.State, mr.DetailedMergeStatus)}}
	}
	d.log.Info("gitlab MR merged", "repo", string(repo), "iid", number, "sha", out.MergeSHA)
	return out, nil
}

func (d *Driver) mergeError(ctx context.Context, op string, repo scm.Repo, number int, in scm.MergeInput, resp *gl.Response, err error) (*scm.PullRequest, error) {
	if resp == nil || resp.Response == nil {
		return nil, d.wrap(op, repo, resp, err)
	}
	msg := d.errText(err)
	e := &scm.Error{Provider: Name, Op: op, Repo: repo, Status: resp.StatusCode}
	switch resp.StatusCode {
	case http.StatusConflict:
		e.Err = &scm.ConflictError{Msg: fmt.Sprintf("head moved away from %s: %s", in.SHA, msg)}
		return nil, e
	case http.StatusMethodNotAllowed, http.StatusNotAcceptable, http.StatusUnprocessableEntity:
		// Already merged (a redelivered job) is success.
		if pr, gerr := d.GetPR(ctx, repo, number); gerr == nil {
			done, rerr := in.Refused(pr, "MR", "merge request", msg)
			switch {
			case done:
				return pr, nil
			case rerr != nil:
				e.Err = rerr
				return nil, e
			case pr.Mergeability != scm.MergeClean:
				msg += " (" + string(pr.Mergeability) + ")"
			}
		}
		nm := &scm.NotMergeableError{Msg: msg}
		if resp.StatusCode == http.StatusNotAcceptable || strings.Contains(msg, string(scm.MergeDirty)) {
			nm.Files = d.conflictFiles(ctx, repo, number)
		}
		e.Err = nm
		return nil, e
	}
	return nil, d.wrap(op, repo, resp, err)
}

// conflictFiles names the files a refused merge conflicts on, best effort: the MR's files that
// the target branch also changed since the merge base (diff_refs.base_sha), to a different
// result. Errors leave the list empty.
func (d *Driver) conflictFiles(ctx context.Context, repo scm.Repo, number int) []string {
	pid, err := projectID(repo)
	if err != nil {
		return nil
	}
	mr, _, err := d.client.MergeRequests.GetMergeRequest(pid, int64(number), nil, gl.WithContext(ctx))
	if err != nil || mr.DiffRefs.BaseSha == "" {
		return nil
	}
	target, err := d.Branch(ctx, repo, mr.TargetBranch)
	if err != nil {
		return nil
	}
	paths, err := d.ChangedFiles(ctx, repo, number)
	if err != nil {
		return nil
	}
	var files []string
	for _, p := range paths {
		at := func(ref string) (fileMeta, bool) {
			m, err := d.stat(ctx, repo, "read "+p, ref, p)
			return m, err == nil
		}
		mb, ok1 := at(mr.DiffRefs.BaseSha)
		theirs, ok2 := at(target.SHA)
		ours, ok3 := at(mr.SHA)
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		if !sameFile(theirs, mb) && !sameFile(theirs, ours) && !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	sort.Strings(files)
	return files
}

func sameFile(a, b fileMeta) bool {
	return a.exists == b.exists && (!a.exists || bytes.Equal(a.data, b.data))
}

// ClosePR closes the MR without merging.
func (d *Driver) ClosePR(ctx context.Context, repo scm.Repo, number int) error {
	op := fmt.Sprintf("close MR !%d", number)
	pid, err := projectID(repo)
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, resp, err := d.client.MergeRequests.UpdateMergeRequest(pid, int64(number), &gl.UpdateMergeRequestOptions{StateEvent: ptr("close")}, gl.WithContext(ctx))
	return d.wrap(op, repo, resp, err)
}

// Comment adds a note to the MR.
func (d *Driver) Comment(ctx context.Context, repo scm.Repo, number int, body string) error {
	op := fmt.Sprintf("comment on MR !%d", number)
	pid, err := projectID(repo, scm.CheckComment(body))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, resp, err := d.client.Notes.CreateMergeRequestNote(pid, int64(number), &gl.CreateMergeRequestNoteOptions{Body: ptr(body)}, gl.WithContext(ctx))
	return d.wrap(op, repo, resp, err)
}

// EditComment replaces the body of note id (ListComments' ID) of MR number.
func (d *Driver) EditComment(ctx context.Context, repo scm.Repo, number int, id, body string) error {
	op := fmt.Sprintf("edit note %s on MR !%d", id, number)
	nid, idErr := scm.ParseCommentID(id)
	pid, err := projectID(repo, idErr, scm.CheckComment(body))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, resp, err := d.client.Notes.UpdateMergeRequestNote(pid, int64(number), nid, &gl.UpdateMergeRequestNoteOptions{Body: ptr(body)}, gl.WithContext(ctx))
	return d.wrap(op, repo, resp, err)
}

// MaxCommentBytes is GitLab's limit on a note (1,000,000 characters; bytes never count fewer).
func (d *Driver) MaxCommentBytes() int { return scm.GitLabMaxComment }

// ListComments lists an MR's notes, oldest first, without GitLab's system notes ("added 1
// commit", "merged").
func (d *Driver) ListComments(ctx context.Context, repo scm.Repo, number int) ([]scm.PRComment, error) {
	op := fmt.Sprintf("list notes of MR !%d", number)
	pid, err := projectID(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	opts := &gl.ListMergeRequestNotesOptions{ListOptions: gl.ListOptions{PerPage: 100},
		OrderBy: ptr("created_at"), Sort: ptr("asc")}
	var out []scm.PRComment
	for {
		notes, resp, err := d.client.Notes.ListMergeRequestNotes(pid, int64(number), opts, gl.WithContext(ctx))
		if err != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		for _, n := range notes {
			if n.System {
				continue
			}
			out = append(out, scm.PRComment{ID: strconv.FormatInt(n.ID, 10), Author: n.Author.Username, Body: n.Body})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// ChangedFiles lists the paths an MR changes; a rename lists both names.
func (d *Driver) ChangedFiles(ctx context.Context, repo scm.Repo, number int) ([]string, error) {
	op := fmt.Sprintf("list files of MR !%d", number)
	pid, err := projectID(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	opts := &gl.ListMergeRequestDiffsOptions{ListOptions: gl.ListOptions{PerPage: 100}}
	var out []string
	for {
		diffs, resp, err := d.client.MergeRequests.ListMergeRequestDiffs(pid, int64(number), opts, gl.WithContext(ctx))
		if err != nil {
			return nil, d.wrap(op, repo, resp, err)
		}
		for _, df := range diffs {
			if df.OldPath != "" && df.OldPath != df.NewPath {
				out = append(out, df.OldPath)
			}
			out = append(out, df.NewPath)
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

func convertMR(mr *gl.MergeRequest) *scm.PullRequest {
	out := convertBasicMR(&mr.BasicMergeRequest)
	return out
}

func convertBasicMR(mr *gl.BasicMergeRequest) *scm.PullRequest {
	out := &scm.PullRequest{
		Number:       int(mr.IID),
		Title:        mr.Title,
		Body:         mr.Description,
		State:        mrState(mr.State),
		Draft:        mr.Draft,
		Head:         mr.SourceBranch,
		Base:         mr.TargetBranch,
		HeadSHA:      mr.SHA,
		Mergeability: mergeability(mr.DetailedMergeStatus, "", mr.HasConflicts),
		Labels:       append([]string(nil), mr.Labels...),
		URL:          mr.WebURL,
	}
	if out.State == scm.PRMerged {
		switch {
		case mr.MergeCommitSHA != "":
			out.MergeSHA = mr.MergeCommitSHA
		case mr.SquashCommitSHA != "":
			out.MergeSHA = mr.SquashCommitSHA
		default: // fast-forward merge: the head itself is now on the target branch
			out.MergeSHA = mr.SHA
		}
	}
	return out
}

// mrState maps GitLab's MR state; "locked" is the short window while a merge runs.
func mrState(state string) scm.PRState {
	switch state {
	case "merged":
		return scm.PRMerged
	case "closed":
		return scm.PRClosed
	default:
		return scm.PROpen
	}
}

// mergeability maps detailed_merge_status (GitLab ≥ 15.6), falling back to the deprecated
// merge_status for older servers.
func mergeability(detailed, legacy string, hasConflicts bool) scm.Mergeability {
	if hasConflicts {
		return scm.MergeDirty
	}
	switch detailed {
	case "mergeable":
		return scm.MergeClean
	case "conflict", "broken_status":
		return scm.MergeDirty
	case "checking", "unchecked", "preparing", "approvals_syncing":
		return scm.MergeUnknown
	case "":
	default:
		// ci_must_pass, ci_still_running, not_approved, discussions_not_resolved, draft_status,
		// need_rebase, blocked_status, not_open, requested_changes, … : GitLab would refuse now
		// but the MR itself is fine.
		return scm.MergeBlocked
	}
	switch legacy {
	case "can_be_merged":
		return scm.MergeClean
	case "cannot_be_merged":
		return scm.MergeDirty
	default: // unchecked, checking, cannot_be_merged_recheck
		return scm.MergeUnknown
	}
}
