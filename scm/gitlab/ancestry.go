package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/prflow/prflow/scm"
)

// IsAncestor asks GitLab's merge base API (GET /projects/:id/repository/merge_base?refs[]=a&
// refs[]=d): ancestor is contained in descendant exactly when it is their merge base. GitLab
// answers 400 "Could not find ref" for an unknown commit (ErrNotFound here) and 404 when the
// histories share no commit; the client reports every 404 alike, so a 404 is taken as
// "unrelated" only once the project itself is known to exist.
func (d *Driver) IsAncestor(ctx context.Context, repo scm.Repo, ancestor, descendant string) (bool, error) {
	op := fmt.Sprintf("merge base of %.12s and %.12s", ancestor, descendant)
	a, desc, argErr := scm.CheckAncestryArgs(ancestor, descendant)
	pid, err := projectID(repo, argErr)
	if err != nil {
		return false, d.wrap(op, repo, nil, err)
	}
	return d.ancestry.Lookup(ctx, repo, a, desc, func(ctx context.Context) (bool, error) {
		mb, resp, err := d.client.Repositories.MergeBase(pid, &gl.MergeBaseOptions{Ref: &[]string{a, desc}}, gl.WithContext(ctx))
		switch {
		case err == nil:
			if mb == nil || mb.ID == "" {
				return false, d.wrap(op, repo, resp, errors.New("the answer names no commit"))
			}
			return strings.EqualFold(mb.ID, a), nil
		case hasStatus(resp, http.StatusBadRequest) && strings.Contains(strings.ToLower(d.errText(err)), "could not find"):
			return false, &scm.Error{Provider: Name, Op: op, Repo: repo, Status: http.StatusBadRequest,
				Err: fmt.Errorf("%w: %s", scm.ErrNotFound, d.errText(err))}
		case errors.Is(err, gl.ErrNotFound) || hasStatus(resp, http.StatusNotFound):
			if perr := d.RepoExists(ctx, repo); perr != nil {
				return false, perr
			}
			return false, nil
		}
		return false, d.wrap(op, repo, resp, err)
	})
}
