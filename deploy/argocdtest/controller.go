package argocdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// appState is one Application plus what the controller knows about it.
type appState struct {
	key  string // namespace/name
	app  Application
	data []byte // last published JSON (with resourceVersion)
	prev []byte // last published JSON without resourceVersion, for change detection
	rv   int64
	gone bool

	live        *liveState    // what is deployed; nil until the first sync
	target      []object      // the desired objects of the last comparison that succeeded
	healthPin   *HealthStatus // overrides computed health while set
	pinSticky   bool          // pin survives the start of a new operation
	revOverride string        // scripted wrong revision, reported instead of the real one
	script      *SyncScript   // one-shot script for the next operation
	op          *opRun
	epoch       int // bumped when an operation starts; stops stale health progressions

	lastAutoSync       string
	lastAutoSyncFailed bool
	historyID          int64

	reconcileMu sync.Mutex
}

type liveState struct {
	revision string
	objects  []object
	files    map[string][]byte
	// overrides are the source's Helm/Kustomize settings it was deployed with (see
	// sourceOverrides).
	overrides string
}

// opRun is a running operation's control channels.
type opRun struct {
	script      SyncScript
	term        chan struct{}
	release     chan struct{}
	termOnce    sync.Once
	releaseOnce sync.Once
}

func (r *opRun) terminate()   { r.termOnce.Do(func() { close(r.term) }) }
func (r *opRun) releaseHold() { r.releaseOnce.Do(func() { close(r.release) }) }
func (r *opRun) terminated() bool {
	select {
	case <-r.term:
		return true
	default:
		return false
	}
}

// SyncScript scripts the next sync operation of an app, to provoke the
// situations a deployment gate must survive.
type SyncScript struct {
	// FailAttempts makes the first N attempts of the operation fail (phase
	// Failed). With a retry strategy the operation retries and a later
	// attempt can succeed.
	FailAttempts int
	// FailMessage is the message of failed attempts.
	FailMessage string
	// Progressing is the number of Progressing events between Synced and
	// the final health (their messages count replicas up, so each is a
	// distinct event): 0 uses the server default, -1 stays Progressing until
	// SetHealth or the next sync.
	Progressing int
	// Health, when set, is the exact health sequence after the sync, one
	// step each (repeating a status publishes nothing new); the last sticks. {"Healthy", "Degraded"} reproduces
	// the "momentarily healthy right after a sync" trap (Kargo #4673).
	Health []string
	// Revision is reported as the synced revision (syncResult, history and
	// status.sync.revision, which shows Synced) instead of the real one,
	// until the next operation: a gate must reject it.
	Revision string
	// Hold keeps the operation Running at least this long.
	Hold time.Duration
	// Hang keeps the operation Running until ReleaseOperation or a
	// terminate request.
	Hang bool
	// CompareAfter delays the controller's first comparison after a
	// successful sync: Argo CD turns the phase Succeeded first and updates
	// the sync status on a later reconcile, which a busy controller runs
	// seconds later. Until then the app keeps the sync status it had.
	CompareAfter time.Duration
}

const refreshAnnotation = "argocd.argoproj.io/refresh"

// commit publishes st's current object if it changed (always for ADDED and
// DELETED), bumping the resourceVersion like the Kubernetes API server.
// Callers hold s.mu.
func (s *Server) commit(st *appState, evType string) {
	st.app.Metadata.ResourceVersion = ""
	plain, err := json.Marshal(st.app)
	if err != nil {
		s.log.Error("argocdtest: marshal application", "app", st.key, "err", err)
		st.app.Metadata.ResourceVersion = strconv.FormatInt(st.rv, 10)
		return
	}
	if evType == EventModified && bytes.Equal(plain, st.prev) {
		st.app.Metadata.ResourceVersion = strconv.FormatInt(st.rv, 10)
		return
	}
	s.rv++
	st.rv = s.rv
	st.app.Metadata.ResourceVersion = strconv.FormatInt(st.rv, 10)
	data, _ := json.Marshal(st.app)
	st.prev, st.data = plain, data
	s.publish(st.event(evType))
}

