package gitengine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"

	"github.com/prflow/prflow/scm"
)

// EditFunc computes the changes to commit from the branch's current files. It is called again
// after a lost push race, on the new head, so it must derive its changes from tree and not from
// state of an earlier call. tree is read-only and backed by the object store (nothing is checked
// out); read files with fs.ReadFile(tree, "path").
type EditFunc func(ctx context.Context, tree fs.FS) ([]scm.FileChange, error)

// CommitRequest is one commit to push to Branch.
type CommitRequest struct {
	// Branch receives the commit. When it does not exist it is created from Parent or, without
	// Parent, from the head of Base.
	Branch string
	Base   string
	// Parent, when set, is the commit Branch must point to now (optimistic concurrency, like
	// scm.CommitInput.Parent): if Branch moved, Commit fails with an error matching
	// scm.ErrConflict and writes nothing, without retrying. Without Parent, a lost race is
	// retried on the new head with the edits re-applied.
	Parent string
	// Replace, when set (with Parent), is the commit Branch must point at now; the new commit,
	// made on Parent, then replaces it although that is no fast-forward: a guarded push like
	// git push --force-with-lease=Branch:Replace. A branch that moved fails with scm.ErrConflict.
	Replace string
	Message string
	Author  scm.Signature
	// Committer defaults to the engine's committer, then to Author.
	Committer scm.Signature
	// Changes and/or Edit give the edits (Changes first, then Edit's result on top).
	Changes []scm.FileChange
	Edit    EditFunc
	// AllowEmpty makes a commit even when the edits change nothing; otherwise nothing is
	// pushed and the result has NoChange set.
	AllowEmpty bool
}

// CommitResult says what Commit did.
type CommitResult struct {
	SHA      string   // the new commit (the unchanged head when NoChange)
	Parent   string   // the commit it was built on
	Changed  []string // paths whose content changed, sorted
	Created  bool     // the branch was created by this push
	NoChange bool     // the edits changed nothing and AllowEmpty was false: nothing pushed
	Attempts int      // pushes tried (1 without a race)
}

func (r CommitRequest) validate() error {
	switch {
	case r.Branch == "":
		return errors.New("branch is required")
	case r.Message == "":
		return errors.New("commit message is required")
	case r.Author.Name == "" || r.Author.Email == "":
		return errors.New("author name and email are required")
	case len(r.Changes) == 0 && r.Edit == nil && !r.AllowEmpty:
		return errors.New("no changes and no edit function")
	case r.Replace != "" && r.Parent == "":
		return errors.New("replace needs the parent to build on")
	}
	if err := ValidateBranchName(r.Branch); err != nil {
		return err
	}
	if r.Base != "" {
		if err := ValidateBranchName(r.Base); err != nil {
			return err
		}
	}
	for i, c := range r.Changes {
		if err := ValidatePath(c.Path); err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
	}
	return nil
}

// Commit fetches the head of req.Branch (or its base) with depth 1, applies the edits, commits
// and pushes without force. A push that loses a race (non-fast-forward, or object-not-found
// after the shallow fetch) is redone on the new head with the edits re-applied, up to the
// engine's attempt limit with jittered exponential backoff, unless req.Parent pins the head.
func (e *Engine) Commit(ctx context.Context, url string, req CommitRequest) (CommitResult, error) {
	if err := req.validate(); err != nil {
		return CommitResult{}, fmt.Errorf("gitengine: commit to %s: %w", req.Branch, err)
	}
	var res CommitResult
	// One scratch repository serves all attempts: after a lost race the depth-1 fetch of the
	// new head only transfers what changed, which matters on large repositories.
	w, err := e.Open(ctx, url)
	if err != nil {
		return CommitResult{}, err
	}
	defer w.Close()
	err = e.retry(ctx, req.Parent == "", func(attempt int) error {
		res = CommitResult{Attempts: attempt}
		return w.commitOnce(ctx, req, &res)
	})
	return res, err
}

