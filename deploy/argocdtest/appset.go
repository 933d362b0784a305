package argocdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prflow/prflow/deploy/appset"
)

// appsetState is one ApplicationSet plus the outcome of its last generation.
type appsetState struct {
	key  string
	as   ApplicationSet
	rv   int64
	genM sync.Mutex // serialises generations of this appset
	// genFailed: the last generation failed (the refresh annotation then stays).
	genFailed bool
}

// ownerRef is the controller reference a generated Application carries.
func (a *appsetState) ownerRef() OwnerReference {
	t := true
	return OwnerReference{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: a.as.Metadata.Name,
		UID: a.as.Metadata.UID, Controller: &t, BlockOwnerDeletion: &t}
}

func ownedBy(app *Application, as *ApplicationSet) bool {
	for _, o := range app.Metadata.OwnerReferences {
		if o.Kind == "ApplicationSet" && o.Name == as.Metadata.Name && (o.UID == "" || o.UID == as.Metadata.UID) {
			return true
		}
	}
	return false
}

// reconcileAppSet is one pass of the ApplicationSet controller: run the
// generators against git, render the template per parameter set, then
// create, update and delete the owned Applications as the sync policy allows.
// It returns the keys of Applications it created or changed.
func (s *Server) reconcileAppSet(ctx context.Context, key string, rc *revCache) []string {
	s.mu.Lock()
	ast := s.appsets[key]
	s.mu.Unlock()
	if ast == nil {
		return nil
	}
	ast.genM.Lock()
	defer ast.genM.Unlock()
	s.mu.Lock()
	as := clone(ast.as)
	s.mu.Unlock()

	desired, genErr := s.generate(ctx, as, rc)
	if ctx.Err() != nil {
		return nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appsets[key] != ast {
		return nil
	}
	now := s.now()
	ast.genFailed = genErr != nil
	if genErr != nil {
		ast.as.Status.Conditions = appsetConditions(NewTime(now), genErr)
		s.bumpAppSet(ast)
		s.log.Warn("argocdtest: applicationset generation failed", "appset", key, "err", genErr)
		return nil
	}
	policy := ""
	if as.Spec.SyncPolicy != nil {
		policy = as.Spec.SyncPolicy.ApplicationsSync
	}
	allowUpdate := policy == "" || policy == "sync" || policy == "create-update"
	allowDelete := policy == "" || policy == "sync" || policy == "create-delete"

	var touched []string
	var problems []string
	want := map[string]bool{}
	for _, app := range desired {
		app.Metadata.Namespace = firstNonEmpty(app.Metadata.Namespace, as.Metadata.Namespace, defaultNamespace)
		app.Metadata.OwnerReferences = []OwnerReference{ast.ownerRef()}
		k := app.Metadata.Namespace + "/" + app.Metadata.Name
		want[k] = true
		st := s.apps[k]
		if st == nil || st.gone {
			if !s.namespaces[app.Metadata.Namespace] {
				problems = append(problems, fmt.Sprintf("application %s: namespace %q is not permitted", app.Metadata.Name, app.Metadata.Namespace))
				continue
			}
			s.insertApp(app)
			touched = append(touched, k)
			continue
		}
		if !ownedBy(&st.app, &ast.as) {
			problems = append(problems, fmt.Sprintf("application %s already exists and is not owned by ApplicationSet %s", app.Metadata.Name, as.Metadata.Name))
			continue
		}
		if !allowUpdate {
			continue
		}
		if app.Spec.Project == "" {
			app.Spec.Project = "default"
		}
		if jsonEqual(st.app.Spec, app.Spec) && jsonEqual(st.app.Metadata.Labels, app.Metadata.Labels) &&
			jsonEqual(st.app.Metadata.Annotations, app.Metadata.Annotations) {
			continue
		}
		st.app.Spec = app.Spec
		st.app.Metadata.Labels, st.app.Metadata.Annotations = app.Metadata.Labels, app.Metadata.Annotations
		st.app.Metadata.Generation++
		s.commit(st, EventModified)
		touched = append(touched, k)
	}
	if allowDelete {
		for _, k := range sortedKeys(s.apps) {
			st := s.apps[k]
			if !want[k] && !st.gone && ownedBy(&st.app, &ast.as) && st.app.Metadata.DeletionTimestamp == nil {
				s.beginDeletion(st)
			}
		}
	}
	var err error
	if len(problems) > 0 {
		err = errors.New(strings.Join(problems, "; "))
	}
	ast.as.Status.Conditions = appsetConditions(NewTime(now), err)
	s.bumpAppSet(ast)
	return touched
}

func (s *Server) bumpAppSet(ast *appsetState) {
	s.rv++
	ast.rv = s.rv
	ast.as.Metadata.ResourceVersion = strconv.FormatInt(ast.rv, 10)
}

func appsetConditions(now Time, err error) []ApplicationSetCondition {
	t := &now
	if err != nil {
		return []ApplicationSetCondition{
			{Type: "ErrorOccurred", Status: "True", Reason: "ApplicationGenerationFromParamsError", Message: err.Error(), LastTransitionTime: t},
			{Type: "ParametersGenerated", Status: "False", Reason: "ErrorOccurred", Message: err.Error(), LastTransitionTime: t},
			{Type: "ResourcesUpToDate", Status: "False", Reason: "ApplicationGenerationFromParamsError", Message: err.Error(), LastTransitionTime: t},
		}
	}
	return []ApplicationSetCondition{
		{Type: "ErrorOccurred", Status: "False", Reason: "ApplicationSetUpToDate", Message: "Successfully generated parameters for all Applications", LastTransitionTime: t},
		{Type: "ParametersGenerated", Status: "True", Reason: "ParametersGenerated", Message: "Successfully generated parameters for all Applications", LastTransitionTime: t},
		{Type: "ResourcesUpToDate", Status: "True", Reason: "ApplicationSetUpToDate", Message: "All applications have been generated successfully", LastTransitionTime: t},
	}
}

// appsetView is the appset as the API returns it, with status.resources
// listing the generated apps' current sync and health. Callers hold s.mu.
func (s *Server) appsetView(ast *appsetState) ApplicationSet {
	as := clone(ast.as)
	as.Status.Resources = nil
	for _, k := range sortedKeys(s.apps) {
		st := s.apps[k]
		if !ownedBy(&st.app, &ast.as) {
			continue
		}
		h := st.app.Status.Health
		as.Status.Resources = append(as.Status.Resources, ResourceStatus{
			Group: "argoproj.io", Version: "v1alpha1", Kind: "Application", Namespace: st.app.Metadata.Namespace,
			Name: st.app.Metadata.Name, Status: st.app.Status.Sync.Status,
			Health: &HealthStatus{Status: h.Status, Message: h.Message, LastTransitionTime: h.LastTransitionTime},
		})
	}
	as.Status.ResourcesCount = int64(len(as.Status.Resources))
	return as
}

// ---- generators (deploy/appset) ----

// generate runs the appset's generators against git (deploy/appset) and returns the
// Applications its template renders.
func (s *Server) generate(ctx context.Context, as ApplicationSet, rc *revCache) ([]Application, error) {
	b, err := json.Marshal(as.Spec)
	if err != nil {
		return nil, err
	}
	var spec appset.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, err
	}
	spec.Name = as.Metadata.Name
	gen, err := appset.Generate(ctx, appsetRepo{s: s, rc: rc}, spec)
	if err != nil {
		return nil, err
	}
	out := make([]Application, 0, len(gen))
	for _, g := range gen {
		var t ApplicationSetTemplate
		if err := json.Unmarshal(g.Template, &t); err != nil {
			return nil, fmt.Errorf("application %s: rendered template is not a valid Application template: %w", g.Name, err)
		}
		out = append(out, Application{
			Metadata: ObjectMeta{Name: t.Metadata.Name, Namespace: t.Metadata.Namespace, Labels: t.Metadata.Labels,
				Annotations: t.Metadata.Annotations, Finalizers: t.Metadata.Finalizers},
			Spec: t.Spec,
		})
	}
	return out, nil
}

