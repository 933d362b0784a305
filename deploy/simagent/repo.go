package simagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/prflow/prflow/deploy/agent"
)

// releaseRepo reads the release repo, read-only: a local repository (bare or not) opened in
// place, or a remote one kept as a bare single-branch clone in a temporary directory and
// fetched on every look.
type releaseRepo struct {
	src    string // path or URL, as given
	local  string // path of the repository to open
	remote bool
	branch string
	tmp    string
}

func openRepo(ctx context.Context, src, branch string) (*releaseRepo, error) {
	r := &releaseRepo{src: src, branch: branch}
	if isURL(src) {
		dir, err := os.MkdirTemp("", "prflow-simagent-")
		if err != nil {
			return nil, err
		}
		r.tmp, r.local, r.remote = dir, dir, true
		opts := &git.CloneOptions{URL: src, Tags: git.NoTags, SingleBranch: true}
		if branch != "" {
			opts.ReferenceName = plumbing.NewBranchReferenceName(branch)
		}
		repo, err := git.PlainCloneContext(ctx, dir, true, opts)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("release repo %s: clone: %w", agent.RedactURL(src), err)
		}
		if r.branch == "" {
			head, err := repo.Head()
			if err != nil {
				_ = os.RemoveAll(dir)
				return nil, fmt.Errorf("release repo %s: no HEAD branch: %w", agent.RedactURL(src), err)
			}
			r.branch = head.Name().Short()
		}
		return r, nil
	}
	r.local = src
	repo, err := r.open()
	if err != nil {
		return nil, err
	}
	if r.branch == "" {
		ref, err := repo.Storer.Reference(plumbing.HEAD)
		if err != nil || ref.Type() != plumbing.SymbolicReference {
			return nil, fmt.Errorf("release repo %s: cannot tell its default branch; give the branch", src)
		}
		r.branch = ref.Target().Short()
	}
	return r, nil
}

func isURL(s string) bool {
	return strings.Contains(s, "://") || (strings.Contains(s, "@") && strings.Contains(s, ":") && !strings.HasPrefix(s, "/"))
}

func (r *releaseRepo) close() {
	if r.tmp != "" {
		_ = os.RemoveAll(r.tmp)
	}
}

// open opens the repository afresh, so commits made by other processes are seen.
func (r *releaseRepo) open() (*git.Repository, error) {
	repo, err := git.PlainOpenWithOptions(r.local, &git.PlainOpenOptions{DetectDotGit: false})
	if err != nil {
		return nil, fmt.Errorf("release repo %s: %w", agent.RedactURL(r.src), err)
	}
	return repo, nil
}

// head returns the branch's current commit, fetching first for a remote repo.
func (r *releaseRepo) head(ctx context.Context) (string, error) {
	repo, err := r.open()
	if err != nil {
		return "", err
	}
	if r.remote {
		spec := config.RefSpec("+refs/heads/" + r.branch + ":refs/heads/" + r.branch)
		err := repo.FetchContext(ctx, &git.FetchOptions{RefSpecs: []config.RefSpec{spec}, Tags: git.NoTags, Force: true})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return "", fmt.Errorf("release repo %s: fetch %s: %w", agent.RedactURL(r.src), r.branch, err)
		}
	}
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(r.branch), true)
	if err != nil {
		return "", fmt.Errorf("release repo %s: branch %s: %w", agent.RedactURL(r.src), r.branch, err)
	}
	return ref.Hash().String(), nil
}

// files returns the content of every file at commit sha whose path keep accepts.
func (r *releaseRepo) files(sha string, keep func(path string) bool) (map[string][]byte, error) {
	repo, err := r.open()
	if err != nil {
		return nil, err
	}
	c, err := repo.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		return nil, fmt.Errorf("release repo %s: commit %s: %w", agent.RedactURL(r.src), sha, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("release repo %s: tree of %s: %w", agent.RedactURL(r.src), sha, err)
	}
	out := map[string][]byte{}
	err = tree.Files().ForEach(func(f *object.File) error {
		if !keep(f.Name) {
			return nil
		}
		rd, err := f.Reader()
		if err != nil {
			return err
		}
		defer rd.Close()
		b, err := io.ReadAll(io.LimitReader(rd, 8<<20))
		if err != nil {
			return err
		}
		out[f.Name] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("release repo %s: read %s: %w", agent.RedactURL(r.src), sha, err)
	}
	return out, nil
}

// resolve turns a branch, tag or commit SHA into a commit of the repo.
func (r *releaseRepo) resolve(rev string) (string, error) {
	repo, err := r.open()
	if err != nil {
		return "", err
	}
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", err
	}
	if _, err := repo.CommitObject(*h); err != nil {
		return "", err
	}
	return h.String(), nil
}
