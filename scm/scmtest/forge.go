package scmtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MergeState is a pull request's mergeability as the fakes compute it.
type MergeState string

// Mergeability states. Unknown is answered while the fake is "still computing" (see
// WithMergeabilityPolls); a test can also force any state with ForceMergeState.
const (
	MergeUnknown MergeState = "unknown"
	MergeClean   MergeState = "clean"
	MergeDirty   MergeState = "dirty"   // conflicts
	MergeBlocked MergeState = "blocked" // a required status context is not success
)

// PRState is a pull request's lifecycle state.
type PRState string

// Pull request states (GitLab "opened", Bitbucket "OPEN"/"DECLINED" map onto these).
const (
	PROpen   PRState = "open"
	PRClosed PRState = "closed"
	PRMerged PRState = "merged"
)

// PullRequest is a snapshot of a pull/merge request kept by a fake.
type PullRequest struct {
	ID                 int64
	Number             int
	Title, Body        string
	Head, Base         string // branch names
	HeadSHA, BaseSHA   string // live while open, frozen when merged or closed
	State              PRState
	Draft              bool
	Locked             bool // conversation locked: comments and edits refused (LockConversation)
	Labels             []string
	Reviewers          []string
	Comments           []Comment
	Author             string
	MergedBy           string
	MergeMethod        string
	MergeCommitSHA     string
	SquashCommitSHA    string // GitLab squash commit
	RemoveSourceBranch bool
	Squash             bool
	CreatedAt          time.Time
	UpdatedAt          time.Time
	MergedAt           time.Time
	ClosedAt           time.Time
}

// Comment is a PR comment (GitHub issue comment, GitLab note, Bitbucket comment).
type Comment struct {
	ID        int64
	Body      string
	User      string
	CreatedAt time.Time
	UpdatedAt time.Time // CreatedAt until the comment is edited
}

