package gitengine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prflow/prflow/scm"
)

// RevertRequest asks for a commit that undoes Commit.
type RevertRequest struct {
	Commit string
	// Mainline is the parent number to revert against for a merge commit (1 = the branch the
	// merge was made on); 0 means 1. Ignored for ordinary commits.
	Mainline int
	// Base is the branch whose head the revert is built on.
	Base string
	// Branch receives the revert. When it differs from Base it must not exist yet (it is
	// created from Base's head), except that a Branch left by an earlier identical request is
	// returned as is, so redelivered jobs are harmless. Empty or equal to Base commits onto Base.
	Branch    string
	Message   string // default: Revert "<subject>" / This reverts commit <sha>.
	Author    scm.Signature
	Committer scm.Signature
}

// revertTrailer is how a revert commit names what it reverts (git's own wording).
func revertTrailer(sha string) string { return "This reverts commit " + sha + "." }

// Revert makes a commit on Branch that restores, file by file, the mainline parent's version
// of every file Commit changed (see scm.PlanRevert). A file changed again since Commit is a
// conflict: the error is a *scm.ConflictError listing the files and nothing is pushed. A
// commit already reverted on Base gives an error matching scm.ErrConflict that says so.
func (e *Engine) Revert(ctx context.Context, url string, req RevertRequest) (CommitResult, error) {
	if req.Base == "" || !shaRe.MatchString(req.Commit) || (req.Author.Name == "" || req.Author.Email == "") {
		return CommitResult{}, fmt.Errorf("gitengine: revert: need a full commit SHA (got %q), a base branch and an author", req.Commit)
	}
	if req.Branch == "" {
		req.Branch = req.Base
	}
	for _, b := range []string{req.Base, req.Branch} {
		if err := ValidateBranchName(b); err != nil {
			return CommitResult{}, fmt.Errorf("gitengine: revert: %w", err)
		}
	}
	if req.Mainline == 0 {
		req.Mainline = 1
	}
	var res CommitResult
	err := e.retry(ctx, req.Branch == req.Base, func(attempt int) error {
		res = CommitResult{Attempts: attempt}
		w, err := e.Open(ctx, url)
		if err != nil {
			return err
		}
		defer w.Close()
		return w.revertOnce(ctx, req, &res)
	})
	return res, err
}

func (w *Workspace) revertOnce(ctx context.Context, req RevertRequest, res *CommitResult) error {
	refs, err := w.ListRemote(ctx)
	if err != nil {
		return err
	}
	baseRef, branchRef := "refs/heads/"+req.Base, "refs/heads/"+req.Branch
	head, ok := refs[baseRef]
	if !ok {
		return w.wrap("revert "+short(req.Commit), fmt.Errorf("base branch %s: %w", req.Base, scm.ErrNotFound))
	}
	if req.Branch != req.Base {
		if tip, exists := refs[branchRef]; exists {
			return w.adoptRevert(ctx, req, tip, res)
		}
	}
	var parent string
	err = w.FetchHistory(ctx, []string{baseRef}, func() (bool, error) {
		if head, err = w.Ref(baseRef); err != nil {
			return false, err
		}
		c, err := w.Commit(req.Commit)
		if err != nil {
			return false, nil
		}
		if len(c.ParentHashes) == 0 {
			return false, fmt.Errorf("gitengine: revert %s: it is a root commit, nothing to revert to", short(req.Commit))
		}
		if req.Mainline > len(c.ParentHashes) {
			return false, fmt.Errorf("gitengine: revert %s: mainline %d but the commit has %d parent(s)", short(req.Commit), req.Mainline, len(c.ParentHashes))
		}
		parent = c.ParentHashes[req.Mainline-1].String()
		return w.HasCommit(parent), nil
	})
	if errors.Is(err, ErrShallow) {
		return w.wrap("revert", fmt.Errorf("commit %s is not in the history of %s: %w", short(req.Commit), req.Base, scm.ErrNotFound))
	}
	if err != nil {
		return err
	}
	paths, err := w.ChangedPaths(parent, req.Commit)
	if err != nil {
		return err
	}
	changes, err := scm.PlanRevert(ctx, w.FileAt, req.Commit, parent, head, paths)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		return fmt.Errorf("gitengine: revert %s: %s already has the content from before it: %w", short(req.Commit), req.Base, scm.ErrConflict)
	}
	tree, changed, err := w.ApplyChanges(head, changes)
	if err != nil {
		return err
	}
	msg := req.Message
	if msg == "" {
		subject := ""
		if c, err := w.Commit(req.Commit); err == nil {
			subject, _, _ = strings.Cut(c.Message, "\n")
		}
		msg = fmt.Sprintf("Revert %q\n\n%s\n", subject, revertTrailer(req.Commit))
	} else if !strings.Contains(msg, revertTrailer(req.Commit)) {
		msg = strings.TrimRight(msg, "\n") + "\n\n" + revertTrailer(req.Commit) + "\n"
	}
	sha, err := w.WriteCommit(CommitSpec{Tree: tree, Parents: []string{head}, Message: msg, Author: req.Author, Committer: req.Committer})
	if err != nil {
		return err
	}
	old := ""
	if req.Branch == req.Base {
		old = head
	}
	if err := w.Push(ctx, RefUpdate{Name: branchRef, Old: old, New: sha}); err != nil {
		return err
	}
	*res = CommitResult{SHA: sha, Parent: head, Changed: changed, Created: req.Branch != req.Base, Attempts: res.Attempts}
	return nil
}

// adoptRevert returns an existing revert branch made for the same commit; any other existing
// branch is a conflict.
func (w *Workspace) adoptRevert(ctx context.Context, req RevertRequest, tip string, res *CommitResult) error {
	branchRef := "refs/heads/" + req.Branch
	if err := w.Fetch(ctx, 1, branchRef); err != nil {
		return err
	}
	c, err := w.Commit(tip)
	if err != nil {
		return err
	}
	if !strings.Contains(c.Message, revertTrailer(req.Commit)) {
		return w.wrap("revert "+short(req.Commit), fmt.Errorf("branch %s already exists and does not hold this revert: %w", req.Branch, scm.ErrConflict))
	}
	res.SHA = tip
	if len(c.ParentHashes) > 0 {
		res.Parent = c.ParentHashes[0].String()
	}
	return nil
}
