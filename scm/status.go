package scm

import (
	"context"
	"errors"
	"fmt"
)

// StatusState is a commit status, normalised.
type StatusState string

const (
	StatusPending StatusState = "pending"
	StatusSuccess StatusState = "success"
	StatusFailure StatusState = "failure"
	StatusError   StatusState = "error"
)

// Status is a commit status such as prflow/<stage>.
type Status struct {
	Context     string
	State       StatusState
	Description string
	TargetURL   string
}

// Check reports a status for sha that names no commit or context, or an unknown state, the
// same way on every driver.
func (st Status) Check(sha string) error {
	if sha == "" || st.Context == "" {
		return errors.New("commit SHA and status context are required")
	}
	switch st.State {
	case StatusPending, StatusSuccess, StatusFailure, StatusError:
		return nil
	}
	return fmt.Errorf("unknown status state %q", st.State)
}

// Statuses sets commit statuses.
type Statuses interface {
	SetStatus(ctx context.Context, repo Repo, sha string, st Status) error
}
