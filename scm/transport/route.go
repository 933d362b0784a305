package transport

import (
	"strings"
)

// maxRouteSegments bounds route names; deeper paths end in "…".
const maxRouteSegments = 8

// Route turns a request into a low-cardinality metric label such as
// "GET /repos/:owner/:repo/pulls/:n": repository owners and names (GitHub /repos, GitLab
// /projects, Bitbucket /repositories, users, orgs, groups, workspaces) become placeholders,
// numbers become :n, commit SHAs :sha, and file paths and ref names after contents, files, src,
// raw, refs, ref, branches, tags and compare collapse into one placeholder.
func Route(method, escapedPath string) string {
	segs := strings.Split(strings.Trim(escapedPath, "/"), "/")
	var out []string
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		if s == "" {
			continue
		}
		if len(out) >= maxRouteSegments {
			out = append(out, "…")
			break
		}
		switch strings.ToLower(s) {
		case "repos", "repositories":
			out = append(out, s)
			if i+1 < len(segs) {
				out = append(out, ":owner")
				i++
			}
			if i+1 < len(segs) {
				out = append(out, ":repo")
				i++
			}
			continue
		case "projects":
			out = append(out, s)
			if i+1 < len(segs) {
				out = append(out, ":project")
				i++
			}
			continue
		case "users", "user", "orgs", "groups", "workspaces", "namespaces", "teams":
			out = append(out, s)
			if i+1 < len(segs) && !isNumber(segs[i+1]) && !knownWord(segs[i+1]) {
				out = append(out, ":name")
				i++
			}
			continue
		case "contents", "files", "src", "raw", "refs", "ref", "branches", "tags", "compare", "tree", "blob", "matching-refs":
			out = append(out, s)
			if i+1 < len(segs) {
				// GitLab /repository/files/<path>/raw keeps its trailing verb.
				last := segs[len(segs)-1]
				if (strings.ToLower(s) == "files" || strings.ToLower(s) == "branches") && (last == "raw" || last == "blame" || last == "protect" || last == "unprotect") && len(segs)-1 > i+1 {
					out = append(out, ":path", last)
				} else {
					out = append(out, ":path")
				}
			}
			i = len(segs)
			continue
		}
		switch {
		case isNumber(s):
			out = append(out, ":n")
		case isSHA(s):
			out = append(out, ":sha")
		default:
			out = append(out, s)
		}
	}
	return method + " /" + strings.Join(out, "/")
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isSHA recognises abbreviated and full hex object ids (7–64 hex digits with a digit in them,
// so words such as "deadbeef"-like names are rare false positives only).
func isSHA(s string) bool {
	if len(s) < 7 || len(s) > 64 {
		return false
	}
	digit := false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return digit
}

// knownWord: path words that follow /user or /users without a name (GitHub /user/repos).
func knownWord(s string) bool {
	switch s {
	case "repos", "emails", "keys", "installations", "orgs", "teams", "projects", "memberships":
		return true
	}
	return false
}
