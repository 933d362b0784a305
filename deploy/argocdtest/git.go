package argocdtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GitReader is how the fake reads release repositories, the job Argo CD's
// repo-server does. The default is GitCLI, which talks to any git URL; MemGit
// keeps repositories in memory.
type GitReader interface {
	// Resolve turns a branch, tag, "HEAD"/"" or commit SHA into a full commit SHA.
	Resolve(ctx context.Context, repoURL, revision string) (sha string, err error)
	// ReadTree returns every file under dir (recursively) at commit sha, keyed
	// by slash-separated path relative to dir. dir "" or "." is the repo root.
	// The returned byte slices must not be modified.
	ReadTree(ctx context.Context, repoURL, sha, dir string) (map[string][]byte, error)
}

var (
	// ErrRevisionNotFound means a revision does not resolve to a commit.
	ErrRevisionNotFound = errors.New("revision not found")
	// ErrPathNotFound means a directory does not exist at a commit.
	ErrPathNotFound = errors.New("path not found")
)

// GitCLI reads repositories with the git command: `git ls-remote` to resolve
// revisions (always fresh, like a hard refresh) and a cached bare clone per
// repository, fetched only when a commit is missing, for reading trees.
// Credentials in the URL (https://user:token@host/repo.git) work as with any
// git client and are redacted from every error.
type GitCLI struct {
	dir   string
	owned bool
	log   *slog.Logger

	// Timeout bounds every git command (default 60s), so an unreachable
	// remote cannot stall the controller.
	Timeout time.Duration

	credMu sync.Mutex
	creds  []repoCred

	mu    sync.Mutex
	repos map[string]*sync.Mutex // repo URL -> fetch lock
	trees map[string]map[string][]byte
	order []string // FIFO eviction order of trees
}

const maxCachedTrees = 256

// NewGitCLI returns a GitCLI caching clones under cacheDir; with cacheDir ""
// it creates a temporary directory that Close removes.
func NewGitCLI(cacheDir string, log *slog.Logger) (*GitCLI, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("argocdtest: git CLI not found in PATH: %w", err)
	}
	owned := false
	if cacheDir == "" {
		d, err := os.MkdirTemp("", "argocdtest-git-")
		if err != nil {
			return nil, fmt.Errorf("argocdtest: create git cache dir: %w", err)
		}
		cacheDir, owned = d, true
	} else if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("argocdtest: create git cache dir %s: %w", cacheDir, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &GitCLI{
		dir: cacheDir, owned: owned, log: log, Timeout: 60 * time.Second,
		repos: map[string]*sync.Mutex{}, trees: map[string]map[string][]byte{},
	}, nil
}

type repoCred struct{ prefix, username, password string }

// SetCredentials makes every repository URL starting with prefix use these
// basic-auth credentials, like an Argo CD repository credential template, so
// Application specs can carry clean URLs. Later calls win for equal prefixes;
// the longest matching prefix is used.
func (g *GitCLI) SetCredentials(prefix, username, password string) {
	g.credMu.Lock()
	defer g.credMu.Unlock()
	g.creds = append([]repoCred{{prefix, username, password}}, g.creds...)
}

// remoteURL is repoURL with matching credentials filled in (when it has
// none of its own).
func (g *GitCLI) remoteURL(repoURL string) string {
	g.credMu.Lock()
	defer g.credMu.Unlock()
	var best *repoCred
	for i, c := range g.creds {
		if strings.HasPrefix(repoURL, c.prefix) && (best == nil || len(c.prefix) > len(best.prefix)) {
			best = &g.creds[i]
		}
	}
	if best == nil {
		return repoURL
	}
	u, err := url.Parse(repoURL)
	if err != nil || u.User != nil {
		return repoURL
	}
	u.User = url.UserPassword(best.username, best.password)
	return u.String()
}

// Close removes the cache directory if NewGitCLI created it.
func (g *GitCLI) Close() error {
	if g.owned {
		return os.RemoveAll(g.dir)
	}
	return nil
}

