package scmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Bitbucket is a fake Bitbucket Cloud REST API (2.0) served under /2.0, for go-bitbucket.
//
// Like Bitbucket Cloud, pull request JSON carries 12-character abbreviated commit hashes in
// source.commit.hash, destination.commit.hash and merge_commit.hash.
type Bitbucket struct{ *Forge }

// NewBitbucket starts a fake Bitbucket Cloud for the test; give APIURL() to
// bitbucket.NewOAuthbearerToken*/NewBasicAuth*WithBaseUrlStr or BITBUCKET_API_BASE_URL.
func NewBitbucket(t testing.TB, opts ...Option) *Bitbucket {
	t.Helper()
	return startFake(t, "NewBitbucket", opts, NewBitbucketHandler)
}

// NewBitbucketHandler builds a fake Bitbucket without a listener: mount it and call SetBaseURL.
func NewBitbucketHandler(gs *GitServer, opts ...Option) (*Bitbucket, error) {
	return newFake("bitbucket", gs, opts, BitbucketWebhookRequest, func(f *Forge) *Bitbucket { return &Bitbucket{Forge: f} })
}

// APIURL is the API base: <url>/2.0.
func (b *Bitbucket) APIURL() string { return b.URL() + "/2.0" }

// RateLimitNext makes the next n API calls answer 429 with Retry-After.
func (b *Bitbucket) RateLimitNext(n int, retryAfter time.Duration) error {
	secs := max(int(retryAfter.Round(time.Second)/time.Second), 1)
	return b.mw.inject(Fault{PathPattern: `^/2\.0/`, Times: n}, func() (int, map[string]string, string) {
		return http.StatusTooManyRequests, map[string]string{"Retry-After": strconv.Itoa(secs),
				"X-RateLimit-Limit": strconv.Itoa(b.limit()), "X-RateLimit-Resource": "api", "X-RateLimit-NearLimit": "true"},
			bbErrorBody("Rate limit for this resource has been exceeded")
	})
}

func (b *Bitbucket) limit() int {
	if b.set.rateLimit > 0 {
		return b.set.rateLimit
	}
	return 1000
}

func (b *Bitbucket) decorate(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Request-Id", requestID())
	tok, _ := bearerOrBasic(r)
	used, _, _ := b.countRate(tok, b.limit(), time.Hour)
	h.Set("X-RateLimit-Limit", strconv.Itoa(b.limit()))
	h.Set("X-RateLimit-Resource", "api")
	h.Set("X-RateLimit-NearLimit", strconv.FormatBool(used*5 >= b.limit()*4))
}

func bbErrorBody(msg string) string {
	data, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"message": msg}})
	return string(data)
}

func bbError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(bbErrorBody(msg)))
}

// bbFieldError answers 400 with a per-field error like Bitbucket's validation errors.
func bbFieldError(w http.ResponseWriter, field, msg string) {
	writeJSON(w, 400, map[string]any{"type": "error", "error": map[string]any{
		"message": field + ": " + msg, "fields": map[string][]string{field: {msg}}}})
}

// bbTime is Bitbucket's timestamp format (microseconds, +00:00), which go-bitbucket parses.
func bbTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000+00:00")
}

// bbUUID is a stable "{uuid}" for a name.
func bbUUID(name string) string {
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:16])
	return "{" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32] + "}"
}

type bbCall struct {
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	user string
	rs   *repoState
	rv   repoView
}

type bbHandler func(c *bbCall)

