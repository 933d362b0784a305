package scmtest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WebhookEvent is an event a webhook request can carry: a PREvent or a PushEvent.
type WebhookEvent interface{ webhookEvent() }

// PREvent describes a pull/merge request event. Action is opened, synchronize, closed (merged
// when PR.State is PRMerged), reopened, labeled, unlabeled, edited, ready_for_review or
// converted_to_draft (GitHub's names); it maps to each forge's own event names (GitLab: an
// update whose changes say what changed).
type PREvent struct {
	Action        string
	Owner, Name   string
	RepoID        int64
	PR            PullRequest
	Before        string // previous head SHA (synchronize)
	Label         string // the label added (labeled) or removed (unlabeled)
	PreviousTitle string // the title before an edit (edited)
	Sender        string
	BaseURL       string // the forge's URL (API links); default https://scm.example.test
	WebBase       string // html links; default BaseURL
	CloneURL      string
	DefaultBranch string
}

// PushCommit is one commit of a push with the paths it touched.
type PushCommit struct {
	Commit
	Added, Removed, Modified []string
}

// PushEvent describes a push to a branch. Commits are oldest first; Before or After is
// "" (or all zeros) when the branch was created or deleted.
type PushEvent struct {
	Owner, Name   string
	RepoID        int64
	Ref           string // refs/heads/<branch>
	Before, After string
	Commits       []PushCommit
	// TotalCommits is how many commits the push added when Commits lists only the newest
	// (0: len(Commits)); GitLab's total_commits_count.
	TotalCommits  int
	Pusher        string
	BaseURL       string
	WebBase       string
	CloneURL      string
	DefaultBranch string
}

func (PREvent) webhookEvent()   {}
func (PushEvent) webhookEvent() {}

// repoView is what payload and API builders need to describe a repo.
type repoView struct {
	Owner, Name   string
	ID            int64
	API, Web      string // scheme://host without API prefix
	Clone         string
	DefaultBranch string
	Created       time.Time
}

func (v repoView) full() string { return v.Owner + "/" + v.Name }

func viewOf(owner, name string, id int64, base, web, clone, def string) repoView {
	if base == "" {
		base = "https://scm.example.test"
	}
	if web == "" {
		web = base
	}
	if def == "" {
		def = "main"
	}
	if id == 0 {
		id = stableID(owner + "/" + name)
	}
	if clone == "" {
		clone = web + "/" + owner + "/" + name + ".git"
	}
	return repoView{Owner: owner, Name: name, ID: id, API: strings.TrimRight(base, "/"), Web: strings.TrimRight(web, "/"), Clone: clone, DefaultBranch: def}
}

func (e PREvent) view() repoView {
	return viewOf(e.Owner, e.Name, e.RepoID, e.BaseURL, e.WebBase, e.CloneURL, e.DefaultBranch)
}

// ids are the push's before and after commits as the forges send them: the zero id for a
// branch that did not exist (created) or no longer does (deleted).
func (e PushEvent) ids() (before, after string) {
	before, after = e.Before, e.After
	if before == "" {
		before = zeroOID
	}
	if after == "" {
		after = zeroOID
	}
	return before, after
}

func (e PushEvent) view() repoView {
	return viewOf(e.Owner, e.Name, e.RepoID, e.BaseURL, e.WebBase, e.CloneURL, e.DefaultBranch)
}

