package scm

import "context"

// Ref is a branch and the commit it points to.
type Ref struct {
	Name string
	SHA  string
}

// FileChange is one file written or deleted by a commit.
type FileChange struct {
	Path    string
	Content []byte
	Delete  bool
}

// CommitInput describes an atomic multi-file commit on a branch.
type CommitInput struct {
	Branch string
	// Parent is the commit the branch must point to now (optimistic concurrency). When the
	// branch moved, Commit fails with an error matching ErrConflict and writes nothing.
	// When Branch does not exist yet, it is created from Parent.
	Parent string
	// Replace, when set, is the commit Branch must point at now; the new commit (made on
	// Parent) then replaces it even though that is not a fast-forward. prflow uses it to
	// rebuild its own PR branch on a base branch that moved. A branch elsewhere fails with
	// ErrConflict; drivers that cannot move a branch this way return ErrNotSupported.
	Replace string
	Message string
	Author  Signature
	Changes []FileChange
}

// RevertInput asks for a commit that undoes SHA, made on a new branch Branch created from Base.
type RevertInput struct {
	SHA      string
	Mainline int // parent number for merge commits (1 = the base branch side); 0 means 1
	Base     string
	Branch   string
	Message  string
	Author   Signature
}

// Git is branch and commit plumbing.
type Git interface {
	// Branch returns a branch's head; ErrNotFound when it does not exist.
	Branch(ctx context.Context, repo Repo, name string) (Ref, error)
	// CreateBranch creates name at sha; ErrConflict when it exists at another commit
	// (creating it again at the same commit succeeds, so redelivered jobs are harmless).
	CreateBranch(ctx context.Context, repo Repo, name, sha string) error
	DeleteBranch(ctx context.Context, repo Repo, name string) error
	// Commit writes all changes in one commit and returns its SHA.
	Commit(ctx context.Context, repo Repo, in CommitInput) (string, error)
	// Revert makes a commit that undoes in.SHA on a new branch and returns the new commit's SHA.
	// A revert that does not apply cleanly fails with an error matching ErrConflict whose
	// ConflictError lists the files.
	Revert(ctx context.Context, repo Repo, in RevertInput) (string, error)
	// IsAncestor reports whether descendant contains ancestor: ancestor is descendant itself
	// or one of its ancestors. Both must be full commit SHAs. A commit the forge does not
	// know is an error matching ErrNotFound; unrelated histories are (false, nil). Drivers
	// cache answers per (repo, ancestor, descendant): an answer about two SHAs never changes.
	IsAncestor(ctx context.Context, repo Repo, ancestor, descendant string) (bool, error)
}

// Comparer lists what changed between two commits. Every forge driver implements it; a
// push's path check (the TriggerPaths step) uses it when the webhook did not list every file.
type Comparer interface {
	// ChangedBetween lists the paths changed from base to head, as `git diff base...head`
	// (from their merge base; a rename lists both names). A list the forge cut short comes
	// with an error matching ErrTruncated: deciding "no match" on part of it would miss files.
	ChangedBetween(ctx context.Context, repo Repo, base, head string) ([]string, error)
}
