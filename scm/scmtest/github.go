package scmtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// GitHub is a fake GitHub REST API (v3) served under /api/v3/, for go-github v62.
type GitHub struct{ *Forge }

// NewGitHub starts a fake GitHub for the test; repos live on its own GitServer unless
// WithGitServer is given. Point go-github at APIURL() (WithEnterpriseURLs).
func NewGitHub(t testing.TB, opts ...Option) *GitHub {
	t.Helper()
	return startFake(t, "NewGitHub", opts, NewGitHubHandler)
}

// NewGitHubHandler builds a fake GitHub without a listener: mount it and call SetBaseURL.
func NewGitHubHandler(gs *GitServer, opts ...Option) (*GitHub, error) {
	return newFake("github", gs, opts, GitHubWebhookRequest, func(f *Forge) *GitHub { return &GitHub{Forge: f} })
}

// APIURL is the base URL for go-github: <url>/api/v3/.
func (g *GitHub) APIURL() string { return g.URL() + "/api/v3/" }

// RateLimitKind selects which GitHub rate limit RateLimitNext simulates.
type RateLimitKind int

const (
	// PrimaryRateLimit: 403 with X-RateLimit-Remaining: 0 and X-RateLimit-Reset (go-github
	// *RateLimitError).
	PrimaryRateLimit RateLimitKind = iota
	// SecondaryRateLimit: 403 with Retry-After and the secondary-rate-limits documentation URL
	// (go-github *AbuseRateLimitError).
	SecondaryRateLimit
	// SecondaryRateLimit429: the same as a 429, which go-github v62 reports as *ErrorResponse.
	SecondaryRateLimit429
)

// RateLimitNext makes the next n API calls answer with a rate limit lasting retryAfter.
// Note that go-github remembers a primary limit and refuses calls locally until the reset.
func (g *GitHub) RateLimitNext(n int, kind RateLimitKind, retryAfter time.Duration) error {
	secs := int(retryAfter.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	limit := g.limit()
	return g.mw.inject(Fault{PathPattern: `^/api/v3/`, Times: n}, func() (int, map[string]string, string) {
		reset := strconv.FormatInt(time.Now().Add(time.Duration(secs)*time.Second).Unix(), 10)
		switch kind {
		case PrimaryRateLimit:
			return http.StatusForbidden, map[string]string{
					"X-RateLimit-Limit": strconv.Itoa(limit), "X-RateLimit-Remaining": "0", "X-RateLimit-Used": strconv.Itoa(limit),
					"X-RateLimit-Reset": reset, "X-RateLimit-Resource": "core"},
				ghErrorBody("API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, please include the request ID.",
					"rest/overview/rate-limits-for-the-rest-api", http.StatusForbidden)
		default:
			status := http.StatusForbidden
			if kind == SecondaryRateLimit429 {
				status = http.StatusTooManyRequests
			}
			return status, map[string]string{"Retry-After": strconv.Itoa(secs)},
				ghErrorBody("You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
					"free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits", status)
		}
	})
}

func (g *GitHub) limit() int {
	if g.set.rateLimit > 0 {
		return g.set.rateLimit
	}
	return 5000
}

// decorate adds the headers every GitHub answer carries.
func (g *GitHub) decorate(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-GitHub-Media-Type", "github.v3; format=json")
	h.Set("X-GitHub-Request-Id", strings.ToUpper(requestID()[:20]))
	h.Set("X-GitHub-Api-Version-Selected", "2022-11-28")
	tok, _ := bearerOrBasic(r)
	limit := g.limit()
	if tok == "" {
		limit = 60
	}
	used, remaining, reset := g.countRate(tok, limit, time.Hour)
	h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("X-RateLimit-Used", strconv.Itoa(used))
	h.Set("X-RateLimit-Resource", "core")
}

func ghErrorBody(msg, doc string, status int) string {
	b, _ := json.Marshal(map[string]any{"message": msg, "documentation_url": "https://docs.github.com/" + doc, "status": strconv.Itoa(status)})
	return string(b)
}

func ghError(w http.ResponseWriter, status int, msg, doc string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(ghErrorBody(msg, "rest/"+doc, status)))
}

// ghValidation answers 422 "Validation Failed" with GitHub's errors array.
func ghValidation(w http.ResponseWriter, doc string, errs ...map[string]any) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"message": "Validation Failed", "errors": errs,
		"documentation_url": "https://docs.github.com/rest/" + doc, "status": "422"})
}

// ghCall is one authenticated API request.
type ghCall struct {
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	user string
	tok  tokenInfo
	rs   *repoState
	rv   repoView
}

type ghHandler func(c *ghCall)

func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api/v3/") && !strings.HasPrefix(r.URL.Path, "/raw/") {
		ghError(w, http.StatusNotFound, "Not Found", "")
		return
	}
	tok, present := bearerOrBasic(r)
	ti, ok := g.git.tokens.lookup(tok)
	if !present {
		ghError(w, http.StatusUnauthorized, "Requires authentication", "users/users#get-the-authenticated-user")
		return
	}
	if !ok {
		ghError(w, http.StatusUnauthorized, "Bad credentials", "")
		return
	}
	serveRoute(g.mux, w, r, ti, func() { ghError(w, http.StatusNotFound, "Not Found", "") })
}

type tokenKey struct{}

// handle registers pattern; repo routes ({owner}/{repo}) resolve the repo or answer 404.
func (g *GitHub) handle(pattern string, fn ghHandler) {
	method, path, _ := strings.Cut(pattern, " ")
	g.mux.HandleFunc(method+" /api/v3"+path, func(w http.ResponseWriter, r *http.Request) {
		g.dispatch(w, r, fn)
	})
}

func (g *GitHub) dispatch(w http.ResponseWriter, r *http.Request, fn ghHandler) {
	ti, _ := r.Context().Value(tokenKey{}).(tokenInfo)
	c := &ghCall{w: w, r: r, ctx: r.Context(), user: ti.user, tok: ti}
	if owner := r.PathValue("owner"); owner != "" {
		name := r.PathValue("repo")
		rs, err := g.repoState(owner, name)
		if err != nil || !ti.canSee(owner+"/"+name) {
			ghError(w, http.StatusNotFound, "Not Found", "repos/repos#get-a-repository")
			return
		}
		c.rs = rs
		c.rv = g.view(rs, r)
	}
	fn(c)
}

func (g *GitHub) view(rs *repoState, r *http.Request) repoView {
	v := viewOf(rs.owner, rs.name, rs.id, g.base(r), g.webFor(r), g.git.CloneURL(rs.owner, rs.name), rs.defBranch)
	v.Created = rs.created
	return v
}

func (g *GitHub) routes() {
	g.handle("GET /user", g.getUser)
	g.handle("GET /repos/{owner}/{repo}", func(c *ghCall) { writeJSON(c.w, 200, ghRepoJSON(c.rv, true)) })
	g.handle("GET /repos/{owner}/{repo}/branches", g.listBranches)
	g.handle("GET /repos/{owner}/{repo}/branches/{branch...}", g.getBranch)
	g.handle("GET /repos/{owner}/{repo}/contents/{path...}", g.getContents)
	g.handle("PUT /repos/{owner}/{repo}/contents/{path...}", g.putContents)
	g.handle("DELETE /repos/{owner}/{repo}/contents/{path...}", g.deleteContents)
	g.handle("GET /repos/{owner}/{repo}/git/ref/{ref...}", g.getRef)
	g.handle("GET /repos/{owner}/{repo}/git/refs/{ref...}", g.getRefs)
	g.handle("GET /repos/{owner}/{repo}/git/matching-refs/{ref...}", g.matchingRefs)
	g.handle("POST /repos/{owner}/{repo}/git/refs", g.createRef)
	g.handle("PATCH /repos/{owner}/{repo}/git/refs/{ref...}", g.updateRef)
	g.handle("DELETE /repos/{owner}/{repo}/git/refs/{ref...}", g.deleteRef)
	g.handle("GET /repos/{owner}/{repo}/git/commits/{sha}", g.getGitCommit)
	g.handle("POST /repos/{owner}/{repo}/git/commits", g.createGitCommit)
	g.handle("GET /repos/{owner}/{repo}/git/trees/{sha...}", g.getTree)
	g.handle("POST /repos/{owner}/{repo}/git/trees", g.createTree)
	g.handle("GET /repos/{owner}/{repo}/git/blobs/{sha}", g.getBlob)
	g.handle("POST /repos/{owner}/{repo}/git/blobs", g.createBlob)
	g.handle("GET /repos/{owner}/{repo}/commits", g.listCommits)
	g.handle("GET /repos/{owner}/{repo}/commits/{ref...}", g.getCommit)
	g.handle("GET /repos/{owner}/{repo}/compare/{spec...}", g.compare)
	g.handle("POST /repos/{owner}/{repo}/statuses/{sha}", g.createStatus)
	g.handle("GET /repos/{owner}/{repo}/pulls", g.listPulls)
	g.handle("POST /repos/{owner}/{repo}/pulls", g.createPull)
	g.handle("GET /repos/{owner}/{repo}/pulls/{number}", g.getPull)
	g.handle("PATCH /repos/{owner}/{repo}/pulls/{number}", g.updatePull)
	g.handle("GET /repos/{owner}/{repo}/pulls/{number}/files", g.pullFiles)
	g.handle("GET /repos/{owner}/{repo}/pulls/{number}/commits", g.pullCommits)
	g.handle("GET /repos/{owner}/{repo}/pulls/{number}/merge", g.isMerged)
	g.handle("PUT /repos/{owner}/{repo}/pulls/{number}/merge", g.mergePull)
	g.handle("POST /repos/{owner}/{repo}/pulls/{number}/requested_reviewers", g.requestReviewers)
	g.handle("GET /repos/{owner}/{repo}/issues/{number}/labels", g.listLabels)
	g.handle("POST /repos/{owner}/{repo}/issues/{number}/labels", g.addLabels)
	g.handle("DELETE /repos/{owner}/{repo}/issues/{number}/labels/{name}", g.removeLabel)
	g.handle("GET /repos/{owner}/{repo}/issues/{number}/comments", g.listComments)
	g.handle("POST /repos/{owner}/{repo}/issues/{number}/comments", g.createComment)
	g.handle("PATCH /repos/{owner}/{repo}/issues/comments/{id}", g.editComment)
	g.mux.HandleFunc("GET /raw/{owner}/{repo}/{sha}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		g.dispatch(w, r, g.raw)
	})
}

