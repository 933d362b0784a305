// Package scmconformance is the behaviour every scm.Provider must show, as one test suite that
// each driver runs against its real protocol (the local driver against a git smart-HTTP server,
// the forge drivers against the scmtest fakes):
//
//	func TestConformance(t *testing.T) {
//		scmconformance.Run(t, func(t *testing.T) scmconformance.Env { ... })
//	}
//
// Every case gets a fresh Env, so cases can create branches and PRs freely; the cases run as
// parallel subtests, so newEnv must be safe to call from several at once.
package scmconformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prflow/prflow/scm"
)

// Env is one repository prepared for a case.
type Env struct {
	Provider scm.Provider
	Repo     scm.Repo
	// Base is the default branch; Files are files (path → content) it holds. At least two are
	// required; the suite modifies and deletes them on branches of its own.
	Base  string
	Files map[string]string
	// Author signs the suite's commits (default "conformance <conformance@example.com>").
	Author scm.Signature
	// CommitDirect commits files (path → content) and deletes to branch behind the provider's
	// back, as another user would, and returns the new commit. Required.
	CommitDirect func(t *testing.T, branch string, files map[string]string, deletes []string) string
	// CommitOrphan creates branch at a new root commit holding files (a history unrelated to
	// the base, as `git checkout --orphan` makes) behind the provider's back and returns it.
	// Required by the IsAncestorUnrelated case.
	CommitOrphan func(t *testing.T, branch string, files map[string]string) string
	// Settle, when set, runs before the suite reads a PR's mergeability or merges it, for forges
	// that compute mergeability lazily (poll until it is known).
	Settle func(t *testing.T, number int)
	// Comments and Statuses, when set, read back what Comment and SetStatus stored.
	Comments func(t *testing.T, number int) []string
	Statuses func(t *testing.T, sha string) []scm.Status
	// CommentAs posts body on PR number as another user than the provider's, behind its back,
	// and returns the comment's id as ListComments shows it. Required by EditComment.
	CommentAs func(t *testing.T, number int, body string) string
	// FailEdits makes the forge refuse every comment edit from now on (until the case ends)
	// with a plain, non-permission failure, as a forge outage or a bad answer would. Required
	// by UpsertComment.
	FailEdits func(t *testing.T)
	// RefuseComments makes the forge refuse new comments and edits on PR number as it does
	// for a locked conversation or a user without the permission to comment. Required by
	// CommentRefused (which drivers without permissions, like local, leave out).
	RefuseComments func(t *testing.T, number int)
	// NoLabels says the forge has no PR labels (Bitbucket Cloud): OpenPR may drop them and
	// the suite does not check them.
	NoLabels bool
	// Timeout bounds each case (default 60s).
	Timeout time.Duration
}

type suite struct {
	Env
	ctx context.Context
	// seeded files in sorted order
	f1, f2 string
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

var cases = []testCase{
	{"ReadFile", testReadFile},
	{"ReadFileMissing", testReadFileMissing},
	{"Branch", testBranch},
	{"CreateBranch", testCreateBranch},
	{"CommitMultiFile", testCommitMultiFile},
	{"CommitCreatesBranchFromParent", testCommitCreatesBranch},
	{"CommitStaleParent", testCommitStaleParent},
	{"CommitReplace", testCommitReplace},
	{"FindPRNone", testFindPRNone},
	{"OpenGetFindPR", testOpenGetFindPR},
	{"MergeMethods", testMergeMethods},
	{"MergeAfterBaseMoved", testMergeAfterBaseMoved},
	{"MergeStaleSHA", testMergeStaleSHA},
	{"MergeConflict", testMergeConflict},
	{"MergeAlreadyMerged", testMergeAlreadyMerged},
	{"ClosePR", testClosePR},
	{"RevertCommit", testRevertCommit},
	{"RevertMergeCommit", testRevertMergeCommit},
	{"RevertConflict", testRevertConflict},
	{"Comment", testComment},
	{"ListComments", testListComments},
	{"CommentOnce", testCommentOnce},
	{"EditComment", testEditComment},
	{"UpsertComment", testUpsertComment},
	{"UpsertCommentConcurrent", testUpsertCommentConcurrent},
	{"CommentRefused", testCommentRefused},
	{"CommentSizeCap", testCommentSizeCap},
	{"Status", testStatus},
	{"ChangedFiles", testChangedFiles},
	{"ChangedBetween", testChangedBetween},
	{"ConcurrentCommits", testConcurrentCommits},
	{"IsAncestor", testIsAncestor},
	{"IsAncestorMergeCommit", testIsAncestorMergeCommit},
	{"IsAncestorUnrelated", testIsAncestorUnrelated},
}

// Run runs every case as a subtest, each with a fresh Env from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) { RunCases(t, newEnv) }

// Cases lists the case names, for RunCases.
func Cases() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

// RunCases runs the named cases only (all when names is empty); an unknown name fails the
// test. Drivers use it to run a second transport through a few representative cases.
func RunCases(t *testing.T, newEnv func(t *testing.T) Env, names ...string) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for n := range want {
		if !slices.Contains(Cases(), n) {
			t.Fatalf("scmconformance: unknown case %q (have %v)", n, Cases())
		}
	}
	for _, c := range cases {
		if len(want) > 0 && !want[c.name] {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			// Every case has an Env of its own (its own fake or server and repo), so the
			// cases need not wait for each other.
			t.Parallel()
			env := newEnv(t)
			c.run(t, newSuite(t, env))
		})
	}
}

func newSuite(t *testing.T, env Env) *suite {
	t.Helper()
	if env.Provider == nil || env.Repo == "" || env.Base == "" || env.CommitDirect == nil {
		t.Fatal("scmconformance: Env needs Provider, Repo, Base and CommitDirect")
	}
	if len(env.Files) < 2 {
		t.Fatalf("scmconformance: Env.Files needs at least two seeded files, got %d", len(env.Files))
	}
	if env.Author.Name == "" {
		env.Author = scm.Signature{Name: "conformance", Email: "conformance@example.com"}
	}
	if env.Timeout == 0 {
		env.Timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), env.Timeout)
	t.Cleanup(cancel)
	paths := make([]string, 0, len(env.Files))
	for p := range env.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return &suite{Env: env, ctx: ctx, f1: paths[0], f2: paths[1]}
}

var shaRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// --- helpers ---

func (s *suite) head(t *testing.T, branch string) string {
	t.Helper()
	ref, err := s.Provider.Branch(s.ctx, s.Repo, branch)
	if err != nil {
		t.Fatalf("Branch(%s): %v", branch, err)
	}
	if !shaRe.MatchString(ref.SHA) || ref.Name != branch {
		t.Fatalf("Branch(%s) = %+v, want the name and a full SHA", branch, ref)
	}
	return ref.SHA
}

