package local

import (
	"context"
	"fmt"
	"regexp"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
)

var shaRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ReadFile reads path at ref: a branch, a tag or a full commit SHA.
func (p *Provider) ReadFile(ctx context.Context, repo scm.Repo, ref, path string) ([]byte, error) {
	op := fmt.Sprintf("read file %s@%s", path, ref)
	if err := gitengine.ValidatePath(path); err != nil {
		return nil, p.fail(repo, op, err)
	}
	w, err := p.open(ctx, repo)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	sha, err := p.resolve(ctx, w, ref)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	data, err := w.ReadFile(sha, path)
	return data, p.fail(repo, op, err)
}

// resolve fetches ref (branch, tag or SHA) into w and returns its commit.
func (p *Provider) resolve(ctx context.Context, w *gitengine.Workspace, ref string) (string, error) {
	refs, err := w.ListRemote(ctx)
	if err != nil {
		return "", err
	}
	for _, name := range []string{"refs/heads/" + ref, "refs/tags/" + ref, ref} {
		if _, ok := refs[name]; ok {
			if err := w.Fetch(ctx, 1, name); err != nil {
				return "", err
			}
			return w.Ref(name)
		}
	}
	if shaRe.MatchString(ref) {
		if err := w.FetchCommit(ctx, refs, ref); err != nil {
			return "", err
		}
		return ref, nil
	}
	return "", fmt.Errorf("ref %q: %w", ref, scm.ErrNotFound)
}

// Branch returns a branch's head.
func (p *Provider) Branch(ctx context.Context, repo scm.Repo, name string) (scm.Ref, error) {
	op := "get branch " + name
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return scm.Ref{}, p.fail(repo, op, err)
	}
	defer w.Close()
	sha, ok := refs["refs/heads/"+name]
	if !ok {
		return scm.Ref{}, p.fail(repo, op, fmt.Errorf("branch %s: %w", name, scm.ErrNotFound))
	}
	return scm.Ref{Name: name, SHA: sha}, nil
}

// CreateBranch creates name at sha; the same branch at the same commit is success, at another
// commit ErrConflict.
func (p *Provider) CreateBranch(ctx context.Context, repo scm.Repo, name, sha string) error {
	op := fmt.Sprintf("create branch %s at %s", name, sha)
	if err := gitengine.ValidateBranchName(name); err != nil {
		return p.fail(repo, op, err)
	}
	if !shaRe.MatchString(sha) {
		return p.fail(repo, op, fmt.Errorf("%q is not a full commit SHA", sha))
	}
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return p.fail(repo, op, err)
	}
	defer w.Close()
	if cur, ok := refs["refs/heads/"+name]; ok {
		if cur == sha {
			return nil
		}
		return p.fail(repo, op, fmt.Errorf("branch exists at %s: %w", cur, scm.ErrConflict))
	}
	if err := w.FetchCommit(ctx, refs, sha); err != nil {
		return p.fail(repo, op, err)
	}
	err = w.Push(ctx, gitengine.RefUpdate{Name: "refs/heads/" + name, New: sha})
	return p.fail(repo, op, err)
}

// DeleteBranch deletes a branch; a branch that does not exist is already deleted.
func (p *Provider) DeleteBranch(ctx context.Context, repo scm.Repo, name string) error {
	op := "delete branch " + name
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return p.fail(repo, op, err)
	}
	defer w.Close()
	cur, ok := refs["refs/heads/"+name]
	if !ok {
		return nil
	}
	return p.fail(repo, op, w.Push(ctx, gitengine.RefUpdate{Name: "refs/heads/" + name, Old: cur}))
}

// Commit writes in.Changes as one commit on in.Branch, which must be at in.Parent (when set);
// a missing branch is created from in.Parent. Like the forges' commit APIs it commits even when
// the tree does not change. With in.Replace the branch must be at in.Replace and is moved to
// the new commit by a compare-and-swap push (force-with-lease), which git allows unless the
// remote sets receive.denyNonFastForwards (then the push is refused and nothing changes).
func (p *Provider) Commit(ctx context.Context, repo scm.Repo, in scm.CommitInput) (string, error) {
	op := "commit to " + in.Branch
	url, err := p.repoURL(repo)
	if err != nil {
		return "", p.fail(repo, op, err)
	}
	author := in.Author
	if author.Name == "" || author.Email == "" {
		author = p.identity
	}
	res, err := p.engine.Commit(ctx, url, gitengine.CommitRequest{
		Branch: in.Branch, Parent: in.Parent, Replace: in.Replace, Message: in.Message, Author: author, Committer: p.identity,
		Changes: in.Changes, AllowEmpty: true,
	})
	if err != nil {
		return "", p.fail(repo, op, err)
	}
	return res.SHA, nil
}

// Revert commits the file-level inverse of in.SHA on a new branch in.Branch created from
// in.Base (see gitengine.Engine.Revert).
func (p *Provider) Revert(ctx context.Context, repo scm.Repo, in scm.RevertInput) (string, error) {
	op := "revert " + in.SHA
	url, err := p.repoURL(repo)
	if err != nil {
		return "", p.fail(repo, op, err)
	}
	if in.Branch == "" {
		return "", p.fail(repo, op, fmt.Errorf("a branch for the revert is required"))
	}
	author := in.Author
	if author.Name == "" || author.Email == "" {
		author = p.identity
	}
	res, err := p.engine.Revert(ctx, url, gitengine.RevertRequest{
		Commit: in.SHA, Mainline: in.Mainline, Base: in.Base, Branch: in.Branch, Message: in.Message,
		Author: author, Committer: p.identity,
	})
	if err != nil {
		return "", p.fail(repo, op, err)
	}
	return res.SHA, nil
}