func (st *appState) event(evType string) *event {
	labels := make(map[string]string, len(st.app.Metadata.Labels))
	for k, v := range st.app.Metadata.Labels {
		labels[k] = v
	}
	return &event{
		typ: evType, ns: st.app.Metadata.Namespace, name: st.app.Metadata.Name,
		project: st.app.Spec.project(), labels: labels, rv: st.rv, app: st.data,
	}
}

// snapshot decodes the last published object (a deep copy).
func (st *appState) snapshot() Application {
	var a Application
	_ = json.Unmarshal(st.data, &a)
	return a
}

// clone deep-copies v through JSON.
func clone[T any](v T) T {
	var out T
	b, err := json.Marshal(v)
	if err != nil {
		return out
	}
	_ = json.Unmarshal(b, &out)
	return out
}

// ---- comparison (what the repo-server and the controller's diff do) ----

type target struct {
	revision  string
	objects   []object
	files     map[string][]byte
	overrides string // sourceOverrides of the source
	err       error  // manifest generation failure, shown as ComparisonError
}

// revCache memoises revision resolution within one Reconcile pass.
type revCache struct {
	mu sync.Mutex
	m  map[string]string
}

func newRevCache() *revCache { return &revCache{m: map[string]string{}} }

func (s *Server) resolve(ctx context.Context, repoURL, revision string, rc *revCache) (string, error) {
	key := repoURL + "\x00" + revision
	if rc != nil {
		rc.mu.Lock()
		sha, ok := rc.m[key]
		rc.mu.Unlock()
		if ok {
			return sha, nil
		}
	}
	sha, err := s.git.Resolve(ctx, repoURL, revision)
	if err == nil && rc != nil {
		rc.mu.Lock()
		rc.m[key] = sha
		rc.mu.Unlock()
	}
	return sha, err
}

// loadTarget generates the desired state of spec at revision.
func (s *Server) loadTarget(ctx context.Context, spec ApplicationSpec, revision string, rc *revCache) target {
	if len(spec.Sources) > 1 {
		return s.loadSources(ctx, spec, revision, rc)
	}
	src := spec.primarySource()
	if src.RepoURL == "" {
		return target{err: errors.New("spec.source.repoURL is required")}
	}
	sha, err := s.resolve(ctx, src.RepoURL, revision, rc)
	if isRepoServerDown(err) {
		return target{err: err}
	}
	if err != nil {
		return target{err: fmt.Errorf("Unable to resolve '%s' to a commit SHA: %v", firstNonEmpty(revision, "HEAD"), err)}
	}
	files, err := s.git.ReadTree(ctx, src.RepoURL, sha, src.Path)
	if err != nil {
		if errors.Is(err, ErrPathNotFound) {
			return target{revision: sha, err: fmt.Errorf("%s: app path does not exist", firstNonEmpty(src.Path, "."))}
		}
		return target{revision: sha, err: err}
	}
	for name := range files {
		if base := name[strings.LastIndexByte(name, '/')+1:]; base == "kustomization.yaml" || base == "kustomization.yml" || base == "Kustomization" {
			delete(files, name) // the fake renders directories only; ignore kustomize's own file
		}
	}
	objs, err := parseManifests(src, spec.Destination.Namespace, files)
	if err != nil {
		return target{revision: sha, files: files, err: err}
	}
	return target{revision: sha, objects: objs, files: files, overrides: sourceOverrides(src)}
}

// sourceOverrides is a canonical form of the source's Helm and Kustomize settings. The fake
// renders plain directories only, so it cannot see what a changed Helm parameter or Kustomize
// image would render; it counts any change of them as a change of every object, so an app
// whose overrides were edited (UpdateGitOpsApp) is OutOfSync until synced, as on Argo CD.
func sourceOverrides(src ApplicationSource) string {
	canon := func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return ""
		}
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return string(raw)
		}
		if m, ok := v.(map[string]any); ok && len(m) == 0 {
			return ""
		}
		b, _ := json.Marshal(v) // map keys sorted
		return string(b)
	}
	h, k := canon(src.Helm), canon(src.Kustomize)
	if h == "" && k == "" {
		return ""
	}
	return "helm=" + h + " kustomize=" + k
}

func comparisonMessage(err error) string {
	if isRepoServerDown(err) {
		return "Failed to load target state: failed to generate manifest for source 1 of 1: " + err.Error()
	}
	return "Failed to load target state: failed to generate manifest for source 1 of 1: rpc error: code = Unknown desc = " + err.Error()
}

