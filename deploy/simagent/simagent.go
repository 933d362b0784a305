// Package simagent is a GitOps agent without Argo CD, for `prflow dev`: it speaks the same
// protocol as the Argo CD agent (status records in prflow-apps, sync/apps/get requests) over a
// release repo. It reads the apps an ApplicationSet with a git files generator would create,
// and "deploys" the branch's revision a short delay after a sync request — or by itself, like
// auto-sync, when the branch moves — reporting Running → Succeeded → Synced/Progressing →
// Healthy, or Degraded (Progressing, Suspended) when the app's config file says
// `simulate: degraded`. It reads the repo and never writes to it.
package simagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/syncwindow"
	"github.com/prflow/prflow/queue"
)

// Options configure the simulated agent.
type Options struct {
	// AgentID names the agent in pipelines (default "sim").
	AgentID string
	// Repo is the release repo: a local path (bare or not) or a git URL.
	Repo string
	// Branch is what is deployed (default the repo's HEAD branch).
	Branch string
	// AppSetPath is the ApplicationSet manifest's path in the repo (default: the one file of
	// kind ApplicationSet).
	AppSetPath string
	// Delay is the time between a sync request and the operation running (default 500ms).
	Delay time.Duration
	// Step is the time between two status updates of a running deployment (default 200ms).
	Step time.Duration
	// Poll is how often the branch is checked for new commits (default 1s).
	Poll time.Duration
	// ManualSync turns off deploying by itself when the branch moves.
	ManualSync bool
	// SyncWindows are Argo CD sync windows that apply to every app, with Argo CD's rules: a
	// blocked app neither deploys by itself nor accepts a sync request (one with Manual
	// passes a window with ManualSync). The records say when the block ends.
	SyncWindows []syncwindow.Window
	// Now is the clock sync windows are evaluated with (default time.Now).
	Now func() time.Time
	// UIURL prefixes app links (default "sim://<agent>").
	UIURL   string
	Version string
	Log     *slog.Logger
}

// Agent is the simulated agent.
type Agent struct {
	o    Options
	repo *releaseRepo

	mu      sync.Mutex
	head    string
	apps    map[string]*simApp // by name
	rv      int64
	started time.Time
	ops     sync.WaitGroup
	writer  *agent.Writer
	ctx     context.Context
	kick    chan struct{}
	problem string
	updMu   sync.Mutex // one Update at a time (update.go)
}

type simApp struct {
	gen         genApp
	st          agent.AppStatus
	deployed    string // revision
	deployedCfg map[string]any
	deployedRaw string
	op          *agent.Operation // current operation (nil: none ever)
	compErr     string           // the app's config file does not parse at the head (ComparisonError)
	running     bool
	epoch       int
	lastAuto    string

	// Set by Update (update.go): the source as changed, the commit a pinned targetRevision
	// resolved to ("" follows the branch) with its config, and the Helm/Kustomize overrides
	// deployed by the last sync (overrides).
	src          *agent.SourceSpec
	target       string
	targetRaw    string
	lastUpdate   *agent.LastUpdate
	deployedOver string
	opOver       string
}

