package argocdtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// This file is the Go API tests use to set the scene and to script the
// controller. Names are "name" for apps in the argocd namespace or
// "namespace/name".

func appKey(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return defaultNamespace + "/" + name
}

// AppOption modifies how AddApp creates an app.
type AppOption func(*addAppConfig)

type addAppConfig struct{ deployed bool }

// Deployed makes the app start out deployed at its current target revision
// (Synced/Healthy, with one history entry and a Succeeded operationState from
// the past), as if it had been synced before the test.
func Deployed() AppOption { return func(c *addAppConfig) { c.deployed = true } }

// AddApp creates app as if applied with kubectl: ADDED is published, then the
// controller's first reconciliation runs before AddApp returns. An unknown
// project is registered on the fly.
func (s *Server) AddApp(app Application, opts ...AppOption) error {
	var cfg addAppConfig
	for _, o := range opts {
		o(&cfg)
	}
	if app.Metadata.Name == "" {
		return errors.New("argocdtest: AddApp: metadata.name is empty")
	}
	app.Metadata.Namespace = firstNonEmpty(app.Metadata.Namespace, defaultNamespace)
	key := app.Metadata.Namespace + "/" + app.Metadata.Name
	var tg target
	if cfg.deployed {
		tg = s.loadTarget(s.ctx, app.Spec, app.Spec.primarySource().TargetRevision, nil)
		if tg.err != nil {
			return fmt.Errorf("argocdtest: AddApp %s: Deployed: %w", key, tg.err)
		}
	}
	s.mu.Lock()
	if !s.namespaces[app.Metadata.Namespace] {
		s.mu.Unlock()
		return fmt.Errorf("argocdtest: AddApp %s: namespace %q is not enabled (see WithAppNamespaces)", key, app.Metadata.Namespace)
	}
	if st := s.apps[key]; st != nil && !st.gone {
		s.mu.Unlock()
		return fmt.Errorf("argocdtest: AddApp %s: %w", key, ErrAppExists)
	}
	s.projects[app.Spec.project()] = true
	st := s.insertApp(app)
	if cfg.deployed {
		now := s.now()
		st.live = &liveState{revision: tg.revision, objects: tg.objects, files: tg.files, overrides: tg.overrides}
		op := Operation{Sync: &SyncOperation{Revision: tg.revision}, InitiatedBy: OperationInitiator{Username: "admin"}}
		st.app.Status.OperationState = &OperationState{
			Operation: op, Phase: PhaseSucceeded, Message: "successfully synced (all tasks run)",
			StartedAt: NewTime(now), FinishedAt: timePtr(now),
			SyncResult: &SyncOperationResult{Revision: tg.revision, Source: app.Spec.primarySource(),
				Resources: resourceResults(tg, nil, op.Sync, true)},
		}
		st.app.Status.History = []RevisionHistory{{Revision: tg.revision, DeployedAt: NewTime(now), ID: 0,
			Source: app.Spec.primarySource(), DeployStartedAt: timePtr(now), InitiatedBy: op.InitiatedBy}}
		st.historyID = 1
	}
	s.mu.Unlock()
	s.reconcileApp(s.ctx, key, nil)
	return nil
}

// UpdateApp replaces an app's spec, labels and annotations (status is kept)
// and reconciles it, like `kubectl apply` of a changed manifest.
func (s *Server) UpdateApp(app Application) error {
	key := appKey(firstNonEmpty(app.Metadata.Namespace, defaultNamespace) + "/" + app.Metadata.Name)
	s.mu.Lock()
	st := s.apps[key]
	if st == nil || st.gone {
		s.mu.Unlock()
		return fmt.Errorf("argocdtest: UpdateApp %s: %w", key, ErrAppNotFound)
	}
	if app.Spec.Project == "" {
		app.Spec.Project = "default"
	}
	s.projects[app.Spec.Project] = true
	st.app.Spec = clone(app.Spec)
	st.app.Metadata.Labels = clone(app.Metadata.Labels)
	st.app.Metadata.Annotations = clone(app.Metadata.Annotations)
	st.app.Metadata.Generation++
	s.commit(st, EventModified)
	s.mu.Unlock()
	s.reconcileApp(s.ctx, key, nil)
	return nil
}

