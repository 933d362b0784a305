package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// Branch returns a branch head; ErrNotFound when the branch does not exist.
func (d *Driver) Branch(ctx context.Context, repo scm.Repo, name string) (scm.Ref, error) {
	op := "get branch " + name
	pid, err := projectID(repo, scm.CheckBranch(name))
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, nil, err)
	}
	b, resp, err := d.client.Branches.GetBranch(pid, name, gl.WithContext(ctx))
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, resp, err)
	}
	if b.Commit == nil || b.Commit.ID == "" {
		return scm.Ref{}, d.wrap(op, repo, nil, fmt.Errorf("branch %s has no commit in the response", name))
	}
	return scm.Ref{Name: b.Name, SHA: b.Commit.ID}, nil
}

// CreateBranch creates name at sha; it succeeds when the branch already points at sha and
// fails with ErrConflict when it points elsewhere.
func (d *Driver) CreateBranch(ctx context.Context, repo scm.Repo, name, sha string) error {
	op := fmt.Sprintf("create branch %s at %s", name, sha)
	pid, err := projectID(repo, scm.CheckBranch(name), scm.CheckSHA(sha))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	// A replayed create answers "already exists", which is handled below.
	_, resp, err := d.client.Branches.CreateBranch(pid, &gl.CreateBranchOptions{Branch: ptr(name), Ref: ptr(sha)}, gl.WithContext(transport.Guarded(ctx)))
	if err == nil {
		d.log.Info("gitlab branch created", "repo", string(repo), "branch", name, "sha", sha)
		return nil
	}
	if !hasStatus(resp, http.StatusBadRequest) || !strings.Contains(strings.ToLower(err.Error()), "already exists") {
		return d.wrap(op, repo, resp, err)
	}
	cur, gerr := d.Branch(ctx, repo, name)
	if gerr != nil {
		return gerr
	}
	return scm.ExistingBranchError(Name, op, repo, http.StatusBadRequest, name, sha, cur)
}

// DeleteBranch deletes name; ErrNotFound when it does not exist.
func (d *Driver) DeleteBranch(ctx context.Context, repo scm.Repo, name string) error {
	op := "delete branch " + name
	pid, err := projectID(repo, scm.CheckBranch(name))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	resp, err := d.client.Branches.DeleteBranch(pid, name, gl.WithContext(ctx))
	return d.wrap(op, repo, resp, err)
}

// Commit writes in.Changes in one POST /repository/commits.
//
// GitLab has no compare-and-swap on a branch, so the Parent guard is built from what it has:
//   - a new branch is created by the commit itself from start_sha = Parent, so its parent is
//     exactly Parent, and a branch created by someone else meanwhile makes GitLab refuse;
//   - on an existing branch the head must equal Parent before the call, and every update or
//     delete carries last_commit_id as of Parent, so GitLab refuses if any file we touch
//     changed after Parent (ErrConflict, nothing written). A concurrent commit that touched
//     only other files cannot be detected before the write; the parent of the new commit is
//     checked afterwards and the race is logged.
//
// GitLab cannot make an empty commit through the API: no effective change is ErrNotSupported.
func (d *Driver) Commit(ctx context.Context, repo scm.Repo, in scm.CommitInput) (string, error) {
	op := "commit to " + in.Branch
	if _, err := projectID(repo, scm.CheckCommitInput(in)); err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	if in.Replace == "" {
		// First assume the branch is new: the commit creates it from start_sha = Parent, and
		// GitLab refuses when it exists ("A branch called ... already exists"); only then is
		// the branch read, and committed on with the last_commit_id guards if it is at Parent.
		sha, err := d.commitActions(ctx, repo, in, false)
		if err == nil || !branchExists(err) {
			return sha, err
		}
	}
	exists := true
	head, err := d.Branch(ctx, repo, in.Branch)
	switch {
	case errors.Is(err, scm.ErrNotFound):
		exists = false
	case err != nil:
		return "", err
	case in.Replace != "" && head.SHA != in.Replace:
		return "", scm.BranchMovedError(Name, op, repo, in.Branch, head.SHA, in.Replace, true)
	case in.Replace == "" && head.SHA != in.Parent:
		return "", scm.BranchMovedError(Name, op, repo, in.Branch, head.SHA, in.Parent, false)
	}
	if in.Replace != "" && exists {
		// GitLab's force commit rebuilds the branch from start_sha; it was checked above.
		return d.commitActions(ctx, repo, in, false)
	}
	return d.commitActions(ctx, repo, in, exists)
}

