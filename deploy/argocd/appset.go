package argocd

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// How the agent asks Argo CD to re-read git for an ApplicationSet. Argo CD's ApplicationSet
// controller otherwise re-reads git only every 3 minutes (a git generator's requeueAfter), so
// an environment merged a moment ago would get its app minutes later.
const (
	// RefreshAnnotate sets the argocd.argoproj.io/application-set-refresh annotation through
	// Argo CD's API (POST /api/v1/applicationsets?upsert=true with the ApplicationSet just
	// read; v3.2 has no update or patch call). The controller re-reads git bypassing the
	// repo-server's revision cache and removes the annotation when done, so the agent can
	// tell when the apps are regenerated. Needs applicationsets create and update permission.
	// Caveat: a spec change someone makes between the agent's read and its write (a few
	// milliseconds) is overwritten; use RefreshWebhook where that matters.
	RefreshAnnotate = "annotate"
	// RefreshWebhook sends a GitHub-style push event to the ApplicationSet controller's
	// webhook (its --webhook-addr, path /api/webhook), signed with X-Hub-Signature-256 when a
	// secret is set (Argo CD's webhook.github.secret). The controller then sets the annotation
	// itself. The agent cannot tell when the apps are regenerated.
	RefreshWebhook = "webhook"
	// RefreshOff never asks; apps appear at the controller's next poll.
	RefreshOff = "off"
)

// AppSetRefreshOptions configure ApplicationSet refreshes (Options.AppSetRefresh).
type AppSetRefreshOptions struct {
	// Mode is RefreshAnnotate (default), RefreshWebhook or RefreshOff.
	Mode string
	// WebhookURL is the ApplicationSet controller's webhook, e.g.
	// http://argocd-applicationset-controller:7000/api/webhook (RefreshWebhook only).
	WebhookURL string
	// WebhookSecret signs the push events (Argo CD's webhook.github.secret); "" sends them
	// unsigned. Never logged.
	WebhookSecret string
	// Wait bounds how long a refresh request waits for the controller to finish (default 20s).
	Wait time.Duration
}

func (o *AppSetRefreshOptions) check() error {
	switch o.Mode {
	case "":
		o.Mode = RefreshAnnotate
	case RefreshAnnotate, RefreshOff:
	case RefreshWebhook:
		u, err := url.Parse(o.WebhookURL)
		if o.WebhookURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("argocd agent: appset refresh mode webhook needs the ApplicationSet controller's webhook URL (--appset-webhook-url http(s)://host:7000/api/webhook), got %q", agent.RedactURL(o.WebhookURL))
		}
		if u.User != nil {
			return fmt.Errorf("argocd agent: --appset-webhook-url %s must not carry credentials", agent.RedactURL(o.WebhookURL))
		}
	default:
		return fmt.Errorf("argocd agent: appset refresh mode %q: want annotate, webhook or off", o.Mode)
	}
	if o.Wait <= 0 {
		o.Wait = 20 * time.Second
	}
	return nil
}

// RefreshAnnotation is the annotation that makes Argo CD's ApplicationSet controller
// regenerate an ApplicationSet now; the controller removes it when done.
const RefreshAnnotation = "argocd.argoproj.io/application-set-refresh"

// RefreshAppSets implements agent.AppSetRefresher.
func (a *Agent) RefreshAppSets(ctx context.Context, req agent.RefreshRequest) (*agent.RefreshReply, error) {
	a.served.Add(1)
	o := a.o.AppSetRefresh
	if o.Mode == RefreshOff {
		return nil, agent.Errorf(agent.CodeUnsupported, "ApplicationSet refresh is off on this agent (--appset-refresh off)")
	}
	sets, err := a.argo.ListAppSets(ctx)
	if err != nil {
		return nil, err
	}
	var picked []AppSet
	for _, s := range sets {
		if s.selected(req, a.o.Namespace) {
			picked = append(picked, s)
		}
	}
	if req.ApplicationSet != "" && len(picked) == 0 {
		return nil, &agent.Error{Code: agent.CodeNotFound, Message: fmt.Sprintf("ApplicationSet %s not found (or it does not read repo %q)", req.ApplicationSet, req.RepoURL)}
	}
	rep := &agent.RefreshReply{Mode: o.Mode}
	for _, s := range picked {
		rep.Refreshed = append(rep.Refreshed, s.ref())
	}
	if len(picked) == 0 {
		rep.Done = true
		return rep, nil
	}
	switch o.Mode {
	case RefreshWebhook:
		if err := a.pushEvents(ctx, picked, req.Branch); err != nil {
			return nil, err
		}
	default:
		for _, s := range picked {
			if err := a.argo.AnnotateAppSet(ctx, s, RefreshAnnotation, "true"); err != nil {
				return nil, err
			}
		}
		if req.Wait {
			rep.Done, rep.Unavailable = a.waitRefreshed(ctx, picked, o.Wait)
		}
	}
	a.o.Log.Info("asked Argo CD to refresh ApplicationSets", "mode", o.Mode, "appsets", strings.Join(rep.Refreshed, ","),
		"repo", req.RepoURL, "branch", req.Branch, "done", rep.Done, "unavailable", rep.Unavailable)
	return rep, nil
}

