package agent

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Code classifies an agent error so callers can branch on it.
type Code string

const (
	// CodeNotFound: the app does not exist (or the agent's token may not see it).
	CodeNotFound Code = "not_found"
	// CodeDeleted: the app was deleted; the message says when. It also matches ErrNotFound,
	// so callers that only ask "does the app exist" need not know it.
	CodeDeleted Code = "deleted"
	// CodeUnauthorized: the GitOps backend rejected the agent's credentials.
	CodeUnauthorized Code = "unauthorized"
	// CodeUnreachable: the agent cannot reach its GitOps backend.
	CodeUnreachable Code = "unreachable"
	// CodeUnavailable: the GitOps backend answered but cannot work right now: one of its
	// own parts is down or slow (Argo CD's repo-server or redis: gRPC Unavailable or
	// DeadlineExceeded), or it failed with a 5xx. Retrying later may succeed; a step must
	// not read it as a verdict on the change (no rollback on it).
	CodeUnavailable Code = "backend_unavailable"
	// CodeOperationInProgress: another operation (not the caller's) is running on the app.
	CodeOperationInProgress Code = "operation_in_progress"
	// CodeInvalid: the request is malformed (bad selector, regex, empty app list…).
	CodeInvalid Code = "invalid"
	// CodeRejected: the backend refused the request for another reason (its message says why).
	CodeRejected Code = "rejected"
	// CodeOffline: no replica of the agent is registered or listening.
	CodeOffline Code = "agent_offline"
	// CodeTimeout: no answer in time (from the agent, or from its backend).
	CodeTimeout Code = "timeout"
	// CodeVersion: the message has a protocol version the reader does not know.
	CodeVersion Code = "unsupported_version"
	// CodeUnsupported: the agent does not implement the request (e.g. the simulated agent
	// has no ApplicationSet refresh), or it is switched off.
	CodeUnsupported Code = "unsupported"
	// CodeSyncWindow: a sync window of the app's project blocks the sync now (the message
	// says until when, or that the window does not allow manual syncs).
	CodeSyncWindow Code = "sync_window"
	// CodeInternal: anything else.
	CodeInternal Code = "internal"
)

// Error is an agent error as carried in replies. Match it with errors.Is against the Err*
// sentinels (which compare codes) or errors.As to read the fields.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Agent   string `json:"agent,omitempty"`
	App     string `json:"app,omitempty"`
}

func (e *Error) Error() string {
	where := ""
	switch {
	case e.Agent != "" && e.App != "":
		where = fmt.Sprintf("agent %s, app %s: ", e.Agent, e.App)
	case e.Agent != "":
		where = fmt.Sprintf("agent %s: ", e.Agent)
	case e.App != "":
		where = fmt.Sprintf("app %s: ", e.App)
	}
	msg := e.Message
	if msg == "" {
		msg = string(e.Code)
	}
	return where + msg
}

// Is matches another *Error by code, so errors.Is(err, agent.ErrNotFound) works. An
// ErrDeleted is also an ErrNotFound.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Message != "" || t.Agent != "" || t.App != "" {
		return false
	}
	return t.Code == e.Code || (t.Code == CodeNotFound && e.Code == CodeDeleted)
}

// Sentinels for errors.Is.
var (
	ErrNotFound            = &Error{Code: CodeNotFound}
	ErrDeleted             = &Error{Code: CodeDeleted}
	ErrUnauthorized        = &Error{Code: CodeUnauthorized}
	ErrUnreachable         = &Error{Code: CodeUnreachable}
	ErrUnavailable         = &Error{Code: CodeUnavailable}
	ErrOperationInProgress = &Error{Code: CodeOperationInProgress}
	ErrInvalid             = &Error{Code: CodeInvalid}
	ErrRejected            = &Error{Code: CodeRejected}
	ErrOffline             = &Error{Code: CodeOffline}
	ErrTimeout             = &Error{Code: CodeTimeout}
	ErrVersion             = &Error{Code: CodeVersion}
	ErrUnsupported         = &Error{Code: CodeUnsupported}
	ErrSyncWindow          = &Error{Code: CodeSyncWindow}
	ErrInternal            = &Error{Code: CodeInternal}
)

// Errorf builds an *Error.
func Errorf(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// Transient reports whether retrying later may succeed: the agent or its backend was offline,
// slow, unavailable or failed internally, or another operation was running.
func Transient(err error) bool {
	for _, s := range []error{ErrOffline, ErrTimeout, ErrUnreachable, ErrUnavailable, ErrInternal, ErrOperationInProgress} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// unavailableText are the parts of Argo CD error messages that say one of its own parts is
// down or slow rather than that the request is wrong. Argo CD often wraps such a failure in
// another code — a sync while the repo-server is down is HTTP 400 (FailedPrecondition)
// "error resolving repo revision: rpc error: code = Unavailable desc = connection error: …
// connection refused" — so the text decides, not the HTTP status.
var unavailableText = []string{
	"code = Unavailable",        // an inner gRPC call (repo-server, …) could not connect
	"code = DeadlineExceeded",   // … or timed out
	"context deadline exceeded", // an inner call timed out without a gRPC status
	"redis: ",                   // go-redis failures (pool timeout, closed client)
}

// UnavailableText reports whether a GitOps backend's message (an error answer, or the message
// of an operation that ended in error) says the backend cannot work right now rather than
// that the request or the change is wrong.
func UnavailableText(msg string) bool {
	for _, t := range unavailableText {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}

// AsError converts any error into an *Error (CodeInternal unless it already is one).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		c := *e
		return &c
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// RedactURL hides the user info of URL s (a token or password may be in it) for errors and
// logs; s comes back unchanged when it has none.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// A URL that does not parse may still carry credentials: drop all before the last
		// "@" of its authority-and-path (more than needed, never less).
		scheme, rest, ok := strings.Cut(s, "://")
		if i := strings.LastIndex(rest, "@"); ok && i >= 0 {
			return scheme + "://redacted@" + rest[i+1:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	u.User = url.User("redacted")
	return u.String()
}