// Resolve implements GitReader.
func (g *GitCLI) Resolve(ctx context.Context, repoURL, revision string) (string, error) {
	rev := strings.TrimSpace(revision)
	if rev == "" {
		rev = "HEAD"
	}
	if isFullSHA(rev) {
		// Like Argo CD: a full SHA is taken as is, without asking the remote.
		return strings.ToLower(rev), nil
	}
	remote := g.remoteURL(repoURL)
	out, err := g.run(ctx, remote, "", "ls-remote", "--", remote)
	if err != nil {
		return "", err
	}
	refs := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		sha, ref, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok {
			refs[ref] = sha
		}
	}
	for _, cand := range []string{rev, "refs/heads/" + rev, "refs/tags/" + rev + "^{}", "refs/tags/" + rev} {
		if sha, ok := refs[cand]; ok {
			return sha, nil
		}
	}
	if isHex(rev) && len(rev) >= 4 {
		// A short SHA can only be expanded against the objects themselves.
		if err := g.fetch(ctx, repoURL, ""); err == nil {
			if out, err := g.run(ctx, repoURL, g.repoDir(repoURL), "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err == nil {
				return strings.TrimSpace(string(out)), nil
			}
		}
	}
	return "", fmt.Errorf("%w: unable to resolve %q to a commit SHA in %s", ErrRevisionNotFound, rev, redactURL(repoURL))
}

