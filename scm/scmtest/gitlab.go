package scmtest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// GitLab is a fake GitLab REST API (v4) served under /api/v4, for gitlab.com/gitlab-org/api/client-go.
type GitLab struct{ *Forge }

// NewGitLab starts a fake GitLab for the test; point client-go at APIURL() (WithBaseURL).
func NewGitLab(t testing.TB, opts ...Option) *GitLab {
	t.Helper()
	return startFake(t, "NewGitLab", opts, NewGitLabHandler)
}

// NewGitLabHandler builds a fake GitLab without a listener: mount it and call SetBaseURL.
func NewGitLabHandler(gs *GitServer, opts ...Option) (*GitLab, error) {
	return newFake("gitlab", gs, opts, GitLabWebhookRequest, func(f *Forge) *GitLab { return &GitLab{Forge: f} })
}

// APIURL is the base URL for client-go: <url>/api/v4.
func (g *GitLab) APIURL() string { return g.URL() + "/api/v4" }

// ProjectID returns the numeric id of a project (client-go accepts it instead of the path).
func (g *GitLab) ProjectID(path string) (int64, error) {
	i := strings.LastIndex(path, "/")
	if i <= 0 {
		return 0, fmt.Errorf("%w: project path %q", ErrInvalid, path)
	}
	rs, err := g.repoState(path[:i], path[i+1:])
	if err != nil {
		return 0, err
	}
	return rs.id, nil
}

// RateLimitNext makes the next n API calls answer 429 with Retry-After and RateLimit-* headers.
func (g *GitLab) RateLimitNext(n int, retryAfter time.Duration) error {
	secs := max(int(retryAfter.Round(time.Second)/time.Second), 1)
	limit := g.limit()
	return g.mw.inject(Fault{PathPattern: `^/api/v4/`, Times: n}, func() (int, map[string]string, string) {
		reset := time.Now().Add(time.Duration(secs) * time.Second)
		return http.StatusTooManyRequests, map[string]string{
			"Retry-After": strconv.Itoa(secs), "RateLimit-Limit": strconv.Itoa(limit), "RateLimit-Observed": strconv.Itoa(limit + 1),
			"RateLimit-Remaining": "0", "RateLimit-Reset": strconv.FormatInt(reset.Unix(), 10),
			"RateLimit-ResetTime": reset.UTC().Format(http.TimeFormat), "RateLimit-Name": "throttle_authenticated_api",
			"Content-Type": "text/plain; charset=utf-8"}, "Retry later\n"
	})
}

// limit defaults high because client-go throttles itself to 2/3 of RateLimit-Limit per minute.
func (g *GitLab) limit() int {
	if g.set.rateLimit > 0 {
		return g.set.rateLimit
	}
	return 600000
}

func (g *GitLab) decorate(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Request-Id", strings.ToUpper(requestID()[:26]))
	h.Set("X-Gitlab-Meta", `{"correlation_id":"`+requestID()+`","version":"1"}`)
	tok := glToken(r)
	used, remaining, reset := g.countRate(tok, g.limit(), time.Minute)
	h.Set("RateLimit-Name", "throttle_authenticated_api")
	h.Set("RateLimit-Limit", strconv.Itoa(g.limit()))
	h.Set("RateLimit-Observed", strconv.Itoa(used))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("RateLimit-ResetTime", reset.UTC().Format(http.TimeFormat))
}

func glToken(r *http.Request) string {
	if t := r.Header.Get("Private-Token"); t != "" {
		return t
	}
	if t := r.Header.Get("Job-Token"); t != "" {
		return t
	}
	t, _ := bearerOrBasic(r)
	return t
}

func glMessage(w http.ResponseWriter, status int, msg any) {
	writeJSON(w, status, map[string]any{"message": msg})
}

func glErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
}

type glCall struct {
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context
	user   string
	rs     *repoState
	rv     repoView
	params map[string]any
}

func (c *glCall) str(k string) string {
	switch v := c.params[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

func (c *glCall) has(k string) bool { _, ok := c.params[k]; return ok }

func (c *glCall) boolean(k string) bool {
	switch v := c.params[k].(type) {
	case bool:
		return v
	case string:
		b, _ := strconv.ParseBool(v)
		return b
	}
	return false
}

// list reads a parameter given as a JSON array or a comma-separated string.
func (c *glCall) list(k string) []string {
	switch v := c.params[k].(type) {
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok && s != "" {
				out = append(out, s)
			}
		}
		return out
	case string:
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

type glHandler func(c *glCall)

func (g *GitLab) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api/v4/") {
		glErr(w, 404, "404 Not Found")
		return
	}
	ti, ok := g.git.tokens.lookup(glToken(r))
	if !ok {
		glMessage(w, 401, "401 Unauthorized")
		return
	}
	serveRoute(g.mux, w, r, ti, func() { glErr(w, 404, "404 Not Found") })
}

func (g *GitLab) handle(pattern string, fn glHandler) {
	method, p, _ := strings.Cut(pattern, " ")
	g.mux.HandleFunc(method+" /api/v4"+p, func(w http.ResponseWriter, r *http.Request) {
		ti, _ := r.Context().Value(tokenKey{}).(tokenInfo)
		c := &glCall{w: w, r: r, ctx: r.Context(), user: ti.user, params: map[string]any{}}
		for k, v := range r.URL.Query() {
			c.params[k] = v[len(v)-1]
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if isJSON(r) {
				var body map[string]any
				if err := readJSON(r, &body); err != nil {
					glErr(w, 400, "400 Bad request - invalid JSON body")
					return
				}
				for k, v := range body {
					c.params[k] = v
				}
			} else if err := r.ParseForm(); err == nil {
				for k, v := range r.PostForm {
					c.params[k] = v[len(v)-1]
				}
			}
		}
		if id := r.PathValue("id"); id != "" {
			rs := g.project(id)
			if rs == nil || !ti.canSee(rs.key()) {
				glMessage(w, 404, "404 Project Not Found")
				return
			}
			c.rs, c.rv = rs, g.view(rs, r)
		}
		fn(c)
	})
}

// project resolves a numeric id or a "group/sub/project" path.
func (g *GitLab) project(id string) *repoState {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		return g.repoByID(n)
	}
	i := strings.LastIndex(id, "/")
	if i <= 0 {
		return nil
	}
	rs, err := g.repoState(id[:i], id[i+1:])
	if err != nil {
		return nil
	}
	return rs
}

func (g *GitLab) view(rs *repoState, r *http.Request) repoView {
	v := viewOf(rs.owner, rs.name, rs.id, g.base(r), g.webFor(r), g.git.CloneURL(rs.owner, rs.name), rs.defBranch)
	v.Created = rs.created
	return v
}

