package local

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
)

// OpenPR records a new PR. Head and base must exist; a second open PR for the same branches is
// refused with ErrConflict, as forges do.
func (p *Provider) OpenPR(ctx context.Context, repo scm.Repo, in scm.NewPR) (*scm.PullRequest, error) {
	op := fmt.Sprintf("open PR %s -> %s", in.Head, in.Base)
	switch {
	case strings.TrimSpace(in.Title) == "":
		return nil, p.fail(repo, op, errors.New("title is required"))
	case in.Head == in.Base:
		return nil, p.fail(repo, op, errors.New("head and base are the same branch"))
	}
	for _, b := range []string{in.Head, in.Base} {
		if err := gitengine.ValidateBranchName(b); err != nil {
			return nil, p.fail(repo, op, err)
		}
	}
	var out *scm.PullRequest
	err := p.retry(ctx, func() error {
		w, err := p.open(ctx, repo)
		if err != nil {
			return err
		}
		defer w.Close()
		// Numbers are taken with create-only pushes. After losing one, the next free number is
		// tried at once from the same workspace (a fresh ls-remote, no sleep): racing openers
		// climb past each other instead of backing off, so N openers need about N pushes each
		// at worst and every one of them gets a number.
		next, losses := 0, 0
		for {
			refs, err := w.ListRemote(ctx)
			if err != nil {
				return err
			}
			headSHA, ok := refs["refs/heads/"+in.Head]
			if !ok {
				return fmt.Errorf("head branch %s: %w", in.Head, scm.ErrNotFound)
			}
			if _, ok := refs["refs/heads/"+in.Base]; !ok {
				return fmt.Errorf("base branch %s: %w", in.Base, scm.ErrNotFound)
			}
			if _, ok := refs[openRef(in.Base, in.Head)]; ok {
				all, err := p.loadAll(ctx, w)
				if err != nil {
					return err
				}
				for _, st := range all {
					if st.rec.State == scm.PROpen && st.rec.Head == in.Head && st.rec.Base == in.Base {
						return fmt.Errorf("PR #%d from %s into %s is already open: %w", st.rec.Number, in.Head, in.Base, scm.ErrConflict)
					}
				}
				// The marker is there but its record is not readable yet (or was just closed):
				// let the outer retry look again after a pause.
				return fmt.Errorf("open marker for %s -> %s without an open record: %w", in.Head, in.Base, gitengine.ErrPushRejected)
			}
			next = max(next+1, maxNumber(refs)+1)
			now := p.now().UTC()
			rec := record{
				Number: next, Title: in.Title, Body: in.Body, State: scm.PROpen, Draft: in.Draft,
				Head: in.Head, Base: in.Base, HeadSHA: headSHA, Labels: in.Labels, Reviewers: in.Reviewers,
				Author: p.login, CreatedAt: now, UpdatedAt: now,
			}
			c, err := p.writeJSON(w, "", recordFile, rec, fmt.Sprintf("open PR #%d", rec.Number))
			if err != nil {
				return err
			}
			// Both refs are created or neither: the number and the open slot are taken together.
			err = w.Push(ctx,
				gitengine.RefUpdate{Name: pullRef(rec.Number), New: c},
				gitengine.RefUpdate{Name: openRef(in.Base, in.Head), New: c})
			if errors.Is(err, gitengine.ErrPushRejected) {
				// A short jittered pause that grows with the losses thins out the next wave of
				// pushes (the remote handles them one at a time) without a cap on attempts.
				losses++
				d := rand.N(min(time.Duration(losses)*p.delay, maxDelay) + 1)
				p.log.DebugContext(ctx, "local: PR number taken, trying the next", "number", rec.Number, "wait", d)
				if err := scm.Sleep(ctx, d); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			out = p.present(repo, rec, headSHA)
			out.Mergeability = scm.MergeUnknown
			return nil
		}
	})
	return out, p.fail(repo, op, err)
}

// present converts a record; for an open PR headSHA is the head branch's current commit.
func (p *Provider) present(repo scm.Repo, rec record, headSHA string) *scm.PullRequest {
	pr := &scm.PullRequest{
		Number: rec.Number, Title: rec.Title, Body: rec.Body, State: rec.State, Draft: rec.Draft,
		Head: rec.Head, Base: rec.Base, HeadSHA: rec.HeadSHA, MergeSHA: rec.MergeSHA,
		Labels: append([]string(nil), rec.Labels...), URL: p.webURL(repo, rec.Number),
		Mergeability: scm.MergeUnknown,
	}
	if rec.State == scm.PROpen && headSHA != "" {
		pr.HeadSHA = headSHA
	}
	return pr
}

// GetPR returns PR n; an open PR's mergeability comes from a trial merge of its head into the
// current base.
func (p *Provider) GetPR(ctx context.Context, repo scm.Repo, number int) (*scm.PullRequest, error) {
	op := fmt.Sprintf("get PR #%d", number)
	w, refs, st, err := p.openRecord(ctx, repo, number)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	pr, err := p.live(ctx, w, refs, repo, st.rec)
	return pr, p.fail(repo, op, err)
}

// FindPR returns the newest PR from head into base in any state.
func (p *Provider) FindPR(ctx context.Context, repo scm.Repo, head, base string) (*scm.PullRequest, error) {
	op := fmt.Sprintf("find PR %s -> %s", head, base)
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	all, err := p.loadAll(ctx, w)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	for _, st := range all {
		if st.rec.Head == head && st.rec.Base == base {
			pr, err := p.live(ctx, w, refs, repo, st.rec)
			return pr, p.fail(repo, op, err)
		}
	}
	return nil, p.fail(repo, op, fmt.Errorf("no PR from %s into %s: %w", head, base, scm.ErrNotFound))
}

// live presents rec with its current head and, for an open PR, a trial merge's verdict.
func (p *Provider) live(ctx context.Context, w *gitengine.Workspace, refs map[string]string, repo scm.Repo, rec record) (*scm.PullRequest, error) {
	headSHA := refs["refs/heads/"+rec.Head]
	pr := p.present(repo, rec, headSHA)
	if rec.State != scm.PROpen {
		return pr, nil
	}
	var tm trial
	for attempt := 1; ; attempt++ {
		if refs["refs/heads/"+rec.Head] == "" || refs["refs/heads/"+rec.Base] == "" {
			pr.Mergeability = scm.MergeBlocked // a branch is gone: nothing can be merged
			return pr, nil
		}
		var err error
		if tm, err = p.trialMerge(ctx, w, rec.Base, rec.Head); err == nil {
			break
		}
		if !errors.Is(err, scm.ErrNotFound) || attempt == 5 {
			return nil, err
		}
		// A branch went away (or moved) between listing the refs and fetching it, e.g. a
		// failed run's cleanup deleted it: look again rather than fail the read.
		if refs, err = w.ListRemote(ctx); err != nil {
			return nil, err
		}
	}
	pr.HeadSHA = tm.head
	switch {
	case len(tm.conflicts) > 0:
		pr.Mergeability = scm.MergeDirty
	case tm.mergeBase == tm.head:
		pr.Mergeability = scm.MergeBlocked // nothing to merge
	default:
		pr.Mergeability = scm.MergeClean
	}
	return pr, nil
}

type trial struct {
	base, head, mergeBase string
	tree                  string
	conflicts             []string
}

// trialMerge fetches base and head with enough history for their merge base and merges the
// trees; conflicts are reported, not returned as an error.
func (p *Provider) trialMerge(ctx context.Context, w *gitengine.Workspace, base, head string) (trial, error) {
	var t trial
	refs := []string{"refs/heads/" + base, "refs/heads/" + head}
	err := w.FetchHistory(ctx, refs, func() (bool, error) {
		var err error
		if t.base, err = w.Ref(refs[0]); err != nil {
			return false, err
		}
		if t.head, err = w.Ref(refs[1]); err != nil {
			return false, err
		}
		t.mergeBase, err = w.MergeBase(t.base, t.head)
		return err == nil, err
	})
	if err != nil {
		return trial{}, fmt.Errorf("merge base of %s and %s: %w", base, head, err)
	}
	t.tree, t.conflicts, err = w.MergeCommits(t.mergeBase, t.base, t.head)
	return t, err
}

// MergePR merges PR n into its base with a merge commit, a squash commit or rebased commits and
// records it, in one atomic push. When the base moved the merge is redone on the new base;
// a conflict is an *scm.NotMergeableError naming the files; a head that moved past in.SHA is
// ErrConflict; an already merged PR is returned as it is.
func (p *Provider) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	op := fmt.Sprintf("merge PR #%d", number)
	method := in.Method
	if method == "" {
		method = scm.MergeCommit
	}
	if method != scm.MergeCommit && method != scm.Squash && method != scm.Rebase {
		return nil, p.fail(repo, op, fmt.Errorf("unknown merge method %q (want merge, squash or rebase)", in.Method))
	}
	var out *scm.PullRequest
	err := p.retry(ctx, func() error {
		w, refs, st, err := p.openRecord(ctx, repo, number)
		if err != nil {
			return err
		}
		defer w.Close()
		rec := st.rec
		switch rec.State {
		case scm.PRMerged:
			out = p.present(repo, rec, "")
			return nil
		case scm.PRClosed:
			return &scm.NotMergeableError{Msg: fmt.Sprintf("PR #%d is closed", number)}
		}
		headSHA, ok := refs["refs/heads/"+rec.Head]
		if !ok {
			return &scm.NotMergeableError{Msg: fmt.Sprintf("head branch %s no longer exists", rec.Head)}
		}
		if _, ok := refs["refs/heads/"+rec.Base]; !ok {
			return &scm.NotMergeableError{Msg: fmt.Sprintf("base branch %s no longer exists", rec.Base)}
		}
		if in.SHA != "" && in.SHA != headSHA {
			return fmt.Errorf("head of %s is %s, not the expected %s: %w", rec.Head, headSHA, in.SHA, scm.ErrConflict)
		}
		tm, err := p.trialMerge(ctx, w, rec.Base, rec.Head)
		if err != nil {
			return err
		}
		if in.SHA != "" && in.SHA != tm.head {
			return fmt.Errorf("head of %s moved to %s, not the expected %s: %w", rec.Head, tm.head, in.SHA, scm.ErrConflict)
		}
		if len(tm.conflicts) > 0 {
			return &scm.NotMergeableError{Files: tm.conflicts, Msg: fmt.Sprintf("%s does not merge cleanly into %s", rec.Head, rec.Base)}
		}
		if tm.mergeBase == tm.head {
			return &scm.NotMergeableError{Msg: fmt.Sprintf("nothing to merge: %s is already part of %s", rec.Head, rec.Base)}
		}
		mergeSHA, err := p.makeMerge(w, rec, tm, method, in.Message)
		if err != nil {
			return err
		}
		changed, err := w.ChangedPaths(tm.mergeBase, tm.head)
		if err != nil {
			return err
		}
		now := p.now().UTC()
		rec.State, rec.MergeSHA, rec.MergeMethod, rec.HeadSHA = scm.PRMerged, mergeSHA, method, tm.head
		rec.ChangedFiles, rec.UpdatedAt, rec.ClosedAt = changed, now, now
		c, err := p.writeJSON(w, st.tip, recordFile, rec, fmt.Sprintf("merge PR #%d", number))
		if err != nil {
			return err
		}
		updates := []gitengine.RefUpdate{
			{Name: "refs/heads/" + rec.Base, Old: tm.base, New: mergeSHA},
			{Name: pullRef(number), Old: st.tip, New: c},
		}
		if cur, ok := refs[openRef(rec.Base, rec.Head)]; ok {
			updates = append(updates, gitengine.RefUpdate{Name: openRef(rec.Base, rec.Head), Old: cur})
		}
		if in.DeleteBranch {
			updates = append(updates, gitengine.RefUpdate{Name: "refs/heads/" + rec.Head, Old: tm.head})
		}
		if err := w.Push(ctx, updates...); err != nil {
			return err
		}
		out = p.present(repo, rec, "")
		return nil
	})
	return out, p.fail(repo, op, err)
}

