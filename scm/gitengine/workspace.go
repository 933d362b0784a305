package gitengine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/prflow/prflow/scm"
	scmtransport "github.com/prflow/prflow/scm/transport"
)

// ErrPushRejected means the remote refused a ref update because the ref is no longer what the
// push expected (another writer got there first). It matches scm.ErrConflict.
var ErrPushRejected = fmt.Errorf("push rejected, the remote ref moved: %w", scm.ErrConflict)

// ErrShallow means an operation needed history that the scratch repository has not fetched.
var ErrShallow = errors.New("history not fetched deep enough")

// Workspace is a scratch bare repository on disk bound to one remote ("origin"). Refs are
// fetched under their remote names (refs/heads/main stays refs/heads/main). It is not safe for
// concurrent use. Close removes it.
type Workspace struct {
	e      *Engine
	dir    string
	url    string
	repo   *git.Repository
	remote *git.Remote
	store  *trackingStore // every object write goes through it
	// fetched remembers earlier fetches (ref → depth) so that FetchHistory can restore them
	// after it restarts the scratch repository.
	fetched map[string]int
}

func newWorkspace(e *Engine, dir, url string) (*Workspace, error) {
	repo, err := git.PlainInit(dir, true)
	if err != nil {
		return nil, fmt.Errorf("gitengine: init scratch repository: %w", err)
	}
	remote, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
	if err != nil {
		return nil, fmt.Errorf("gitengine: add remote: %w", e.redact(err))
	}
	store := &trackingStore{EncodedObjectStorer: repo.Storer, written: map[plumbing.Hash]bool{}}
	return &Workspace{e: e, dir: dir, url: url, repo: repo, remote: remote, store: store, fetched: map[string]int{}}, nil
}

// Close removes the scratch directory. It is safe to call more than once.
func (w *Workspace) Close() error {
	if w.dir == "" {
		return nil
	}
	err := os.RemoveAll(w.dir)
	w.dir = ""
	if err != nil {
		return fmt.Errorf("gitengine: remove scratch dir: %w", err)
	}
	return nil
}

// Dir is the scratch repository's path (for diagnostics and tests).
func (w *Workspace) Dir() string { return w.dir }

// Repository exposes the go-git repository for reads the Workspace does not wrap.
func (w *Workspace) Repository() *git.Repository { return w.repo }

// RemoteURL is the remote's URL with credentials removed.
func (w *Workspace) RemoteURL() string { return scmtransport.RedactURL(w.url) }

func (e *Engine) redact(err error) error { return scmtransport.RedactError(err, e.secrets...) }

// wrap turns go-git transport errors into scm errors and removes credentials from the message.
func (w *Workspace) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, transport.ErrRepositoryNotFound):
		err = fmt.Errorf("%w: %w", scm.ErrNotFound, err)
	case errors.Is(err, transport.ErrAuthenticationRequired),
		errors.Is(err, transport.ErrAuthorizationFailed),
		errors.Is(err, transport.ErrInvalidAuthMethod):
		err = fmt.Errorf("%w: %w", scm.ErrUnauthorized, err)
	}
	return w.e.redact(fmt.Errorf("gitengine: %s (%s): %w", op, w.RemoteURL(), err))
}

// ListRemote returns the remote's refs (full name → SHA) without fetching objects. Symbolic refs
// (HEAD) and peeled tags are left out. An empty repository gives an empty map.
func (w *Workspace) ListRemote(ctx context.Context) (map[string]string, error) {
	refs, err := w.remote.ListContext(ctx, &git.ListOptions{
		Auth: w.e.auth, InsecureSkipTLS: w.e.insecureTLS, CABundle: w.e.caBundle,
	})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, w.wrap("list refs", err)
	}
	out := make(map[string]string, len(refs))
	for _, r := range refs {
		if r.Type() != plumbing.HashReference || strings.HasSuffix(r.Name().String(), "^{}") {
			continue
		}
		out[r.Name().String()] = r.Hash().String()
	}
	return out, nil
}

