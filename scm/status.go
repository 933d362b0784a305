package scm

import "context"

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

// Statuses sets commit statuses.
type Statuses interface {
	SetStatus(ctx context.Context, repo Repo, sha string, st Status) error
}