// makeMerge writes the commit(s) for method and returns what the base will point to.
func (p *Provider) makeMerge(w *gitengine.Workspace, rec record, tm trial, method scm.MergeMethod, msg string) (string, error) {
	when := p.now()
	switch method {
	case scm.MergeCommit:
		if msg == "" {
			msg = fmt.Sprintf("Merge pull request #%d from %s\n\n%s\n", rec.Number, rec.Head, rec.Title)
		}
		return w.WriteCommit(gitengine.CommitSpec{Tree: tm.tree, Parents: []string{tm.base, tm.head}, Message: msg, Author: p.identity, When: when})
	case scm.Squash:
		if msg == "" {
			msg = fmt.Sprintf("%s (#%d)\n", rec.Title, rec.Number)
			if rec.Body != "" {
				msg += "\n" + rec.Body + "\n"
			}
		}
		return w.WriteCommit(gitengine.CommitSpec{Tree: tm.tree, Parents: []string{tm.base}, Message: msg, Author: p.identity, When: when})
	}
	// Rebase: replay the head's commits one by one on top of the base, keeping their authors.
	commits, err := w.FirstParentRange(tm.mergeBase, tm.head)
	if err != nil {
		return "", &scm.NotMergeableError{Msg: fmt.Sprintf("cannot rebase %s: %v", rec.Head, err)}
	}
	cur := tm.base
	for _, c := range commits {
		parent := ""
		if len(c.ParentHashes) > 0 {
			parent = c.ParentHashes[0].String()
		}
		tree, conflicts, err := w.MergeCommits(parent, cur, c.Hash.String())
		if err != nil {
			return "", err
		}
		if len(conflicts) > 0 {
			return "", &scm.NotMergeableError{Files: conflicts, Msg: fmt.Sprintf("commit %s does not rebase cleanly onto %s", c.Hash.String()[:12], rec.Base)}
		}
		cur, err = w.WriteCommit(gitengine.CommitSpec{
			Tree: tree, Parents: []string{cur}, Message: c.Message,
			Author:     scm.Signature{Name: c.Author.Name, Email: c.Author.Email},
			AuthorWhen: c.Author.When, Committer: p.identity, When: when,
		})
		if err != nil {
			return "", err
		}
	}
	return cur, nil
}

