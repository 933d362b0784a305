package argocdtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// lookupApp is Argo CD's getAppEnforceRBAC for a caller allowed everything:
// a missing app is 403 "permission denied" (the server does not reveal
// whether it exists) unless a project was named, then 404. Callers hold s.mu.
func (s *Server) lookupApp(name, ns, project string) (*appState, *apiError) {
	ns = firstNonEmpty(ns, defaultNamespace)
	notFound := errf(codeNotFound, "applications.argoproj.io %q not found", name)
	st := s.apps[ns+"/"+name]
	if !s.namespaces[ns] || st == nil || st.gone {
		if project != "" {
			return nil, notFound
		}
		return nil, errPermissionDenied
	}
	if project != "" && st.app.Spec.project() != project {
		return nil, notFound
	}
	return st, nil
}

// lockApp takes s.mu and looks up the app a call names (lookupApp); when that
// fails it releases s.mu, writes the error and returns nil.
func (s *Server) lockApp(w http.ResponseWriter, name, ns, project string) *appState {
	s.mu.Lock()
	st, e := s.lookupApp(name, ns, project)
	if e != nil {
		s.mu.Unlock()
		writeAPIError(w, e)
		return nil
	}
	return st
}

// lockReadableApp is lockApp for a call that reads the app's resources: the
// caller's role must also allow applications/get (checked after the lookup,
// as upstream does).
func (s *Server) lockReadableApp(w http.ResponseWriter, name, ns, project string) *appState {
	st := s.lockApp(w, name, ns, project)
	if st != nil && !s.allowedLocked("applications", "get") {
		s.mu.Unlock()
		writeAPIError(w, errPermissionDenied)
		return nil
	}
	return st
}

// readCreate reads a create call: the named boolean query parameters in
// order (nil: absent), then the body into v. The first error is written and
// ok is false.
func readCreate(w http.ResponseWriter, r *http.Request, v any, params ...string) (flags []*bool, ok bool) {
	q := r.URL.Query()
	for _, name := range params {
		b, e := parseBoolParam(q, name)
		if e != nil {
			writeAPIError(w, e)
			return nil, false
		}
		flags = append(flags, b)
	}
	if e := decodeBody(r, v); e != nil {
		writeAPIError(w, e)
		return nil, false
	}
	return flags, true
}

func parseBoolParam(q url.Values, name string) (*bool, *apiError) {
	v, ok := q[name]
	if !ok || len(v) == 0 {
		return nil, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil {
		return nil, errf(codeInvalidArgument, "type mismatch, parameter: %s, error: %v", name, err)
	}
	return &b, nil
}

// replyRaw writes an already marshalled object, honouring ?fields=.
func replyRaw(w http.ResponseWriter, r *http.Request, data []byte) {
	if fields, exclude, ok := fieldsParam(r); ok {
		if fb, err := filterFields(data, fields, exclude); err == nil {
			data = fb
		}
	}
	writeRaw(w, http.StatusOK, data)
}

// listSelector parses the ?selector= of a list call; a bad one is answered as upstream does,
// the parser's error wrapped without a gRPC code (HTTP 500).
func listSelector(w http.ResponseWriter, q url.Values) (Selector, bool) {
	sel, err := ParseSelector(q.Get("selector"))
	if err != nil {
		writeAPIError(w, errf(codeUnknown, "error parsing the selector: %v", err))
		return Selector{}, false
	}
	return sel, true
}

// handleListApps serves GET /api/v1/applications.
func (s *Server) handleListApps(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	sel, ok := listSelector(w, q)
	if !ok {
		return
	}
	projects := map[string]bool{}
	for _, p := range projectsParam(q) {
		projects[p] = true
	}
	name, appNs, repo := q.Get("name"), q.Get("appNamespace"), q.Get("repo")

	s.mu.Lock()
	type item struct {
		name string
		data []byte
	}
	var found []item
	for _, st := range s.apps {
		a := &st.app
		switch {
		case appNs != "" && a.Metadata.Namespace != appNs,
			!s.namespaces[a.Metadata.Namespace],
			!sel.Matches(a.Metadata.Labels),
			name != "" && a.Metadata.Name != name,
			len(projects) > 0 && !projects[a.Spec.project()],
			// The repo filter is an exact string match on the primary
			// source only, with no URL normalisation.
			repo != "" && a.Spec.primarySource().RepoURL != repo:
			continue
		}
		found = append(found, item{a.Metadata.Name, st.data})
	}
	rv := strconv.FormatInt(s.rv, 10)
	s.mu.Unlock()

	sort.SliceStable(found, func(i, j int) bool { return found[i].name < found[j].name })
	// Assemble the list from the stored JSON: re-marshalling RawMessages
	// would re-validate every item.
	var buf bytes.Buffer
	buf.WriteString(`{"metadata":{"resourceVersion":"` + rv + `"},"items":[`)
	for i, it := range found {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it.data)
	}
	buf.WriteString("]}")
	replyRaw(w, r, buf.Bytes())
}

