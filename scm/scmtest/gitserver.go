// Package scmtest is prflow's SCM test kit: a real git smart-HTTP server (git-http-backend behind
// net/http/cgi) and fake GitHub, GitLab and Bitbucket Cloud REST APIs that keep pull requests in
// memory and do real git work (merges, squashes, rebases, reverts) in the served bare repos, so
// go-github, GitLab's client-go and go-bitbucket run against them unmodified.
package scmtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// RefUpdate reports one ref change in a served repo, made through an API or by a git push.
type RefUpdate struct {
	Owner, Name string
	Ref         string // full ref name, e.g. refs/heads/main
	Before      string // "" when the ref was created
	After       string // "" when the ref was deleted
	User        string // token owner that made the change ("" for helpers)
	Push        bool   // true when it came from git push over smart HTTP
}

// GitServer serves bare repositories under a root directory over git's smart-HTTP protocol with
// token basic auth (any username, password = a token). It is an http.Handler; NewGitServer also
// starts a listener for tests.
type GitServer struct {
	root    string
	backend string
	log     *slog.Logger
	tokens  *tokenStore
	mw      *middleware
	handler http.Handler
	branch  string

	ctx    context.Context // bounds helper operations; cancelled by Close
	cancel context.CancelFunc

	mu        sync.Mutex
	repos     map[string]*bareRepo
	listeners map[int]func(RefUpdate)
	nextID    int
	baseURL   mountURL
	srv       *httptest.Server
}