// Status is a commit status. State is normalised to pending, success, failure or error;
// Native keeps the forge's own word (GitLab "running", Bitbucket "INPROGRESS", ...).
type Status struct {
	ID          int64
	SHA         string
	Context     string // GitHub context, GitLab name, Bitbucket key
	Name        string // Bitbucket name (display)
	State       string
	Native      string
	Description string
	TargetURL   string
	Ref         string
	Creator     string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Forge is the state shared by the three fakes: repos on a GitServer, pull requests, statuses,
// comments, labels, mergeability, faults, recorded calls, rate-limit accounting and webhooks.
// GitHub, GitLab and Bitbucket embed it, so these methods are available on each of them.
type Forge struct {
	kind      string
	set       *settings
	git       *GitServer
	log       *slog.Logger
	mw        *middleware
	committer Signature
	prRef     string         // format of the per-PR head ref ("refs/pull/%d/head"), "" for none
	mux       *http.ServeMux // the fake's routes
	handler   http.Handler

	mu           sync.Mutex
	repos        map[string]*repoState
	nextID       int64
	baseURL      mountURL
	webBase      string // set once, by WithWebBase
	srv          *httptest.Server
	baseModified int
	rate         map[string]*rateWindow
	hooks        *hookSender
	stopListen   func()
}

type repoState struct {
	id          int64
	owner, name string
	created     time.Time
	repo        *bareRepo
	defBranch   string // HEAD's branch, read once when the repo is registered

	mu  sync.Mutex // serialises API operations on this repo's PRs, statuses and refs
	prs []*prState

	// hmu guards openHeads, read by ref-update listeners that must not take mu.
	hmu       sync.Mutex
	openHeads map[string][]int // head branch → numbers of open PRs
	statuses  map[string][]*Status
	required  map[string][]string // base branch → required status contexts
}

func (rs *repoState) key() string { return rs.owner + "/" + rs.name }

// track records whether pr is open under its head branch, for synchronize events.
func (rs *repoState) track(pr *prState) {
	rs.hmu.Lock()
	defer rs.hmu.Unlock()
	nums := slices.DeleteFunc(rs.openHeads[pr.Head], func(n int) bool { return n == pr.Number })
	if pr.State == PROpen {
		nums = append(nums, pr.Number)
	}
	rs.openHeads[pr.Head] = nums
}

func (rs *repoState) openOnHead(branch string) []int {
	rs.hmu.Lock()
	defer rs.hmu.Unlock()
	return slices.Clone(rs.openHeads[branch])
}

type prState struct {
	PullRequest
	// mergeability cache
	mkey        string
	mstate      MergeState
	conflicts   []string
	unknownLeft int
	forced      MergeState
	testMerge   string // GitHub's test merge commit for mkey
	testKey     string
}

// forgeGit returns the GitServer a fake should use: WithGitServer's, or a new one for t.
func forgeGit(t testing.TB, opts []Option) *GitServer {
	t.Helper()
	if s := newSettings(opts); s.git != nil {
		return s.git
	}
	return NewGitServer(t, opts...)
}

func newForge(kind string, gs *GitServer, opts []Option) (*Forge, error) {
	if gs == nil {
		return nil, fmt.Errorf("%w: %s fake needs a GitServer", ErrInvalid, kind)
	}
	s := newSettings(opts)
	f := &Forge{kind: kind, set: s, git: gs, log: s.logger, mw: &middleware{}, repos: map[string]*repoState{},
		rate: map[string]*rateWindow{}, webBase: s.webBase, nextID: 1000}
	switch kind {
	case "github":
		f.committer = Signature{Name: "GitHub", Email: "noreply@github.com"}
		f.prRef = "refs/pull/%d/head"
	case "gitlab":
		f.committer = Signature{Name: "GitLab", Email: "noreply@gitlab.com"}
		f.prRef = "refs/merge-requests/%d/head"
	default:
		f.committer = Signature{Name: "Bitbucket", Email: "noreply@bitbucket.org"}
	}
	if s.committer.Name != "" {
		f.committer = s.committer
	}
	for _, tk := range s.tokens {
		gs.tokens.add(tk.token, tk.user, tk.repos)
	}
	f.hooks = newHookSender(f)
	if s.webhookURL != "" {
		f.hooks.register(s.webhookURL, s.webhookSecret)
	}
	f.stopListen = gs.OnRefUpdate(f.onRefUpdate)
	return f, nil
}

// start serves the fake on a loopback listener and registers cleanup with t.
// fakeAPI is what each fake forge adds to the shared Forge: its routes, the headers its
// answers carry and its request handler.
type fakeAPI interface {
	routes()
	decorate(w http.ResponseWriter, r *http.Request)
	serve(w http.ResponseWriter, r *http.Request)
}

// newFake builds a fake forge of kind on gs: the shared Forge, its API (api wraps the Forge in
// the forge's own type) mounted with hooks, which shapes the webhooks it sends.
func newFake[A fakeAPI](kind string, gs *GitServer, opts []Option, hooks func(ctx context.Context, url, secret string, ev WebhookEvent) (*http.Request, error), api func(*Forge) A) (A, error) {
	f, err := newForge(kind, gs, opts)
	if err != nil {
		var zero A
		return zero, err
	}
	f.mux = http.NewServeMux()
	a := api(f)
	f.mount(a, hooks)
	return a, nil
}

// mount wires a fake's API into f: the fault middleware around its handler and hooks, which
// shapes the webhooks it sends.
func (f *Forge) mount(api fakeAPI, hooks func(ctx context.Context, url, secret string, ev WebhookEvent) (*http.Request, error)) {
	f.hooks.build = hooks
	f.mw.decorate = api.decorate
	api.routes()
	f.handler = f.mw.wrap(http.HandlerFunc(api.serve))
}

// startFake builds a fake with newHandler on the test's git server (or WithGitServer's) and
// serves it until the test ends.
func startFake[F interface{ start(testing.TB) }](t testing.TB, name string, opts []Option, newHandler func(*GitServer, ...Option) (F, error)) F {
	t.Helper()
	fake, err := newHandler(forgeGit(t, opts), opts...)
	if err != nil {
		t.Fatalf("scmtest.%s: %v", name, err)
	}
	fake.start(t)
	return fake
}

func (f *Forge) start(t testing.TB) {
	t.Helper()
	srv := httptest.NewServer(f)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	f.baseURL.set(srv.URL)
	t.Cleanup(func() { _ = f.Close() })
}

// ServeHTTP serves the forge's REST API.
func (f *Forge) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.handler.ServeHTTP(w, r) }

// URL is the fake's base URL (http://127.0.0.1:port), without the API prefix.
func (f *Forge) URL() string { return f.baseURL.get() }

// SetBaseURL tells a handler-only fake (New*Handler) where it is mounted.
func (f *Forge) SetBaseURL(u string) { f.baseURL.set(u) }

func (f *Forge) web() string {
	if f.webBase != "" {
		return f.webBase
	}
	return f.URL()
}

// base is the fake's URL, or the request's scheme://host when none was set (handler mode).
func (f *Forge) base(r *http.Request) string {
	if u := f.URL(); u != "" {
		return u
	}
	return requestBase(r)
}

func (f *Forge) webFor(r *http.Request) string {
	if w := f.web(); w != "" {
		return w
	}
	return requestBase(r)
}

// Git is the GitServer holding the fake's repos; clone URLs point at it.
func (f *Forge) Git() *GitServer { return f.git }

// Close stops the listeners and the webhook sender.
func (f *Forge) Close() error {
	f.stopListen()
	f.hooks.close()
	closeServer(&f.mu, &f.srv)
	return nil
}

// AddToken accepts token for user on the API and for git over HTTP; repos limits visibility.
func (f *Forge) AddToken(token, user string, repos ...string) { f.git.tokens.add(token, user, repos) }