// --- JSON shapes -------------------------------------------------------------------------------

func ghUserJSON(api, web, login string) map[string]any {
	if login == "" {
		return nil
	}
	id := stableID("user:" + login)
	return map[string]any{
		"login": login, "id": id, "node_id": "U_" + base64.RawStdEncoding.EncodeToString([]byte("User:"+strconv.FormatInt(id, 10))),
		"avatar_url": web + "/avatars/u/" + strconv.FormatInt(id, 10), "gravatar_id": "",
		"url": api + "/api/v3/users/" + login, "html_url": web + "/" + login, "type": "User", "site_admin": false,
	}
}

func ghNodeID(kind string, id int64) string {
	return kind + "_" + base64.RawStdEncoding.EncodeToString([]byte(kind+":"+strconv.FormatInt(id, 10)))
}

func ghRepoJSON(v repoView, full bool) map[string]any {
	api := v.API + "/api/v3/repos/" + v.full()
	m := map[string]any{
		"id": v.ID, "node_id": ghNodeID("R", v.ID), "name": v.Name, "full_name": v.full(), "private": true,
		"owner": ghUserJSON(v.API, v.Web, v.Owner), "html_url": v.Web + "/" + v.full(), "description": nil,
		"fork": false, "url": api, "clone_url": v.Clone, "git_url": v.Clone, "ssh_url": "git@" + hostOf(v.Web) + ":" + v.full() + ".git",
		"default_branch": v.DefaultBranch, "visibility": "private", "archived": false, "disabled": false,
		"pulls_url": api + "/pulls{/number}", "created_at": isoTime(v.Created), "updated_at": isoTime(v.Created),
		"pushed_at": isoTime(v.Created),
	}
	if full {
		m["permissions"] = map[string]bool{"admin": true, "maintain": true, "push": true, "triage": true, "pull": true}
		m["allow_merge_commit"], m["allow_squash_merge"], m["allow_rebase_merge"] = true, true, true
		m["delete_branch_on_merge"] = false
	}
	return m
}

func hostOf(u string) string {
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return p.Hostname()
	}
	return "github.example.test"
}

func ghSigJSON(s Signature) map[string]any {
	return map[string]any{"name": s.Name, "email": s.Email, "date": isoTime(s.When)}
}

func ghGitCommitJSON(v repoView, c Commit) map[string]any {
	api := v.API + "/api/v3/repos/" + v.full()
	parents := make([]map[string]any, 0, len(c.Parents))
	for _, p := range c.Parents {
		parents = append(parents, map[string]any{"sha": p, "url": api + "/git/commits/" + p, "html_url": v.Web + "/" + v.full() + "/commit/" + p})
	}
	return map[string]any{
		"sha": c.SHA, "node_id": ghNodeID("C", stableID(c.SHA)), "url": api + "/git/commits/" + c.SHA,
		"html_url": v.Web + "/" + v.full() + "/commit/" + c.SHA,
		"author":   ghSigJSON(c.Author), "committer": ghSigJSON(c.Committer), "message": strings.TrimSuffix(c.Message, "\n"),
		"tree":         map[string]any{"sha": c.Tree, "url": api + "/git/trees/" + c.Tree},
		"parents":      parents,
		"verification": map[string]any{"verified": false, "reason": "unsigned", "signature": nil, "payload": nil},
	}
}

func ghFileJSON(v repoView, ref string, fc FileChange, withPatch bool) map[string]any {
	sha := fc.NewSHA
	if fc.Status == "removed" {
		sha = fc.OldSHA
	}
	m := map[string]any{
		"sha": sha, "filename": fc.Path, "status": fc.Status, "additions": fc.Additions, "deletions": fc.Deletions,
		"changes":      fc.Additions + fc.Deletions,
		"blob_url":     v.Web + "/" + v.full() + "/blob/" + ref + "/" + fc.Path,
		"raw_url":      v.Web + "/" + v.full() + "/raw/" + ref + "/" + fc.Path,
		"contents_url": v.API + "/api/v3/repos/" + v.full() + "/contents/" + fc.Path + "?ref=" + ref,
	}
	if withPatch && !fc.Binary {
		m["patch"] = strings.TrimSuffix(fc.Patch, "\n")
	}
	return m
}

// ghCommitJSON is the REST commit (GET /commits/{ref}); files and stats only when files != nil.
func ghCommitJSON(v repoView, c Commit, files []FileChange, withFiles bool) map[string]any {
	api := v.API + "/api/v3/repos/" + v.full()
	gc := ghGitCommitJSON(v, c)
	delete(gc, "sha")
	delete(gc, "node_id")
	delete(gc, "html_url")
	delete(gc, "parents")
	gc["url"] = api + "/git/commits/" + c.SHA
	gc["comment_count"] = 0
	parents := make([]map[string]any, 0, len(c.Parents))
	for _, p := range c.Parents {
		parents = append(parents, map[string]any{"sha": p, "url": api + "/commits/" + p, "html_url": v.Web + "/" + v.full() + "/commit/" + p})
	}
	m := map[string]any{
		"sha": c.SHA, "node_id": ghNodeID("C", stableID(c.SHA)), "commit": gc, "url": api + "/commits/" + c.SHA,
		"html_url": v.Web + "/" + v.full() + "/commit/" + c.SHA, "comments_url": api + "/commits/" + c.SHA + "/comments",
		"author": nil, "committer": nil, "parents": parents,
	}
	if withFiles {
		add, del := 0, 0
		fl := make([]map[string]any, 0, len(files))
		for _, f := range files {
			add += f.Additions
			del += f.Deletions
			fl = append(fl, ghFileJSON(v, c.SHA, f, true))
		}
		m["stats"] = map[string]int{"total": add + del, "additions": add, "deletions": del}
		m["files"] = fl
	}
	return m
}

func ghLabelJSON(v repoView, name string) map[string]any {
	id := stableID(v.full() + "#label:" + name)
	return map[string]any{"id": id, "node_id": ghNodeID("LA", id), "url": v.API + "/api/v3/repos/" + v.full() + "/labels/" + url.PathEscape(name),
		"name": name, "color": "ededed", "default": false, "description": nil}
}

func ghRefJSON(v repoView, ref, sha, typ string) map[string]any {
	api := v.API + "/api/v3/repos/" + v.full()
	return map[string]any{"ref": ref, "node_id": ghNodeID("REF", stableID(ref)), "url": api + "/git/" + ref,
		"object": map[string]any{"sha": sha, "type": typ, "url": api + "/git/" + typ + "s/" + sha}}
}

// ghMerge carries the mergeability fields of a single-PR answer.
type ghMerge struct {
	mergeable  *bool
	state      string
	rebaseable *bool
	testMerge  string
}

// ghPullJSON is a pull request; m is nil for list items and webhook payloads without
// mergeability.
func ghPullJSON(v repoView, pr PullRequest, m *ghMerge) map[string]any {
	api := v.API + "/api/v3/repos/" + v.full()
	n := strconv.Itoa(pr.Number)
	state := "open"
	if pr.State != PROpen {
		state = "closed"
	}
	labels := make([]map[string]any, 0, len(pr.Labels))
	for _, l := range pr.Labels {
		labels = append(labels, ghLabelJSON(v, l))
	}
	reviewers := make([]map[string]any, 0, len(pr.Reviewers))
	for _, r := range pr.Reviewers {
		reviewers = append(reviewers, ghUserJSON(v.API, v.Web, r))
	}
	repo := ghRepoJSON(v, false)
	side := func(ref, sha string) map[string]any {
		return map[string]any{"label": v.Owner + ":" + ref, "ref": ref, "sha": sha, "user": ghUserJSON(v.API, v.Web, v.Owner), "repo": repo}
	}
	mergeSHA := any(nil)
	if pr.MergeCommitSHA != "" {
		mergeSHA = pr.MergeCommitSHA
	}
	out := map[string]any{
		"url": api + "/pulls/" + n, "id": pr.ID, "node_id": ghNodeID("PR", pr.ID),
		"html_url": v.Web + "/" + v.full() + "/pull/" + n, "diff_url": v.Web + "/" + v.full() + "/pull/" + n + ".diff",
		"patch_url": v.Web + "/" + v.full() + "/pull/" + n + ".patch", "issue_url": api + "/issues/" + n,
		"commits_url": api + "/pulls/" + n + "/commits", "statuses_url": api + "/statuses/" + pr.HeadSHA,
		"number": pr.Number, "state": state, "locked": pr.Locked, "title": pr.Title, "user": ghUserJSON(v.API, v.Web, pr.Author),
		"body": nilIfEmpty(pr.Body), "labels": labels, "milestone": nil, "active_lock_reason": nil,
		"created_at": isoTime(pr.CreatedAt), "updated_at": isoTime(pr.UpdatedAt), "closed_at": isoTime(pr.ClosedAt),
		"merged_at": isoTime(pr.MergedAt), "merge_commit_sha": mergeSHA, "assignee": nil, "assignees": []any{},
		"requested_reviewers": reviewers, "requested_teams": []any{}, "head": side(pr.Head, pr.HeadSHA), "base": side(pr.Base, pr.BaseSHA),
		"author_association": "OWNER", "auto_merge": nil, "draft": pr.Draft,
	}
	if m != nil {
		out["merged"] = pr.State == PRMerged
		out["mergeable"] = boolOrNil(m.mergeable)
		out["rebaseable"] = boolOrNil(m.rebaseable)
		out["mergeable_state"] = m.state
		out["merged_by"] = ghUserJSON(v.API, v.Web, pr.MergedBy)
		out["comments"] = len(pr.Comments)
		out["review_comments"] = 0
		out["maintainer_can_modify"] = false
		if m.testMerge != "" && pr.State == PROpen {
			out["merge_commit_sha"] = m.testMerge
		}
	}
	return out
}

