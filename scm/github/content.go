package github

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
)

// ReadFile returns path at ref through the contents API; files over GitHub's 1 MB contents
// limit are fetched as blobs.
func (d *Driver) ReadFile(ctx context.Context, repo scm.Repo, ref, path string) ([]byte, error) {
	return scm.FileReader(d.readFile).ReadFile(ctx, Name, repo, ref, path)
}

// readFile reports a missing file as ok=false rather than an error (see scm.FileAt).
func (d *Driver) readFile(ctx context.Context, repo scm.Repo, op, ref, path string) ([]byte, bool, error) {
	owner, name, err := splitRepo(repo, checkRead(ref, path))
	if err != nil {
		return nil, false, d.wrap(op, repo, nil, err)
	}
	file, dir, resp, err := d.client.Repositories.GetContents(ctx, owner, name, path, &gh.RepositoryContentGetOptions{Ref: ref})
	if err != nil {
		werr := d.wrap(op, repo, resp, err)
		if resp != nil && resp.StatusCode == 404 {
			// A 404 means a missing path or ref; tell them apart so a typo in the ref is
			// not mistaken for "file absent".
			if _, _, rerr := d.client.Repositories.GetCommit(ctx, owner, name, ref, &gh.ListOptions{PerPage: 1}); rerr == nil {
				return nil, false, nil
			}
		}
		return nil, false, werr
	}
	if file == nil || dir != nil {
		return nil, false, d.wrap(op, repo, nil, fmt.Errorf("%s is a directory, not a file", path))
	}
	if file.GetType() != "" && file.GetType() != "file" {
		return nil, false, d.wrap(op, repo, nil, fmt.Errorf("%s is a %s, not a file", path, file.GetType()))
	}
	if file.GetEncoding() == "none" || (file.Content == nil && file.GetSize() > 0) {
		blob, resp, err := d.client.Git.GetBlob(ctx, owner, name, file.GetSHA())
		if err != nil {
			return nil, false, d.wrap(op, repo, resp, err)
		}
		data, err := base64.StdEncoding.DecodeString(blob.GetContent())
		if err != nil {
			return nil, false, d.wrap(op, repo, nil, fmt.Errorf("decode blob %s: %w", file.GetSHA(), err))
		}
		return data, true, nil
	}
	content, err := file.GetContent()
	if err != nil {
		return nil, false, d.wrap(op, repo, nil, fmt.Errorf("decode content: %w", err))
	}
	return []byte(content), true, nil
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// checkRead adds GitHub's own rule to scm.CheckRead: its contents API refuses ".." anywhere.
func checkRead(ref, p string) error {
	if err := scm.CheckRead(ref, p); err != nil {
		return err
	}
	if strings.Contains(p, "..") {
		return fmt.Errorf("file path %q contains \"..\", which the GitHub contents API refuses", p)
	}
	return nil
}