// InjectFault makes matching API requests misbehave (see Fault).
func (f *Forge) InjectFault(fl Fault) error { return f.mw.inject(fl, nil) }

// ClearFaults removes all injected faults, including pending rate limits.
func (f *Forge) ClearFaults() { f.mw.clear() }

// Calls returns the API requests received so far, in order.
func (f *Forge) Calls() []Call { return f.mw.snapshot() }

// ResetCalls forgets the recorded calls.
func (f *Forge) ResetCalls() { f.mw.reset() }

// InjectBaseModified makes the next n merges fail as if the base branch moved while merging
// (GitHub 405 "Base branch was modified", GitLab/Bitbucket their conflict answers).
func (f *Forge) InjectBaseModified(n int) {
	f.mu.Lock()
	f.baseModified += n
	f.mu.Unlock()
}

func (f *Forge) takeBaseModified() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.baseModified > 0 {
		f.baseModified--
		return true
	}
	return false
}

func (f *Forge) newID() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return f.nextID
}

// CreateRepo creates a repo with one initial commit on the default branch and returns its SHA.
func (f *Forge) CreateRepo(owner, name string, files map[string]string) (string, error) {
	sha, err := f.git.CreateRepo(owner, name, files)
	if err != nil {
		return "", err
	}
	if _, err := f.repoState(owner, name); err != nil {
		return "", err
	}
	return sha, nil
}

// repoState returns the forge's record of a repo, registering repos created directly on the
// GitServer on first use.
func (f *Forge) repoState(owner, name string) (*repoState, error) {
	key := owner + "/" + name
	f.mu.Lock()
	rs, ok := f.repos[key]
	f.mu.Unlock()
	if ok {
		return rs, nil
	}
	br, err := f.git.open(owner, name)
	if err != nil {
		return nil, err
	}
	def, err := f.git.DefaultBranch(owner, name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rs, ok := f.repos[key]; ok {
		return rs, nil
	}
	f.nextID++
	rs = &repoState{id: f.nextID, owner: owner, name: name, created: time.Now().UTC(), repo: br, defBranch: def,
		statuses: map[string][]*Status{}, required: map[string][]string{}, openHeads: map[string][]int{}}
	f.repos[key] = rs
	return rs, nil
}

// repoByID finds a registered repo by numeric id (GitLab project ids).
func (f *Forge) repoByID(id int64) *repoState {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rs := range f.repos {
		if rs.id == id {
			return rs
		}
	}
	return nil
}

// SetRequiredStatusChecks makes PRs into branch blocked until each context is success on the
// PR head (GitHub branch protection, GitLab "pipelines must succeed", Bitbucket merge checks).
func (f *Forge) SetRequiredStatusChecks(owner, name, branch string, contexts ...string) error {
	rs, err := f.repoState(owner, name)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	rs.required[branch] = append([]string(nil), contexts...)
	rs.mu.Unlock()
	return nil
}

// ForceMergeState makes reads of the PR report state and merges obey it (dirty and blocked
// refuse, unknown reads as still computing); "" returns to computed mergeability.
func (f *Forge) ForceMergeState(owner, name string, number int, state MergeState) error {
	return f.withPR(owner, name, number, func(_ *repoState, pr *prState) error {
		pr.forced = state
		return nil
	})
}

// withPR runs fn on PR number of owner/name with the repo locked; a missing repo or PR is
// ErrNotFound.
func (f *Forge) withPR(owner, name string, number int, fn func(rs *repoState, pr *prState) error) error {
	rs, err := f.repoState(owner, name)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	pr := rs.pr(number)
	if pr == nil {
		return fmt.Errorf("%w: pull request %s#%d", ErrNotFound, rs.key(), number)
	}
	return fn(rs, pr)
}

// Mergeability computes a PR's merge state and, when dirty, the conflicting files, without
// consuming a "still computing" answer of the API.
func (f *Forge) Mergeability(owner, name string, number int) (state MergeState, files []string, err error) {
	err = f.withPR(owner, name, number, func(rs *repoState, pr *prState) error {
		var merr error
		state, files, merr = f.mergeability(context.Background(), rs, pr, false)
		files = slices.Clone(files)
		return merr
	})
	return state, files, err
}

// PullRequest returns a snapshot of PR number in owner/name.
func (f *Forge) PullRequest(owner, name string, number int) (PullRequest, error) {
	var out PullRequest
	err := f.withPR(owner, name, number, func(rs *repoState, pr *prState) error {
		f.refresh(context.Background(), rs, pr)
		out = pr.snapshot()
		return nil
	})
	return out, err
}

// CommentBodies returns the bodies of PR number's comments, oldest first.
func (f *Forge) CommentBodies(owner, name string, number int) ([]string, error) {
	pr, err := f.PullRequest(owner, name, number)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range pr.Comments {
		out = append(out, c.Body)
	}
	return out, nil
}

// PullRequests returns snapshots of all PRs of a repo, by number.
func (f *Forge) PullRequests(owner, name string) ([]PullRequest, error) {
	rs, err := f.repoState(owner, name)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]PullRequest, 0, len(rs.prs))
	for _, pr := range rs.prs {
		f.refresh(context.Background(), rs, pr)
		out = append(out, pr.snapshot())
	}
	return out, nil
}