// commitActions builds the actions from the files at in.Parent and sends the commit; exists
// says whether in.Branch exists (start_sha for a new branch, last_commit_id guards otherwise).
func (d *Driver) commitActions(ctx context.Context, repo scm.Repo, in scm.CommitInput, exists bool) (string, error) {
	op := "commit to " + in.Branch
	pid, err := projectID(repo)
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	actions := make([]*gl.CommitActionOptions, 0, len(in.Changes))
	for _, c := range in.Changes {
		m, err := d.metaAt(ctx, repo, fmt.Sprintf("%s: read %s@%s", op, c.Path, in.Parent), in.Parent, c.Path)
		if err != nil {
			return "", err
		}
		a := &gl.CommitActionOptions{FilePath: ptr(c.Path)}
		switch {
		case c.Delete && !m.exists:
			continue // already absent at Parent
		case c.Delete:
			a.Action = ptr(gl.FileDelete)
		case m.exists:
			a.Action = ptr(gl.FileUpdate)
		default:
			a.Action = ptr(gl.FileCreate)
		}
		if m.exists && exists {
			a.LastCommitID = ptr(m.lastCommitID)
		}
		if !c.Delete {
			if utf8.Valid(c.Content) {
				a.Content, a.Encoding = ptr(string(c.Content)), ptr("text")
			} else {
				a.Content, a.Encoding = ptr(encodeBase64(c.Content)), ptr("base64")
			}
		}
		actions = append(actions, a)
	}
	if len(actions) == 0 {
		return "", d.wrap(op, repo, nil, fmt.Errorf("%w: GitLab's commit API cannot create a commit without file changes", scm.ErrNotSupported))
	}
	opts := &gl.CreateCommitOptions{
		Branch:        ptr(in.Branch),
		CommitMessage: ptr(in.Message),
		Actions:       actions,
	}
	if !exists {
		opts.StartSHA = ptr(in.Parent)
	}
	if in.Replace != "" {
		opts.Force = ptr(true)
	}
	if in.Author.Name != "" {
		opts.AuthorName, opts.AuthorEmail = ptr(in.Author.Name), ptr(in.Author.Email)
	}
	c, resp, err := d.client.Commits.CreateCommit(pid, opts, gl.WithContext(ctx))
	if err != nil {
		if hasStatus(resp, http.StatusBadRequest) && d.isStaleWrite(err) {
			return "", &scm.Error{Provider: Name, Op: op, Repo: repo, Status: http.StatusBadRequest,
				Err: &scm.ConflictError{Msg: fmt.Sprintf("branch %s or a file in the commit changed after %s: %s", in.Branch, in.Parent, d.errText(err))}}
		}
		return "", d.wrap(op, repo, resp, err)
	}
	if len(c.ParentIDs) > 0 && c.ParentIDs[0] != in.Parent {
		d.log.Warn("gitlab commit landed on a newer head than its expected parent; the changed files were unchanged there",
			"repo", string(repo), "branch", in.Branch, "sha", c.ID, "parent", c.ParentIDs[0], "expected", in.Parent)
	}
	d.log.Info("gitlab commit created", "repo", string(repo), "branch", in.Branch, "sha", c.ID, "files", len(actions))
	return c.ID, nil
}

// isStaleWrite recognises GitLab's answers when the optimistic checks fail.
// branchExists tells the refusal of a commit that was to create its branch because the branch
// exists (commitActions wraps it as a conflict).
func branchExists(err error) bool {
	var ce *scm.ConflictError
	return errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Msg), "a branch called")
}

