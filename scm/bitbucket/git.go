package bitbucket

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	bb "github.com/ktrysmt/go-bitbucket"

	"github.com/prflow/prflow/scm"
)

// Branch returns a branch head; ErrNotFound when the branch does not exist.
func (d *Driver) Branch(ctx context.Context, repo scm.Repo, name string) (scm.Ref, error) {
	op := "get branch " + name
	ws, slug, cl, err := d.callRepo(ctx, repo, false, checkBranch(name))
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, nil, err)
	}
	b, err := cl.c.Repositories.Repository.GetBranch(&bb.RepositoryBranchOptions{Owner: ws, RepoSlug: slug, BranchName: escapePath(name)})
	if err != nil {
		return scm.Ref{}, d.wrap(op, repo, cl, err)
	}
	hash, _ := b.Target["hash"].(string)
	if hash == "" {
		return scm.Ref{}, d.wrap(op, repo, nil, fmt.Errorf("branch %s has no target hash in the response", name))
	}
	return scm.Ref{Name: name, SHA: hash}, nil
}

// CreateBranch creates name at sha; it succeeds when the branch already points at sha and
// fails with ErrConflict when it points elsewhere.
func (d *Driver) CreateBranch(ctx context.Context, repo scm.Repo, name, sha string) error {
	op := fmt.Sprintf("create branch %s at %s", name, sha)
	ws, slug, cl, err := d.callRepo(ctx, repo, true, checkBranch(name), scm.CheckSHA(sha))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, err = cl.c.Repositories.Repository.CreateBranch(&bb.RepositoryBranchCreationOptions{
		Owner: ws, RepoSlug: slug, Name: name, Target: bb.RepositoryBranchTarget{Hash: sha},
	})
	if err == nil {
		d.log.Info("bitbucket branch created", "repo", string(repo), "branch", name, "sha", sha)
		return nil
	}
	werr := d.wrap(op, repo, cl, err)
	var se *scm.Error
	if !errors.As(werr, &se) || (se.Status != http.StatusBadRequest && se.Status != http.StatusConflict) {
		return werr
	}
	// Bitbucket answers 400 when the branch exists; compare where it points.
	cur, gerr := d.Branch(ctx, repo, name)
	if gerr != nil {
		return werr
	}
	return scm.ExistingBranchError(Name, op, repo, se.Status, name, sha, cur)
}

// DeleteBranch deletes name; ErrNotFound when it does not exist.
func (d *Driver) DeleteBranch(ctx context.Context, repo scm.Repo, name string) error {
	op := "delete branch " + name
	ws, slug, cl, err := d.callRepo(ctx, repo, false, checkBranch(name))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	err = cl.c.Repositories.Repository.DeleteBranch(&bb.RepositoryBranchDeleteOptions{Owner: ws, RepoSlug: slug, RefName: escapePath(name)})
	return d.wrap(op, repo, cl, err)
}

// apiCommit is the part of GET /commit/{sha} the driver uses.
type apiCommit struct {
	Hash    string `json:"hash"`
	Message string `json:"message"`
	Parents []struct {
		Hash string `json:"hash"`
	} `json:"parents"`
}

func (d *Driver) commit(ctx context.Context, repo scm.Repo, sha string) (*apiCommit, error) {
	op := "get commit " + sha
	ws, slug, cl, err := d.callRepo(ctx, repo, false)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	v, err := cl.c.Repositories.Commits.GetCommit(&bb.CommitsOptions{Owner: ws, RepoSlug: slug, Revision: url.PathEscape(sha)})
	if err != nil {
		return nil, d.wrap(op, repo, cl, err)
	}
	var c apiCommit
	if err := decode(v, &c); err != nil || c.Hash == "" {
		return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected commit response: %v", err))
	}
	return &c, nil
}

// reservedFields are /src form fields; a root file with such a name is sent as "/name".
var reservedFields = map[string]bool{"message": true, "author": true, "parents": true, "files": true, "branch": true}