// Statuses returns the commit statuses set on sha, oldest first.
func (f *Forge) Statuses(owner, name, sha string) ([]Status, error) {
	rs, err := f.repoState(owner, name)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []Status
	for _, s := range rs.statuses[sha] {
		out = append(out, *s)
	}
	return out, nil
}

func (pr *prState) snapshot() PullRequest {
	p := pr.PullRequest
	p.Labels = slices.Clone(p.Labels)
	p.Reviewers = slices.Clone(p.Reviewers)
	p.Comments = slices.Clone(p.Comments)
	return p
}

func (rs *repoState) pr(number int) *prState {
	if number < 1 || number > len(rs.prs) {
		return nil
	}
	return rs.prs[number-1]
}

// serveRoute serves r through mux with the caller's token in its context; a request no route
// matches gets the forge's own 404 (notFound) rather than the mux's plain text.
func serveRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request, ti tokenInfo, notFound func()) {
	if _, pattern := mux.Handler(r); pattern == "" {
		notFound()
		return
	}
	mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, ti)))
}

// setRef moves ref to sha (empty deletes it) for the API user under rs's lock; check guards the
// current value as in GitServer.moveRef (nil: any).
func (f *Forge) setRef(ctx context.Context, rs *repoState, ref, sha, user string, check func(cur string) error) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return f.git.moveRef(ctx, rs.owner, rs.name, ref, sha, user, check)
}

// createOnly is a setRef check that refuses a ref that exists already (ErrExists).
func createOnly(cur string) error {
	if cur != "" {
		return ErrExists
	}
	return nil
}

// prAt is the PR whose number is r's path value param, or nil.
func (rs *repoState) prAt(r *http.Request, param string) *prState {
	n, err := strconv.Atoi(r.PathValue(param))
	if err != nil {
		return nil
	}
	return rs.pr(n)
}

// lockPR locks rs and returns the PR whose number is r's path value param, for a handler that
// reads or changes it. With no such PR it unlocks, answers with notFound (the forge's 404) and
// returns nil; a caller given a PR unlocks rs.mu.
func (rs *repoState) lockPR(r *http.Request, param string, notFound func()) *prState {
	rs.mu.Lock()
	if pr := rs.prAt(r, param); pr != nil {
		return pr
	}
	rs.mu.Unlock()
	notFound()
	return nil
}

// refresh updates an open PR's head/base SHAs from its branches and keeps the per-PR head ref.
// Callers hold rs.mu.
func (f *Forge) refresh(ctx context.Context, rs *repoState, pr *prState) {
	if pr.State != PROpen {
		return
	}
	if h, err := rs.repo.branchHead(ctx, pr.Head); err == nil && h != pr.HeadSHA {
		pr.HeadSHA = h
		if f.prRef != "" {
			ref := fmt.Sprintf(f.prRef, pr.Number)
			cur, _ := rs.repo.refValue(ctx, ref)
			_ = rs.repo.updateRef(ctx, ref, h, cur)
		}
	}
	if b, err := rs.repo.branchHead(ctx, pr.Base); err == nil {
		pr.BaseSHA = b
	}
}

// prError is a core failure that each fake maps to its forge's status code and body.
type prError struct {
	kind     string // exists, no-commits, no-branch, not-open, head-modified, conflict, blocked, draft, not-ff, base-modified, forced
	number   int    // existing PR for "exists"
	files    []string
	contexts []string
	branch   string
	msg      string
}

func (e *prError) Error() string {
	switch e.kind {
	case "conflict":
		return "merge conflict in " + strings.Join(e.files, ", ")
	case "blocked":
		return "required status checks not passing: " + strings.Join(e.contexts, ", ")
	}
	if e.msg != "" {
		return e.kind + ": " + e.msg
	}
	return e.kind
}

