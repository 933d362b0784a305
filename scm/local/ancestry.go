package local

import (
	"context"
	"errors"
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
)

// IsAncestor fetches the remote's branches with growing depth until both commits and their
// merge base are present, and answers whether ancestor is that merge base (a commit contains
// another exactly when the other is their merge base). A commit on no branch is ErrNotFound;
// unrelated histories are false.
func (p *Provider) IsAncestor(ctx context.Context, repo scm.Repo, ancestor, descendant string) (bool, error) {
	op := fmt.Sprintf("merge base of %.12s and %.12s", ancestor, descendant)
	a, d, err := scm.CheckAncestryArgs(ancestor, descendant)
	if err != nil {
		return false, p.fail(repo, op, err)
	}
	yes, err := p.ancestry.Lookup(ctx, repo, a, d, func(ctx context.Context) (bool, error) {
		w, err := p.open(ctx, repo)
		if err != nil {
			return false, err
		}
		defer w.Close()
		var yes bool
		err = w.FetchHistory(ctx, []string{"refs/heads/*"}, func() (bool, error) {
			if !w.HasCommit(a) || !w.HasCommit(d) {
				return false, nil
			}
			mb, err := w.MergeBase(a, d)
			switch {
			case errors.Is(err, scm.ErrNotFound):
				yes = false // unrelated histories
				return true, nil
			case err != nil:
				return false, err // ErrShallow fetches deeper
			}
			yes = mb == a
			return true, nil
		})
		if errors.Is(err, gitengine.ErrShallow) {
			missing := a
			if !w.HasCommit(d) {
				missing = d
			}
			return false, fmt.Errorf("commit %.12s is on no branch: %w", missing, scm.ErrNotFound)
		}
		return yes, err
	})
	return yes, p.fail(repo, op, err)
}

// ChangedBetween lists the paths changed from base to head, from their merge base.
func (p *Provider) ChangedBetween(ctx context.Context, repo scm.Repo, base, head string) ([]string, error) {
	op := fmt.Sprintf("compare %.12s...%.12s", base, head)
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	for _, sha := range []string{base, head} {
		if err := w.FetchCommit(ctx, refs, sha); err != nil {
			return nil, p.fail(repo, op, err)
		}
	}
	var mb string
	err = w.FetchHistory(ctx, []string{"refs/heads/*"}, func() (bool, error) {
		var err error
		mb, err = w.MergeBase(base, head)
		if errors.Is(err, gitengine.ErrShallow) {
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	files, err := w.ChangedPaths(mb, head)
	return files, p.fail(repo, op, err)
}

var _ scm.Comparer = (*Provider)(nil)
