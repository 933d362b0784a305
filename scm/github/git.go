package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
)

// Branch returns a branch head; ErrNotFound when the branch does not exist. It reads the
// branch endpoint rather than the ref because its answer also names the head commit's tree,
// which Commit then needs no extra call for (see trees).
func (d *Driver) Branch(ctx context.Context, repo scm.Repo, name string) (scm.Ref, error) {
	op := "get branch " + name
	owner, rname, err := splitRepo(repo, scm.CheckBranch(name))
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, nil, err)
	}
	// Through Client.Do (not RepositoriesService.GetBranch, which skips the client's error
	// and rate-limit handling).
	req, err := d.client.NewRequest(http.MethodGet, fmt.Sprintf("repos/%s/%s/branches/%s", owner, rname, url.PathEscape(name)), nil)
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, nil, err)
	}
	var b gh.Branch
	resp, err := d.client.Do(ctx, req, &b)
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, resp, err)
	}
	// GitHub redirects a renamed branch to its new name; only the exact name counts.
	if b.GetName() != name {
		return scm.Ref{}, &scm.Error{Provider: Name, Op: op, Repo: repo, Status: http.StatusNotFound,
			Err: fmt.Errorf("%w: no branch %s (GitHub answered for %q)", scm.ErrNotFound, name, b.GetName())}
	}
	sha := b.GetCommit().GetSHA()
	if sha == "" {
		return scm.Ref{}, d.wrap(op, repo, resp, errors.New("the answer names no head commit"))
	}
	d.trees.put(sha, b.GetCommit().GetCommit().GetTree().GetSHA())
	return scm.Ref{Name: name, SHA: sha}, nil
}

// CreateBranch creates name at sha. It succeeds when the branch already points at sha and
// fails with ErrConflict when it points elsewhere.
func (d *Driver) CreateBranch(ctx context.Context, repo scm.Repo, name, sha string) error {
	op := fmt.Sprintf("create branch %s at %s", name, sha)
	owner, rname, err := splitRepo(repo, scm.CheckBranch(name), scm.CheckSHA(sha))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	// A replayed create answers "already exists", which is handled below.
	_, resp, err := d.client.Git.CreateRef(transport.Guarded(ctx), owner, rname, &gh.Reference{
		Ref: str("refs/heads/" + name), Object: &gh.GitObject{SHA: str(sha)},
	})
	if err == nil {
		d.log.Info("github branch created", "repo", string(repo), "branch", name, "sha", sha)
		return nil
	}
	if !alreadyExists(resp, err) {
		return d.wrap(op, repo, resp, err)
	}
	cur, gerr := d.Branch(ctx, repo, name)
	if gerr != nil {
		return gerr
	}
	return scm.ExistingBranchError(Name, op, repo, http.StatusUnprocessableEntity, name, sha, cur)
}

// DeleteBranch deletes name; ErrNotFound when it does not exist.
func (d *Driver) DeleteBranch(ctx context.Context, repo scm.Repo, name string) error {
	op := "delete branch " + name
	owner, rname, err := splitRepo(repo, scm.CheckBranch(name))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	resp, err := d.client.Git.DeleteRef(ctx, owner, rname, "heads/"+name)
	if err != nil {
		// GitHub answers 422 "Reference does not exist" for a missing branch.
		if resp != nil && resp.StatusCode == http.StatusUnprocessableEntity && strings.Contains(strings.ToLower(err.Error()), "does not exist") {
			return &scm.Error{Provider: Name, Op: op, Repo: repo, Status: resp.StatusCode,
				Err: fmt.Errorf("%w: no branch %s", scm.ErrNotFound, name)}
		}
		return d.wrap(op, repo, resp, err)
	}
	return nil
}