// DeleteApp removes an app at once (DELETED is published).
func (s *Server) DeleteApp(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.appLocked("DeleteApp", name)
	if err != nil {
		return err
	}
	s.removeApp(st)
	return nil
}

// appLocked is the app called name for method op of this API (named in the error when there is
// no such app); callers hold s.mu.
func (s *Server) appLocked(op, name string) (*appState, error) {
	st := s.apps[appKey(name)]
	if st == nil || st.gone {
		return nil, fmt.Errorf("argocdtest: %s %s: %w", op, name, ErrAppNotFound)
	}
	return st, nil
}

// App returns a copy of an app as the API would return it.
func (s *Server) App(name string) (Application, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.apps[appKey(name)]
	if st == nil || st.gone {
		return Application{}, false
	}
	return st.snapshot(), true
}

// Apps returns copies of all apps, sorted by namespace/name.
func (s *Server) Apps() []Application {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Application
	for _, k := range sortedKeys(s.apps) {
		out = append(out, s.apps[k].snapshot())
	}
	return out
}

// RunningOperations counts the apps with an operation under way (a benchmark waits for
// none before it measures an idle system).
func (s *Server) RunningOperations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.apps {
		if !st.gone && st.op != nil {
			n++
		}
	}
	return n
}

// ScriptSync scripts the next operation of an app, whoever starts it (API
// sync, auto-sync or StartOperation without its own script).
func (s *Server) ScriptSync(name string, script SyncScript) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.appLocked("ScriptSync", name)
	if err != nil {
		return err
	}
	sc := script
	st.script = &sc
	return nil
}

