package argocdtest

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// SyncWindow is v1alpha1SyncWindow: when syncs of the project's matching apps are allowed or
// denied.
type SyncWindow struct {
	Kind         string   `json:"kind,omitempty"`     // allow or deny
	Schedule     string   `json:"schedule,omitempty"` // 5-field cron: when it starts
	Duration     string   `json:"duration,omitempty"` // how long it lasts
	Applications []string `json:"applications,omitempty"`
	Namespaces   []string `json:"namespaces,omitempty"`
	Clusters     []string `json:"clusters,omitempty"`
	ManualSync   bool     `json:"manualSync,omitempty"`
	TimeZone     string   `json:"timeZone,omitempty"`
	AndOperator  bool     `json:"andOperator,omitempty"`
	Description  string   `json:"description,omitempty"`
}

// AppProject is the part of v1alpha1AppProject GET /api/v1/projects/{name} returns here.
type AppProject struct {
	Metadata ObjectMeta     `json:"metadata"`
	Spec     AppProjectSpec `json:"spec"`
}

// AppProjectSpec is v1alpha1AppProjectSpec (the fields the fake keeps).
type AppProjectSpec struct {
	SourceRepos                []string                 `json:"sourceRepos,omitempty"`
	Destinations               []ApplicationDestination `json:"destinations,omitempty"`
	ClusterResourceWhitelist   []GroupKind              `json:"clusterResourceWhitelist,omitempty"`
	NamespaceResourceWhitelist []GroupKind              `json:"namespaceResourceWhitelist,omitempty"`
	NamespaceResourceBlacklist []GroupKind              `json:"namespaceResourceBlacklist,omitempty"`
	SyncWindows                []SyncWindow             `json:"syncWindows,omitempty"`
}

// ApplicationSyncWindow is applicationApplicationSyncWindow: what the app's syncwindows
// endpoint says of each window (no time zone, no selectors).
type ApplicationSyncWindow struct {
	Kind       string `json:"kind,omitempty"`
	Schedule   string `json:"schedule,omitempty"`
	Duration   string `json:"duration,omitempty"`
	ManualSync bool   `json:"manualSync,omitempty"`
}

// ApplicationSyncWindowsResponse is applicationApplicationSyncWindowsResponse.
type ApplicationSyncWindowsResponse struct {
	ActiveWindows   []ApplicationSyncWindow `json:"activeWindows,omitempty"`
	AssignedWindows []ApplicationSyncWindow `json:"assignedWindows,omitempty"`
	CanSync         bool                    `json:"canSync"`
}

// projectState is an AppProject's windows and its resourceVersion.
type projectState struct {
	windows   []SyncWindow
	rv        int64
	resources *ProjectResources // nil: every kind permitted (SetProjectResources)
}

// touchProjectLocked registers project for a change of its spec and takes the next resource
// version for it (s.rv); callers hold s.mu.
func (s *Server) touchProjectLocked(project string) {
	s.projects[project] = true
	if s.projectSpecs == nil {
		s.projectSpecs = map[string]*projectState{}
	}
	s.rv++
}

// SetSyncWindows replaces an AppProject's spec.syncWindows (creating the project when
// needed), checked as Argo CD's project validation does: kind allow|deny, a schedule and
// duration that parse, a known time zone, at least one of applications, namespaces and
// clusters, and no two windows with the same kind, schedule and duration.
func (s *Server) SetSyncWindows(project string, windows ...SyncWindow) error {
	seen := map[string]bool{}
	for i, w := range windows {
		if _, err := parseWindow(w); err != nil {
			return fmt.Errorf("argocdtest: SetSyncWindows %s: window %d: %w", project, i, err)
		}
		if len(w.Applications) == 0 && len(w.Namespaces) == 0 && len(w.Clusters) == 0 {
			return fmt.Errorf("argocdtest: SetSyncWindows %s: window '%s':'%s':'%s' requires one of application, cluster or namespace", project, w.Kind, w.Schedule, w.Duration)
		}
		k := w.Kind + w.Schedule + w.Duration
		if seen[k] {
			return fmt.Errorf("argocdtest: SetSyncWindows %s: window '%s':'%s':'%s' already exists, update or edit", project, w.Kind, w.Schedule, w.Duration)
		}
		seen[k] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touchProjectLocked(project)
	ps := &projectState{windows: clone(windows), rv: s.rv}
	if old := s.projectSpecs[project]; old != nil {
		ps.resources = old.resources // SetProjectResources' rules stay
	}
	s.projectSpecs[project] = ps
	return nil
}

type parsedWindow struct {
	w     SyncWindow
	sched cron.Schedule
	dur   time.Duration
}

// parseWindow is SyncWindow.Validate plus the parsing active() does.
func parseWindow(w SyncWindow) (parsedWindow, error) {
	p := parsedWindow{w: w}
	if w.Kind != "allow" && w.Kind != "deny" {
		return p, fmt.Errorf("kind '%s' mismatch: can only be allow or deny", w.Kind)
	}
	sched, err := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse(w.Schedule)
	if err != nil {
		return p, fmt.Errorf("cannot parse schedule '%s': %v", w.Schedule, err)
	}
	if w.TimeZone != "" {
		loc, err := time.LoadLocation(w.TimeZone)
		if err != nil {
			return p, fmt.Errorf("cannot parse timezone '%s': %v", w.TimeZone, err)
		}
		sched.(*cron.SpecSchedule).Location = loc
	} else {
		sched.(*cron.SpecSchedule).Location = time.UTC
	}
	d, err := time.ParseDuration(w.Duration)
	if err != nil {
		return p, fmt.Errorf("cannot parse duration '%s': %v", w.Duration, err)
	}
	p.sched, p.dur = sched, d
	return p, nil
}

func (p parsedWindow) active(now time.Time) bool {
	next := p.sched.Next(now.Add(-p.dur))
	return !next.IsZero() && next.Before(now)
}

// anyGlob matches like Argo CD's glob.Match (gobwas/glob, no separators; see globMatch).
func anyGlob(patterns []string, values ...string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if v != "" && globMatch(p, v) {
				return true
			}
		}
	}
	return false
}

