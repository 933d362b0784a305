package scm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// FileAt reads path as it is in commit. A missing file is (nil, false, nil), not an error, so that
// callers can tell "absent" from "could not read". Drivers build one over their contents API;
// the git engine builds one over its object store.
type FileAt func(ctx context.Context, commit, path string) (data []byte, exists bool, err error)

// PlanRevert computes the file changes that undo commit on top of head, file by file.
//
// Git forges other than GitLab have no revert API and go-git has no revert, so prflow reverts at
// file level: for every path that commit changed relative to parent (its mainline parent for a
// merge commit), if head still holds commit's version, the path is restored to parent's version
// (deleted when parent did not have it, re-added when commit deleted it). A path that head already
// holds in parent's version needs nothing. Any other path was changed again after commit; undoing
// it would lose that later change, so it is a conflict and the whole plan fails with a
// *ConflictError listing every such path (sorted). No partial plan is returned on conflict.
//
// The result is sorted by path and may be empty when head already has parent's version of every
// path (the commit was reverted before).
func PlanRevert(ctx context.Context, read FileAt, commit, parent, head string, paths []string) ([]FileChange, error) {
	if read == nil {
		return nil, fmt.Errorf("plan revert of %s: no file reader", commit)
	}
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted)
	var changes []FileChange
	var conflicts []string
	seen := make(map[string]bool, len(sorted))
	for _, p := range sorted {
		if seen[p] {
			continue
		}
		seen[p] = true
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cur, curOK, err := read(ctx, commit, p)
		if err != nil {
			return nil, fmt.Errorf("plan revert of %s: read %s at %s: %w", short(commit), p, short(commit), err)
		}
		old, oldOK, err := read(ctx, parent, p)
		if err != nil {
			return nil, fmt.Errorf("plan revert of %s: read %s at %s: %w", short(commit), p, short(parent), err)
		}
		now, nowOK, err := read(ctx, head, p)
		if err != nil {
			return nil, fmt.Errorf("plan revert of %s: read %s at %s: %w", short(commit), p, short(head), err)
		}
		switch {
		case sameFile(now, nowOK, old, oldOK):
			// Already back to the parent's version (also covers a commit that did not change p).
		case sameFile(now, nowOK, cur, curOK):
			if oldOK {
				changes = append(changes, FileChange{Path: p, Content: old})
			} else {
				changes = append(changes, FileChange{Path: p, Delete: true})
			}
		default:
			conflicts = append(conflicts, p)
		}
	}
	if len(conflicts) > 0 {
		return nil, &ConflictError{
			Files: conflicts,
			Msg:   fmt.Sprintf("cannot revert %s: the files changed again after it", short(commit)),
		}
	}
	return changes, nil
}

// FileRevert is the commit a forge without a revert API (GitHub, Bitbucket) undoes at file
// level, as the driver read it.
type FileRevert struct {
	Commit  string   // full SHA of the commit to undo
	Parent  string   // full SHA of its mainline parent
	Message string   // its message; the default revert message quotes the first line
	Paths   []string // the paths Commit changed relative to Parent
}

// BranchCommitter is the part of Git that RevertFiles writes through.
type BranchCommitter interface {
	Branch(ctx context.Context, repo Repo, name string) (Ref, error)
	Commit(ctx context.Context, repo Repo, in CommitInput) (string, error)
}

// RevertFiles makes the commit that undoes rv on the new branch in.Branch from in.Base, planned
// by PlanRevert over read. A redelivered job that finds in.Branch already undoing the commit
// gets its head back; the branch elsewhere, a base that has every file back already, or files
// changed again since are errors matching ErrConflict. fail names the driver, call and repo on
// errors that are not an *Error yet (and removes secrets).
func RevertFiles(ctx context.Context, g BranchCommitter, repo Repo, read FileAt, in RevertInput, rv FileRevert, fail func(error) error) (string, error) {
	if cur, err := g.Branch(ctx, repo, in.Branch); err == nil {
		changes, perr := PlanRevert(ctx, read, rv.Commit, rv.Parent, cur.SHA, rv.Paths)
		if perr == nil && len(changes) == 0 {
			return cur.SHA, nil
		}
		return "", fail(&ConflictError{Msg: fmt.Sprintf("branch %s already exists at %s and does not revert %s", in.Branch, cur.SHA, in.SHA)})
	} else if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	base, err := g.Branch(ctx, repo, in.Base)
	if err != nil {
		return "", err
	}
	changes, err := PlanRevert(ctx, read, rv.Commit, rv.Parent, base.SHA, rv.Paths)
	if err != nil {
		return "", fail(err)
	}
	if len(changes) == 0 {
		return "", fail(&ConflictError{Msg: fmt.Sprintf("already reverted: %s has the parent's version of every file %s changed", in.Base, in.SHA)})
	}
	msg := in.Message
	if msg == "" {
		title, _, _ := strings.Cut(rv.Message, "\n")
		msg = fmt.Sprintf("Revert %q\n\nThis reverts commit %s.", title, rv.Commit)
	}
	return g.Commit(ctx, repo, CommitInput{Branch: in.Branch, Parent: base.SHA, Message: msg, Author: in.Author, Changes: changes})
}

func sameFile(a []byte, aOK bool, b []byte, bOK bool) bool {
	if aOK != bOK {
		return false
	}
	return !aOK || bytes.Equal(a, b)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// NotMergeableError says why a PR cannot be merged and, for conflicts, which files. It matches
// ErrNotMergeable (and deliberately not ErrConflict, which MergePR reserves for a stale head SHA).
type NotMergeableError struct {
	Files []string
	Msg   string
}

func (e *NotMergeableError) Error() string {
	if len(e.Files) == 0 {
		return "not mergeable: " + e.Msg
	}
	return fmt.Sprintf("not mergeable: conflicts in %v: %s", e.Files, e.Msg)
}

// Is makes errors.Is(err, ErrNotMergeable) true.
func (e *NotMergeableError) Is(target error) bool { return target == ErrNotMergeable }