func (s *suite) read(t *testing.T, ref, path string) string {
	t.Helper()
	b, err := s.Provider.ReadFile(s.ctx, s.Repo, ref, path)
	if err != nil {
		t.Fatalf("ReadFile(%s@%s): %v", path, ref, err)
	}
	return string(b)
}

func (s *suite) assertMissing(t *testing.T, ref, path string) {
	t.Helper()
	_, err := s.Provider.ReadFile(s.ctx, s.Repo, ref, path)
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("ReadFile(%s@%s) = %v, want ErrNotFound", path, ref, err)
	}
}

// branch creates name at the base head and returns that commit.
func (s *suite) branch(t *testing.T, name string) string {
	t.Helper()
	sha := s.head(t, s.Base)
	if err := s.Provider.CreateBranch(s.ctx, s.Repo, name, sha); err != nil {
		t.Fatalf("CreateBranch(%s): %v", name, err)
	}
	return sha
}

// commit commits changes on branch at its current head and returns the new commit.
func (s *suite) commit(t *testing.T, branch, msg string, changes ...scm.FileChange) string {
	t.Helper()
	parent := s.head(t, branch)
	sha, err := s.Provider.Commit(s.ctx, s.Repo, scm.CommitInput{Branch: branch, Parent: parent, Message: msg, Author: s.Author, Changes: changes})
	if err != nil {
		t.Fatalf("Commit(%s): %v", branch, err)
	}
	if !shaRe.MatchString(sha) || sha == parent {
		t.Fatalf("Commit(%s) returned %q (parent %s)", branch, sha, parent)
	}
	return sha
}

// pr creates branch head from the base, commits changes to it and opens a PR.
func (s *suite) pr(t *testing.T, head string, changes ...scm.FileChange) *scm.PullRequest {
	t.Helper()
	s.branch(t, head)
	s.commit(t, head, "change on "+head, changes...)
	pr, err := s.Provider.OpenPR(s.ctx, s.Repo, scm.NewPR{Title: "PR from " + head, Body: "conformance", Head: head, Base: s.Base})
	if err != nil {
		t.Fatalf("OpenPR(%s): %v", head, err)
	}
	if pr.Number <= 0 {
		t.Fatalf("OpenPR returned number %d", pr.Number)
	}
	return pr
}

func (s *suite) settle(t *testing.T, n int) {
	t.Helper()
	if s.Settle != nil {
		s.Settle(t, n)
	}
}

func (s *suite) get(t *testing.T, n int) *scm.PullRequest {
	t.Helper()
	pr, err := s.Provider.GetPR(s.ctx, s.Repo, n)
	if err != nil {
		t.Fatalf("GetPR(%d): %v", n, err)
	}
	return pr
}

func change(path, content string) scm.FileChange {
	return scm.FileChange{Path: path, Content: []byte(content)}
}

func del(path string) scm.FileChange { return scm.FileChange{Path: path, Delete: true} }

// merge merges with method; unsupported reports false after checking the error is exactly
// ErrNotSupported.
func (s *suite) merge(t *testing.T, pr *scm.PullRequest, method scm.MergeMethod) (*scm.PullRequest, bool) {
	t.Helper()
	return s.mergeInput(t, pr, scm.MergeInput{Method: method, SHA: pr.HeadSHA})
}

// mergeInput is merge with the whole MergeInput given.
func (s *suite) mergeInput(t *testing.T, pr *scm.PullRequest, in scm.MergeInput) (*scm.PullRequest, bool) {
	t.Helper()
	s.settle(t, pr.Number)
	got, err := s.Provider.MergePR(s.ctx, s.Repo, pr.Number, in)
	if errors.Is(err, scm.ErrNotSupported) {
		t.Logf("%s: merge method %q is not supported: %v", s.Provider.Name(), in.Method, err)
		return nil, false
	}
	if err != nil {
		t.Fatalf("MergePR(#%d, %s): %v", pr.Number, in.Method, err)
	}
	if got.State != scm.PRMerged || !shaRe.MatchString(got.MergeSHA) {
		t.Fatalf("MergePR(#%d, %s) = state %q merge SHA %q", pr.Number, in.Method, got.State, got.MergeSHA)
	}
	return got, true
}

// --- cases ---

func testReadFile(t *testing.T, s *suite) {
	sha := s.head(t, s.Base)
	for p, want := range s.Files {
		if got := s.read(t, s.Base, p); got != want {
			t.Errorf("ReadFile(%s@%s) = %q, want %q", p, s.Base, got, want)
		}
		if got := s.read(t, sha, p); got != want {
			t.Errorf("ReadFile(%s@%s) = %q, want %q", p, sha, got, want)
		}
	}
}

func testReadFileMissing(t *testing.T, s *suite) {
	s.assertMissing(t, s.Base, "conformance/does-not-exist.txt")
	s.assertMissing(t, "conformance-no-such-branch", s.f1)
}

func testBranch(t *testing.T, s *suite) {
	s.head(t, s.Base)
	_, err := s.Provider.Branch(s.ctx, s.Repo, "conformance-no-such-branch")
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("Branch(missing) = %v, want ErrNotFound", err)
	}
}

func testCreateBranch(t *testing.T, s *suite) {
	sha := s.branch(t, "conformance/create")
	// Again at the same commit: a redelivered job must not fail.
	if err := s.Provider.CreateBranch(s.ctx, s.Repo, "conformance/create", sha); err != nil {
		t.Fatalf("CreateBranch again at the same SHA: %v", err)
	}
	if got := s.head(t, "conformance/create"); got != sha {
		t.Fatalf("branch at %s, want %s", got, sha)
	}
	s.branch(t, "conformance/other")
	moved := s.commit(t, "conformance/other", "move", change("conformance/other.txt", "x\n"))
	err := s.Provider.CreateBranch(s.ctx, s.Repo, "conformance/create", moved)
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("CreateBranch at another SHA = %v, want ErrConflict", err)
	}
	if got := s.head(t, "conformance/create"); got != sha {
		t.Fatalf("branch moved to %s", got)
	}
	if err := s.Provider.DeleteBranch(s.ctx, s.Repo, "conformance/create"); err != nil {
		t.Fatalf("DeleteBranch: %v", err)
	}
	if _, err := s.Provider.Branch(s.ctx, s.Repo, "conformance/create"); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("Branch after delete = %v, want ErrNotFound", err)
	}
}

func testCommitMultiFile(t *testing.T, s *suite) {
	const b = "conformance/multi"
	parent := s.branch(t, b)
	sha, err := s.Provider.Commit(s.ctx, s.Repo, scm.CommitInput{
		Branch: b, Parent: parent, Message: "multi-file", Author: s.Author,
		Changes: []scm.FileChange{
			change(s.f1, "rewritten\n"),
			del(s.f2),
			change("conformance/new/dir/file.yaml", "key: value\n"),
		},
	})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := s.head(t, b); got != sha {
		t.Fatalf("branch at %s, Commit returned %s", got, sha)
	}
	if got := s.read(t, b, s.f1); got != "rewritten\n" {
		t.Fatalf("%s = %q", s.f1, got)
	}
	if got := s.read(t, b, "conformance/new/dir/file.yaml"); got != "key: value\n" {
		t.Fatalf("new file = %q", got)
	}
	s.assertMissing(t, b, s.f2)
	// The base is untouched.
	if got := s.read(t, s.Base, s.f1); got != s.Files[s.f1] {
		t.Fatalf("base changed: %q", got)
	}
}

