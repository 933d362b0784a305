package transport

import (
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/prflow/prflow/scm"
)

// Redacted replaces secrets in strings produced by this package.
const Redacted = "REDACTED"

var (
	// scheme://userinfo@ — the whole userinfo goes: a token may be the user name.
	userinfoRe = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/@\s"']+@`)
	// Query parameters that carry credentials on some forges or in presigned URLs.
	queryRe = regexp.MustCompile(`(?i)([?&](?:access_token|private_token|token|password|client_secret|secret|sig|signature|jwt)=)[^&#\s"']+`)
	// Authorization header values, whether printed as a header or as a bare scheme + credential.
	authRe = regexp.MustCompile(`(?i)\b(bearer|token|basic|private-token:|x-api-key:)(\s+)[A-Za-z0-9._~+/=\-]{8,}`)
)

// minSecretLen is the shortest secret that is replaced verbatim; shorter strings would mangle
// ordinary words and are not realistic tokens.
const minSecretLen = 4

// Redact removes credentials from s: URL userinfo, credential query parameters, Authorization
// header values, and every given secret (also in its URL-escaped form).
func Redact(s string, secrets ...string) string {
	if s == "" {
		return s
	}
	// Longest first, so a secret that contains another is removed whole.
	list := make([]string, 0, len(secrets)*2)
	for _, sec := range secrets {
		if len(sec) < minSecretLen {
			continue
		}
		list = append(list, sec)
		if esc := url.QueryEscape(sec); esc != sec {
			list = append(list, esc)
		}
		if esc := url.PathEscape(sec); esc != sec {
			list = append(list, esc)
		}
	}
	sort.Slice(list, func(i, j int) bool { return len(list[i]) > len(list[j]) })
	for _, sec := range list {
		s = strings.ReplaceAll(s, sec, Redacted)
	}
	s = userinfoRe.ReplaceAllString(s, "${1}"+Redacted+"@")
	s = queryRe.ReplaceAllString(s, "${1}"+Redacted)
	s = authRe.ReplaceAllString(s, "${1}${2}"+Redacted)
	return s
}

// RedactURL returns raw without userinfo and credential query parameters, for logs and errors.
func RedactURL(raw string) string { return Redact(raw) }

// RedactError returns an error whose message is Redact(err.Error(), secrets...) and that still
// unwraps to err, so errors.Is and errors.As keep working (err itself when nothing was
// redacted). nil stays nil.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	return scm.WithMessage(err, Redact(err.Error(), secrets...))
}