// reconcileApp is one pass of the application controller over an app:
// compare git with what is deployed, update sync, health and conditions,
// then auto-sync if the policy says so.
func (s *Server) reconcileApp(ctx context.Context, key string, rc *revCache) {
	s.mu.Lock()
	st := s.apps[key]
	s.mu.Unlock()
	if st == nil {
		return
	}
	st.reconcileMu.Lock()
	defer st.reconcileMu.Unlock()

	s.mu.Lock()
	if st.gone {
		s.mu.Unlock()
		return
	}
	spec := clone(st.app.Spec)
	s.mu.Unlock()

	tg := s.loadTarget(ctx, spec, spec.primarySource().TargetRevision, rc)
	if ctx.Err() != nil {
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if st.gone {
		return
	}
	s.applyComparison(st, tg)
	s.commit(st, EventModified)
	s.maybeAutoSync(st, tg)
}

// applyComparison writes the comparison result into st's status. Callers
// hold s.mu.
func (s *Server) applyComparison(st *appState, tg target) {
	now := s.now()
	app := &st.app
	src := app.Spec.primarySource()
	app.Status.Sync.ComparedTo = ComparedTo{Source: src, Destination: app.Spec.Destination, Sources: app.Spec.Sources}
	app.Status.Sync.Revision = firstNonEmpty(st.revOverride, tg.revision)

	var conds []ApplicationCondition
	var prevCompErr *ApplicationCondition
	for i, c := range app.Status.Conditions {
		if c.Type == "ComparisonError" {
			prevCompErr = &app.Status.Conditions[i]
			continue
		}
		conds = append(conds, c)
	}
	if tg.err != nil {
		msg := comparisonMessage(tg.err)
		c := ApplicationCondition{Type: "ComparisonError", Message: msg, LastTransitionTime: timePtr(now)}
		if prevCompErr != nil && prevCompErr.Message == msg {
			c.LastTransitionTime = prevCompErr.LastTransitionTime
		}
		conds = append(conds, c)
		app.Status.Sync.Status = SyncStatusUnknown
	} else {
		st.target = tg.objects
		resources, synced := diffResources(tg.objects, st.live)
		if synced && st.live != nil && st.live.overrides != tg.overrides {
			synced = false
			for i := range resources {
				resources[i].Status = SyncStatusOutOfSync
			}
		}
		app.Status.Resources = resources
		if synced {
			app.Status.Sync.Status = SyncStatusSynced
		} else {
			app.Status.Sync.Status = SyncStatusOutOfSync
		}
	}
	app.Status.Conditions = conds
	h := s.computeHealth(st, tg)
	if st.healthPin == nil && tg.err == nil {
		h = resourceHealth(app.Status.Resources, st.live, h)
	}
	s.setHealth(st, h, now)
	app.Status.ReconciledAt = timePtr(now)
	app.Status.ObservedAt = timePtr(now)
	app.Status.SourceType = sourceType(src)
	app.Status.ResourceHealthSource = "appTree"
	app.Status.ControllerNamespace = defaultNamespace
	if _, ok := app.Metadata.Annotations[refreshAnnotation]; ok {
		delete(app.Metadata.Annotations, refreshAnnotation)
		if len(app.Metadata.Annotations) == 0 {
			app.Metadata.Annotations = nil
		}
	}
}

func sourceType(src ApplicationSource) string {
	switch {
	case len(src.Helm) > 0 || src.Chart != "":
		return "Helm"
	case len(src.Kustomize) > 0:
		return "Kustomize"
	case len(src.Plugin) > 0:
		return "Plugin"
	default:
		return "Directory"
	}
}

// diffResources compares desired objects with live ones, object by object,
// so that reformatting a file does not make an app OutOfSync.
func diffResources(desired []object, live *liveState) ([]ResourceStatus, bool) {
	liveByKey := map[string]object{}
	if live != nil {
		for _, o := range live.objects {
			liveByKey[o.key()] = o
		}
	}
	synced := true
	var out []ResourceStatus
	seen := map[string]bool{}
	for _, o := range desired {
		seen[o.key()] = true
		status := SyncStatusSynced
		if l, ok := liveByKey[o.key()]; !ok || l.canon != o.canon {
			status = SyncStatusOutOfSync
			synced = false
		}
		out = append(out, ResourceStatus{Group: o.Group, Version: o.Version, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Status: status})
	}
	if live != nil {
		for _, o := range live.objects {
			if !seen[o.key()] {
				synced = false
				out = append(out, ResourceStatus{Group: o.Group, Version: o.Version, Kind: o.Kind, Namespace: o.Namespace,
					Name: o.Name, Status: SyncStatusOutOfSync, RequiresPruning: true})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out, synced
}

func (s *Server) computeHealth(st *appState, tg target) HealthStatus {
	if st.healthPin != nil {
		return *st.healthPin
	}
	if st.live == nil {
		if tg.err != nil {
			if st.app.Status.Health.Status != "" {
				return HealthStatus{Status: st.app.Status.Health.Status, Message: st.app.Status.Health.Message}
			}
			return HealthStatus{Status: HealthUnknown}
		}
		if len(tg.objects) == 0 {
			return HealthStatus{Status: HealthHealthy}
		}
		return HealthStatus{Status: HealthMissing}
	}
	if len(st.live.objects) == 0 {
		return HealthStatus{Status: HealthHealthy}
	}
	h := s.health(st.snapshotLocked(), st.live.files)
	if h.Status == "" {
		h.Status = HealthUnknown
	}
	return h
}

// resourceHealth puts health on the live resources as Argo CD v3 does, and takes the message
// off the app: v3 reports status.health without a message, the reason is on the resource
// (status.resources[].health.message). ConfigMaps get the realenv's Lua check (a `simulate`
// marker; Healthy otherwise); other kinds only when they carry the marker. A non-healthy app
// whose reason no resource shows puts it on the first live resource.
func resourceHealth(res []ResourceStatus, live *liveState, app HealthStatus) HealthStatus {
	if live == nil {
		return app
	}
	byKey := map[string]object{}
	for _, o := range live.objects {
		byKey[o.key()] = o
	}
	shown := false
	first := -1
	for i := range res {
		r := &res[i]
		o, ok := byKey[object{Group: r.Group, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}.key()]
		if !ok {
			continue
		}
		if first < 0 {
			first = i
		}
		if m := simulateJSONRe.FindStringSubmatch(o.canon); m != nil && m[1] != "healthy" {
			status := map[string]string{"degraded": HealthDegraded, "progressing": HealthProgressing, "suspended": HealthSuspended}[m[1]]
			r.Health = &HealthStatus{Status: status, Message: "data.simulate is " + m[1]}
			shown = shown || status == app.Status
		} else if r.Kind == "ConfigMap" {
			r.Health = &HealthStatus{Status: HealthHealthy}
		}
	}
	if app.Status != HealthHealthy && app.Message != "" && !shown && first >= 0 {
		res[first].Health = &HealthStatus{Status: app.Status, Message: app.Message}
	}
	app.Message = ""
	return app
}

// simulateJSONRe finds the health marker in an object's canonical JSON.
var simulateJSONRe = regexp.MustCompile(`"simulate":"(degraded|progressing|suspended|healthy)"`)

// snapshotLocked is a deep copy of the in-memory object.
func (st *appState) snapshotLocked() Application { return clone(st.app) }

func (s *Server) setHealth(st *appState, h HealthStatus, now time.Time) {
	prev := st.app.Status.Health
	h.LastTransitionTime = prev.LastTransitionTime
	if prev.Status != h.Status || h.LastTransitionTime == nil {
		h.LastTransitionTime = timePtr(now)
	}
	st.app.Status.Health = h
}

// maybeAutoSync starts an automated sync like the controller's auto-sync:
// only when OutOfSync, no operation is running, and this revision was not
// auto-synced before (unless selfHeal after a success). Callers hold s.mu.
func (s *Server) maybeAutoSync(st *appState, tg target) {
	app := &st.app
	pol := app.Spec.SyncPolicy
	if !pol.automatedEnabled() || app.Operation != nil || app.Metadata.DeletionTimestamp != nil || tg.err != nil {
		return
	}
	if app.Status.Sync.Status != SyncStatusOutOfSync {
		return
	}
	if st.lastAutoSync == tg.revision && (!pol.Automated.SelfHeal || st.lastAutoSyncFailed) {
		return // "Skipping auto-sync: most recent sync already to <rev>"
	}
	if len(tg.objects) == 0 && !pol.Automated.AllowEmpty {
		return // auto-sync would wipe out all resources
	}
	if s.syncBlocked(app, false) != nil {
		return // "Sync prevented by sync window"
	}
	op := Operation{
		Sync:        &SyncOperation{Revision: tg.revision, Prune: pol.Automated.Prune, SyncOptions: pol.SyncOptions},
		InitiatedBy: OperationInitiator{Automated: true},
	}
	if pol.Retry != nil {
		op.Retry = *pol.Retry
	}
	st.lastAutoSync = tg.revision
	st.lastAutoSyncFailed = false
	s.startOperation(st, op, nil)
}

// ---- operations ----

var (
	// ErrOperationInProgress is returned when an app already runs an operation.
	ErrOperationInProgress = errors.New("another operation is already in progress")
	// ErrAppNotFound is returned by the test API for unknown apps.
	ErrAppNotFound = errors.New("application not found")
	// ErrAppExists is returned by AddApp for a name in use.
	ErrAppExists = errors.New("application already exists")
	// ErrNoOperation is returned when there is no operation to act on.
	ErrNoOperation = errors.New("no operation is in progress")
)

// startOperation sets app.operation like argo.SetAppOperation (which also
// clears status.operationState: a new operation shows a null operationState
// for one event) and hands it to the controller. Callers hold s.mu.
func (s *Server) startOperation(st *appState, op Operation, script *SyncScript) error {
	if st.app.Operation != nil {
		return ErrOperationInProgress
	}
	if s.closed {
		return errClosed
	}
	if script == nil {
		script = st.script
		st.script = nil
	}
	run := &opRun{term: make(chan struct{}), release: make(chan struct{})}
	if script != nil {
		run.script = *script
	}
	st.app.Operation = &op
	st.app.Status.OperationState = nil
	st.op = run
	st.epoch++
	if !st.pinSticky {
		st.healthPin = nil
	}
	s.commit(st, EventModified)
	key := st.key
	s.goBackground(func() { s.runOperation(key, run) })
	return nil
}

// current returns the app if run is still its operation. Callers hold s.mu.
func (s *Server) current(key string, run *opRun) (*appState, bool) {
	st := s.apps[key]
	if st == nil || st.gone || st.op != run {
		return nil, false
	}
	return st, true
}

// opWait waits d; false when the operation was terminated or the server closes.
func (s *Server) opWait(run *opRun, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	return opAwait(s, run, t.C)
}

// waitRelease waits for ReleaseOperation; false when the operation was terminated or the
// server closes.
func (s *Server) waitRelease(run *opRun) bool {
	return opAwait(s, run, run.release)
}

// opAwait waits for ch; false when the operation was terminated or the server closes first.
func opAwait[T any](s *Server, run *opRun, ch <-chan T) bool {
	select {
	case <-ch:
		return true
	case <-run.term:
		return false
	case <-s.ctx.Done():
		return false
	}
}

// runOperation is the controller executing a sync operation, one status
// update per step: pick-up (Running), tasks running, tasks done, then the
// final phase with sync and health still unchanged, then the refresh that
// shows Synced and the health progression.
func (s *Server) runOperation(key string, run *opRun) {
	sc := run.script
	if !s.opWait(run, s.step) {
		s.endTerminated(key, run)
		return
	}
	st := s.lockCurrent(key, run)
	if st == nil {
		return
	}
	started := s.now()
	st.app.Status.OperationState = &OperationState{Operation: clone(*st.app.Operation), Phase: PhaseRunning, StartedAt: NewTime(started)}
	s.commit(st, EventModified)
	spec := clone(st.app.Spec)
	op := clone(*st.app.Operation)
	s.mu.Unlock()
	if op.Sync == nil {
		op.Sync = &SyncOperation{}
	}

	for attempt := 0; ; attempt++ {
		tg := s.loadTarget(s.ctx, spec, firstNonEmpty(op.Sync.Revision, spec.primarySource().TargetRevision), nil)
		reported := firstNonEmpty(sc.Revision, tg.revision)

		// Tasks running.
		if st = s.nextStep(key, run); st == nil {
			return
		}
		state := st.app.Status.OperationState
		state.Message = "one or more tasks are running"
		state.SyncResult = &SyncOperationResult{Revision: reported, Source: spec.primarySource(),
			Resources: resourceResults(tg, st.live, op.Sync, false)}
		s.commit(st, EventModified)
		s.mu.Unlock()

		if sc.Hold > 0 && !s.opWait(run, sc.Hold) {
			s.endTerminated(key, run)
			return
		}
		if sc.Hang && !s.waitRelease(run) {
			s.endTerminated(key, run)
			return
		}

		// Tasks done.
		if st = s.nextStep(key, run); st == nil {
			return
		}
		state = st.app.Status.OperationState
		denied := s.deniedLocked(spec.Project, tg.objects) // the project's resource rules (preview.go)
		failed := tg.err != nil || attempt < sc.FailAttempts || len(denied) > 0
		if len(denied) > 0 {
			state.SyncResult.Resources = denied
		}
		if !failed {
			state.SyncResult.Resources = resourceResults(tg, st.live, op.Sync, true)
		}
		s.commit(st, EventModified)
		s.mu.Unlock()

		// Final phase.
		if st = s.nextStep(key, run); st == nil {
			return
		}
		now := s.now()
		state = st.app.Status.OperationState
		if failed {
			phase, msg := PhaseFailed, firstNonEmpty(sc.FailMessage, "one or more objects failed to apply, reason: simulated failure (argocdtest)")
			if tg.err != nil {
				phase, msg = PhaseError, "ComparisonError: "+comparisonMessage(tg.err)
			} else if len(denied) > 0 {
				msg = "one or more synchronization tasks are not valid"
			}
			if op.Retry.Limit < 0 || int64(attempt) < op.Retry.Limit {
				state.RetryCount = int64(attempt + 1)
				state.Message = fmt.Sprintf("%s. Retrying attempt #%d at %s.", msg, attempt+1, now.Add(s.step).Format(time.Kitchen))
				s.commit(st, EventModified)
				s.mu.Unlock()
				if !s.opWait(run, s.step) {
					s.endTerminated(key, run)
					return
				}
				continue
			}
			state.Phase, state.Message, state.FinishedAt = phase, msg, timePtr(now)
			st.app.Operation, st.op = nil, nil
			if op.InitiatedBy.Automated {
				st.lastAutoSyncFailed = true
			}
			if !st.pinSticky {
				st.healthPin = nil
			}
			s.commit(st, EventModified)
			s.mu.Unlock()
			if s.sleep(s.step) {
				s.reconcileApp(s.ctx, key, nil)
			}
			return
		}

		state.Phase, state.Message, state.FinishedAt = PhaseSucceeded, "successfully synced (all tasks run)", timePtr(now)
		st.app.Operation, st.op = nil, nil
		var seq []HealthStatus
		sticky := false
		if !op.Sync.DryRun {
			st.live = newLive(tg, st.live, op.Sync.Prune, reported)
			st.revOverride = sc.Revision
			st.app.Status.History = append(st.app.Status.History, RevisionHistory{
				Revision: reported, DeployedAt: NewTime(now), ID: st.historyID, Source: spec.primarySource(),
				DeployStartedAt: timePtr(started), InitiatedBy: op.InitiatedBy,
			})
			st.historyID++
			limit := int64(10)
			if spec.RevisionHistoryLimit != nil {
				limit = *spec.RevisionHistoryLimit
			}
			if over := int64(len(st.app.Status.History)) - limit; over > 0 {
				st.app.Status.History = st.app.Status.History[over:]
			}
			seq, sticky = s.healthSequence(sc)
			st.healthPin, st.pinSticky = nil, false
		}
		epoch := st.epoch
		s.commit(st, EventModified)
		s.mu.Unlock()

		if len(seq) == 0 {
			seq = []HealthStatus{{}}
		}
		s.progress(key, epoch, seq, sticky, sc.CompareAfter)
		return
	}
}

// healthSequence is the health shown after a successful sync, one event per
// entry; an empty Status means "computed by the HealthFunc".
func (s *Server) healthSequence(sc SyncScript) ([]HealthStatus, bool) {
	if len(sc.Health) > 0 {
		seq := make([]HealthStatus, len(sc.Health))
		for i, h := range sc.Health {
			seq[i] = HealthStatus{Status: h}
		}
		return seq, true
	}
	// Progressing messages count up like a Deployment's rollout, so every
	// step is a visible change (an unchanged object publishes nothing).
	rollout := func(i, n int) HealthStatus {
		return HealthStatus{Status: HealthProgressing,
			Message: fmt.Sprintf("Waiting for rollout to finish: %d of %d updated replicas are available...", i, n)}
	}
	if sc.Progressing < 0 {
		return []HealthStatus{rollout(0, 1)}, true
	}
	n := s.progressingSteps
	if sc.Progressing > 0 {
		n = sc.Progressing
	}
	seq := make([]HealthStatus, 0, n+1)
	for i := 0; i < n; i++ {
		seq = append(seq, rollout(i, n))
	}
	return append(seq, HealthStatus{}), false
}

// progress walks the post-sync health sequence, one refresh per step,
// unless a newer operation started meanwhile.
func (s *Server) progress(key string, epoch int, seq []HealthStatus, sticky bool, compareAfter time.Duration) {
	for i, h := range seq {
		wait := s.step
		if i == 0 {
			wait += compareAfter
		}
		if !s.sleep(wait) {
			return
		}
		s.mu.Lock()
		st := s.apps[key]
		if st == nil || st.gone || st.epoch != epoch {
			s.mu.Unlock()
			return
		}
		if h.Status == "" {
			st.healthPin, st.pinSticky = nil, false
		} else {
			pin := h
			st.healthPin, st.pinSticky = &pin, sticky && i == len(seq)-1
		}
		s.mu.Unlock()
		s.reconcileApp(s.ctx, key, nil)
	}
}

// nextStep waits one step of run, then locks s.mu with run's app still current. When the wait
// is cut short, or the operation was terminated or replaced, it ends the operation as
// terminated and returns nil with s.mu unlocked.
func (s *Server) nextStep(key string, run *opRun) *appState {
	if !s.opWait(run, s.step) {
		s.endTerminated(key, run)
		return nil
	}
	st := s.lockCurrent(key, run)
	if st != nil && run.terminated() {
		s.mu.Unlock()
		st = nil
	}
	if st == nil {
		s.endTerminated(key, run)
	}
	return st
}

// lockCurrent locks s.mu with run still the operation of the app at key; nil (s.mu unlocked)
// when the app is gone or runs another operation.
func (s *Server) lockCurrent(key string, run *opRun) *appState {
	s.mu.Lock()
	st, ok := s.current(key, run)
	if !ok {
		s.mu.Unlock()
		return nil
	}
	return st
}

// endTerminated finishes a terminated operation: Terminating becomes Failed
// with "Operation terminated" on the controller's next step.
func (s *Server) endTerminated(key string, run *opRun) {
	if s.ctx.Err() != nil || !run.terminated() {
		return
	}
	if !s.sleep(s.step) {
		return
	}
	st := s.lockCurrent(key, run)
	if st == nil {
		return
	}
	if state := st.app.Status.OperationState; state != nil {
		state.Phase, state.Message, state.FinishedAt = PhaseFailed, "Operation terminated", timePtr(s.now())
	}
	st.app.Operation, st.op = nil, nil
	if !st.pinSticky {
		st.healthPin = nil
	}
	s.commit(st, EventModified)
	s.mu.Unlock()
	s.reconcileApp(s.ctx, key, nil)
}

func newLive(tg target, prev *liveState, prune bool, revision string) *liveState {
	objs := append([]object(nil), tg.objects...)
	if !prune && prev != nil {
		want := map[string]bool{}
		for _, o := range tg.objects {
			want[o.key()] = true
		}
		for _, o := range prev.objects {
			if !want[o.key()] {
				objs = append(objs, o) // not pruned: stays live, app stays OutOfSync
			}
		}
	}
	return &liveState{revision: revision, objects: objs, files: tg.files, overrides: tg.overrides}
}

// resourceResults is syncResult.resources: per object what the sync did.
func resourceResults(tg target, live *liveState, sync *SyncOperation, done bool) []ResourceResult {
	liveByKey := map[string]object{}
	if live != nil {
		for _, o := range live.objects {
			liveByKey[o.key()] = o
		}
	}
	suffix := ""
	if sync.DryRun {
		suffix = " (dry run)"
	}
	phase := "Running"
	if done {
		phase = "Succeeded"
	}
	var out []ResourceResult
	want := map[string]bool{}
	for _, o := range tg.objects {
		want[o.key()] = true
		r := ResourceResult{Group: o.Group, Version: o.Version, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
			HookPhase: phase, SyncPhase: "Sync"}
		if done {
			r.Status = "Synced"
			switch l, ok := liveByKey[o.key()]; {
			case !ok:
				r.Message = o.ref() + " created" + suffix
			case l.canon != o.canon:
				r.Message = o.ref() + " configured" + suffix
			default:
				r.Message = o.ref() + " unchanged" + suffix
			}
		}
		out = append(out, r)
	}
	if live != nil && done {
		for _, o := range live.objects {
			if want[o.key()] {
				continue
			}
			r := ResourceResult{Group: o.Group, Version: o.Version, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
				HookPhase: phase, SyncPhase: "Sync", Status: "PruneSkipped", Message: "ignored (requires pruning)"}
			if sync.Prune {
				r.Status, r.Message = "Pruned", "pruned"+suffix
			}
			out = append(out, r)
		}
	}
	return out
}

// ---- deletion ----

func isArgoFinalizer(f string) bool {
	return f == "resources-finalizer.argocd.argoproj.io" || strings.HasPrefix(f, "resources-finalizer.argocd.argoproj.io/")
}

// deleteApp deletes st like the API server plus controller: cascade adds the
// resources finalizer, the object gets a deletionTimestamp, and the
// controller removes it one step later (DELETED). Callers hold s.mu.
func (s *Server) deleteApp(st *appState, cascade bool, finalizer string) {
	fins := st.app.Metadata.Finalizers
	changed := false
	if cascade {
		if !contains(fins, finalizer) {
			fins = append(fins, finalizer)
			changed = true
		}
	} else {
		var kept []string
		for _, f := range fins {
			if !isArgoFinalizer(f) {
				kept = append(kept, f)
			}
		}
		changed = len(kept) != len(fins)
		fins = kept
	}
	st.app.Metadata.Finalizers = fins
	if changed {
		s.commit(st, EventModified)
	}
	s.beginDeletion(st)
}

// beginDeletion is the Kubernetes side of a delete: without finalizers the
// object goes at once; otherwise it gets a deletionTimestamp and the
// controller removes Argo CD's finalizers one step later. Callers hold s.mu.
func (s *Server) beginDeletion(st *appState) {
	if len(st.app.Metadata.Finalizers) == 0 {
		s.removeApp(st)
		return
	}
	if st.app.Metadata.DeletionTimestamp == nil {
		st.app.Metadata.DeletionTimestamp = timePtr(s.now())
		s.commit(st, EventModified)
	}
	hasArgo := false
	for _, f := range st.app.Metadata.Finalizers {
		hasArgo = hasArgo || isArgoFinalizer(f)
	}
	if !hasArgo {
		return // someone else's finalizer: stays terminating, as in Kubernetes
	}
	key := st.key
	s.goBackground(func() {
		if !s.sleep(s.step) {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.apps[key]
		if st == nil || st.gone {
			return
		}
		var kept []string
		for _, f := range st.app.Metadata.Finalizers {
			if !isArgoFinalizer(f) {
				kept = append(kept, f)
			}
		}
		st.app.Metadata.Finalizers = kept
		if len(kept) == 0 {
			s.removeApp(st)
			return
		}
		s.commit(st, EventModified)
	})
}

// removeApp drops st and publishes DELETED. Callers hold s.mu.
func (s *Server) removeApp(st *appState) {
	st.gone = true
	delete(s.apps, st.key)
	if st.op != nil {
		st.op.terminate()
	}
	s.commit(st, EventDeleted)
	// The ApplicationSet controller watches the Applications it owns: a deleted one makes
	// it regenerate the set, which creates the app again (with a new uid) while the set
	// still generates it.
	for _, o := range st.app.Metadata.OwnerReferences {
		if o.Kind != "ApplicationSet" {
			continue
		}
		key := st.app.Metadata.Namespace + "/" + o.Name
		if ast := s.appsets[key]; ast != nil && ownedBy(&st.app, &ast.as) {
			s.queueRegenerate(key)
		}
	}
}
