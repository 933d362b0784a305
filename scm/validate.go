package scm

import (
	"errors"
	"fmt"
	"strings"
)

// Checks every driver makes before calling its forge, so bad input fails the same way
// everywhere, with the field named, and never reaches the network.

// FirstError is the first of errs that is not nil: a driver names its repository's own
// error first and then the checks of a call's arguments, in the order they are reported.
func FirstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckSHA rejects a missing commit SHA.
func CheckSHA(sha string) error {
	if sha == "" {
		return errors.New("empty commit SHA")
	}
	return nil
}

// CheckComment rejects a comment with nothing to say.
func CheckComment(body string) error {
	if strings.TrimSpace(body) == "" {
		return errors.New("empty comment")
	}
	return nil
}

// CheckBranch rejects names git or a forge would refuse.
func CheckBranch(name string) error {
	switch {
	case name == "":
		return errors.New("empty branch name")
	case strings.HasPrefix(name, "refs/"):
		return fmt.Errorf("branch %q must be a short name, not a full ref", name)
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".lock") ||
		strings.Contains(name, "..") || strings.Contains(name, "//") || strings.Contains(name, "@{") ||
		strings.ContainsAny(name, " ~^:?*[\\\x00\x7f"):
		return fmt.Errorf("invalid branch name %q", name)
	}
	for _, r := range name {
		if r < 0x20 {
			return fmt.Errorf("invalid branch name %q", name)
		}
	}
	return nil
}

// CheckPath rejects file paths that are empty, absolute, directories, or step out of the repo.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty file path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("file path %q must be relative to the repository root", p)
	case strings.HasSuffix(p, "/"):
		return fmt.Errorf("file path %q names a directory", p)
	case strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("file path %q contains a NUL or backslash", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("file path %q has an empty, . or .. segment", p)
		}
	}
	return nil
}

// CheckCommitInput validates a commit request.
func CheckCommitInput(in CommitInput) error {
	if err := CheckBranch(in.Branch); err != nil {
		return err
	}
	if in.Parent == "" {
		return errors.New("CommitInput.Parent is empty")
	}
	if strings.TrimSpace(in.Message) == "" {
		return errors.New("CommitInput.Message is empty")
	}
	if strings.ContainsAny(in.Author.Name+in.Author.Email, "<>\n") {
		return errors.New("CommitInput.Author must not contain '<', '>' or newlines")
	}
	if (in.Author.Name == "") != (in.Author.Email == "") {
		return errors.New("CommitInput.Author needs both a name and an email, or neither")
	}
	seen := make(map[string]bool, len(in.Changes))
	for i, c := range in.Changes {
		if err := CheckPath(c.Path); err != nil {
			return fmt.Errorf("CommitInput.Changes[%d]: %w", i, err)
		}
		if seen[c.Path] {
			return fmt.Errorf("CommitInput.Changes[%d]: %s is changed twice", i, c.Path)
		}
		seen[c.Path] = true
	}
	return nil
}