func (g *GitLab) routes() {
	g.handle("GET /user", g.getUser)
	g.handle("GET /projects/{id}", func(c *glCall) { writeJSON(c.w, 200, glProjectJSON(c.rv)) })
	g.handle("GET /projects/{id}/repository/files/{path}", g.getFile)
	g.handle("GET /projects/{id}/repository/files/{path}/raw", g.getRawFile)
	g.handle("GET /projects/{id}/repository/tree", g.listTree)
	g.handle("GET /projects/{id}/repository/branches", g.listBranches)
	g.handle("GET /projects/{id}/repository/branches/{branch}", g.getBranch)
	g.handle("POST /projects/{id}/repository/branches", g.createBranch)
	g.handle("DELETE /projects/{id}/repository/branches/{branch}", g.deleteBranch)
	g.handle("GET /projects/{id}/repository/commits", g.listCommits)
	g.handle("POST /projects/{id}/repository/commits", g.createCommit)
	g.handle("GET /projects/{id}/repository/commits/{sha}", g.getCommit)
	g.handle("GET /projects/{id}/repository/commits/{sha}/diff", g.commitDiff)
	g.handle("GET /projects/{id}/repository/merge_base", g.mergeBase)
	g.handle("GET /projects/{id}/repository/compare", g.compare)
	g.handle("POST /projects/{id}/repository/commits/{sha}/revert", g.revertCommit)
	g.handle("GET /projects/{id}/repository/commits/{sha}/statuses", g.listStatuses)
	g.handle("POST /projects/{id}/statuses/{sha}", g.createStatus)
	g.handle("GET /projects/{id}/merge_requests", g.listMRs)
	g.handle("POST /projects/{id}/merge_requests", g.createMR)
	g.handle("GET /projects/{id}/merge_requests/{iid}", g.getMR)
	g.handle("PUT /projects/{id}/merge_requests/{iid}", g.updateMR)
	g.handle("PUT /projects/{id}/merge_requests/{iid}/merge", g.mergeMR)
	g.handle("GET /projects/{id}/merge_requests/{iid}/changes", g.mrChanges)
	g.handle("GET /projects/{id}/merge_requests/{iid}/diffs", g.mrDiffs)
	g.handle("GET /projects/{id}/merge_requests/{iid}/commits", g.mrCommits)
	g.handle("GET /projects/{id}/merge_requests/{iid}/notes", g.listNotes)
	g.handle("POST /projects/{id}/merge_requests/{iid}/notes", g.createNote)
	g.handle("PUT /projects/{id}/merge_requests/{iid}/notes/{note}", g.updateNote)
}

// --- JSON shapes -------------------------------------------------------------------------------

func glUserJSON(web, login string) map[string]any {
	if login == "" {
		return nil
	}
	return map[string]any{"id": stableID("user:" + login), "username": login, "name": login, "state": "active",
		"locked": false, "avatar_url": web + "/uploads/-/system/user/avatar/" + login + ".png", "web_url": web + "/" + login}
}

func glProjectJSON(v repoView) map[string]any {
	nsPath := v.Owner[strings.LastIndex(v.Owner, "/")+1:]
	return map[string]any{
		"id": v.ID, "description": nil, "name": v.Name, "name_with_namespace": strings.ReplaceAll(v.Owner, "/", " / ") + " / " + v.Name,
		"path": v.Name, "path_with_namespace": v.full(), "created_at": milliTime(v.Created), "default_branch": v.DefaultBranch,
		"tag_list": []string{}, "topics": []string{}, "ssh_url_to_repo": "git@" + hostOf(v.Web) + ":" + v.full() + ".git",
		"http_url_to_repo": v.Clone, "web_url": v.Web + "/" + v.full(), "readme_url": nil, "avatar_url": nil,
		"namespace": map[string]any{"id": stableID("ns:" + v.Owner), "name": nsPath, "path": nsPath, "kind": "group",
			"full_path": v.Owner, "parent_id": nil, "avatar_url": nil, "web_url": v.Web + "/groups/" + v.Owner},
		"visibility": "private", "archived": false, "empty_repo": false, "merge_method": "merge", "squash_option": "default_off",
		"only_allow_merge_if_pipeline_succeeds": false, "remove_source_branch_after_merge": false,
		"last_activity_at": milliTime(v.Created),
		"permissions":      map[string]any{"project_access": map[string]any{"access_level": 40, "notification_level": 3}, "group_access": nil},
	}
}

func glCommitJSON(v repoView, c Commit, stats *[2]int) map[string]any {
	m := map[string]any{
		"id": c.SHA, "short_id": short(c.SHA, 8), "created_at": milliTime(c.Committer.When), "parent_ids": nonNil(c.Parents),
		"title": c.Title(), "message": c.Message, "author_name": c.Author.Name, "author_email": c.Author.Email,
		"authored_date": milliTime(c.Author.When), "committer_name": c.Committer.Name, "committer_email": c.Committer.Email,
		"committed_date": milliTime(c.Committer.When), "trailers": map[string]string{}, "extended_trailers": map[string]string{},
		"web_url": v.Web + "/" + v.full() + "/-/commit/" + c.SHA,
	}
	if stats != nil {
		m["stats"] = map[string]int{"additions": stats[0], "deletions": stats[1], "total": stats[0] + stats[1]}
		m["status"] = nil
		m["project_id"] = v.ID
		m["last_pipeline"] = nil
	}
	return m
}

func glDiffJSON(fc FileChange) map[string]any {
	return map[string]any{
		"old_path": fc.Path, "new_path": fc.Path, "a_mode": glMode(fc.OldMode), "b_mode": glMode(fc.NewMode),
		"new_file": fc.Status == "added", "renamed_file": false, "deleted_file": fc.Status == "removed", "diff": fc.Patch,
		"generated_file": false,
	}
}

func glMode(m string) string {
	if m == "000000" {
		return "0"
	}
	return m
}

// --- handlers ---------------------------------------------------------------------------------

func (g *GitLab) getUser(c *glCall) {
	u := glUserJSON(g.web(), c.user)
	u["email"] = c.user + "@users.noreply.example.com"
	u["created_at"] = "2020-01-01T00:00:00.000Z"
	u["bot"] = false
	writeJSON(c.w, 200, u)
}

func (g *GitLab) fileAt(c *glCall, ref string) (string, []byte, TreeEntry, string, bool) {
	p, err := cleanPath(c.r.PathValue("path"))
	if err != nil {
		glMessage(c.w, 400, "file_path is invalid")
		return "", nil, TreeEntry{}, "", false
	}
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		glMessage(c.w, 404, "404 Commit Not Found")
		return "", nil, TreeEntry{}, "", false
	}
	data, e, err := c.rs.repo.readFile(c.ctx, sha, p)
	if err != nil {
		glMessage(c.w, 404, "404 File Not Found")
		return "", nil, TreeEntry{}, "", false
	}
	return p, data, e, sha, true
}

func (g *GitLab) getFile(c *glCall) {
	ref := c.str("ref")
	if ref == "" {
		glErr(c.w, 400, "ref is missing, ref is empty")
		return
	}
	p, data, e, sha, ok := g.fileAt(c, ref)
	if !ok {
		return
	}
	last, _ := c.rs.repo.lastCommitFor(c.ctx, sha, p)
	sum := sha256.Sum256(data)
	m := map[string]any{
		"file_name": path.Base(p), "file_path": p, "size": len(data), "encoding": "base64",
		"content_sha256": hex.EncodeToString(sum[:]), "ref": ref, "blob_id": e.SHA, "commit_id": sha,
		"last_commit_id": last, "execute_filemode": e.Mode == "100755",
	}
	if c.r.Method == http.MethodHead {
		h := c.w.Header()
		for k, hv := range map[string]string{"Blob-Id": e.SHA, "Commit-Id": sha, "Content-Sha256": m["content_sha256"].(string),
			"Encoding": "base64", "File-Name": path.Base(p), "File-Path": p, "Last-Commit-Id": last, "Ref": ref,
			"Size": strconv.Itoa(len(data)), "Execute-Filemode": strconv.FormatBool(e.Mode == "100755")} {
			h.Set("X-Gitlab-"+k, hv)
		}
		c.w.WriteHeader(200)
		return
	}
	m["content"] = base64.StdEncoding.EncodeToString(data)
	writeJSON(c.w, 200, m)
}

