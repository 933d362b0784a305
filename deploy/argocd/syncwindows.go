package argocd

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/syncwindow"
)

// Sync windows: Argo CD says which windows of an app's AppProject apply to the app (GET
// /api/v1/applications/{name}/syncwindows) but not until when they block, and nothing tells
// when a window opens. So the agent caches each app's assigned windows, reads each project
// (one call per project and refresh period) to notice edits and to learn the windows' time
// zones, and re-evaluates an app's record when one of its windows starts or ends. Records
// are rewritten only when the state changes.

// windows caches what the agent knows about sync windows. Safe for concurrent use.
type windows struct {
	a *Agent

	// put serialises computing a record's windows and writing it, so a write with an
	// older view of the windows cannot land after one with a newer view.
	put sync.Mutex

	mu       sync.Mutex
	projects map[string]*projWindows
	apps     map[string]*appWindows     // by app ref
	last     map[string]agent.AppStatus // the latest record of each app, windows aside
	warned   map[string]bool
}

type projWindows struct {
	rv       string
	readable bool              // the agent may read the project (RBAC projects, get)
	has      bool              // it has sync windows at all
	tz       map[string]string // kind+schedule+duration (unique per project) → time zone
	fetched  time.Time
}

type appWindows struct {
	ident   string // project and destination the windows were read for
	projRV  string
	windows []syncwindow.Window
	fetched time.Time
	due     time.Time          // re-evaluate at (a window starts or ends)
	state   *agent.SyncWindows // last evaluated
	written *agent.SyncWindows // last written into the record
}

func newWindows(a *Agent) *windows {
	return &windows{a: a, projects: map[string]*projWindows{}, apps: map[string]*appWindows{},
		last: map[string]agent.AppStatus{}, warned: map[string]bool{}}
}

func windowIdent(st *agent.AppStatus) string {
	return st.Project + "|" + st.Cluster + "|" + st.ClusterServer + "|" + st.Namespace
}

// current is the windows state of an app's record from the cache ("valid" false when the
// cache has nothing for this app as it is now).
func (w *windows) current(st *agent.AppStatus, now time.Time) (*agent.SyncWindows, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	aw := w.apps[st.Ref()]
	if aw == nil || aw.ident != windowIdent(st) {
		return nil, false
	}
	return w.evaluateLocked(aw, now), true
}

func (w *windows) evaluateLocked(aw *appWindows, now time.Time) *agent.SyncWindows {
	if aw.state == nil || !now.Before(aw.due) {
		aw.state = syncwindow.Evaluate(aw.windows, now)
		aw.due = far
		if next := syncwindow.NextChange(aw.windows, now); !next.IsZero() {
			aw.due = next.Add(time.Second) // an allow window is open only after its start
		}
	}
	return aw.state
}

var far = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// write puts st (from the watch or a re-list) with its windows from the cache, remembering it
// for re-evaluation.
func (w *windows) write(ctx context.Context, wr *agent.Writer, st agent.AppStatus) (bool, error) {
	w.put.Lock()
	defer w.put.Unlock()
	st.SyncWindows = nil
	w.mu.Lock()
	// A re-list's snapshot can land after a newer stream event: keep the newer for rewrite.
	if prev, ok := w.last[st.Ref()]; !ok || !olderRV(st.ResourceVersion, prev.ResourceVersion) {
		w.last[st.Ref()] = st
	}
	w.mu.Unlock()
	st.SyncWindows, _ = w.current(&st, w.a.now())
	wrote, err := wr.Put(ctx, st)
	if err == nil {
		w.mu.Lock()
		if aw := w.apps[st.Ref()]; aw != nil && aw.ident == windowIdent(&st) {
			aw.written = st.SyncWindows
		}
		w.mu.Unlock()
	}
	return wrote, err
}

// retain forgets the apps not in present (after a full list).
func (w *windows) retain(present map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ref := range w.last {
		if !present[ref] {
			delete(w.last, ref)
			delete(w.apps, ref)
		}
	}
}

// forget drops a deleted app.
func (w *windows) forget(ref string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, ref)
	delete(w.apps, ref)
}

