package scmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// zeroOID is what git uses for "no object": as an expected old value it means "must not exist".
const zeroOID = "0000000000000000000000000000000000000000"

// emptyTreeOID is the well-known id of the empty tree; git resolves it without storing it.
const emptyTreeOID = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// Errors returned by the GitServer helpers and used by the fakes to pick the forge's answer.
var (
	// ErrNotFound: a repo, ref, commit or path does not exist.
	ErrNotFound = errors.New("scmtest: not found")
	// ErrExists: a ref or repo that must be created already exists.
	ErrExists = errors.New("scmtest: already exists")
	// ErrRefConflict: a guarded ref update lost a race (the ref moved) or is not a fast-forward.
	ErrRefConflict = errors.New("scmtest: reference was modified concurrently")
	// ErrMergeConflict: a merge, rebase, cherry-pick or revert hit conflicting changes; see *ConflictError.
	ErrMergeConflict = errors.New("scmtest: merge conflict")
	// ErrInvalid: bad input (a malformed name, path or SHA).
	ErrInvalid = errors.New("scmtest: invalid input")
)

// ConflictError lists the files that conflicted. It matches ErrMergeConflict with errors.Is.
type ConflictError struct {
	Op    string   // merge, rebase, revert, cherry-pick
	Files []string // conflicting paths, sorted
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("scmtest: %s conflict in %s", e.Op, strings.Join(e.Files, ", "))
}

// Is makes errors.Is(err, ErrMergeConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrMergeConflict }

// Signature is a commit author or committer.
type Signature struct {
	Name  string
	Email string
	When  time.Time
}

// Commit is a parsed commit object.
type Commit struct {
	SHA       string
	Tree      string
	Parents   []string
	Author    Signature
	Committer Signature
	Message   string
}

// Title is the first line of the message.
func (c Commit) Title() string {
	t, _, _ := strings.Cut(c.Message, "\n")
	return t
}

// FileChange is one file in a diff between two trees.
type FileChange struct {
	Path      string
	Status    string // added, modified, removed
	OldMode   string
	NewMode   string
	OldSHA    string // blob; zeroOID when added
	NewSHA    string // blob; zeroOID when removed
	Additions int
	Deletions int
	Binary    bool
	Patch     string // unified diff hunks only (starting at "@@"), empty for binary files
}

// TreeEntry is one entry of a tree listing.
type TreeEntry struct {
	Path string
	Mode string
	Type string // blob, tree, commit
	SHA  string
	Size int64 // blobs only
}

// treeChange is one edit applied by buildTree: set Path to a blob, or delete it.
type treeChange struct {
	Path   string
	Mode   string // default 100644
	SHA    string
	Delete bool
}

// gitError carries git's stderr so callers can map it to forge errors.
type gitError struct {
	args   []string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: exit %d: %s", strings.Join(e.args, " "), e.code, strings.TrimSpace(e.stderr))
}

// bareRepo runs git plumbing against one bare repository.
type bareRepo struct {
	dir string
	// mu serialises the check-then-update of refs made by this process and receive-pack pushes,
	// so that ref snapshots around a push are exact; update-ref's old-value guard still protects
	// against any other writer.
	mu sync.Mutex
}

// gitEnv is the environment every git command runs with: no user or system config.
func gitEnv(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
	}
	return append(env, extra...)
}

type runOpts struct {
	stdin []byte
	env   []string
	ok    []int // extra exit codes that are not errors
}

func (r *bareRepo) run(ctx context.Context, o runOpts, args ...string) ([]byte, int, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = gitEnv(append([]string{"GIT_DIR=" + r.dir}, o.env...)...)
	cmd.Dir = r.dir
	if o.stdin != nil {
		cmd.Stdin = bytes.NewReader(o.stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), 0, nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code := exit.ExitCode()
		for _, c := range o.ok {
			if c == code {
				return stdout.Bytes(), code, nil
			}
		}
		return stdout.Bytes(), code, &gitError{args: args, code: code, stderr: stderr.String()}
	}
	if ctx.Err() != nil {
		return nil, -1, fmt.Errorf("git %s: %w", args[0], ctx.Err())
	}
	return nil, -1, fmt.Errorf("git %s: %w", args[0], err)
}

