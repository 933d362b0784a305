package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/rbac"
)

// The actions a person starts runs with: Promote (a form generated from a pipeline's typed
// inputs), Re-run and Retry from the failed stage (buttons on the run page). Each goes through
// the controller exactly as the API does (StartPipelineOnce, RerunOnce, RetryOnce): the
// caller's identity and groups for run policies, the checks, the audit log, an idempotency
// key per rendered form.

// inputField is one input of the promote form.
type inputField struct {
	controller.InputInfo
	ID      string   // the element id (in.<name>)
	Value   string   // what the field shows: a prefill, what was sent, else the default
	Checked bool     // a boolean's box
	Options []string // an enum's choices (a <select>)
	Errors  []string // what the server said about this input
}

// promoteForm is the promote page's data for one pipeline.
type promoteForm struct {
	Pipeline controller.PipelineInfo
	Env      string
	Fields   []inputField
	Errors   []string // problems that name no field (a policy, a connector)
	Idem     string
}

// promotePage is GET /ui/promote?pipeline=NAME[&env=ENV][&in.NAME=VALUE…]: the pipelines to
// pick from, and the picked one's form, prefilled from the in.* parameters.
func (u *UI) promotePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	values := prefill(q)
	if len(values) == 0 && q.Get("env") != "" {
		values = u.envPrefill(r.Context(), q.Get("pipeline"), q.Get("env"))
	}
	u.renderPromote(w, r, http.StatusOK, q.Get("pipeline"), q.Get("env"), values, nil)
}

// prefill reads in.NAME values (query or form).
func prefill(v url.Values) map[string]string {
	out := map[string]string{}
	for k, vals := range v {
		if name, ok := strings.CutPrefix(k, "in."); ok && name != "" && len(vals) > 0 {
			out[name] = vals[len(vals)-1]
		}
	}
	return out
}

// renderPromote shows the promote page; err is what a start answered (shown on the form).
func (u *UI) renderPromote(w http.ResponseWriter, r *http.Request, code int, name, env string, values map[string]string, err error) {
	ctx := r.Context()
	list, lerr := u.ctl.Catalog(ctx)
	if lerr != nil {
		u.fail(w, r, http.StatusInternalServerError, lerr.Error())
		return
	}
	user := userOf(ctx) // rbac.go: only the pipelines the user may get
	list = slices.DeleteFunc(list, func(p controller.PipelineInfo) bool {
		return !u.ctl.CanPipeline(user, rbac.Pipelines, rbac.Get, p.Name, p.Environments)
	})
	data := map[string]any{"Title": "Promote", "Nav": "promote", "Pipelines": list, "Picked": name, "Env": env}
	if name == "" {
		if len(list) == 1 {
			name = list[0].Name
			data["Picked"] = name
		} else {
			u.render(w, r, code, "promote", data)
			return
		}
	}
	var info *controller.PipelineInfo
	for i := range list {
		if list[i].Name == name {
			info = &list[i]
		}
	}
	if info == nil {
		if err != nil && code == http.StatusForbidden {
			// A refused start of a pipeline the user may not see: say why (as the API does),
			// not that it does not exist.
			data["Problem"] = err.Error()
			u.render(w, r, code, "promote", data)
			return
		}
		data["Problem"] = fmt.Sprintf("no pipeline %q: pick one of the pipelines below", name)
		u.render(w, r, http.StatusNotFound, "promote", data)
		return
	}
	if env != "" && !slices.Contains(info.Environments, env) {
		data["Problem"] = fmt.Sprintf("pipeline %s does not promote environment %q (its environments: %s)", name, env, strings.Join(info.Environments, ", "))
		code = max(code, http.StatusBadRequest)
	}
	f := &promoteForm{Pipeline: *info, Env: env, Idem: formKey()}
	var inErr *pipelines.InputError
	errors.As(err, &inErr)
	placed := false
	for _, in := range info.Inputs {
		fd := inputField{InputInfo: in, ID: "in." + in.Name}
		v, given := values[in.Name]
		switch {
		case given:
			fd.Value = v
		case in.Default != nil:
			fd.Value = fmt.Sprint(in.Default)
		}
		fd.Checked = in.Type == "boolean" && fd.Value == "true"
		for _, e := range in.Enum {
			fd.Options = append(fd.Options, fmt.Sprint(e))
		}
		if inErr != nil {
			fd.Errors = inErr.Field(in.Name)
		} else if err != nil && namesInput(err.Error(), in.Name) {
			fd.Errors = []string{err.Error()}
		}
		placed = placed || len(fd.Errors) > 0
		f.Fields = append(f.Fields, fd)
	}
	if err != nil {
		switch {
		case inErr != nil:
			// Problems about inputs the form does not have (unknown ones) go on top.
			for _, p := range inErr.Problems {
				if !slices.ContainsFunc(f.Fields, func(fd inputField) bool { return slices.Contains(fd.Errors, p) }) {
					f.Errors = append(f.Errors, p)
				}
			}
		case !placed:
			f.Errors = append(f.Errors, err.Error())
		}
	}
	data["Form"] = f
	u.render(w, r, code, "promote", data)
}