// Commit writes in.Changes in one POST /src. The request carries parents=Parent, so Bitbucket
// itself refuses (409) when the branch head is not Parent, and creates a missing branch
// directly on Parent. The library's WriteFileContent cannot send "parents", so this request is
// made directly with the driver's HTTP client. An empty change set is ErrNotSupported.
func (d *Driver) Commit(ctx context.Context, repo scm.Repo, in scm.CommitInput) (string, error) {
	if in.Replace != "" {
		return "", &scm.Error{Provider: Name, Op: "commit to " + in.Branch, Repo: repo,
			Err: fmt.Errorf("%w: Bitbucket's /src cannot move a branch off its history", scm.ErrNotSupported)}
	}
	op := "commit to " + in.Branch
	ws, slug, err := splitRepo(repo, checkCommitInput(in))
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	if len(in.Changes) == 0 {
		return "", d.wrap(op, repo, nil, fmt.Errorf("%w: Bitbucket's /src API cannot create a commit without file changes", scm.ErrNotSupported))
	}
	// No lookup first: the parents field guards the write (an existing branch must be at
	// in.Parent, else 409), and a missing branch is created at in.Parent.
	form := url.Values{}
	for _, c := range in.Changes {
		name := c.Path
		if reservedFields[name] {
			name = "/" + name
		}
		if c.Delete {
			form.Add("files", name)
		} else {
			form.Set(name, string(c.Content))
		}
	}
	form.Set("message", in.Message)
	form.Set("branch", in.Branch)
	form.Set("parents", in.Parent)
	if in.Author.Name != "" {
		form.Set("author", fmt.Sprintf("%s <%s>", in.Author.Name, in.Author.Email))
	}
	resp, _, err := d.send(ctx, http.MethodPost, "/repositories/"+url.PathEscape(ws)+"/"+url.PathEscape(slug)+"/src",
		nil, strings.NewReader(form.Encode()), "application/x-www-form-urlencoded")
	if err != nil {
		var st *statusError
		if errors.As(err, &st) && st.code == http.StatusConflict {
			return "", &scm.Error{Provider: Name, Op: op, Repo: repo, Status: st.code,
				Err: &scm.ConflictError{Msg: fmt.Sprintf("branch %s exists and is not at the expected parent %s: %s", in.Branch, in.Parent, d.bodyMessage(st.code, st.body))}}
		}
		return "", d.wrap(op, repo, nil, err)
	}
	sha := ""
	if loc := resp.Header.Get("Location"); loc != "" {
		sha = path.Base(strings.TrimSuffix(loc, "/"))
	}
	if len(sha) != 40 {
		// No usable Location: the new head is the commit, as long as its parent is ours.
		h, err := d.Branch(ctx, repo, in.Branch)
		if err != nil {
			return "", err
		}
		c, err := d.commit(ctx, repo, h.SHA)
		if err != nil {
			return "", err
		}
		if len(c.Parents) == 0 || c.Parents[0].Hash != in.Parent {
			return "", &scm.Error{Provider: Name, Op: op, Repo: repo,
				Err: fmt.Errorf("commit written but branch %s moved on to %s before its hash could be read", in.Branch, h.SHA)}
		}
		sha = h.SHA
	}
	d.log.Info("bitbucket commit created", "repo", string(repo), "branch", in.Branch, "sha", sha, "files", len(in.Changes))
	return sha, nil
}