// NewGitServer starts a GitServer on a loopback listener with repos under t.TempDir(); it is
// closed when the test ends.
func NewGitServer(t testing.TB, opts ...Option) *GitServer {
	t.Helper()
	g, err := OpenGitServer(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("scmtest.NewGitServer: %v", err)
	}
	g.srv = httptest.NewServer(g)
	g.SetBaseURL(g.srv.URL)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// OpenGitServer serves the bare repos under root (existing ones included) without starting a
// listener: mount it as an http.Handler and call SetBaseURL so CloneURL knows where it lives.
// `prflow dev` uses this.
func OpenGitServer(root string, opts ...Option) (*GitServer, error) {
	s := newSettings(opts)
	if root == "" {
		return nil, fmt.Errorf("%w: git server root directory is empty", ErrInvalid)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("scmtest: git server root %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("scmtest: git server root %q: %w", root, err)
	}
	if _, err := os.Stat(s.backend); err != nil {
		return nil, fmt.Errorf("scmtest: git backend %q: %w (install the git package)", s.backend, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &GitServer{
		root: abs, backend: s.backend, log: s.logger, tokens: newTokenStore(), mw: &middleware{},
		branch: s.defaultBranch, ctx: ctx, cancel: cancel,
		repos: map[string]*bareRepo{}, listeners: map[int]func(RefUpdate){},
	}
	for _, tk := range s.tokens {
		g.tokens.add(tk.token, tk.user, tk.repos)
	}
	g.handler = g.mw.wrap(http.HandlerFunc(g.serveGit))
	return g, nil
}

// ServeHTTP serves git smart-HTTP requests: /<owner>/<name>.git/...
func (g *GitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// SetBaseURL records where the server is reachable, for CloneURL.
func (g *GitServer) SetBaseURL(u string) { g.baseURL.set(u) }

// URL is the base URL (set by NewGitServer or SetBaseURL).
func (g *GitServer) URL() string { return g.baseURL.get() }

// mountURL is where a fake is reachable: set when it listens or is mounted, read by every
// request that builds a link.
type mountURL struct {
	mu  sync.Mutex
	url string
}

func (m *mountURL) set(u string) {
	m.mu.Lock()
	m.url = strings.TrimRight(u, "/")
	m.mu.Unlock()
}

func (m *mountURL) get() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.url
}

// Root is the directory holding the bare repos.
func (g *GitServer) Root() string { return g.root }

// CloneURL is the smart-HTTP URL of a repo: <base>/<owner>/<name>.git.
func (g *GitServer) CloneURL(owner, name string) string {
	return g.URL() + "/" + owner + "/" + name + ".git"
}

// Dir is the bare repo's directory on disk.
func (g *GitServer) Dir(owner, name string) string {
	return filepath.Join(g.root, filepath.FromSlash(owner), name+".git")
}

// AddToken accepts token (as the basic-auth password) for user; repos limits what it can see.
func (g *GitServer) AddToken(token, user string, repos ...string) { g.tokens.add(token, user, repos) }

// InjectFault makes matching git HTTP requests misbehave (see Fault).
func (g *GitServer) InjectFault(f Fault) error { return g.mw.inject(f, nil) }

// ClearFaults removes all injected faults.
func (g *GitServer) ClearFaults() { g.mw.clear() }

// Calls returns the git HTTP requests received so far.
func (g *GitServer) Calls() []Call { return g.mw.snapshot() }

// ResetCalls forgets the recorded calls.
func (g *GitServer) ResetCalls() { g.mw.reset() }

// Close stops the listener (if NewGitServer started one) and cancels running helper operations.
func (g *GitServer) Close() error {
	g.cancel()
	closeServer(&g.mu, &g.srv)
	return nil
}

// closeServer takes *srv under mu, so that only the first Close closes it, and closes it.
func closeServer(mu *sync.Mutex, srv **httptest.Server) {
	mu.Lock()
	s := *srv
	*srv = nil
	mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// OnRefUpdate registers fn to be called after every ref change (API or push); the returned
// function unregisters it. fn runs synchronously on the updating goroutine and must not block.
func (g *GitServer) OnRefUpdate(fn func(RefUpdate)) (cancel func()) {
	g.mu.Lock()
	id := g.nextID
	g.nextID++
	g.listeners[id] = fn
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.listeners, id)
		g.mu.Unlock()
	}
}

func (g *GitServer) notify(u RefUpdate) {
	g.mu.Lock()
	ids := make([]int, 0, len(g.listeners))
	for id := range g.listeners {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	fns := make([]func(RefUpdate), 0, len(ids))
	for _, id := range ids {
		fns = append(fns, g.listeners[id])
	}
	g.mu.Unlock()
	for _, fn := range fns {
		fn(u)
	}
}

// validRepoName checks owner (may be nested: group/sub) and name.
func validRepoName(owner, name string) error {
	check := func(seg string) bool {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
			return false
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return false
			}
		}
		return true
	}
	for _, seg := range strings.Split(owner, "/") {
		if !check(seg) {
			return fmt.Errorf("%w: repo owner %q", ErrInvalid, owner)
		}
	}
	if !check(name) || strings.HasSuffix(name, ".git") {
		return fmt.Errorf("%w: repo name %q", ErrInvalid, name)
	}
	return nil
}

// open returns the bare repo, picking up repos that exist on disk but were not created here.
func (g *GitServer) open(owner, name string) (*bareRepo, error) {
	if err := validRepoName(owner, name); err != nil {
		return nil, err
	}
	key := owner + "/" + name
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.repos[key]; ok {
		return r, nil
	}
	dir := g.Dir(owner, name)
	if st, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%w: repository %s", ErrNotFound, key)
	}
	r := &bareRepo{dir: dir}
	g.repos[key] = r
	return r, nil
}

// helperSig is the identity of commits made by the test helpers.
var helperSig = Signature{Name: "scmtest", Email: "scmtest@example.com"}

// CreateRepo creates an empty-history bare repo with one initial commit holding files on the
// default branch (main unless WithDefaultBranch) and returns that commit's SHA.
func (g *GitServer) CreateRepo(owner, name string, files map[string]string) (string, error) {
	if err := validRepoName(owner, name); err != nil {
		return "", err
	}
	ctx := g.ctx
	key := owner + "/" + name
	g.mu.Lock()
	_, known := g.repos[key]
	dir := g.Dir(owner, name)
	_, statErr := os.Stat(dir)
	if known || statErr == nil {
		g.mu.Unlock()
		return "", fmt.Errorf("%w: repository %s", ErrExists, key)
	}
	r := &bareRepo{dir: dir}
	g.repos[key] = r
	g.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := initBare(ctx, dir, g.branch); err != nil {
		g.mu.Lock()
		delete(g.repos, key)
		g.mu.Unlock()
		return "", fmt.Errorf("scmtest: create repo %s: %w", key, err)
	}
	tree, err := g.treeFromFiles(ctx, r, "", files, nil)
	if err != nil {
		return "", fmt.Errorf("scmtest: create repo %s: %w", key, err)
	}
	now := helperSig
	now.When = time.Now()
	sha, err := r.commitTree(ctx, tree, nil, "Initial commit", now, now)
	if err != nil {
		return "", fmt.Errorf("scmtest: create repo %s: %w", key, err)
	}
	if err := r.updateRef(ctx, "refs/heads/"+g.branch, sha, ""); err != nil {
		return "", fmt.Errorf("scmtest: create repo %s: %w", key, err)
	}
	return sha, nil
}

func (g *GitServer) treeFromFiles(ctx context.Context, r *bareRepo, base string, files map[string]string, deletes []string) (string, error) {
	changes := make([]treeChange, 0, len(files)+len(deletes))
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		sha, err := r.writeBlob(ctx, []byte(files[p]))
		if err != nil {
			return "", err
		}
		changes = append(changes, treeChange{Path: p, SHA: sha})
	}
	for _, p := range deletes {
		changes = append(changes, treeChange{Path: p, Delete: true})
	}
	return r.buildTree(ctx, base, changes)
}