// ClosePR closes an open PR without merging; closing a closed PR succeeds, a merged one is
// ErrConflict.
func (p *Provider) ClosePR(ctx context.Context, repo scm.Repo, number int) error {
	op := fmt.Sprintf("close PR #%d", number)
	_, err := p.updateRecord(ctx, repo, number, fmt.Sprintf("close PR #%d", number),
		func(w *gitengine.Workspace, refs map[string]string, rec *record) ([]gitengine.RefUpdate, error) {
			switch rec.State {
			case scm.PRClosed:
				return nil, errUnchanged
			case scm.PRMerged:
				return nil, fmt.Errorf("PR #%d is already merged: %w", number, scm.ErrConflict)
			}
			if head, ok := refs["refs/heads/"+rec.Head]; ok {
				rec.HeadSHA = head
				if _, ok := refs["refs/heads/"+rec.Base]; ok {
					tm, err := p.trialMerge(ctx, w, rec.Base, rec.Head)
					if err == nil {
						rec.ChangedFiles, _ = w.ChangedPaths(tm.mergeBase, tm.head)
					}
				}
			}
			rec.State = scm.PRClosed
			rec.ClosedAt = p.now().UTC()
			if cur, ok := refs[openRef(rec.Base, rec.Head)]; ok {
				return []gitengine.RefUpdate{{Name: openRef(rec.Base, rec.Head), Old: cur}}, nil
			}
			return nil, nil
		})
	return p.fail(repo, op, err)
}