// Revert undoes in.SHA file by file (scm.PlanRevert over /src reads; Bitbucket has no revert
// API) and commits the result on the new branch in.Branch created from in.Base. When
// in.Branch already exists and already undoes in.SHA (a redelivered job), its head is returned.
func (d *Driver) Revert(ctx context.Context, repo scm.Repo, in scm.RevertInput) (string, error) {
	op := fmt.Sprintf("revert %s onto %s", in.SHA, in.Branch)
	ws, slug, err := splitRepo(repo, in.Check(), checkBranch(in.Branch))
	if err != nil {
		return "", d.wrap(op, repo, nil, err)
	}
	c, err := d.commit(ctx, repo, in.SHA)
	if err != nil {
		return "", err
	}
	mainline := max(in.Mainline, 1)
	switch {
	case len(c.Parents) == 0:
		return "", d.wrap(op, repo, nil, fmt.Errorf("%w: %s is a root commit", scm.ErrNotSupported, in.SHA))
	case mainline > len(c.Parents):
		return "", d.wrap(op, repo, nil, fmt.Errorf("mainline %d but %s has %d parent(s)", mainline, in.SHA, len(c.Parents)))
	}
	parent := c.Parents[mainline-1].Hash
	if len(parent) < 40 {
		pc, err := d.commit(ctx, repo, parent)
		if err != nil {
			return "", err
		}
		parent = pc.Hash
	}
	spec := c.Hash
	if mainline > 1 {
		spec = c.Hash + ".." + parent
	}
	paths, err := d.diffPaths(ctx, repo, ws, slug, spec, twoDot)
	if err != nil {
		return "", err
	}
	rv := scm.FileRevert{Commit: c.Hash, Parent: parent, Message: c.Message, Paths: paths}
	return scm.RevertFiles(ctx, d, repo, scm.FileReader(d.readFile).At(repo), in, rv, func(err error) error {
		return d.plainError(op, repo, err)
	})
}

// diffMode selects how Bitbucket computes a two-commit diffstat ("new..old").
type diffMode int

const (
	twoDot  diffMode = iota // old → new exactly (merge=false)
	topic                   // merge base → new: what a PR changes (topic=true)
	preview                 // old → the merge of new into old, with "merge conflict" entries
)

// diffstat reads every page of GET /diffstat/{spec}.
func (d *Driver) diffstat(ctx context.Context, repo scm.Repo, ws, slug, spec string, mode diffMode) ([]*bb.DiffStat, error) {
	op := "diffstat " + spec
	var out []*bb.DiffStat
	for page := 1; page <= 1000; page++ {
		cl, err := d.call(ctx, false)
		if err != nil {
			return nil, d.wrap(op, repo, nil, err)
		}
		res, err := cl.c.Repositories.Diff.GetDiffStat(&bb.DiffStatOptions{
			Owner: ws, RepoSlug: slug, Spec: spec, Renames: true, Merge: mode != twoDot, Topic: mode == topic,
			PageNum: page, Pagelen: 500,
		})
		if err != nil {
			return nil, d.wrap(op, repo, cl, err)
		}
		out = append(out, res.DiffStats...)
		if res.Next == "" || len(res.DiffStats) == 0 {
			break
		}
	}
	return out, nil
}

// diffPaths lists the paths of a diffstat, old and new names of renames included.
func (d *Driver) diffPaths(ctx context.Context, repo scm.Repo, ws, slug, spec string, mode diffMode) ([]string, error) {
	stats, err := d.diffstat(ctx, repo, ws, slug, spec, mode)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, ds := range stats {
		for _, p := range statPaths(ds) {
			if !containsString(paths, p) {
				paths = append(paths, p)
			}
		}
	}
	return paths, nil
}

func statPaths(ds *bb.DiffStat) []string {
	var out []string
	for _, side := range []map[string]any{ds.Old, ds.New} {
		if p, _ := side["path"].(string); p != "" && !containsString(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkBranch adds Bitbucket's rule to scm.CheckBranch: '#' and '%' break its /src form.
func checkBranch(name string) error {
	if err := scm.CheckBranch(name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "#%") {
		return fmt.Errorf("invalid branch name %q", name)
	}
	return nil
}

func checkCommitInput(in scm.CommitInput) error {
	if err := checkBranch(in.Branch); err != nil {
		return err
	}
	return scm.CheckCommitInput(in)
}

// ChangedBetween lists the paths changed from base to head: the diffstat of head against its
// merge base with base ("head..base", topic diff); a rename lists both names.
func (d *Driver) ChangedBetween(ctx context.Context, repo scm.Repo, base, head string) ([]string, error) {
	ws, slug, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(fmt.Sprintf("compare %.12s...%.12s", base, head), repo, nil, err)
	}
	return d.diffPaths(ctx, repo, ws, slug, head+".."+base, topic)
}

var _ scm.Comparer = (*Driver)(nil)