// StartOperation starts a sync of the app's target revision as if user
// "username" (someone else than the client under test) had clicked Sync; an
// empty username marks it as an automated sync. Combine with
// SyncScript.Hang or Hold to keep it running while the code under test
// tries its own sync.
func (s *Server) StartOperation(name, username string, script SyncScript) error {
	s.mu.Lock()
	st, err := s.appLocked("StartOperation", name)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	spec := clone(st.app.Spec)
	s.mu.Unlock()
	src := spec.primarySource()
	sha, err := s.resolve(s.ctx, src.RepoURL, src.TargetRevision, nil)
	if err != nil {
		return fmt.Errorf("argocdtest: StartOperation %s: %w", name, err)
	}
	op := Operation{Sync: &SyncOperation{Revision: sha}, InitiatedBy: OperationInitiator{Username: username, Automated: username == ""}}
	if spec.SyncPolicy != nil {
		op.Sync.SyncOptions = spec.SyncPolicy.SyncOptions
		if spec.SyncPolicy.Retry != nil {
			op.Retry = *spec.SyncPolicy.Retry
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, err = s.appLocked("StartOperation", name); err != nil {
		return err
	}
	sc := script
	if err := s.startOperation(st, op, &sc); err != nil {
		return fmt.Errorf("argocdtest: StartOperation %s: %w", name, err)
	}
	return nil
}

// ReleaseOperation lets an operation held by SyncScript.Hang continue.
func (s *Server) ReleaseOperation(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.appLocked("ReleaseOperation", name)
	if err != nil {
		return err
	}
	if st.op == nil {
		return fmt.Errorf("argocdtest: ReleaseOperation %s: %w", name, ErrNoOperation)
	}
	st.op.releaseHold()
	return nil
}

// SetHealth pins an app's health (e.g. Degraded some time after a healthy
// rollout) until the next successful sync; status "" unpins it. The change
// is published at once.
func (s *Server) SetHealth(name, status, message string) error {
	s.mu.Lock()
	st, err := s.appLocked("SetHealth", name)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if status == "" {
		st.healthPin, st.pinSticky = nil, false
	} else {
		st.healthPin, st.pinSticky = &HealthStatus{Status: status, Message: message}, true
	}
	key := st.key
	s.mu.Unlock()
	s.reconcileApp(s.ctx, key, nil)
	return nil
}

// Reconcile runs the ApplicationSet controller and then the application
// controller over everything now, as their periodic passes both falling due
// at once would: new commits show up as OutOfSync, auto-sync apps start
// syncing, and appsets create or delete apps for added or removed files.
func (s *Server) Reconcile() {
	s.ReconcileContext(s.ctx)
}

// ReconcileContext is Reconcile bounded by ctx.
func (s *Server) ReconcileContext(ctx context.Context) {
	rc := newRevCache()
	s.mu.Lock()
	setKeys := sortedKeys(s.appsets)
	s.mu.Unlock()
	for _, k := range setKeys {
		s.reconcileAppSet(ctx, k, rc)
	}
	s.reconcileAppsRC(ctx, rc)
}

// reconcileApps is the application controller's periodic pass alone.
func (s *Server) reconcileApps() { s.reconcileAppsRC(s.ctx, newRevCache()) }

func (s *Server) reconcileAppsRC(ctx context.Context, rc *revCache) {
	s.mu.Lock()
	appKeys := sortedKeys(s.apps)
	s.mu.Unlock()
	for _, k := range appKeys {
		s.reconcileApp(ctx, k, rc)
	}
}

// AddApplicationSet creates an ApplicationSet and runs its generators at
// once, so the generated apps exist when it returns. Generation problems do
// not fail the call; they show in status.conditions (ErrorOccurred), like on
// the real controller.
func (s *Server) AddApplicationSet(as ApplicationSet) error {
	if as.Metadata.Name == "" {
		return errors.New("argocdtest: AddApplicationSet: metadata.name is empty")
	}
	as.Metadata.Namespace = firstNonEmpty(as.Metadata.Namespace, defaultNamespace)
	key := as.Metadata.Namespace + "/" + as.Metadata.Name
	s.mu.Lock()
	if !s.namespaces[as.Metadata.Namespace] {
		s.mu.Unlock()
		return fmt.Errorf("argocdtest: AddApplicationSet %s: namespace %q is not enabled", key, as.Metadata.Namespace)
	}
	if _, ok := s.appsets[key]; ok {
		s.mu.Unlock()
		return fmt.Errorf("argocdtest: AddApplicationSet %s: already exists", key)
	}
	s.seq++
	as.Metadata.UID = fmt.Sprintf("00000000-0000-4000-9000-%012d", s.seq)
	as.Metadata.CreationTimestamp = NewTime(s.now())
	as.Metadata.Generation = 1
	as.Status = ApplicationSetStatus{}
	if p := as.Spec.Template.Spec.Project; p != "" && !strings.Contains(p, "{{") {
		s.projects[p] = true
	}
	ast := &appsetState{key: key, as: as}
	s.appsets[key] = ast
	s.bumpAppSet(ast)
	s.mu.Unlock()

	rc := newRevCache()
	for _, k := range s.reconcileAppSet(s.ctx, key, rc) {
		s.reconcileApp(s.ctx, k, rc)
	}
	return nil
}

// ApplicationSet returns a copy of an appset as the API would return it.
func (s *Server) ApplicationSet(name string) (ApplicationSet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ast := s.appsets[appKey(name)]
	if ast == nil {
		return ApplicationSet{}, false
	}
	return s.appsetView(ast), true
}

// DeleteApplicationSet removes an appset and, unless
// syncPolicy.preserveResourcesOnDeletion is set, the apps it generated.
func (s *Server) DeleteApplicationSet(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := appKey(name)
	ast := s.appsets[key]
	if ast == nil {
		return fmt.Errorf("argocdtest: DeleteApplicationSet %s: not found", name)
	}
	delete(s.appsets, key)
	if ast.as.Spec.SyncPolicy != nil && ast.as.Spec.SyncPolicy.PreserveResourcesOnDeletion {
		return nil
	}
	for _, k := range sortedKeys(s.apps) {
		if st := s.apps[k]; !st.gone && ownedBy(&st.app, &ast.as) {
			s.beginDeletion(st)
		}
	}
	return nil
}