func (g *GitLab) getRawFile(c *glCall) {
	ref := c.str("ref")
	if ref == "" {
		ref = c.rv.DefaultBranch
	}
	_, data, _, _, ok := g.fileAt(c, ref)
	if !ok {
		return
	}
	c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = c.w.Write(data)
}

func (g *GitLab) listTree(c *glCall) {
	ref := c.str("ref")
	if ref == "" {
		ref = c.rv.DefaultBranch
	}
	entries, err := c.rs.repo.lsTree(c.ctx, ref, c.boolean("recursive"), c.str("path"))
	if err != nil {
		glMessage(c.w, 404, "404 Tree Not Found")
		return
	}
	out := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		out = append(out, map[string]any{"id": e.SHA, "name": path.Base(e.Path), "type": e.Type, "path": e.Path, "mode": e.Mode})
	}
	g.paged(c, out)
}

// paged answers one page of a list with GitLab's X-* pagination headers and Link.
func (g *GitLab) paged(c *glCall, items []map[string]any) {
	p := parsePage(c.r, "per_page", 20, 100, len(items))
	start, end := p.bounds()
	h := c.w.Header()
	h.Set("X-Page", strconv.Itoa(p.page))
	h.Set("X-Per-Page", strconv.Itoa(p.perPage))
	h.Set("X-Total", strconv.Itoa(p.total))
	h.Set("X-Total-Pages", strconv.Itoa(p.lastPage()))
	h.Set("X-Next-Page", "")
	h.Set("X-Prev-Page", "")
	if p.page < p.lastPage() {
		h.Set("X-Next-Page", strconv.Itoa(p.page+1))
	}
	if p.page > 1 {
		h.Set("X-Prev-Page", strconv.Itoa(p.page-1))
	}
	linkHeader(c.w, requestBase(c.r), c.r, p)
	writeJSON(c.w, 200, items[start:end])
}

func (g *GitLab) branchJSON(c *glCall, name, sha string) map[string]any {
	commit, _ := c.rs.repo.commit(c.ctx, sha)
	c.rs.mu.Lock()
	protected := name == c.rv.DefaultBranch || len(c.rs.required[name]) > 0
	c.rs.mu.Unlock()
	return map[string]any{"name": name, "merged": false, "protected": protected, "default": name == c.rv.DefaultBranch,
		"developers_can_push": false, "developers_can_merge": false, "can_push": true,
		"web_url": c.rv.Web + "/" + c.rv.full() + "/-/tree/" + name, "commit": glCommitJSON(c.rv, commit, nil)}
}

func (g *GitLab) listBranches(c *glCall) {
	refs, err := c.rs.repo.refs(c.ctx, "refs/heads/")
	if err != nil {
		glMessage(c.w, 500, err.Error())
		return
	}
	search := c.str("search")
	var out []map[string]any
	for _, ref := range sortedKeys(refs) {
		name := strings.TrimPrefix(ref, "refs/heads/")
		if search == "" || strings.Contains(name, search) {
			out = append(out, g.branchJSON(c, name, refs[ref]))
		}
	}
	g.paged(c, nonNilMaps(out))
}

func nonNilMaps(m []map[string]any) []map[string]any {
	if m == nil {
		return []map[string]any{}
	}
	return m
}

func (g *GitLab) getBranch(c *glCall) {
	name := c.r.PathValue("branch")
	sha, err := c.rs.repo.branchHead(c.ctx, name)
	if err != nil {
		glMessage(c.w, 404, "404 Branch Not Found")
		return
	}
	writeJSON(c.w, 200, g.branchJSON(c, name, sha))
}

func (g *GitLab) createBranch(c *glCall) {
	name, ref := c.str("branch"), c.str("ref")
	switch {
	case name == "":
		glErr(c.w, 400, "branch is missing")
		return
	case ref == "":
		glErr(c.w, 400, "ref is missing")
		return
	}
	if err := validBranch(name); err != nil {
		glMessage(c.w, 400, "Branch name is invalid")
		return
	}
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		glMessage(c.w, 400, "Invalid reference name: "+ref)
		return
	}
	err = g.setRef(c.ctx, c.rs, "refs/heads/"+name, sha, c.user, createOnly)
	switch {
	case errors.Is(err, ErrExists), errors.Is(err, ErrRefConflict):
		glMessage(c.w, 400, "Branch already exists")
	case err != nil:
		glMessage(c.w, 500, err.Error())
	default:
		writeJSON(c.w, 201, g.branchJSON(c, name, sha))
	}
}

func (g *GitLab) deleteBranch(c *glCall) {
	name := c.r.PathValue("branch")
	if name == c.rv.DefaultBranch {
		glMessage(c.w, 405, "405 Method Not Allowed")
		return
	}
	err := g.setRef(c.ctx, c.rs, "refs/heads/"+name, "", c.user, nil)
	switch {
	case errors.Is(err, ErrNotFound):
		glMessage(c.w, 404, "404 Branch Not Found")
	case err != nil:
		glMessage(c.w, 500, err.Error())
	default:
		c.w.WriteHeader(http.StatusNoContent)
	}
}

func (g *GitLab) stats(c *glCall, commit Commit) *[2]int {
	parent := ""
	if len(commit.Parents) > 0 {
		parent = commit.Parents[0]
	}
	files, _ := c.rs.repo.diff(c.ctx, parent, commit.SHA, false)
	var s [2]int
	for _, f := range files {
		s[0] += f.Additions
		s[1] += f.Deletions
	}
	return &s
}

func (g *GitLab) listCommits(c *glCall) {
	ref := c.str("ref_name")
	if ref == "" {
		ref = c.rv.DefaultBranch
	}
	sha, err := c.rs.repo.resolve(c.ctx, ref)
	if err != nil {
		glMessage(c.w, 404, "404 Commit Not Found")
		return
	}
	commits, err := c.rs.repo.log(c.ctx, sha, c.str("path"), 0)
	if err != nil {
		glMessage(c.w, 500, err.Error())
		return
	}
	out := make([]map[string]any, 0, len(commits))
	for _, cm := range commits {
		out = append(out, glCommitJSON(c.rv, cm, nil))
	}
	g.paged(c, out)
}

func (g *GitLab) getCommit(c *glCall) {
	commit, err := c.rs.repo.commit(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		glMessage(c.w, 404, "404 Commit Not Found")
		return
	}
	var stats *[2]int
	if c.str("stats") != "false" {
		stats = g.stats(c, commit)
	}
	writeJSON(c.w, 200, glCommitJSON(c.rv, commit, stats))
}

// mergeBase serves GET /projects/:id/repository/merge_base?refs[]=a&refs[]=b as GitLab does:
// 400 for fewer than two refs or refs that do not resolve ("Could not find ref: x"), 404
// "Merge Base Not Found" for unrelated histories, else the merge base commit.
func (g *GitLab) mergeBase(c *glCall) {
	refs := c.r.URL.Query()["refs[]"]
	if len(refs) < 2 {
		glMessage(c.w, 400, "Provide at least 2 refs")
		return
	}
	shas := make([]string, 0, len(refs))
	var unknown []string
	for _, ref := range refs {
		sha, err := c.rs.repo.resolve(c.ctx, ref)
		if err != nil {
			unknown = append(unknown, ref)
			continue
		}
		shas = append(shas, sha)
	}
	if len(unknown) > 0 {
		noun := "ref"
		if len(unknown) > 1 {
			noun = "refs"
		}
		glMessage(c.w, 400, "Could not find "+noun+": "+strings.Join(unknown, ", "))
		return
	}
	mb := shas[0]
	for _, sha := range shas[1:] {
		var err error
		if mb, err = c.rs.repo.mergeBase(c.ctx, mb, sha); err != nil {
			glMessage(c.w, 500, err.Error())
			return
		}
		if mb == "" {
			glMessage(c.w, 404, "404 Merge Base Not Found")
			return
		}
	}
	commit, err := c.rs.repo.commit(c.ctx, mb)
	if err != nil {
		glMessage(c.w, 500, err.Error())
		return
	}
	writeJSON(c.w, 200, glCommitJSON(c.rv, commit, nil))
}