// openPR creates a PR after checking both branches exist and no open PR has the same head and
// base. Callers hold rs.mu.
func (f *Forge) openPR(ctx context.Context, rs *repoState, head, base, title, body, user string, draft bool) (*prState, error) {
	hs, err := rs.repo.branchHead(ctx, head)
	if err != nil {
		return nil, &prError{kind: "no-branch", branch: head}
	}
	bs, err := rs.repo.branchHead(ctx, base)
	if err != nil {
		return nil, &prError{kind: "no-branch", branch: base}
	}
	for _, p := range rs.prs {
		if p.State == PROpen && p.Head == head && p.Base == base {
			return nil, &prError{kind: "exists", number: p.Number}
		}
	}
	now := time.Now().UTC()
	pr := &prState{PullRequest: PullRequest{
		ID: f.newID(), Number: len(rs.prs) + 1, Title: title, Body: body, Head: head, Base: base,
		HeadSHA: hs, BaseSHA: bs, State: PROpen, Draft: draft, Author: user, CreatedAt: now, UpdatedAt: now,
	}}
	rs.prs = append(rs.prs, pr)
	rs.track(pr)
	if f.prRef != "" {
		_ = rs.repo.updateRef(ctx, fmt.Sprintf(f.prRef, pr.Number), hs, "")
	}
	f.hooks.enqueue(hookEvent{kind: "pr", action: "opened", rs: rs, pr: pr.snapshot(), sender: user})
	return pr, nil
}

// aheadBy counts commits on head that are not on base.
func (f *Forge) aheadBy(ctx context.Context, rs *repoState, base, head string) (int, error) {
	shas, err := rs.repo.revList(ctx, base+".."+head)
	return len(shas), err
}

// mergeability computes the PR's merge state. poll consumes one "still computing" answer.
// Callers hold rs.mu.
func (f *Forge) mergeability(ctx context.Context, rs *repoState, pr *prState, poll bool) (MergeState, []string, error) {
	f.refresh(ctx, rs, pr)
	if pr.State != PROpen {
		return MergeUnknown, nil, nil
	}
	key := pr.BaseSHA + ".." + pr.HeadSHA
	if key != pr.mkey {
		pr.mkey, pr.mstate, pr.conflicts = key, "", nil
		pr.unknownLeft = f.set.unknownPolls
	}
	if pr.forced != "" {
		return pr.forced, pr.conflicts, nil
	}
	if poll && pr.unknownLeft > 0 {
		pr.unknownLeft--
		return MergeUnknown, nil, nil
	}
	if pr.mstate == "" {
		_, files, err := rs.repo.mergeCommits(ctx, pr.BaseSHA, pr.HeadSHA)
		if err != nil {
			return MergeUnknown, nil, err
		}
		pr.mstate, pr.conflicts = MergeClean, files
		if len(files) > 0 {
			pr.mstate = MergeDirty
		}
	}
	if pr.mstate == MergeClean {
		if failing := rs.failingRequired(pr.Base, pr.HeadSHA); len(failing) > 0 {
			return MergeBlocked, nil, nil
		}
	}
	return pr.mstate, pr.conflicts, nil
}

// failingRequired lists required contexts for base whose latest status on sha is not success.
func (rs *repoState) failingRequired(base, sha string) []string {
	var failing []string
	latest := rs.latestStatuses(sha)
	for _, c := range rs.required[base] {
		if s, ok := latest[c]; !ok || s.State != "success" {
			failing = append(failing, c)
		}
	}
	return failing
}

// latestStatuses returns the newest status per context.
func (rs *repoState) latestStatuses(sha string) map[string]*Status {
	m := map[string]*Status{}
	for _, s := range rs.statuses[sha] {
		m[s.Context] = s
	}
	return m
}

// mergeOpts describes one merge request to the core.
type mergeOpts struct {
	method       string // merge, squash, rebase, ff, squash-ff, rebase-ff, rebase-merge
	expectHead   string
	message      string // full commit message for merge/squash commits
	user         string
	deleteBranch bool
	gitlabSquash bool // GitLab: squash commit on the merge base, then a merge commit
	squashMsg    string
}

type mergeResult struct {
	sha       string // new base head (merge commit, squash commit or last rebased commit)
	squashSHA string
}

func (f *Forge) userSig(user string) Signature {
	return Signature{Name: user, Email: user + "@users.noreply.example.com", When: time.Now()}
}

