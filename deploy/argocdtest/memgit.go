package argocdtest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// MemGit is an in-memory GitReader for tests that do not need a real git
// server: each Commit stores a full snapshot of a branch and returns its SHA.
type MemGit struct {
	mu    sync.Mutex
	repos map[string]*memRepo
	seq   int
}

type memRepo struct {
	refs    map[string]string            // "refs/heads/main" -> sha
	commits map[string]map[string][]byte // sha -> path -> content
	head    string                       // default branch
}

// NewMemGit returns an empty MemGit.
func NewMemGit() *MemGit { return &MemGit{repos: map[string]*memRepo{}} }

// Commit applies files (path -> content) and deletes on top of branch's tip
// in repoURL, creating repo and branch as needed, and returns the new SHA. The
// first branch committed to becomes the repo's HEAD.
func (m *MemGit) Commit(repoURL, branch string, files map[string]string, deletes ...string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.repos[repoURL]
	if !ok {
		r = &memRepo{refs: map[string]string{}, commits: map[string]map[string][]byte{}, head: branch}
		m.repos[repoURL] = r
	}
	tree := map[string][]byte{}
	if parent, ok := r.refs["refs/heads/"+branch]; ok {
		for k, v := range r.commits[parent] {
			tree[k] = v
		}
	}
	for p, c := range files {
		tree[cleanDir(p)] = []byte(c)
	}
	for _, p := range deletes {
		delete(tree, cleanDir(p))
	}
	m.seq++
	h := sha1.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", repoURL, branch, m.seq)
	keys := make([]string, 0, len(tree))
	for k := range tree {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%s\x00", k, tree[k])
	}
	sha := hex.EncodeToString(h.Sum(nil))
	r.commits[sha] = tree
	r.refs["refs/heads/"+branch] = sha
	return sha
}

// Tag points tag at sha in repoURL.
func (m *MemGit) Tag(repoURL, tag, sha string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.repos[repoURL]; ok {
		r.refs["refs/tags/"+tag] = sha
	}
}

// Resolve implements GitReader.
func (m *MemGit) Resolve(_ context.Context, repoURL, revision string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.repos[repoURL]
	if !ok {
		return "", fmt.Errorf("argocdtest: repository %s not found in MemGit", redactURL(repoURL))
	}
	rev := strings.TrimSpace(revision)
	if rev == "" || rev == "HEAD" {
		rev = r.head
	}
	if isFullSHA(rev) {
		return strings.ToLower(rev), nil
	}
	for _, cand := range []string{rev, "refs/heads/" + rev, "refs/tags/" + rev} {
		if sha, ok := r.refs[cand]; ok {
			return sha, nil
		}
	}
	if isHex(rev) && len(rev) >= 4 {
		for sha := range r.commits {
			if strings.HasPrefix(sha, strings.ToLower(rev)) {
				return sha, nil
			}
		}
	}
	return "", fmt.Errorf("%w: unable to resolve %q to a commit SHA in %s", ErrRevisionNotFound, rev, redactURL(repoURL))
}

// ReadTree implements GitReader.
func (m *MemGit) ReadTree(_ context.Context, repoURL, sha, dir string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.repos[repoURL]
	if !ok {
		return nil, fmt.Errorf("argocdtest: repository %s not found in MemGit", redactURL(repoURL))
	}
	tree, ok := r.commits[strings.ToLower(sha)]
	if !ok {
		return nil, fmt.Errorf("%w: commit %s not found in %s", ErrRevisionNotFound, sha, redactURL(repoURL))
	}
	dir = cleanDir(dir)
	out := map[string][]byte{}
	for p, c := range tree {
		switch {
		case dir == "":
			out[p] = c
		case strings.HasPrefix(p, dir+"/"):
			out[strings.TrimPrefix(p, dir+"/")] = c
		}
	}
	if dir != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %q at %s in %s", ErrPathNotFound, dir, shortSHA(sha), redactURL(repoURL))
	}
	return out, nil
}
