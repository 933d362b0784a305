package argocdtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// When the ApplicationSet controller re-reads git, as in Argo CD v3.2.11: a git generator is
// requeued every 180s (its requeueAfterSeconds default), and in between only when the
// ApplicationSet object changes — its spec, labels, or the
// argocd.argoproj.io/application-set-refresh annotation being added (by a client through
// POST /api/v1/applicationsets?upsert=true, or by the controller's own push webhook). The
// controller removes the annotation at the end of the generation it caused. The application
// controller's periodic reconciliation (WithReconcileInterval) does not regenerate
// ApplicationSets.

// AppSetRefreshAnnotation makes the ApplicationSet controller regenerate a set now.
const AppSetRefreshAnnotation = "argocd.argoproj.io/application-set-refresh"

// DefaultAppSetPoll is how often the ApplicationSet controller re-reads git on its own.
const DefaultAppSetPoll = 180 * time.Second

// WithAppSetPollInterval sets how often the ApplicationSet controller re-reads git on its own
// (default DefaultAppSetPoll; negative: never, only on changes, refreshes and Reconcile).
func WithAppSetPollInterval(d time.Duration) Option {
	return func(c *config) { c.appsetPoll = d }
}

// WithWebhookSecret makes the ApplicationSet webhook (AppSetWebhookURL) require GitHub's
// X-Hub-Signature-256 made with secret, like Argo CD's webhook.github.secret.
func WithWebhookSecret(secret string) Option {
	return func(c *config) { c.webhookSecret = secret }
}

// pollAppSets regenerates every appset, as the ApplicationSet controller's
// requeue after its poll interval does.
func (s *Server) pollAppSets() {
	s.mu.Lock()
	keys := sortedKeys(s.appsets)
	s.mu.Unlock()
	for _, k := range keys {
		s.regenerate(k)
	}
}

// regenerate is one controller pass over one ApplicationSet: generate, apply to the owned
// Applications, reconcile those it created or changed, then drop the refresh annotation.
func (s *Server) regenerate(key string) {
	rc := newRevCache()
	for _, k := range s.reconcileAppSet(s.ctx, key, rc) {
		s.reconcileApp(s.ctx, k, rc)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ast := s.appsets[key]; ast != nil && !ast.genFailed {
		// A failed generation returns before the annotation is removed (v3.2.11), so it
		// stays until a later generation succeeds.
		if _, ok := ast.as.Metadata.Annotations[AppSetRefreshAnnotation]; ok {
			delete(ast.as.Metadata.Annotations, AppSetRefreshAnnotation)
			s.bumpAppSet(ast)
		}
	}
}

// queueRegenerate has the controller regenerate key shortly (it reacts to the object's watch
// event, not inside the API call). Callers hold s.mu.
func (s *Server) queueRegenerate(key string) {
	s.goBackground(func() {
		if s.sleep(s.step) {
			s.regenerate(key)
		}
	})
}

// AppSetRefreshes counts the generations caused by a refresh annotation so far.
func (s *Server) AppSetRefreshes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appsetRefreshes
}

