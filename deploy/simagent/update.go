package simagent

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// Update implements agent.Updater like the Argo CD agent, on the simulated app: the patched
// source is kept in memory (the release repo is never written). A targetRevision must resolve
// in the release repo (its branch, HEAD, or a commit it has); the app then deploys that commit
// instead of following the branch. Changed Helm/Kustomize values are not rendered (the
// simulated apps are config files) but, as on Argo CD, make the app OutOfSync until it is
// synced. Updates never sync, and auto-sync does not pick them up: a GitOpsSync does.
func (a *Agent) Update(ctx context.Context, req agent.UpdateRequest) (*agent.UpdateReply, error) {
	// One update at a time: the new source is computed from the current one.
	a.updMu.Lock()
	defer a.updMu.Unlock()
	if _, err := agent.SelectSource(req.Source, nil, false); err != nil {
		return nil, err
	}
	a.mu.Lock()
	app := a.apps[req.App]
	var before agent.SourceSpec
	if app != nil {
		before = sourceOf(app)
	}
	a.mu.Unlock()
	if app == nil {
		return nil, &agent.Error{Code: agent.CodeNotFound, App: req.App, Message: "application not found (the ApplicationSet generates no app of that name)"}
	}
	after := req.Patch.Apply(before)
	target, raw := "", ""
	if p := req.Patch.TargetRevision; p != nil && !a.followsBranch(*p) {
		sha, err := a.repo.resolve(*p)
		if err != nil {
			return nil, &agent.Error{Code: agent.CodeRejected, App: req.App,
				Message: "application spec is invalid: Unable to resolve '" + *p + "' to a commit SHA in the release repo: " + err.Error()}
		}
		if _, raw, err = a.configAt(ctx, sha, req.App); err != nil {
			return nil, &agent.Error{Code: agent.CodeRejected, App: req.App, Message: "application spec is invalid: " + err.Error()}
		}
		target = sha
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	app = a.apps[req.App]
	if app == nil {
		return nil, &agent.Error{Code: agent.CodeNotFound, App: req.App, Message: "application not found (it disappeared while being updated)"}
	}
	rep := &agent.UpdateReply{Before: &before, After: &after}
	if app.lastUpdate.Tagged(req.RunID, req.Step) {
		b := app.lastUpdate.Before
		rep.Before, rep.Repeated = &b, true
	}
	if !after.Equal(before) {
		s := after
		app.src = &s
		if req.Patch.TargetRevision != nil {
			app.target, app.targetRaw = target, raw
		}
		if !rep.Repeated {
			app.lastUpdate = &agent.LastUpdate{Run: req.RunID, Step: req.Step, Before: before}
		}
		a.compareLocked(app)
		a.o.Log.Info("app source updated", "app", req.App, "run", req.RunID, "step", req.Step, "fields", strings.Join(req.Patch.Touched(), ","))
	}
	rep.Changed = !rep.Before.Equal(after)
	st := app.st
	st.V, st.Agent, st.ObservedAt = agent.Version, a.o.AgentID, time.Now().UTC()
	rep.App = &st
	return rep, nil
}

// followsBranch reports whether a target revision means "the branch the agent deploys".
func (a *Agent) followsBranch(rev string) bool {
	return rev == "" || rev == "HEAD" || rev == a.repo.branch || rev == "refs/heads/"+a.repo.branch
}

// desiredRev is the commit an app should run: its pinned target, else the branch head.
// Callers hold a.mu.
func (a *Agent) desiredRev(app *simApp) string {
	if app.target != "" {
		return app.target
	}
	return a.head
}

// sourceOf is the app's source as an update sees it. Callers hold a.mu.
func sourceOf(app *simApp) agent.SourceSpec {
	t := app.gen.tmpl.Spec.Source
	s := agent.SourceSpec{Index: -1, TargetRevision: t.TargetRevision}
	if app.src != nil {
		s = app.src.Clone()
	}
	s.Index, s.RepoURL, s.Path = -1, t.RepoURL, t.Path
	return s
}

// overrides is a canonical form of a source's Helm and Kustomize values ("" when none).
func overrides(s *agent.SourceSpec) string {
	if s == nil || (s.Helm == nil && s.Kustomize.Empty()) {
		return ""
	}
	b, _ := json.Marshal([]any{s.Helm, s.Kustomize})
	return string(b)
}