// unavailableGrace is how long after asking for a refresh an ApplicationSet's "cannot work"
// error condition is believed: a condition left from an earlier failure is replaced once the
// controller has tried again, which it does at once on the annotation.
const unavailableGrace = 2 * time.Second

// waitRefreshed polls until the controller removed the refresh annotation from every set
// (true), until wait passed, or — after unavailableGrace — until a set still waiting reports
// that Argo CD cannot regenerate it right now (its repo-server is down: a failed generation
// keeps the annotation, so waiting longer only burns the caller's time); then it returns the
// set's error.
func (a *Agent) waitRefreshed(ctx context.Context, sets []AppSet, wait time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	pending := append([]AppSet(nil), sets...)
	for delay := 50 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		var still []AppSet
		for _, s := range pending {
			cur, err := a.argo.GetAppSet(ctx, s.Metadata.Name, s.Metadata.Namespace)
			if err != nil || cur.Metadata.Annotations[RefreshAnnotation] != "" {
				if err == nil && time.Since(start) >= unavailableGrace {
					if why := cur.unavailable(); why != "" {
						return false, "ApplicationSet " + s.ref() + ": " + why
					}
				}
				still = append(still, s)
			}
		}
		if pending = still; len(pending) == 0 {
			return true, ""
		}
		select {
		case <-ctx.Done():
			return false, ""
		case <-time.After(delay):
		}
	}
}

// unavailable is the set's generation error when it says Argo CD cannot work right now.
func (s *AppSet) unavailable() string {
	for _, c := range s.Status.Conditions {
		if c.Type == "ErrorOccurred" && c.Status == "True" && agent.UnavailableText(c.Message) {
			return c.Message
		}
	}
	return ""
}

// pushEvents sends one push event per (repo, revision) the sets' git generators read.
func (a *Agent) pushEvents(ctx context.Context, sets []AppSet, branch string) error {
	seen := map[string]bool{}
	var targets [][2]string
	for _, s := range sets {
		for _, g := range s.gitGenerators() {
			rev := g.Revision
			if rev == "" || rev == "HEAD" {
				rev = branch
			}
			rev = strings.TrimPrefix(rev, "refs/heads/")
			if rev == "" {
				rev = "main"
			}
			k := g.RepoURL + "\x00" + rev
			if !seen[k] {
				seen[k] = true
				targets = append(targets, [2]string{g.RepoURL, rev})
			}
		}
	}
	for _, t := range targets {
		if err := a.sendPush(ctx, t[0], t[1]); err != nil {
			return err
		}
	}
	return nil
}