func testCommitCreatesBranch(t *testing.T, s *suite) {
	parent := s.head(t, s.Base)
	sha, err := s.Provider.Commit(s.ctx, s.Repo, scm.CommitInput{
		Branch: "conformance/fresh", Parent: parent, Message: "new branch", Author: s.Author,
		Changes: []scm.FileChange{change("conformance/fresh.txt", "fresh\n")},
	})
	if err != nil {
		t.Fatalf("Commit to a new branch: %v", err)
	}
	if got := s.head(t, "conformance/fresh"); got != sha {
		t.Fatalf("new branch at %s, Commit returned %s", got, sha)
	}
	if got := s.read(t, "conformance/fresh", "conformance/fresh.txt"); got != "fresh\n" {
		t.Fatalf("file = %q", got)
	}
}

func testCommitStaleParent(t *testing.T, s *suite) {
	const b = "conformance/stale"
	stale := s.branch(t, b)
	current := s.commit(t, b, "first", change(s.f1, "first\n"))
	_, err := s.Provider.Commit(s.ctx, s.Repo, scm.CommitInput{
		Branch: b, Parent: stale, Message: "stale", Author: s.Author,
		Changes: []scm.FileChange{change(s.f1, "stale write\n"), change("conformance/stale.txt", "x\n")},
	})
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("Commit with a stale parent = %v, want ErrConflict", err)
	}
	if got := s.head(t, b); got != current {
		t.Fatalf("branch moved to %s after a rejected commit", got)
	}
	if got := s.read(t, b, s.f1); got != "first\n" {
		t.Fatalf("%s = %q after a rejected commit", s.f1, got)
	}
	s.assertMissing(t, b, "conformance/stale.txt")
}

// testCommitReplace rebuilds a PR branch on a base that moved (CommitInput.Replace): the branch
// ends at one new commit on the new base head, and a stale Replace changes nothing. A driver
// that cannot do it must say ErrNotSupported and leave the branch alone.
func testCommitReplace(t *testing.T, s *suite) {
	const b = "conformance/replace"
	s.branch(t, b)
	old := s.commit(t, b, "first", change(s.f1, "first\n"))
	moved := s.commit(t, s.Base, "base moves", change(s.f2, "moved\n"))
	in := scm.CommitInput{Branch: b, Parent: moved, Replace: old, Message: "rebuilt", Author: s.Author,
		Changes: []scm.FileChange{change(s.f1, "rebuilt\n")}}
	sha, err := s.Provider.Commit(s.ctx, s.Repo, in)
	if errors.Is(err, scm.ErrNotSupported) {
		if got := s.head(t, b); got != old {
			t.Fatalf("branch moved to %s although Replace is not supported", got)
		}
		t.Logf("%s: Replace is not supported: %v", s.Provider.Name(), err)
		return
	}
	if err != nil {
		t.Fatalf("Commit with Replace: %v", err)
	}
	if got := s.head(t, b); got != sha || !shaRe.MatchString(sha) {
		t.Fatalf("branch at %s, want the new commit %q", got, sha)
	}
	if s.read(t, b, s.f1) != "rebuilt\n" || s.read(t, b, s.f2) != "moved\n" {
		t.Fatalf("rebuilt branch: %s = %q, %s = %q", s.f1, s.read(t, b, s.f1), s.f2, s.read(t, b, s.f2))
	}
	// Replace names the commit the branch must be at; it no longer is.
	in.Changes = []scm.FileChange{change(s.f1, "stale\n")}
	if _, err := s.Provider.Commit(s.ctx, s.Repo, in); !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("Commit with a stale Replace = %v, want ErrConflict", err)
	}
	if got := s.head(t, b); got != sha {
		t.Fatalf("a stale Replace moved the branch to %s", got)
	}
}

func testFindPRNone(t *testing.T, s *suite) {
	s.branch(t, "conformance/no-pr")
	_, err := s.Provider.FindPR(s.ctx, s.Repo, "conformance/no-pr", s.Base)
	if !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("FindPR without a PR = %v, want ErrNotFound", err)
	}
}

func testOpenGetFindPR(t *testing.T, s *suite) {
	const head = "conformance/open"
	s.branch(t, head)
	headSHA := s.commit(t, head, "change", change(s.f1, "opened\n"))
	in := scm.NewPR{Title: "Bump dev", Body: "Body text\nwith two lines", Head: head, Base: s.Base, Labels: []string{"prflow", "env-dev"}}
	opened, err := s.Provider.OpenPR(s.ctx, s.Repo, in)
	if err != nil {
		t.Fatalf("OpenPR: %v", err)
	}
	for name, pr := range map[string]*scm.PullRequest{"OpenPR": opened, "GetPR": s.get(t, opened.Number)} {
		if pr.Number != opened.Number || pr.Title != in.Title || pr.Body != in.Body || pr.State != scm.PROpen ||
			pr.Head != head || pr.Base != s.Base || pr.HeadSHA != headSHA || pr.MergeSHA != "" || pr.URL == "" {
			t.Fatalf("%s = %+v", name, pr)
		}
		for _, l := range in.Labels {
			if !s.NoLabels && !slices.Contains(pr.Labels, l) {
				t.Fatalf("%s labels = %v, want %v", name, pr.Labels, in.Labels)
			}
		}
	}
	found, err := s.Provider.FindPR(s.ctx, s.Repo, head, s.Base)
	if err != nil || found.Number != opened.Number || found.State != scm.PROpen {
		t.Fatalf("FindPR = %+v, %v", found, err)
	}
	if _, err := s.Provider.GetPR(s.ctx, s.Repo, opened.Number+1000); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("GetPR(missing) = %v, want ErrNotFound", err)
	}
	s.settle(t, opened.Number)
	if pr := s.get(t, opened.Number); pr.Mergeability != scm.MergeClean && pr.Mergeability != scm.MergeUnknown {
		t.Fatalf("mergeability of a clean PR = %q", pr.Mergeability)
	}
}