// compare answers GET /repository/compare?from=&to=&straight=: the commits and diffs from
// the merge base of from and to (straight=true: from itself) to to.
func (g *GitLab) compare(c *glCall) {
	q := c.r.URL.Query()
	from, err1 := c.rs.repo.resolve(c.ctx, q.Get("from"))
	to, err2 := c.rs.repo.resolve(c.ctx, q.Get("to"))
	if q.Get("from") == "" || q.Get("to") == "" {
		glMessage(c.w, 400, "400 Bad request - from, to are missing")
		return
	}
	if err1 != nil || err2 != nil {
		glMessage(c.w, 404, "404 Ref Not Found")
		return
	}
	base := from
	if q.Get("straight") != "true" {
		mb, err := c.rs.repo.mergeBase(c.ctx, from, to)
		if err != nil || mb == "" {
			glMessage(c.w, 404, "404 Not found")
			return
		}
		base = mb
	}
	shas, _ := c.rs.repo.revList(c.ctx, "--reverse", base+".."+to)
	commits := make([]map[string]any, 0, len(shas))
	for _, sha := range shas {
		if cm, err := c.rs.repo.commit(c.ctx, sha); err == nil {
			commits = append(commits, glCommitJSON(c.rv, cm, nil))
		}
	}
	files, err := c.rs.repo.diff(c.ctx, base, to, true)
	if err != nil {
		glMessage(c.w, 500, err.Error())
		return
	}
	diffs := make([]map[string]any, 0, len(files))
	for _, f := range files {
		diffs = append(diffs, glDiffJSON(f))
	}
	var last any
	if len(commits) > 0 {
		last = commits[len(commits)-1]
	}
	writeJSON(c.w, 200, map[string]any{"commit": last, "commits": commits, "diffs": diffs, "compare_timeout": false,
		"compare_same_ref": from == to, "web_url": c.rv.Web + "/" + c.rv.full() + "/-/compare/" + from + "..." + to})
}

func (g *GitLab) commitDiff(c *glCall) {
	commit, err := c.rs.repo.commit(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		glMessage(c.w, 404, "404 Commit Not Found")
		return
	}
	parent := ""
	if len(commit.Parents) > 0 {
		parent = commit.Parents[0]
	}
	files, err := c.rs.repo.diff(c.ctx, parent, commit.SHA, true)
	if err != nil {
		glMessage(c.w, 500, err.Error())
		return
	}
	out := make([]map[string]any, 0, len(files))
	for _, f := range files {
		out = append(out, glDiffJSON(f))
	}
	g.paged(c, out)
}

type glAction struct {
	Action          string  `json:"action"`
	FilePath        string  `json:"file_path"`
	PreviousPath    string  `json:"previous_path"`
	Content         *string `json:"content"`
	Encoding        string  `json:"encoding"`
	LastCommitID    string  `json:"last_commit_id"`
	ExecuteFilemode *bool   `json:"execute_filemode"`
}

// createCommit applies commit actions in one commit on the branch's current head (GitLab does not
// require the head to be unchanged; last_commit_id guards single files).
func (g *GitLab) createCommit(c *glCall) {
	var actions []glAction
	if raw, ok := c.params["actions"]; ok {
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &actions); err != nil {
			glErr(c.w, 400, "actions is invalid")
			return
		}
	}
	branch, msg := c.str("branch"), c.str("commit_message")
	switch {
	case branch == "":
		glErr(c.w, 400, "branch is missing")
		return
	case msg == "":
		glErr(c.w, 400, "commit_message is missing")
		return
	case len(actions) == 0:
		glErr(c.w, 400, "actions is missing")
		return
	}
	if err := validBranch(branch); err != nil {
		glMessage(c.w, 400, "Branch name is invalid")
		return
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	head, herr := c.rs.repo.branchHead(c.ctx, branch)
	parent := head
	start := c.str("start_sha")
	if start == "" {
		start = c.str("start_branch")
	}
	switch {
	case herr == nil && start != "" && !c.boolean("force"):
		glMessage(c.w, 400, fmt.Sprintf("A branch called '%s' already exists. Switch to that branch in order to make changes", branch))
		return
	case herr == nil && start != "":
		sha, err := c.rs.repo.resolve(c.ctx, start)
		if err != nil {
			glMessage(c.w, 400, "Invalid start reference: "+start)
			return
		}
		parent = sha
	case herr != nil && start == "":
		glMessage(c.w, 400, "You can only create or edit files when you are on a branch")
		return
	case herr != nil:
		sha, err := c.rs.repo.resolve(c.ctx, start)
		if err != nil {
			glMessage(c.w, 400, "Invalid start reference: "+start)
			return
		}
		parent, head = sha, ""
	}
	changes, status, errMsg := g.applyActions(c, parent, actions)
	if status != 0 {
		glMessage(c.w, status, errMsg)
		return
	}
	author := g.userSig(c.user)
	if n := c.str("author_name"); n != "" {
		author.Name = n
	}
	if e := c.str("author_email"); e != "" {
		author.Email = e
	}
	sha, err := g.commitChanges(c.ctx, c.rs, branch, parent, changes, msg, author, c.user, func(cur string) error {
		if cur != head {
			return fmt.Errorf("%w: branch %s moved", ErrRefConflict, branch)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrRefConflict) {
			glMessage(c.w, 400, fmt.Sprintf("9:Could not update refs/heads/%s. Please refresh and try again.", branch))
			return
		}
		glMessage(c.w, 500, err.Error())
		return
	}
	commit, _ := c.rs.repo.commit(c.ctx, sha)
	writeJSON(c.w, 201, glCommitJSON(c.rv, commit, g.stats(c, commit)))
}

// applyActions turns commit actions into tree changes, checking them against parent and the
// earlier actions of the same request.
func (g *GitLab) applyActions(c *glCall, parent string, actions []glAction) ([]treeChange, int, string) {
	pending := map[string]*treeChange{}
	var order []string
	lookup := func(p string) (TreeEntry, bool) {
		if ch, ok := pending[p]; ok {
			if ch.Delete {
				return TreeEntry{}, false
			}
			return TreeEntry{Path: p, Mode: ch.Mode, SHA: ch.SHA, Type: "blob"}, true
		}
		e, err := c.rs.repo.entry(c.ctx, parent, p)
		return e, err == nil && e.Type == "blob"
	}
	set := func(ch treeChange) {
		if _, ok := pending[ch.Path]; !ok {
			order = append(order, ch.Path)
		}
		cp := ch
		pending[ch.Path] = &cp
	}
	for i, a := range actions {
		p, err := cleanPath(a.FilePath)
		if err != nil {
			return nil, 400, fmt.Sprintf("actions[%d][file_path] is invalid", i)
		}
		cur, exists := lookup(p)
		if a.LastCommitID != "" && a.Action != "create" {
			last, err := c.rs.repo.lastCommitFor(c.ctx, parent, p)
			if a.Action == "move" && a.PreviousPath != "" {
				last, err = c.rs.repo.lastCommitFor(c.ctx, parent, a.PreviousPath)
			}
			if err != nil || last != a.LastCommitID {
				return nil, 400, "You are attempting to update a file that has changed since you started editing it."
			}
		}
		blob := func() (string, int, string) {
			content := ""
			if a.Content != nil {
				content = *a.Content
			}
			data := []byte(content)
			if a.Encoding == "base64" {
				d, err := base64.StdEncoding.DecodeString(content)
				if err != nil {
					return "", 400, fmt.Sprintf("actions[%d][content] is not valid base64", i)
				}
				data = d
			}
			sha, err := c.rs.repo.writeBlob(c.ctx, data)
			if err != nil {
				return "", 500, err.Error()
			}
			return sha, 0, ""
		}
		mode := "100644"
		if exists && cur.Mode != "" {
			mode = cur.Mode
		}
		if a.ExecuteFilemode != nil {
			mode = map[bool]string{true: "100755", false: "100644"}[*a.ExecuteFilemode]
		}
		switch a.Action {
		case "create", "update":
			switch {
			case exists && a.Action == "create":
				return nil, 400, "A file with this name already exists"
			case !exists && a.Action == "update":
				return nil, 400, "A file with this name doesn't exist"
			}
			sha, st, msg := blob()
			if st != 0 {
				return nil, st, msg
			}
			set(treeChange{Path: p, Mode: mode, SHA: sha})
		case "delete":
			if !exists {
				return nil, 400, "A file with this name doesn't exist"
			}
			set(treeChange{Path: p, Delete: true})
		case "move":
			prev, err := cleanPath(a.PreviousPath)
			if err != nil {
				return nil, 400, fmt.Sprintf("actions[%d][previous_path] is invalid", i)
			}
			old, ok := lookup(prev)
			if !ok {
				return nil, 400, "A file with this name doesn't exist"
			}
			if exists {
				return nil, 400, "A file with this name already exists"
			}
			sha := old.SHA
			if a.Content != nil {
				var st int
				var msg string
				if sha, st, msg = blob(); st != 0 {
					return nil, st, msg
				}
			}
			set(treeChange{Path: prev, Delete: true})
			set(treeChange{Path: p, Mode: old.Mode, SHA: sha})
		case "chmod":
			if !exists {
				return nil, 400, "A file with this name doesn't exist"
			}
			set(treeChange{Path: p, Mode: mode, SHA: cur.SHA})
		default:
			return nil, 400, fmt.Sprintf("actions[%d][action] does not have a valid value", i)
		}
	}
	changes := make([]treeChange, 0, len(order))
	for _, p := range order {
		changes = append(changes, *pending[p])
	}
	return changes, 0, ""
}

func (g *GitLab) revertCommit(c *glCall) {
	branch := c.str("branch")
	if branch == "" {
		glErr(c.w, 400, "branch is missing")
		return
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	if _, err := c.rs.repo.branchHead(c.ctx, branch); err != nil {
		glMessage(c.w, 404, "404 Branch Not Found")
		return
	}
	if _, err := c.rs.repo.resolve(c.ctx, c.r.PathValue("sha")); err != nil {
		glMessage(c.w, 404, "404 Commit Not Found")
		return
	}
	sha, err := g.revert(c.ctx, c.rs, c.r.PathValue("sha"), branch, g.userSig(c.user), c.user)
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			code := "conflict"
			if len(ce.Files) == 0 {
				code = "empty"
			}
			writeJSON(c.w, 400, map[string]any{"message": "Sorry, we cannot revert this commit automatically. This commit may already have been reverted, or a more recent commit may have updated some of its content.", "error_code": code})
			return
		}
		glMessage(c.w, 500, err.Error())
		return
	}
	commit, _ := c.rs.repo.commit(c.ctx, sha)
	writeJSON(c.w, 201, glCommitJSON(c.rv, commit, g.stats(c, commit)))
}