// matchingWindows is SyncWindows.Matches: the windows whose applications, clusters
// (destination name or server) or namespaces match the app — any of them, or with
// andOperator every one that is given. Callers hold s.mu.
func (s *Server) matchingWindows(app *Application) []SyncWindow {
	ps := s.projectSpecs[app.Spec.project()]
	if ps == nil {
		return nil
	}
	dst := app.Spec.Destination
	var out []SyncWindow
	for _, w := range ps.windows {
		checks := []struct {
			given, ok bool
		}{
			{len(w.Applications) > 0, anyGlob(w.Applications, app.Metadata.Name)},
			{len(w.Clusters) > 0, anyGlob(w.Clusters, dst.Name, dst.Server)},
			{len(w.Namespaces) > 0, anyGlob(w.Namespaces, dst.Namespace)},
		}
		match := w.AndOperator
		for _, c := range checks {
			if !c.given {
				continue
			}
			if w.AndOperator {
				match = match && c.ok
			} else {
				match = match || c.ok
			}
		}
		if match {
			out = append(out, w)
		}
	}
	return out
}

// windowsCanSync is SyncWindows.CanSync at now; an error when a window does not parse.
func windowsCanSync(ws []SyncWindow, now time.Time, manual bool) (bool, []SyncWindow, error) {
	var active []SyncWindow
	deny, denyManual, allowActive, allows, allowManual := false, true, false, false, true
	for _, w := range ws {
		p, err := parseWindow(w)
		if err != nil {
			return false, nil, err
		}
		on := p.active(now)
		if on {
			active = append(active, w)
		}
		switch {
		case w.Kind == "deny" && on:
			deny, denyManual = true, denyManual && w.ManualSync
		case w.Kind == "allow":
			allows, allowActive, allowManual = true, allowActive || on, allowManual && w.ManualSync
		}
	}
	switch {
	case deny:
		return manual && denyManual, active, nil
	case allowActive:
		return true, active, nil
	case allows:
		return manual && allowManual, active, nil
	}
	return true, active, nil
}

// syncBlocked is the API server's check before a sync (which counts every API sync as
// manual): nil, or the error the real server answers. Callers hold s.mu.
func (s *Server) syncBlocked(app *Application, manual bool) *apiError {
	ok, _, err := windowsCanSync(s.matchingWindows(app), s.now(), manual)
	if err != nil {
		return errf(codePermissionDenied, "cannot sync: invalid sync window: %v", err)
	}
	if !ok {
		return errf(codePermissionDenied, "cannot sync: blocked by sync window")
	}
	return nil
}

func appWindows(ws []SyncWindow) []ApplicationSyncWindow {
	var out []ApplicationSyncWindow
	for _, w := range ws {
		out = append(out, ApplicationSyncWindow{Kind: w.Kind, Schedule: w.Schedule, Duration: w.Duration, ManualSync: w.ManualSync})
	}
	return out
}

// handleAppSyncWindows serves GET /api/v1/applications/{name}/syncwindows.
func (s *Server) handleAppSyncWindows(w http.ResponseWriter, r *http.Request, p []string) {
	q := r.URL.Query()
	st := s.lockApp(w, p[0], q.Get("appNamespace"), q.Get("project"))
	if st == nil {
		return
	}
	ws := s.matchingWindows(&st.app)
	now := s.now()
	s.mu.Unlock()
	can, active, err := windowsCanSync(ws, now, true)
	if err != nil {
		writeAPIError(w, errf(codeUnknown, "invalid sync windows: %v", err))
		return
	}
	reply(w, r, ApplicationSyncWindowsResponse{ActiveWindows: appWindows(active), AssignedWindows: appWindows(ws), CanSync: can})
}

// handleGetProject serves GET /api/v1/projects/{name}.
func (s *Server) handleGetProject(w http.ResponseWriter, r *http.Request, p []string) {
	s.mu.Lock()
	known := s.projects[p[0]]
	ps := s.projectSpecs[p[0]]
	s.mu.Unlock()
	if !known {
		writeAPIError(w, errf(codeNotFound, "appprojects.argoproj.io %q not found", p[0]))
		return
	}
	proj := AppProject{
		Metadata: ObjectMeta{Name: p[0], Namespace: defaultNamespace, ResourceVersion: "1"},
		Spec: AppProjectSpec{SourceRepos: []string{"*"},
			Destinations: []ApplicationDestination{{Server: "*", Namespace: "*"}}},
	}
	if ps != nil {
		proj.Metadata.ResourceVersion = strconv.FormatInt(ps.rv, 10)
		proj.Spec.SyncWindows = clone(ps.windows)
		if r := ps.resources; r != nil {
			proj.Spec.ClusterResourceWhitelist = clone(r.ClusterWhitelist)
			proj.Spec.NamespaceResourceWhitelist = clone(r.NamespaceWhitelist)
			proj.Spec.NamespaceResourceBlacklist = clone(r.NamespaceBlacklist)
		}
	}
	reply(w, r, proj)
}
