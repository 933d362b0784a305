package bitbucket

import (
	"errors"

	"github.com/prflow/prflow/scm"
)

type hookCommitStatus struct {
	hookHead
	CommitStatus *struct {
		Key    string `json:"key"`
		State  string `json:"state"`
		Commit *struct {
			Hash string `json:"hash"`
		} `json:"commit"`
	} `json:"commit_status"`
}

// hookStates maps the finished build states to prflow's.
var hookStates = map[string]scm.StatusState{
	"SUCCESSFUL": scm.StatusSuccess,
	"FAILED":     scm.StatusFailure,
	"STOPPED":    scm.StatusError,
}

// parseCommitStatusEvent normalises repo:commit_status_created/updated to an EventStatus;
// steps waiting for checks (MergePR) wake on it.
func parseCommitStatusEvent(data []byte) (*scm.Event, error) {
	var p hookCommitStatus
	ev, err := decodeHook(data, &p)
	if err != nil {
		return nil, err
	}
	cs := p.CommitStatus
	if cs == nil || cs.Commit == nil || cs.Commit.Hash == "" {
		return nil, errors.New("payload has no commit_status.commit.hash")
	}
	st, ok := hookStates[cs.State]
	if !ok {
		st = scm.StatusPending // INPROGRESS, and states Bitbucket may add
	}
	ev.Kind, ev.SHA, ev.Context, ev.State = scm.EventStatus, cs.Commit.Hash, cs.Key, st
	return ev, nil
}