// loop keeps the windows of the records current until ctx ends: every tick it reads the
// projects when their refresh is due, fetches the windows of apps it has none (or stale
// ones) for, and rewrites the records whose windows state changed.
func (w *windows) loop(ctx context.Context, wr *agent.Writer) {
	t := time.NewTicker(w.a.o.SyncWindowTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.a.stale.Load() {
			// Argo CD cannot be seen: a rewrite would clear the records' stale marks; the
			// re-list after recovery writes them with their windows.
			continue
		}
		w.refresh(ctx)
		w.rewrite(ctx, wr)
	}
}

// refresh reads the projects of known apps when their period is up, then the windows of
// the apps whose cache is missing or older than their project. Periods are wall-clock time
// (the windows' clock, Options.Now, may be moved by tests).
func (w *windows) refresh(ctx context.Context) {
	now := time.Now()
	w.mu.Lock()
	projSet := map[string]bool{}
	for _, st := range w.last {
		projSet[st.Project] = true
	}
	var stale []string
	for p := range projSet {
		if pw := w.projects[p]; pw == nil || now.Sub(pw.fetched) >= w.a.o.SyncWindowRefresh || now.Before(pw.fetched) {
			stale = append(stale, p)
		}
	}
	w.mu.Unlock()
	sort.Strings(stale)
	for _, p := range stale {
		w.readProject(ctx, p, now)
	}

	w.mu.Lock()
	type todo struct {
		ref string
		st  agent.AppStatus
	}
	var fetch []todo
	for ref, st := range w.last {
		pw := w.projects[st.Project]
		aw := w.apps[ref]
		ident := windowIdent(&st)
		switch {
		case pw != nil && pw.readable && !pw.has:
			// The project has no windows: nothing to ask per app.
			if aw == nil || aw.ident != ident || aw.projRV != pw.rv {
				nw := &appWindows{ident: ident, projRV: pw.rv, fetched: now}
				if aw != nil {
					nw.written = aw.written
				}
				w.apps[ref] = nw
			}
		case aw == nil || aw.ident != ident || (pw != nil && pw.readable && aw.projRV != pw.rv) ||
			((pw == nil || !pw.readable) && now.Sub(aw.fetched) >= w.a.o.SyncWindowRefresh):
			fetch = append(fetch, todo{ref, st})
		}
	}
	w.mu.Unlock()
	sort.Slice(fetch, func(i, j int) bool { return fetch[i].ref < fetch[j].ref })
	for _, f := range fetch {
		if ctx.Err() != nil {
			return
		}
		aw := w.fetch(ctx, &f.st, now)
		if aw == nil {
			continue
		}
		w.mu.Lock()
		if prev := w.apps[f.ref]; prev != nil {
			aw.written = prev.written
		}
		w.apps[f.ref] = aw
		w.mu.Unlock()
	}
}