func (b *Bitbucket) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/2.0/") {
		bbError(w, 404, "Resource not found")
		return
	}
	tok, _ := bearerOrBasic(r)
	ti, ok := b.git.tokens.lookup(tok)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="Bitbucket.org HTTP"`)
		bbError(w, 401, "Access token expired or invalid. Use a valid access token.")
		return
	}
	serveRoute(b.mux, w, r, ti, func() { bbError(w, 404, "Resource not found") })
}

func (b *Bitbucket) handle(pattern string, fn bbHandler) {
	method, p, _ := strings.Cut(pattern, " ")
	b.mux.HandleFunc(method+" /2.0"+p, func(w http.ResponseWriter, r *http.Request) {
		ti, _ := r.Context().Value(tokenKey{}).(tokenInfo)
		c := &bbCall{w: w, r: r, ctx: r.Context(), user: ti.user}
		if ws := r.PathValue("ws"); ws != "" {
			slug := r.PathValue("slug")
			rs, err := b.repoState(ws, slug)
			if err != nil || !ti.canSee(ws+"/"+slug) {
				bbError(w, 404, "You may not have access to this repository or it no longer exists in this workspace. If you think this repository exists and you have access, make sure you are authenticated.")
				return
			}
			c.rs, c.rv = rs, b.view(rs, r)
		}
		fn(c)
	})
}

func (b *Bitbucket) view(rs *repoState, r *http.Request) repoView {
	v := viewOf(rs.owner, rs.name, rs.id, b.base(r), b.webFor(r), b.git.CloneURL(rs.owner, rs.name), rs.defBranch)
	v.Created = rs.created
	return v
}

func (b *Bitbucket) routes() {
	const repo = "/repositories/{ws}/{slug}"
	b.handle("GET /user", b.getUser)
	b.handle("GET "+repo, func(c *bbCall) { writeJSON(c.w, 200, bbRepoJSON(c.rv)) })
	b.handle("GET "+repo+"/src", b.getSrc)
	b.handle("GET "+repo+"/src/{rest...}", b.getSrc)
	b.handle("POST "+repo+"/src", b.postSrc)
	b.handle("POST "+repo+"/src/{$}", b.postSrc)
	b.handle("GET "+repo+"/refs/branches", b.listBranches)
	b.handle("POST "+repo+"/refs/branches", b.createBranch)
	b.handle("GET "+repo+"/refs/branches/{name...}", b.getBranch)
	b.handle("DELETE "+repo+"/refs/branches/{name...}", b.deleteBranch)
	b.handle("GET "+repo+"/commit/{sha}", b.getCommit)
	b.handle("GET "+repo+"/commits/{rev...}", b.listCommits)
	b.handle("GET "+repo+"/commit/{sha}/statuses", b.listStatuses)
	b.handle("POST "+repo+"/commit/{sha}/statuses/build", b.createStatus)
	b.handle("GET "+repo+"/commit/{sha}/statuses/build/{key}", b.getStatus)
	b.handle("GET "+repo+"/diffstat/{spec...}", b.diffstat)
	b.handle("GET "+repo+"/diff/{spec...}", b.diff)
	b.handle("GET "+repo+"/merge-base/{spec...}", b.mergeBase)
	for _, p := range []string{"/pullrequests", "/pullrequests/{$}"} {
		b.handle("GET "+repo+p, b.listPRs)
		b.handle("POST "+repo+p, b.createPR)
	}
	b.handle("GET "+repo+"/pullrequests/{id}", b.getPR)
	b.handle("PUT "+repo+"/pullrequests/{id}", b.updatePR)
	b.handle("POST "+repo+"/pullrequests/{id}/merge", b.mergePR)
	b.handle("POST "+repo+"/pullrequests/{id}/decline", b.declinePR)
	b.handle("GET "+repo+"/pullrequests/{id}/comments", b.listComments)
	b.handle("GET "+repo+"/pullrequests/{id}/comments/{$}", b.listComments)
	b.handle("POST "+repo+"/pullrequests/{id}/comments", b.createComment)
	b.handle("POST "+repo+"/pullrequests/{id}/comments/{$}", b.createComment)
	b.handle("PUT "+repo+"/pullrequests/{id}/comments/{comment}", b.updateComment)
	b.handle("GET "+repo+"/pullrequests/{id}/statuses", b.prStatuses)
	b.handle("GET "+repo+"/pullrequests/{id}/commits", b.prCommits)
	b.handle("GET "+repo+"/pullrequests/{id}/commits/{$}", b.prCommits)
	b.handle("GET "+repo+"/pullrequests/{id}/diffstat", b.prDiffstat)
	b.handle("GET "+repo+"/pullrequests/{id}/diff", b.prDiff)
}

// --- JSON shapes -------------------------------------------------------------------------------

func bbUserJSON(web, login string) map[string]any {
	if login == "" {
		return nil
	}
	uuid := bbUUID("user:" + login)
	return map[string]any{"type": "user", "uuid": uuid, "account_id": "557058:" + strings.Trim(uuid, "{}"),
		"nickname": login, "display_name": login,
		"links": map[string]any{"self": map[string]string{"href": web + "/2.0/users/" + url.PathEscape(uuid)},
			"html": map[string]string{"href": web + "/" + url.PathEscape(uuid) + "/"}, "avatar": map[string]string{"href": web + "/avatar/" + login}}}
}

func bbLinks(pairs ...string) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = map[string]string{"href": pairs[i+1]}
	}
	return m
}

func bbRepoMini(v repoView) map[string]any {
	return map[string]any{"type": "repository", "full_name": v.full(), "name": v.Name, "uuid": bbUUID("repo:" + v.full()),
		"links": bbLinks("self", v.API+"/2.0/repositories/"+v.full(), "html", v.Web+"/"+v.full())}
}

func bbRepoJSON(v repoView) map[string]any {
	api := v.API + "/2.0/repositories/" + v.full()
	links := bbLinks("self", api, "html", v.Web+"/"+v.full(), "pullrequests", api+"/pullrequests", "commits", api+"/commits",
		"branches", api+"/refs/branches", "source", api+"/src", "hooks", api+"/hooks", "diff", api+"/diff", "watchers", api+"/watchers",
		"forks", api+"/forks", "downloads", api+"/downloads", "avatar", v.Web+"/avatar/"+v.Name, "tags", api+"/refs/tags")
	links["clone"] = []map[string]string{{"name": "https", "href": v.Clone}, {"name": "ssh", "href": "git@" + hostOf(v.Web) + ":" + v.full() + ".git"}}
	ws := map[string]any{"type": "workspace", "uuid": bbUUID("ws:" + v.Owner), "slug": v.Owner, "name": v.Owner,
		"links": bbLinks("self", v.API+"/2.0/workspaces/"+v.Owner, "html", v.Web+"/"+v.Owner+"/")}
	return map[string]any{
		"type": "repository", "uuid": bbUUID("repo:" + v.full()), "full_name": v.full(), "name": v.Name, "slug": v.Name,
		"description": "", "is_private": true, "fork_policy": "no_public_forks", "language": "", "scm": "git",
		"has_issues": false, "has_wiki": false, "size": 0, "website": nil,
		"mainbranch": map[string]any{"type": "branch", "name": v.DefaultBranch},
		"created_on": bbTime(v.Created), "updated_on": bbTime(v.Created),
		"owner": map[string]any{"type": "team", "uuid": ws["uuid"], "username": v.Owner, "display_name": v.Owner,
			"links": bbLinks("self", v.API+"/2.0/workspaces/"+v.Owner)},
		"workspace": ws,
		"project":   map[string]any{"type": "project", "uuid": bbUUID("project:" + v.Owner), "key": "PROJ", "name": "Project"},
		"links":     links, "override_settings": map[string]bool{"default_merge_strategy": false, "branching_model": false},
	}
}

func bbCommitJSON(v repoView, c Commit) map[string]any {
	api := v.API + "/2.0/repositories/" + v.full()
	parents := make([]map[string]any, 0, len(c.Parents))
	for _, p := range c.Parents {
		parents = append(parents, map[string]any{"type": "commit", "hash": p,
			"links": bbLinks("self", api+"/commit/"+p, "html", v.Web+"/"+v.full()+"/commits/"+p)})
	}
	msg := c.Message
	return map[string]any{
		"type": "commit", "hash": c.SHA, "date": bbTime(c.Committer.When), "message": msg,
		"author":  map[string]any{"type": "author", "raw": c.Author.Name + " <" + c.Author.Email + ">"},
		"summary": map[string]any{"type": "rendered", "raw": msg, "markup": "markdown", "html": "<p>" + htmlEscape(msg) + "</p>"},
		"parents": parents, "repository": bbRepoMini(v),
		"links": bbLinks("self", api+"/commit/"+c.SHA, "html", v.Web+"/"+v.full()+"/commits/"+c.SHA,
			"diff", api+"/diff/"+c.SHA, "patch", api+"/patch/"+c.SHA, "statuses", api+"/commit/"+c.SHA+"/statuses",
			"comments", api+"/commit/"+c.SHA+"/comments", "approve", api+"/commit/"+c.SHA+"/approve"),
	}
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(strings.TrimSpace(s))
}

var bbStrategies = []string{"merge_commit", "squash", "fast_forward", "squash_fast_forward", "rebase_fast_forward", "rebase_merge"}

func bbBranchJSON(v repoView, name string, c Commit) map[string]any {
	api := v.API + "/2.0/repositories/" + v.full()
	return map[string]any{"type": "branch", "name": name, "target": bbCommitJSON(v, c),
		"links":                  bbLinks("self", api+"/refs/branches/"+name, "commits", api+"/commits/"+name, "html", v.Web+"/"+v.full()+"/branch/"+name),
		"default_merge_strategy": "merge_commit", "merge_strategies": bbStrategies}
}

func bbState(s PRState) string {
	switch s {
	case PROpen:
		return "OPEN"
	case PRMerged:
		return "MERGED"
	}
	return "DECLINED"
}

// bbPRJSON renders a pull request; commit hashes are abbreviated to 12 characters like Bitbucket.
func bbPRJSON(v repoView, pr PullRequest) map[string]any {
	api := v.API + "/2.0/repositories/" + v.full() + "/pullrequests/" + strconv.Itoa(pr.Number)
	side := func(branch, sha string) map[string]any {
		return map[string]any{"branch": map[string]string{"name": branch},
			"commit": map[string]any{"type": "commit", "hash": short(sha, 12),
				"links": bbLinks("self", v.API+"/2.0/repositories/"+v.full()+"/commit/"+short(sha, 12))},
			"repository": bbRepoMini(v)}
	}
	var mergeCommit, closedBy any
	if pr.MergeCommitSHA != "" {
		mergeCommit = map[string]any{"type": "commit", "hash": short(pr.MergeCommitSHA, 12),
			"links": bbLinks("self", v.API+"/2.0/repositories/"+v.full()+"/commit/"+short(pr.MergeCommitSHA, 12))}
	}
	if pr.State == PRMerged {
		closedBy = bbUserJSON(v.API, pr.MergedBy)
	} else if pr.State == PRClosed {
		closedBy = bbUserJSON(v.API, pr.Author)
	}
	reviewers := []map[string]any{}
	for _, r := range pr.Reviewers {
		reviewers = append(reviewers, bbUserJSON(v.API, r))
	}
	return map[string]any{
		"type": "pullrequest", "id": pr.Number, "title": pr.Title, "description": pr.Body, "state": bbState(pr.State),
		"summary": map[string]any{"type": "rendered", "raw": pr.Body, "markup": "markdown", "html": "<p>" + htmlEscape(pr.Body) + "</p>"},
		"author":  bbUserJSON(v.API, pr.Author), "source": side(pr.Head, pr.HeadSHA), "destination": side(pr.Base, pr.BaseSHA),
		"merge_commit": mergeCommit, "close_source_branch": pr.RemoveSourceBranch, "closed_by": closedBy, "reason": "",
		"created_on": bbTime(pr.CreatedAt), "updated_on": bbTime(pr.UpdatedAt), "comment_count": len(pr.Comments),
		"task_count": 0, "participants": []any{}, "reviewers": reviewers, "draft": pr.Draft, "queued": false,
		"links": bbLinks("self", api, "html", v.Web+"/"+v.full()+"/pull-requests/"+strconv.Itoa(pr.Number),
			"commits", api+"/commits", "approve", api+"/approve", "request-changes", api+"/request-changes", "diff", api+"/diff",
			"diffstat", api+"/diffstat", "comments", api+"/comments", "activity", api+"/activity", "merge", api+"/merge",
			"decline", api+"/decline", "statuses", api+"/statuses"),
	}
}

var bbStatusStates = map[string]string{"INPROGRESS": "pending", "SUCCESSFUL": "success", "FAILED": "failure", "STOPPED": "error"}

func bbStatusJSON(v repoView, s *Status) map[string]any {
	api := v.API + "/2.0/repositories/" + v.full() + "/commit/" + s.SHA
	return map[string]any{"type": "build", "uuid": bbUUID("status:" + strconv.FormatInt(s.ID, 10)), "key": s.Context,
		"name": s.Name, "state": s.Native, "url": s.TargetURL, "description": s.Description, "refname": nilIfEmpty(s.Ref),
		"created_on": bbTime(s.CreatedAt), "updated_on": bbTime(s.UpdatedAt),
		"commit": map[string]any{"type": "commit", "hash": s.SHA, "links": bbLinks("self", api)},
		"links":  bbLinks("self", api+"/statuses/build/"+url.PathEscape(s.Context), "commit", api)}
}

// page answers one page of values with Bitbucket's envelope and an absolute "next" link.
func (b *Bitbucket) page(c *bbCall, values []map[string]any, defLen int) {
	p := parsePage(c.r, "pagelen", defLen, 100, len(values))
	start, end := p.bounds()
	out := map[string]any{"pagelen": p.perPage, "size": p.total, "page": p.page, "values": nonNilMaps(values[start:end])}
	if p.page < p.lastPage() {
		out["next"] = pageURL(requestBase(c.r), c.r, p.page+1)
	}
	if p.page > 1 {
		out["previous"] = pageURL(requestBase(c.r), c.r, p.page-1)
	}
	writeJSON(c.w, 200, out)
}

// --- handlers ---------------------------------------------------------------------------------

func (b *Bitbucket) getUser(c *bbCall) {
	u := bbUserJSON(b.URL(), c.user)
	u["username"] = c.user
	u["created_on"] = "2020-01-01T00:00:00.000000+00:00"
	u["account_status"] = "active"
	u["has_2fa_enabled"] = false
	writeJSON(c.w, 200, u)
}

// splitRefPath splits "<ref>/<path>" where the ref may itself contain slashes: the shortest
// prefix that resolves to a commit wins.
func (b *Bitbucket) splitRefPath(c *bbCall, rest string) (string, string, bool) {
	segs := strings.Split(rest, "/")
	for i := 1; i <= len(segs); i++ {
		ref := strings.Join(segs[:i], "/")
		if ref == "" {
			continue
		}
		if sha, err := c.rs.repo.resolve(c.ctx, ref); err == nil {
			return sha, strings.Trim(strings.Join(segs[i:], "/"), "/"), true
		}
	}
	return "", "", false
}

func (b *Bitbucket) getSrc(c *bbCall) {
	rest := c.r.PathValue("rest")
	if rest == "" {
		rest = c.rv.DefaultBranch + "/"
	}
	sha, p, ok := b.splitRefPath(c, rest)
	if !ok {
		bbError(c.w, 404, "Commit not found")
		return
	}
	e, err := c.rs.repo.entry(c.ctx, sha, p)
	if err != nil {
		bbError(c.w, 404, "No such file or directory: "+p)
		return
	}
	meta := c.r.URL.Query().Get("format") == "meta"
	if e.Type == "tree" && !meta {
		entries, err := c.rs.repo.lsTree(c.ctx, sha, false, p)
		if err != nil {
			bbError(c.w, 500, err.Error())
			return
		}
		vals := make([]map[string]any, 0, len(entries))
		for _, te := range entries {
			vals = append(vals, b.srcEntryJSON(c, sha, te))
		}
		b.page(c, vals, 10)
		return
	}
	if meta {
		e.Path = p
		writeJSON(c.w, 200, b.srcEntryJSON(c, sha, e))
		return
	}
	data, err := c.rs.repo.readBlob(c.ctx, e.SHA)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	ct := mime.TypeByExtension(path.Ext(p))
	if ct == "" {
		ct = "text/plain"
	}
	c.w.Header().Set("Content-Type", ct)
	_, _ = c.w.Write(data)
}

func (b *Bitbucket) srcEntryJSON(c *bbCall, sha string, e TreeEntry) map[string]any {
	api := c.rv.API + "/2.0/repositories/" + c.rv.full()
	typ := "commit_file"
	if e.Type == "tree" {
		typ = "commit_directory"
	}
	m := map[string]any{"path": e.Path, "type": typ, "escaped_path": e.Path,
		"commit": map[string]any{"type": "commit", "hash": sha, "links": bbLinks("self", api+"/commit/"+sha)},
		"links":  bbLinks("self", api+"/src/"+sha+"/"+e.Path, "meta", api+"/src/"+sha+"/"+e.Path+"?format=meta")}
	if typ == "commit_file" {
		m["size"] = e.Size
		m["attributes"] = []string{}
		m["mimetype"] = nil
	}
	return m
}

// postSrc creates a commit from form fields: every field that is not message, author, parents,
// branch or files is a path → content; files lists paths to delete.
func (b *Bitbucket) postSrc(c *bbCall) {
	fields := map[string]string{}
	var deletes []string
	mt, _, _ := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		if err := c.r.ParseMultipartForm(maxBody); err != nil {
			bbError(c.w, 400, "malformed multipart body")
			return
		}
		for k, vs := range c.r.MultipartForm.Value {
			if k == "files" {
				deletes = append(deletes, vs...)
				continue
			}
			fields[k] = vs[len(vs)-1]
		}
		for k, fhs := range c.r.MultipartForm.File {
			f, err := fhs[0].Open()
			if err != nil {
				bbError(c.w, 400, "unreadable file part "+k)
				return
			}
			data, _ := io.ReadAll(f)
			f.Close()
			fields[k] = string(data)
		}
	case "application/x-www-form-urlencoded":
		if err := c.r.ParseForm(); err != nil {
			bbError(c.w, 400, "malformed form body")
			return
		}
		for k, vs := range c.r.PostForm {
			if k == "files" {
				deletes = append(deletes, vs...)
				continue
			}
			fields[k] = vs[len(vs)-1]
		}
	default:
		bbError(c.w, 400, "Content-Type must be multipart/form-data or application/x-www-form-urlencoded")
		return
	}
	reserved := map[string]bool{"message": true, "author": true, "parents": true, "branch": true}
	branch := fields["branch"]
	if branch == "" {
		branch = c.rv.DefaultBranch
	}
	if err := validBranch(branch); err != nil {
		bbFieldError(c.w, "branch", "invalid branch name")
		return
	}
	var parents []string
	for _, p := range strings.Split(fields["parents"], ",") {
		if p = strings.TrimSpace(p); p != "" {
			parents = append(parents, p)
		}
	}
	author := b.userSig(c.user)
	if raw := fields["author"]; raw != "" {
		sig := parseSig(raw)
		if sig.Email == "" {
			bbFieldError(c.w, "author", "expected \"Name <email>\"")
			return
		}
		author.Name, author.Email = sig.Name, sig.Email
	}
	var changes []treeChange
	for _, k := range sortedKeys(fields) {
		if reserved[k] {
			continue
		}
		p, err := cleanPath(k)
		if err != nil {
			bbFieldError(c.w, k, "invalid path")
			return
		}
		sha, err := c.rs.repo.writeBlob(c.ctx, []byte(fields[k]))
		if err != nil {
			bbError(c.w, 500, err.Error())
			return
		}
		changes = append(changes, treeChange{Path: p, SHA: sha})
	}
	for _, d := range deletes {
		p, err := cleanPath(d)
		if err != nil {
			bbFieldError(c.w, "files", "invalid path "+d)
			return
		}
		changes = append(changes, treeChange{Path: p, Delete: true})
	}
	msg := fields["message"]
	if msg == "" {
		msg = "Edited online with Bitbucket"
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	head, herr := c.rs.repo.branchHead(c.ctx, branch)
	parent := head
	switch {
	case herr == nil && len(parents) > 0:
		found := false
		for _, p := range parents {
			if full, err := c.rs.repo.resolve(c.ctx, p); err == nil && full == head {
				found = true
			}
		}
		if !found {
			bbError(c.w, 409, fmt.Sprintf("The branch %s has moved: its head is no longer among the parents; refresh and try again.", branch))
			return
		}
	case herr != nil && len(parents) > 0:
		sha, err := c.rs.repo.resolve(c.ctx, parents[0])
		if err != nil {
			bbFieldError(c.w, "parents", "commit not found: "+parents[0])
			return
		}
		parent, head = sha, ""
	case herr != nil:
		sha, err := c.rs.repo.branchHead(c.ctx, c.rv.DefaultBranch)
		if err != nil {
			bbError(c.w, 500, err.Error())
			return
		}
		parent, head = sha, ""
	}
	sha, err := b.commitChanges(c.ctx, c.rs, branch, parent, changes, msg, author, c.user, func(cur string) error {
		if cur != head {
			return fmt.Errorf("%w: branch %s moved", ErrRefConflict, branch)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrRefConflict) {
			bbError(c.w, 409, "The branch "+branch+" was updated concurrently; refresh and try again.")
			return
		}
		bbError(c.w, 500, err.Error())
		return
	}
	c.w.Header().Set("Location", c.rv.API+"/2.0/repositories/"+c.rv.full()+"/commit/"+sha)
	c.w.WriteHeader(http.StatusCreated)
}

var bbNameQuery = regexp.MustCompile(`^\s*name\s*(=|~)\s*"([^"]*)"\s*$`)