// Comment appends a comment to the PR record.
func (p *Provider) Comment(ctx context.Context, repo scm.Repo, number int, body string) error {
	op := fmt.Sprintf("comment on PR #%d", number)
	if strings.TrimSpace(body) == "" {
		return p.fail(repo, op, errors.New("comment body is empty"))
	}
	_, err := p.updateRecord(ctx, repo, number, fmt.Sprintf("comment on PR #%d", number),
		func(_ *gitengine.Workspace, _ map[string]string, rec *record) ([]gitengine.RefUpdate, error) {
			rec.Comments = append(rec.Comments, Comment{Author: p.login, Body: body, At: p.now().UTC()})
			return nil, nil
		})
	return p.fail(repo, op, err)
}

// EditComment replaces the body of comment id (ListComments' ID: its place in the record,
// from 1) of PR number. Only its author may, as on the forges; an identical body writes
// nothing.
func (p *Provider) EditComment(ctx context.Context, repo scm.Repo, number int, id, body string) error {
	op := fmt.Sprintf("edit comment %s on PR #%d", id, number)
	n, err := scm.ParseCommentID(id)
	if err == nil {
		err = scm.CheckComment(body)
	}
	if err != nil {
		return p.fail(repo, op, err)
	}
	_, err = p.updateRecord(ctx, repo, number, op,
		func(_ *gitengine.Workspace, _ map[string]string, rec *record) ([]gitengine.RefUpdate, error) {
			switch {
			case n > int64(len(rec.Comments)):
				return nil, fmt.Errorf("%w: PR #%d has no comment %s", scm.ErrNotFound, number, id)
			case rec.Comments[n-1].Author != p.login:
				return nil, fmt.Errorf("%w: comment %s is %s's, not %s's", scm.ErrForbidden, id, rec.Comments[n-1].Author, p.login)
			case rec.Comments[n-1].Body == body:
				return nil, errUnchanged
			}
			rec.Comments[n-1].Body = body
			rec.Comments[n-1].Edited = p.now().UTC()
			return nil, nil
		})
	return p.fail(repo, op, err)
}