func testMergeMethods(t *testing.T, s *suite) {
	for _, m := range []scm.MergeMethod{scm.MergeCommit, scm.Squash, scm.Rebase} {
		t.Run(string(m), func(t *testing.T) {
			head := "conformance/merge-" + string(m)
			file := "conformance/merged-" + string(m) + ".txt"
			// Each PR branches from the base the previous method left, so the f1 edits stack.
			pr := s.pr(t, head, change(file, "merged with "+string(m)+"\n"), change(s.f1, "changed by "+string(m)+"\n"))
			got, ok := s.mergeWith(t, pr, m)
			if !ok {
				return
			}
			if base := s.head(t, s.Base); base != got.MergeSHA {
				t.Fatalf("base at %s, merge SHA %s", base, got.MergeSHA)
			}
			if c := s.read(t, s.Base, file); c != "merged with "+string(m)+"\n" {
				t.Fatalf("merged file = %q", c)
			}
			after := s.get(t, pr.Number)
			if after.State != scm.PRMerged || after.MergeSHA != got.MergeSHA {
				t.Fatalf("GetPR after merge = %+v", after)
			}
			if _, err := s.Provider.Branch(s.ctx, s.Repo, head); !errors.Is(err, scm.ErrNotFound) {
				t.Fatalf("head branch after merge with DeleteBranch = %v, want ErrNotFound", err)
			}
		})
	}
}

// mergeWith is merge with DeleteBranch set; each method's PR starts from the current base so
// the f1 changes do not conflict with each other.
func (s *suite) mergeWith(t *testing.T, pr *scm.PullRequest, m scm.MergeMethod) (*scm.PullRequest, bool) {
	t.Helper()
	return s.mergeInput(t, pr, scm.MergeInput{Method: m, SHA: pr.HeadSHA, DeleteBranch: true})
}

func testMergeAfterBaseMoved(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/moved", change(s.f1, "from the PR\n"))
	s.CommitDirect(t, s.Base, map[string]string{"conformance/elsewhere.txt": "someone else\n"}, nil)
	if _, ok := s.merge(t, pr, scm.MergeCommit); !ok {
		if _, ok := s.merge(t, pr, scm.Squash); !ok {
			t.Fatal("neither merge nor squash is supported")
		}
	}
	if got := s.read(t, s.Base, s.f1); got != "from the PR\n" {
		t.Fatalf("PR change missing: %q", got)
	}
	if got := s.read(t, s.Base, "conformance/elsewhere.txt"); got != "someone else\n" {
		t.Fatalf("base change lost: %q", got)
	}
}

func testMergeStaleSHA(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/stale-sha", change(s.f1, "one\n"))
	s.commit(t, "conformance/stale-sha", "more", change("conformance/more.txt", "more\n"))
	s.settle(t, pr.Number)
	_, err := s.Provider.MergePR(s.ctx, s.Repo, pr.Number, scm.MergeInput{Method: scm.MergeCommit, SHA: pr.HeadSHA})
	if errors.Is(err, scm.ErrNotSupported) {
		_, err = s.Provider.MergePR(s.ctx, s.Repo, pr.Number, scm.MergeInput{Method: scm.Squash, SHA: pr.HeadSHA})
	}
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("MergePR with a stale SHA = %v, want ErrConflict", err)
	}
	if got := s.get(t, pr.Number); got.State != scm.PROpen {
		t.Fatalf("PR state %q after a refused merge", got.State)
	}
}

func testMergeConflict(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/conflict", change(s.f1, "ours\n"))
	s.CommitDirect(t, s.Base, map[string]string{s.f1: "theirs\n"}, nil)
	s.settle(t, pr.Number)
	if got := s.get(t, pr.Number); got.Mergeability != scm.MergeDirty && got.Mergeability != scm.MergeUnknown {
		t.Fatalf("mergeability of a conflicting PR = %q, want dirty", got.Mergeability)
	}
	_, err := s.Provider.MergePR(s.ctx, s.Repo, pr.Number, scm.MergeInput{Method: scm.MergeCommit, SHA: pr.HeadSHA})
	if errors.Is(err, scm.ErrNotSupported) {
		_, err = s.Provider.MergePR(s.ctx, s.Repo, pr.Number, scm.MergeInput{Method: scm.Squash, SHA: pr.HeadSHA})
	}
	if !errors.Is(err, scm.ErrNotMergeable) {
		t.Fatalf("MergePR of a conflicting PR = %v, want ErrNotMergeable", err)
	}
	if !strings.Contains(err.Error(), s.f1) {
		t.Fatalf("error %q does not name the conflicting file %s", err, s.f1)
	}
	if got := s.read(t, s.Base, s.f1); got != "theirs\n" {
		t.Fatalf("base changed by a refused merge: %q", got)
	}
	if got := s.get(t, pr.Number); got.State != scm.PROpen {
		t.Fatalf("PR state %q after a refused merge", got.State)
	}
}

func testMergeAlreadyMerged(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/twice", change("conformance/twice.txt", "x\n"))
	first, ok := s.merge(t, pr, scm.MergeCommit)
	if !ok {
		if first, ok = s.merge(t, pr, scm.Squash); !ok {
			t.Fatal("neither merge nor squash is supported")
		}
	}
	again, err := s.Provider.MergePR(s.ctx, s.Repo, pr.Number, scm.MergeInput{Method: scm.MergeCommit, SHA: pr.HeadSHA})
	if err != nil {
		t.Fatalf("MergePR of a merged PR: %v", err)
	}
	if again.State != scm.PRMerged || again.MergeSHA != first.MergeSHA {
		t.Fatalf("second MergePR = state %q merge SHA %q, want %s", again.State, again.MergeSHA, first.MergeSHA)
	}
	if base := s.head(t, s.Base); base != first.MergeSHA {
		t.Fatalf("base moved to %s by the second merge", base)
	}
}

func testClosePR(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/close", change("conformance/close.txt", "x\n"))
	if err := s.Provider.ClosePR(s.ctx, s.Repo, pr.Number); err != nil {
		t.Fatalf("ClosePR: %v", err)
	}
	got := s.get(t, pr.Number)
	if got.State != scm.PRClosed || got.MergeSHA != "" {
		t.Fatalf("after ClosePR: state %q merge SHA %q", got.State, got.MergeSHA)
	}
	found, err := s.Provider.FindPR(s.ctx, s.Repo, "conformance/close", s.Base)
	if err != nil || found.Number != pr.Number || found.State != scm.PRClosed {
		t.Fatalf("FindPR of a closed PR = %+v, %v", found, err)
	}
	s.assertMissing(t, s.Base, "conformance/close.txt")
}

func testRevertCommit(t *testing.T, s *suite) {
	before1, before2 := s.Files[s.f1], s.Files[s.f2]
	c := s.commit(t, s.Base, "to be reverted", change(s.f1, "bad change\n"), change("conformance/added.txt", "added\n"), del(s.f2))
	sha, err := s.Provider.Revert(s.ctx, s.Repo, scm.RevertInput{SHA: c, Base: s.Base, Branch: "conformance/revert", Author: s.Author, Message: "Revert bad change"})
	if err != nil {
		t.Fatalf("Revert: %v", err)
	}
	if got := s.head(t, "conformance/revert"); got != sha {
		t.Fatalf("revert branch at %s, Revert returned %s", got, sha)
	}
	if got := s.read(t, "conformance/revert", s.f1); got != before1 {
		t.Fatalf("%s after revert = %q, want %q", s.f1, got, before1)
	}
	if got := s.read(t, "conformance/revert", s.f2); got != before2 {
		t.Fatalf("%s after revert = %q, want %q", s.f2, got, before2)
	}
	s.assertMissing(t, "conformance/revert", "conformance/added.txt")
	if got := s.head(t, s.Base); got != c {
		t.Fatalf("base moved to %s: the revert belongs on its own branch", got)
	}
}

