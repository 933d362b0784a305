package bitbucket

import (
	"errors"

	"github.com/prflow/prflow/scm"
)

type hookCommitStatus struct {
	Actor        *hookActor `json:"actor"`
	Repository   *hookRepo  `json:"repository"`
	CommitStatus *struct {
		Key    string `json:"key"`
		State  string `json:"state"`
		Commit *struct {
			Hash string `json:"hash"`
		} `json:"commit"`
	} `json:"commit_status"`
}

// parseCommitStatusEvent normalises repo:commit_status_created/updated to an EventStatus;
// steps waiting for checks (MergePR) wake on it.
func parseCommitStatusEvent(data []byte) (*scm.Event, error) {
	var p hookCommitStatus
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Repository == nil || p.Repository.FullName == "" {
		return nil, errors.New("payload has no repository.full_name")
	}
	cs := p.CommitStatus
	if cs == nil || cs.Commit == nil || cs.Commit.Hash == "" {
		return nil, errors.New("payload has no commit_status.commit.hash")
	}
	st := scm.StatusPending
	switch cs.State {
	case "SUCCESSFUL":
		st = scm.StatusSuccess
	case "FAILED":
		st = scm.StatusFailure
	case "STOPPED":
		st = scm.StatusError
	}
	return &scm.Event{Kind: scm.EventStatus, Repo: scm.Repo(p.Repository.FullName), Sender: p.Actor.name(),
		SHA: cs.Commit.Hash, Context: cs.Key, State: st}, nil
}