func (b *Bitbucket) listBranches(c *bbCall) {
	refs, err := c.rs.repo.refs(c.ctx, "refs/heads/")
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	var op, want string
	if q := c.r.URL.Query().Get("q"); q != "" {
		m := bbNameQuery.FindStringSubmatch(q)
		if m == nil {
			bbError(c.w, 400, "Invalid query: "+q)
			return
		}
		op, want = m[1], m[2]
	}
	var vals []map[string]any
	for _, ref := range sortedKeys(refs) {
		name := strings.TrimPrefix(ref, "refs/heads/")
		if (op == "=" && name != want) || (op == "~" && !strings.Contains(strings.ToLower(name), strings.ToLower(want))) {
			continue
		}
		cm, err := c.rs.repo.commit(c.ctx, refs[ref])
		if err != nil {
			continue
		}
		vals = append(vals, bbBranchJSON(c.rv, name, cm))
	}
	b.page(c, vals, 10)
}

func (b *Bitbucket) getBranch(c *bbCall) {
	name := c.r.PathValue("name")
	sha, err := c.rs.repo.branchHead(c.ctx, name)
	if err != nil {
		bbError(c.w, 404, fmt.Sprintf("Branch \"%s\" does not exist.", name))
		return
	}
	cm, err := c.rs.repo.commit(c.ctx, sha)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	writeJSON(c.w, 200, bbBranchJSON(c.rv, name, cm))
}