// handleCreateAppSet serves POST /api/v1/applicationsets like v3.2.11's server: create; an
// identical existing set is returned as is; a different one is refused unless ?upsert=true,
// which replaces the spec and finalizers and merges labels and annotations. There is no
// update or patch call.
func (s *Server) handleCreateAppSet(w http.ResponseWriter, r *http.Request, _ []string) {
	var as ApplicationSet
	flags, ok := readCreate(w, r, &as, "upsert", "dryRun")
	if !ok {
		return
	}
	upsert, dryRun := flags[0], flags[1]
	project := as.Spec.Template.Spec.Project
	if strings.Contains(project, "{{") {
		writeAPIError(w, errf(codeUnknown, "error validating ApplicationSets: the Argo CD API does not currently support creating ApplicationSets with templated `project` fields"))
		return
	}
	ns := firstNonEmpty(as.Metadata.Namespace, defaultNamespace)
	as.Metadata.Namespace = ns
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.namespaces[ns] {
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", ns))
		return
	}
	if !s.projects[project] {
		writeAPIError(w, errf(codeInvalidArgument, "error checking create permissions for ApplicationSets %s : ApplicationSet references project %s which does not exist", as.Metadata.Name, project))
		return
	}
	if as.Metadata.Name == "" {
		writeAPIError(w, errf(codeUnknown, "error creating ApplicationSet: ApplicationSet.argoproj.io \"\" is invalid: metadata.name: Required value: name or generateName is required"))
		return
	}
	if dryRun != nil && *dryRun {
		reply(w, r, as)
		return
	}
	key := ns + "/" + as.Metadata.Name
	ast := s.appsets[key]
	if ast == nil {
		s.seq++
		as.Metadata.UID = fmt.Sprintf("00000000-0000-4000-9000-%012d", s.seq)
		as.Metadata.CreationTimestamp = NewTime(s.now())
		as.Metadata.Generation = 1
		as.Metadata.ResourceVersion = ""
		as.Status = ApplicationSetStatus{}
		ast = &appsetState{key: key, as: as}
		s.appsets[key] = ast
		s.bumpAppSet(ast)
		s.queueRegenerate(key)
		reply(w, r, s.appsetView(ast))
		return
	}
	cur := &ast.as
	if jsonEqual(cur.Spec, as.Spec) && jsonEqual(cur.Metadata.Labels, as.Metadata.Labels) &&
		jsonEqual(cur.Metadata.Annotations, as.Metadata.Annotations) && jsonEqual(cur.Metadata.Finalizers, as.Metadata.Finalizers) {
		reply(w, r, s.appsetView(ast))
		return
	}
	if upsert == nil || !*upsert {
		writeAPIError(w, errf(codeInvalidArgument, "existing ApplicationSet spec is different, use upsert flag to force update"))
		return
	}
	_, hadRefresh := cur.Metadata.Annotations[AppSetRefreshAnnotation]
	specChanged := !jsonEqual(cur.Spec, as.Spec)
	trigger := specChanged || !jsonEqual(cur.Metadata.Labels, mergeStrings(cur.Metadata.Labels, as.Metadata.Labels)) ||
		!jsonEqual(cur.Metadata.Finalizers, as.Metadata.Finalizers)
	cur.Spec = as.Spec
	cur.Metadata.Labels = mergeStrings(cur.Metadata.Labels, as.Metadata.Labels)
	cur.Metadata.Annotations = mergeStrings(cur.Metadata.Annotations, as.Metadata.Annotations)
	cur.Metadata.Finalizers = as.Metadata.Finalizers
	if specChanged {
		cur.Metadata.Generation++
	}
	_, hasRefresh := cur.Metadata.Annotations[AppSetRefreshAnnotation]
	if hasRefresh && !hadRefresh {
		trigger = true
		s.appsetRefreshes++
	}
	s.bumpAppSet(ast)
	if trigger {
		s.queueRegenerate(key)
	}
	reply(w, r, s.appsetView(ast))
}