func boolOrNil(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func ghStatusJSON(v repoView, s *Status) map[string]any {
	return map[string]any{
		"url": v.API + "/api/v3/repos/" + v.full() + "/statuses/" + s.SHA, "avatar_url": nil, "id": s.ID,
		"node_id": ghNodeID("SC", s.ID), "state": s.State, "description": nilIfEmpty(s.Description),
		"target_url": nilIfEmpty(s.TargetURL), "context": s.Context, "created_at": isoTime(s.CreatedAt),
		"updated_at": isoTime(s.UpdatedAt), "creator": ghUserJSON(v.API, v.Web, s.Creator),
	}
}

func ghCommentJSON(v repoView, number int, c Comment) map[string]any {
	api := v.API + "/api/v3/repos/" + v.full()
	return map[string]any{
		"id": c.ID, "node_id": ghNodeID("IC", c.ID), "url": api + "/issues/comments/" + strconv.FormatInt(c.ID, 10),
		"html_url":  v.Web + "/" + v.full() + "/pull/" + strconv.Itoa(number) + "#issuecomment-" + strconv.FormatInt(c.ID, 10),
		"issue_url": api + "/issues/" + strconv.Itoa(number), "body": c.Body, "user": ghUserJSON(v.API, v.Web, c.User),
		"created_at": isoTime(c.CreatedAt), "updated_at": isoTime(c.UpdatedAt), "author_association": "OWNER",
	}
}

// --- handlers ---------------------------------------------------------------------------------

func (g *GitHub) getUser(c *ghCall) {
	u := ghUserJSON(g.URL(), g.web(), c.user)
	u["name"] = c.user
	u["email"] = c.user + "@users.noreply.example.com"
	u["created_at"] = "2020-01-01T00:00:00Z"
	writeJSON(c.w, 200, u)
}

func (g *GitHub) defaultRef(c *ghCall) string {
	if ref := c.r.URL.Query().Get("ref"); ref != "" {
		return ref
	}
	return c.rv.DefaultBranch
}

func (g *GitHub) listBranches(c *ghCall) {
	refs, err := c.rs.repo.refs(c.ctx, "refs/heads/")
	if err != nil {
		ghError(c.w, 500, err.Error(), "")
		return
	}
	names := sortedKeys(refs)
	writeGHPage(c, names, func(ref string) map[string]any {
		sha := refs[ref]
		return map[string]any{"name": strings.TrimPrefix(ref, "refs/heads/"), "protected": false,
			"commit": map[string]any{"sha": sha, "url": c.rv.API + "/api/v3/repos/" + c.rv.full() + "/commits/" + sha}}
	})
}

func (g *GitHub) getBranch(c *ghCall) {
	name := c.r.PathValue("branch")
	sha, err := c.rs.repo.branchHead(c.ctx, name)
	if err != nil {
		ghError(c.w, 404, "Branch not found", "branches/branches#get-a-branch")
		return
	}
	commit, err := c.rs.repo.commit(c.ctx, sha)
	if err != nil {
		ghError(c.w, 500, err.Error(), "")
		return
	}
	c.rs.mu.Lock()
	protected := len(c.rs.required[name]) > 0
	c.rs.mu.Unlock()
	writeJSON(c.w, 200, map[string]any{"name": name, "commit": ghCommitJSON(c.rv, commit, nil, false), "protected": protected,
		"_links": map[string]any{"self": c.rv.API + "/api/v3/repos/" + c.rv.full() + "/branches/" + name,
			"html": c.rv.Web + "/" + c.rv.full() + "/tree/" + name}})
}

func (g *GitHub) contentJSON(c *ghCall, ref, commitSHA string, e TreeEntry, data []byte) map[string]any {
	api := c.rv.API + "/api/v3/repos/" + c.rv.full()
	typ := map[string]string{"blob": "file", "tree": "dir", "commit": "submodule"}[e.Type]
	if e.Mode == "120000" {
		typ = "symlink"
	}
	name := e.Path[strings.LastIndex(e.Path, "/")+1:]
	self := api + "/contents/" + e.Path + "?ref=" + url.QueryEscape(ref)
	gitURL := api + "/git/" + map[string]string{"file": "blobs", "dir": "trees"}[typ] + "/" + e.SHA
	html := c.rv.Web + "/" + c.rv.full() + "/" + map[bool]string{true: "tree", false: "blob"}[typ == "dir"] + "/" + ref + "/" + e.Path
	m := map[string]any{"type": typ, "size": e.Size, "name": name, "path": e.Path, "sha": e.SHA, "url": self,
		"git_url": gitURL, "html_url": html, "download_url": nil,
		"_links": map[string]any{"self": self, "git": gitURL, "html": html}}
	if typ == "file" {
		m["download_url"] = c.rv.API + "/raw/" + c.rv.full() + "/" + commitSHA + "/" + e.Path
	}
	if data != nil {
		m["encoding"] = "base64"
		m["content"] = wrapBase64(data)
	}
	return m
}

// wantsRaw reports whether the client asked for the raw media type.
func wantsRaw(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/vnd.github.raw") || strings.Contains(a, "application/vnd.github.v3.raw")
}

// wrapBase64 encodes like GitHub: base64 with a newline every 60 characters.
func wrapBase64(data []byte) string {
	enc := base64.StdEncoding.EncodeToString(data)
	var b strings.Builder
	for len(enc) > 60 {
		b.WriteString(enc[:60])
		b.WriteByte('\n')
		enc = enc[60:]
	}
	b.WriteString(enc)
	b.WriteByte('\n')
	return b.String()
}

func (g *GitHub) getContents(c *ghCall) {
	ref := g.defaultRef(c)
	path := strings.Trim(c.r.PathValue("path"), "/")
	commitSHA, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		ghError(c.w, 404, "No commit found for the ref "+ref, "repos/contents#get-repository-content")
		return
	}
	e, err := c.rs.repo.entry(c.ctx, commitSHA, path)
	if err != nil {
		ghError(c.w, 404, "Not Found", "repos/contents#get-repository-content")
		return
	}
	if e.Type == "tree" {
		entries, err := c.rs.repo.lsTree(c.ctx, commitSHA, false, path)
		if err != nil {
			ghError(c.w, 500, err.Error(), "")
			return
		}
		out := make([]map[string]any, 0, len(entries))
		for _, te := range entries {
			out = append(out, g.contentJSON(c, ref, commitSHA, te, nil))
		}
		writeJSON(c.w, 200, out)
		return
	}
	data, err := c.rs.repo.readBlob(c.ctx, e.SHA)
	if err != nil {
		ghError(c.w, 500, err.Error(), "")
		return
	}
	if wantsRaw(c.r) {
		c.w.Header().Set("Content-Type", "application/vnd.github.raw")
		c.w.WriteHeader(200)
		_, _ = c.w.Write(data)
		return
	}
	e.Path = path
	writeJSON(c.w, 200, g.contentJSON(c, ref, commitSHA, e, data))
}

func (g *GitHub) raw(c *ghCall) {
	data, _, err := c.rs.repo.readFile(c.ctx, c.r.PathValue("sha"), c.r.PathValue("path"))
	if err != nil {
		c.w.WriteHeader(404)
		_, _ = c.w.Write([]byte("404: Not Found"))
		return
	}
	c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = c.w.Write(data)
}

type ghContentBody struct {
	Message   string     `json:"message"`
	Content   *string    `json:"content"`
	SHA       string     `json:"sha"`
	Branch    string     `json:"branch"`
	Author    *ghSigBody `json:"author"`
	Committer *ghSigBody `json:"committer"`
}

type ghSigBody struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	Date  string `json:"date"`
}

func (g *GitHub) sigFrom(b *ghSigBody, user string) (Signature, error) {
	if b == nil || b.Name == "" {
		return g.userSig(user), nil
	}
	s := Signature{Name: b.Name, Email: b.Email, When: time.Now()}
	if b.Date != "" {
		t, err := time.Parse(time.RFC3339, b.Date)
		if err != nil {
			return s, fmt.Errorf("invalid date %q", b.Date)
		}
		s.When = t
	}
	return s, nil
}

// signatures are a commit's author and committer as a request names them; the committer
// defaults to the author.
func (g *GitHub) signatures(author, committer *ghSigBody, user string) (Signature, Signature, error) {
	a, err := g.sigFrom(author, user)
	if err != nil || committer == nil {
		return a, a, err
	}
	c, err := g.sigFrom(committer, user)
	return a, c, err
}

// putContents is the contents API create/update of one file: one commit per call, guarded by
// the file's blob SHA and by the branch head.
func (g *GitHub) putContents(c *ghCall) {
	g.writeContents(c, false)
}

func (g *GitHub) deleteContents(c *ghCall) {
	g.writeContents(c, true)
}