// DefaultBranch returns the branch HEAD points to.
func (g *GitServer) DefaultBranch(owner, name string) (string, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return "", err
	}
	out, err := r.git(g.ctx, "symbolic-ref", "--short", "HEAD")
	if err != nil {
		return "", fmt.Errorf("scmtest: default branch of %s/%s: %w", owner, name, err)
	}
	return out, nil
}

// Commit commits files (path → content) and deletes on top of branch, creating the branch from
// the default branch when it does not exist, and returns the new commit SHA. The branch update is
// guarded: if the branch moved meanwhile the result is ErrRefConflict and nothing is lost.
func (g *GitServer) Commit(owner, name, branch string, files map[string]string, deletes []string, msg string) (string, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return "", err
	}
	if err := validBranch(branch); err != nil {
		return "", err
	}
	ctx := g.ctx
	old, err := r.branchHead(ctx, branch)
	parent := old
	if errors.Is(err, ErrNotFound) {
		def, derr := g.DefaultBranch(owner, name)
		if derr != nil {
			return "", derr
		}
		if parent, err = r.branchHead(ctx, def); err != nil {
			return "", fmt.Errorf("scmtest: commit to %s/%s %s: default branch: %w", owner, name, branch, err)
		}
	} else if err != nil {
		return "", err
	}
	tree, err := g.treeFromFiles(ctx, r, parent, files, deletes)
	if err != nil {
		return "", fmt.Errorf("scmtest: commit to %s/%s %s: %w", owner, name, branch, err)
	}
	sig := helperSig
	sig.When = time.Now()
	sha, err := r.commitTree(ctx, tree, []string{parent}, msg, sig, sig)
	if err != nil {
		return "", err
	}
	err = g.moveRef(ctx, owner, name, "refs/heads/"+branch, sha, "", func(cur string) error {
		if cur != old {
			return fmt.Errorf("%w: branch %s moved to %s", ErrRefConflict, branch, cur)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("scmtest: commit to %s/%s %s: %w", owner, name, branch, err)
	}
	return sha, nil
}

// moveRef sets ref to newSHA ("" deletes) under the repo's lock after check accepts the current
// value ("" when the ref does not exist); the update itself is a compare-and-swap on that value.
func (g *GitServer) moveRef(ctx context.Context, owner, name, ref, newSHA, user string, check func(cur string) error) error {
	r, err := g.open(owner, name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	cur, err := r.refValue(ctx, ref)
	if err == nil && check != nil {
		err = check(cur)
	}
	if err == nil {
		if newSHA == "" && cur == "" {
			err = fmt.Errorf("%w: %s", ErrNotFound, ref)
		} else {
			err = r.updateRef(ctx, ref, newSHA, cur)
		}
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if cur != newSHA {
		g.notify(RefUpdate{Owner: owner, Name: name, Ref: ref, Before: cur, After: newSHA, User: user})
	}
	return nil
}

// refValue returns the SHA a full ref points to, "" when it does not exist.
func (r *bareRepo) refValue(ctx context.Context, ref string) (string, error) {
	out, code, err := r.run(ctx, runOpts{ok: []int{1}}, "rev-parse", "--verify", "--quiet", ref)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", nil
	}
	return strings.TrimSpace(string(out)), nil
}

// ReadFile returns the content of path at ref (branch, tag or SHA).
func (g *GitServer) ReadFile(owner, name, ref, path string) ([]byte, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return nil, err
	}
	data, _, err := r.readFile(g.ctx, ref, path)
	return data, err
}

// Branches returns branch name → head SHA.
func (g *GitServer) Branches(owner, name string) (map[string]string, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return nil, err
	}
	refs, err := r.refs(g.ctx, "refs/heads/")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(refs))
	for ref, sha := range refs {
		out[strings.TrimPrefix(ref, "refs/heads/")] = sha
	}
	return out, nil
}

