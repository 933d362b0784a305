package scm

import (
	"errors"
	"fmt"
	"strings"
)

// The checks and outcomes every forge driver (github, gitlab, bitbucket) shares; what differs
// per forge (API calls, status codes) stays in the driver packages.

// Check reports the first thing missing or wrong in a RevertInput, worded the same by every
// driver.
func (in RevertInput) Check() error {
	switch {
	case in.SHA == "":
		return errors.New("RevertInput.SHA is empty")
	case in.Base == "":
		return errors.New("RevertInput.Base is empty")
	case in.Mainline < 0:
		return fmt.Errorf("RevertInput.Mainline %d is negative", in.Mainline)
	}
	return nil
}

// ExistingBranchError is CreateBranch's answer when the forge refused because name exists and
// now points at cur: nil when cur is sha (a redelivered job; an abbreviated sha matches by
// prefix), else an *Error with a ConflictError and the forge's status.
func ExistingBranchError(provider, op string, repo Repo, status int, name, sha string, cur Ref) error {
	if cur.SHA == sha || (sha != "" && len(sha) < 40 && strings.HasPrefix(cur.SHA, sha)) {
		return nil
	}
	return &Error{Provider: provider, Op: op, Repo: repo, Status: status,
		Err: &ConflictError{Msg: fmt.Sprintf("branch %s already exists at %s", name, cur.SHA)}}
}

// BranchMovedError is a Commit's conflict when branch is at `at`, not where the commit expects
// it: at want, the head to be replaced when replacing (CommitInput.Replace), else the parent.
func BranchMovedError(provider, op string, repo Repo, branch, at, want string, replacing bool) error {
	msg := fmt.Sprintf("branch %s is at %s, not at the expected parent %s", branch, at, want)
	if replacing {
		msg = fmt.Sprintf("branch %s is at %s, not at %s which was to be replaced", branch, at, want)
	}
	return &Error{Provider: provider, Op: op, Repo: repo, Err: &ConflictError{Msg: msg}}
}