func (g *GitHub) writeContents(c *ghCall, del bool) {
	const doc = "repos/contents#create-or-update-file-contents"
	var body ghContentBody
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	path, err := cleanPath(c.r.PathValue("path"))
	if err != nil {
		ghError(c.w, 422, "path is invalid", doc)
		return
	}
	if body.Message == "" {
		ghError(c.w, 422, "Invalid request.\n\n\"message\" wasn't supplied.", doc)
		return
	}
	if !del && body.Content == nil {
		ghError(c.w, 422, "Invalid request.\n\n\"content\" wasn't supplied.", doc)
		return
	}
	branch := body.Branch
	if branch == "" {
		branch = c.rv.DefaultBranch
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	head, err := c.rs.repo.branchHead(c.ctx, branch)
	if err != nil {
		ghError(c.w, 404, "Branch "+branch+" not found", doc)
		return
	}
	existing, eerr := c.rs.repo.entry(c.ctx, head, path)
	exists := eerr == nil && existing.Type == "blob"
	switch {
	case del && !exists:
		ghError(c.w, 404, "Not Found", doc)
		return
	case exists && body.SHA == "":
		ghError(c.w, 422, "Invalid request.\n\n\"sha\" wasn't supplied.", doc)
		return
	case exists && body.SHA != existing.SHA:
		ghError(c.w, 409, path+" does not match "+body.SHA, doc)
		return
	}
	change := treeChange{Path: path, Delete: del}
	if !del {
		data, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(*body.Content, "\n", ""))
		if err != nil {
			ghError(c.w, 422, "content is not valid Base64", doc)
			return
		}
		if change.SHA, err = c.rs.repo.writeBlob(c.ctx, data); err != nil {
			ghError(c.w, 500, err.Error(), doc)
			return
		}
		if exists {
			change.Mode = existing.Mode
		}
	}
	author, committer, err := g.signatures(body.Author, body.Committer, c.user)
	if err != nil {
		ghError(c.w, 422, err.Error(), doc)
		return
	}
	tree, err := c.rs.repo.buildTree(c.ctx, head, []treeChange{change})
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	sha, err := c.rs.repo.commitTree(c.ctx, tree, []string{head}, body.Message, author, committer)
	if err == nil {
		err = g.git.moveRef(c.ctx, c.rs.owner, c.rs.name, "refs/heads/"+branch, sha, c.user, func(cur string) error {
			if cur != head {
				return fmt.Errorf("%w: is at %s but expected %s", ErrRefConflict, cur, head)
			}
			return nil
		})
	}
	if err != nil {
		if errors.Is(err, ErrRefConflict) {
			ghError(c.w, 409, strings.TrimPrefix(err.Error(), ErrRefConflict.Error()+": "), doc)
			return
		}
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	commit, _ := c.rs.repo.commit(c.ctx, sha)
	resp := map[string]any{"commit": ghGitCommitJSON(c.rv, commit), "content": nil}
	status := 200
	if !del {
		e, _ := c.rs.repo.entry(c.ctx, sha, path)
		e.Path = path
		resp["content"] = g.contentJSON(c, branch, sha, e, nil)
		if !exists {
			status = 201
		}
	}
	writeJSON(c.w, status, resp)
}

// --- git data API -----------------------------------------------------------------------------

func (g *GitHub) refObjectType(c *ghCall, sha string) string {
	return g.refType(c, "", sha)
}

// refType is "commit" for branches (they always point at commits) and asks git otherwise.
func (g *GitHub) refType(c *ghCall, ref, sha string) string {
	if strings.HasPrefix(ref, "refs/heads/") {
		return "commit"
	}
	t, err := c.rs.repo.objectType(c.ctx, sha)
	if err != nil {
		return "commit"
	}
	return t
}

func (g *GitHub) getRef(c *ghCall) {
	ref := "refs/" + strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	sha, err := c.rs.repo.refValue(c.ctx, ref)
	if err != nil || sha == "" {
		ghError(c.w, 404, "Not Found", "git/refs#get-a-reference")
		return
	}
	writeJSON(c.w, 200, ghRefJSON(c.rv, ref, sha, g.refType(c, ref, sha)))
}

// getRefs answers the legacy /git/refs/{ref}: the exact ref as an object, else an array of refs
// with that prefix.
func (g *GitHub) getRefs(c *ghCall) {
	sub := strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	refs, err := c.rs.repo.refs(c.ctx, "refs/")
	if err != nil {
		ghError(c.w, 500, err.Error(), "")
		return
	}
	if sub != "" {
		if sha, ok := refs["refs/"+sub]; ok {
			writeJSON(c.w, 200, ghRefJSON(c.rv, "refs/"+sub, sha, g.refType(c, "refs/"+sub, sha)))
			return
		}
	}
	out := g.refsWithPrefix(c, refs, "refs/"+sub)
	if len(out) == 0 {
		ghError(c.w, 404, "Not Found", "git/refs#get-a-reference")
		return
	}
	writeJSON(c.w, 200, out)
}

func (g *GitHub) refsWithPrefix(c *ghCall, refs map[string]string, prefix string) []map[string]any {
	out := []map[string]any{}
	for _, ref := range sortedKeys(refs) {
		if strings.HasPrefix(ref, prefix) && !strings.HasPrefix(ref, "refs/merge-requests/") {
			out = append(out, ghRefJSON(c.rv, ref, refs[ref], g.refType(c, ref, refs[ref])))
		}
	}
	return out
}

func (g *GitHub) matchingRefs(c *ghCall) {
	refs, err := c.rs.repo.refs(c.ctx, "refs/")
	if err != nil {
		ghError(c.w, 500, err.Error(), "")
		return
	}
	writeJSON(c.w, 200, g.refsWithPrefix(c, refs, "refs/"+strings.TrimPrefix(c.r.PathValue("ref"), "refs/")))
}

func (g *GitHub) createRef(c *ghCall) {
	const doc = "git/refs#create-a-reference"
	var body struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	if !strings.HasPrefix(body.Ref, "refs/") || strings.Count(body.Ref, "/") < 2 {
		ghError(c.w, 422, "Reference name is invalid", doc)
		return
	}
	if !strings.HasPrefix(body.Ref, "refs/heads/") && !strings.HasPrefix(body.Ref, "refs/tags/") {
		ghError(c.w, 422, "Reference name is invalid", doc)
		return
	}
	if err := validBranch(strings.SplitN(body.Ref, "/", 3)[2]); err != nil {
		ghError(c.w, 422, "Reference name is invalid", doc)
		return
	}
	if _, err := c.rs.repo.objectType(c.ctx, body.SHA); err != nil {
		ghError(c.w, 422, "Object does not exist", doc)
		return
	}
	err := g.setRef(c.ctx, c.rs, body.Ref, body.SHA, c.user, createOnly)
	switch {
	case errors.Is(err, ErrExists), errors.Is(err, ErrRefConflict):
		ghError(c.w, 422, "Reference already exists", doc)
		return
	case err != nil:
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	c.w.Header().Set("Location", c.rv.API+"/api/v3/repos/"+c.rv.full()+"/git/"+body.Ref)
	writeJSON(c.w, 201, ghRefJSON(c.rv, body.Ref, body.SHA, g.refType(c, body.Ref, body.SHA)))
}

func (g *GitHub) updateRef(c *ghCall) {
	const doc = "git/refs#update-a-reference"
	var body struct {
		SHA   string `json:"sha"`
		Force bool   `json:"force"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	ref := "refs/" + strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	if typ, err := c.rs.repo.objectType(c.ctx, body.SHA); err != nil || (strings.HasPrefix(ref, "refs/heads/") && typ != "commit") {
		ghError(c.w, 422, "Object does not exist", doc)
		return
	}
	err := g.setRef(c.ctx, c.rs, ref, body.SHA, c.user, func(cur string) error {
		if cur == "" {
			return ErrNotFound
		}
		if body.Force {
			return nil
		}
		ok, err := c.rs.repo.isAncestor(c.ctx, cur, body.SHA)
		if err != nil {
			return err
		}
		if !ok {
			return ErrRefConflict
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNotFound):
		ghError(c.w, 422, "Reference does not exist", doc)
		return
	case errors.Is(err, ErrRefConflict):
		ghError(c.w, 422, "Update is not a fast forward", doc)
		return
	case err != nil:
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	writeJSON(c.w, 200, ghRefJSON(c.rv, ref, body.SHA, g.refType(c, ref, body.SHA)))
}

func (g *GitHub) deleteRef(c *ghCall) {
	ref := "refs/" + strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	err := g.setRef(c.ctx, c.rs, ref, "", c.user, nil)
	switch {
	case errors.Is(err, ErrNotFound):
		ghError(c.w, 422, "Reference does not exist", "git/refs#delete-a-reference")
	case err != nil:
		ghError(c.w, 500, err.Error(), "git/refs#delete-a-reference")
	default:
		c.w.WriteHeader(http.StatusNoContent)
	}
}

func (g *GitHub) getGitCommit(c *ghCall) {
	sha := c.r.PathValue("sha")
	if t, err := c.rs.repo.objectType(c.ctx, sha); err != nil || t != "commit" {
		ghError(c.w, 404, "Not Found", "git/commits#get-a-commit-object")
		return
	}
	commit, err := c.rs.repo.commit(c.ctx, sha)
	if err != nil {
		ghError(c.w, 404, "Not Found", "git/commits#get-a-commit-object")
		return
	}
	writeJSON(c.w, 200, ghGitCommitJSON(c.rv, commit))
}

func (g *GitHub) createGitCommit(c *ghCall) {
	const doc = "git/commits#create-a-commit"
	var body struct {
		Message   *string    `json:"message"`
		Tree      string     `json:"tree"`
		Parents   []string   `json:"parents"`
		Author    *ghSigBody `json:"author"`
		Committer *ghSigBody `json:"committer"`
		Signature string     `json:"signature"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	if body.Message == nil {
		ghError(c.w, 422, "Invalid request.\n\n\"message\" wasn't supplied.", doc)
		return
	}
	if t, err := c.rs.repo.objectType(c.ctx, body.Tree); err != nil || t != "tree" {
		ghError(c.w, 422, "Tree SHA does not exist", doc)
		return
	}
	for _, p := range body.Parents {
		if t, err := c.rs.repo.objectType(c.ctx, p); err != nil || t != "commit" {
			ghError(c.w, 422, "Parent SHA does not exist or is not a commit object", doc)
			return
		}
	}
	author, committer, err := g.signatures(body.Author, body.Committer, c.user)
	if err != nil {
		ghError(c.w, 422, err.Error(), doc)
		return
	}
	sha, err := c.rs.repo.commitTree(c.ctx, body.Tree, body.Parents, *body.Message, author, committer)
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	commit, err := c.rs.repo.commit(c.ctx, sha)
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	c.w.Header().Set("Location", c.rv.API+"/api/v3/repos/"+c.rv.full()+"/git/commits/"+sha)
	writeJSON(c.w, 201, ghGitCommitJSON(c.rv, commit))
}

func (g *GitHub) treeJSON(c *ghCall, tree string, recursive bool) (map[string]any, error) {
	entries, err := c.rs.repo.lsTree(c.ctx, tree, recursive, "")
	if err != nil {
		return nil, err
	}
	api := c.rv.API + "/api/v3/repos/" + c.rv.full()
	list := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		m := map[string]any{"path": e.Path, "mode": e.Mode, "type": e.Type, "sha": e.SHA, "url": api + "/git/" + e.Type + "s/" + e.SHA}
		if e.Type == "blob" {
			m["size"] = e.Size
		}
		list = append(list, m)
	}
	return map[string]any{"sha": tree, "url": api + "/git/trees/" + tree, "tree": list, "truncated": false}, nil
}

func (g *GitHub) getTree(c *ghCall) {
	tree, err := c.rs.repo.resolveTree(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		ghError(c.w, 404, "Not Found", "git/trees#get-a-tree")
		return
	}
	rec := c.r.URL.Query().Get("recursive")
	m, err := g.treeJSON(c, tree, rec != "" && rec != "0" && rec != "false")
	if err != nil {
		ghError(c.w, 500, err.Error(), "git/trees#get-a-tree")
		return
	}
	writeJSON(c.w, 200, m)
}

// createTree builds a tree on base_tree; an entry with "sha": null deletes the path.
func (g *GitHub) createTree(c *ghCall) {
	const doc = "git/trees#create-a-tree"
	var body struct {
		BaseTree string                       `json:"base_tree"`
		Tree     []map[string]json.RawMessage `json:"tree"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	if body.Tree == nil {
		ghError(c.w, 422, "Invalid request.\n\n\"tree\" wasn't supplied.", doc)
		return
	}
	base := ""
	if body.BaseTree != "" {
		t, err := c.rs.repo.resolveTree(c.ctx, body.BaseTree)
		if err != nil {
			ghError(c.w, 404, "Not Found", doc)
			return
		}
		base = t
	}
	var changes []treeChange
	for i, raw := range body.Tree {
		str := func(k string) (string, bool) {
			v, ok := raw[k]
			if !ok || string(v) == "null" {
				return "", false
			}
			var s string
			_ = json.Unmarshal(v, &s)
			return s, true
		}
		path, _ := str("path")
		mode, _ := str("mode")
		typ, _ := str("type")
		sha, hasSHA := str("sha")
		content, hasContent := str("content")
		_, shaKey := raw["sha"]
		if _, err := cleanPath(path); err != nil {
			ghError(c.w, 422, fmt.Sprintf("tree.path %q is invalid (entry %d)", path, i), doc)
			return
		}
		if typ == "" {
			typ = "blob"
		}
		if typ != "blob" {
			ghError(c.w, 422, fmt.Sprintf("tree entry %d: type %q is not supported by scmtest (only blob)", i, typ), doc)
			return
		}
		switch mode {
		case "", "100644", "100755", "120000":
		default:
			ghError(c.w, 422, fmt.Sprintf("tree.mode %q is invalid (entry %d)", mode, i), doc)
			return
		}
		switch {
		case hasContent:
			blob, err := c.rs.repo.writeBlob(c.ctx, []byte(content))
			if err != nil {
				ghError(c.w, 500, err.Error(), doc)
				return
			}
			changes = append(changes, treeChange{Path: path, Mode: mode, SHA: blob})
		case hasSHA:
			if t, err := c.rs.repo.objectType(c.ctx, sha); err != nil || t != "blob" {
				ghError(c.w, 422, fmt.Sprintf("tree.sha %s is not a valid blob", sha), doc)
				return
			}
			changes = append(changes, treeChange{Path: path, Mode: mode, SHA: sha})
		case shaKey:
			changes = append(changes, treeChange{Path: path, Delete: true})
		default:
			ghError(c.w, 422, fmt.Sprintf("Must supply either tree.sha or tree.content (entry %d)", i), doc)
			return
		}
	}
	tree, err := c.rs.repo.buildTree(c.ctx, base, changes)
	if err != nil {
		ghError(c.w, 422, err.Error(), doc)
		return
	}
	// Like GitHub, the answer lists the new tree's own entries, not the whole repo.
	m, err := g.treeJSON(c, tree, false)
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	c.w.Header().Set("Location", c.rv.API+"/api/v3/repos/"+c.rv.full()+"/git/trees/"+tree)
	writeJSON(c.w, 201, m)
}

func (g *GitHub) getBlob(c *ghCall) {
	sha := c.r.PathValue("sha")
	if t, err := c.rs.repo.objectType(c.ctx, sha); err != nil || t != "blob" {
		ghError(c.w, 404, "Not Found", "git/blobs#get-a-blob")
		return
	}
	data, err := c.rs.repo.readBlob(c.ctx, sha)
	if err != nil {
		ghError(c.w, 404, "Not Found", "git/blobs#get-a-blob")
		return
	}
	if wantsRaw(c.r) {
		c.w.Header().Set("Content-Type", "application/vnd.github.raw")
		_, _ = c.w.Write(data)
		return
	}
	writeJSON(c.w, 200, map[string]any{"sha": sha, "node_id": ghNodeID("B", stableID(sha)), "size": len(data),
		"url": c.rv.API + "/api/v3/repos/" + c.rv.full() + "/git/blobs/" + sha, "content": wrapBase64(data), "encoding": "base64"})
}

func (g *GitHub) createBlob(c *ghCall) {
	const doc = "git/blobs#create-a-blob"
	var body struct {
		Content  *string `json:"content"`
		Encoding string  `json:"encoding"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	if body.Content == nil {
		ghError(c.w, 422, "Invalid request.\n\n\"content\" wasn't supplied.", doc)
		return
	}
	data := []byte(*body.Content)
	switch body.Encoding {
	case "", "utf-8", "utf8":
	case "base64":
		d, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(*body.Content, "\n", ""))
		if err != nil {
			ghError(c.w, 422, "content is not valid Base64", doc)
			return
		}
		data = d
	default:
		ghValidation(c.w, doc, map[string]any{"resource": "Blob", "field": "encoding", "code": "invalid"})
		return
	}
	sha, err := c.rs.repo.writeBlob(c.ctx, data)
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	u := c.rv.API + "/api/v3/repos/" + c.rv.full() + "/git/blobs/" + sha
	c.w.Header().Set("Location", u)
	writeJSON(c.w, 201, map[string]any{"sha": sha, "url": u})
}

// --- commits, compare, statuses ---------------------------------------------------------------

func (g *GitHub) listCommits(c *ghCall) {
	q := c.r.URL.Query()
	ref := q.Get("sha")
	if ref == "" {
		ref = c.rv.DefaultBranch
	}
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		ghError(c.w, 404, "Not Found", "commits/commits#list-commits")
		return
	}
	commits, err := c.rs.repo.log(c.ctx, sha, q.Get("path"), 0)
	writeGHList(c, commits, err, "commits/commits#list-commits", func(cm Commit) map[string]any {
		return ghCommitJSON(c.rv, cm, nil, false)
	})
}

// getCommit serves /commits/{ref}, /commits/{ref}/status and /commits/{ref}/statuses (a ref may
// contain slashes, so the suffix is split off here).
func (g *GitHub) getCommit(c *ghCall) {
	ref := c.r.PathValue("ref")
	switch {
	case strings.HasSuffix(ref, "/status"):
		g.combinedStatus(c, strings.TrimSuffix(ref, "/status"))
		return
	case strings.HasSuffix(ref, "/statuses"):
		g.listStatuses(c, strings.TrimSuffix(ref, "/statuses"))
		return
	}
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		ghError(c.w, 422, "No commit found for SHA: "+ref, "commits/commits#get-a-commit")
		return
	}
	commit, err := c.rs.repo.commit(c.ctx, sha)
	if err != nil {
		ghError(c.w, 500, err.Error(), "commits/commits#get-a-commit")
		return
	}
	parent := ""
	if len(commit.Parents) > 0 {
		parent = commit.Parents[0]
	}
	files, err := c.rs.repo.diff(c.ctx, parent, sha, true)
	if err != nil {
		ghError(c.w, 500, err.Error(), "commits/commits#get-a-commit")
		return
	}
	writeJSON(c.w, 200, ghCommitJSON(c.rv, commit, files, true))
}