// Log returns the commits reachable from ref, newest first.
func (g *GitServer) Log(owner, name, ref string) ([]Commit, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return nil, err
	}
	return r.log(g.ctx, ref, "", 0)
}

// GetCommit returns one commit.
func (g *GitServer) GetCommit(owner, name, rev string) (Commit, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return Commit{}, err
	}
	return r.commit(g.ctx, rev)
}

// Revert commits the inverse of commit sha (against parent 1 for merge commits) onto branch and
// returns the new commit; a conflict is a *ConflictError.
func (g *GitServer) Revert(owner, name, branch, sha string) (string, error) {
	r, err := g.open(owner, name)
	if err != nil {
		return "", err
	}
	ctx := g.ctx
	head, err := r.branchHead(ctx, branch)
	if err != nil {
		return "", err
	}
	c, err := r.commit(ctx, sha)
	if err != nil {
		return "", err
	}
	tree, err := r.revertTree(ctx, head, c, 1)
	if err != nil {
		return "", err
	}
	sig := helperSig
	sig.When = time.Now()
	msg := fmt.Sprintf("Revert %q\n\nThis reverts commit %s.\n", c.Title(), c.SHA)
	nc, err := r.commitTree(ctx, tree, []string{head}, msg, sig, sig)
	if err != nil {
		return "", err
	}
	return nc, g.moveRef(ctx, owner, name, "refs/heads/"+branch, nc, "", func(cur string) error {
		if cur != head {
			return fmt.Errorf("%w: branch %s moved", ErrRefConflict, branch)
		}
		return nil
	})
}

// splitGitPath extracts owner and name from /<owner...>/<name>.git[/...].
func splitGitPath(p string) (owner, name string, ok bool) {
	p = strings.TrimPrefix(p, "/")
	i := strings.Index(p, ".git/")
	if i < 0 {
		if !strings.HasSuffix(p, ".git") {
			return "", "", false
		}
		i = len(p) - len(".git")
	}
	repo := p[:i]
	slash := strings.LastIndex(repo, "/")
	if slash <= 0 {
		return "", "", false
	}
	return repo[:slash], repo[slash+1:], true
}

func (g *GitServer) serveGit(w http.ResponseWriter, r *http.Request) {
	_, pass, hasAuth := r.BasicAuth()
	ti, valid := g.tokens.lookup(pass)
	if !hasAuth || !valid {
		w.Header().Set("WWW-Authenticate", `Basic realm="scmtest git"`)
		http.Error(w, "Authentication required", http.StatusUnauthorized)
		return
	}
	owner, name, ok := splitGitPath(r.URL.Path)
	if !ok || !ti.canSee(owner+"/"+name) {
		http.Error(w, "Repository not found.", http.StatusNotFound)
		return
	}
	repo, err := g.open(owner, name)
	if err != nil {
		http.Error(w, "Repository not found.", http.StatusNotFound)
		return
	}
	h := &cgi.Handler{
		Path:   g.backend,
		Root:   "/",
		Env:    gitEnv("GIT_PROJECT_ROOT="+g.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER="+ti.user),
		Stderr: logWriter{g.log},
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		h.ServeHTTP(w, r)
		return
	}
	// A push: hold the repo lock so the before/after ref snapshots describe exactly this push.
	ctx := r.Context()
	repo.mu.Lock()
	before, err := repo.refs(ctx, "refs/")
	if err != nil {
		repo.mu.Unlock()
		http.Error(w, "reading refs failed", http.StatusInternalServerError)
		return
	}
	h.ServeHTTP(w, r)
	after, err := repo.refs(context.WithoutCancel(ctx), "refs/")
	repo.mu.Unlock()
	if err != nil {
		g.log.Warn("scmtest: reading refs after push", "repo", owner+"/"+name, "err", err)
		return
	}
	var changed []string
	for ref := range before {
		if after[ref] != before[ref] {
			changed = append(changed, ref)
		}
	}
	for ref := range after {
		if _, ok := before[ref]; !ok {
			changed = append(changed, ref)
		}
	}
	sort.Strings(changed)
	for _, ref := range changed {
		g.notify(RefUpdate{Owner: owner, Name: name, Ref: ref, Before: before[ref], After: after[ref], User: ti.user, Push: true})
	}
}

// logWriter forwards the CGI program's stderr to the logger.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Debug("git-http-backend", "stderr", strings.TrimSpace(string(p)))
	return len(p), nil
}

var _ io.Writer = logWriter{}
