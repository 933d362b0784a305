package scmtest

import (
	"fmt"
	"time"
)

// CommitOrphan creates branch (which must not exist) at a new root commit holding only files:
// a history unrelated to the rest of the repo, as `git checkout --orphan` makes. It returns the
// commit SHA.
func (g *GitServer) CommitOrphan(owner, name, branch string, files map[string]string, msg string) (string, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return "", err
	}
	if err := validBranch(branch); err != nil {
		return "", err
	}
	tree, err := g.treeFromFiles(g.ctx, r, "", files, nil)
	if err != nil {
		return "", fmt.Errorf("scmtest: orphan commit in %s/%s: %w", owner, name, err)
	}
	sig := helperSig
	sig.When = time.Now()
	sha, err := r.commitTree(g.ctx, tree, nil, msg, sig, sig)
	if err != nil {
		return "", err
	}
	err = g.moveRef(g.ctx, owner, name, "refs/heads/"+branch, sha, "", func(cur string) error {
		if cur != "" {
			return fmt.Errorf("%w: branch %s exists at %s", ErrRefConflict, branch, cur)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("scmtest: orphan commit in %s/%s: %w", owner, name, err)
	}
	return sha, nil
}