func (b *Bitbucket) createBranch(c *bbCall) {
	var body struct {
		Name   string `json:"name"`
		Target struct {
			Hash string `json:"hash"`
		} `json:"target"`
	}
	if err := readJSON(c.r, &body); err != nil {
		bbError(c.w, 400, "Invalid JSON")
		return
	}
	if body.Name == "" {
		bbFieldError(c.w, "name", "This field is required.")
		return
	}
	if err := validBranch(body.Name); err != nil {
		bbFieldError(c.w, "name", "invalid branch name")
		return
	}
	sha, err := c.rs.repo.resolve(c.ctx, body.Target.Hash)
	if err != nil {
		bbFieldError(c.w, "target", "Commit not found: "+body.Target.Hash)
		return
	}
	err = b.setRef(c.ctx, c.rs, "refs/heads/"+body.Name, sha, c.user, createOnly)
	switch {
	case errors.Is(err, ErrExists), errors.Is(err, ErrRefConflict):
		writeJSON(c.w, 400, map[string]any{"type": "error", "error": map[string]any{
			"message": fmt.Sprintf("Branch \"%s\" already exists", body.Name), "code": "BRANCH_ALREADY_EXISTS"}})
		return
	case err != nil:
		bbError(c.w, 500, err.Error())
		return
	}
	cm, _ := c.rs.repo.commit(c.ctx, sha)
	writeJSON(c.w, 201, bbBranchJSON(c.rv, body.Name, cm))
}