// glStatusStates maps GitLab commit status states onto the normalised ones.
var glStatusStates = map[string]string{"pending": "pending", "running": "pending", "success": "success",
	"failed": "failure", "canceled": "error", "skipped": "success"}

func glStatusJSON(v repoView, s *Status) map[string]any {
	finished := any(nil)
	if s.State != "pending" {
		finished = milliTime(s.UpdatedAt)
	}
	return map[string]any{"id": s.ID, "sha": s.SHA, "ref": nilIfEmpty(s.Ref), "status": s.Native, "name": s.Context,
		"target_url": nilIfEmpty(s.TargetURL), "description": nilIfEmpty(s.Description), "created_at": milliTime(s.CreatedAt),
		"started_at": milliTime(s.CreatedAt), "finished_at": finished, "allow_failure": false, "coverage": nil,
		"author": glUserJSON(v.Web, s.Creator)}
}

func (g *GitLab) createStatus(c *glCall) {
	state := c.str("state")
	norm, ok := glStatusStates[state]
	if !ok {
		glErr(c.w, 400, "state does not have a valid value")
		return
	}
	sha := c.r.PathValue("sha")
	if t, err := c.rs.repo.objectType(c.ctx, sha); err != nil || t != "commit" {
		glMessage(c.w, 404, "404 Commit Not Found")
		return
	}
	name := c.str("name")
	if name == "" {
		name = c.str("context")
	}
	if name == "" {
		name = "default"
	}
	c.rs.mu.Lock()
	s := g.setStatus(c.rs, Status{SHA: sha, Context: name, State: norm, Native: state, Description: c.str("description"),
		TargetURL: c.str("target_url"), Ref: c.str("ref"), Creator: c.user}, true)
	out := glStatusJSON(c.rv, s)
	c.rs.mu.Unlock()
	writeJSON(c.w, 201, out)
}

func (g *GitLab) listStatuses(c *glCall) {
	sha, err := c.rs.repo.resolve(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		glMessage(c.w, 404, "404 Commit Not Found")
		return
	}
	c.rs.mu.Lock()
	out := []map[string]any{}
	for _, s := range c.rs.statuses[sha] {
		out = append(out, glStatusJSON(c.rv, s))
	}
	c.rs.mu.Unlock()
	g.paged(c, out)
}

// --- merge requests ---------------------------------------------------------------------------

func glState(s PRState) string {
	switch s {
	case PROpen:
		return "opened"
	case PRMerged:
		return "merged"
	}
	return "closed"
}

func isDraftTitle(t string) bool {
	l := strings.ToLower(t)
	return strings.HasPrefix(l, "draft:") || strings.HasPrefix(l, "[draft]") || strings.HasPrefix(l, "(draft)")
}