// Fetch fetches refs (full names such as refs/heads/main, or patterns such as
// refs/prflow/pulls/*) with at most depth commits of history each (0 = all history) and stores
// them locally under the same names. A named ref the remote lacks is an error matching
// scm.ErrNotFound; a pattern that matches nothing is not an error.
func (w *Workspace) Fetch(ctx context.Context, depth int, refs ...string) error {
	if len(refs) == 0 {
		return nil
	}
	specs := make([]config.RefSpec, 0, len(refs))
	for _, r := range refs {
		if !strings.HasPrefix(r, "refs/") {
			return fmt.Errorf("gitengine: fetch %q: want a full ref name (refs/...)", r)
		}
		specs = append(specs, config.RefSpec("+"+r+":"+r))
	}
	err := w.fetch(ctx, depth, specs)
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		for _, r := range refs {
			w.fetched[r] = depth
		}
	}
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
		return nil
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		if allPatterns(refs) {
			return nil
		}
		return w.wrap("fetch "+strings.Join(refs, " "), fmt.Errorf("%w: empty repository", scm.ErrNotFound))
	}
	if strings.Contains(err.Error(), "not our ref") {
		// Over stateless HTTP a ref moved or was deleted between the advertisement and the
		// request for its commit: like a ref that is gone, the caller should list again.
		return w.wrap("fetch "+strings.Join(refs, " "), fmt.Errorf("%w: a ref moved during the fetch: %w", scm.ErrNotFound, err))
	}
	var nm git.NoMatchingRefSpecError
	if errors.As(err, &nm) {
		if allPatterns(refs) {
			return nil
		}
		return w.wrap("fetch "+strings.Join(refs, " "), fmt.Errorf("%w: %w", scm.ErrNotFound, err))
	}
	return w.wrap("fetch "+strings.Join(refs, " "), err)
}

func (w *Workspace) fetch(ctx context.Context, depth int, specs []config.RefSpec) error {
	return w.remote.FetchContext(ctx, &git.FetchOptions{
		RefSpecs: specs, Depth: depth, Tags: git.NoTags, Force: true,
		Auth: w.e.auth, InsecureSkipTLS: w.e.insecureTLS, CABundle: w.e.caBundle,
	})
}

func allPatterns(refs []string) bool {
	for _, r := range refs {
		if !strings.Contains(r, "*") {
			return false
		}
	}
	return true
}

// historyDepths is how FetchHistory deepens: most PR branches fork from a recent base commit,
// so a short history usually suffices; 0 fetches everything.
var historyDepths = []int{50, 1000, 0}

// FetchHistory fetches refs with growing depth until enough reports that the needed commits are
// present (it should return ErrShallow, or false, while history is missing). go-git cannot
// deepen a shallow repository in place, so each deeper step restarts the scratch repository and
// fetches again; refs fetched earlier are fetched again too (objects written but not pushed are
// lost, so call it before building commits).
func (w *Workspace) FetchHistory(ctx context.Context, refs []string, enough func() (bool, error)) error {
	for i, d := range historyDepths {
		if i > 0 {
			if err := w.restart(ctx, refs); err != nil {
				return err
			}
		}
		if err := w.Fetch(ctx, d, refs...); err != nil {
			return err
		}
		ok, err := enough()
		if err != nil && !errors.Is(err, ErrShallow) && !errors.Is(err, plumbing.ErrObjectNotFound) {
			return err
		}
		if ok && err == nil {
			return nil
		}
		if d == 0 {
			if err == nil {
				err = ErrShallow
			}
			return err
		}
	}
	return nil
}