func testRevertMergeCommit(t *testing.T, s *suite) {
	before := s.Files[s.f1]
	pr := s.pr(t, "conformance/to-revert", change(s.f1, "merged change\n"), change("conformance/merged-new.txt", "new\n"))
	merged, ok := s.merge(t, pr, scm.MergeCommit)
	if !ok {
		return // without merge commits there is no merge commit to revert
	}
	sha, err := s.Provider.Revert(s.ctx, s.Repo, scm.RevertInput{SHA: merged.MergeSHA, Mainline: 1, Base: s.Base, Branch: "conformance/revert-merge", Author: s.Author})
	if err != nil {
		t.Fatalf("Revert of a merge commit: %v", err)
	}
	if !shaRe.MatchString(sha) {
		t.Fatalf("Revert returned %q", sha)
	}
	if got := s.read(t, "conformance/revert-merge", s.f1); got != before {
		t.Fatalf("%s after revert = %q, want %q", s.f1, got, before)
	}
	s.assertMissing(t, "conformance/revert-merge", "conformance/merged-new.txt")
	if got := s.read(t, "conformance/revert-merge", s.f2); got != s.Files[s.f2] {
		t.Fatalf("untouched file changed: %q", got)
	}
}

func testRevertConflict(t *testing.T, s *suite) {
	c := s.commit(t, s.Base, "first", change(s.f1, "first\n"), change("conformance/side.txt", "side\n"))
	s.commit(t, s.Base, "second", change(s.f1, "second\n"))
	_, err := s.Provider.Revert(s.ctx, s.Repo, scm.RevertInput{SHA: c, Base: s.Base, Branch: "conformance/revert-conflict", Author: s.Author})
	if !errors.Is(err, scm.ErrConflict) {
		t.Fatalf("Revert over a later change = %v, want ErrConflict", err)
	}
	var ce *scm.ConflictError
	if !errors.As(err, &ce) || !slices.Contains(ce.Files, s.f1) {
		t.Fatalf("Revert conflict = %v, want a *scm.ConflictError listing %s", err, s.f1)
	}
	if _, err := s.Provider.Branch(s.ctx, s.Repo, "conformance/revert-conflict"); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("a failed revert left its branch behind (%v)", err)
	}
}

func testComment(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/comment", change("conformance/comment.txt", "x\n"))
	body := "prflow: deployed to dev ✅"
	if err := s.Provider.Comment(s.ctx, s.Repo, pr.Number, body); err != nil {
		t.Fatalf("Comment: %v", err)
	}
	if s.Comments != nil {
		if got := s.Comments(t, pr.Number); !slices.Contains(got, body) {
			t.Fatalf("comments = %q, want %q among them", got, body)
		}
	}
}

func testListComments(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/list-comments", change("conformance/list-comments.txt", "x\n"))
	got, err := s.Provider.ListComments(s.ctx, s.Repo, pr.Number)
	if err != nil || len(got) != 0 {
		t.Fatalf("ListComments of a new PR = %v, %v; want none", got, err)
	}
	bodies := []string{"first", "second ✅\n<!-- prflow:r/s/x -->"}
	for _, b := range bodies {
		if err := s.Provider.Comment(s.ctx, s.Repo, pr.Number, b); err != nil {
			t.Fatalf("Comment: %v", err)
		}
	}
	got, err = s.Provider.ListComments(s.ctx, s.Repo, pr.Number)
	if err != nil {
		t.Fatalf("ListComments: %v", err)
	}
	if len(got) != 2 || got[0].Body != bodies[0] || got[1].Body != bodies[1] || got[0].ID == "" || got[0].ID == got[1].ID {
		t.Fatalf("ListComments = %+v, want %q oldest first with distinct ids", got, bodies)
	}
	if _, err := s.Provider.ListComments(s.ctx, s.Repo, pr.Number+1000); !errors.Is(err, scm.ErrNotFound) {
		t.Fatalf("ListComments of a missing PR: %v, want ErrNotFound", err)
	}
}