// appsetRepo reads git for the generators through the server's GitReader, resolving each
// revision once per reconciliation (rc).
type appsetRepo struct {
	s  *Server
	rc *revCache
}

func (r appsetRepo) Resolve(ctx context.Context, repoURL, revision string) (string, error) {
	sha, err := r.s.resolve(ctx, repoURL, revision, r.rc)
	if err != nil {
		return "", fmt.Errorf("error resolving %q in %s: %w", firstNonEmpty(revision, "HEAD"), redactURL(repoURL), err)
	}
	return sha, nil
}

func (r appsetRepo) ReadTree(ctx context.Context, repoURL, sha, dir string) (map[string][]byte, error) {
	tree, err := r.s.git.ReadTree(ctx, repoURL, sha, dir)
	if errors.Is(err, ErrPathNotFound) {
		return nil, nil
	}
	return tree, err
}

// ---- HTTP ----

// handleListAppSets serves GET /api/v1/applicationsets.
func (s *Server) handleListAppSets(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	sel, ok := listSelector(w, q)
	if !ok {
		return
	}
	ns := firstNonEmpty(q.Get("appsetNamespace"), defaultNamespace)
	projects := map[string]bool{}
	for _, p := range nonEmpty(q["projects"]) {
		projects[p] = true
	}
	s.mu.Lock()
	if !s.namespaces[ns] {
		s.mu.Unlock()
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", ns))
		return
	}
	items := []ApplicationSet{}
	for _, k := range sortedKeys(s.appsets) {
		ast := s.appsets[k]
		if ast.as.Metadata.Namespace != ns || !sel.Matches(ast.as.Metadata.Labels) {
			continue
		}
		if len(projects) > 0 && !projects[ast.as.Spec.Template.Spec.project()] {
			continue
		}
		items = append(items, s.appsetView(ast))
	}
	rv := strconv.FormatInt(s.rv, 10)
	s.mu.Unlock()
	reply(w, r, ApplicationSetList{Metadata: ListMeta{ResourceVersion: rv}, Items: items})
}

// handleGetAppSet serves GET /api/v1/applicationsets/{name}. Unlike apps, a
// missing appset is a plain 404.
func (s *Server) handleGetAppSet(w http.ResponseWriter, r *http.Request, p []string) {
	ns := firstNonEmpty(r.URL.Query().Get("appsetNamespace"), defaultNamespace)
	s.mu.Lock()
	if !s.namespaces[ns] {
		s.mu.Unlock()
		writeAPIError(w, errf(codePermissionDenied, "namespace '%s' is not permitted", ns))
		return
	}
	ast := s.appsets[ns+"/"+p[0]]
	if ast == nil {
		s.mu.Unlock()
		writeAPIError(w, errf(codeNotFound, "error getting ApplicationSet: applicationsets.argoproj.io %q not found", p[0]))
		return
	}
	view := s.appsetView(ast)
	s.mu.Unlock()
	reply(w, r, view)
}
