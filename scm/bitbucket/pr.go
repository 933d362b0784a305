package bitbucket

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	bb "github.com/ktrysmt/go-bitbucket"

	"github.com/prflow/prflow/scm"
)

// apiPR is the part of a Bitbucket pull request object the driver and webhooks use.
type apiPR struct {
	ID          int    `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description"`
	State       string `json:"state"`
	Draft       bool   `json:"draft"`
	Source      apiEnd `json:"source"`
	Destination apiEnd `json:"destination"`
	MergeCommit *struct {
		Hash string `json:"hash"`
	} `json:"merge_commit"`
	Links struct {
		HTML struct {
			Href string `json:"href"`
		} `json:"html"`
	} `json:"links"`
}

type apiEnd struct {
	Branch struct {
		Name string `json:"name"`
	} `json:"branch"`
	Commit *struct {
		Hash string `json:"hash"`
	} `json:"commit"`
}

func (e apiEnd) hash() string {
	if e.Commit == nil {
		return ""
	}
	return e.Commit.Hash
}

// convertPR maps a Bitbucket PR; Mergeability stays unknown (see complete). Labels come from
// the description footer that OpenPR writes, because Bitbucket PRs have no labels.
func convertPR(pr *apiPR) *scm.PullRequest {
	body, labels := splitLabels(pr.Description)
	out := &scm.PullRequest{
		Number:       pr.ID,
		Title:        pr.Title,
		Body:         body,
		State:        prState(pr.State),
		Draft:        pr.Draft,
		Head:         pr.Source.Branch.Name,
		Base:         pr.Destination.Branch.Name,
		HeadSHA:      pr.Source.hash(),
		Labels:       labels,
		Mergeability: scm.MergeUnknown,
		URL:          pr.Links.HTML.Href,
	}
	if pr.MergeCommit != nil && out.State == scm.PRMerged {
		out.MergeSHA = pr.MergeCommit.Hash
	}
	return out
}

// prState maps Bitbucket's PR states; DECLINED and SUPERSEDED are both closed without merge.
func prState(state string) scm.PRState {
	switch state {
	case "MERGED":
		return scm.PRMerged
	case "DECLINED", "SUPERSEDED":
		return scm.PRClosed
	default:
		return scm.PROpen
	}
}

// labelFooter starts the description line that carries a PR's labels on Bitbucket, which has
// no PR labels of its own; people see it as a footer under a rule.
const labelFooter = "\n\n---\nprflow-labels: "

func withLabels(body string, labels []string) string {
	if len(labels) == 0 {
		return body
	}
	return body + labelFooter + strings.Join(labels, ", ")
}

// splitLabels separates the label footer from a description.
func splitLabels(desc string) (string, []string) {
	i := strings.LastIndex(desc, labelFooter)
	if i < 0 {
		return desc, nil
	}
	rest := desc[i+len(labelFooter):]
	if strings.Contains(rest, "\n") {
		return desc, nil
	}
	var labels []string
	for _, l := range strings.Split(rest, ",") {
		if l = strings.TrimSpace(l); l != "" {
			labels = append(labels, l)
		}
	}
	return desc[:i], labels
}

