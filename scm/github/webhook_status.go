package github

import (
	"errors"

	"github.com/prflow/prflow/scm"
)

type hookStatus struct {
	Action     string    `json:"action"`
	SHA        string    `json:"sha"`
	State      string    `json:"state"`
	Context    string    `json:"context"`
	Repository *hookRepo `json:"repository"`
	Sender     hookUser  `json:"sender"`
	CheckRun   *struct {
		HeadSHA    string  `json:"head_sha"`
		Name       string  `json:"name"`
		Status     string  `json:"status"`
		Conclusion *string `json:"conclusion"`
	} `json:"check_run"`
	CheckSuite *struct {
		HeadSHA    string  `json:"head_sha"`
		Status     string  `json:"status"`
		Conclusion *string `json:"conclusion"`
	} `json:"check_suite"`
}

// parseStatusEvent normalises `status`, `check_run` and `check_suite` webhooks to an
// EventStatus on the commit; steps waiting for checks (MergePR) wake on it.
func parseStatusEvent(kind string, data []byte) (*scm.Event, error) {
	var p hookStatus
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	ev := &scm.Event{Kind: scm.EventStatus, Repo: scm.Repo(p.Repository.FullName), Sender: p.Sender.Login}
	switch kind {
	case "status":
		ev.SHA, ev.Context, ev.State = p.SHA, p.Context, statusState(p.State)
	case "check_run":
		if p.CheckRun == nil {
			return nil, errors.New("payload has no check_run")
		}
		ev.SHA, ev.Context, ev.State = p.CheckRun.HeadSHA, p.CheckRun.Name, checkState(p.CheckRun.Status, p.CheckRun.Conclusion)
	case "check_suite":
		if p.CheckSuite == nil {
			return nil, errors.New("payload has no check_suite")
		}
		ev.SHA, ev.State = p.CheckSuite.HeadSHA, checkState(p.CheckSuite.Status, p.CheckSuite.Conclusion)
	}
	if ev.SHA == "" {
		return nil, errors.New("payload names no commit sha")
	}
	return ev, nil
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