func sha256Sig(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	_, _ = m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func sha1Sig(secret string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	_, _ = m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func newHookRequest(ctx context.Context, url string, body []byte, headers map[string]string) (*http.Request, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("scmtest: webhook request to %q: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// Delivery is one webhook the fake sent.
type Delivery struct {
	ID     string // delivery id header value (GitLab: Idempotency-Key, stable across retries)
	Event  string // X-GitHub-Event / X-Gitlab-Event / X-Event-Key
	URL    string
	Status int   // receiver's status code; 0 when the request failed
	Err    error // transport error
	Body   []byte
	Time   time.Time
}

// hookEvent is a state change the fake turns into webhooks.
type hookEvent struct {
	kind   string // pr, push
	action string
	label  string
	before string
	rs     *repoState
	pr     PullRequest
	update RefUpdate
	sender string
	sync   []int // open PRs whose head this push moved (synchronize events)
}

type hookTarget struct{ url, secret string }

// hookSender delivers webhooks in order from one goroutine, after the API call that caused them.
type hookSender struct {
	f       *Forge
	client  *http.Client
	build   func(ctx context.Context, url, secret string, ev WebhookEvent) (*http.Request, error)
	mu      sync.Mutex
	cond    *sync.Cond
	targets []hookTarget
	queue   []hookEvent
	busy    bool
	started bool
	closed  bool
	done    []Delivery
}

func newHookSender(f *Forge) *hookSender {
	h := &hookSender{f: f, client: &http.Client{Timeout: 10 * time.Second}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *hookSender) register(url, secret string) {
	h.mu.Lock()
	h.targets = append(h.targets, hookTarget{url: url, secret: secret})
	h.mu.Unlock()
}

func (h *hookSender) active() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.targets) > 0 && !h.closed
}

func (h *hookSender) enqueue(ev hookEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.targets) == 0 || h.closed {
		return
	}
	h.queue = append(h.queue, ev)
	if !h.started {
		h.started = true
		go h.run()
	}
	h.cond.Broadcast()
}

func (h *hookSender) close() {
	h.mu.Lock()
	h.closed = true
	h.cond.Broadcast()
	h.mu.Unlock()
}

func (h *hookSender) run() {
	for {
		h.mu.Lock()
		for len(h.queue) == 0 && !h.closed {
			h.cond.Wait()
		}
		if h.closed {
			h.mu.Unlock()
			return
		}
		ev := h.queue[0]
		h.queue = h.queue[1:]
		h.busy = true
		targets := append([]hookTarget(nil), h.targets...)
		h.mu.Unlock()

		for _, we := range h.f.webhookEvents(ev) {
			for _, t := range targets {
				h.deliver(t, we)
			}
		}
		h.mu.Lock()
		h.busy = false
		h.cond.Broadcast()
		h.mu.Unlock()
	}
}

func (h *hookSender) deliver(t hookTarget, ev WebhookEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := Delivery{URL: t.url, Time: time.Now()}
	req, err := h.build(ctx, t.url, t.secret, ev)
	if err != nil {
		d.Err = err
	} else {
		d.Event = firstHeader(req.Header, "X-GitHub-Event", "X-Gitlab-Event", "X-Event-Key")
		d.ID = firstHeader(req.Header, "X-GitHub-Delivery", "Idempotency-Key", "X-Gitlab-Event-UUID", "X-Request-UUID")
		if req.GetBody != nil {
			if rc, gerr := req.GetBody(); gerr == nil {
				d.Body, _ = io.ReadAll(rc)
			}
		}
		resp, err := h.client.Do(req)
		if err != nil {
			d.Err = err
		} else {
			d.Status = resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	h.mu.Lock()
	h.done = append(h.done, d)
	h.mu.Unlock()
}

func firstHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// RegisterWebhook makes the fake deliver signed webhooks for its events to url (a GitLab
// secret is sent as X-Gitlab-Token).
func (f *Forge) RegisterWebhook(url, secret string) { f.hooks.register(url, secret) }

// Deliveries returns the webhooks sent so far.
func (f *Forge) Deliveries() []Delivery {
	f.hooks.mu.Lock()
	defer f.hooks.mu.Unlock()
	return append([]Delivery(nil), f.hooks.done...)
}

// WaitWebhooks blocks until every queued webhook has been delivered, or ctx ends.
func (f *Forge) WaitWebhooks(ctx context.Context) error {
	h := f.hooks
	stop := context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.cond.Broadcast()
		h.mu.Unlock()
	})
	defer stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for (len(h.queue) > 0 || h.busy) && !h.closed {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.cond.Wait()
	}
	return nil
}

// webhookEvents turns a state change into forge-neutral events (a push may also synchronize PRs).
func (f *Forge) webhookEvents(ev hookEvent) []WebhookEvent {
	ctx := context.Background()
	rs := ev.rs
	def := rs.defBranch
	base, web, clone := f.URL(), f.web(), f.git.CloneURL(rs.owner, rs.name)
	switch ev.kind {
	case "pr":
		return []WebhookEvent{PREvent{Action: ev.action, Owner: rs.owner, Name: rs.name, RepoID: rs.id, PR: ev.pr,
			Before: ev.before, Label: ev.label, Sender: ev.sender, BaseURL: base, WebBase: web, CloneURL: clone, DefaultBranch: def}}
	case "push":
		u := ev.update
		pe := PushEvent{Owner: rs.owner, Name: rs.name, RepoID: rs.id, Ref: u.Ref, Before: u.Before, After: u.After,
			Pusher: ev.sender, BaseURL: base, WebBase: web, CloneURL: clone, DefaultBranch: def}
		if u.After != "" {
			// GitHub lists up to 2,048 commits; each forge's payload cuts this list to its own
			// limit (GitLab 20, Bitbucket 5) and says how many there were.
			args := []string{"--reverse", "--max-count=2048", u.After}
			if u.Before != "" {
				args = append(args, "^"+u.Before)
			} else {
				// A new branch carries only the commits no other branch has.
				args = append(args, "--not", "--exclude="+strings.TrimPrefix(u.Ref, "refs/heads/"), "--branches")
			}
			shas, _ := rs.repo.revList(ctx, args...)
			if all, err := rs.repo.revList(ctx, append([]string{"--count"}, args[2:]...)...); err == nil && len(all) == 1 {
				pe.TotalCommits, _ = strconv.Atoi(all[0])
			}
			for _, sha := range shas {
				c, err := rs.repo.commit(ctx, sha)
				if err != nil {
					continue
				}
				pc := PushCommit{Commit: c}
				parent := ""
				if len(c.Parents) > 0 {
					parent = c.Parents[0]
				}
				changes, _ := rs.repo.diff(ctx, parent, sha, false)
				for _, ch := range changes {
					switch ch.Status {
					case "added":
						pc.Added = append(pc.Added, ch.Path)
					case "removed":
						pc.Removed = append(pc.Removed, ch.Path)
					default:
						pc.Modified = append(pc.Modified, ch.Path)
					}
				}
				pe.Commits = append(pe.Commits, pc)
			}
		}
		out := []WebhookEvent{pe}
		rs.mu.Lock()
		for _, n := range ev.sync {
			if pr := rs.pr(n); pr != nil {
				snap := pr.snapshot()
				snap.HeadSHA = u.After
				out = append(out, PREvent{Action: "synchronize", Owner: rs.owner, Name: rs.name, RepoID: rs.id, PR: snap,
					Before: u.Before, Sender: ev.sender, BaseURL: base, WebBase: web, CloneURL: clone, DefaultBranch: def})
			}
		}
		rs.mu.Unlock()
		return out
	}
	return nil
}