// Comments returns a PR's comments, oldest first (the local driver's own read API).
func (p *Provider) Comments(ctx context.Context, repo scm.Repo, number int) ([]Comment, error) {
	op := fmt.Sprintf("list comments of PR #%d", number)
	w, _, st, err := p.openRecord(ctx, repo, number)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	return st.rec.Comments, nil
}

// ListComments implements scm.PullRequests: the PR record's comments, oldest first.
func (p *Provider) ListComments(ctx context.Context, repo scm.Repo, number int) ([]scm.PRComment, error) {
	cs, err := p.Comments(ctx, repo, number)
	if err != nil {
		return nil, err
	}
	out := make([]scm.PRComment, len(cs))
	for i, c := range cs {
		out[i] = scm.PRComment{ID: strconv.Itoa(i + 1), Author: c.Author, Body: c.Body}
	}
	return out, nil
}

// ChangedFiles lists the paths the PR changes relative to its merge base with the base branch
// (for merged and closed PRs, as they were at that time).
func (p *Provider) ChangedFiles(ctx context.Context, repo scm.Repo, number int) ([]string, error) {
	op := fmt.Sprintf("list changed files of PR #%d", number)
	w, refs, st, err := p.openRecord(ctx, repo, number)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	if st.rec.State != scm.PROpen {
		return st.rec.ChangedFiles, nil
	}
	for _, b := range []string{st.rec.Head, st.rec.Base} {
		if _, ok := refs["refs/heads/"+b]; !ok {
			return nil, p.fail(repo, op, fmt.Errorf("branch %s: %w", b, scm.ErrNotFound))
		}
	}
	tm, err := p.trialMerge(ctx, w, st.rec.Base, st.rec.Head)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	files, err := w.ChangedPaths(tm.mergeBase, tm.head)
	return files, p.fail(repo, op, err)
}