// glMRJSON is a merge request; detailed is the detailed_merge_status ("" for list items).
func glMRJSON(v repoView, pr PullRequest, detailed string, diffBase string) map[string]any {
	iid := strconv.Itoa(pr.Number)
	mergeStatus := map[string]string{"mergeable": "can_be_merged", "conflict": "cannot_be_merged", "checking": "checking",
		"unchecked": "unchecked", "not_open": "cannot_be_merged"}[detailed]
	if mergeStatus == "" {
		mergeStatus = "can_be_merged"
	}
	var mergeSHA, squashSHA any
	if pr.MergeCommitSHA != "" {
		mergeSHA = pr.MergeCommitSHA
	}
	if pr.SquashCommitSHA != "" {
		squashSHA = pr.SquashCommitSHA
	}
	if detailed == "" {
		detailed = "unchecked"
	}
	var closedBy any
	if pr.State == PRClosed {
		closedBy = glUserJSON(v.Web, pr.Author)
	}
	return map[string]any{
		"id": pr.ID, "iid": pr.Number, "project_id": v.ID, "title": pr.Title, "description": pr.Body, "state": glState(pr.State),
		"created_at": milliTime(pr.CreatedAt), "updated_at": milliTime(pr.UpdatedAt), "merged_at": milliTime(pr.MergedAt),
		"closed_at": milliTime(pr.ClosedAt), "closed_by": closedBy, "merge_user": glUserJSON(v.Web, pr.MergedBy),
		"merged_by": glUserJSON(v.Web, pr.MergedBy), "target_branch": pr.Base, "source_branch": pr.Head,
		"user_notes_count": len(pr.Comments), "upvotes": 0, "downvotes": 0, "author": glUserJSON(v.Web, pr.Author),
		"assignees": []any{}, "assignee": nil, "reviewers": glUsers(v.Web, pr.Reviewers), "source_project_id": v.ID,
		"target_project_id": v.ID, "labels": nonNil(pr.Labels), "draft": pr.Draft, "work_in_progress": pr.Draft,
		"milestone": nil, "merge_when_pipeline_succeeds": false, "merge_status": mergeStatus, "detailed_merge_status": detailed,
		"has_conflicts": detailed == "conflict", "sha": pr.HeadSHA, "merge_commit_sha": mergeSHA, "squash_commit_sha": squashSHA,
		"discussion_locked": nil, "should_remove_source_branch": pr.RemoveSourceBranch, "force_remove_source_branch": pr.RemoveSourceBranch,
		"squash": pr.Squash, "squash_on_merge": pr.Squash, "web_url": v.Web + "/" + v.full() + "/-/merge_requests/" + iid,
		"references": map[string]string{"short": "!" + iid, "relative": "!" + iid, "full": v.full() + "!" + iid},
		"time_stats": map[string]any{"time_estimate": 0, "total_time_spent": 0}, "blocking_discussions_resolved": true,
		"diff_refs": map[string]any{"base_sha": diffBase, "head_sha": pr.HeadSHA, "start_sha": pr.BaseSHA},
		"user":      map[string]bool{"can_merge": true}, "merge_error": nil, "subscribed": false, "changes_count": nil,
		"first_contribution": false, "rebase_in_progress": false, "diverged_commits_count": 0,
	}
}

func glUsers(web string, logins []string) []map[string]any {
	out := []map[string]any{}
	for _, l := range logins {
		out = append(out, glUserJSON(web, l))
	}
	return out
}

// detailed computes detailed_merge_status; poll consumes a "checking" answer. Callers hold rs.mu.
func (g *GitLab) detailed(c *glCall, pr *prState, poll bool) string {
	if pr.State != PROpen {
		return "not_open"
	}
	state, _, err := g.mergeability(c.ctx, c.rs, pr, poll)
	if err != nil {
		return "unchecked"
	}
	if pr.Draft && state != MergeUnknown {
		return "draft_status"
	}
	switch state {
	case MergeUnknown:
		return "checking"
	case MergeDirty:
		return "conflict"
	case MergeBlocked:
		latest := c.rs.latestStatuses(pr.HeadSHA)
		for _, ctxName := range c.rs.failingRequired(pr.Base, pr.HeadSHA) {
			if s, ok := latest[ctxName]; ok && s.State == "pending" {
				return "ci_still_running"
			}
		}
		return "ci_must_pass"
	}
	return "mergeable"
}

func (g *GitLab) mrJSON(c *glCall, pr *prState, poll bool) map[string]any {
	detailed := g.detailed(c, pr, poll)
	base, _ := c.rs.repo.mergeBase(c.ctx, pr.BaseSHA, pr.HeadSHA)
	return glMRJSON(c.rv, pr.snapshot(), detailed, base)
}

func (g *GitLab) mr(c *glCall) *prState { return c.rs.prAt(c.r, "iid") }

// lockMR is repoState.lockPR with GitLab's 404.
func (g *GitLab) lockMR(c *glCall) *prState {
	return c.rs.lockPR(c.r, "iid", func() { glMessage(c.w, 404, "404 Not found") })
}