// namesInput reports whether a message (a policy's) is about input name.
func namesInput(msg, name string) bool {
	return strings.Contains(msg, "inputs."+name) || strings.Contains(msg, fmt.Sprintf("input %q", name))
}

// promote is POST /ui/promote: start a run of the picked pipeline with the form's inputs; a
// refusal shows the form again with the values sent and every problem, next to its field.
func (u *UI) promote(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	name, env := r.PostFormValue("pipeline"), r.PostFormValue("env")
	values := prefill(r.PostForm)
	_, info, err := u.ctl.CatalogPipeline(r.Context(), name)
	if err != nil {
		u.renderPromote(w, r, controller.StartErrorStatus(err), name, env, values, nil)
		return
	}
	inputs := map[string]any{}
	for _, in := range info.Inputs {
		v, ok := values[in.Name]
		switch {
		case in.Type == "boolean":
			// An unchecked box sends nothing: that is false, not "use the default".
			inputs[in.Name] = ok && v == "true"
			values[in.Name] = fmt.Sprint(inputs[in.Name])
		case ok && v != "":
			inputs[in.Name] = v
		}
		// An empty field is left out: its default applies, or it is reported as required.
	}
	for k, v := range values {
		if !slices.ContainsFunc(info.Inputs, func(in controller.InputInfo) bool { return in.Name == k }) {
			inputs[k] = v // not on the form (hand-made request): the start names it as unknown
		}
	}
	req := controller.StartRequest{Inputs: inputs, Executor: s.user.Name, Groups: s.user.Groups, Remote: r.RemoteAddr}
	key := r.PostFormValue("idem")
	if key == "" {
		key = formKey()
	}
	// The start checks the user's permission once the run's environments are known (rbac).
	run, replayed, err := u.ctl.StartPipelineOnce(controller.Authorizing(r.Context(), rbac.Start), key, name, req)
	if err != nil {
		u.log.Info("ui promote refused", "pipeline", name, "user", s.user.Name, "err", err)
		u.renderPromote(w, r, controller.StartErrorStatus(err), name, env, values, err)
		return
	}
	msg := fmt.Sprintf("started by %s from the promote form", s.user.Name)
	if replayed {
		msg = "this form was sent before: run started once"
	}
	http.Redirect(w, r, "/ui/runs/"+run.ID+"?msg="+urlq(msg), http.StatusSeeOther)
}

// rerun is POST /ui/runs/{id}/rerun.
// A re-run needs runs start on every environment of the run; the Roll back button of an
// environment's history (its form names the environment) needs environments rollback there.
func (u *UI) rerun(w http.ResponseWriter, r *http.Request) {
	if env := r.PostFormValue("rollback"); env != "" {
		if u.mayRollBack(w, r, r.PathValue("id"), env) { // rbac.go
			u.startFrom(w, r, "roll back", u.ctl.RerunOnce)
		}
		return
	}
	r = r.WithContext(controller.Authorizing(r.Context(), rbac.Start))
	u.startFrom(w, r, "re-run", u.ctl.RerunOnce)
}

// retry is POST /ui/runs/{id}/retry: it needs runs retry on the environments it runs again.
func (u *UI) retry(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(controller.Authorizing(r.Context(), rbac.Retry))
	u.startFrom(w, r, "retry", u.ctl.RetryOnce)
}

func (u *UI) startFrom(w http.ResponseWriter, r *http.Request, what string, start func(ctx context.Context, key, id string, req controller.StartRequest) (*pipelines.Run, bool, error)) {
	id := r.PathValue("id")
	s := sessionFrom(r.Context())
	key := r.PostFormValue("idem")
	if key == "" {
		key = formKey()
	}
	req := controller.StartRequest{Executor: s.user.Name, Groups: s.user.Groups, Remote: r.RemoteAddr}
	run, replayed, err := start(r.Context(), key, id, req)
	if err != nil {
		u.fail(w, r, controller.StartErrorStatus(err), what+" of run "+id+": "+err.Error())
		return
	}
	msg := fmt.Sprintf("%s of %s started by %s", what, id, s.user.Name)
	if replayed {
		msg += " (this form was sent before: started once)"
	}
	http.Redirect(w, r, "/ui/runs/"+run.ID+"?msg="+urlq(msg), http.StatusSeeOther)
}
