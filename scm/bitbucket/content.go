package bitbucket

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	bb "github.com/ktrysmt/go-bitbucket"

	"github.com/prflow/prflow/scm"
)

// ReadFile returns path at ref (GET /src/{commit}/{path}). A branch name containing "/" is
// resolved to its commit first, because /src/{ref}/{path} cannot tell where such a name ends.
func (d *Driver) ReadFile(ctx context.Context, repo scm.Repo, ref, path string) ([]byte, error) {
	return scm.FileReader(d.readFile).ReadFile(ctx, Name, repo, ref, path)
}

// readFile reports a missing file as ok=false (see scm.FileAt).
func (d *Driver) readFile(ctx context.Context, repo scm.Repo, op, ref, path string) ([]byte, bool, error) {
	ws, slug, err := splitRepo(repo, scm.CheckRead(ref, path))
	if err != nil {
		return nil, false, d.wrap(op, repo, nil, err)
	}
	commit := ref
	if strings.Contains(ref, "/") {
		b, err := d.Branch(ctx, repo, ref)
		if err != nil {
			return nil, false, err
		}
		commit = b.SHA
	}
	cl, err := d.call(ctx, false)
	if err != nil {
		return nil, false, d.wrap(op, repo, nil, err)
	}
	data, err := cl.c.Repositories.Repository.GetFileContent(&bb.RepositoryFilesOptions{
		Owner: ws, RepoSlug: slug, Ref: url.PathEscape(commit), Path: escapePath(path),
	})
	if err == nil {
		return data, true, nil
	}
	werr := d.wrap(op, repo, cl, err)
	var se *scm.Error
	if errors.As(werr, &se) && se.Status == http.StatusNotFound {
		// A readable commit means it is the file that is missing, not the repo or ref.
		if _, cerr := d.commit(ctx, repo, commit); cerr == nil {
			return nil, false, nil
		}
	}
	return nil, false, werr
}

// escapePath escapes each segment so that '#', '?' and '%' in names survive the library's
// unescaped URL templates.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