// testCommentOnce: a comment posted with a key is found again by its hidden marker and not
// posted twice (a redelivered job); another key posts its own.
func testCommentOnce(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/comment-once", change("conformance/comment-once.txt", "x\n"))
	const body = "**prflow**: promoted to dev"
	for i, want := range []bool{true, false, false} {
		posted, err := scm.CommentOnce(s.ctx, s.Provider, s.Repo, pr.Number, "run-1/dev/comment", body)
		if err != nil || posted != want {
			t.Fatalf("CommentOnce #%d = %v, %v; want posted=%v", i+1, posted, err, want)
		}
	}
	if posted, err := scm.CommentOnce(s.ctx, s.Provider, s.Repo, pr.Number, "run-2/dev/comment", body); err != nil || !posted {
		t.Fatalf("CommentOnce with another key = %v, %v; want posted", posted, err)
	}
	got, err := s.Provider.ListComments(s.ctx, s.Repo, pr.Number)
	if err != nil {
		t.Fatalf("ListComments: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("comments = %+v, want one per key", got)
	}
	for _, c := range got {
		if !strings.HasPrefix(c.Body, body) {
			t.Fatalf("comment %q does not start with the text posted", c.Body)
		}
	}
	if !strings.Contains(got[0].Body, scm.CommentMarker("run-1/dev/comment")) {
		t.Fatalf("comment %q carries no marker", got[0].Body)
	}
}

// editor is the provider as a CommentEditor: every driver must edit comments.
func (s *suite) editor(t *testing.T) scm.CommentEditor {
	t.Helper()
	ed, ok := s.Provider.(scm.CommentEditor)
	if !ok {
		t.Fatalf("%T does not implement scm.CommentEditor", s.Provider)
	}
	return ed
}

// comments lists the PR's comments through the provider.
func (s *suite) comments(t *testing.T, n int) []scm.PRComment {
	t.Helper()
	got, err := s.Provider.ListComments(s.ctx, s.Repo, n)
	if err != nil {
		t.Fatalf("ListComments: %v", err)
	}
	return got
}

// testEditComment: EditComment replaces one comment's body and keeps its id; a missing
// comment is ErrNotFound, another user's comment ErrForbidden (left as it was), and a bad id
// or an empty body is refused naming what is wrong.
func testEditComment(t *testing.T, s *suite) {
	if s.CommentAs == nil {
		t.Fatal("scmconformance: Env.CommentAs is required by EditComment")
	}
	ed := s.editor(t)
	pr := s.pr(t, "conformance/edit-comment", change("conformance/edit-comment.txt", "x\n"))
	for _, b := range []string{"first", "second"} {
		if err := s.Provider.Comment(s.ctx, s.Repo, pr.Number, b); err != nil {
			t.Fatalf("Comment: %v", err)
		}
	}
	before := s.comments(t, pr.Number)
	const edited = "second, edited ✅ — naïve"
	if err := ed.EditComment(s.ctx, s.Repo, pr.Number, before[1].ID, edited); err != nil {
		t.Fatalf("EditComment: %v", err)
	}
	after := s.comments(t, pr.Number)
	if len(after) != 2 || after[0] != before[0] || after[1].ID != before[1].ID || after[1].Body != edited {
		t.Fatalf("after EditComment: %+v, want %q edited in place (was %+v)", after, edited, before)
	}
	if s.Comments != nil {
		if got := s.Comments(t, pr.Number); !slices.Equal(got, []string{"first", edited}) {
			t.Fatalf("the forge holds %q, want [first %q]", got, edited)
		}
	}

	if err := ed.EditComment(s.ctx, s.Repo, pr.Number, "999999", "x"); !errors.Is(err, scm.ErrNotFound) || !strings.Contains(err.Error(), "999999") {
		t.Fatalf("EditComment of a missing comment: %v, want ErrNotFound naming it", err)
	}
	theirs := s.CommentAs(t, pr.Number, "someone else's")
	err := ed.EditComment(s.ctx, s.Repo, pr.Number, theirs, "hijacked")
	if !errors.Is(err, scm.ErrForbidden) || !strings.Contains(err.Error(), string(s.Repo)) {
		t.Fatalf("EditComment of another user's comment: %v, want ErrForbidden naming %s", err, s.Repo)
	}
	if got := s.comments(t, pr.Number); len(got) != 3 || got[2].Body != "someone else's" {
		t.Fatalf("another user's comment changed: %+v", got)
	}
	if err := ed.EditComment(s.ctx, s.Repo, pr.Number, "12abc", "x"); err == nil || !strings.Contains(err.Error(), `"12abc"`) {
		t.Fatalf("EditComment with a malformed id: %v, want an error naming it", err)
	}
	if err := ed.EditComment(s.ctx, s.Repo, pr.Number, before[0].ID, " \n"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("EditComment with an empty body: %v, want refused", err)
	}
	if got := s.comments(t, pr.Number); got[0] != before[0] {
		t.Fatalf("a refused edit changed the comment: %+v", got[0])
	}
}

// testUpsertComment: UpsertComment posts once, then edits that comment in place (same id, one
// comment), leaves an identical body alone, keeps another key's comment apart, and returns a
// failed edit without posting a second comment.
func testUpsertComment(t *testing.T, s *suite) {
	if s.FailEdits == nil {
		t.Fatal("scmconformance: Env.FailEdits is required by UpsertComment")
	}
	s.editor(t)
	pr := s.pr(t, "conformance/upsert-comment", change("conformance/upsert-comment.txt", "x\n"))
	const key = "run-1/dev/diff"
	upsert := func(key, body, want string) {
		t.Helper()
		got, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, key, body)
		if err != nil || got != want {
			t.Fatalf("UpsertComment(%q) = %q, %v; want %q", body, got, err, want)
		}
	}
	upsert(key, "diff: 1 resource changed", scm.CommentPosted)
	first := s.comments(t, pr.Number)
	if len(first) != 1 || !strings.HasPrefix(first[0].Body, "diff: 1 resource changed") || !strings.Contains(first[0].Body, scm.CommentMarker(key)) {
		t.Fatalf("after the first upsert: %+v", first)
	}
	upsert(key, "diff: 2 resources changed ✅", scm.CommentUpdated)
	upsert(key, "diff: 2 resources changed ✅\n", scm.CommentUnchanged)
	got := s.comments(t, pr.Number)
	if len(got) != 1 || got[0].ID != first[0].ID || !strings.HasPrefix(got[0].Body, "diff: 2 resources changed ✅") ||
		!strings.Contains(got[0].Body, scm.CommentMarker(key)) {
		t.Fatalf("after re-pushes: %+v, want comment %s edited in place", got, first[0].ID)
	}
	if s.Comments != nil {
		if held := s.Comments(t, pr.Number); len(held) != 1 || !strings.HasPrefix(held[0], "diff: 2 resources changed ✅") {
			t.Fatalf("the forge holds %q", held)
		}
	}
	upsert("run-1/prod/diff", "prod diff", scm.CommentPosted)

	s.FailEdits(t)
	_, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, key, "diff: 3 resources changed")
	if err == nil || !strings.Contains(err.Error(), "edit") || errors.Is(err, scm.ErrForbidden) {
		t.Fatalf("UpsertComment with edits failing: %v, want the edit's error", err)
	}
	got = s.comments(t, pr.Number)
	if len(got) != 2 || !strings.HasPrefix(got[0].Body, "diff: 2 resources changed ✅") {
		t.Fatalf("after a failed edit: %+v, want both comments as they were and no new one", got)
	}
}

// testUpsertCommentConcurrent: re-pushes racing to update the same comment all succeed and
// leave one comment holding one of their bodies.
func testUpsertCommentConcurrent(t *testing.T, s *suite) {
	s.editor(t)
	pr := s.pr(t, "conformance/upsert-concurrent", change("conformance/upsert-concurrent.txt", "x\n"))
	const key = "run-7/dev/diff"
	if _, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, key, "v0"); err != nil {
		t.Fatalf("UpsertComment: %v", err)
	}
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, key, fmt.Sprintf("v%d", i+1))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent UpsertComment: %v", err)
	}
	got := s.comments(t, pr.Number)
	if len(got) != 1 {
		t.Fatalf("concurrent upserts left %d comments: %+v", len(got), got)
	}
	if body, _, _ := strings.Cut(got[0].Body, "\n"); !slices.Contains([]string{"v1", "v2", "v3", "v4"}, body) {
		t.Fatalf("comment = %q, want one of the racing bodies", got[0].Body)
	}
}