// sendPush posts a GitHub push event for branch of repoURL. The event names the branch as the
// default one too, so generators that track HEAD refresh as well.
func (a *Agent) sendPush(ctx context.Context, repoURL, branch string) error {
	o := a.o.AppSetRefresh
	web := strings.TrimSuffix(strings.TrimRight(repoURL, "/"), ".git")
	body, _ := json.Marshal(map[string]any{
		"ref":        "refs/heads/" + branch,
		"repository": map[string]any{"html_url": web, "default_branch": branch, "clone_url": repoURL},
		"commits":    []any{},
	})
	rctx, cancel := context.WithTimeout(ctx, a.argo.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, o.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return &agent.Error{Code: agent.CodeInvalid, Message: "ApplicationSet webhook: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", newDeliveryID())
	if o.WebhookSecret != "" {
		mac := hmac.New(sha256.New, []byte(o.WebhookSecret))
		mac.Write(body)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	where := "ApplicationSet webhook " + agent.RedactURL(o.WebhookURL)
	resp, err := a.argo.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &agent.Error{Code: agent.CodeUnreachable, Message: fmt.Sprintf("%s is unreachable: %v", where, err)}
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		code := agent.CodeRejected
		switch {
		case resp.StatusCode >= 500:
			code = agent.CodeUnreachable
		case strings.Contains(string(msg), "HMAC") || strings.Contains(string(msg), "signature"):
			code = agent.CodeUnauthorized
		}
		return &agent.Error{Code: code, Message: fmt.Sprintf("%s: HTTP %d: %s (check --appset-webhook-secret-file against argocd-secret's webhook.github.secret)",
			where, resp.StatusCode, strings.TrimSpace(string(msg)))}
	}
	return nil
}

func newDeliveryID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- ApplicationSets over Argo CD's API ----

// AppSet is an ApplicationSet as Argo CD returned it: the fields the agent reads, plus the
// whole object, so that writing it back loses nothing this code does not model.
type AppSet struct {
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Generators []json.RawMessage `json:"generators"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
	raw json.RawMessage
}

func (s *AppSet) UnmarshalJSON(b []byte) error {
	type plain AppSet
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = AppSet(p)
	s.raw = append(json.RawMessage(nil), b...)
	return nil
}

func (s *AppSet) ref() string { return s.Metadata.Namespace + "/" + s.Metadata.Name }

type gitGen struct {
	RepoURL  string `json:"repoURL"`
	Revision string `json:"revision"`
}

// gitGenerators are the git generators of the set, including those nested in matrix and merge
// generators.
func (s *AppSet) gitGenerators() []gitGen {
	var out []gitGen
	var walk func(gens []json.RawMessage, depth int)
	walk = func(gens []json.RawMessage, depth int) {
		for _, g := range gens {
			var one struct {
				Git    *gitGen `json:"git"`
				Matrix *struct {
					Generators []json.RawMessage `json:"generators"`
				} `json:"matrix"`
				Merge *struct {
					Generators []json.RawMessage `json:"generators"`
				} `json:"merge"`
			}
			if json.Unmarshal(g, &one) != nil {
				continue
			}
			if one.Git != nil && one.Git.RepoURL != "" {
				out = append(out, *one.Git)
			}
			if depth < 3 && one.Matrix != nil {
				walk(one.Matrix.Generators, depth+1)
			}
			if depth < 3 && one.Merge != nil {
				walk(one.Merge.Generators, depth+1)
			}
		}
	}
	walk(s.Spec.Generators, 0)
	return out
}

// selected reports whether req picks this set.
func (s *AppSet) selected(req agent.RefreshRequest, defaultNS string) bool {
	if n := req.ApplicationSet; n != "" {
		ns, name, ok := strings.Cut(n, "/")
		if !ok {
			ns, name = defaultNS, n
		}
		if name != s.Metadata.Name || (s.Metadata.Namespace != "" && ns != s.Metadata.Namespace) {
			return false
		}
	}
	gens := s.gitGenerators()
	if len(gens) == 0 {
		return false // nothing to re-read from git
	}
	if req.RepoURL == "" {
		return true
	}
	for _, g := range gens {
		if SameRepo(g.RepoURL, req.RepoURL) {
			return true
		}
	}
	return false
}

// SameRepo reports whether two repo references name the same repo: URLs (https, ssh, scp-like
// git@host:path) or a forge path such as "acme/release", compared by path without ".git" —
// a bare path matches a URL that ends with it.
func SameRepo(a, b string) bool {
	pa, ha := repoPath(a)
	pb, hb := repoPath(b)
	if pa == "" || pb == "" {
		return false
	}
	if ha != "" && hb != "" {
		return ha == hb && pa == pb
	}
	return pa == pb || strings.HasSuffix(pa, "/"+pb) || strings.HasSuffix(pb, "/"+pa)
}

// repoPath is a repo reference's lowercased path without ".git", and its host when it has one.
func repoPath(s string) (path, host string) {
	s = strings.TrimSpace(strings.ToLower(s))
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		host, s = u.Hostname(), u.Path
	} else if at := strings.Index(s, "@"); at >= 0 && strings.Contains(s[at:], ":") && !strings.Contains(s, "://") {
		h, p, _ := strings.Cut(s[at+1:], ":")
		host, s = h, p
	}
	s = strings.TrimSuffix(strings.Trim(s, "/"), ".git")
	return s, host
}

type appSetList struct {
	Items []AppSet `json:"items"`
}

// ListAppSets returns every ApplicationSet the token may see.
func (c *Client) ListAppSets(ctx context.Context) ([]AppSet, error) {
	var l appSetList
	if err := c.do(ctx, http.MethodGet, "/api/v1/applicationsets", nil, nil, &l, ""); err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].ref() < l.Items[j].ref() })
	return l.Items, nil
}

// GetAppSet reads one ApplicationSet (namespace "" for Argo CD's own).
func (c *Client) GetAppSet(ctx context.Context, name, namespace string) (*AppSet, error) {
	q := url.Values{}
	if namespace != "" {
		q.Set("appsetNamespace", namespace)
	}
	var s AppSet
	if err := c.do(ctx, http.MethodGet, "/api/v1/applicationsets/"+url.PathEscape(name), q, nil, &s, ""); err != nil {
		return nil, err
	}
	return &s, nil
}

// AnnotateAppSet sets one annotation on an ApplicationSet: Argo CD v3.2's API has no update or
// patch call for ApplicationSets, so this re-posts the set as read with ?upsert=true, which
// merges labels and annotations and keeps the spec.
func (c *Client) AnnotateAppSet(ctx context.Context, s AppSet, key, value string) error {
	var obj map[string]any
	if err := json.Unmarshal(s.raw, &obj); err != nil {
		return &agent.Error{Code: agent.CodeInternal, Message: fmt.Sprintf("ApplicationSet %s: %v", s.ref(), err)}
	}
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	ann[key] = value
	md["annotations"] = ann
	// Server-owned fields are ignored by the upsert; leave them out of the request.
	for _, k := range []string{"resourceVersion", "managedFields", "generation", "uid", "creationTimestamp"} {
		delete(md, k)
	}
	delete(obj, "status")
	q := url.Values{"upsert": {"true"}}
	if err := c.do(ctx, http.MethodPost, "/api/v1/applicationsets", q, obj, nil, ""); err != nil {
		e := agent.AsError(err)
		e.Message = "refresh ApplicationSet " + s.ref() + ": " + e.Message
		return e
	}
	return nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 30 * time.Second
	}
	return c.Timeout
}