// ReadTree implements GitReader.
func (g *GitCLI) ReadTree(ctx context.Context, repoURL, sha, dir string) (map[string][]byte, error) {
	dir = cleanDir(dir)
	key := repoURL + "\x00" + sha + "\x00" + dir
	g.mu.Lock()
	if t, ok := g.trees[key]; ok {
		g.mu.Unlock()
		return copyTree(t), nil
	}
	g.mu.Unlock()

	if err := g.fetch(ctx, repoURL, sha); err != nil {
		return nil, err
	}
	repoDir := g.repoDir(repoURL)
	treeish := sha
	if dir != "" {
		treeish = sha + ":" + dir
	}
	if _, err := g.run(ctx, repoURL, repoDir, "cat-file", "-e", treeish); err != nil {
		return nil, fmt.Errorf("%w: %q at %s in %s", ErrPathNotFound, dir, shortSHA(sha), redactURL(repoURL))
	}
	listing, err := g.run(ctx, repoURL, repoDir, "ls-tree", "-r", "-z", treeish)
	if err != nil {
		return nil, err
	}
	var paths, objects []string
	for _, entry := range bytes.Split(listing, []byte{0}) {
		meta, p, ok := strings.Cut(string(entry), "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type object
		if len(f) != 3 || f[1] != "blob" || f[0] == "120000" {
			continue // submodules and symlinks are not manifests
		}
		paths = append(paths, p)
		objects = append(objects, f[2])
	}
	files, err := g.catBlobs(ctx, repoURL, repoDir, paths, objects)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if _, ok := g.trees[key]; !ok {
		g.trees[key] = files
		g.order = append(g.order, key)
		if len(g.order) > maxCachedTrees {
			delete(g.trees, g.order[0])
			g.order = g.order[1:]
		}
	}
	g.mu.Unlock()
	return copyTree(files), nil
}

func copyTree(t map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out
}

// catBlobs reads all blobs through one `git cat-file --batch` process.
func (g *GitCLI) catBlobs(ctx context.Context, repoURL, repoDir string, paths, objects []string) (map[string][]byte, error) {
	files := make(map[string][]byte, len(paths))
	if len(objects) == 0 {
		return files, nil
	}
	cmd := exec.CommandContext(ctx, "git", "cat-file", "--batch")
	cmd.Dir = repoDir
	cmd.Env = gitEnv()
	cmd.Stdin = strings.NewReader(strings.Join(objects, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("argocdtest: git cat-file: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("argocdtest: start git cat-file: %w", err)
	}
	r := bufio.NewReader(stdout)
	var readErr error
	for i := range objects {
		header, err := r.ReadString('\n')
		if err != nil {
			readErr = fmt.Errorf("argocdtest: git cat-file: reading header of %s: %w", paths[i], err)
			break
		}
		f := strings.Fields(header)
		if len(f) != 3 {
			readErr = fmt.Errorf("argocdtest: git cat-file: unexpected header %q for %s", strings.TrimSpace(header), paths[i])
			break
		}
		size, err := strconv.Atoi(f[2])
		if err != nil {
			readErr = fmt.Errorf("argocdtest: git cat-file: bad size in %q: %w", strings.TrimSpace(header), err)
			break
		}
		buf := make([]byte, size+1) // content plus trailing LF
		if _, err := io.ReadFull(r, buf); err != nil {
			readErr = fmt.Errorf("argocdtest: git cat-file: reading %s: %w", paths[i], err)
			break
		}
		files[paths[i]] = buf[:size]
	}
	_, _ = io.Copy(io.Discard, r)
	if err := cmd.Wait(); err != nil && readErr == nil {
		readErr = fmt.Errorf("argocdtest: git cat-file in cache of %s: %w: %s", redactURL(repoURL), err, redactText(stderr.String(), repoURL))
	}
	if readErr != nil {
		return nil, readErr
	}
	return files, nil
}

// fetch makes sure the cached bare repository of repoURL has commit sha
// (with sha "" it just fetches all branches and tags).
func (g *GitCLI) fetch(ctx context.Context, repoURL, sha string) error {
	g.mu.Lock()
	lock, ok := g.repos[repoURL]
	if !ok {
		lock = &sync.Mutex{}
		g.repos[repoURL] = lock
	}
	g.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	dir := g.repoDir(repoURL)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		if _, err := g.run(ctx, repoURL, "", "init", "--bare", "-q", dir); err != nil {
			return err
		}
	}
	has := func() bool {
		if sha == "" {
			return false
		}
		_, err := g.run(ctx, repoURL, dir, "cat-file", "-e", sha+"^{commit}")
		return err == nil
	}
	if has() {
		return nil
	}
	g.log.Debug("argocdtest: fetching", "repo", redactURL(repoURL))
	remote := g.remoteURL(repoURL)
	if _, err := g.run(ctx, remote, dir, "fetch", "-q", "--force", "--no-tags", "--", remote,
		"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"); err != nil {
		return err
	}
	if sha == "" || has() {
		return nil
	}
	// Not reachable from a branch or tag: ask for the object itself
	// (protocol v2 servers allow it).
	if _, err := g.run(ctx, remote, dir, "fetch", "-q", "--no-tags", "--", remote, sha); err == nil && has() {
		return nil
	}
	return fmt.Errorf("%w: commit %s not found in %s", ErrRevisionNotFound, sha, redactURL(repoURL))
}

func (g *GitCLI) repoDir(repoURL string) string {
	h := sha256.Sum256([]byte(repoURL))
	return filepath.Join(g.dir, hex.EncodeToString(h[:8])+".git")
}

// run executes git; errors carry git's stderr with the URL's secrets removed.
func (g *GitCLI) run(ctx context.Context, repoURL, dir string, args ...string) ([]byte, error) {
	if g.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		safeArgs := make([]string, len(args))
		for i, a := range args {
			safeArgs[i] = redactText(a, repoURL)
		}
		return nil, fmt.Errorf("argocdtest: git %s: %w: %s", strings.Join(safeArgs, " "), err,
			strings.TrimSpace(redactText(stderr.String(), repoURL)))
	}
	return stdout.Bytes(), nil
}

func gitEnv() []string {
	env := os.Environ()
	return append(env,
		"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "GIT_SSH_COMMAND=ssh -o BatchMode=yes",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "LC_ALL=C")
}

// redactURL hides the password (or token) of a URL's user info.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx")
	}
	return u.String()
}

// redactText removes the secrets of repoURL from free text such as git's
// stderr.
func redactText(text, repoURL string) string {
	u, err := url.Parse(repoURL)
	if err != nil || u.User == nil {
		return text
	}
	text = strings.ReplaceAll(text, repoURL, redactURL(repoURL))
	if pw, has := u.User.Password(); has && pw != "" {
		text = strings.ReplaceAll(text, pw, "xxxxx")
		if esc := url.PathEscape(pw); esc != pw {
			text = strings.ReplaceAll(text, esc, "xxxxx")
		}
	} else if name := u.User.Username(); name != "" {
		text = strings.ReplaceAll(text, name+"@", "xxxxx@")
	}
	return text
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return s != ""
}

func isFullSHA(s string) bool { return len(s) == 40 && isHex(s) }

func shortSHA(s string) string {
	if len(s) > 7 {
		return s[:7]
	}
	return s
}

// cleanDir normalises an app path: "", ".", "/" and "./" all mean the root.
func cleanDir(dir string) string {
	dir = strings.Trim(path.Clean("/"+strings.TrimSpace(dir)), "/")
	if dir == "." {
		return ""
	}
	return dir
}