// testCommentRefused: a forge that refuses comments (locked conversation, no permission)
// answers Comment, EditComment and UpsertComment with an error matching ErrForbidden that
// names the repo, so a step can tell it apart, record a warning and go on; nothing is posted.
func testCommentRefused(t *testing.T, s *suite) {
	if s.RefuseComments == nil {
		t.Fatal("scmconformance: Env.RefuseComments is required by CommentRefused")
	}
	pr := s.pr(t, "conformance/comment-refused", change("conformance/comment-refused.txt", "x\n"))
	if _, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, "run-1/dev/diff", "before the lock"); err != nil {
		t.Fatalf("UpsertComment: %v", err)
	}
	before := s.comments(t, pr.Number)
	s.RefuseComments(t, pr.Number)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, scm.ErrForbidden) || errors.Is(err, scm.ErrRateLimited) || scm.Transient(err) ||
			!strings.Contains(err.Error(), string(s.Repo)) {
			t.Fatalf("%s on a forge refusing comments: %v, want ErrForbidden naming %s", what, err, s.Repo)
		}
	}
	check("Comment", s.Provider.Comment(s.ctx, s.Repo, pr.Number, "refused"))
	check("EditComment", s.editor(t).EditComment(s.ctx, s.Repo, pr.Number, before[0].ID, "refused"))
	_, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, "run-1/dev/diff", "after the lock")
	check("UpsertComment (edit)", err)
	_, err = scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, "run-1/prod/diff", "a new key")
	check("UpsertComment (post)", err)
	if got := s.comments(t, pr.Number); !slices.Equal(got, before) {
		t.Fatalf("comments after refusals = %+v, want %+v", got, before)
	}
}

// testCommentSizeCap: the driver's CommentLimit is one the forge holds to (a longer comment is
// refused), UpsertComment cuts an over-long body to fit instead of failing, and a body capped
// with CapComment and CommentBudget keeps its link; multi-byte text stays valid UTF-8.
func testCommentSizeCap(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/comment-cap", change("conformance/comment-cap.txt", "x\n"))
	const key = "run-1/dev/diff"
	lim := scm.CommentLimit(s.Provider)
	line := "+  image: web:1.1 — déployé ✅\n" // 34 bytes, 28 characters
	size := max(lim, 100_000) + 5000
	long := strings.Repeat(line, size/len(line)+1)
	if lim > 0 {
		if err := s.Provider.Comment(s.ctx, s.Repo, pr.Number, strings.Repeat("x", lim+1)); err == nil || errors.Is(err, scm.ErrForbidden) {
			t.Fatalf("a comment of %d characters (limit %d): %v, want the forge's refusal", lim+1, lim, err)
		}
	}
	if got, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, key, long); err != nil || got != scm.CommentPosted {
		t.Fatalf("UpsertComment of %d bytes = %q, %v", len(long), got, err)
	}
	cs := s.comments(t, pr.Number)
	body := cs[len(cs)-1].Body
	if !utf8.ValidString(body) || !strings.Contains(body, scm.CommentMarker(key)) || (lim > 0 && len(body) > lim) {
		t.Fatalf("posted %d bytes (limit %d), valid UTF-8 %v", len(body), lim, utf8.ValidString(body))
	}
	if lim == 0 && !strings.HasPrefix(body, strings.TrimRight(long, "\n")) {
		t.Fatal("a driver without a limit cut the body")
	}
	if lim > 0 && !strings.Contains(body, "cut to fit") {
		t.Fatalf("an over-long body was cut without saying so: ...%q", body[max(len(body)-200, 0):])
	}
	const link = "[Full diff](https://prflow.example/runs/r1/stages/dev/diff)"
	capped := scm.CapComment(strings.Repeat("é", len(long)/2), scm.CommentBudget(s.Provider, key), link)
	if got, err := scm.UpsertComment(s.ctx, s.Provider, s.Repo, pr.Number, key, capped); err != nil || got != scm.CommentUpdated {
		t.Fatalf("UpsertComment of a capped body = %q, %v", got, err)
	}
	cs = s.comments(t, pr.Number)
	body = cs[len(cs)-1].Body
	if len(cs) != 1 || !utf8.ValidString(body) || (lim > 0 && (len(body) > lim || !strings.Contains(body, link))) {
		t.Fatalf("after a capped edit: %d comments, %d bytes (limit %d)", len(cs), len(body), lim)
	}
}

func testStatus(t *testing.T, s *suite) {
	sha := s.head(t, s.Base)
	st := scm.Status{Context: "prflow/conformance", State: scm.StatusPending, Description: "running", TargetURL: "https://prflow.example.com/runs/1"}
	if err := s.Provider.SetStatus(s.ctx, s.Repo, sha, st); err != nil {
		t.Fatalf("SetStatus: %v", err)
	}
	st.State, st.Description = scm.StatusSuccess, "done"
	if err := s.Provider.SetStatus(s.ctx, s.Repo, sha, st); err != nil {
		t.Fatalf("SetStatus again: %v", err)
	}
	if s.Statuses != nil {
		got := s.Statuses(t, sha)
		var found *scm.Status
		for i := range got {
			if got[i].Context == st.Context {
				found = &got[i]
			}
		}
		if found == nil || found.State != scm.StatusSuccess || found.Description != "done" || found.TargetURL != st.TargetURL {
			t.Fatalf("statuses = %+v, want the latest %+v", got, st)
		}
	}
}

// testChangedBetween: what a push changed, from its before to its after commit (over two
// commits), as the TriggerPaths step asks when a push webhook did not list every file.
func testChangedBetween(t *testing.T, s *suite) {
	cmp, ok := s.Provider.(scm.Comparer)
	if !ok {
		t.Fatalf("%s driver does not implement scm.Comparer", s.Provider.Name())
	}
	before := s.branch(t, "conformance/between")
	s.commit(t, "conformance/between", "one", change(s.f1, "between\n"))
	after := s.commit(t, "conformance/between", "two", del(s.f2), change("conformance/between/new.txt", "new\n"))
	got, err := cmp.ChangedBetween(s.ctx, s.Repo, before, after)
	if err != nil {
		t.Fatalf("ChangedBetween: %v", err)
	}
	wantSameFiles(t, "ChangedBetween", got, "conformance/between/new.txt", s.f1, s.f2)
	if _, err := cmp.ChangedBetween(s.ctx, s.Repo, before, strings.Repeat("0", 39)+"1"); err == nil {
		t.Error("ChangedBetween to an unknown commit: no error")
	}
}

func testChangedFiles(t *testing.T, s *suite) {
	pr := s.pr(t, "conformance/changed", change(s.f1, "changed\n"), del(s.f2), change("conformance/changed/new.txt", "new\n"))
	// A base change after the branch point is not part of the PR.
	s.CommitDirect(t, s.Base, map[string]string{"conformance/base-only.txt": "base\n"}, nil)
	s.settle(t, pr.Number)
	got, err := s.Provider.ChangedFiles(s.ctx, s.Repo, pr.Number)
	if err != nil {
		t.Fatalf("ChangedFiles: %v", err)
	}
	wantSameFiles(t, "ChangedFiles", got, "conformance/changed/new.txt", s.f1, s.f2)
}

// wantSameFiles fails the test unless got lists the files of want, in any order.
func wantSameFiles(t *testing.T, call string, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	sorted := append([]string(nil), got...)
	sort.Strings(sorted)
	if fmt.Sprint(sorted) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", call, got, want)
	}
}

