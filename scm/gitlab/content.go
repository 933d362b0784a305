package gitlab

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"sync"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/prflow/prflow/scm"
)

// fileMeta is what a commit needs to know about a file at its parent.
type fileMeta struct {
	exists       bool
	lastCommitID string
	data         []byte
}

// ReadFile returns path at ref (GET /repository/files/{path}?ref=).
func (d *Driver) ReadFile(ctx context.Context, repo scm.Repo, ref, path string) ([]byte, error) {
	return scm.FileReader(d.readFile).ReadFile(ctx, Name, repo, ref, path)
}

// readFile is stat as an scm.FileReader.
func (d *Driver) readFile(ctx context.Context, repo scm.Repo, op, ref, path string) ([]byte, bool, error) {
	m, err := d.stat(ctx, repo, op, ref, path)
	return m.data, m.exists, err
}

// stat reads a file with its last_commit_id; a missing file is exists=false, not an error.
func (d *Driver) stat(ctx context.Context, repo scm.Repo, op, ref, path string) (fileMeta, error) {
	pid, err := projectID(repo, scm.CheckRead(ref, path))
	if err != nil {
		return fileMeta{}, d.wrap(op, repo, nil, err)
	}
	f, resp, err := d.client.RepositoryFiles.GetFile(pid, path, &gl.GetFileOptions{Ref: ptr(ref)}, gl.WithContext(ctx))
	if err != nil {
		werr := d.wrap(op, repo, resp, err)
		if errors.Is(err, gl.ErrNotFound) {
			// client-go drops 404 bodies, so "404 File Not Found" and "404 Project Not
			// Found" look alike: a readable ref means the file is what is missing.
			if _, _, cerr := d.client.Commits.GetCommit(pid, ref, nil, gl.WithContext(ctx)); cerr == nil {
				d.metas.put(repo, ref, path, fileMeta{})
				return fileMeta{}, nil
			}
		}
		return fileMeta{}, werr
	}
	m := fileMeta{exists: true, lastCommitID: f.LastCommitID}
	d.metas.put(repo, ref, path, m)
	switch f.Encoding {
	case "base64":
		if m.data, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
			return fileMeta{}, d.wrap(op, repo, nil, fmt.Errorf("decode content: %w", err))
		}
	case "text", "":
		m.data = []byte(f.Content)
	default:
		return fileMeta{}, d.wrap(op, repo, nil, fmt.Errorf("unknown content encoding %q", f.Encoding))
	}
	return m, nil
}

// metaAt is stat for a commit's parent: a file read at that commit earlier (the step reads
// every file it edits at the commit it builds on) needs no second request, because what a
// commit holds never changes.
func (d *Driver) metaAt(ctx context.Context, repo scm.Repo, op, commit, path string) (fileMeta, error) {
	if m, ok := d.metas.get(repo, commit, path); ok {
		return m, nil
	}
	return d.stat(ctx, repo, op, commit, path)
}

// metaCache remembers, per repo, commit SHA and path, whether the file exists and its
// last_commit_id (not its content). Only full SHAs are cached: branch names move. Bounded: when
// full it starts over, which only costs a request.
type metaCache struct {
	mu sync.Mutex
	m  map[string]fileMeta
}

const metaCacheSize = 4096

func metaKey(repo scm.Repo, ref, path string) (string, bool) {
	if !fullSHA.MatchString(ref) {
		return "", false
	}
	return string(repo) + "\x00" + ref + "\x00" + path, true
}

var fullSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

func (c *metaCache) put(repo scm.Repo, ref, path string, m fileMeta) {
	k, ok := metaKey(repo, ref, path)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= metaCacheSize {
		c.m = make(map[string]fileMeta)
	}
	c.m[k] = fileMeta{exists: m.exists, lastCommitID: m.lastCommitID}
}

func (c *metaCache) get(repo scm.Repo, ref, path string) (fileMeta, bool) {
	k, ok := metaKey(repo, ref, path)
	if !ok {
		return fileMeta{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[k]
	return m, ok
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
