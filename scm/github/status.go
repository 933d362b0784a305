package github

import (
	"context"
	"fmt"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// maxStatusDescription is GitHub's limit for a commit status description.
const maxStatusDescription = 140

// SetStatus sets a commit status (POST /statuses/{sha}).
func (d *Driver) SetStatus(ctx context.Context, repo scm.Repo, sha string, st scm.Status) error {
	op := fmt.Sprintf("set status %s on %s", st.Context, sha)
	owner, name, err := splitRepo(repo, st.Check(sha))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	status := &gh.RepoStatus{
		State:       str(string(st.State)),
		Context:     str(st.Context),
		Description: str(truncate(st.Description, maxStatusDescription)),
	}
	if st.TargetURL != "" {
		status.TargetURL = str(st.TargetURL)
	}
	// Setting the same status twice leaves one latest status per context: safe to replay.
	_, resp, err := d.client.Repositories.CreateStatus(transport.Guarded(ctx), owner, name, sha, status)
	return d.wrap(op, repo, resp, err)
}

// truncate cuts s to at most n runes, marking the cut with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