func mergeStrings(base, over map[string]string) map[string]string {
	if len(base) == 0 && len(over) == 0 {
		return base
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// ---- the ApplicationSet controller's webhook ----

// AppSetWebhookURL is the ApplicationSet controller's webhook (its own listener, like the
// controller's --webhook-addr; argocd-server's /api/webhook refreshes Applications only).
// It takes GitHub push events: every ApplicationSet with a git generator on the pushed repo
// and branch gets the refresh annotation, then regenerates.
func (s *Server) AppSetWebhookURL() string {
	s.hookOnce.Do(func() {
		s.hook = httptest.NewServer(http.HandlerFunc(s.serveAppSetWebhook))
	})
	return s.hook.URL + "/api/webhook"
}

// pushPayload is the part of GitHub's push event the controller reads.
type pushPayload struct {
	Ref        string `json:"ref"`
	Repository struct {
		HTMLURL       string `json:"html_url"`
		DefaultBranch string `json:"default_branch"`
	} `json:"repository"`
}

func (s *Server) serveAppSetWebhook(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/webhook" {
		http.NotFound(w, r)
		return
	}
	fail := func(status int, msg string) {
		if r.Method != http.MethodPost {
			status = http.StatusMethodNotAllowed
		}
		http.Error(w, "Webhook processing failed: "+msg, status)
	}
	if r.Header.Get("X-GitHub-Event") == "" {
		http.Error(w, "Unknown webhook event", http.StatusBadRequest)
		return
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "invalid HTTP Method")
		return
	}
	if ev := r.Header.Get("X-GitHub-Event"); ev != "push" && ev != "pull_request" && ev != "ping" {
		fail(http.StatusBadRequest, "event not defined to be parsed")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 25<<20))
	if err != nil || len(body) == 0 {
		fail(http.StatusBadRequest, "error parsing payload")
		return
	}
	if s.webhookSecret != "" {
		sig := strings.TrimPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=")
		if sig == "" {
			fail(http.StatusBadRequest, "missing X-Hub-Signature-256 Header")
			return
		}
		mac := hmac.New(sha256.New, []byte(s.webhookSecret))
		mac.Write(body)
		if !hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil)))) {
			fail(http.StatusBadRequest, "HMAC verification failed")
			return
		}
	}
	if r.Header.Get("X-GitHub-Event") != "push" {
		w.WriteHeader(http.StatusOK)
		return
	}
	var p pushPayload
	if err := json.Unmarshal(body, &p); err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	// The real handler queues the payload and answers at once; the annotation comes later.
	w.WriteHeader(http.StatusOK)
	rev := p.Ref[strings.LastIndexByte(p.Ref, '/')+1:]
	touchedHead := p.Repository.DefaultBranch == rev
	re := webURLRegexp(p.Repository.HTMLURL)
	if re == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhookEvents++
	for _, k := range sortedKeys(s.appsets) {
		ast := s.appsets[k]
		hit := false
		for _, g := range ast.as.Spec.Generators {
			if g.Git == nil || !re.MatchString(g.Git.RepoURL) {
				continue
			}
			want := g.Git.Revision[strings.LastIndexByte(g.Git.Revision, '/')+1:]
			if want == "" || want == "HEAD" {
				hit = hit || touchedHead
			} else {
				hit = hit || want == rev || g.Git.Revision == rev
			}
		}
		if !hit {
			continue
		}
		if ast.as.Metadata.Annotations == nil {
			ast.as.Metadata.Annotations = map[string]string{}
		}
		if _, ok := ast.as.Metadata.Annotations[AppSetRefreshAnnotation]; !ok {
			ast.as.Metadata.Annotations[AppSetRefreshAnnotation] = "true"
			s.appsetRefreshes++
			s.bumpAppSet(ast)
			s.queueRegenerate(k)
		}
	}
}

// WebhookEvents counts the push events the ApplicationSet webhook accepted.
func (s *Server) WebhookEvents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhookEvents
}

// webURLRegexp is Argo CD's GetWebURLRegex: any scheme or user, the host, an optional port,
// ":" or "/", the path, an optional ".git".
func webURLRegexp(webURL string) *regexp.Regexp {
	u, err := url.Parse(webURL)
	if err != nil {
		return nil
	}
	re, err := regexp.Compile(fmt.Sprintf(`(?i)^((https?|ssh)://)?([\w\-\.]+@)?((alt)?ssh\.)?%s(:\d+)?[:/]%s(\.git)?$`,
		regexp.QuoteMeta(u.Hostname()), regexp.QuoteMeta(strings.TrimPrefix(u.EscapedPath(), "/"))))
	if err != nil {
		return nil
	}
	return re
}