// New checks the options and reads the release repo once (so a wrong path or a missing
// ApplicationSet is reported at start).
func New(o Options) (*Agent, error) {
	if o.AgentID == "" {
		o.AgentID = "sim"
	}
	if o.Repo == "" {
		return nil, errors.New("simagent: release repo is required (a path or git URL)")
	}
	if o.Delay <= 0 {
		o.Delay = 500 * time.Millisecond
	}
	if o.Step <= 0 {
		o.Step = 200 * time.Millisecond
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.UIURL == "" {
		o.UIURL = "sim://" + o.AgentID
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	for i, w := range o.SyncWindows {
		if err := syncwindow.Parse(w); err != nil {
			return nil, fmt.Errorf("simagent: sync window %d: %w", i, err)
		}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Log = o.Log.With("agent", o.AgentID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	repo, err := openRepo(ctx, o.Repo, o.Branch)
	if err != nil {
		return nil, fmt.Errorf("simagent: %w", err)
	}
	a := &Agent{o: o, repo: repo, apps: map[string]*simApp{}, kick: make(chan struct{}, 1)}
	if _, _, _, err := a.read(ctx); err != nil {
		repo.close()
		return nil, fmt.Errorf("simagent: %w", err)
	}
	return a, nil
}

// read returns the branch head, the apps the ApplicationSet generates there, and the config
// files that do not parse (path → why): they generate no app, and the apps they generated
// before show a ComparisonError, as on Argo CD — a broken file is the change's fault, not the
// agent failing to see.
func (a *Agent) read(ctx context.Context) (string, []genApp, map[string]string, error) {
	head, err := a.repo.head(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	files, err := a.repo.files(head, func(p string) bool { return isManifest(p) })
	if err != nil {
		return "", nil, nil, err
	}
	asPath, as, err := findAppSet(files, a.o.AppSetPath)
	if err != nil {
		return "", nil, nil, err
	}
	gen, err := as.generate(files)
	var broken map[string]string
	if err != nil {
		// Leave out the config files that do not parse and generate again: the others'
		// apps stay current.
		rest := map[string][]byte{}
		for p, b := range files {
			if _, perr := parseConfig(b); perr != nil && p != asPath {
				if broken == nil {
					broken = map[string]string{}
				}
				broken[p] = perr.Error()
				continue
			}
			rest[p] = b
		}
		if broken == nil {
			return "", nil, nil, err
		}
		if gen, err = as.generate(rest); err != nil {
			return "", nil, nil, err
		}
	}
	for i := range gen {
		gen[i].tmpl.Metadata.Labels = withDefault(gen[i].tmpl.Metadata.Labels)
	}
	if len(gen) > 0 && gen[0].tmpl.Spec.Project == "" {
		for i := range gen {
			gen[i].tmpl.Spec.Project = "default"
		}
	}
	return head, gen, broken, nil
}

func withDefault(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Run serves requests and keeps prflow-apps up to date until ctx ends.
func (a *Agent) Run(ctx context.Context, conn *queue.Conn) error {
	defer a.repo.close()
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.ctx = ctx
	a.started = time.Now().UTC()
	a.writer = agent.NewWriter(b.Apps, a.o.AgentID, a.o.Log)
	a.mu.Unlock()
	if err := a.writer.Seed(ctx); err != nil {
		a.o.Log.Warn("simagent: could not read existing app records", "err", err)
	}
	// The first look publishes every app; records of apps that no longer exist go.
	a.refresh(ctx)
	a.mu.Lock()
	present := map[string]bool{}
	for n := range a.apps {
		present[n] = true
	}
	a.mu.Unlock()
	if err := a.writer.Retain(ctx, present, ""); err != nil {
		a.o.Log.Warn("simagent: delete stale records", "err", err)
	}
	_ = a.writer.FlushInventory(ctx)
	wait, err := agent.Serve(ctx, conn.NC, a.o.AgentID, a, agent.ServeOptions{Log: a.o.Log})
	if err != nil {
		return err
	}
	hb, err := agent.Heartbeat(ctx, b.Agents, 10*time.Second, a.registration, a.o.Log)
	if err != nil {
		return err
	}
	a.o.Log.Info("simulated agent started", "repo", agent.RedactURL(a.o.Repo), "branch", a.repo.branch, "apps", len(a.apps))
	t := time.NewTicker(a.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wait()
			<-hb
			a.ops.Wait()
			return nil
		case <-t.C:
		case <-a.kick:
		}
		a.refresh(ctx)
		_ = a.writer.FlushInventory(ctx)
		if _, err := a.writer.Sweep(ctx, agent.TombstoneTTL); err != nil && ctx.Err() == nil {
			a.o.Log.Warn("simagent: removing old tombstones", "err", err)
		}
	}
}

func (a *Agent) registration() agent.Registration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return agent.Registration{Agent: a.o.AgentID, Replica: "sim-" + strconv.Itoa(os.Getpid()), Kind: "simulated",
		Target: agent.RedactURL(a.o.Repo) + "#" + a.repo.branch, Version: a.o.Version, Leader: true, Apps: len(a.apps),
		Healthy: a.problem == "", Problem: a.problem, Started: a.started}
}

// refresh reads the branch; new apps appear, removed ones go, moved ones turn OutOfSync and,
// unless ManualSync, start deploying.
func (a *Agent) refresh(ctx context.Context) {
	head, gen, broken, err := a.read(ctx)
	a.mu.Lock()
	if err != nil {
		if a.problem != err.Error() {
			a.o.Log.Warn("simagent: reading the release repo failed", "err", err)
		}
		a.problem = err.Error()
		a.mu.Unlock()
		return
	}
	a.problem = ""
	a.head = head
	seen := map[string]bool{}
	var gone []string
	for name, app := range a.apps {
		// An app whose config file stopped parsing stays, with the error.
		if why, ok := broken[app.gen.file]; ok {
			seen[name] = true
			msg := "ComparisonError: Failed to load target state: " + app.gen.file + " at " + short(head) + ": " + why
			if app.compErr != msg {
				a.o.Log.Warn("simagent: config file does not parse", "app", name, "file", app.gen.file, "err", why)
			}
			app.compErr = msg
			a.compareLocked(app)
		}
	}
	for _, g := range gen {
		name := g.tmpl.Metadata.Name
		seen[name] = true
		app := a.apps[name]
		if app == nil {
			// Like Argo CD, an app created (again) under a name gets a new uid.
			a.rv++
			app = &simApp{}
			app.st.UID = fmt.Sprintf("sim-%s-%d-%d", a.o.AgentID, a.started.UnixNano(), a.rv)
			app.st.CreatedAt = time.Now().UTC()
			a.apps[name] = app
		}
		app.gen, app.compErr = g, ""
		a.compareLocked(app)
		if !a.o.ManualSync && !app.running && app.st.Sync == agent.SyncOutOfSync && app.lastAuto != head &&
			(app.st.SyncWindows == nil || !app.st.SyncWindows.Blocked) {
			app.lastAuto = head
			a.startLocked(app, a.desiredRev(app), "", "", true)
		}
	}
	for name := range a.apps {
		if !seen[name] {
			gone = append(gone, name)
			delete(a.apps, name)
		}
	}
	a.mu.Unlock()
	for _, n := range gone {
		if err := a.writer.Delete(ctx, n, "", "its ApplicationSet no longer generates it"); err != nil && ctx.Err() == nil {
			a.o.Log.Warn("simagent: delete record", "app", n, "err", err)
		}
	}
}

// compareLocked recomputes an app's record from its template, config and deployed state, and
// publishes it.
func (a *Agent) compareLocked(app *simApp) {
	t := app.gen.tmpl
	st := &app.st
	st.Name, st.Project, st.Labels, st.ApplicationSet = t.Metadata.Name, t.Spec.Project, t.Metadata.Labels, app.gen.appset
	st.Namespace, st.ClusterServer = t.Spec.Destination.Namespace, t.Spec.Destination.Server
	st.Cluster = t.Spec.Destination.Name
	if st.Cluster == "" {
		st.Cluster = "in-cluster"
		if t.Spec.Destination.Server != "" && t.Spec.Destination.Server != "https://kubernetes.default.svc" {
			st.Cluster = t.Spec.Destination.Server
		}
	}
	st.Source = agent.Source{RepoURL: t.Spec.Source.RepoURL, Path: t.Spec.Source.Path, TargetRevision: t.Spec.Source.TargetRevision}
	if app.src != nil {
		st.Source.TargetRevision = app.src.TargetRevision
	}
	st.AutoSync = !a.o.ManualSync
	st.URL = a.o.UIURL + "/applications/" + t.Metadata.Name
	st.Revision = a.desiredRev(app)
	cur := fmt.Sprint(app.gen.config)
	if app.target != "" {
		cur = app.targetRaw
	}
	switch {
	case app.deployed == "":
		st.Sync = agent.SyncOutOfSync
		if st.Health == "" {
			st.Health, st.HealthMessage = agent.HealthMissing, ""
		}
	case cur == app.deployedRaw && app.deployedOver == overrides(app.src):
		st.Sync = agent.SyncSynced
	default:
		st.Sync = agent.SyncOutOfSync
	}
	st.Resources = agent.ResourceSummary{Total: 1}
	if st.Sync == agent.SyncOutOfSync {
		st.Resources.OutOfSync = 1
	}
	st.Message = ""
	if app.compErr != "" {
		// As Argo CD: the desired state cannot be computed, so the sync status is Unknown.
		st.Sync, st.Message = agent.SyncUnknown, app.compErr
	}
	st.Operation = nil
	if app.op != nil {
		op := *app.op
		st.Operation = &op
	}
	st.SyncWindows = syncwindow.Evaluate(a.o.SyncWindows, a.o.Now())
	a.publishLocked(app)
}

func (a *Agent) publishLocked(app *simApp) {
	a.rv++
	st := app.st
	st.ResourceVersion = strconv.FormatInt(a.rv, 10)
	st.ObservedAt = time.Time{}
	w := a.writer
	ctx := a.ctx
	if w == nil || ctx == nil {
		return
	}
	if _, err := w.Put(ctx, st); err != nil && ctx.Err() == nil {
		a.o.Log.Warn("simagent: write status", "app", st.Name, "err", err)
	}
}

// startLocked starts an operation deploying revision on app.
func (a *Agent) startLocked(app *simApp, revision, run, step string, automated bool) {
	app.epoch++
	epoch := app.epoch
	app.running = true
	op := &agent.Operation{Phase: agent.PhasePending, Revision: revision, RunID: run, Step: step, Automated: automated}
	if !automated {
		op.InitiatedBy = "prflow"
	}
	app.op = op
	app.opOver = overrides(app.src)
	app.st.Operation = cloneOp(op)
	a.publishLocked(app)
	name := app.st.Name
	a.ops.Add(1)
	go func() {
		defer a.ops.Done()
		a.deploy(name, epoch, revision)
	}()
}

func cloneOp(op *agent.Operation) *agent.Operation {
	c := *op
	return &c
}

// deploy walks one operation through Argo CD's visible steps.
func (a *Agent) deploy(name string, epoch int, revision string) {
	ctx := a.ctx
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// step runs f on the app if this operation is still current.
	step := func(f func(app *simApp)) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		app := a.apps[name]
		if app == nil || app.epoch != epoch {
			return false
		}
		f(app)
		a.publishLocked(app)
		return true
	}
	if !sleep(a.o.Delay) || !step(func(app *simApp) {
		app.op.Phase, app.op.StartedAt, app.op.Message = agent.PhaseRunning, time.Now().UTC().Truncate(time.Second), "one or more tasks are running"
		app.st.Operation = cloneOp(app.op)
	}) {
		return
	}
	cfg, raw, err := a.configAt(ctx, revision, name)
	if !sleep(a.o.Step) {
		return
	}
	// The phase turns Succeeded one update before sync and health do, as on Argo CD.
	if !step(func(app *simApp) {
		now := time.Now().UTC().Truncate(time.Second)
		app.op.FinishedAt = now
		if err != nil {
			app.op.Phase, app.op.Message = agent.PhaseFailed, "ComparisonError: "+err.Error()
			app.running = false
		} else {
			app.op.Phase, app.op.Message, app.op.SyncedRevision = agent.PhaseSucceeded, "successfully synced (all tasks run)", revision
		}
		app.st.Operation = cloneOp(app.op)
	}) || err != nil {
		return
	}
	final := simulated(cfg)
	if !sleep(a.o.Step) || !step(func(app *simApp) {
		// A sync that applies what is already live changes no resource, so on Argo CD the
		// health stays as it is; only a real change rolls out (Progressing first).
		unchanged := app.deployed != "" && app.deployedRaw == raw && app.st.Health == final
		app.deployed, app.deployedCfg, app.deployedRaw, app.deployedOver = revision, cfg, raw, app.opOver
		app.st.SyncedRevision = revision
		if !unchanged {
			app.st.Health, app.st.HealthMessage, app.st.HealthSince = agent.HealthProgressing, "Waiting for rollout to finish", time.Now().UTC().Truncate(time.Second)
		}
		app.running = false
		a.compareLocked(app)
	}) {
		return
	}
	if !sleep(a.o.Step) {
		return
	}
	step(func(app *simApp) {
		msg := ""
		if final != agent.HealthHealthy {
			msg = "simulated: " + app.gen.file + " says simulate: " + final
		}
		if app.st.Health != final {
			app.st.HealthSince = time.Now().UTC().Truncate(time.Second)
		}
		app.st.Health, app.st.HealthMessage = final, msg
	})
}

// configAt reads the app's config file at revision.
func (a *Agent) configAt(_ context.Context, revision, name string) (map[string]any, string, error) {
	a.mu.Lock()
	app := a.apps[name]
	file := ""
	if app != nil {
		file = app.gen.file
	}
	a.mu.Unlock()
	if file == "" {
		return nil, "", fmt.Errorf("app %s is gone", name)
	}
	files, err := a.repo.files(revision, func(p string) bool { return p == file })
	if err != nil {
		return nil, "", err
	}
	b, ok := files[file]
	if !ok {
		return nil, "", fmt.Errorf("%s does not exist at %s", file, short(revision))
	}
	cfg, err := parseConfig(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	return cfg, fmt.Sprint(cfg), nil
}

func short(sha string) string {
	if len(sha) > 8 {
		return sha[:8]
	}
	return sha
}

// ---- agent.Handler ----

// Sync implements agent.Handler.
func (a *Agent) Sync(ctx context.Context, req agent.SyncRequest) ([]agent.SyncResult, error) {
	if req.Refresh != "" {
		a.refresh(ctx)
	}
	out := make([]agent.SyncResult, len(req.Apps))
	win := syncwindow.Evaluate(a.o.SyncWindows, a.o.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, ref := range req.Apps {
		res := agent.SyncResult{App: ref, At: time.Now().UTC()}
		app := a.apps[ref]
		switch {
		case app == nil:
			res.Error = &agent.Error{Code: agent.CodeNotFound, App: ref, Message: "application not found (the ApplicationSet generates no app of that name)"}
		case app.running && app.op.Tagged(req.RunID, req.Step):
			res.AlreadyRunning, res.Revision, res.UID = true, app.op.Revision, app.st.UID
		case win != nil && win.Blocked && (!req.Manual || !win.ManualSync):
			msg := win.Describe()
			if req.Manual {
				msg += ", and it does not allow manual syncs (manualSync: false)"
			}
			res.Error = &agent.Error{Code: agent.CodeSyncWindow, App: ref, Message: msg}
		case app.running:
			who := "automated sync"
			if !app.op.Automated {
				who = "run " + app.op.RunID
			}
			res.Error = &agent.Error{Code: agent.CodeOperationInProgress, App: ref,
				Message: fmt.Sprintf("another operation is already in progress (started by %s, phase %s)", who, app.op.Phase)}
		default:
			rev := req.Revision
			if rev == "" {
				rev = a.desiredRev(app)
			}
			if req.DryRun {
				res.Revision = rev
				break
			}
			a.startLocked(app, rev, req.RunID, req.Step, false)
			res.Revision, res.UID = rev, app.st.UID
		}
		out[i] = res
	}
	return out, nil
}

// Apps implements agent.Handler.
func (a *Agent) Apps(_ context.Context, q agent.AppsQuery) ([]agent.AppStatus, error) {
	sel, err := agent.ParseSelector(q.Selector)
	if err != nil {
		return nil, &agent.Error{Code: agent.CodeInvalid, Message: err.Error()}
	}
	var re *regexp.Regexp
	if q.NameRegex != "" {
		if re, err = regexp.Compile(q.NameRegex); err != nil {
			return nil, agent.Errorf(agent.CodeInvalid, "nameRegex %q: %v", q.NameRegex, err)
		}
	}
	names := map[string]bool{}
	for _, n := range q.Names {
		names[n] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []agent.AppStatus{}
	for _, n := range sortedKeys(a.apps) {
		st := a.apps[n].st
		ok := sel.Matches(st.Labels)
		for k, v := range q.Labels {
			ok = ok && st.Labels[k] == v
		}
		switch {
		case !ok,
			q.ApplicationSet != "" && st.ApplicationSet != q.ApplicationSet,
			re != nil && !re.MatchString(st.Name),
			len(names) > 0 && !names[st.Name],
			q.Project != "" && st.Project != q.Project:
			continue
		}
		st.V, st.Agent, st.ObservedAt = agent.Version, a.o.AgentID, time.Now().UTC()
		out = append(out, st)
	}
	return out, nil
}

// Get implements agent.Handler.
func (a *Agent) Get(ctx context.Context, req agent.GetRequest) (*agent.AppStatus, error) {
	if req.Refresh != "" {
		a.refresh(ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	app := a.apps[req.App]
	if app == nil {
		return nil, &agent.Error{Code: agent.CodeNotFound, App: req.App, Message: "application not found"}
	}
	st := app.st
	st.V, st.Agent, st.ObservedAt = agent.Version, a.o.AgentID, time.Now().UTC()
	return &st, nil
}
