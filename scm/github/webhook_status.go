package github

import (
	"errors"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
)

// Status, check_run and check_suite webhooks normalise to an EventStatus on the commit; steps
// waiting for checks (MergePR) wake on it.

func statusEvent(repo interface{ GetFullName() string }, sender *gh.User, sha, context string, state scm.StatusState) (*scm.Event, error) {
	name, err := repoName(repo)
	if err != nil {
		return nil, err
	}
	if sha == "" {
		return nil, errors.New("payload names no commit sha")
	}
	return &scm.Event{Kind: scm.EventStatus, Repo: name, Sender: sender.GetLogin(), SHA: sha, Context: context, State: state}, nil
}

func normStatus(p *gh.StatusEvent) (*scm.Event, error) {
	return statusEvent(p.GetRepo(), p.GetSender(), p.GetSHA(), p.GetContext(), statusState(p.GetState()))
}

func normCheckRun(p *gh.CheckRunEvent) (*scm.Event, error) {
	if _, err := repoName(p.GetRepo()); err != nil {
		return nil, err
	}
	c := p.CheckRun
	if c == nil {
		return nil, errors.New("payload has no check_run")
	}
	return statusEvent(p.GetRepo(), p.GetSender(), c.GetHeadSHA(), c.GetName(), checkState(c.GetStatus(), c.Conclusion))
}

func normCheckSuite(p *gh.CheckSuiteEvent) (*scm.Event, error) {
	if _, err := repoName(p.GetRepo()); err != nil {
		return nil, err
	}
	c := p.CheckSuite
	if c == nil {
		return nil, errors.New("payload has no check_suite")
	}
	return statusEvent(p.GetRepo(), p.GetSender(), c.GetHeadSHA(), "", checkState(c.GetStatus(), c.Conclusion))
}

func statusState(s string) scm.StatusState {
	switch s {
	case "success", "failure", "error", "pending":
		return scm.StatusState(s)
	}
	return scm.StatusPending
}

func checkState(status string, conclusion *string) scm.StatusState {
	if status != "completed" || conclusion == nil {
		return scm.StatusPending
	}
	switch *conclusion {
	case "success", "neutral", "skipped":
		return scm.StatusSuccess
	case "failure", "timed_out", "action_required", "startup_failure":
		return scm.StatusFailure
	}
	return scm.StatusError // cancelled, stale
}