// FindPR returns the newest PR (highest id) from head into base in any state. The library's
// List keeps only one state filter, so this request is made directly.
func (d *Driver) FindPR(ctx context.Context, repo scm.Repo, head, base string) (*scm.PullRequest, error) {
	op := fmt.Sprintf("find PR %s into %s", head, base)
	ws, slug, err := splitRepo(repo, scm.CheckHeadBase(head, base))
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	q := url.Values{}
	q.Set("q", fmt.Sprintf(`source.branch.name = %s AND destination.branch.name = %s`, quote(head), quote(base)))
	for _, s := range []string{"OPEN", "MERGED", "DECLINED", "SUPERSEDED"} {
		q.Add("state", s)
	}
	q.Set("pagelen", strconv.Itoa(pageLen))
	path := "/repositories/" + url.PathEscape(ws) + "/" + url.PathEscape(slug) + "/pullrequests"
	newest := 0
	for page := 0; ; page++ {
		_, body, err := d.send(ctx, http.MethodGet, path, q, nil, "")
		if err != nil {
			return nil, d.wrap(op, repo, nil, err)
		}
		var res struct {
			Values []apiPR `json:"values"`
			Next   string  `json:"next"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected response: %w", err))
		}
		for _, pr := range res.Values {
			if pr.Source.Branch.Name == head && pr.Destination.Branch.Name == base {
				newest = max(newest, pr.ID)
			}
		}
		if res.Next == "" || page > 100 {
			break
		}
		next, err := url.Parse(res.Next)
		if err != nil || !strings.HasPrefix(res.Next, d.baseURL) {
			return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected next page link %q", res.Next))
		}
		path, q = strings.TrimPrefix(next.Path, mustPath(d.baseURL)), next.Query()
	}
	return scm.GetNewest(ctx, d, Name, op, repo, "pull request", head, base, newest)
}

func mustPath(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	return u.Path
}

// quote makes a BBQL string literal.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// OpenPR opens a PR. Bitbucket has no PR labels, so NewPR.Labels are kept in a footer line of
// the description ("prflow-labels: a, b") that GetPR, FindPR and webhooks read back.
// Reviewers must be Bitbucket account UUIDs ("{…}"). An open PR that already exists for the
// same branches is adopted instead of failing.
func (d *Driver) OpenPR(ctx context.Context, repo scm.Repo, in scm.NewPR) (*scm.PullRequest, error) {
	op := fmt.Sprintf("open PR %s into %s", in.Head, in.Base)
	ws, slug, err := splitRepo(repo, in.Check())
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	for _, r := range in.Reviewers {
		if !strings.HasPrefix(r, "{") || !strings.HasSuffix(r, "}") {
			return nil, d.wrap(op, repo, nil, fmt.Errorf("reviewer %q: Bitbucket reviewers must be account UUIDs like {d301aafa-…}", r))
		}
	}
	for _, l := range in.Labels {
		if strings.ContainsAny(l, ",\n") || strings.TrimSpace(l) != l || l == "" {
			return nil, d.wrap(op, repo, nil, fmt.Errorf("label %q: Bitbucket labels are kept in the description and must not be empty or contain commas, newlines or edge spaces", l))
		}
	}
	cl, err := d.call(ctx, false)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	v, err := cl.c.Repositories.PullRequests.Create(&bb.PullRequestsOptions{
		Owner: ws, RepoSlug: slug, Title: in.Title, Description: withLabels(in.Body, in.Labels),
		SourceBranch: in.Head, DestinationBranch: in.Base, Draft: in.Draft, Reviewers: in.Reviewers,
	})
	if err != nil {
		werr := d.wrap(op, repo, cl, err)
		var se *scm.Error
		if errors.As(werr, &se) && (se.Status == http.StatusBadRequest || se.Status == http.StatusConflict) &&
			strings.Contains(strings.ToLower(se.Err.Error()), "already") {
			if existing, ferr := d.FindPR(ctx, repo, in.Head, in.Base); ferr == nil && existing.State == scm.PROpen {
				return existing, nil
			}
		}
		return nil, werr
	}
	var pr apiPR
	if err := decode(v, &pr); err != nil || pr.ID == 0 {
		return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected create response: %v", err))
	}
	d.log.Info("bitbucket PR opened", "repo", string(repo), "id", pr.ID, "head", in.Head, "base", in.Base)
	// A PR just opened: its mergeability is left unknown (GetPR works it out) rather than
	// paying for a merge preview nobody asked for.
	return d.expand(ctx, repo, convertPR(&pr))
}

// complete converts a PR, expands Bitbucket's 12-character hashes to full SHAs and, for an open
// PR, works out mergeability from the diffstat merge preview (Bitbucket has no such field).
func (d *Driver) complete(ctx context.Context, repo scm.Repo, pr *apiPR) (*scm.PullRequest, error) {
	out := convertPR(pr)
	if out.State == scm.PROpen {
		files, err := d.conflicts(ctx, repo, pr)
		switch {
		case err != nil:
			return nil, err
		case len(files) > 0:
			out.Mergeability = scm.MergeDirty
		case out.Draft:
			out.Mergeability = scm.MergeBlocked
		default:
			out.Mergeability = scm.MergeClean
		}
	}
	return d.expand(ctx, repo, out)
}

// expand replaces Bitbucket's 12-character hashes in the PR by full SHAs.
func (d *Driver) expand(ctx context.Context, repo scm.Repo, out *scm.PullRequest) (*scm.PullRequest, error) {
	for _, h := range []*string{&out.HeadSHA, &out.MergeSHA} {
		if *h != "" && len(*h) < 40 {
			c, err := d.commit(ctx, repo, *h)
			if err != nil {
				return nil, err
			}
			*h = c.Hash
		}
	}
	return out, nil
}

// sameCommit compares a full SHA with a hash Bitbucket may have shortened to 12 characters.
func sameCommit(full, short string) bool {
	return short != "" && len(short) >= 12 && strings.HasPrefix(full, short)
}

func (d *Driver) getPR(ctx context.Context, repo scm.Repo, number int) (*apiPR, error) {
	op := fmt.Sprintf("get PR #%d", number)
	ws, slug, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	if number <= 0 {
		return nil, d.wrap(op, repo, nil, fmt.Errorf("invalid PR number %d", number))
	}
	cl, err := d.call(ctx, false)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	v, err := cl.c.Repositories.PullRequests.Get(&bb.PullRequestsOptions{Owner: ws, RepoSlug: slug, ID: strconv.Itoa(number)})
	if err != nil {
		return nil, d.wrap(op, repo, cl, err)
	}
	var pr apiPR
	if err := decode(v, &pr); err != nil || pr.ID == 0 {
		return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected pull request response: %v", err))
	}
	return &pr, nil
}

// GetPR reads one PR.
func (d *Driver) GetPR(ctx context.Context, repo scm.Repo, number int) (*scm.PullRequest, error) {
	pr, err := d.getPR(ctx, repo, number)
	if err != nil {
		return nil, err
	}
	return d.complete(ctx, repo, pr)
}

// mergeStrategy maps scm methods onto Bitbucket's merge strategies; rebase is Bitbucket's
// "rebase, fast-forward" (the source commits replayed onto the destination, no merge commit).
func mergeStrategy(m scm.MergeMethod) (bb.PullRequestsMergeStrategy, error) {
	switch m {
	case "", scm.MergeCommit:
		return bb.MergeCommit, nil
	case scm.Squash:
		return bb.Squash, nil
	case scm.Rebase:
		return bb.RebaseFastForward, nil
	}
	return "", fmt.Errorf("unknown merge method %q (want merge, squash or rebase)", m)
}

// MergePR merges the PR. Bitbucket's merge API has no head-SHA guard, so in.SHA is checked
// against the PR right before the merge (ErrConflict when it moved); the window between that
// check and the merge cannot be closed on Bitbucket. Refusals are *scm.NotMergeableError
// (conflicting files from the diffstat merge preview); a 409 (the destination moved during the
// merge) and a 202 (merge still running) are transient. A PR already merged at the expected
// head is returned as success.
func (d *Driver) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	op := fmt.Sprintf("merge PR #%d", number)
	ws, slug, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	strategy, err := mergeStrategy(in.Method)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	// One read for the guard: the PR's short head hash is compared with in.SHA as a prefix.
	raw, err := d.getPR(ctx, repo, number)
	if err != nil {
		return nil, err
	}
	state, head := prState(raw.State), raw.Source.hash()
	switch {
	case state == scm.PRMerged && (in.SHA == "" || sameCommit(in.SHA, head)):
		return d.complete(ctx, repo, raw)
	case in.SHA != "" && !sameCommit(in.SHA, head):
		return nil, &scm.Error{Provider: Name, Op: op, Repo: repo,
			Err: &scm.ConflictError{Msg: fmt.Sprintf("head is %s, not the expected %s", head, in.SHA)}}
	case state == scm.PRClosed:
		return nil, &scm.Error{Provider: Name, Op: op, Repo: repo, Err: &scm.NotMergeableError{Msg: "the pull request is declined"}}
	}
	cl, err := d.call(ctx, false)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	v, err := cl.c.Repositories.PullRequests.Merge(&bb.PullRequestsOptions{
		Owner: ws, RepoSlug: slug, ID: strconv.Itoa(number), MergeStrategy: strategy,
		Message: in.Message, CloseSourceBranch: in.DeleteBranch,
	})
	if err != nil {
		werr := d.wrap(op, repo, cl, err)
		var se *scm.Error
		if !errors.As(werr, &se) {
			return nil, werr
		}
		switch se.Status {
		case http.StatusConflict:
			// The destination moved while Bitbucket merged: asking again merges.
			se.Err = &transientError{msg: se.Err.Error()}
		case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnprocessableEntity, 555:
			if cur, gerr := d.GetPR(ctx, repo, number); gerr == nil && in.Done(cur) {
				return cur, nil
			}
			nm := &scm.NotMergeableError{Msg: se.Err.Error()}
			if raw, gerr := d.getPR(ctx, repo, number); gerr == nil {
				nm.Files, _ = d.conflicts(ctx, repo, raw)
			}
			se.Err = nm
		}
		return nil, se
	}
	// A finished merge answers with the merged PR (200); 202 means Bitbucket still merges
	// (large PRs merge asynchronously) and a later read sees the result.
	var done apiPR
	if derr := decode(v, &done); derr != nil || done.ID != number || prState(done.State) != scm.PRMerged || done.MergeCommit == nil {
		cur, gerr := d.getPR(ctx, repo, number)
		if gerr != nil {
			return nil, gerr
		}
		done = *cur
	}
	if prState(done.State) != scm.PRMerged || done.MergeCommit == nil {
		return nil, &scm.Error{Provider: Name, Op: op, Repo: repo, Status: http.StatusAccepted,
			Err: &transientError{msg: "Bitbucket is still merging the pull request"}}
	}
	headSHA := in.SHA
	if headSHA == "" {
		headSHA = done.Source.hash()
	}
	merged, err := d.expand(ctx, repo, &scm.PullRequest{Number: done.ID, Title: done.Title, State: scm.PRMerged,
		Head: done.Source.Branch.Name, Base: done.Destination.Branch.Name, HeadSHA: headSHA, MergeSHA: done.MergeCommit.Hash,
		URL: done.Links.HTML.Href})
	if err != nil {
		return nil, err
	}
	if in.SHA != "" && !sameCommit(in.SHA, done.Source.hash()) {
		d.log.Warn("bitbucket PR head moved between the SHA check and the merge", "repo", string(repo), "id", number,
			"expected", in.SHA, "merged", done.Source.hash())
	}
	d.log.Info("bitbucket PR merged", "repo", string(repo), "id", number, "strategy", string(strategy), "sha", merged.MergeSHA)
	return merged, nil
}

// ClosePR declines the PR.
func (d *Driver) ClosePR(ctx context.Context, repo scm.Repo, number int) error {
	op := fmt.Sprintf("decline PR #%d", number)
	ws, slug, cl, err := d.callRepo(ctx, repo, false)
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, err = cl.c.Repositories.PullRequests.Decline(&bb.PullRequestsOptions{Owner: ws, RepoSlug: slug, ID: strconv.Itoa(number)})
	return d.wrap(op, repo, cl, err)
}

// Comment adds a comment to the PR.
func (d *Driver) Comment(ctx context.Context, repo scm.Repo, number int, body string) error {
	op := fmt.Sprintf("comment on PR #%d", number)
	ws, slug, cl, err := d.callRepo(ctx, repo, false, scm.CheckComment(body))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	_, err = cl.c.Repositories.PullRequests.AddComment(&bb.PullRequestCommentOptions{
		Owner: ws, RepoSlug: slug, PullRequestID: strconv.Itoa(number), Content: body,
	})
	return d.wrap(op, repo, cl, err)
}

// EditComment replaces the raw content of comment id (ListComments' ID) of PR number.
func (d *Driver) EditComment(ctx context.Context, repo scm.Repo, number int, id, body string) error {
	op := fmt.Sprintf("edit comment %s on PR #%d", id, number)
	cid, idErr := scm.ParseCommentID(id)
	ws, slug, err := splitRepo(repo, idErr, scm.CheckComment(body))
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	data, err := json.Marshal(map[string]any{"content": map[string]string{"raw": body}})
	if err != nil {
		return d.wrap(op, repo, nil, err)
	}
	path := "/repositories/" + url.PathEscape(ws) + "/" + url.PathEscape(slug) + "/pullrequests/" + strconv.Itoa(number) +
		"/comments/" + strconv.FormatInt(cid, 10)
	_, _, err = d.send(ctx, http.MethodPut, path, nil, bytes.NewReader(data), "application/json")
	return d.wrap(op, repo, nil, err)
}

// MaxCommentBytes is Bitbucket's limit on a comment (fewer than 32,768 characters; bytes
// never count fewer).
func (d *Driver) MaxCommentBytes() int { return scm.BitbucketMaxComment }

// ListComments lists a PR's comments, oldest first, deleted ones left out.
func (d *Driver) ListComments(ctx context.Context, repo scm.Repo, number int) ([]scm.PRComment, error) {
	op := fmt.Sprintf("list comments of PR #%d", number)
	ws, slug, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(op, repo, nil, err)
	}
	q := url.Values{}
	q.Set("pagelen", strconv.Itoa(pageLen))
	path := "/repositories/" + url.PathEscape(ws) + "/" + url.PathEscape(slug) + "/pullrequests/" + strconv.Itoa(number) + "/comments"
	var out []scm.PRComment
	for page := 0; ; page++ {
		_, body, err := d.send(ctx, http.MethodGet, path, q, nil, "")
		if err != nil {
			return nil, d.wrap(op, repo, nil, err)
		}
		var res struct {
			Values []struct {
				ID      int64 `json:"id"`
				Deleted bool  `json:"deleted"`
				Content struct {
					Raw string `json:"raw"`
				} `json:"content"`
				User struct {
					Nickname    string `json:"nickname"`
					DisplayName string `json:"display_name"`
				} `json:"user"`
			} `json:"values"`
			Next string `json:"next"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected response: %w", err))
		}
		for _, c := range res.Values {
			if c.Deleted {
				continue
			}
			author := c.User.Nickname
			if author == "" {
				author = c.User.DisplayName
			}
			out = append(out, scm.PRComment{ID: strconv.FormatInt(c.ID, 10), Author: author, Body: c.Content.Raw})
		}
		if res.Next == "" || page > 100 {
			return out, nil
		}
		next, err := url.Parse(res.Next)
		if err != nil || !strings.HasPrefix(res.Next, d.baseURL) {
			return nil, d.wrap(op, repo, nil, fmt.Errorf("unexpected next page link %q", res.Next))
		}
		path, q = strings.TrimPrefix(next.Path, mustPath(d.baseURL)), next.Query()
	}
}