func (w *Workspace) commitOnce(ctx context.Context, req CommitRequest, res *CommitResult) error {
	refs, err := w.ListRemote(ctx)
	if err != nil {
		return err
	}
	branchRef := "refs/heads/" + req.Branch
	head, exists := refs[branchRef]
	start := head
	replace := exists && req.Replace != ""
	if replace && head != req.Replace {
		return w.e.redact(fmt.Errorf("gitengine: commit to %s: branch is at %s, not at %s which was to be replaced: %w",
			req.Branch, short(head), short(req.Replace), scm.ErrConflict))
	}
	switch {
	case replace:
		// Built on Parent like a new branch; the push below replaces head (Old = head).
		start = req.Parent
		if err := w.fetchParent(ctx, refs, req); err != nil {
			return err
		}
	case exists && req.Parent != "" && head != req.Parent:
		return w.e.redact(fmt.Errorf("gitengine: commit to %s: branch is at %s, not at parent %s: %w",
			req.Branch, short(head), short(req.Parent), scm.ErrConflict))
	case exists:
		if err := w.Fetch(ctx, 1, branchRef); err != nil {
			return err
		}
		// The branch may have moved since it was listed: build on what was fetched.
		if head, err = w.Ref(branchRef); err != nil {
			return err
		}
		if req.Parent != "" && head != req.Parent {
			return w.e.redact(fmt.Errorf("gitengine: commit to %s: branch is at %s, not at parent %s: %w",
				req.Branch, short(head), short(req.Parent), scm.ErrConflict))
		}
		start = head
	case req.Parent != "":
		start = req.Parent
		if err := w.fetchParent(ctx, refs, req); err != nil {
			return err
		}
	case req.Base != "":
		baseRef := "refs/heads/" + req.Base
		if _, ok := refs[baseRef]; !ok {
			return w.wrap("commit to "+req.Branch, fmt.Errorf("base branch %s: %w", req.Base, scm.ErrNotFound))
		}
		if err := w.Fetch(ctx, 1, baseRef); err != nil {
			return err
		}
		if start, err = w.Ref(baseRef); err != nil {
			return err
		}
	case len(refs) == 0:
		start = "" // empty repository: the first commit
	default:
		return w.wrap("commit to "+req.Branch, fmt.Errorf("branch %s: %w (and no base or parent to create it from)", req.Branch, scm.ErrNotFound))
	}
	res.Parent = start

	changes := append([]scm.FileChange(nil), req.Changes...)
	if req.Edit != nil {
		var tree fs.FS = emptyFS{}
		if start != "" {
			if tree, err = w.FS(start); err != nil {
				return err
			}
		}
		more, err := req.Edit(ctx, tree)
		if err != nil {
			return fmt.Errorf("gitengine: edit %s: %w", req.Branch, err)
		}
		changes = append(changes, more...)
	}
	tree, changed, err := w.ApplyChanges(start, changes)
	if err != nil {
		return fmt.Errorf("gitengine: commit to %s: %w", req.Branch, err)
	}
	res.Changed = changed
	if len(changed) == 0 && !req.AllowEmpty && start != "" {
		res.SHA, res.NoChange = start, true
		return nil
	}
	var parents []string
	if start != "" {
		parents = []string{start}
	}
	sha, err := w.WriteCommit(CommitSpec{Tree: tree, Parents: parents, Message: req.Message, Author: req.Author, Committer: req.Committer})
	if err != nil {
		return err
	}
	old := ""
	if exists {
		old = head
	}
	if err := w.Push(ctx, RefUpdate{Name: branchRef, Old: old, New: sha}); err != nil {
		return err
	}
	res.SHA, res.Created = sha, !exists
	return nil
}

// fetchParent makes req.Parent available, looking for it on req.Base when that is set.
func (w *Workspace) fetchParent(ctx context.Context, refs map[string]string, req CommitRequest) error {
	var within []string
	if req.Base != "" {
		within = []string{req.Base}
	}
	return w.FetchCommit(ctx, refs, req.Parent, within...)
}