// restart replaces the scratch repository by an empty one in the same place and repeats the
// earlier fetches of refs other than skip.
func (w *Workspace) restart(ctx context.Context, skip []string) error {
	if err := os.RemoveAll(w.dir); err != nil {
		return fmt.Errorf("gitengine: reset scratch dir: %w", err)
	}
	nw, err := newWorkspace(w.e, w.dir, w.url)
	if err != nil {
		return err
	}
	w.repo, w.remote, w.store = nw.repo, nw.remote, nw.store
	earlier := w.fetched
	w.fetched = map[string]int{}
	for _, r := range skip {
		delete(earlier, r)
	}
	byDepth := map[int][]string{}
	for r, d := range earlier {
		byDepth[d] = append(byDepth[d], r)
	}
	for d, refs := range byDepth {
		sort.Strings(refs)
		if err := w.Fetch(ctx, d, refs...); err != nil {
			return err
		}
	}
	return nil
}

// Ref returns the SHA a fetched ref points to; scm.ErrNotFound when it was not fetched.
func (w *Workspace) Ref(name string) (string, error) {
	r, err := w.repo.Reference(plumbing.ReferenceName(name), true)
	if err != nil {
		return "", fmt.Errorf("gitengine: ref %s: %w", name, scm.ErrNotFound)
	}
	return r.Hash().String(), nil
}

// Refs lists fetched refs with the given prefix (full name → SHA).
func (w *Workspace) Refs(prefix string) (map[string]string, error) {
	it, err := w.repo.References()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	err = it.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference && strings.HasPrefix(r.Name().String(), prefix) {
			out[r.Name().String()] = r.Hash().String()
		}
		return nil
	})
	return out, err
}

var shaRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Commit returns a fetched commit; an error matching scm.ErrNotFound when it is not present.
func (w *Workspace) Commit(sha string) (*object.Commit, error) {
	if !shaRe.MatchString(sha) {
		return nil, fmt.Errorf("gitengine: %q is not a full commit SHA: %w", sha, scm.ErrNotFound)
	}
	c, err := w.repo.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		return nil, fmt.Errorf("gitengine: commit %s: %w", sha, scm.ErrNotFound)
	}
	return c, nil
}

// HasCommit reports whether sha has been fetched.
func (w *Workspace) HasCommit(sha string) bool {
	_, err := w.Commit(sha)
	return err == nil
}

// FileAt reads path at commit; a missing file is (nil, false, nil). It fits scm.FileAt.
func (w *Workspace) FileAt(_ context.Context, commit, path string) ([]byte, bool, error) {
	c, err := w.Commit(commit)
	if err != nil {
		return nil, false, err
	}
	t, err := c.Tree()
	if err != nil {
		return nil, false, err
	}
	e, err := t.FindEntry(path)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if e.Mode == filemode.Dir || e.Mode == filemode.Submodule {
		return nil, false, nil
	}
	data, err := readBlob(w.repo.Storer, e.Hash)
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// ReadFile reads path at commit; a missing file is an error matching scm.ErrNotFound.
func (w *Workspace) ReadFile(commit, path string) ([]byte, error) {
	if err := ValidatePath(path); err != nil {
		return nil, err
	}
	data, ok, err := w.FileAt(context.Background(), commit, path)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("file %s at %s: %w", path, short(commit), scm.ErrNotFound)
	}
	return data, nil
}

// FS is a read-only view of commit's tree; nothing is checked out.
func (w *Workspace) FS(commit string) (fs.FS, error) {
	c, err := w.Commit(commit)
	if err != nil {
		return nil, err
	}
	t, err := c.Tree()
	if err != nil {
		return nil, err
	}
	return &treeFS{s: w.repo.Storer, root: t, when: c.Committer.When}, nil
}