// ChangedFiles lists the paths a PR changes: the diffstat of its source against the merge
// base with its destination ("source..destination", topic diff).
func (d *Driver) ChangedFiles(ctx context.Context, repo scm.Repo, number int) ([]string, error) {
	ws, slug, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(fmt.Sprintf("list files of PR #%d", number), repo, nil, err)
	}
	pr, err := d.getPR(ctx, repo, number)
	if err != nil {
		return nil, err
	}
	src, dst := pr.Source.hash(), pr.Destination.hash()
	if src == "" || dst == "" {
		return nil, d.wrap(fmt.Sprintf("list files of PR #%d", number), repo, nil, errors.New("the pull request has no source or destination commit"))
	}
	return d.diffPaths(ctx, repo, ws, slug, src+".."+dst, topic)
}

// conflicts lists the files Bitbucket reports as "merge conflict" when merging the PR's source
// into its destination (the diffstat merge preview).
func (d *Driver) conflicts(ctx context.Context, repo scm.Repo, pr *apiPR) ([]string, error) {
	ws, slug, err := splitRepo(repo)
	if err != nil {
		return nil, d.wrap(fmt.Sprintf("check PR #%d for conflicts", pr.ID), repo, nil, err)
	}
	src, dst := pr.Source.hash(), pr.Destination.hash()
	if src == "" || dst == "" {
		return nil, nil
	}
	stats, err := d.diffstat(ctx, repo, ws, slug, src+".."+dst, preview)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, ds := range stats {
		if ds.Status == "merge conflict" {
			for _, p := range statPaths(ds) {
				if !containsString(files, p) {
					files = append(files, p)
				}
			}
		}
	}
	sort.Strings(files)
	return files, nil
}
