package bitbucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/prflow/prflow/scm"
)

// IsAncestor asks Bitbucket Cloud's merge base API (GET /repositories/{workspace}/{slug}/
// merge-base/{ancestor}..{descendant}): ancestor is contained in descendant exactly when it is
// their merge base. Bitbucket answers 404 both for an unknown commit and for histories with no
// common commit; the two commits are then looked up to tell which (ErrNotFound, or false).
func (d *Driver) IsAncestor(ctx context.Context, repo scm.Repo, ancestor, descendant string) (bool, error) {
	op := fmt.Sprintf("merge base of %.12s and %.12s", ancestor, descendant)
	a, desc, argErr := scm.CheckAncestryArgs(ancestor, descendant)
	ws, slug, err := splitRepo(repo, argErr)
	if err != nil {
		return false, d.wrap(op, repo, nil, err)
	}
	return d.ancestry.Lookup(ctx, repo, a, desc, func(ctx context.Context) (bool, error) {
		path := "/repositories/" + url.PathEscape(ws) + "/" + url.PathEscape(slug) + "/merge-base/" + a + ".." + desc
		_, body, err := d.send(ctx, http.MethodGet, path, nil, nil, "")
		if err != nil {
			werr := d.wrap(op, repo, nil, err)
			if !errors.Is(werr, scm.ErrNotFound) {
				return false, werr
			}
			// 404 is also the answer for unrelated histories: when both commits exist,
			// neither contains the other.
			for _, sha := range []string{a, desc} {
				if _, cerr := d.commit(ctx, repo, sha); cerr != nil {
					return false, cerr
				}
			}
			return false, nil
		}
		var c apiCommit
		if err := json.Unmarshal(body, &c); err != nil || c.Hash == "" {
			return false, d.wrap(op, repo, nil, fmt.Errorf("unexpected merge base response: %v", err))
		}
		// Bitbucket may shorten hashes; a prefix of at least 12 characters identifies the commit.
		return c.Hash == a || sameCommit(a, c.Hash), nil
	})
}