// testConcurrentCommits: 10 writers commit to one branch at once, each re-reading the head and
// retrying when its parent went stale. All 10 commits must land and none may be lost.
func testConcurrentCommits(t *testing.T, s *suite) {
	const b, writers = "conformance/concurrent", 10
	s.branch(t, b)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			for attempt := 0; attempt < 60; attempt++ {
				ref, err := s.Provider.Branch(s.ctx, s.Repo, b)
				if err != nil {
					errs <- err
					return
				}
				_, err = s.Provider.Commit(s.ctx, s.Repo, scm.CommitInput{
					Branch: b, Parent: ref.SHA, Message: fmt.Sprintf("writer %d", i), Author: s.Author,
					Changes: []scm.FileChange{change(fmt.Sprintf("conformance/concurrent/%d.txt", i), fmt.Sprintf("writer %d\n", i))},
				})
				if err == nil {
					return
				}
				if !errors.Is(err, scm.ErrConflict) {
					errs <- fmt.Errorf("writer %d: %w", i, err)
					return
				}
				// Back off like a worker would (NakWithDelay), with jitter so writers spread.
				time.Sleep(time.Duration(rand.IntN(20*(attempt+1))) * time.Millisecond)
			}
			errs <- fmt.Errorf("writer %d: still conflicting after 60 attempts", i)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for i := range writers {
		if got := s.read(t, b, fmt.Sprintf("conformance/concurrent/%d.txt", i)); got != fmt.Sprintf("writer %d\n", i) {
			t.Fatalf("writer %d's file = %q", i, got)
		}
	}
}

// testIsAncestor: a commit contains itself and every earlier commit of its history, and never a
// later commit, a sibling branch's commit, or an unknown one; answers hold when asked again
// (cached) and when asked from many goroutines at once.
func testIsAncestor(t *testing.T, s *suite) {
	const b = "conformance/ancestry"
	root := s.branch(t, b)
	c1 := s.commit(t, b, "first", change(s.f1, "ancestry 1\n"))
	c2 := s.commit(t, b, "second", change(s.f1, "ancestry 2\n"))
	sibling := s.CommitDirect(t, s.Base, map[string]string{"conformance/sibling.txt": "sibling\n"}, nil)
	unknown := strings.Repeat("e", 40)
	cases := []struct {
		name                 string
		ancestor, descendant string
		want                 bool
	}{
		{"itself", c2, c2, true},
		{"parent", c1, c2, true},
		{"branch point", root, c2, true},
		{"branch point of the sibling", root, sibling, true},
		{"later commit", c2, c1, false},
		{"later commit of the base", sibling, root, false},
		{"sibling into branch", sibling, c2, false},
		{"branch into sibling", c1, sibling, false},
		{"upper-case SHAs", strings.ToUpper(c1), strings.ToUpper(c2), true},
	}
	for round := 0; round < 2; round++ { // the second round answers from the driver's cache
		for _, c := range cases {
			got, err := s.Provider.IsAncestor(s.ctx, s.Repo, c.ancestor, c.descendant)
			if err != nil || got != c.want {
				t.Fatalf("round %d, %s: IsAncestor(%.12s, %.12s) = %v, %v; want %v", round, c.name, c.ancestor, c.descendant, got, err, c.want)
			}
		}
	}
	for _, bad := range [][2]string{{unknown, c2}, {c1, unknown}} {
		if got, err := s.Provider.IsAncestor(s.ctx, s.Repo, bad[0], bad[1]); !errors.Is(err, scm.ErrNotFound) || got {
			t.Fatalf("IsAncestor(%.12s, %.12s) with an unknown commit = %v, %v; want ErrNotFound", bad[0], bad[1], got, err)
		}
	}
	for _, bad := range [][2]string{{"main", c2}, {c1, c2[:12]}, {c1, ""}} {
		_, err := s.Provider.IsAncestor(s.ctx, s.Repo, bad[0], bad[1])
		if err == nil || !strings.Contains(err.Error(), "not a full commit SHA") {
			t.Fatalf("IsAncestor(%q, %q) = %v; want an error naming the bad SHA", bad[0], bad[1], err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(cases))
	for i := range 4 {
		for _, c := range cases {
			wg.Go(func() {
				if got, err := s.Provider.IsAncestor(s.ctx, s.Repo, c.ancestor, c.descendant); err != nil || got != c.want {
					errs <- fmt.Errorf("concurrent %d, %s: %v, %v; want %v", i, c.name, got, err, c.want)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testIsAncestorMergeCommit: after two PRs are merged one after the other, the later merge
// commit contains the earlier one and both PR heads; the earlier one contains neither the later
// merge nor the later PR's head. This is what a GitOps gate asks when an app synced past its
// own merge.
func testIsAncestorMergeCommit(t *testing.T, s *suite) {
	pr1 := s.pr(t, "conformance/anc-one", change("conformance/anc/one.txt", "one\n"))
	pr2 := s.pr(t, "conformance/anc-two", change("conformance/anc/two.txt", "two\n"))
	m1, _ := s.merge(t, pr1, scm.MergeCommit)
	m2, _ := s.merge(t, s.get(t, pr2.Number), scm.MergeCommit)
	if m1.MergeSHA == "" || m2.MergeSHA == "" {
		t.Fatalf("merge SHAs %q, %q", m1.MergeSHA, m2.MergeSHA)
	}
	cases := []struct {
		ancestor, descendant string
		want                 bool
	}{
		{m1.MergeSHA, m2.MergeSHA, true},
		{pr1.HeadSHA, m2.MergeSHA, true},
		{pr2.HeadSHA, m2.MergeSHA, true},
		{m2.MergeSHA, m1.MergeSHA, false},
		{pr2.HeadSHA, m1.MergeSHA, false},
		{m1.MergeSHA, pr2.HeadSHA, false},
	}
	for i, c := range cases {
		got, err := s.Provider.IsAncestor(s.ctx, s.Repo, c.ancestor, c.descendant)
		if err != nil || got != c.want {
			t.Fatalf("case %d: IsAncestor(%.12s, %.12s) = %v, %v; want %v", i, c.ancestor, c.descendant, got, err, c.want)
		}
	}
}

// testIsAncestorUnrelated: commits of histories with no common commit never contain each other,
// and that is an answer (false), not an error.
func testIsAncestorUnrelated(t *testing.T, s *suite) {
	if s.CommitOrphan == nil {
		t.Fatal("scmconformance: Env.CommitOrphan is required by this case")
	}
	head := s.head(t, s.Base)
	orphan := s.CommitOrphan(t, "conformance/orphan", map[string]string{"orphan.txt": "unrelated\n"})
	for _, c := range [][2]string{{head, orphan}, {orphan, head}} {
		got, err := s.Provider.IsAncestor(s.ctx, s.Repo, c[0], c[1])
		if err != nil || got {
			t.Fatalf("IsAncestor(%.12s, %.12s) across unrelated histories = %v, %v; want false, nil", c[0], c[1], got, err)
		}
	}
}