func (g *GitHub) compare(c *ghCall) {
	const doc = "commits/commits#compare-two-commits"
	spec := c.r.PathValue("spec")
	baseRef, headRef, ok := strings.Cut(spec, "...")
	if !ok {
		baseRef, headRef, ok = strings.Cut(spec, "..")
	}
	if !ok {
		ghError(c.w, 404, "Not Found", doc)
		return
	}
	strip := func(s string) string {
		if i := strings.Index(s, ":"); i >= 0 {
			return s[i+1:]
		}
		return s
	}
	base, err1 := c.rs.repo.resolve(c.ctx, strip(baseRef))
	head, err2 := c.rs.repo.resolve(c.ctx, strip(headRef))
	if err1 != nil || err2 != nil {
		ghError(c.w, 404, "Not Found", doc)
		return
	}
	mb, err := c.rs.repo.mergeBase(c.ctx, base, head)
	if err != nil || mb == "" {
		ghError(c.w, 404, "No common ancestor between "+baseRef+" and "+headRef+".", doc)
		return
	}
	ahead, _ := c.rs.repo.revList(c.ctx, "--reverse", mb+".."+head)
	behind, _ := c.rs.repo.revList(c.ctx, mb+".."+base)
	status := "diverged"
	switch {
	case len(ahead) == 0 && len(behind) == 0:
		status = "identical"
	case len(behind) == 0:
		status = "ahead"
	case len(ahead) == 0:
		status = "behind"
	}
	commits := make([]map[string]any, 0, len(ahead))
	for _, sha := range ahead {
		if cm, err := c.rs.repo.commit(c.ctx, sha); err == nil {
			commits = append(commits, ghCommitJSON(c.rv, cm, nil, false))
		}
	}
	files, err := c.rs.repo.diff(c.ctx, mb, head, true)
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	// GitHub lists at most 300 files of a comparison, silently, on every page.
	fl := make([]map[string]any, 0, min(len(files), 300))
	for _, f := range files[:min(len(files), 300)] {
		fl = append(fl, ghFileJSON(c.rv, head, f, true))
	}
	baseC, _ := c.rs.repo.commit(c.ctx, base)
	mbC, _ := c.rs.repo.commit(c.ctx, mb)
	api := c.rv.API + "/api/v3/repos/" + c.rv.full()
	writeJSON(c.w, 200, map[string]any{
		"url": api + "/compare/" + spec, "html_url": c.rv.Web + "/" + c.rv.full() + "/compare/" + spec,
		"permalink_url": c.rv.Web + "/" + c.rv.full() + "/compare/" + base + "..." + head,
		"base_commit":   ghCommitJSON(c.rv, baseC, nil, false), "merge_base_commit": ghCommitJSON(c.rv, mbC, nil, false),
		"status": status, "ahead_by": len(ahead), "behind_by": len(behind), "total_commits": len(ahead),
		"commits": commits, "files": fl,
	})
}