// Commit writes in.Changes as one commit through the Git Data API: the new tree is built on
// Parent's tree, the commit gets Parent as its only parent, and only then does the branch move,
// so a branch that moved since Parent is never overwritten (ErrConflict).
//
// Without Replace the branch is first assumed new: the ref is created pointing at the new
// commit (one call instead of a lookup, a create and an update). When it exists, it is read
// and moved by a non-forced update only if it is still at Parent. With Replace the branch is
// checked to be at Replace first and then force-moved.
func (d *Driver) Commit(ctx context.Context, repo scm.Repo, in scm.CommitInput) (string, error) {
	op := "commit to " + in.Branch
	owner, rname, err := splitRepo(repo, scm.CheckCommitInput(in))
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	replace := in.Replace != ""
	if replace {
		head, err := d.Branch(ctx, repo, in.Branch)
		switch {
		case errors.Is(err, scm.ErrNotFound):
			replace = false // gone: created below like a new branch
		case err != nil:
			return "", err
		case head.SHA != in.Replace:
			return "", scm.BranchMovedError(Name, op, repo, in.Branch, head.SHA, in.Replace, true)
		}
	}
	sha, err := d.createCommit(ctx, repo, op, in)
	if err != nil {
		return "", err
	}
	ref := &gh.Reference{Ref: str("refs/heads/" + in.Branch), Object: &gh.GitObject{SHA: str(sha)}}
	if replace {
		// Moves the branch off its history; it was checked to be at in.Replace above.
		if _, resp, err := d.client.Git.UpdateRef(ctx, owner, rname, ref, true); err != nil {
			return "", d.wrap(op+": force-update ref", repo, resp, err)
		}
		d.log.Info("github branch rebuilt", "repo", string(repo), "branch", in.Branch, "sha", sha, "replaced", in.Replace)
		return sha, nil
	}
	_, resp, err := d.client.Git.CreateRef(transport.Guarded(ctx), owner, rname, ref)
	switch {
	case err == nil:
	case !alreadyExists(resp, err):
		return "", d.wrap(op+": create ref", repo, resp, err)
	default:
		cur, gerr := d.Branch(ctx, repo, in.Branch)
		if gerr != nil {
			return "", gerr
		}
		switch cur.SHA {
		case sha:
			// Our own create, replayed after a lost response.
		case in.Parent:
			// Non-forced: GitHub refuses it if the branch moved after we read it.
			if _, resp, err := d.client.Git.UpdateRef(ctx, owner, rname, ref, false); err != nil {
				if resp != nil && resp.StatusCode == http.StatusUnprocessableEntity {
					return "", &scm.Error{Provider: Name, Op: op + ": update ref", Repo: repo, Status: resp.StatusCode,
						Err: &scm.ConflictError{Msg: fmt.Sprintf("branch %s moved away from %s during the commit", in.Branch, in.Parent)}}
				}
				return "", d.wrap(op+": update ref", repo, resp, err)
			}
		default:
			return "", scm.BranchMovedError(Name, op, repo, in.Branch, cur.SHA, in.Parent, false)
		}
	}
	d.log.Info("github commit created", "repo", string(repo), "branch", in.Branch, "sha", sha, "files", len(in.Changes))
	return sha, nil
}

// createCommit makes the tree and commit objects of in (not reachable from any branch yet).
// Git objects are content-addressed, so replaying their creation is harmless.
func (d *Driver) createCommit(ctx context.Context, repo scm.Repo, op string, in scm.CommitInput) (string, error) {
	owner, rname, err := splitRepo(repo)
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	treeSHA, ok := d.trees.get(in.Parent)
	if !ok {
		parent, resp, err := d.client.Git.GetCommit(ctx, owner, rname, in.Parent)
		if err != nil {
			return "", d.wrap(op+": get parent commit "+in.Parent, repo, resp, err)
		}
		treeSHA = parent.GetTree().GetSHA()
		d.trees.put(in.Parent, treeSHA)
	}
	if len(in.Changes) > 0 {
		entries := make([]*gh.TreeEntry, 0, len(in.Changes))
		for _, c := range in.Changes {
			e := &gh.TreeEntry{Path: str(c.Path), Mode: str("100644"), Type: str("blob")}
			switch {
			case c.Delete: // nil SHA and nil Content: go-github sends "sha": null, i.e. delete
			case utf8.Valid(c.Content):
				e.Content = str(string(c.Content))
			default:
				// Tree entry content must be UTF-8; binary files go through a base64 blob.
				blob, resp, err := d.client.Git.CreateBlob(transport.Guarded(ctx), owner, rname, &gh.Blob{
					Content: str(encodeBase64(c.Content)), Encoding: str("base64"),
				})
				if err != nil {
					return "", d.wrap(op+": create blob for "+c.Path, repo, resp, err)
				}
				e.SHA = blob.SHA
			}
			entries = append(entries, e)
		}
		tree, resp, err := d.client.Git.CreateTree(transport.Guarded(ctx), owner, rname, treeSHA, entries)
		if err != nil {
			return "", d.wrap(op+": create tree", repo, resp, err)
		}
		treeSHA = tree.GetSHA()
	}
	commit := &gh.Commit{
		Message: str(in.Message),
		Tree:    &gh.Tree{SHA: str(treeSHA)},
		Parents: []*gh.Commit{{SHA: str(in.Parent)}},
	}
	if in.Author.Name != "" {
		commit.Author = &gh.CommitAuthor{Name: str(in.Author.Name), Email: str(in.Author.Email)}
	}
	created, resp, err := d.client.Git.CreateCommit(transport.Guarded(ctx), owner, rname, commit, nil)
	if err != nil {
		return "", d.wrap(op+": create commit", repo, resp, err)
	}
	d.trees.put(created.GetSHA(), treeSHA)
	return created.GetSHA(), nil
}

