package ui

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/pipelines/rbac"
)

// The UI asks the controller's RBAC policy what the signed-in user may do: pages leave out
// what the user may not see, hide the buttons of actions the user may not take, and every
// POST handler checks again (a forged form gets a 403 page, audited as rbac.denied).

func userOf(ctx context.Context) controller.User {
	if s := sessionFrom(ctx); s != nil {
		return s.user
	}
	return controller.User{}
}

// authorize checks the signed-in user on resource/action for every object; on a refusal it
// answers with a 403 page naming what is missing and returns false.
func (u *UI) authorize(w http.ResponseWriter, r *http.Request, run, resource, action string, objects ...string) bool {
	err := u.ctl.Authorize(r.Context(), userOf(r.Context()), r.RemoteAddr, run, resource, action, objects...)
	if err == nil {
		return true
	}
	u.fail(w, r, http.StatusForbidden, err.Error())
	return false
}

// readableRun reads the run the path names for a page or an event stream of it: a run that is
// not there answers 404, one the user may not see 403 (page, or plain text for a stream).
func (u *UI) readableRun(w http.ResponseWriter, r *http.Request, stream bool) (*pipelines.Run, bool) {
	run, err := u.ctl.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, controller.ErrNotFound) {
			code = http.StatusNotFound
		}
		if stream {
			http.Error(w, err.Error(), code)
		} else {
			u.fail(w, r, code, err.Error())
		}
		return nil, false
	}
	return run, u.mayGetRun(w, r, run, stream)
}

// mayGetRun answers 403 (page, or plain text for an event stream) when the user may not see run.
func (u *UI) mayGetRun(w http.ResponseWriter, r *http.Request, run *pipelines.Run, stream bool) bool {
	objs := u.ctl.RunObjects(r.Context(), run, rbac.Get)
	if !stream {
		return u.authorize(w, r, run.ID, rbac.Runs, rbac.Get, objs...)
	}
	if err := u.ctl.Authorize(r.Context(), userOf(r.Context()), r.RemoteAddr, run.ID, rbac.Runs, rbac.Get, objs...); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return false
	}
	return true
}

// gateDecide hides the approve/reject form of a step whose approval the user may not give by
// RBAC (the approver list is checked by MayDecide already); the reason is shown instead.
func (u *UI) gateDecide(ctx context.Context, run *pipelines.Run, stage string, list []stepView, s *session) {
	if s == nil {
		return
	}
	for i := range list {
		if !list[i].Decide {
			continue
		}
		obj := u.ctl.StageObject(ctx, run, stage)
		if !u.ctl.Can(s.user, rbac.Approvals, rbac.Approve, obj) {
			list[i].Decide = false
			list[i].NoDecide = (&rbac.Denied{Subject: rbac.Subject{Name: s.user.Name, Groups: s.user.Groups}, Resource: rbac.Approvals, Action: rbac.Approve, Object: obj}).Error()
		}
	}
}

// gateIntervene hides the buttons of a manual intervention the user may not decide by RBAC
// (the strategy's approver list is checked by interventionOf already); the reason is shown.
func (u *UI) gateIntervene(ctx context.Context, run *pipelines.Run, v *interventionView, s *session) {
	if s == nil || !v.Decide {
		return
	}
	obj := u.ctl.StageObject(ctx, run, v.Stage)
	if !u.ctl.Can(s.user, rbac.Interventions, rbac.Approve, obj) {
		v.Decide = false
		v.NoDecide = (&rbac.Denied{Subject: rbac.Subject{Name: s.user.Name, Groups: s.user.Groups}, Resource: rbac.Interventions, Action: rbac.Approve, Object: obj}).Error()
	}
}

// canEnv reports whether the signed-in user may take action on environment e.
func (u *UI) canEnv(ctx context.Context, e *environments.Environment, action string) bool {
	return u.ctl.CanEnv(userOf(ctx), e, action)
}

// visibleEnvs keeps the environments the user may get.
func (u *UI) visibleEnvs(ctx context.Context, envs []environments.Environment) []environments.Environment {
	if u.ctl.Policy().IsOpen() {
		return envs
	}
	return slices.DeleteFunc(slices.Clone(envs), func(e environments.Environment) bool { return !u.canEnv(ctx, &e, rbac.Get) })
}

// mayRollBack checks a Roll back form (a re-run of run sent from environment env's history):
// env must be one the run deployed to, and the user needs rollback on that environment.
func (u *UI) mayRollBack(w http.ResponseWriter, r *http.Request, id, env string) bool {
	run, err := u.ctl.Get(r.Context(), id)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, controller.ErrNotFound) {
			code = http.StatusNotFound
		}
		u.fail(w, r, code, "roll back to run "+id+": "+err.Error())
		return false
	}
	obj := rbac.Object(run.Pipeline, env)
	if !slices.Contains(u.ctl.RunObjects(r.Context(), run, rbac.Get), obj) {
		u.fail(w, r, http.StatusBadRequest, "roll back to run "+id+": the run did not deploy to environment "+env)
		return false
	}
	return u.authorize(w, r, run.ID, rbac.Environments, rbac.Rollback, obj)
}
