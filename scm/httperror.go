package scm

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The REST drivers (github, gitlab, bitbucket) map their forge's HTTP answers the same way;
// what differs per forge (its client library's error types, its message format, GitHub's
// secondary limits) stays in the driver.

// HTTPError is the error a forge's non-2xx answer means: ErrUnauthorized for 401,
// ErrForbidden for 403 (GitHub's 403 rate limits are its driver's own case), ErrNotFound for 404, a *ConflictError for 409, a *RateLimitError for 429 (RetryAfter reads
// the wait from h, with resetHeader naming the forge's reset-time header, "" for none), and
// msg as it is for any other status.
func HTTPError(code int, h http.Header, msg, resetHeader string) error {
	switch code {
	case http.StatusUnauthorized:
		return fmt.Errorf("%w: %s", ErrUnauthorized, msg)
	case http.StatusForbidden:
		return fmt.Errorf("%w: %s", ErrForbidden, msg)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, msg)
	case http.StatusConflict:
		return &ConflictError{Msg: msg}
	case http.StatusTooManyRequests:
		return &RateLimitError{RetryAfter: RetryAfter(h, resetHeader), Msg: msg}
	}
	return errors.New(msg)
}

// RetryAfter is how long a rate-limited forge asks to wait: Retry-After in seconds or as an
// HTTP date, else resetHeader (a Unix time, e.g. GitHub's X-RateLimit-Reset, GitLab's
// RateLimit-Reset) when given, else a minute. A time already past waits 0. h may be nil.
func RetryAfter(h http.Header, resetHeader string) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			return time.Duration(s) * time.Second
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(time.Until(t), 0)
		}
	}
	if resetHeader != "" {
		if v := h.Get(resetHeader); v != "" {
			if s, err := strconv.ParseInt(v, 10, 64); err == nil {
				return max(time.Until(time.Unix(s, 0)), 0)
			}
		}
	}
	return time.Minute
}

// Wrapped reports whether err already is a driver's *Error: a nested call (say Branch inside
// CreateBranch) named its own call, so the caller returns it as it is rather than wrapping it
// again.
func Wrapped(err error) bool {
	var se *Error
	return errors.As(err, &se)
}

// PlainError names provider, op and repo on an error that did not come from a forge call,
// with secrets removed; an *Error (a nested call named its own) passes as it is.
func PlainError(provider, op string, repo Repo, err error, secrets ...string) error {
	if err == nil || Wrapped(err) {
		return err
	}
	return &Error{Provider: provider, Op: op, Repo: repo, Err: RedactError(err, secrets...)}
}

// Redacted stands in a driver's errors for a secret it removed.
const Redacted = "[REDACTED]"

// RedactString replaces every non-empty secret in s with Redacted.
func RedactString(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// RedactError hides secrets in err's message (a proxy or a library may echo a token back)
// and still unwraps to err, so errors.Is and errors.As keep working. An error that holds no
// secret is returned as it is; nil stays nil.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	return WithMessage(err, RedactString(err.Error(), secrets...))
}

// WithMessage returns an error whose message is msg (err's own, redacted) and that still
// unwraps to err, so errors.Is and errors.As keep working; err itself when msg is its message.
func WithMessage(err error, msg string) error {
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
