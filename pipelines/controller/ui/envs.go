package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/pipelines/rbac"
)

// The Environments page: one card per environment, grouped by ApplicationSet (or promotion),
// desired (git) beside live (the agents), drift, and the history on click. It reads the
// controller's environments model (memory only) and is pushed again over server-sent events
// whenever the model changes.

// historyShown is how many promotions a card's history lists; the environment's own page
// lists them all (environments.MaxHistory).
const historyShown = 10

type envGroup struct {
	Name  string // appset:web → "ApplicationSet web"
	Key   string
	Cards []envCard
}

type envCard struct {
	environments.Environment
	DriftSince string
	DesiredAt  string
	Outside    string // "changed outside prflow by … in …"
	Apps       []envApp
	History    []envHistory
	More       bool // the history has more entries than shown
	Open       bool // the history is shown open (the environment's own page)
	// Promote links to the promote form of the pipeline that last promoted the environment
	// (or the first that promotes it), prefilled from the environment before it.
	Promote string
	CSRF    string // the session's, for the history's Roll back forms; "" hides them
}

type envApp struct {
	environments.App
	Since string
}

type envHistory struct {
	environments.Promotion
	Age     string
	Changes []string // "image.tag: 1.5.0 → 1.6.0"
	// RollBack: the entry succeeded and its merge is not what the environment runs now, so it
	// can be promoted again (a re-run of its run: same pipeline, inputs, gates and approvals).
	RollBack bool
	Idem     string
}

func groupLabel(g string) string {
	switch {
	case strings.HasPrefix(g, "appset:"):
		return "ApplicationSet " + strings.TrimPrefix(g, "appset:")
	case strings.HasPrefix(g, "promotion:"):
		return "Promotion " + strings.TrimPrefix(g, "promotion:")
	}
	return g
}

// envTimeout bounds how long a page waits for a model still reading its buckets.
const envTimeout = 10 * time.Second

func (u *UI) envCards(ctx context.Context, envs []environments.Environment, limit int, now time.Time, csrf string) []envGroup {
	var out []envGroup
	for _, e := range envs {
		if len(out) == 0 || out[len(out)-1].Key != e.Group {
			out = append(out, envGroup{Name: groupLabel(e.Group), Key: e.Group})
		}
		c := envCard{Environment: e, DesiredAt: ago(e.Desired.At, now), CSRF: csrf}
		// rbac.go: Promote… for a user who may start a run there, Roll back for one who may
		// roll the environment back.
		canRollBack := u.canEnv(ctx, &e, rbac.Rollback)
		if p := firstOr(e.Desired.Pipeline, e.Pipelines); p != "" && u.ctl.Can(userOf(ctx), rbac.Runs, rbac.Start, rbac.Object(p, e.Name)) {
			c.Promote = "/ui/promote?pipeline=" + urlq(p) + "&env=" + urlq(e.Name)
		}
		if e.Drift != nil {
			c.DriftSince = ago(e.Drift.Since, now)
		}
		if o := e.Desired.Outside; o != nil {
			c.Outside = fmt.Sprintf("changed outside prflow by %s in %s, %s", o.Author, shortSHA(o.Commit), ago(o.At, now))
			var vals []string
			for _, v := range e.Desired.Values {
				vals = append(vals, fmt.Sprintf("%s = %v", v.Key, v.Value))
			}
			if len(vals) > 0 {
				c.Outside += ": " + strings.Join(vals, ", ")
			}
		}
		for _, a := range e.Apps {
			c.Apps = append(c.Apps, envApp{App: a, Since: ago(a.Since, now)})
		}
		h, err := u.ctl.Environments().History(ctx, e.Name, limit+1)
		if err == nil {
			if len(h) > limit {
				h, c.More = h[:limit], true
			}
			current := true // the newest succeeded entry is what the environment runs
			for _, p := range h {
				hv := envHistory{Promotion: p, Age: ago(p.At, now)}
				if p.Result == "succeeded" && !p.RolledBack {
					if hv.RollBack = !current && p.Commit != e.Desired.Commit && csrf != "" && canRollBack; hv.RollBack {
						hv.Idem = formKey()
					}
					current = false
				}
				for _, ch := range p.Changes {
					old := "?"
					if ch.Old != nil {
						old = fmt.Sprint(ch.Old)
					}
					hv.Changes = append(hv.Changes, fmt.Sprintf("%s: %s → %v", ch.Key, old, ch.New))
				}
				c.History = append(c.History, hv)
			}
		}
		g := &out[len(out)-1]
		g.Cards = append(g.Cards, c)
	}
	return out
}