// FetchCommit makes sha available: with depth 1 when it is the head of some remote ref (refs
// as returned by ListRemote; nil lists them), else by fetching the history of the within
// branches (default: all branches) deeper until it appears. A ref that moved after refs was
// listed is no obstacle: the commit is asked for by SHA (depth 1, where the server accepts
// wants by SHA), or found in the new history. A commit on none of them is an error matching
// scm.ErrNotFound.
func (w *Workspace) FetchCommit(ctx context.Context, refs map[string]string, sha string, within ...string) error {
	if w.HasCommit(sha) {
		return nil
	}
	if !shaRe.MatchString(sha) {
		return fmt.Errorf("gitengine: %q is not a full commit SHA: %w", sha, scm.ErrNotFound)
	}
	if refs == nil {
		var err error
		if refs, err = w.ListRemote(ctx); err != nil {
			return err
		}
	}
	for name, h := range refs {
		if h != sha {
			continue
		}
		if err := w.Fetch(ctx, 1, name); err != nil {
			return err
		}
		if w.HasCommit(sha) {
			return nil
		}
		// The ref moved between the listing and the fetch: ask for sha itself, else look
		// for it in the history below.
		w.e.log.DebugContext(ctx, "ref moved since it was listed; fetching the commit by SHA", "ref", name, "commit", short(sha))
		if err := w.fetchSHA(ctx, sha); err == nil && w.HasCommit(sha) {
			return nil
		}
		if ctx.Err() != nil {
			return w.wrap("fetch commit "+short(sha), ctx.Err())
		}
		break
	}
	want := []string{"refs/heads/*"}
	if len(within) > 0 {
		want = want[:0]
		for _, b := range within {
			want = append(want, "refs/heads/"+b)
		}
	}
	err := w.FetchHistory(ctx, want, func() (bool, error) { return w.HasCommit(sha), nil })
	if err != nil {
		if errors.Is(err, ErrShallow) || errors.Is(err, scm.ErrNotFound) {
			return w.wrap("find commit "+short(sha), fmt.Errorf("commit %s is on no branch: %w", short(sha), scm.ErrNotFound))
		}
		return err
	}
	return nil
}

// fetchSHA fetches sha alone (depth 1) by asking for it by SHA, which servers allow with
// uploadpack.allowReachableSHA1InWant or allowTipSHA1InWant (GitHub, GitLab and the scmtest
// server do). It fails with git.ErrExactSHA1NotSupported when the server does not, and with
// the server's error when sha is not reachable; the caller then searches branch history.
func (w *Workspace) fetchSHA(ctx context.Context, sha string) error {
	err := w.fetch(ctx, 1, []config.RefSpec{config.RefSpec(sha + ":refs/prflow/fetched/" + sha)})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return err
}

// retry runs op until it succeeds, fails with an error other than ErrPushRejected, or the
// attempts run out. Without again, a rejected push is returned at once.
func (e *Engine) retry(ctx context.Context, again bool, op func(attempt int) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = op(attempt)
		if err == nil || !errors.Is(err, ErrPushRejected) || !again {
			return err
		}
		if attempt >= e.maxAttempts {
			return fmt.Errorf("gitengine: gave up after %d attempts: %w", attempt, err)
		}
		d := e.backoff(attempt)
		e.log.DebugContext(ctx, "push rejected, retrying on the new head", "attempt", attempt, "wait", d)
		if serr := scm.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("gitengine: waiting to retry: %w (last error: %w)", serr, err)
		}
	}
}

// backoff is scm.Backoff with the engine's delays.
func (e *Engine) backoff(attempt int) time.Duration {
	return scm.Backoff(e.baseDelay, e.maxDelay, attempt)
}

// ValidateBranchName rejects branch names git would refuse (see git check-ref-format).
func ValidateBranchName(b string) error {
	bad := b == "" || b[0] == '-' || b[0] == '/' || b[0] == '.' || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".") || strings.HasSuffix(b, ".lock") || strings.Contains(b, "/.") ||
		strings.ContainsAny(b, "\\ ~^:?*[\x7f") ||
		strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//")
	for _, r := range b {
		if r < 0x20 {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("invalid branch name %q", b)
	}
	return nil
}

// emptyFS is the tree of an empty repository.
type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}