// handleGetApp serves GET /api/v1/applications/{name}; with ?refresh it
// waits for the controller's refresh like the real server.
func (s *Server) handleGetApp(w http.ResponseWriter, r *http.Request, p []string) {
	q := r.URL.Query()
	projects := projectsParam(q)
	if len(projects) > 1 {
		writeAPIError(w, errf(codeInvalidArgument, "multiple projects specified - the get endpoint accepts either zero or one project"))
		return
	}
	project := ""
	if len(projects) == 1 {
		project = projects[0]
	}
	st := s.lockApp(w, p[0], q.Get("appNamespace"), project)
	if st == nil {
		return
	}
	if !q.Has("refresh") {
		data := st.data
		s.mu.Unlock()
		replyRaw(w, r, data)
		return
	}
	kind := "normal"
	if q.Get("refresh") == "hard" {
		kind = "hard"
	}
	if st.app.Metadata.Annotations == nil {
		st.app.Metadata.Annotations = map[string]string{}
	}
	st.app.Metadata.Annotations[refreshAnnotation] = kind
	s.commit(st, EventModified)
	key := st.key
	s.mu.Unlock()

	s.reconcileApp(r.Context(), key, nil)
	if r.Context().Err() != nil {
		writeAPIError(w, errf(codeUnknown, "application refresh deadline exceeded"))
		return
	}
	s.mu.Lock()
	data := st.data
	s.mu.Unlock()
	replyRaw(w, r, data)
}

