package scm

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Sentinel errors; drivers wrap them with the repo and call so messages say where it failed,
// e.g. `github: merge PR #4 in acme/deploy: not mergeable: conflicts in envs/prod/config.json`.
var (
	ErrNotFound     = errors.New("not found")
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the forge knows who is asking and refuses the call (HTTP 403): no
	// permission, a locked conversation, another user's comment.
	ErrForbidden    = errors.New("forbidden")
	ErrConflict     = errors.New("conflict")
	ErrRateLimited  = errors.New("rate limited")
	ErrNotMergeable = errors.New("not mergeable")
	ErrNotSupported = errors.New("not supported")
	// ErrTruncated: the forge answered with part of a list only (GitHub's compare lists at
	// most 300 files); what it listed comes with the error.
	ErrTruncated = errors.New("list cut short by the forge")
)

// Error is the error every driver returns: it names the provider, the call and the repo.
type Error struct {
	Provider string
	Op       string // e.g. "merge PR #4", "read file envs/dev/config.json@main"
	Repo     Repo
	Status   int // HTTP status when there was one
	Err      error
}

func (e *Error) Error() string {
	s := e.Provider + ": " + e.Op
	if e.Repo != "" {
		s += " in " + string(e.Repo)
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// RateLimitError says when to try again. It matches ErrRateLimited.
type RateLimitError struct {
	RetryAfter time.Duration
	Msg        string
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %s", e.RetryAfter, e.Msg)
}
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// ConflictError lists the files that did not merge or revert cleanly. It matches ErrConflict.
type ConflictError struct {
	Files []string
	Msg   string
}

func (e *ConflictError) Error() string {
	if len(e.Files) == 0 {
		return "conflict: " + e.Msg
	}
	return fmt.Sprintf("conflict in %v: %s", e.Files, e.Msg)
}
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Transient reports whether retrying the same call later may succeed: rate limits, 5xx, 429,
// network failures, and driver errors that say so themselves (GitHub's 405 "Base branch was
// modified", Bitbucket's asynchronous merge still running).
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrRateLimited) {
		return true
	}
	var t interface{ Transient() bool }
	if errors.As(err, &t) && t.Transient() {
		return true
	}
	var e *Error
	if errors.As(err, &e) && (e.Status >= 500 || e.Status == 429) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