// Revert undoes in.SHA file by file (scm.PlanRevert over the contents API) and commits the
// result on the new branch in.Branch, created from in.Base. When in.Branch already exists
// and already undoes in.SHA (a redelivered job), its head is returned.
func (d *Driver) Revert(ctx context.Context, repo scm.Repo, in scm.RevertInput) (string, error) {
	op := fmt.Sprintf("revert %s onto %s", in.SHA, in.Branch)
	owner, rname, err := splitRepo(repo, in.Check(), scm.CheckBranch(in.Branch))
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	mainline := max(in.Mainline, 1)
	commit, resp, err := d.client.Repositories.GetCommit(ctx, owner, rname, in.SHA, &gh.ListOptions{PerPage: 100})
	if err != nil {
		return "", d.wrap(op+": get commit", repo, resp, err)
	}
	if len(commit.Parents) == 0 {
		return "", d.wrap(op, repo, nil, fmt.Errorf("%w: %s is a root commit", scm.ErrNotSupported, in.SHA))
	}
	if mainline > len(commit.Parents) {
		return "", d.wrap(op, repo, nil, fmt.Errorf("mainline %d but %s has %d parent(s)", mainline, in.SHA, len(commit.Parents)))
	}
	parent := commit.Parents[mainline-1].GetSHA()
	sha := commit.GetSHA()
	var files []*gh.CommitFile
	if mainline == 1 {
		files = commit.Files
		for resp.NextPage != 0 {
			var more *gh.RepositoryCommit
			more, resp, err = d.client.Repositories.GetCommit(ctx, owner, rname, sha, &gh.ListOptions{PerPage: 100, Page: resp.NextPage})
			if err != nil {
				return "", d.wrap(op+": list commit files", repo, resp, err)
			}
			files = append(files, more.Files...)
		}
	} else {
		// The commit API diffs against the first parent; compare against the chosen one.
		cmp, resp, err := d.client.Repositories.CompareCommits(ctx, owner, rname, parent, sha, &gh.ListOptions{PerPage: 100})
		if err != nil {
			return "", d.wrap(op+": compare with parent "+parent, repo, resp, err)
		}
		files = cmp.Files
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.GetFilename())
		if f.GetPreviousFilename() != "" {
			paths = append(paths, f.GetPreviousFilename())
		}
	}
	rv := scm.FileRevert{Commit: sha, Parent: parent, Message: commit.GetCommit().GetMessage(), Paths: paths}
	return scm.RevertFiles(ctx, d, repo, scm.FileReader(d.readFile).At(repo), in, rv, func(err error) error {
		return d.wrapPlain(op, repo, err)
	})
}

// wrapPlain wraps an error that did not come from go-github (already carrying its sentinel).
func (d *Driver) wrapPlain(op string, repo scm.Repo, err error) error {
	return scm.PlainError(Name, op, repo, err, d.secrets...)
}

func alreadyExists(resp *gh.Response, err error) bool {
	return resp != nil && resp.StatusCode == http.StatusUnprocessableEntity &&
		strings.Contains(strings.ToLower(err.Error()), "already exists")
}

// maxCompareFiles is how many files GitHub's compare API lists at most (it says nothing when
// it cuts the list; per_page pages the commits, not the files).
const maxCompareFiles = 300

// ChangedBetween lists the paths changed from base to head (GitHub's compare base...head);
// a rename lists both names. A comparison of maxCompareFiles files or more comes with an
// error matching scm.ErrTruncated.
func (d *Driver) ChangedBetween(ctx context.Context, repo scm.Repo, base, head string) ([]string, error) {
	op := fmt.Sprintf("compare %.12s...%.12s", base, head)
	owner, name, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	cmp, resp, err := d.client.Repositories.CompareCommits(ctx, owner, name, base, head, &gh.ListOptions{PerPage: 1})
	if err != nil {
		return nil, d.wrap(op, repo, resp, err)
	}
	var out []string
	for _, f := range cmp.Files {
		if p := f.GetPreviousFilename(); p != "" {
			out = append(out, p)
		}
		out = append(out, f.GetFilename())
	}
	if len(cmp.Files) >= maxCompareFiles {
		return out, d.wrapPlain(op, repo, fmt.Errorf("GitHub lists at most %d files of a comparison: %w", maxCompareFiles, scm.ErrTruncated))
	}
	return out, nil
}

var _ scm.Comparer = (*Driver)(nil)
