package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
)

// IsAncestor asks GitHub's compare API (GET /repos/{o}/{r}/compare/{base}...{head}) with
// ancestor as base and descendant as head: status "ahead" or "identical" means the head
// contains the base; "behind" and "diverged" mean it does not. A 404 "No common ancestor"
// (unrelated histories) is false; any other 404 (an unknown commit) is ErrNotFound.
func (d *Driver) IsAncestor(ctx context.Context, repo scm.Repo, ancestor, descendant string) (bool, error) {
	op := fmt.Sprintf("compare %.12s...%.12s", ancestor, descendant)
	a, desc, argErr := scm.CheckAncestryArgs(ancestor, descendant)
	owner, rname, err := splitRepo(repo, argErr)
	if err != nil {
		return false, d.wrap(op, repo, nil, err)
	}
	return d.ancestry.Lookup(ctx, repo, a, desc, func(ctx context.Context) (bool, error) {
		// per_page=1: only the status is read; the commit list is paginated, so keep it short.
		req, err := d.client.NewRequest(http.MethodGet, fmt.Sprintf("repos/%s/%s/compare/%s...%s?per_page=1", owner, rname, a, desc), nil)
		if err != nil {
			return false, d.wrap(op, repo, nil, err)
		}
		var cmp struct {
			Status string `json:"status"`
		}
		resp, err := d.client.Do(ctx, req, &cmp)
		if err != nil {
			var er *gh.ErrorResponse
			if errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound &&
				strings.Contains(strings.ToLower(er.Message), "no common ancestor") {
				return false, nil
			}
			return false, d.wrap(op, repo, resp, err)
		}
		switch cmp.Status {
		case "ahead", "identical":
			return true, nil
		case "behind", "diverged":
			return false, nil
		}
		return false, d.wrap(op, repo, resp, fmt.Errorf("unexpected compare status %q", cmp.Status))
	})
}