func firstOr(s string, l []string) string {
	if s != "" || len(l) == 0 {
		return s
	}
	return l[0]
}

// envPrefill is the promote form's values for env: the inputs of the last succeeded promotion
// of the environment before it in its promotion order (by pipeline, when one is named).
func (u *UI) envPrefill(ctx context.Context, pipeline, env string) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, envTimeout)
	defer cancel()
	envs, err := u.ctl.Environments().List(ctx)
	if err != nil {
		return nil
	}
	var before string
	for i, e := range envs {
		if e.Name == env && i > 0 && envs[i-1].Group == e.Group {
			before = envs[i-1].Name
		}
	}
	if before == "" {
		return nil
	}
	h, err := u.ctl.Environments().History(ctx, before, environments.MaxHistory)
	if err != nil {
		return nil
	}
	for _, p := range h {
		if p.Result != "succeeded" || p.RolledBack || (pipeline != "" && p.Pipeline != pipeline) {
			continue
		}
		out := map[string]string{}
		for k, v := range p.Inputs {
			out[k] = fmt.Sprint(v)
		}
		return out
	}
	return nil
}

func shortSHA(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

func (u *UI) envPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), envTimeout)
	defer cancel()
	envs, err := u.ctl.Environments().List(ctx)
	if err != nil {
		u.fail(w, r, http.StatusServiceUnavailable, "environments: "+err.Error())
		return
	}
	envs = u.visibleEnvs(ctx, envs) // rbac.go
	u.render(w, r, http.StatusOK, "environments", map[string]any{"Title": "Environments", "Nav": "environments",
		"Events": "/ui/live/environments", "Groups": u.envCards(ctx, envs, historyShown, time.Now(), csrfOf(r))})
}

func (u *UI) envDetailPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), envTimeout)
	defer cancel()
	e, err := u.ctl.Environments().Get(ctx, name)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, environments.ErrNotFound) {
			code = http.StatusNotFound
		}
		u.fail(w, r, code, err.Error())
		return
	}
	if !u.canEnv(ctx, e, rbac.Get) {
		u.authorize(w, r, "", rbac.Environments, rbac.Get, controller.EnvObjects(e)[0]) // 403 page, audited
		return
	}
	groups := u.envCards(ctx, []environments.Environment{*e}, environments.MaxHistory, time.Now(), csrfOf(r))
	groups[0].Cards[0].Open = true
	u.render(w, r, http.StatusOK, "environments", map[string]any{"Title": "Environment " + name, "Nav": "environments",
		"Events": "/ui/live/environments?env=" + urlq(name), "Groups": groups, "One": name})
}

// envEvents pushes the page's body again whenever the model changes (?env=NAME: one
// environment's). The model's notices are coalesced; nothing here polls.
func (u *UI) envEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	one := r.URL.Query().Get("env")
	changed, stop := u.ctl.Environments().Changed()
	defer stop()
	out, ok := startSSE(w)
	if !ok {
		return
	}
	push := func() bool {
		rctx, cancel := context.WithTimeout(ctx, envTimeout)
		defer cancel()
		var groups []envGroup
		limit := historyShown
		if one != "" {
			e, err := u.ctl.Environments().Get(rctx, one)
			if err != nil {
				return out.send("problem", err.Error()) == nil
			}
			if !u.canEnv(rctx, e, rbac.Get) {
				return out.send("problem", "permission denied: you may not get environment "+one) == nil
			}
			groups, limit = u.envCards(rctx, []environments.Environment{*e}, environments.MaxHistory, time.Now(), csrfOf(r)), environments.MaxHistory
			groups[0].Cards[0].Open = true
		} else {
			envs, err := u.ctl.Environments().List(rctx)
			if err != nil {
				return out.send("problem", "environments: "+err.Error()) == nil
			}
			envs = u.visibleEnvs(rctx, envs)
			groups = u.envCards(rctx, envs, limit, time.Now(), csrfOf(r))
		}
		var b strings.Builder
		if err := u.tmpl.ExecuteTemplate(&b, "envsbody", map[string]any{"Groups": groups, "One": one}); err != nil {
			return out.send("problem", "rendering environments: "+err.Error()) == nil
		}
		return out.send("envs", b.String()) == nil
	}
	if !push() { // the state as of now: the page may have been rendered before a change
		return
	}
	keepalive := time.NewTicker(25 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if out.keepalive() != nil {
				return
			}
		case <-changed:
			if !push() {
				return
			}
		}
	}
}

// csrfOf is the request's session CSRF token ("" without a session).
func csrfOf(r *http.Request) string {
	if s := sessionFrom(r.Context()); s != nil {
		return s.csrf
	}
	return ""
}