func (g *GitHub) createStatus(c *ghCall) {
	const doc = "commits/statuses#create-a-commit-status"
	var body struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	switch body.State {
	case "error", "failure", "pending", "success":
	default:
		ghValidation(c.w, doc, map[string]any{"resource": "Status", "field": "state", "code": "custom",
			"message": "state is not included in the list"})
		return
	}
	sha := c.r.PathValue("sha")
	if t, err := c.rs.repo.objectType(c.ctx, sha); err != nil || t != "commit" {
		ghError(c.w, 422, "No commit found for SHA: "+sha, doc)
		return
	}
	if body.Context == "" {
		body.Context = "default"
	}
	c.rs.mu.Lock()
	s := g.setStatus(c.rs, Status{SHA: sha, Context: body.Context, State: body.State, Native: body.State,
		Description: body.Description, TargetURL: body.TargetURL, Creator: c.user}, false)
	out := ghStatusJSON(c.rv, s)
	c.rs.mu.Unlock()
	writeJSON(c.w, 201, out)
}

func (g *GitHub) combinedStatus(c *ghCall, ref string) {
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		ghError(c.w, 422, "No commit found for SHA: "+ref, "commits/statuses#get-the-combined-status-for-a-specific-reference")
		return
	}
	c.rs.mu.Lock()
	latest := c.rs.latestStatuses(sha)
	state := combinedState(latest)
	list := make([]map[string]any, 0, len(latest))
	for _, k := range sortedKeys(latest) {
		list = append(list, ghStatusJSON(c.rv, latest[k]))
	}
	c.rs.mu.Unlock()
	api := c.rv.API + "/api/v3/repos/" + c.rv.full()
	writeJSON(c.w, 200, map[string]any{"state": state, "statuses": list, "sha": sha, "total_count": len(list),
		"repository": ghRepoJSON(c.rv, false), "commit_url": api + "/commits/" + sha, "url": api + "/commits/" + sha + "/status"})
}

func (g *GitHub) listStatuses(c *ghCall, ref string) {
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		ghError(c.w, 404, "Not Found", "commits/statuses#list-commit-statuses-for-a-reference")
		return
	}
	c.rs.mu.Lock()
	all := c.rs.statuses[sha]
	out := make([]map[string]any, 0, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		out = append(out, ghStatusJSON(c.rv, all[i]))
	}
	c.rs.mu.Unlock()
	writeJSON(c.w, 200, out)
}

// --- pull requests ----------------------------------------------------------------------------

// pull finds the PR named in the path; callers hold c.rs.mu.
func (g *GitHub) pull(c *ghCall) *prState { return c.rs.prAt(c.r, "number") }

// lockPull is repoState.lockPR with GitHub's 404, doc naming the endpoint's documentation.
func (g *GitHub) lockPull(c *ghCall, doc string) *prState {
	return c.rs.lockPR(c.r, "number", func() { ghError(c.w, 404, "Not Found", doc) })
}

// mergeInfo computes the single-PR mergeability fields; callers hold c.rs.mu.
func (g *GitHub) mergeInfo(c *ghCall, pr *prState) *ghMerge {
	m := &ghMerge{state: "unknown"}
	if pr.State != PROpen {
		return m
	}
	state, _, err := g.mergeability(c.ctx, c.rs, pr, true)
	if err != nil {
		return m
	}
	t, f := true, false
	switch state {
	case MergeClean, MergeBlocked:
		m.mergeable, m.rebaseable = &t, &t
		m.state = string(state)
		if state == MergeClean {
			latest := c.rs.latestStatuses(pr.HeadSHA)
			if combinedState(latest) == "failure" {
				m.state = "unstable"
			}
		}
		if pr.Draft {
			m.state = "draft"
		}
		m.testMerge = g.testMerge(c, pr)
	case MergeDirty:
		m.mergeable, m.rebaseable = &f, &f
		m.state = "dirty"
	}
	return m
}

// testMerge creates (once per head/base pair) the merge commit GitHub exposes as
// merge_commit_sha and refs/pull/N/merge while a PR is open and mergeable.
func (g *GitHub) testMerge(c *ghCall, pr *prState) string {
	key := pr.BaseSHA + ".." + pr.HeadSHA
	if pr.testKey == key {
		return pr.testMerge
	}
	tree, conflicts, err := c.rs.repo.mergeCommits(c.ctx, pr.BaseSHA, pr.HeadSHA)
	if err != nil || len(conflicts) > 0 {
		return ""
	}
	sig := g.committer
	sig.When = time.Now()
	sha, err := c.rs.repo.commitTree(c.ctx, tree, []string{pr.BaseSHA, pr.HeadSHA},
		fmt.Sprintf("Merge %s into %s", pr.HeadSHA, pr.BaseSHA), sig, sig)
	if err != nil {
		return ""
	}
	ref := fmt.Sprintf("refs/pull/%d/merge", pr.Number)
	cur, _ := c.rs.repo.refValue(c.ctx, ref)
	_ = c.rs.repo.updateRef(c.ctx, ref, sha, cur)
	pr.testKey, pr.testMerge = key, sha
	return sha
}

