package scm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Contents reads files.
type Contents interface {
	// ReadFile returns a file's bytes at ref (branch name or commit SHA). A missing file is an
	// error matching ErrNotFound.
	ReadFile(ctx context.Context, repo Repo, ref, path string) ([]byte, error)
}

// FileReader is a forge driver's read of one file at ref, op naming the call in its errors.
// As with FileAt, a missing file is (nil, false, nil), not an error.
type FileReader func(ctx context.Context, repo Repo, op, ref, path string) (data []byte, exists bool, err error)

// ReadFileOp names a file read in errors.
func ReadFileOp(ref, path string) string { return fmt.Sprintf("read file %s@%s", path, ref) }

// ReadFile is Contents.ReadFile over read: a file missing at ref is an *Error from provider
// matching ErrNotFound (status 404) that names the path and ref.
func (read FileReader) ReadFile(ctx context.Context, provider string, repo Repo, ref, path string) ([]byte, error) {
	op := ReadFileOp(ref, path)
	data, ok, err := read(ctx, repo, op, ref, path)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &Error{Provider: provider, Op: op, Repo: repo, Status: http.StatusNotFound,
			Err: fmt.Errorf("%w: no file %s at %s", ErrNotFound, path, ref)}
	}
	return data, nil
}

// At is read as the FileAt of one repository, for PlanRevert.
func (read FileReader) At(repo Repo) FileAt {
	return func(ctx context.Context, commit, path string) ([]byte, bool, error) {
		return read(ctx, repo, ReadFileOp(commit, path), commit, path)
	}
}

// CheckRead rejects a file read's bad path or empty ref before it reaches the forge.
func CheckRead(ref, path string) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if ref == "" {
		return errors.New("empty ref")
	}
	return nil
}