// handleCreateApp serves POST /api/v1/applications.
func (s *Server) handleCreateApp(w http.ResponseWriter, r *http.Request, _ []string) {
	var a Application
	flags, ok := readCreate(w, r, &a, "upsert", "validate")
	if !ok {
		return
	}
	upsert, validate := flags[0], flags[1]
	const prefix = "error while validating and normalizing app"
	project := a.Spec.project()
	s.mu.Lock()
	projectKnown := s.projects[project]
	s.mu.Unlock()
	if !projectKnown {
		// "Offer no hint that the project does not exist."
		writeAPIError(w, wrapErr(prefix, errPermissionDenied))
		return
	}
	if a.Metadata.Name == "" {
		writeAPIError(w, errf(codeUnknown, "%s: resource name may not be empty", prefix))
		return
	}
	if a.Spec.Destination.Server == "" && a.Spec.Destination.Name == "" {
		writeAPIError(w, wrapErr(prefix, errf(codeInvalidArgument,
			"application destination spec for %s is invalid: Destination server missing from app spec", a.Metadata.Name)))
		return
	}
	if validate == nil || *validate {
		src := a.Spec.primarySource()
		if src.RepoURL == "" {
			writeAPIError(w, wrapErr(prefix, errf(codeInvalidArgument,
				"application spec for %s is invalid: InvalidSpecError: spec.source.repoURL and either spec.source.path, spec.source.chart, or spec.source.ref are required", a.Metadata.Name)))
			return
		}
		if tg := s.loadTarget(r.Context(), a.Spec, src.TargetRevision, nil); tg.err != nil {
			writeAPIError(w, wrapErr(prefix, errf(codeInvalidArgument,
				"application spec for %s is invalid: InvalidSpecError: Unable to generate manifests in %s: rpc error: code = Unknown desc = %v",
				a.Metadata.Name, firstNonEmpty(src.Path, "."), tg.err)))
			return
		}
	}
	a.Spec.Project = project
	a.Metadata.Namespace = firstNonEmpty(a.Metadata.Namespace, defaultNamespace)

	s.mu.Lock()
	if !s.namespaces[a.Metadata.Namespace] {
		s.mu.Unlock()
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", a.Metadata.Namespace))
		return
	}
	key := a.Metadata.Namespace + "/" + a.Metadata.Name
	if st := s.apps[key]; st != nil {
		same := jsonEqual(st.app.Spec, a.Spec) && reflect.DeepEqual(st.app.Metadata.Labels, a.Metadata.Labels) &&
			reflect.DeepEqual(st.app.Metadata.Annotations, a.Metadata.Annotations) &&
			reflect.DeepEqual(st.app.Metadata.Finalizers, a.Metadata.Finalizers)
		if same {
			data := st.data
			s.mu.Unlock()
			replyRaw(w, r, data)
			return
		}
		if upsert == nil || !*upsert {
			s.mu.Unlock()
			writeAPIError(w, errf(codeInvalidArgument, "existing application spec is different, use upsert flag to force update"))
			return
		}
		st.app.Spec = a.Spec
		st.app.Metadata.Labels, st.app.Metadata.Annotations, st.app.Metadata.Finalizers =
			a.Metadata.Labels, a.Metadata.Annotations, a.Metadata.Finalizers
		st.app.Metadata.Generation++
		s.commit(st, EventModified)
		data := st.data
		s.mu.Unlock()
		s.reconcileApp(r.Context(), key, nil)
		writeRaw(w, http.StatusOK, data)
		return
	}
	st := s.insertApp(a)
	data := st.data
	// The controller picks the new app up asynchronously.
	s.goBackground(func() {
		if s.sleep(s.step) {
			s.reconcileApp(s.ctx, key, nil)
		}
	})
	s.mu.Unlock()
	replyRaw(w, r, data)
}

func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// insertApp stores a new app and publishes ADDED. Callers hold s.mu.
func (s *Server) insertApp(a Application) *appState {
	s.seq++
	a.Metadata.Namespace = firstNonEmpty(a.Metadata.Namespace, defaultNamespace)
	a.Metadata.UID = fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq)
	a.Metadata.CreationTimestamp = NewTime(s.now())
	a.Metadata.Generation = 1
	a.Metadata.DeletionTimestamp = nil
	a.Operation = nil
	if a.Spec.Project == "" {
		a.Spec.Project = "default"
	}
	st := &appState{key: a.Metadata.Namespace + "/" + a.Metadata.Name, app: a}
	s.apps[st.key] = st
	s.commit(st, EventAdded)
	return st
}

// handleDeleteApp serves DELETE /api/v1/applications/{name}.
func (s *Server) handleDeleteApp(w http.ResponseWriter, r *http.Request, p []string) {
	q := r.URL.Query()
	cascade, e := parseBoolParam(q, "cascade")
	if e != nil {
		writeAPIError(w, e)
		return
	}
	policy := q.Get("propagationPolicy")
	st := s.lockApp(w, p[0], q.Get("appNamespace"), q.Get("project"))
	if st == nil {
		return
	}
	defer s.mu.Unlock()
	if cascade != nil && !*cascade && policy != "" {
		writeAPIError(w, errf(codeInvalidArgument, "cannot set propagation policy when cascading is disabled"))
		return
	}
	finalizer := "resources-finalizer.argocd.argoproj.io"
	switch strings.ToLower(policy) {
	case "":
	case "foreground":
		finalizer += "/foreground"
	case "background":
		finalizer += "/background"
	default:
		writeAPIError(w, errf(codeInvalidArgument, "invalid propagation policy: %s", policy))
		return
	}
	s.deleteApp(st, cascade == nil || *cascade, finalizer)
	reply(w, r, struct{}{})
}