func (d *Driver) isStaleWrite(err error) bool {
	msg := strings.ToLower(d.errText(err))
	for _, s := range []string{
		"has changed since you started editing it",
		"a file with this name doesn't exist",
		"a file with this name already exists",
		"already exists", // "A branch called 'x' already exists"
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Revert uses GitLab's revert API: in.Branch is created from in.Base and the revert is
// committed onto it. GitLab reverts a merge commit against its first parent only, so
// Mainline > 1 is ErrNotSupported. GitLab writes its own message ("Revert ...") and uses the
// token's user as author, so in.Message and in.Author are not used.
func (d *Driver) Revert(ctx context.Context, repo scm.Repo, in scm.RevertInput) (string, error) {
	op := fmt.Sprintf("revert %s onto %s", in.SHA, in.Branch)
	pid, err := projectID(repo, in.Check(), scm.CheckBranch(in.Branch))
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	commit, resp, err := d.client.Commits.GetCommit(pid, in.SHA, nil, gl.WithContext(ctx))
	if err != nil {
		return "", d.wrap(op+": get commit", repo, resp, err)
	}
	mainline := max(in.Mainline, 1)
	switch {
	case len(commit.ParentIDs) == 0:
		return "", d.wrap(op, repo, nil, fmt.Errorf("%w: %s is a root commit", scm.ErrNotSupported, in.SHA))
	case mainline > len(commit.ParentIDs):
		return "", d.wrap(op, repo, nil, fmt.Errorf("mainline %d but %s has %d parent(s)", mainline, in.SHA, len(commit.ParentIDs)))
	case mainline > 1:
		return "", d.wrap(op, repo, nil, fmt.Errorf("%w: GitLab reverts merge commits against their first parent only (mainline %d asked)", scm.ErrNotSupported, mainline))
	}

	base, err := d.Branch(ctx, repo, in.Base)
	if err != nil {
		return "", err
	}
	created := false
	cur, err := d.Branch(ctx, repo, in.Branch)
	switch {
	case err == nil && cur.SHA != base.SHA:
		// A redelivered job: done when the branch head already reverts this commit.
		if head, _, herr := d.client.Commits.GetCommit(pid, cur.SHA, nil, gl.WithContext(ctx)); herr == nil &&
			strings.Contains(head.Message, commit.ID) && len(head.ParentIDs) == 1 && head.ParentIDs[0] == base.SHA {
			return cur.SHA, nil
		}
		return "", &scm.Error{Provider: Name, Op: op, Repo: repo,
			Err: &scm.ConflictError{Msg: fmt.Sprintf("branch %s already exists at %s and does not revert %s", in.Branch, cur.SHA, in.SHA)}}
	case err == nil:
		// Left over from an attempt that failed after creating the branch: reuse it.
	case errors.Is(err, scm.ErrNotFound):
		if err := d.CreateBranch(ctx, repo, in.Branch, base.SHA); err != nil {
			return "", err
		}
		created = true
	default:
		return "", err
	}
	rc, resp, err := d.client.Commits.RevertCommit(pid, commit.ID, &gl.RevertCommitOptions{Branch: ptr(in.Branch)}, gl.WithContext(ctx))
	if err != nil {
		if created {
			// Leave nothing behind so that a retry starts clean.
			if derr := d.DeleteBranch(context.WithoutCancel(ctx), repo, in.Branch); derr != nil {
				d.log.Warn("gitlab: cleanup of revert branch failed", "repo", string(repo), "branch", in.Branch, "err", derr.Error())
			}
		}
		if hasStatus(resp, http.StatusBadRequest) {
			cerr := &scm.ConflictError{Msg: d.errText(err)}
			cerr.Files = d.revertConflicts(ctx, repo, commit, base.SHA)
			return "", &scm.Error{Provider: Name, Op: op, Repo: repo, Status: http.StatusBadRequest, Err: cerr}
		}
		return "", d.wrap(op, repo, resp, err)
	}
	d.log.Info("gitlab revert created", "repo", string(repo), "branch", in.Branch, "sha", rc.ID, "reverted", commit.ID)
	return rc.ID, nil
}

// changedPaths lists what commit changed against its first parent (renames give both names).
func (d *Driver) changedPaths(ctx context.Context, repo scm.Repo, pid string, sha string) ([]string, error) {
	var paths []string
	opts := &gl.GetCommitDiffOptions{ListOptions: gl.ListOptions{PerPage: 100}}
	for {
		diffs, resp, err := d.client.Commits.GetCommitDiff(pid, sha, opts, gl.WithContext(ctx))
		if err != nil {
			return nil, d.wrap("list changes of "+sha, repo, resp, err)
		}
		for _, df := range diffs {
			paths = append(paths, df.NewPath)
			if df.OldPath != df.NewPath {
				paths = append(paths, df.OldPath)
			}
		}
		if resp.NextPage == 0 {
			return paths, nil
		}
		opts.Page = resp.NextPage
	}
}

// revertConflicts names the files that block a revert, best effort, for the error message.
func (d *Driver) revertConflicts(ctx context.Context, repo scm.Repo, commit *gl.Commit, head string) []string {
	if len(commit.ParentIDs) == 0 {
		return nil
	}
	paths, err := d.changedPaths(ctx, repo, string(repo), commit.ID)
	if err != nil {
		return nil
	}
	_, err = scm.PlanRevert(ctx, scm.FileReader(d.readFile).At(repo), commit.ID, commit.ParentIDs[0], head, paths)
	var ce *scm.ConflictError
	if errors.As(err, &ce) {
		return ce.Files
	}
	return nil
}

func hasStatus(resp *gl.Response, code int) bool {
	return resp != nil && resp.Response != nil && resp.StatusCode == code
}

// errText is GitLab's message without the request line.
func (d *Driver) errText(err error) string {
	var er *gl.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return d.message(er)
	}
	return d.redactString(err.Error())
}

// ChangedBetween lists the paths changed from base to head (GitLab's compare from the merge
// base, straight=false); a rename lists both names.
func (d *Driver) ChangedBetween(ctx context.Context, repo scm.Repo, base, head string) ([]string, error) {
	op := fmt.Sprintf("compare %.12s...%.12s", base, head)
	pid, err := projectID(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	cmp, resp, err := d.client.Repositories.Compare(pid, &gl.CompareOptions{From: gl.Ptr(base), To: gl.Ptr(head), Straight: gl.Ptr(false)}, gl.WithContext(ctx))
	if err != nil {
		return nil, d.wrap(op, repo, resp, err)
	}
	if cmp.CompareTimeout {
		return nil, d.wrap(op, repo, resp, fmt.Errorf("GitLab timed out comparing the commits: %w", scm.ErrTruncated))
	}
	var out []string
	for _, df := range cmp.Diffs {
		if df.OldPath != "" && df.OldPath != df.NewPath {
			out = append(out, df.OldPath)
		}
		out = append(out, df.NewPath)
	}
	return out, nil
}

var _ scm.Comparer = (*Driver)(nil)