// merge merges an open PR into its base with a guarded update of the base branch.
// Callers hold rs.mu.
func (f *Forge) merge(ctx context.Context, rs *repoState, pr *prState, o mergeOpts) (mergeResult, error) {
	if pr.State != PROpen {
		return mergeResult{}, &prError{kind: "not-open", msg: string(pr.State)}
	}
	state, files, err := f.mergeability(ctx, rs, pr, false)
	if err != nil {
		return mergeResult{}, err
	}
	if _, herr := rs.repo.branchHead(ctx, pr.Head); herr != nil {
		return mergeResult{}, &prError{kind: "no-branch", branch: pr.Head}
	}
	if o.expectHead != "" && o.expectHead != pr.HeadSHA {
		return mergeResult{}, &prError{kind: "head-modified", msg: pr.HeadSHA}
	}
	if pr.Draft {
		return mergeResult{}, &prError{kind: "draft"}
	}
	switch state {
	case MergeDirty:
		return mergeResult{}, &prError{kind: "conflict", files: files}
	case MergeBlocked:
		return mergeResult{}, &prError{kind: "blocked", contexts: rs.failingRequired(pr.Base, pr.HeadSHA)}
	}
	base, head := pr.BaseSHA, pr.HeadSHA
	repo := rs.repo
	user := f.userSig(o.user)
	committer := f.committer
	committer.When = time.Now()
	var res mergeResult
	switch o.method {
	case "merge", "squash":
		tree, conflicts, err := repo.mergeCommits(ctx, base, head)
		if err != nil {
			return res, err
		}
		if len(conflicts) > 0 {
			return res, &prError{kind: "conflict", files: conflicts}
		}
		switch {
		case o.method == "squash":
			res.sha, err = repo.commitTree(ctx, tree, []string{base}, o.message, user, committer)
		case o.gitlabSquash:
			mb, _ := repo.mergeBase(ctx, base, head)
			headTree, terr := repo.resolveTree(ctx, head)
			if terr != nil {
				return res, terr
			}
			var parents []string
			if mb != "" {
				parents = []string{mb}
			}
			if res.squashSHA, err = repo.commitTree(ctx, headTree, parents, o.squashMsg, user, user); err != nil {
				return res, err
			}
			res.sha, err = repo.commitTree(ctx, tree, []string{base, res.squashSHA}, o.message, user, user)
		default:
			res.sha, err = repo.commitTree(ctx, tree, []string{base, head}, o.message, user, committer)
		}
		if err != nil {
			return res, err
		}
	case "ff", "squash-ff":
		ok, err := repo.isAncestor(ctx, base, head)
		if err != nil {
			return res, err
		}
		if !ok {
			return res, &prError{kind: "not-ff"}
		}
		res.sha = head
		if o.method == "squash-ff" {
			tree, err := repo.resolveTree(ctx, head)
			if err != nil {
				return res, err
			}
			if res.sha, err = repo.commitTree(ctx, tree, []string{base}, o.message, user, committer); err != nil {
				return res, err
			}
		}
	case "rebase", "rebase-ff", "rebase-merge":
		tip, err := f.rebase(ctx, repo, base, head, committer)
		if err != nil {
			return res, err
		}
		res.sha = tip
		if o.method == "rebase-merge" {
			tree, err := repo.resolveTree(ctx, tip)
			if err != nil {
				return res, err
			}
			if res.sha, err = repo.commitTree(ctx, tree, []string{base, tip}, o.message, user, committer); err != nil {
				return res, err
			}
		}
	default:
		return res, fmt.Errorf("%w: merge method %q", ErrInvalid, o.method)
	}
	if f.takeBaseModified() {
		return mergeResult{}, &prError{kind: "base-modified"}
	}
	err = f.git.moveRef(ctx, rs.owner, rs.name, "refs/heads/"+pr.Base, res.sha, o.user, func(cur string) error {
		if cur != base {
			return &prError{kind: "base-modified"}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrRefConflict) {
			return mergeResult{}, &prError{kind: "base-modified"}
		}
		return mergeResult{}, err
	}
	now := time.Now().UTC()
	pr.State, pr.MergeCommitSHA, pr.SquashCommitSHA = PRMerged, res.sha, res.squashSHA
	pr.MergedAt, pr.ClosedAt, pr.UpdatedAt, pr.MergedBy, pr.MergeMethod = now, now, now, o.user, o.method
	pr.BaseSHA = base
	rs.track(pr)
	if o.deleteBranch {
		_ = f.git.moveRef(ctx, rs.owner, rs.name, "refs/heads/"+pr.Head, "", o.user, func(cur string) error {
			if cur != head {
				return ErrRefConflict
			}
			return nil
		})
	}
	f.hooks.enqueue(hookEvent{kind: "pr", action: "closed", rs: rs, pr: pr.snapshot(), sender: o.user})
	return res, nil
}

// rebase replays the non-merge commits of base..head onto base and returns the new tip.
func (f *Forge) rebase(ctx context.Context, repo *bareRepo, base, head string, committer Signature) (string, error) {
	shas, err := repo.revList(ctx, "--reverse", "--no-merges", base+".."+head)
	if err != nil {
		return "", err
	}
	tip := base
	for _, sha := range shas {
		c, err := repo.commit(ctx, sha)
		if err != nil {
			return "", err
		}
		tree, err := repo.cherryPickTree(ctx, tip, c)
		if err != nil {
			var ce *ConflictError
			if errors.As(err, &ce) {
				return "", &prError{kind: "conflict", files: ce.Files, msg: "rebase"}
			}
			return "", err
		}
		tipTree, err := repo.resolveTree(ctx, tip)
		if err != nil {
			return "", err
		}
		if tree == tipTree {
			continue // already applied upstream
		}
		if tip, err = repo.commitTree(ctx, tree, []string{tip}, c.Message, c.Author, committer); err != nil {
			return "", err
		}
	}
	return tip, nil
}

// closePR closes (declines) an open PR. Callers hold rs.mu.
func (f *Forge) closePR(rs *repoState, pr *prState, user string) {
	if pr.State != PROpen {
		return
	}
	now := time.Now().UTC()
	pr.State, pr.ClosedAt, pr.UpdatedAt = PRClosed, now, now
	rs.track(pr)
	f.hooks.enqueue(hookEvent{kind: "pr", action: "closed", rs: rs, pr: pr.snapshot(), sender: user})
}

// reopenPR reopens a closed PR whose branches still exist. Callers hold rs.mu.
func (f *Forge) reopenPR(ctx context.Context, rs *repoState, pr *prState, user string) error {
	if pr.State != PRClosed {
		return &prError{kind: "not-open", msg: string(pr.State)}
	}
	if _, err := rs.repo.branchHead(ctx, pr.Head); err != nil {
		return &prError{kind: "no-branch", branch: pr.Head}
	}
	pr.State, pr.ClosedAt, pr.UpdatedAt = PROpen, time.Time{}, time.Now().UTC()
	rs.track(pr)
	f.refresh(ctx, rs, pr)
	f.hooks.enqueue(hookEvent{kind: "pr", action: "reopened", rs: rs, pr: pr.snapshot(), sender: user})
	return nil
}

// addLabels adds labels not yet on the PR. Callers hold rs.mu.
func (f *Forge) addLabels(rs *repoState, pr *prState, labels []string, user string) {
	for _, l := range labels {
		if l == "" || slices.Contains(pr.Labels, l) {
			continue
		}
		pr.Labels = append(pr.Labels, l)
		pr.UpdatedAt = time.Now().UTC()
		f.hooks.enqueue(hookEvent{kind: "pr", action: "labeled", label: l, rs: rs, pr: pr.snapshot(), sender: user})
	}
}

func (f *Forge) removeLabel(pr *prState, label string) bool {
	i := slices.Index(pr.Labels, label)
	if i < 0 {
		return false
	}
	pr.Labels = slices.Delete(pr.Labels, i, i+1)
	return true
}

// addComment appends a comment. Callers hold rs.mu.
func (f *Forge) addComment(pr *prState, body, user string) Comment {
	now := time.Now().UTC()
	c := Comment{ID: f.newID(), Body: body, User: user, CreatedAt: now, UpdatedAt: now}
	pr.Comments = append(pr.Comments, c)
	return c
}

// Why a comment edit is refused; each fake answers with its forge's status and message.
var (
	errNoComment    = errors.New("no such comment")
	errNotAuthor    = errors.New("not the comment's author")
	errLockedThread = errors.New("conversation locked")
)

// editComment replaces the body of comment id on pr as user: only the comment's author may
// (the fakes have no roles, so nobody edits another user's comment), and not while the
// conversation is locked. Callers hold rs.mu.
func (f *Forge) editComment(pr *prState, id int64, body, user string) (Comment, error) {
	i := slices.IndexFunc(pr.Comments, func(c Comment) bool { return c.ID == id })
	switch {
	case i < 0:
		return Comment{}, errNoComment
	case pr.Comments[i].User != user:
		return Comment{}, errNotAuthor
	case pr.Locked:
		return Comment{}, errLockedThread
	}
	pr.Comments[i].Body = body
	pr.Comments[i].UpdatedAt = time.Now().UTC()
	return pr.Comments[i], nil
}

// commentPR finds the PR of rs holding comment id (GitHub addresses comments by repo, not PR).
// Callers hold rs.mu.
func (rs *repoState) commentPR(id int64) *prState {
	for _, pr := range rs.prs {
		if slices.ContainsFunc(pr.Comments, func(c Comment) bool { return c.ID == id }) {
			return pr
		}
	}
	return nil
}

// AddComment posts body on PR number as user, as someone else commenting on the forge would.
func (f *Forge) AddComment(owner, name string, number int, user, body string) (Comment, error) {
	var c Comment
	err := f.withPR(owner, name, number, func(_ *repoState, pr *prState) error {
		c = f.addComment(pr, body, user)
		return nil
	})
	return c, err
}

// LockConversation locks (or unlocks) a PR's conversation: the fake then refuses new
// comments and edits with the forge's 403, as GitHub and GitLab answer a user who may not
// comment on a locked conversation (the fakes have no roles, so it applies to every token).
// Bitbucket Cloud cannot lock a PR; its fake answers as Bitbucket does a user without the
// permission to comment.
func (f *Forge) LockConversation(owner, name string, number int, locked bool) error {
	return f.withPR(owner, name, number, func(_ *repoState, pr *prState) error {
		pr.Locked = locked
		return nil
	})
}

// setStatus records a commit status; an existing status with the same context is replaced in
// place when replace is true (Bitbucket keys), otherwise appended (GitHub history).
// Callers hold rs.mu.
func (f *Forge) setStatus(rs *repoState, s Status, replace bool) *Status {
	now := time.Now().UTC()
	if replace {
		for _, old := range rs.statuses[s.SHA] {
			if old.Context == s.Context {
				created, id := old.CreatedAt, old.ID
				*old = s
				old.ID, old.CreatedAt, old.UpdatedAt = id, created, now
				return old
			}
		}
	}
	s.ID, s.CreatedAt, s.UpdatedAt = f.newID(), now, now
	ns := &s
	rs.statuses[s.SHA] = append(rs.statuses[s.SHA], ns)
	return ns
}

// combinedState is GitHub's combined status: failure if any latest status failed or errored,
// pending if any is pending or there are none, else success.
func combinedState(latest map[string]*Status) string {
	if len(latest) == 0 {
		return "pending"
	}
	state := "success"
	for _, s := range latest {
		switch s.State {
		case "failure", "error":
			return "failure"
		case "pending":
			state = "pending"
		}
	}
	return state
}

// commitChanges builds a commit on parent with changes and moves branch to it if guard accepts
// the branch's current value. Callers hold rs.mu.
func (f *Forge) commitChanges(ctx context.Context, rs *repoState, branch, parent string, changes []treeChange, msg string, author Signature, user string, guard func(cur string) error) (string, error) {
	tree, err := rs.repo.buildTree(ctx, parent, changes)
	if err != nil {
		return "", err
	}
	committer := author
	if committer.When.IsZero() {
		committer.When = time.Now()
	}
	var parents []string
	if parent != "" {
		parents = []string{parent}
	}
	sha, err := rs.repo.commitTree(ctx, tree, parents, msg, author, committer)
	if err != nil {
		return "", err
	}
	if err := f.git.moveRef(ctx, rs.owner, rs.name, "refs/heads/"+branch, sha, user, guard); err != nil {
		return "", err
	}
	return sha, nil
}

// revert commits the inverse of sha (parent 1 for merges) onto branch. Callers hold rs.mu.
func (f *Forge) revert(ctx context.Context, rs *repoState, sha, branch string, author Signature, user string) (string, error) {
	head, err := rs.repo.branchHead(ctx, branch)
	if err != nil {
		return "", err
	}
	c, err := rs.repo.commit(ctx, sha)
	if err != nil {
		return "", err
	}
	tree, err := rs.repo.revertTree(ctx, head, c, 1)
	if err != nil {
		return "", err
	}
	headTree, err := rs.repo.resolveTree(ctx, head)
	if err != nil {
		return "", err
	}
	if tree == headTree {
		return "", &ConflictError{Op: "revert (nothing to revert)"}
	}
	msg := fmt.Sprintf("Revert \"%s\"\n\nThis reverts commit %s", c.Title(), c.SHA)
	if author.When.IsZero() {
		author.When = time.Now()
	}
	nc, err := rs.repo.commitTree(ctx, tree, []string{head}, msg, author, author)
	if err != nil {
		return "", err
	}
	return nc, f.git.moveRef(ctx, rs.owner, rs.name, "refs/heads/"+branch, nc, user, func(cur string) error {
		if cur != head {
			return fmt.Errorf("%w: branch %s moved", ErrRefConflict, branch)
		}
		return nil
	})
}

// onRefUpdate turns ref changes into push and synchronize webhook events.
func (f *Forge) onRefUpdate(u RefUpdate) {
	if !strings.HasPrefix(u.Ref, "refs/heads/") || !f.hooks.active() {
		return
	}
	f.mu.Lock()
	rs := f.repos[u.Owner+"/"+u.Name]
	f.mu.Unlock()
	if rs == nil {
		var err error
		if rs, err = f.repoState(u.Owner, u.Name); err != nil {
			return
		}
	}
	var sync []int
	if u.After != "" {
		sync = rs.openOnHead(strings.TrimPrefix(u.Ref, "refs/heads/"))
	}
	f.hooks.enqueue(hookEvent{kind: "push", rs: rs, update: u, sender: u.User, sync: sync})
}

// rateWindow counts requests per token for the rate-limit headers.
type rateWindow struct {
	used  int
	reset time.Time
}

// countRate records one request for token and returns used, remaining and reset.
func (f *Forge) countRate(token string, limit int, window time.Duration) (used, remaining int, reset time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	w := f.rate[token]
	if w == nil || now.After(w.reset) || w.used >= limit {
		// The fake reports limits but does not enforce them: a full window starts over.
		w = &rateWindow{reset: now.Add(window).Truncate(time.Second)}
		f.rate[token] = w
	}
	w.used++
	return w.used, limit - w.used, w.reset
}

// sortedKeys returns map keys in order (deterministic JSON and events).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