// ChangedPaths lists the files that differ between commits from and to, sorted. from may be ""
// (everything in to).
func (w *Workspace) ChangedPaths(from, to string) ([]string, error) {
	var a, b plumbing.Hash
	if from != "" {
		c, err := w.Commit(from)
		if err != nil {
			return nil, err
		}
		a = c.TreeHash
	}
	c, err := w.Commit(to)
	if err != nil {
		return nil, err
	}
	b = c.TreeHash
	var out []string
	if err := diffTrees(w.repo.Storer, a, b, "", &out); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

// ApplyChanges writes changes on top of commit's tree (commit "" = empty tree) and returns the
// new tree's SHA and the paths whose content actually changed. Deleting a missing file is a
// no-op; writing a file where a directory is (or below a file) is an error matching ErrBadPath.
func (w *Workspace) ApplyChanges(commit string, changes []scm.FileChange) (string, []string, error) {
	var root plumbing.Hash
	if commit != "" {
		c, err := w.Commit(commit)
		if err != nil {
			return "", nil, err
		}
		root = c.TreeHash
	}
	h, changed, err := applyChanges(w.store, root, changes)
	if err != nil {
		return "", nil, err
	}
	return h.String(), changed, nil
}

// TreeOf returns a commit's tree SHA.
func (w *Workspace) TreeOf(commit string) (string, error) {
	c, err := w.Commit(commit)
	if err != nil {
		return "", err
	}
	return c.TreeHash.String(), nil
}

// CommitSpec describes a commit object to write.
type CommitSpec struct {
	Tree      string
	Parents   []string
	Message   string
	Author    scm.Signature
	Committer scm.Signature // zero: the engine's committer, else the author
	When      time.Time     // zero: now (author and committer)
	// AuthorWhen keeps an original author date (rebases); zero uses When.
	AuthorWhen time.Time
}

// WriteCommit stores a commit object (signed when the engine has a signer) and returns its SHA.
func (w *Workspace) WriteCommit(spec CommitSpec) (string, error) {
	if !shaRe.MatchString(spec.Tree) {
		return "", fmt.Errorf("gitengine: write commit: bad tree %q", spec.Tree)
	}
	if spec.Author.Name == "" || spec.Author.Email == "" {
		return "", fmt.Errorf("gitengine: write commit: author name and email are required")
	}
	when := spec.When
	if when.IsZero() {
		when = w.e.now()
	}
	authorWhen := spec.AuthorWhen
	if authorWhen.IsZero() {
		authorWhen = when
	}
	committer := w.e.committerFor(spec.Author, spec.Committer)
	c := &object.Commit{
		Author:    object.Signature{Name: clean(spec.Author.Name), Email: clean(spec.Author.Email), When: authorWhen},
		Committer: object.Signature{Name: clean(committer.Name), Email: clean(committer.Email), When: when},
		Message:   spec.Message,
		TreeHash:  plumbing.NewHash(spec.Tree),
	}
	for _, p := range spec.Parents {
		if !shaRe.MatchString(p) {
			return "", fmt.Errorf("gitengine: write commit: bad parent %q", p)
		}
		c.ParentHashes = append(c.ParentHashes, plumbing.NewHash(p))
	}
	if w.e.signer != nil {
		enc := &plumbing.MemoryObject{}
		if err := c.EncodeWithoutSignature(enc); err != nil {
			return "", err
		}
		r, err := enc.Reader()
		if err != nil {
			return "", err
		}
		sig, err := w.e.signer.Sign(r)
		if err != nil {
			return "", fmt.Errorf("gitengine: sign commit: %w", err)
		}
		c.PGPSignature = string(sig)
	}
	o := w.store.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		return "", err
	}
	h, err := w.store.SetEncodedObject(o)
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

// clean drops the characters git refuses in identities.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '<', '>', '\n', '\r', 0:
			return -1
		}
		return r
	}, s)
}

// IsAncestor reports whether a is an ancestor of (or equal to) b in fetched history; ErrShallow
// when the walk reached commits whose parents were not fetched.
func (w *Workspace) IsAncestor(a, b string) (bool, error) {
	if a == b {
		return true, nil
	}
	base, err := w.MergeBase(a, b)
	if err != nil {
		return false, err
	}
	return base == a, nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
