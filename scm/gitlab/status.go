package gitlab

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// SetStatus sets an external commit status named st.Context. Setting the state a status
// already has is accepted (GitLab answers 400 "Cannot transition status" for it).
func (d *Driver) SetStatus(ctx context.Context, repo scm.Repo, sha string, st scm.Status) error {
	op := fmt.Sprintf("set status %s on %s", st.Context, sha)
	pid, err := projectID(repo, st.Check(sha))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	state := gl.Pending
	switch st.State {
	case scm.StatusSuccess:
		state = gl.Success
	case scm.StatusFailure, scm.StatusError:
		state = gl.Failed
	}
	opts := &gl.SetCommitStatusOptions{State: state, Name: ptr(st.Context), Description: ptr(st.Description)}
	if st.TargetURL != "" {
		opts.TargetURL = ptr(st.TargetURL)
	}
	// A replay sets the same state again, which is accepted below.
	_, resp, err := d.client.Commits.SetCommitStatus(pid, sha, opts, gl.WithContext(transport.Guarded(ctx)))
	if err != nil && hasStatus(resp, http.StatusBadRequest) && strings.Contains(d.errText(err), "Cannot transition status") {
		return nil
	}
	return d.wrap(op, repo, resp, err)
}
