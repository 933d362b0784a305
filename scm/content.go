package scm

import "context"

// Contents reads files.
type Contents interface {
	// ReadFile returns a file's bytes at ref (branch name or commit SHA). A missing file is an
	// error matching ErrNotFound.
	ReadFile(ctx context.Context, repo Repo, ref, path string) ([]byte, error)
}