func (g *GitHub) createPull(c *ghCall) {
	const doc = "pulls/pulls#create-a-pull-request"
	var body struct {
		Title               string `json:"title"`
		Head                string `json:"head"`
		Base                string `json:"base"`
		Body                string `json:"body"`
		Draft               bool   `json:"draft"`
		MaintainerCanModify *bool  `json:"maintainer_can_modify"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	if body.Title == "" {
		ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "title", "code": "missing_field"})
		return
	}
	head := body.Head
	if owner, branch, ok := strings.Cut(head, ":"); ok {
		if owner != c.rs.owner {
			ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "head", "code": "invalid"})
			return
		}
		head = branch
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	if _, err := c.rs.repo.branchHead(c.ctx, body.Base); err != nil {
		ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "base", "code": "invalid"})
		return
	}
	if _, err := c.rs.repo.branchHead(c.ctx, head); err != nil {
		ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "head", "code": "invalid"})
		return
	}
	for _, p := range c.rs.prs {
		if p.State == PROpen && p.Head == head && p.Base == body.Base {
			ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "code": "custom",
				"message": fmt.Sprintf("A pull request already exists for %s:%s.", c.rs.owner, head)})
			return
		}
	}
	if n, err := g.aheadBy(c.ctx, c.rs, body.Base, head); err != nil || n == 0 {
		ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "code": "custom",
			"message": fmt.Sprintf("No commits between %s and %s", body.Base, head)})
		return
	}
	pr, err := g.openPR(c.ctx, c.rs, head, body.Base, body.Title, body.Body, c.user, body.Draft)
	if err != nil {
		ghError(c.w, 422, err.Error(), doc)
		return
	}
	g.mergeability(c.ctx, c.rs, pr, false) // starts the "computing" window, answers null below
	c.w.Header().Set("Location", c.rv.API+"/api/v3/repos/"+c.rv.full()+"/pulls/"+strconv.Itoa(pr.Number))
	writeJSON(c.w, 201, ghPullJSON(c.rv, pr.snapshot(), &ghMerge{state: "unknown"}))
}

// listPulls filters like GitHub: state (open|closed|all), head as "owner:branch" (a head
// without an owner is ignored, as GitHub does), base; sorted by creation, newest first.
func (g *GitHub) listPulls(c *ghCall) {
	q := c.r.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	headOwner, headBranch, headOK := strings.Cut(q.Get("head"), ":")
	base := q.Get("base")
	c.rs.mu.Lock()
	var sel []PullRequest
	for _, pr := range c.rs.prs {
		g.refresh(c.ctx, c.rs, pr)
		switch {
		case state == "open" && pr.State != PROpen, state == "closed" && pr.State == PROpen:
			continue
		case headOK && (headOwner != c.rs.owner || pr.Head != headBranch):
			continue
		case base != "" && pr.Base != base:
			continue
		}
		sel = append(sel, pr.snapshot())
	}
	c.rs.mu.Unlock()
	asc := q.Get("direction") == "asc"
	sort.SliceStable(sel, func(i, j int) bool {
		if asc {
			return sel[i].Number < sel[j].Number
		}
		return sel[i].Number > sel[j].Number
	})
	writeGHPage(c, sel, func(pr PullRequest) map[string]any {
		return ghPullJSON(c.rv, pr, nil)
	})
}

func (g *GitHub) getPull(c *ghCall) {
	pr := g.lockPull(c, "pulls/pulls#get-a-pull-request")
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	m := g.mergeInfo(c, pr)
	writeJSON(c.w, 200, ghPullJSON(c.rv, pr.snapshot(), m))
}

func (g *GitHub) updatePull(c *ghCall) {
	const doc = "pulls/pulls#update-a-pull-request"
	var body struct {
		Title *string `json:"title"`
		Body  *string `json:"body"`
		State *string `json:"state"`
		Base  *string `json:"base"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	pr := g.lockPull(c, doc)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if body.Base != nil && *body.Base != pr.Base {
		if _, err := c.rs.repo.branchHead(c.ctx, *body.Base); err != nil {
			ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "base", "code": "invalid"})
			return
		}
		pr.Base = *body.Base
	}
	if body.Title != nil {
		pr.Title = *body.Title
	}
	if body.Body != nil {
		pr.Body = *body.Body
	}
	if body.State != nil {
		switch *body.State {
		case "closed":
			g.closePR(c.rs, pr, c.user)
		case "open":
			if pr.State == PRMerged {
				ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "code": "custom",
					"message": "state cannot be changed. The pull request has been merged."})
				return
			}
			if err := g.reopenPR(c.ctx, c.rs, pr, c.user); err != nil && pr.State != PROpen {
				ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "code": "custom",
					"message": "state cannot be changed. The " + pr.Head + " branch has been deleted."})
				return
			}
		default:
			ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "state", "code": "invalid"})
			return
		}
	}
	pr.UpdatedAt = time.Now().UTC()
	writeJSON(c.w, 200, ghPullJSON(c.rv, pr.snapshot(), g.mergeInfo(c, pr)))
}

func (g *GitHub) prRange(c *ghCall, pr *prState) (string, string, error) {
	g.refresh(c.ctx, c.rs, pr)
	mb, err := c.rs.repo.mergeBase(c.ctx, pr.BaseSHA, pr.HeadSHA)
	if err != nil {
		return "", "", err
	}
	return mb, pr.HeadSHA, nil
}

// pullRange finds the call's PR and its commits (merge base .. head), or answers 404 (doc
// names GitHub's page) or 500 itself and reports false.
func (g *GitHub) pullRange(c *ghCall, doc string) (from, to string, ok bool) {
	c.rs.mu.Lock()
	pr := g.pull(c)
	if pr == nil {
		c.rs.mu.Unlock()
		ghError(c.w, 404, "Not Found", doc)
		return "", "", false
	}
	from, to, err := g.prRange(c, pr)
	c.rs.mu.Unlock()
	if err != nil {
		ghError(c.w, 500, err.Error(), "")
		return "", "", false
	}
	return from, to, true
}

func (g *GitHub) pullFiles(c *ghCall) {
	from, to, ok := g.pullRange(c, "pulls/pulls#list-pull-requests-files")
	if !ok {
		return
	}
	files, err := c.rs.repo.diff(c.ctx, from, to, true)
	writeGHList(c, files, err, "", func(f FileChange) map[string]any {
		return ghFileJSON(c.rv, to, f, true)
	})
}

func (g *GitHub) pullCommits(c *ghCall) {
	from, to, ok := g.pullRange(c, "pulls/pulls#list-commits-on-a-pull-request")
	if !ok {
		return
	}
	shas, _ := c.rs.repo.revList(c.ctx, "--reverse", from+".."+to)
	out := make([]map[string]any, 0, len(shas))
	for _, sha := range shas {
		if cm, err := c.rs.repo.commit(c.ctx, sha); err == nil {
			out = append(out, ghCommitJSON(c.rv, cm, nil, false))
		}
	}
	writeJSON(c.w, 200, out)
}

func (g *GitHub) isMerged(c *ghCall) {
	c.rs.mu.Lock()
	pr := g.pull(c)
	merged := pr != nil && pr.State == PRMerged
	c.rs.mu.Unlock()
	if !merged {
		ghError(c.w, 404, "Not Found", "pulls/pulls#check-if-a-pull-request-has-been-merged")
		return
	}
	c.w.WriteHeader(http.StatusNoContent)
}