func (g *GitLab) listMRs(c *glCall) {
	state := c.str("state")
	src, tgt := c.str("source_branch"), c.str("target_branch")
	labels := c.list("labels")
	c.rs.mu.Lock()
	var out []map[string]any
	for i := len(c.rs.prs) - 1; i >= 0; i-- {
		pr := c.rs.prs[i]
		g.refresh(c.ctx, c.rs, pr)
		switch {
		case state != "" && state != "all" && glState(pr.State) != state:
			continue
		case src != "" && pr.Head != src, tgt != "" && pr.Base != tgt:
			continue
		}
		if !containsAll(pr.Labels, labels) {
			continue
		}
		out = append(out, glMRJSON(c.rv, pr.snapshot(), "", ""))
	}
	c.rs.mu.Unlock()
	g.paged(c, nonNilMaps(out))
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func (g *GitLab) createMR(c *glCall) {
	src, tgt, title := c.str("source_branch"), c.str("target_branch"), c.str("title")
	switch {
	case src == "":
		glErr(c.w, 400, "source_branch is missing")
		return
	case tgt == "":
		glErr(c.w, 400, "target_branch is missing")
		return
	case title == "":
		glErr(c.w, 400, "title is missing")
		return
	case src == tgt:
		glMessage(c.w, 422, []string{"You can't use same project/branch for source and target"})
		return
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	pr, err := g.openPR(c.ctx, c.rs, src, tgt, title, c.str("description"), c.user, isDraftTitle(title) || c.boolean("draft"))
	if err != nil {
		var pe *prError
		if errors.As(err, &pe) {
			switch pe.kind {
			case "exists":
				glMessage(c.w, 409, []string{fmt.Sprintf("Another open merge request already exists for this source branch: !%d", pe.number)})
			case "no-branch":
				which := "Source"
				if pe.branch == tgt {
					which = "Target"
				}
				glMessage(c.w, 422, []string{fmt.Sprintf("%s branch %q does not exist", which, pe.branch)})
			default:
				glMessage(c.w, 422, []string{pe.Error()})
			}
			return
		}
		glMessage(c.w, 500, err.Error())
		return
	}
	pr.RemoveSourceBranch = c.boolean("remove_source_branch")
	pr.Squash = c.boolean("squash")
	g.Forge.addLabels(c.rs, pr, c.list("labels"), c.user)
	writeJSON(c.w, 201, g.mrJSON(c, pr, false))
}

func (g *GitLab) getMR(c *glCall) {
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	writeJSON(c.w, 200, g.mrJSON(c, pr, true))
}

func (g *GitLab) updateMR(c *glCall) {
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if c.has("title") {
		pr.Title = c.str("title")
		pr.Draft = isDraftTitle(pr.Title)
	}
	if c.has("description") {
		pr.Body = c.str("description")
	}
	if t := c.str("target_branch"); t != "" && t != pr.Base {
		if _, err := c.rs.repo.branchHead(c.ctx, t); err != nil {
			glMessage(c.w, 422, []string{fmt.Sprintf("Target branch %q does not exist", t)})
			return
		}
		pr.Base = t
	}
	if c.has("remove_source_branch") {
		pr.RemoveSourceBranch = c.boolean("remove_source_branch")
	}
	if c.has("squash") {
		pr.Squash = c.boolean("squash")
	}
	if c.has("labels") {
		pr.Labels = nil
		g.Forge.addLabels(c.rs, pr, c.list("labels"), c.user)
	}
	g.Forge.addLabels(c.rs, pr, c.list("add_labels"), c.user)
	for _, l := range c.list("remove_labels") {
		g.Forge.removeLabel(pr, l)
	}
	switch c.str("state_event") {
	case "close":
		g.closePR(c.rs, pr, c.user)
	case "reopen":
		if err := g.reopenPR(c.ctx, c.rs, pr, c.user); err != nil && pr.State != PROpen {
			glMessage(c.w, 405, "405 Method Not Allowed")
			return
		}
	case "":
	default:
		glErr(c.w, 400, "state_event does not have a valid value")
		return
	}
	pr.UpdatedAt = time.Now().UTC()
	writeJSON(c.w, 200, g.mrJSON(c, pr, false))
}

// mergeMR accepts an MR: 405 when it cannot be merged (closed, merged, draft, checks), 406 on
// conflicts, 409 when sha is not the source branch head.
func (g *GitLab) mergeMR(c *glCall) {
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	g.refresh(c.ctx, c.rs, pr)
	squash := pr.Squash
	if c.has("squash") {
		squash = c.boolean("squash")
	}
	remove := pr.RemoveSourceBranch
	if c.has("should_remove_source_branch") {
		remove = c.boolean("should_remove_source_branch")
	}
	msg := c.str("merge_commit_message")
	if msg == "" {
		msg = fmt.Sprintf("Merge branch '%s' into '%s'\n\n%s\n\nSee merge request %s!%d", pr.Head, pr.Base, pr.Title, c.rv.full(), pr.Number)
	}
	squashMsg := c.str("squash_commit_message")
	if squashMsg == "" {
		squashMsg = pr.Title
	}
	_, err := g.merge(c.ctx, c.rs, pr, mergeOpts{method: "merge", expectHead: c.str("sha"), message: msg, user: c.user,
		deleteBranch: remove, gitlabSquash: squash, squashMsg: squashMsg})
	if err != nil {
		var pe *prError
		if !errors.As(err, &pe) {
			glMessage(c.w, 500, err.Error())
			return
		}
		switch pe.kind {
		case "head-modified":
			glMessage(c.w, 409, "SHA does not match HEAD of source branch: "+pr.HeadSHA)
		case "conflict", "base-modified":
			glMessage(c.w, 406, "Branch cannot be merged")
		default:
			glMessage(c.w, 405, "405 Method Not Allowed")
		}
		return
	}
	pr.Squash = squash
	pr.RemoveSourceBranch = remove
	writeJSON(c.w, 200, g.mrJSON(c, pr, false))
}

func (g *GitLab) mrDiffFiles(c *glCall) (*prState, []FileChange, bool) {
	c.rs.mu.Lock()
	pr := g.mr(c)
	if pr == nil {
		c.rs.mu.Unlock()
		glMessage(c.w, 404, "404 Not found")
		return nil, nil, false
	}
	g.refresh(c.ctx, c.rs, pr)
	base, head := pr.BaseSHA, pr.HeadSHA
	c.rs.mu.Unlock()
	mb, _ := c.rs.repo.mergeBase(c.ctx, base, head)
	files, err := c.rs.repo.diff(c.ctx, mb, head, true)
	if err != nil {
		glMessage(c.w, 500, err.Error())
		return nil, nil, false
	}
	return pr, files, true
}

func (g *GitLab) mrChanges(c *glCall) {
	pr, files, ok := g.mrDiffFiles(c)
	if !ok {
		return
	}
	changes := make([]map[string]any, 0, len(files))
	for _, f := range files {
		changes = append(changes, glDiffJSON(f))
	}
	c.rs.mu.Lock()
	m := g.mrJSON(c, pr, false)
	c.rs.mu.Unlock()
	m["changes"] = changes
	m["changes_count"] = strconv.Itoa(len(files))
	m["overflow"] = false
	writeJSON(c.w, 200, m)
}

func (g *GitLab) mrDiffs(c *glCall) {
	_, files, ok := g.mrDiffFiles(c)
	if !ok {
		return
	}
	out := make([]map[string]any, 0, len(files))
	for _, f := range files {
		out = append(out, glDiffJSON(f))
	}
	g.paged(c, out)
}

func (g *GitLab) mrCommits(c *glCall) {
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	g.refresh(c.ctx, c.rs, pr)
	base, head := pr.BaseSHA, pr.HeadSHA
	c.rs.mu.Unlock()
	shas, _ := c.rs.repo.revList(c.ctx, base+".."+head)
	out := make([]map[string]any, 0, len(shas))
	for _, sha := range shas {
		if cm, err := c.rs.repo.commit(c.ctx, sha); err == nil {
			out = append(out, glCommitJSON(c.rv, cm, nil))
		}
	}
	g.paged(c, out)
}

func glNoteJSON(v repoView, pr PullRequest, cm Comment) map[string]any {
	return map[string]any{"id": cm.ID, "type": nil, "body": cm.Body, "attachment": nil, "author": glUserJSON(v.Web, cm.User),
		"created_at": milliTime(cm.CreatedAt), "updated_at": milliTime(cm.UpdatedAt), "system": false, "noteable_id": pr.ID,
		"noteable_type": "MergeRequest", "project_id": v.ID, "noteable_iid": pr.Number, "resolvable": false,
		"confidential": false, "internal": false}
}

func (g *GitLab) listNotes(c *glCall) {
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	snap := pr.snapshot()
	c.rs.mu.Unlock()
	// Newest first unless sort=asc, as GitLab (by creation: the order prflow asks for).
	out := []map[string]any{}
	for i := range snap.Comments {
		out = append(out, glNoteJSON(c.rv, snap, snap.Comments[i]))
	}
	if c.r.URL.Query().Get("sort") != "asc" {
		slices.Reverse(out)
	}
	g.paged(c, out)
}

func (g *GitLab) createNote(c *glCall) {
	body := c.str("body")
	if !glNoteBodyOK(c, body) {
		return
	}
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if pr.Locked {
		glMessage(c.w, http.StatusForbidden, "403 Forbidden")
		return
	}
	cm := g.addComment(pr, body, c.user)
	writeJSON(c.w, 201, glNoteJSON(c.rv, pr.snapshot(), cm))
}

// GitLabMaxComment is the longest note body GitLab accepts, in characters.
const GitLabMaxComment = 1_000_000

// glNoteBodyOK answers GitLab's 400 for a missing or too long note body.
func glNoteBodyOK(c *glCall, body string) bool {
	switch {
	case body == "":
		glErr(c.w, 400, "body is missing")
		return false
	case utf8.RuneCountInString(body) > GitLabMaxComment:
		glMessage(c.w, 400, map[string]any{"note": []string{fmt.Sprintf("is too long (maximum is %d characters)", GitLabMaxComment)}})
		return false
	}
	return true
}

// updateNote is PUT /projects/:id/merge_requests/:iid/notes/:note_id: the note must be one
// of this MR's.
func (g *GitLab) updateNote(c *glCall) {
	body := c.str("body")
	if !glNoteBodyOK(c, body) {
		return
	}
	id, err := strconv.ParseInt(c.r.PathValue("note"), 10, 64)
	if err != nil {
		glMessage(c.w, 404, "404 Not found")
		return
	}
	pr := g.lockMR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	cm, err := g.Forge.editComment(pr, id, body, c.user)
	switch {
	case errors.Is(err, errNoComment):
		glMessage(c.w, 404, "404 Not found")
	case err != nil:
		glMessage(c.w, http.StatusForbidden, "403 Forbidden")
	default:
		writeJSON(c.w, 200, glNoteJSON(c.rv, pr.snapshot(), cm))
	}
}

// --- webhooks ---------------------------------------------------------------------------------

// GitLabWebhookRequest builds a webhook request as GitLab sends it: "Merge Request Hook" or
// "Push Hook" payload, X-Gitlab-Event, X-Gitlab-Token (the shared secret, sent as is) and
// X-Gitlab-Event-UUID.
func GitLabWebhookRequest(ctx context.Context, url, token string, ev WebhookEvent) (*http.Request, error) {
	var event string
	var payload map[string]any
	switch e := ev.(type) {
	case PREvent:
		event = "Merge Request Hook"
		payload = glMRHookJSON(e)
	case PushEvent:
		event = "Push Hook"
		payload = glPushHookJSON(e)
	default:
		return nil, fmt.Errorf("%w: webhook event %T", ErrInvalid, ev)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	// GitLab 17.4+ sends Idempotency-Key, the same on every retry of this delivery.
	hdr := map[string]string{"X-Gitlab-Event": event, "X-Gitlab-Event-UUID": uuid4(), "X-Gitlab-Webhook-UUID": uuid4(),
		"Idempotency-Key": uuid4(), "User-Agent": "GitLab/17.5.0"}
	if token != "" {
		hdr["X-Gitlab-Token"] = token
	}
	if e, ok := ev.(PREvent); ok {
		hdr["X-Gitlab-Instance"] = e.view().Web
	}
	return newHookRequest(ctx, url, body, hdr)
}

// glHookTime is the "2006-01-02 15:04:05 UTC" format of merge request hooks.
func glHookTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func glHookProject(v repoView) map[string]any {
	ssh := "git@" + hostOf(v.Web) + ":" + v.full() + ".git"
	return map[string]any{"id": v.ID, "name": v.Name, "description": "", "web_url": v.Web + "/" + v.full(), "avatar_url": nil,
		"git_ssh_url": ssh, "git_http_url": v.Clone, "namespace": v.Owner, "visibility_level": 0,
		"path_with_namespace": v.full(), "default_branch": v.DefaultBranch, "ci_config_path": "", "homepage": v.Web + "/" + v.full(),
		"url": ssh, "ssh_url": ssh, "http_url": v.Clone}
}

func glHookRepository(v repoView) map[string]any {
	return map[string]any{"name": v.Name, "url": "git@" + hostOf(v.Web) + ":" + v.full() + ".git", "description": "",
		"homepage": v.Web + "/" + v.full(), "git_http_url": v.Clone, "git_ssh_url": "git@" + hostOf(v.Web) + ":" + v.full() + ".git",
		"visibility_level": 0}
}

func glHookUser(login string) map[string]any {
	return map[string]any{"id": stableID("user:" + login), "name": login, "username": login, "avatar_url": "",
		"email": "[REDACTED]"}
}

func glHookLabels(v repoView, labels []string) []map[string]any {
	out := []map[string]any{}
	for _, l := range labels {
		out = append(out, map[string]any{"id": stableID(v.full() + "#label:" + l), "title": l, "color": "#ededed",
			"project_id": v.ID, "type": "ProjectLabel", "group_id": nil})
	}
	return out
}

func glMRHookJSON(e PREvent) map[string]any {
	v := e.view()
	pr := e.PR
	action := map[string]string{"opened": "open", "synchronize": "update", "reopened": "reopen", "labeled": "update",
		"closed": "close"}[e.Action]
	if e.Action == "closed" && pr.State == PRMerged {
		action = "merge"
	}
	if action == "" {
		action = "update"
	}
	lastCommit := map[string]any{"id": pr.HeadSHA, "title": "", "message": "", "timestamp": nil,
		"url": v.Web + "/" + v.full() + "/-/commit/" + pr.HeadSHA, "author": map[string]string{"name": "", "email": ""}}
	attrs := map[string]any{
		"id": pr.ID, "iid": pr.Number, "target_branch": pr.Base, "source_branch": pr.Head, "source_project_id": v.ID,
		"target_project_id": v.ID, "author_id": stableID("user:" + pr.Author), "title": pr.Title, "description": pr.Body,
		"created_at": glHookTime(pr.CreatedAt), "updated_at": glHookTime(pr.UpdatedAt), "state": glState(pr.State),
		"merge_status": "unchecked", "detailed_merge_status": "unchecked", "url": v.Web + "/" + v.full() + "/-/merge_requests/" + strconv.Itoa(pr.Number),
		"action": action, "last_commit": lastCommit, "merge_commit_sha": nilIfEmpty(pr.MergeCommitSHA), "draft": pr.Draft,
		"work_in_progress": pr.Draft, "labels": glHookLabels(v, pr.Labels), "source": glHookProject(v), "target": glHookProject(v),
		"blocking_discussions_resolved": true, "head_pipeline_id": nil,
	}
	if e.Action == "synchronize" && e.Before != "" {
		attrs["oldrev"] = e.Before
	}
	changes := map[string]any{}
	// GitLab sends every other change as "update" with what changed under changes.
	switch e.Action {
	case "labeled":
		prev := slices.DeleteFunc(slices.Clone(pr.Labels), func(l string) bool { return l == e.Label })
		changes["labels"] = map[string]any{"previous": glHookLabels(v, prev), "current": glHookLabels(v, pr.Labels)}
	case "unlabeled":
		prev := append(slices.Clone(pr.Labels), e.Label)
		changes["labels"] = map[string]any{"previous": glHookLabels(v, prev), "current": glHookLabels(v, pr.Labels)}
	case "ready_for_review", "converted_to_draft":
		changes["draft"] = map[string]any{"previous": e.Action == "ready_for_review", "current": e.Action == "converted_to_draft"}
	case "edited":
		changes["title"] = map[string]any{"previous": e.PreviousTitle, "current": pr.Title}
	}
	return map[string]any{
		"object_kind": "merge_request", "event_type": "merge_request", "user": glHookUser(senderOr(e.Sender, pr.Author)),
		"project": glHookProject(v), "object_attributes": attrs, "labels": glHookLabels(v, pr.Labels), "changes": changes,
		"repository": glHookRepository(v), "assignees": []any{}, "reviewers": []any{},
	}
}

func glPushHookJSON(e PushEvent) map[string]any {
	v := e.view()
	before, after := e.ids()
	// GitLab lists the newest 20 commits; total_commits_count counts all of them.
	listed := e.Commits[max(0, len(e.Commits)-20):]
	total := max(e.TotalCommits, len(e.Commits))
	commits := make([]map[string]any, 0, len(listed))
	for _, c := range listed {
		commits = append(commits, map[string]any{"id": c.SHA, "message": c.Message, "title": c.Title(),
			"timestamp": c.Committer.When.Format(time.RFC3339), "url": v.Web + "/" + v.full() + "/-/commit/" + c.SHA,
			"author": map[string]string{"name": c.Author.Name, "email": c.Author.Email},
			"added":  nonNil(c.Added), "modified": nonNil(c.Modified), "removed": nonNil(c.Removed)})
	}
	checkout := any(nil)
	if after != zeroOID {
		checkout = after
	}
	pusher := senderOr(e.Pusher, "")
	return map[string]any{
		"object_kind": "push", "event_name": "push", "before": before, "after": after, "ref": e.Ref, "ref_protected": false,
		"checkout_sha": checkout, "message": nil, "user_id": stableID("user:" + pusher), "user_name": pusher,
		"user_username": pusher, "user_email": "", "user_avatar": "", "project_id": v.ID, "project": glHookProject(v),
		"commits": commits, "total_commits_count": total, "push_options": map[string]any{},
		"repository": glHookRepository(v),
	}
}