func (b *Bitbucket) deleteBranch(c *bbCall) {
	name := c.r.PathValue("name")
	if name == c.rv.DefaultBranch {
		bbError(c.w, 400, "Cannot delete the main branch")
		return
	}
	err := b.setRef(c.ctx, c.rs, "refs/heads/"+name, "", c.user, nil)
	switch {
	case errors.Is(err, ErrNotFound):
		bbError(c.w, 404, fmt.Sprintf("Branch \"%s\" does not exist.", name))
	case err != nil:
		bbError(c.w, 500, err.Error())
	default:
		c.w.WriteHeader(http.StatusNoContent)
	}
}

func (b *Bitbucket) getCommit(c *bbCall) {
	cm, err := c.rs.repo.commit(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	writeJSON(c.w, 200, bbCommitJSON(c.rv, cm))
}

// mergeBase serves GET .../merge-base/{a}..{b} as Bitbucket Cloud does: the best common
// ancestor as a commit object; 404 when a revision is unknown or the histories are unrelated.
func (b *Bitbucket) mergeBase(c *bbCall) {
	x, y, ok := strings.Cut(c.r.PathValue("spec"), "..")
	if !ok || x == "" || y == "" || strings.HasPrefix(y, ".") {
		bbError(c.w, 400, "Invalid revspec: want <commit>..<commit>")
		return
	}
	a, err1 := c.rs.repo.resolve(c.ctx, x)
	d, err2 := c.rs.repo.resolve(c.ctx, y)
	if err1 != nil || err2 != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	mb, err := c.rs.repo.mergeBase(c.ctx, a, d)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	if mb == "" {
		bbError(c.w, 404, "No common ancestor")
		return
	}
	cm, err := c.rs.repo.commit(c.ctx, mb)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	writeJSON(c.w, 200, bbCommitJSON(c.rv, cm))
}

func (b *Bitbucket) listCommits(c *bbCall) {
	sha, err := c.rs.repo.resolve(c.ctx, c.r.PathValue("rev"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	commits, err := c.rs.repo.log(c.ctx, sha, c.r.URL.Query().Get("path"), 0)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	vals := make([]map[string]any, 0, len(commits))
	for _, cm := range commits {
		vals = append(vals, bbCommitJSON(c.rv, cm))
	}
	b.page(c, vals, 30)
}

func (b *Bitbucket) createStatus(c *bbCall) {
	var body struct {
		Key, State, URL, Name, Description, Refname string
	}
	if err := readJSON(c.r, &body); err != nil {
		bbError(c.w, 400, "Invalid JSON")
		return
	}
	norm, ok := bbStatusStates[body.State]
	switch {
	case !ok:
		bbFieldError(c.w, "state", fmt.Sprintf("%q is not a valid choice (INPROGRESS, SUCCESSFUL, FAILED, STOPPED).", body.State))
		return
	case body.Key == "":
		bbFieldError(c.w, "key", "This field is required.")
		return
	case body.URL == "":
		bbFieldError(c.w, "url", "This field is required.")
		return
	}
	sha, err := c.rs.repo.resolve(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	name := body.Name
	if name == "" {
		name = body.Key
	}
	c.rs.mu.Lock()
	s := b.setStatus(c.rs, Status{SHA: sha, Context: body.Key, Name: name, State: norm, Native: body.State,
		Description: body.Description, TargetURL: body.URL, Ref: body.Refname, Creator: c.user}, true)
	out := bbStatusJSON(c.rv, s)
	c.rs.mu.Unlock()
	writeJSON(c.w, 201, out)
}

func (b *Bitbucket) statusesFor(c *bbCall, sha string) []map[string]any {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	var vals []map[string]any
	for _, s := range c.rs.statuses[sha] {
		vals = append(vals, bbStatusJSON(c.rv, s))
	}
	return vals
}

func (b *Bitbucket) listStatuses(c *bbCall) {
	sha, err := c.rs.repo.resolve(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	b.page(c, b.statusesFor(c, sha), 10)
}

func (b *Bitbucket) getStatus(c *bbCall) {
	sha, err := c.rs.repo.resolve(c.ctx, c.r.PathValue("sha"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	for _, s := range c.rs.statuses[sha] {
		if s.Context == c.r.PathValue("key") {
			writeJSON(c.w, 200, bbStatusJSON(c.rv, s))
			return
		}
	}
	bbError(c.w, 404, "Build status not found")
}

// diffRange resolves a Bitbucket spec: "<sha>" (against its first parent) or "<new>..<old>"
// (source first, destination second). It returns the trees to diff and, for merge=true
// (the default), diffs against the merge of both like Bitbucket's preview.
func (b *Bitbucket) diffRange(c *bbCall, spec string) (string, string, []string, error) {
	q := c.r.URL.Query()
	newRef, oldRef, two := strings.Cut(spec, "..")
	if !two {
		cm, err := c.rs.repo.commit(c.ctx, spec)
		if err != nil {
			return "", "", nil, err
		}
		parent := ""
		if len(cm.Parents) > 0 {
			parent = cm.Parents[0]
		}
		return parent, cm.SHA, nil, nil
	}
	newSHA, err := c.rs.repo.resolve(c.ctx, newRef)
	if err != nil {
		return "", "", nil, err
	}
	oldSHA, err := c.rs.repo.resolve(c.ctx, oldRef)
	if err != nil {
		return "", "", nil, err
	}
	switch {
	case q.Get("topic") == "true":
		mb, err := c.rs.repo.mergeBase(c.ctx, newSHA, oldSHA)
		return mb, newSHA, nil, err
	case q.Get("merge") == "false":
		return oldSHA, newSHA, nil, nil
	}
	tree, conflicts, err := c.rs.repo.mergeCommits(c.ctx, oldSHA, newSHA)
	return oldSHA, tree, conflicts, err
}

func bbDiffstatJSON(v repoView, f FileChange, conflicted bool) map[string]any {
	file := map[string]any{"path": f.Path, "type": "commit_file", "escaped_path": f.Path}
	var oldF, newF any = file, file
	status := f.Status
	switch f.Status {
	case "added":
		oldF = nil
	case "removed":
		newF = nil
	}
	if conflicted {
		status = "merge conflict"
	}
	return map[string]any{"type": "diffstat", "status": status, "lines_added": f.Additions, "lines_removed": f.Deletions,
		"old": oldF, "new": newF}
}

func (b *Bitbucket) diffstatFor(c *bbCall, from, to string, conflicts []string) {
	files, err := c.rs.repo.diff(c.ctx, from, to, false)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	conflicted := map[string]bool{}
	for _, f := range conflicts {
		conflicted[f] = true
	}
	vals := make([]map[string]any, 0, len(files))
	for _, f := range files {
		vals = append(vals, bbDiffstatJSON(c.rv, f, conflicted[f.Path]))
	}
	b.page(c, vals, 500)
}

func (b *Bitbucket) diffstat(c *bbCall) {
	from, to, conflicts, err := b.diffRange(c, c.r.PathValue("spec"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	b.diffstatFor(c, from, to, conflicts)
}

func (b *Bitbucket) writePatch(c *bbCall, from, to string) {
	files, err := c.rs.repo.diff(c.ctx, from, to, true)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, f := range files {
		a, bb := "a/"+f.Path, "b/"+f.Path
		if f.Status == "added" {
			a = "/dev/null"
		}
		if f.Status == "removed" {
			bb = "/dev/null"
		}
		fmt.Fprintf(c.w, "diff --git a/%s b/%s\n--- %s\n+++ %s\n%s", f.Path, f.Path, a, bb, f.Patch)
	}
}

func (b *Bitbucket) diff(c *bbCall) {
	from, to, _, err := b.diffRange(c, c.r.PathValue("spec"))
	if err != nil {
		bbError(c.w, 404, "Commit not found")
		return
	}
	b.writePatch(c, from, to)
}

// --- pull requests ----------------------------------------------------------------------------

func (b *Bitbucket) pr(c *bbCall) *prState { return c.rs.prAt(c.r, "id") }

// lockPR is repoState.lockPR with Bitbucket's 404.
func (b *Bitbucket) lockPR(c *bbCall) *prState { return c.rs.lockPR(c.r, "id", func() { b.noPR(c) }) }

func (b *Bitbucket) noPR(c *bbCall) {
	bbError(c.w, 404, "Pull request not found.")
}

var (
	bbCond = regexp.MustCompile(`^\s*([a-z_.]+)\s*(=|!=|~)\s*"([^"]*)"\s*$`)
	bbAnd  = regexp.MustCompile(`(?i)\s+AND\s+`)
)

// prFilter parses the BBQL subset prflow uses: conditions on source.branch.name,
// destination.branch.name, state, title and id joined by AND.
func prFilter(q string) (func(PullRequest) bool, error) {
	if strings.TrimSpace(q) == "" {
		return func(PullRequest) bool { return true }, nil
	}
	var tests []func(PullRequest) bool
	for _, part := range bbAnd.Split(q, -1) {
		m := bbCond.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("invalid query %q at %q", q, part)
		}
		field, op, val := m[1], m[2], m[3]
		get := map[string]func(PullRequest) string{
			"source.branch.name":      func(p PullRequest) string { return p.Head },
			"destination.branch.name": func(p PullRequest) string { return p.Base },
			"state":                   func(p PullRequest) string { return bbState(p.State) },
			"title":                   func(p PullRequest) string { return p.Title },
			"id":                      func(p PullRequest) string { return strconv.Itoa(p.Number) },
		}[field]
		if get == nil {
			return nil, fmt.Errorf("invalid query %q: unknown field %q", q, field)
		}
		tests = append(tests, func(p PullRequest) bool {
			v := get(p)
			switch op {
			case "=":
				return v == val
			case "!=":
				return v != val
			}
			return strings.Contains(strings.ToLower(v), strings.ToLower(val))
		})
	}
	return func(p PullRequest) bool {
		for _, t := range tests {
			if !t(p) {
				return false
			}
		}
		return true
	}, nil
}

func (b *Bitbucket) listPRs(c *bbCall) {
	match, err := prFilter(c.r.URL.Query().Get("q"))
	if err != nil {
		bbError(c.w, 400, err.Error())
		return
	}
	states := map[string]bool{}
	for _, s := range c.r.URL.Query()["state"] {
		states[strings.ToUpper(s)] = true
	}
	if len(states) == 0 && !strings.Contains(c.r.URL.Query().Get("q"), "state") {
		states["OPEN"] = true
	}
	c.rs.mu.Lock()
	var vals []map[string]any
	for i := len(c.rs.prs) - 1; i >= 0; i-- {
		pr := c.rs.prs[i]
		b.refresh(c.ctx, c.rs, pr)
		snap := pr.snapshot()
		if (len(states) > 0 && !states[bbState(snap.State)]) || !match(snap) {
			continue
		}
		vals = append(vals, bbPRJSON(c.rv, snap))
	}
	c.rs.mu.Unlock()
	b.page(c, vals, 10)
}

type bbPRBody struct {
	Title       *string `json:"title"`
	Description *string `json:"description"`
	Source      struct {
		Branch struct {
			Name string `json:"name"`
		} `json:"branch"`
	} `json:"source"`
	Destination struct {
		Branch struct {
			Name string `json:"name"`
		} `json:"branch"`
	} `json:"destination"`
	Reviewers []struct {
		UUID     string `json:"uuid"`
		Nickname string `json:"nickname"`
	} `json:"reviewers"`
	CloseSourceBranch *bool  `json:"close_source_branch"`
	Draft             *bool  `json:"draft"`
	Message           string `json:"message"`
	MergeStrategy     string `json:"merge_strategy"`
}

func (b *Bitbucket) createPR(c *bbCall) {
	var body bbPRBody
	if err := readJSON(c.r, &body); err != nil {
		bbError(c.w, 400, "Invalid JSON")
		return
	}
	if body.Title == nil || *body.Title == "" {
		bbFieldError(c.w, "title", "This field is required.")
		return
	}
	src, dst := body.Source.Branch.Name, body.Destination.Branch.Name
	if dst == "" {
		dst = c.rv.DefaultBranch
	}
	if src == "" {
		bbFieldError(c.w, "source", "This field is required.")
		return
	}
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	if _, err := c.rs.repo.branchHead(c.ctx, src); err != nil {
		bbFieldError(c.w, "source", "branch not found: "+src)
		return
	}
	if _, err := c.rs.repo.branchHead(c.ctx, dst); err != nil {
		bbFieldError(c.w, "destination", "branch not found: "+dst)
		return
	}
	if n, err := b.aheadBy(c.ctx, c.rs, dst, src); err != nil || n == 0 {
		bbError(c.w, 400, "There are no changes to be pulled")
		return
	}
	desc := ""
	if body.Description != nil {
		desc = *body.Description
	}
	pr, err := b.openPR(c.ctx, c.rs, src, dst, *body.Title, desc, c.user, body.Draft != nil && *body.Draft)
	if err != nil {
		var pe *prError
		if errors.As(err, &pe) && pe.kind == "exists" {
			bbError(c.w, 400, fmt.Sprintf("There is already an open pull request from %s to %s (#%d).", src, dst, pe.number))
			return
		}
		bbError(c.w, 500, err.Error())
		return
	}
	if body.CloseSourceBranch != nil {
		pr.RemoveSourceBranch = *body.CloseSourceBranch
	}
	for _, r := range body.Reviewers {
		if r.Nickname != "" {
			pr.Reviewers = append(pr.Reviewers, r.Nickname)
		}
	}
	c.w.Header().Set("Location", c.rv.API+"/2.0/repositories/"+c.rv.full()+"/pullrequests/"+strconv.Itoa(pr.Number))
	writeJSON(c.w, 201, bbPRJSON(c.rv, pr.snapshot()))
}

func (b *Bitbucket) getPR(c *bbCall) {
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	b.refresh(c.ctx, c.rs, pr)
	writeJSON(c.w, 200, bbPRJSON(c.rv, pr.snapshot()))
}

func (b *Bitbucket) updatePR(c *bbCall) {
	var body bbPRBody
	if err := readJSON(c.r, &body); err != nil {
		bbError(c.w, 400, "Invalid JSON")
		return
	}
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if pr.State != PROpen {
		bbError(c.w, 400, "You can't edit a pull request that is not open.")
		return
	}
	if body.Title != nil && *body.Title != "" {
		pr.Title = *body.Title
	}
	if body.Description != nil {
		pr.Body = *body.Description
	}
	if dst := body.Destination.Branch.Name; dst != "" && dst != pr.Base {
		if _, err := c.rs.repo.branchHead(c.ctx, dst); err != nil {
			bbFieldError(c.w, "destination", "branch not found: "+dst)
			return
		}
		pr.Base = dst
	}
	if body.CloseSourceBranch != nil {
		pr.RemoveSourceBranch = *body.CloseSourceBranch
	}
	if body.Draft != nil {
		pr.Draft = *body.Draft
	}
	pr.UpdatedAt = time.Now().UTC()
	b.refresh(c.ctx, c.rs, pr)
	b.hooks.enqueue(hookEvent{kind: "pr", action: "edited", rs: c.rs, pr: pr.snapshot(), sender: c.user})
	writeJSON(c.w, 200, bbPRJSON(c.rv, pr.snapshot()))
}

var bbMethods = map[string]string{"merge_commit": "merge", "squash": "squash", "fast_forward": "ff",
	"squash_fast_forward": "squash-ff", "rebase_fast_forward": "rebase-ff", "rebase_merge": "rebase-merge"}

// mergePR merges with the requested strategy; failures answer 400 with Bitbucket's messages.
func (b *Bitbucket) mergePR(c *bbCall) {
	var body bbPRBody
	if err := readJSON(c.r, &body); err != nil {
		bbError(c.w, 400, "Invalid JSON")
		return
	}
	strategy := body.MergeStrategy
	if strategy == "" {
		strategy = "merge_commit"
	}
	method, ok := bbMethods[strategy]
	if !ok {
		bbFieldError(c.w, "merge_strategy", fmt.Sprintf("%q is not a valid choice.", strategy))
		return
	}
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	switch pr.State {
	case PRMerged:
		bbError(c.w, 400, "You can't merge a pull request that has already been merged.")
		return
	case PRClosed:
		bbError(c.w, 400, "You can't merge a declined pull request.")
		return
	}
	b.refresh(c.ctx, c.rs, pr)
	msg := body.Message
	if msg == "" {
		if method == "squash" || method == "squash-ff" {
			msg = fmt.Sprintf("%s (pull request #%d)", pr.Title, pr.Number)
		} else {
			msg = fmt.Sprintf("Merged in %s (pull request #%d)\n\n%s", pr.Head, pr.Number, pr.Title)
		}
	}
	remove := pr.RemoveSourceBranch
	if body.CloseSourceBranch != nil {
		remove = *body.CloseSourceBranch
	}
	_, err := b.merge(c.ctx, c.rs, pr, mergeOpts{method: method, message: msg, user: c.user, deleteBranch: remove})
	if err != nil {
		var pe *prError
		if !errors.As(err, &pe) {
			bbError(c.w, 500, err.Error())
			return
		}
		switch pe.kind {
		case "conflict":
			bbError(c.w, 400, "Conflicts during merge.")
		case "blocked":
			bbError(c.w, 400, "You can't merge until you resolve all merge checks: required build "+strings.Join(pe.contexts, ", ")+" has not passed.")
		case "not-ff":
			bbError(c.w, 400, "Fast-forward merge is not possible: the destination branch has commits the source branch does not.")
		case "draft":
			bbError(c.w, 400, "You can't merge a draft pull request.")
		case "base-modified":
			bbError(c.w, 409, "The destination branch was updated while merging; try again.")
		default:
			bbError(c.w, 400, "This pull request can't be merged: "+pe.Error())
		}
		return
	}
	pr.RemoveSourceBranch = remove
	writeJSON(c.w, 200, bbPRJSON(c.rv, pr.snapshot()))
}

func (b *Bitbucket) declinePR(c *bbCall) {
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if pr.State == PRMerged {
		bbError(c.w, 400, "You can't decline a pull request that has already been merged.")
		return
	}
	b.closePR(c.rs, pr, c.user)
	writeJSON(c.w, 200, bbPRJSON(c.rv, pr.snapshot()))
}

func bbCommentJSON(v repoView, pr PullRequest, cm Comment) map[string]any {
	api := v.API + "/2.0/repositories/" + v.full() + "/pullrequests/" + strconv.Itoa(pr.Number)
	return map[string]any{"id": cm.ID, "type": "pullrequest_comment", "created_on": bbTime(cm.CreatedAt),
		"updated_on": bbTime(cm.UpdatedAt), "deleted": false, "pending": false, "user": bbUserJSON(v.API, cm.User),
		"content":     map[string]any{"type": "rendered", "raw": cm.Body, "markup": "markdown", "html": "<p>" + htmlEscape(cm.Body) + "</p>"},
		"pullrequest": map[string]any{"type": "pullrequest", "id": pr.Number, "title": pr.Title, "links": bbLinks("self", api)},
		"links":       bbLinks("self", api+"/comments/"+strconv.FormatInt(cm.ID, 10), "html", v.Web+"/"+v.full()+"/pull-requests/"+strconv.Itoa(pr.Number)+"#comment-"+strconv.FormatInt(cm.ID, 10))}
}

func (b *Bitbucket) listComments(c *bbCall) {
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	snap := pr.snapshot()
	c.rs.mu.Unlock()
	vals := make([]map[string]any, 0, len(snap.Comments))
	for _, cm := range snap.Comments {
		vals = append(vals, bbCommentJSON(c.rv, snap, cm))
	}
	b.page(c, vals, 10)
}

func (b *Bitbucket) createComment(c *bbCall) {
	raw, ok := bbCommentBody(c)
	if !ok {
		return
	}
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	if pr.Locked {
		bbError(c.w, http.StatusForbidden, "Forbidden")
		return
	}
	cm := b.addComment(pr, raw, c.user)
	writeJSON(c.w, 201, bbCommentJSON(c.rv, pr.snapshot(), cm))
}

// BitbucketMaxComment is the longest comment Bitbucket accepts, in characters (it wants
// fewer than 32768).
const BitbucketMaxComment = 32767

// bbCommentBody reads a comment request's {"content":{"raw"}}, answering Bitbucket's 400 for
// a body that is not JSON or a comment that is missing or too long.
func bbCommentBody(c *bbCall) (string, bool) {
	var body struct {
		Content struct {
			Raw string `json:"raw"`
		} `json:"content"`
	}
	if err := readJSON(c.r, &body); err != nil {
		bbError(c.w, 400, "Invalid JSON")
		return "", false
	}
	raw := body.Content.Raw
	switch {
	case strings.TrimSpace(raw) == "":
		bbFieldError(c.w, "content", "This field is required.")
		return "", false
	case utf8.RuneCountInString(raw) > BitbucketMaxComment:
		bbFieldError(c.w, "content", fmt.Sprintf("Please enter a value less than %d characters.", BitbucketMaxComment+1))
		return "", false
	}
	return raw, true
}

// updateComment is PUT .../pullrequests/{id}/comments/{comment_id} with {"content":{"raw"}}:
// the comment must be one of this PR's.
func (b *Bitbucket) updateComment(c *bbCall) {
	raw, ok := bbCommentBody(c)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(c.r.PathValue("comment"), 10, 64)
	if err != nil {
		bbError(c.w, 404, "Comment not found")
		return
	}
	pr := b.lockPR(c)
	if pr == nil {
		return
	}
	defer c.rs.mu.Unlock()
	cm, err := b.Forge.editComment(pr, id, raw, c.user)
	switch {
	case errors.Is(err, errNoComment):
		bbError(c.w, 404, "Comment not found")
	case err != nil:
		bbError(c.w, http.StatusForbidden, "Forbidden")
	default:
		writeJSON(c.w, 200, bbCommentJSON(c.rv, pr.snapshot(), cm))
	}
}

// prHeads returns the PR's live base and head SHAs.
func (b *Bitbucket) prHeads(c *bbCall) (*prState, string, string, bool) {
	c.rs.mu.Lock()
	defer c.rs.mu.Unlock()
	pr := b.pr(c)
	if pr == nil {
		b.noPR(c)
		return nil, "", "", false
	}
	b.refresh(c.ctx, c.rs, pr)
	return pr, pr.BaseSHA, pr.HeadSHA, true
}

func (b *Bitbucket) prStatuses(c *bbCall) {
	_, _, head, ok := b.prHeads(c)
	if !ok {
		return
	}
	b.page(c, b.statusesFor(c, head), 10)
}

func (b *Bitbucket) prCommits(c *bbCall) {
	_, base, head, ok := b.prHeads(c)
	if !ok {
		return
	}
	shas, _ := c.rs.repo.revList(c.ctx, base+".."+head)
	vals := make([]map[string]any, 0, len(shas))
	for _, sha := range shas {
		if cm, err := c.rs.repo.commit(c.ctx, sha); err == nil {
			vals = append(vals, bbCommitJSON(c.rv, cm))
		}
	}
	b.page(c, vals, 10)
}

// prDiffstat lists the PR's changes (merge preview against the destination); files that
// conflict have status "merge conflict", as Bitbucket reports them.
func (b *Bitbucket) prDiffstat(c *bbCall) {
	_, base, head, ok := b.prHeads(c)
	if !ok {
		return
	}
	tree, conflicts, err := c.rs.repo.mergeCommits(c.ctx, base, head)
	if err != nil {
		bbError(c.w, 500, err.Error())
		return
	}
	b.diffstatFor(c, base, tree, conflicts)
}

func (b *Bitbucket) prDiff(c *bbCall) {
	_, base, head, ok := b.prHeads(c)
	if !ok {
		return
	}
	mb, _ := c.rs.repo.mergeBase(c.ctx, base, head)
	b.writePatch(c, mb, head)
}

// --- webhooks ---------------------------------------------------------------------------------

// BitbucketWebhookRequest builds a webhook request as Bitbucket Cloud sends it: X-Event-Key
// (pullrequest:created/updated/fulfilled/rejected, repo:push), X-Request-UUID, X-Hook-UUID and,
// with a secret, X-Hub-Signature: sha256=<hex HMAC of the body>.
func BitbucketWebhookRequest(ctx context.Context, url, secret string, ev WebhookEvent) (*http.Request, error) {
	var key string
	var payload map[string]any
	switch e := ev.(type) {
	case PREvent:
		v := e.view()
		key = "pullrequest:updated"
		switch {
		case e.Action == "opened":
			key = "pullrequest:created"
		case e.Action == "closed" && e.PR.State == PRMerged:
			key = "pullrequest:fulfilled"
		case e.Action == "closed":
			key = "pullrequest:rejected"
		}
		payload = map[string]any{"actor": bbUserJSON(v.API, senderOr(e.Sender, e.PR.Author)), "repository": bbRepoJSON(v),
			"pullrequest": bbPRJSON(v, e.PR)}
	case PushEvent:
		key = "repo:push"
		payload = bbPushJSON(e)
	default:
		return nil, fmt.Errorf("%w: webhook event %T", ErrInvalid, ev)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	hdr := map[string]string{"X-Event-Key": key, "X-Request-UUID": uuid4(), "X-Hook-UUID": uuid4(),
		"X-Attempt-Number": "1", "User-Agent": "Bitbucket-Webhooks/2.0"}
	if secret != "" {
		hdr["X-Hub-Signature"] = "sha256=" + sha256Sig(secret, body)
	}
	return newHookRequest(ctx, url, body, hdr)
}

func bbPushJSON(e PushEvent) map[string]any {
	v := e.view()
	branch := strings.TrimPrefix(e.Ref, "refs/heads/")
	state := func(sha string) any {
		if sha == "" || sha == zeroOID {
			return nil
		}
		return map[string]any{"type": "branch", "name": branch,
			"target": map[string]any{"type": "commit", "hash": sha,
				"links": bbLinks("self", v.API+"/2.0/repositories/"+v.full()+"/commit/"+sha)},
			"links": bbLinks("self", v.API+"/2.0/repositories/"+v.full()+"/refs/branches/"+branch)}
	}
	// Bitbucket lists the newest 5 commits, newest first, with truncated when there were more.
	commits := make([]map[string]any, 0, min(len(e.Commits), 5))
	for i := len(e.Commits) - 1; i >= 0 && len(commits) < 5; i-- {
		commits = append(commits, bbCommitJSON(v, e.Commits[i].Commit))
	}
	truncated := max(e.TotalCommits, len(e.Commits)) > len(commits)
	before, after := e.ids()
	change := map[string]any{"new": state(e.After), "old": state(e.Before), "created": before == zeroOID,
		"closed": after == zeroOID, "forced": false, "truncated": truncated, "commits": commits,
		"links": bbLinks("html", v.Web+"/"+v.full()+"/branches/compare/"+e.After+".."+e.Before)}
	return map[string]any{"actor": bbUserJSON(v.API, senderOr(e.Pusher, "")), "repository": bbRepoJSON(v),
		"push": map[string]any{"changes": []any{change}}}
}