// mergePull implements PUT /pulls/{n}/merge with GitHub's answers: 405 not mergeable / base
// modified, 409 head modified (sha guard), 422 bad merge_method.
func (g *GitHub) mergePull(c *ghCall) {
	const doc = "pulls/pulls#merge-a-pull-request"
	var body struct {
		CommitTitle   string  `json:"commit_title"`
		CommitMessage *string `json:"commit_message"`
		SHA           string  `json:"sha"`
		MergeMethod   string  `json:"merge_method"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	method := body.MergeMethod
	if method == "" {
		method = "merge"
	}
	if method != "merge" && method != "squash" && method != "rebase" {
		ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "field": "merge_method", "code": "invalid"})
		return
	}
	pr := g.lockPull(c, doc)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	g.refresh(c.ctx, c.rs, pr)
	title, msg := body.CommitTitle, ""
	if body.CommitMessage != nil {
		msg = *body.CommitMessage
	}
	switch method {
	case "merge":
		if title == "" {
			title = fmt.Sprintf("Merge pull request #%d from %s/%s", pr.Number, c.rs.owner, pr.Head)
		}
		if body.CommitMessage == nil {
			msg = pr.Title
		}
	case "squash":
		if title == "" {
			title = fmt.Sprintf("%s (#%d)", pr.Title, pr.Number)
		}
		if body.CommitMessage == nil {
			shas, _ := c.rs.repo.revList(c.ctx, "--reverse", pr.BaseSHA+".."+pr.HeadSHA)
			var lines []string
			for _, sha := range shas {
				if cm, err := c.rs.repo.commit(c.ctx, sha); err == nil {
					lines = append(lines, "* "+strings.TrimSpace(cm.Message))
				}
			}
			msg = strings.Join(lines, "\n\n")
		}
	}
	full := title
	if msg != "" {
		full += "\n\n" + msg
	}
	res, err := g.merge(c.ctx, c.rs, pr, mergeOpts{method: method, expectHead: body.SHA, message: full, user: c.user})
	if err != nil {
		var pe *prError
		if !errors.As(err, &pe) {
			ghError(c.w, 500, err.Error(), doc)
			return
		}
		switch pe.kind {
		case "head-modified":
			ghError(c.w, 409, "Head branch was modified. Review and try the merge again.", doc)
		case "base-modified":
			ghError(c.w, 405, "Base branch was modified. Review and try the merge again.", doc)
		case "blocked":
			ghError(c.w, 405, fmt.Sprintf("Required status check %q is expected.", pe.contexts[0]), doc)
		case "draft":
			ghError(c.w, 405, "Pull Request is still a draft", doc)
		case "not-ff":
			ghError(c.w, 405, "This branch can't be rebased", doc)
		case "conflict":
			if method == "rebase" {
				ghError(c.w, 405, "This branch can't be rebased", doc)
				return
			}
			ghError(c.w, 405, "Pull Request is not mergeable", doc)
		default:
			ghError(c.w, 405, "Pull Request is not mergeable", doc)
		}
		return
	}
	writeJSON(c.w, 200, map[string]any{"sha": res.sha, "merged": true, "message": "Pull Request successfully merged"})
}

func (g *GitHub) requestReviewers(c *ghCall) {
	const doc = "pulls/review-requests#request-reviewers-for-a-pull-request"
	var body struct {
		Reviewers     []string `json:"reviewers"`
		TeamReviewers []string `json:"team_reviewers"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	pr := g.lockPull(c, doc)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	for _, r := range body.Reviewers {
		if r == pr.Author {
			ghValidation(c.w, doc, map[string]any{"resource": "PullRequest", "code": "custom",
				"message": "Review cannot be requested from pull request author."})
			return
		}
	}
	for _, r := range body.Reviewers {
		if !slices.Contains(pr.Reviewers, r) {
			pr.Reviewers = append(pr.Reviewers, r)
		}
	}
	writeJSON(c.w, 201, ghPullJSON(c.rv, pr.snapshot(), nil))
}

func (g *GitHub) labelsJSON(c *ghCall, pr *prState) []map[string]any {
	out := make([]map[string]any, 0, len(pr.Labels))
	for _, l := range pr.Labels {
		out = append(out, ghLabelJSON(c.rv, l))
	}
	return out
}

func (g *GitHub) listLabels(c *ghCall) {
	pr := g.lockPull(c, "issues/labels#list-labels-for-an-issue")
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	writeJSON(c.w, 200, g.labelsJSON(c, pr))
}

// addLabels accepts GitHub's three body shapes: ["a"], {"labels":["a"]} and {"labels":[{"name":"a"}]}.
func (g *GitHub) addLabels(c *ghCall) {
	const doc = "issues/labels#add-labels-to-an-issue"
	var raw json.RawMessage
	if err := readJSON(c.r, &raw); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	var labels []string
	if err := json.Unmarshal(raw, &labels); err != nil {
		var obj struct {
			Labels json.RawMessage `json:"labels"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil || json.Unmarshal(obj.Labels, &labels) != nil {
			var named []struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(obj.Labels, &named) != nil {
				ghError(c.w, 422, "Invalid request.\n\n\"labels\" wasn't supplied.", doc)
				return
			}
			for _, n := range named {
				labels = append(labels, n.Name)
			}
		}
	}
	pr := g.lockPull(c, doc)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	g.Forge.addLabels(c.rs, pr, labels, c.user)
	writeJSON(c.w, 200, g.labelsJSON(c, pr))
}

func (g *GitHub) removeLabel(c *ghCall) {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	pr := g.pull(c)
	if pr == nil || !g.Forge.removeLabel(pr, c.r.PathValue("name")) {
		ghError(c.w, 404, "Label does not exist", "issues/labels#remove-a-label-from-an-issue")
		return
	}
	writeJSON(c.w, 200, g.labelsJSON(c, pr))
}

func (g *GitHub) listComments(c *ghCall) {
	pr := g.lockPull(c, "issues/comments#list-issue-comments")
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	// Oldest first, 30 a page by default (at most 100), Link header to the next, as GitHub.
	writeGHPage(c, pr.Comments, func(cm Comment) map[string]any {
		return ghCommentJSON(c.rv, pr.Number, cm)
	})
}

func (g *GitHub) createComment(c *ghCall) {
	const doc = "issues/comments#create-an-issue-comment"
	var body struct {
		Body string `json:"body"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	if !ghCommentBodyOK(c, doc, body.Body) {
		return
	}
	pr := g.lockPull(c, doc)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if pr.Locked {
		ghError(c.w, http.StatusForbidden, "Unable to create comment because issue is locked.", doc)
		return
	}
	cm := g.addComment(pr, body.Body, c.user)
	writeJSON(c.w, 201, ghCommentJSON(c.rv, pr.Number, cm))
}

// GitHubMaxComment is the longest comment body GitHub accepts, in characters.
const GitHubMaxComment = 65536

// ghCommentBodyOK answers GitHub's 422 for a missing or too long comment body.
func ghCommentBodyOK(c *ghCall, doc, body string) bool {
	switch {
	case body == "":
		ghValidation(c.w, doc, map[string]any{"resource": "IssueComment", "field": "body", "code": "missing_field"})
		return false
	case utf8.RuneCountInString(body) > GitHubMaxComment:
		ghValidation(c.w, doc, map[string]any{"resource": "IssueComment", "field": "data", "code": "unprocessable",
			"message": fmt.Sprintf("Body is too long (maximum is %d characters)", GitHubMaxComment)})
		return false
	}
	return true
}

// editComment is PATCH /repos/{owner}/{repo}/issues/comments/{id}: comments are addressed by
// repo and id, whatever PR holds them.
func (g *GitHub) editComment(c *ghCall) {
	const doc = "issues/comments#update-an-issue-comment"
	var body struct {
		Body string `json:"body"`
	}
	if err := readJSON(c.r, &body); err != nil {
		ghError(c.w, 400, "Problems parsing JSON", doc)
		return
	}
	id, err := strconv.ParseInt(c.r.PathValue("id"), 10, 64)
	if err != nil {
		ghError(c.w, http.StatusNotFound, "Not Found", doc)
		return
	}
	if !ghCommentBodyOK(c, doc, body.Body) {
		return
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	pr := c.rs.commentPR(id)
	if pr == nil {
		ghError(c.w, http.StatusNotFound, "Not Found", doc)
		return
	}
	cm, err := g.Forge.editComment(pr, id, body.Body, c.user)
	switch {
	case errors.Is(err, errLockedThread):
		ghError(c.w, http.StatusForbidden, "Unable to update comment because issue is locked.", doc)
	case err != nil:
		// GitHub also lets collaborators with write access edit others' comments; the fake
		// has no roles and answers as GitHub does a user without that access.
		ghError(c.w, http.StatusForbidden, "Resource not accessible by integration", doc)
	default:
		writeJSON(c.w, 200, ghCommentJSON(c.rv, pr.Number, cm))
	}
}

// --- webhooks ---------------------------------------------------------------------------------

// GitHubWebhookRequest builds a webhook request as GitHub sends it: JSON payload, X-GitHub-Event,
// X-GitHub-Delivery, X-Hub-Signature-256 (and the legacy SHA-1 X-Hub-Signature) over the body.
func GitHubWebhookRequest(ctx context.Context, url, secret string, ev WebhookEvent) (*http.Request, error) {
	var event string
	var payload map[string]any
	switch e := ev.(type) {
	case PREvent:
		v := e.view()
		event = "pull_request"
		action := e.Action
		payload = map[string]any{"action": action, "number": e.PR.Number, "pull_request": ghPRHookJSON(v, e.PR),
			"repository": ghRepoJSON(v, false), "sender": ghUserJSON(v.API, v.Web, senderOr(e.Sender, e.PR.Author))}
		if action == "synchronize" {
			payload["before"], payload["after"] = e.Before, e.PR.HeadSHA
		}
		switch action {
		case "labeled", "unlabeled":
			payload["label"] = ghLabelJSON(v, e.Label)
		case "edited":
			payload["changes"] = map[string]any{"title": map[string]any{"from": e.PreviousTitle}}
		}
	case PushEvent:
		v := e.view()
		event = "push"
		payload = ghPushJSON(v, e)
	default:
		return nil, fmt.Errorf("%w: webhook event %T", ErrInvalid, ev)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	hdr := map[string]string{
		"X-GitHub-Event": event, "X-GitHub-Delivery": uuid4(), "User-Agent": "GitHub-Hookshot/scmtest",
		"X-GitHub-Hook-ID": "1", "X-GitHub-Hook-Installation-Target-Type": "repository",
	}
	if secret != "" {
		hdr["X-Hub-Signature-256"] = "sha256=" + sha256Sig(secret, body)
		hdr["X-Hub-Signature"] = "sha1=" + sha1Sig(secret, body)
	}
	return newHookRequest(ctx, url, body, hdr)
}

func senderOr(s, fallback string) string {
	if s != "" {
		return s
	}
	if fallback != "" {
		return fallback
	}
	return DefaultUser
}

func ghPRHookJSON(v repoView, pr PullRequest) map[string]any {
	m := ghPullJSON(v, pr, &ghMerge{state: "unknown"})
	return m
}

func ghPushJSON(v repoView, e PushEvent) map[string]any {
	before, after := e.ids()
	commits := make([]map[string]any, 0, len(e.Commits))
	for _, c := range e.Commits {
		commits = append(commits, map[string]any{
			"id": c.SHA, "tree_id": c.Tree, "distinct": true, "message": strings.TrimSuffix(c.Message, "\n"),
			"timestamp": c.Committer.When.Format(time.RFC3339), "url": v.Web + "/" + v.full() + "/commit/" + c.SHA,
			"author":    map[string]any{"name": c.Author.Name, "email": c.Author.Email},
			"committer": map[string]any{"name": c.Committer.Name, "email": c.Committer.Email},
			"added":     nonNil(c.Added), "removed": nonNil(c.Removed), "modified": nonNil(c.Modified),
		})
	}
	var head any
	if len(commits) > 0 {
		head = commits[len(commits)-1]
	}
	repo := ghRepoJSON(v, false)
	repo["created_at"] = v.Created.Unix()
	repo["pushed_at"] = time.Now().Unix()
	repo["master_branch"] = v.DefaultBranch
	return map[string]any{
		"ref": e.Ref, "before": before, "after": after, "created": before == zeroOID, "deleted": after == zeroOID,
		"forced": false, "base_ref": nil, "compare": v.Web + "/" + v.full() + "/compare/" + short(before, 12) + "..." + short(after, 12),
		"commits": commits, "head_commit": head, "repository": repo,
		"pusher": map[string]any{"name": senderOr(e.Pusher, ""), "email": senderOr(e.Pusher, "") + "@users.noreply.example.com"},
		"sender": ghUserJSON(v.API, v.Web, senderOr(e.Pusher, "")),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeGHList is writeGHPage for items read with err: a failed read answers 500.
func writeGHList[T any](c *ghCall, items []T, err error, doc string, render func(T) map[string]any) {
	if err != nil {
		ghError(c.w, 500, err.Error(), doc)
		return
	}
	writeGHPage(c, items, render)
}

// writeGHPage answers one page of items as GitHub does: per_page items (30 by default, at
// most 100) from page, and a Link header to the other pages.
func writeGHPage[T any](c *ghCall, items []T, render func(T) map[string]any) {
	p := parsePage(c.r, "per_page", 30, 100, len(items))
	start, end := p.bounds()
	out := make([]map[string]any, 0, end-start)
	for _, it := range items[start:end] {
		out = append(out, render(it))
	}
	linkHeader(c.w, requestBase(c.r), c.r, p)
	writeJSON(c.w, 200, out)
}
