package scm

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHTTPErrorMapsForgeAnswers(t *testing.T) {
	retry := http.Header{"Retry-After": {"7"}}
	cases := []struct {
		code     int
		h        http.Header
		sentinel error
		msg      string
	}{
		{401, nil, ErrUnauthorized, "unauthorized: Bad credentials"},
		{404, nil, ErrNotFound, "not found: Bad credentials"},
		{409, nil, ErrConflict, "conflict: Bad credentials"},
		{429, retry, ErrRateLimited, "rate limited, retry after 7s: Bad credentials"},
		{403, retry, ErrForbidden, "forbidden: Bad credentials"}, // GitHub's 403 rate limit is the driver's own case
		{422, nil, nil, "Bad credentials"},
		{500, nil, nil, "Bad credentials"},
	}
	for _, c := range cases {
		err := HTTPError(c.code, c.h, "Bad credentials", "")
		if err.Error() != c.msg {
			t.Errorf("%d: %q, want %q", c.code, err, c.msg)
		}
		for _, s := range []error{ErrUnauthorized, ErrForbidden, ErrNotFound, ErrConflict, ErrRateLimited} {
			if errors.Is(err, s) != (s == c.sentinel) {
				t.Errorf("%d: errors.Is(%v) = %v", c.code, s, !(s == c.sentinel))
			}
		}
	}
	var rl *RateLimitError
	if !errors.As(HTTPError(429, retry, "slow down", ""), &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("429: %+v", rl)
	}
}

func TestRetryAfter(t *testing.T) {
	in := func(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).Unix(), 10) }
	cases := []struct {
		name  string
		h     http.Header
		reset string
		min   time.Duration
		max   time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"30"}}, "", 30 * time.Second, 30 * time.Second},
		{"http date past", http.Header{"Retry-After": {"Mon, 02 Jan 2006 15:04:05 GMT"}}, "", 0, 0},
		{"http date ahead", http.Header{"Retry-After": {time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}, "", 58 * time.Minute, time.Hour},
		{"reset header", http.Header{"X-Ratelimit-Reset": {in(10 * time.Minute)}}, "X-RateLimit-Reset", 9 * time.Minute, 10 * time.Minute},
		{"reset header not asked for", http.Header{"X-Ratelimit-Reset": {in(10 * time.Minute)}}, "", time.Minute, time.Minute},
		{"reset passed", http.Header{"Ratelimit-Reset": {in(-time.Hour)}}, "RateLimit-Reset", 0, 0},
		{"negative seconds", http.Header{"Retry-After": {"-5"}}, "", time.Minute, time.Minute},
		{"garbage", http.Header{"Retry-After": {"soon"}, "Ratelimit-Reset": {"later"}}, "RateLimit-Reset", time.Minute, time.Minute},
		{"no header", nil, "RateLimit-Reset", time.Minute, time.Minute},
	}
	for _, c := range cases {
		if got := RetryAfter(c.h, c.reset); got < c.min || got > c.max {
			t.Errorf("%s: %s, want %s..%s", c.name, got, c.min, c.max)
		}
	}
}

func TestRedactErrorHidesSecretsAndKeepsTheCause(t *testing.T) {
	cause := &fs.PathError{Op: "open", Path: "/tmp/ghp_secret123", Err: fs.ErrNotExist}
	err := RedactError(cause, "", "ghp_secret123", "pw")
	if strings.Contains(err.Error(), "ghp_secret123") || !strings.Contains(err.Error(), Redacted) {
		t.Fatalf("not redacted: %q", err)
	}
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		t.Fatalf("redaction lost the cause: %v", err)
	}
	if clean := errors.New("no secret here"); RedactError(clean, "ghp_secret123") != clean {
		t.Fatal("an error without a secret is returned as it is")
	}
	if RedactError(nil, "x") != nil {
		t.Fatal("nil stays nil")
	}
	// An empty secret must not turn every gap between characters into [REDACTED].
	if got := RedactString("token abc", ""); got != "token abc" {
		t.Fatalf("empty secret: %q", got)
	}
}

func TestBranchMovedError(t *testing.T) {
	err := BranchMovedError("gitlab", "commit to b", "g/r", "b", "c2", "c1", false)
	if !errors.Is(err, ErrConflict) || err.Error() != "gitlab: commit to b in g/r: conflict: branch b is at c2, not at the expected parent c1" {
		t.Fatalf("parent: %v", err)
	}
	err = BranchMovedError("github", "commit to b", "o/r", "b", "c2", "c0", true)
	if !errors.Is(err, ErrConflict) || !strings.HasSuffix(err.Error(), "branch b is at c2, not at c0 which was to be replaced") {
		t.Fatalf("replace: %v", err)
	}
}

func TestWrapped(t *testing.T) {
	inner := &Error{Provider: "github", Op: "get branch b", Err: ErrNotFound}
	if !Wrapped(inner) || !Wrapped(fmt.Errorf("create branch: %w", inner)) || Wrapped(ErrNotFound) || Wrapped(nil) {
		t.Fatal("Wrapped must see a driver's *Error, also wrapped, and nothing else")
	}
}

func TestPlainError(t *testing.T) {
	if err := PlainError("github", "op", "o/r", nil, "tok"); err != nil {
		t.Errorf("nil: %v", err)
	}
	cause := fmt.Errorf("dial https://x:tok-123@ghe.example: %w", fs.ErrPermission)
	err := PlainError("github", "revert abc", "o/r", cause, "tok-123")
	var se *Error
	if !errors.As(err, &se) || se.Provider != "github" || se.Op != "revert abc" || se.Repo != "o/r" {
		t.Fatalf("not named: %#v", err)
	}
	if strings.Contains(err.Error(), "tok-123") || !strings.Contains(err.Error(), Redacted) {
		t.Errorf("secret not removed: %v", err)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("the cause is lost: %v", err)
	}
	// A nested call's *Error already names its call: it passes as it is.
	inner := &Error{Provider: "github", Op: "get branch main", Repo: "o/r", Err: ErrNotFound}
	if got := PlainError("github", "revert abc", "o/r", fmt.Errorf("plan: %w", inner)); !errors.As(got, &se) || se != inner {
		t.Errorf("nested *Error wrapped again: %v", got)
	}
}