// handleSync serves POST /api/v1/applications/{name}/sync.
func (s *Server) handleSync(w http.ResponseWriter, r *http.Request, p []string) {
	user := requestUser(r)
	var req SyncRequest
	if e := decodeBody(r, &req); e != nil {
		writeAPIError(w, e)
		return
	}
	st := s.lockApp(w, p[0], req.AppNamespace, req.Project)
	if st == nil {
		return
	}
	// The API server counts every sync it is asked for as manual: a window with
	// manualSync lets it through.
	if e := s.syncBlocked(&st.app, true); e != nil {
		s.mu.Unlock()
		writeAPIError(w, e)
		return
	}
	app := clone(st.app)
	key := st.key
	s.mu.Unlock()

	automated := app.Spec.SyncPolicy.automatedEnabled()
	src := app.Spec.primarySource()
	switch {
	case req.Manifests != nil && automated && !req.DryRun:
		writeAPIError(w, errf(codeFailedPrecondition, "cannot use local sync when Automatic Sync Policy is enabled unless for dry run"))
		return
	case app.Metadata.DeletionTimestamp != nil:
		writeAPIError(w, errf(codeFailedPrecondition, "application is deleting"))
		return
	case automated && !req.DryRun && req.Revision != "" && req.Revision != firstNonEmpty(src.TargetRevision, "HEAD"):
		writeAPIError(w, errf(codeFailedPrecondition, "Cannot sync to %s: auto-sync currently set to %s", req.Revision, src.TargetRevision))
		return
	}
	// The API server resolves the revision to a SHA before creating the
	// operation, so operation.sync.revision is always a commit SHA.
	revision := ""
	if req.Manifests == nil {
		ambiguous := firstNonEmpty(req.Revision, src.TargetRevision)
		sha, err := s.resolve(r.Context(), src.RepoURL, ambiguous, nil)
		if isRepoServerDown(err) {
			writeAPIError(w, errf(codeFailedPrecondition, "error resolving repo revision: %v", err))
			return
		}
		if err != nil {
			writeAPIError(w, errf(codeFailedPrecondition, "error resolving repo revision: rpc error: code = Unknown desc = Unable to resolve '%s' to a commit SHA: %v",
				firstNonEmpty(ambiguous, "HEAD"), err))
			return
		}
		revision = sha
	}
	var syncOptions []string
	var retry *RetryStrategy
	if app.Spec.SyncPolicy != nil {
		syncOptions, retry = app.Spec.SyncPolicy.SyncOptions, app.Spec.SyncPolicy.Retry
	}
	if req.RetryStrategy != nil {
		retry = req.RetryStrategy
	}
	if req.SyncOptions != nil {
		syncOptions = req.SyncOptions.Items
	}
	op := Operation{
		Sync: &SyncOperation{
			Revision: revision, Prune: req.Prune, DryRun: req.DryRun, SyncOptions: syncOptions,
			SyncStrategy: req.Strategy, Resources: req.Resources, Manifests: req.Manifests,
		},
		InitiatedBy: OperationInitiator{Username: user},
		Info:        req.Infos,
	}
	if retry != nil {
		op.Retry = *retry
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st = s.apps[key]
	if st == nil || st.gone {
		writeAPIError(w, errPermissionDenied)
		return
	}
	if err := s.startOperation(st, op, nil); err != nil {
		code := codeFailedPrecondition
		if err == errClosed {
			code = codeUnavailable
		}
		writeAPIError(w, errf(code, "error setting app operation: %v", err))
		return
	}
	replyRaw(w, r, st.data)
}

// handleTerminate serves DELETE /api/v1/applications/{name}/operation.
func (s *Server) handleTerminate(w http.ResponseWriter, r *http.Request, p []string) {
	q := r.URL.Query()
	st := s.lockApp(w, p[0], q.Get("appNamespace"), q.Get("project"))
	if st == nil {
		return
	}
	defer s.mu.Unlock()
	// Right after a sync request the controller has not picked the
	// operation up yet (operationState is null): the real server refuses.
	if st.app.Operation == nil || st.app.Status.OperationState == nil || st.op == nil {
		writeAPIError(w, errf(codeInvalidArgument, "Unable to terminate operation. No operation is in progress"))
		return
	}
	st.app.Status.OperationState.Phase = PhaseTerminating
	s.commit(st, EventModified)
	st.op.terminate()
	reply(w, r, struct{}{})
}