// readProject reads one project's windows and resourceVersion.
func (w *windows) readProject(ctx context.Context, name string, now time.Time) {
	p, err := w.a.argo.Project(ctx, name)
	pw := &projWindows{fetched: now, tz: map[string]string{}}
	switch {
	case err == nil:
		pw.readable, pw.rv, pw.has = true, p.Metadata.ResourceVersion, len(p.Spec.SyncWindows) > 0
		for _, sw := range p.Spec.SyncWindows {
			pw.tz[sw.Kind+"\x00"+sw.Schedule+"\x00"+sw.Duration] = sw.TimeZone
		}
	case errors.Is(err, agent.ErrNotFound):
		pw.readable = true // the apps reference a project that does not exist: no windows
	case !errors.Is(err, agent.ErrUnauthorized):
		// Argo CD unreachable or failing (or ctx ended): keep what is known, try again at
		// the next tick.
		return
	default:
		// Without `projects, get` the agent still reads each app's windows, but cannot tell
		// their time zones (taken as UTC) or notice edits before the next refresh.
		w.mu.Lock()
		if !w.warned[name] {
			w.warned[name] = true
			w.a.o.Log.Warn("agent: cannot read AppProject; sync windows are read per app and their time zones taken as UTC", "project", name, "err", err)
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.projects[name] = pw
	w.mu.Unlock()
}

// fetch reads one app's assigned windows; nil when the read failed for a reason that says
// nothing about the windows (Argo CD unreachable, app deleted meanwhile).
func (w *windows) fetch(ctx context.Context, st *agent.AppStatus, now time.Time) *appWindows {
	name, ns := w.a.split(st.Ref())
	res, err := w.a.argo.SyncWindows(ctx, name, ns)
	w.mu.Lock()
	pw := w.projects[st.Project]
	w.mu.Unlock()
	aw := &appWindows{ident: windowIdent(st), fetched: now}
	if pw != nil {
		aw.projRV = pw.rv
	}
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, agent.ErrNotFound) {
			w.a.o.Log.Warn("agent: reading sync windows failed; will retry", "app", st.Ref(), "err", err)
		}
		return nil
	}
	for _, sw := range res.AssignedWindows {
		win := syncwindow.Window{Kind: sw.Kind, Schedule: sw.Schedule, Duration: sw.Duration, ManualSync: sw.ManualSync}
		if pw != nil {
			win.TimeZone = pw.tz[sw.Kind+"\x00"+sw.Schedule+"\x00"+sw.Duration]
		}
		aw.windows = append(aw.windows, win)
	}
	return aw
}

// rewrite writes the records whose windows state changed since they were written.
func (w *windows) rewrite(ctx context.Context, wr *agent.Writer) {
	now := w.a.now()
	w.mu.Lock()
	var refs []string
	for ref, st := range w.last {
		aw := w.apps[ref]
		if aw == nil || aw.ident != windowIdent(&st) {
			continue
		}
		if cur := w.evaluateLocked(aw, now); !reflect.DeepEqual(cur, aw.written) {
			refs = append(refs, ref)
		}
	}
	w.mu.Unlock()
	sort.Strings(refs)
	for _, ref := range refs {
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		st, ok := w.last[ref]
		w.mu.Unlock()
		if !ok {
			continue
		}
		if _, err := w.write(ctx, wr, st); err != nil && ctx.Err() == nil {
			w.a.o.Log.Warn("agent: write sync windows", "app", ref, "err", err)
		}
	}
}

// check reads an app's windows now, for a sync request: a refusal when they block it, nil
// when the sync may go ahead (or the windows cannot be read: Argo CD then decides alone).
func (w *windows) check(ctx context.Context, app *Application, ref string, manual bool) error {
	st := w.a.status(app)
	w.mu.Lock()
	_, known := w.projects[st.Project]
	w.mu.Unlock()
	if !known {
		w.readProject(ctx, st.Project, time.Now())
	}
	aw := w.fetch(ctx, &st, time.Now())
	if aw == nil {
		return nil
	}
	state := syncwindow.Evaluate(aw.windows, w.a.now())
	switch {
	case state == nil || !state.Blocked:
		return nil
	case !manual:
		return &agent.Error{Code: agent.CodeSyncWindow, App: ref, Message: state.Describe() + windowList(state)}
	case !state.ManualSync:
		return &agent.Error{Code: agent.CodeSyncWindow, App: ref,
			Message: state.Describe() + windowList(state) + ", and it does not allow manual syncs (manualSync: false)"}
	}
	return nil
}

// windowList names the active windows: " (deny window \"0 22 * * *\" for 8h)".
func windowList(s *agent.SyncWindows) string {
	var parts []string
	for _, w := range s.Windows {
		if w.Active || (w.Kind == "allow" && !hasActiveDeny(s)) {
			parts = append(parts, fmt.Sprintf("%s window %q for %s", w.Kind, w.Schedule, w.Duration))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	out := " ("
	for i, p := range parts {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out + ")"
}

func hasActiveDeny(s *agent.SyncWindows) bool {
	for _, w := range s.Windows {
		if w.Kind == "deny" && w.Active {
			return true
		}
	}
	return false
}

// olderRV reports whether resourceVersion a is known to be older than b.
func olderRV(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	return errA == nil && errB == nil && x < y
}