func (r *bareRepo) git(ctx context.Context, args ...string) (string, error) {
	out, _, err := r.run(ctx, runOpts{}, args...)
	return strings.TrimSpace(string(out)), err
}

// initBare creates the repository with HEAD on defaultBranch.
func initBare(ctx context.Context, dir, defaultBranch string) (*bareRepo, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "git", "init", "--quiet", "--bare", "--initial-branch="+defaultBranch, dir)
	cmd.Env = gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git init %s: %v: %s", dir, err, out)
	}
	r := &bareRepo{dir: dir}
	// Let clients fetch any reachable object (go-git shallow fetches) and accept pushes.
	for _, kv := range [][2]string{{"http.receivepack", "true"}, {"uploadpack.allowReachableSHA1InWant", "true"}, {"receive.denyDeleteCurrent", "warn"}} {
		if _, err := r.git(ctx, "config", kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func validRev(rev string) error {
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, " \t\n\x00") || strings.Contains(rev, "..") {
		return fmt.Errorf("%w: revision %q", ErrInvalid, rev)
	}
	return nil
}

// resolve returns the commit SHA a revision (SHA, branch, ref) points to.
func (r *bareRepo) resolve(ctx context.Context, rev string) (string, error) {
	if err := validRev(rev); err != nil {
		return "", err
	}
	return r.lookup(ctx, fmt.Sprintf("commit %q", rev), 1, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
}

// resolveTree returns the tree SHA of a tree-ish (tree SHA, commit SHA or ref).
func (r *bareRepo) resolveTree(ctx context.Context, rev string) (string, error) {
	if err := validRev(rev); err != nil {
		return "", err
	}
	return r.lookup(ctx, fmt.Sprintf("tree %q", rev), 1, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{tree}")
}

// objectType returns blob, tree, commit or tag; ErrNotFound when the object is missing.
func (r *bareRepo) objectType(ctx context.Context, sha string) (string, error) {
	if !isHexSHA(sha) {
		return "", fmt.Errorf("%w: object %q is not a SHA", ErrInvalid, sha)
	}
	return r.lookup(ctx, "object "+sha, 128, "cat-file", "-t", sha)
}

// branchHead returns the SHA a branch points to.
func (r *bareRepo) branchHead(ctx context.Context, branch string) (string, error) {
	if err := validBranch(branch); err != nil {
		return "", err
	}
	return r.lookup(ctx, fmt.Sprintf("branch %q", branch), 1, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
}

// lookup runs a git query that exits 1 (or missingCode) when what it asks for does not exist:
// its trimmed output, or ErrNotFound naming what.
func (r *bareRepo) lookup(ctx context.Context, what string, missingCode int, args ...string) (string, error) {
	out, code, err := r.run(ctx, runOpts{ok: []int{1, missingCode}}, args...)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	return strings.TrimSpace(string(out)), nil
}

// refs returns refname → SHA for refs under prefix (e.g. "refs/heads/").
func (r *bareRepo) refs(ctx context.Context, prefix string) (map[string]string, error) {
	out, err := r.git(ctx, "for-each-ref", "--format=%(objectname) %(refname)", prefix)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if sha, ref, ok := strings.Cut(line, " "); ok {
			m[ref] = sha
		}
	}
	return m, nil
}

// updateRef moves ref from oldSHA to newSHA atomically. oldSHA "" means the ref must not exist;
// newSHA "" deletes it.
func (r *bareRepo) updateRef(ctx context.Context, ref, newSHA, oldSHA string) error {
	args := []string{"update-ref"}
	if newSHA == "" {
		args = append(args, "-d", ref, oldSHA)
	} else {
		old := oldSHA
		if old == "" {
			old = zeroOID
		}
		args = append(args, ref, newSHA, old)
	}
	_, _, err := r.run(ctx, runOpts{}, args...)
	if err == nil {
		return nil
	}
	var ge *gitError
	if errors.As(err, &ge) {
		switch {
		case strings.Contains(ge.stderr, "reference already exists"):
			return fmt.Errorf("%w: %s", ErrExists, ref)
		case strings.Contains(ge.stderr, "unable to resolve reference") && oldSHA != "":
			return fmt.Errorf("%w: %s no longer exists", ErrRefConflict, ref)
		case strings.Contains(ge.stderr, "but expected"), strings.Contains(ge.stderr, "File exists"),
			strings.Contains(ge.stderr, "cannot lock ref"):
			return fmt.Errorf("%w: %s", ErrRefConflict, ref)
		}
	}
	return err
}

// writeBlob stores data and returns its blob SHA.
func (r *bareRepo) writeBlob(ctx context.Context, data []byte) (string, error) {
	out, _, err := r.run(ctx, runOpts{stdin: data}, "hash-object", "-w", "--stdin")
	return strings.TrimSpace(string(out)), err
}

func (r *bareRepo) readBlob(ctx context.Context, sha string) ([]byte, error) {
	if !isHexSHA(sha) {
		return nil, fmt.Errorf("%w: blob %q is not a SHA", ErrInvalid, sha)
	}
	out, code, err := r.run(ctx, runOpts{ok: []int{128}}, "cat-file", "blob", sha)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("%w: blob %s", ErrNotFound, sha)
	}
	return out, nil
}

// entry looks up one path in a tree-ish; ErrNotFound when absent.
func (r *bareRepo) entry(ctx context.Context, rev, path string) (TreeEntry, error) {
	if err := validRev(rev); err != nil {
		return TreeEntry{}, err
	}
	path = strings.Trim(path, "/")
	if path == "" {
		tree, err := r.resolveTree(ctx, rev)
		return TreeEntry{Mode: "040000", Type: "tree", SHA: tree}, err
	}
	out, code, err := r.run(ctx, runOpts{ok: []int{128}}, "ls-tree", "-z", "-l", "--full-tree", rev, "--", path)
	if err != nil {
		return TreeEntry{}, err
	}
	if code != 0 {
		return TreeEntry{}, fmt.Errorf("%w: revision %q", ErrNotFound, rev)
	}
	for _, e := range parseLsTree(out) {
		if e.Path == path {
			return e, nil
		}
	}
	return TreeEntry{}, fmt.Errorf("%w: %s at %s", ErrNotFound, path, rev)
}

// readFile returns a file's content at a revision.
func (r *bareRepo) readFile(ctx context.Context, rev, path string) ([]byte, TreeEntry, error) {
	e, err := r.entry(ctx, rev, path)
	if err != nil {
		return nil, e, err
	}
	if e.Type != "blob" {
		return nil, e, fmt.Errorf("%w: %s at %s is a %s, not a file", ErrNotFound, path, rev, e.Type)
	}
	data, err := r.readBlob(ctx, e.SHA)
	return data, e, err
}

// lsTree lists a tree; recursive includes sub-trees and their contents (like GitHub's recursive=1).
func (r *bareRepo) lsTree(ctx context.Context, treeish string, recursive bool, path string) ([]TreeEntry, error) {
	if err := validRev(treeish); err != nil {
		return nil, err
	}
	args := []string{"ls-tree", "-z", "-l"}
	if recursive {
		args = append(args, "-r", "-t")
	}
	args = append(args, treeish)
	if p := strings.Trim(path, "/"); p != "" {
		args = append(args, "--", p+"/")
	}
	out, code, err := r.run(ctx, runOpts{ok: []int{128}}, args...)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("%w: tree %q", ErrNotFound, treeish)
	}
	return parseLsTree(out), nil
}

func parseLsTree(out []byte) []TreeEntry {
	var entries []TreeEntry
	for _, rec := range bytes.Split(out, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		meta, path, ok := strings.Cut(string(rec), "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta)
		if len(f) < 3 {
			continue
		}
		e := TreeEntry{Path: path, Mode: f[0], Type: f[1], SHA: f[2]}
		if len(f) > 3 && f[3] != "-" {
			e.Size, _ = strconv.ParseInt(f[3], 10, 64)
		}
		entries = append(entries, e)
	}
	return entries
}

// buildTree applies changes on top of base (a tree-ish, or "" for the empty tree) using a
// throw-away index file, so no worktree is needed.
func (r *bareRepo) buildTree(ctx context.Context, base string, changes []treeChange) (string, error) {
	tmp, err := os.MkdirTemp("", "scmtest-index-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}
	if base == "" {
		_, _, err = r.run(ctx, runOpts{env: env}, "read-tree", "--empty")
	} else {
		if err := validRev(base); err != nil {
			return "", err
		}
		_, _, err = r.run(ctx, runOpts{env: env}, "read-tree", base)
	}
	if err != nil {
		return "", err
	}
	var info bytes.Buffer
	for _, c := range changes {
		p, err := cleanPath(c.Path)
		if err != nil {
			return "", err
		}
		if c.Delete {
			fmt.Fprintf(&info, "0 %s\t%s\x00", zeroOID, p)
			continue
		}
		mode := c.Mode
		if mode == "" {
			mode = "100644"
		}
		fmt.Fprintf(&info, "%s %s\t%s\x00", mode, c.SHA, p)
	}
	if info.Len() > 0 {
		if _, _, err := r.run(ctx, runOpts{env: env, stdin: info.Bytes()}, "update-index", "-z", "--index-info"); err != nil {
			return "", err
		}
	}
	return r.gitEnvOut(ctx, env, "write-tree")
}

func (r *bareRepo) gitEnvOut(ctx context.Context, env []string, args ...string) (string, error) {
	out, _, err := r.run(ctx, runOpts{env: env}, args...)
	return strings.TrimSpace(string(out)), err
}

// sigEnv turns a signature into git's author/committer environment variables.
func sigEnv(role string, s Signature) []string {
	when := s.When
	if when.IsZero() {
		when = time.Now()
	}
	_, off := when.Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	date := fmt.Sprintf("%d %c%02d%02d", when.Unix(), sign, off/3600, (off%3600)/60)
	return []string{
		"GIT_" + role + "_NAME=" + s.Name,
		"GIT_" + role + "_EMAIL=" + s.Email,
		"GIT_" + role + "_DATE=" + date,
	}
}

// commitTree writes a commit object and returns its SHA; it does not move any ref.
func (r *bareRepo) commitTree(ctx context.Context, tree string, parents []string, msg string, author, committer Signature) (string, error) {
	args := []string{"commit-tree", tree}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	env := append(sigEnv("AUTHOR", author), sigEnv("COMMITTER", committer)...)
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	out, _, err := r.run(ctx, runOpts{env: env, stdin: []byte(msg)}, args...)
	return strings.TrimSpace(string(out)), err
}

// commit reads and parses a commit object; one cat-file --batch call resolves and reads it.
func (r *bareRepo) commit(ctx context.Context, rev string) (Commit, error) {
	if err := validRev(rev); err != nil {
		return Commit{}, err
	}
	out, _, err := r.run(ctx, runOpts{stdin: []byte(rev + "^{commit}\n")}, "cat-file", "--batch")
	if err != nil {
		return Commit{}, err
	}
	header, body, _ := bytes.Cut(out, []byte("\n"))
	f := strings.Fields(string(header))
	if len(f) != 3 || f[1] != "commit" {
		return Commit{}, fmt.Errorf("%w: commit %q", ErrNotFound, rev)
	}
	size, err := strconv.Atoi(f[2])
	if err != nil || size > len(body) {
		return Commit{}, fmt.Errorf("git cat-file: malformed answer for %q", rev)
	}
	c := parseCommit(body[:size])
	c.SHA = f[0]
	return c, nil
}

func parseCommit(raw []byte) Commit {
	var c Commit
	header, msg, _ := strings.Cut(string(raw), "\n\n")
	c.Message = msg
	for _, line := range strings.Split(header, "\n") {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "tree":
			c.Tree = val
		case "parent":
			c.Parents = append(c.Parents, val)
		case "author":
			c.Author = parseSig(val)
		case "committer":
			c.Committer = parseSig(val)
		}
	}
	return c
}

// parseSig parses "Name <email> 1700000000 +0100".
func parseSig(s string) Signature {
	lt, gt := strings.Index(s, "<"), strings.LastIndex(s, ">")
	if lt < 0 || gt < lt {
		return Signature{Name: s}
	}
	sig := Signature{Name: strings.TrimSpace(s[:lt]), Email: s[lt+1 : gt]}
	f := strings.Fields(s[gt+1:])
	if len(f) >= 1 {
		sec, _ := strconv.ParseInt(f[0], 10, 64)
		loc := time.UTC
		if len(f) == 2 && len(f[1]) == 5 {
			h, _ := strconv.Atoi(f[1][1:3])
			m, _ := strconv.Atoi(f[1][3:5])
			off := h*3600 + m*60
			if f[1][0] == '-' {
				off = -off
			}
			loc = time.FixedZone("", off)
		}
		sig.When = time.Unix(sec, 0).In(loc)
	}
	return sig
}

// isAncestor reports whether a is an ancestor of (or equal to) b.
func (r *bareRepo) isAncestor(ctx context.Context, a, b string) (bool, error) {
	_, code, err := r.run(ctx, runOpts{ok: []int{1}}, "merge-base", "--is-ancestor", a, b)
	return code == 0, err
}

// mergeBase returns the best common ancestor, or "" when the histories are unrelated.
func (r *bareRepo) mergeBase(ctx context.Context, a, b string) (string, error) {
	out, code, err := r.run(ctx, runOpts{ok: []int{1}}, "merge-base", a, b)
	if err != nil || code != 0 {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// mergeCommits three-way merges two commits (merge base found by git) into a tree.
func (r *bareRepo) mergeCommits(ctx context.Context, ours, theirs string) (string, []string, error) {
	out, code, err := r.run(ctx, runOpts{ok: []int{1}}, "merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", ours, theirs)
	if err != nil {
		return "", nil, err
	}
	parts := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	tree := parts[0]
	if code == 0 {
		return tree, nil, nil
	}
	seen := map[string]bool{}
	var files []string
	for _, p := range parts[1:] {
		if p != "" && !seen[p] {
			seen[p] = true
			files = append(files, p)
		}
	}
	sort.Strings(files)
	return tree, files, nil
}

// syntheticSig is the identity of throw-away commits used to pin a merge base.
var syntheticSig = Signature{Name: "scmtest", Email: "scmtest@localhost", When: time.Unix(1_000_000_000, 0).UTC()}

// threeWay merges theirsTree into oursTree with baseTree as the merge base. git 2.39's merge-tree
// has no --merge-base, so the base is pinned by merging two throw-away commits whose only common
// ancestor is a commit holding baseTree.
func (r *bareRepo) threeWay(ctx context.Context, baseTree, oursTree, theirsTree string) (string, []string, error) {
	base, err := r.commitTree(ctx, baseTree, nil, "base", syntheticSig, syntheticSig)
	if err != nil {
		return "", nil, err
	}
	ours, err := r.commitTree(ctx, oursTree, []string{base}, "ours", syntheticSig, syntheticSig)
	if err != nil {
		return "", nil, err
	}
	theirs, err := r.commitTree(ctx, theirsTree, []string{base}, "theirs", syntheticSig, syntheticSig)
	if err != nil {
		return "", nil, err
	}
	return r.mergeCommits(ctx, ours, theirs)
}

// parentTree is the tree of a commit's parent number mainline (1-based), or the empty tree for a root.
func (r *bareRepo) parentTree(ctx context.Context, c Commit, mainline int) (string, error) {
	if len(c.Parents) == 0 {
		return emptyTreeOID, nil
	}
	if mainline < 1 || mainline > len(c.Parents) {
		return "", fmt.Errorf("%w: commit %s has no parent %d", ErrInvalid, c.SHA, mainline)
	}
	return r.resolveTree(ctx, c.Parents[mainline-1])
}

// cherryPickTree applies commit c (relative to its first parent) onto the tree of onto.
func (r *bareRepo) cherryPickTree(ctx context.Context, onto string, c Commit) (string, error) {
	ontoTree, err := r.resolveTree(ctx, onto)
	if err != nil {
		return "", err
	}
	base, err := r.parentTree(ctx, c, 1)
	if err != nil {
		return "", err
	}
	tree, conflicts, err := r.threeWay(ctx, base, ontoTree, c.Tree)
	if err != nil {
		return "", err
	}
	if len(conflicts) > 0 {
		return "", &ConflictError{Op: "cherry-pick", Files: conflicts}
	}
	return tree, nil
}

// revertTree undoes commit c (relative to parent mainline, 1 for merge commits) on the tree of onto.
func (r *bareRepo) revertTree(ctx context.Context, onto string, c Commit, mainline int) (string, error) {
	if mainline == 0 {
		mainline = 1
	}
	ontoTree, err := r.resolveTree(ctx, onto)
	if err != nil {
		return "", err
	}
	parent, err := r.parentTree(ctx, c, mainline)
	if err != nil {
		return "", err
	}
	tree, conflicts, err := r.threeWay(ctx, c.Tree, ontoTree, parent)
	if err != nil {
		return "", err
	}
	if len(conflicts) > 0 {
		return "", &ConflictError{Op: "revert", Files: conflicts}
	}
	return tree, nil
}

// revList returns SHAs for the given rev-list arguments (oldest first when reverse).
func (r *bareRepo) revList(ctx context.Context, args ...string) ([]string, error) {
	out, err := r.git(ctx, append([]string{"rev-list"}, args...)...)
	if err != nil || out == "" {
		return nil, err
	}
	return strings.Split(out, "\n"), nil
}

// log returns commits reachable from rev, newest first, optionally only those touching path.
func (r *bareRepo) log(ctx context.Context, rev, path string, max int) ([]Commit, error) {
	if err := validRev(rev); err != nil {
		return nil, err
	}
	args := []string{"log", "--format=%H%x00%T%x00%P%x00%an%x00%ae%x00%at%x00%cn%x00%ce%x00%ct%x00%B%x1e"}
	if max > 0 {
		args = append(args, "-n", strconv.Itoa(max))
	}
	args = append(args, rev, "--")
	if path != "" {
		args = append(args, path)
	}
	out, code, err := r.run(ctx, runOpts{ok: []int{128}}, args...)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("%w: revision %q", ErrNotFound, rev)
	}
	var commits []Commit
	for _, rec := range strings.Split(string(out), "\x1e") {
		rec = strings.TrimLeft(rec, "\n")
		f := strings.Split(rec, "\x00")
		if len(f) < 10 {
			continue
		}
		at, _ := strconv.ParseInt(f[5], 10, 64)
		ct, _ := strconv.ParseInt(f[8], 10, 64)
		c := Commit{SHA: f[0], Tree: f[1], Message: f[9],
			Author:    Signature{Name: f[3], Email: f[4], When: time.Unix(at, 0).UTC()},
			Committer: Signature{Name: f[6], Email: f[7], When: time.Unix(ct, 0).UTC()}}
		if f[2] != "" {
			c.Parents = strings.Fields(f[2])
		}
		commits = append(commits, c)
	}
	return commits, nil
}

// lastCommitFor returns the newest commit at rev that touched path.
func (r *bareRepo) lastCommitFor(ctx context.Context, rev, path string) (string, error) {
	cs, err := r.log(ctx, rev, path, 1)
	if err != nil {
		return "", err
	}
	if len(cs) == 0 {
		return "", fmt.Errorf("%w: no commit touches %s at %s", ErrNotFound, path, rev)
	}
	return cs[0].SHA, nil
}

// diff compares two tree-ishes (from "" = empty tree); withPatch adds unified hunks.
func (r *bareRepo) diff(ctx context.Context, from, to string, withPatch bool) ([]FileChange, error) {
	if from == "" {
		from = emptyTreeOID
	}
	raw, _, err := r.run(ctx, runOpts{}, "diff-tree", "-r", "-z", "--no-renames", from, to)
	if err != nil {
		return nil, err
	}
	var changes []FileChange
	recs := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	for i := 0; i+1 < len(recs); i += 2 {
		f := strings.Fields(strings.TrimPrefix(recs[i], ":"))
		if len(f) < 5 {
			continue
		}
		fc := FileChange{Path: recs[i+1], OldMode: f[0], NewMode: f[1], OldSHA: f[2], NewSHA: f[3]}
		switch f[4] {
		case "A":
			fc.Status = "added"
		case "D":
			fc.Status = "removed"
		default:
			fc.Status = "modified"
		}
		changes = append(changes, fc)
	}
	if len(changes) == 0 {
		return nil, nil
	}
	num, _, err := r.run(ctx, runOpts{}, "diff-tree", "-r", "-z", "--no-renames", "--numstat", from, to)
	if err != nil {
		return nil, err
	}
	byPath := map[string]*FileChange{}
	for i := range changes {
		byPath[changes[i].Path] = &changes[i]
	}
	for _, rec := range strings.Split(string(num), "\x00") {
		f := strings.SplitN(rec, "\t", 3)
		if len(f) != 3 {
			continue
		}
		fc := byPath[f[2]]
		if fc == nil {
			continue
		}
		if f[0] == "-" {
			fc.Binary = true
			continue
		}
		fc.Additions, _ = strconv.Atoi(f[0])
		fc.Deletions, _ = strconv.Atoi(f[1])
	}
	if withPatch {
		patch, _, err := r.run(ctx, runOpts{}, "diff-tree", "-r", "-p", "--no-renames", "--no-color", from, to)
		if err != nil {
			return nil, err
		}
		// diff-tree prints files in the same order as the raw listing.
		idx := -1
		var b strings.Builder
		inHunks := false
		flush := func() {
			if idx >= 0 && idx < len(changes) {
				changes[idx].Patch = b.String()
			}
			b.Reset()
		}
		sc := bufio.NewScanner(bytes.NewReader(patch))
		sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "diff --git ") {
				flush()
				idx++
				inHunks = false
				continue
			}
			if strings.HasPrefix(line, "@@") {
				inHunks = true
			}
			if inHunks {
				b.WriteString(line)
				b.WriteByte('\n')
			}
		}
		flush()
	}
	return changes, nil
}

// isHexSHA reports whether s is a full 40-character hex object id.
func isHexSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// cleanPath validates a repository file path: relative, no "." or ".." segments, no NUL.
func cleanPath(p string) (string, error) {
	p = strings.TrimPrefix(p, "/")
	if p == "" || strings.ContainsAny(p, "\x00\n") || strings.HasSuffix(p, "/") {
		return "", fmt.Errorf("%w: file path %q", ErrInvalid, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." || seg == ".git" {
			return "", fmt.Errorf("%w: file path %q", ErrInvalid, p)
		}
	}
	return p, nil
}

// validBranch applies the subset of git check-ref-format rules that matter for fakes.
func validBranch(b string) error {
	if b == "" || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") || strings.Contains(b, "..") ||
		strings.Contains(b, "//") || strings.Contains(b, "@{") || b == "@" {
		return fmt.Errorf("%w: branch name %q", ErrInvalid, b)
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return fmt.Errorf("%w: branch name %q", ErrInvalid, b)
		}
	}
	return nil
}
