package bitbucket

import (
	"context"
	"fmt"

	bb "github.com/ktrysmt/go-bitbucket"

	"github.com/prflow/prflow/scm"
)

// maxStatusKey is Bitbucket's limit for a build status key.
const maxStatusKey = 40

// SetStatus sets a build status keyed by st.Context (POST /commit/{sha}/statuses/build).
// Bitbucket requires a URL; without TargetURL the repository's web page is used.
func (d *Driver) SetStatus(ctx context.Context, repo scm.Repo, sha string, st scm.Status) error {
	op := fmt.Sprintf("set status %s on %s", st.Context, sha)
	ws, slug, err := splitRepo(repo, st.Check(sha), checkStatusKey(st.Context))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	state := "INPROGRESS"
	switch st.State {
	case scm.StatusSuccess:
		state = "SUCCESSFUL"
	case scm.StatusFailure, scm.StatusError:
		state = "FAILED"
	}
	target := st.TargetURL
	if target == "" {
		if target, err = d.repoWebURL(ctx, repo, ws, slug); err != nil {
			return err
		}
	}
	cl, err := d.call(ctx, true)
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, err = cl.c.Repositories.Commits.CreateCommitStatus(&bb.CommitsOptions{Owner: ws, RepoSlug: slug, Revision: sha},
		&bb.CommitStatusOptions{Key: st.Context, Name: st.Context, State: state, Url: target, Description: st.Description})
	return d.wrap(op, repo, cl, err)
}

// checkStatusKey refuses a status context Bitbucket would not take as a build key.
func checkStatusKey(key string) error {
	if len(key) > maxStatusKey {
		return fmt.Errorf("status context %q is longer than Bitbucket's %d characters", key, maxStatusKey)
	}
	return nil
}

func (d *Driver) repoWebURL(ctx context.Context, repo scm.Repo, ws, slug string) (string, error) {
	const op = "get repository"
	cl, err := d.call(ctx, false)
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	r, err := cl.c.Repositories.Repository.Get(&bb.RepositoryOptions{Owner: ws, RepoSlug: slug})
	if err != nil {
		return "", d.wrap(op, repo, cl, err)
	}
	if html, ok := r.Links["html"].(map[string]any); ok {
		if href, _ := html["href"].(string); href != "" {
			return href, nil
		}
	}
	return "", d.wrap(op, repo, nil, fmt.Errorf("repository has no web link for the status URL"))
}
