package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/steps/template"
)

// Permissions: every API route names what it needs (route.perm); the object of a request is
// PIPELINE/ENV, taken from the run, the pipeline or the environment the request is about.

// PolicySource gives the policy in force now (*rbac.File reloads itself on every call).
type PolicySource interface{ Policy() *rbac.Policy }

// WithRBAC decides every API and UI action by the policy of src; without it every
// authenticated caller is admin (rbac.Open).
func WithRBAC(src PolicySource) Option { return func(c *Controller) { c.rbac = src } }

var openPolicy = rbac.Open()

// Policy is the RBAC policy in force now.
func (c *Controller) Policy() *rbac.Policy {
	if c.rbac == nil {
		return openPolicy
	}
	return c.rbac.Policy()
}

// objectKind says where a route's object comes from.
type objectKind int

const (
	objPublic    objectKind = iota // no token, no permission (schema, OpenAPI document)
	objAll                         // about no one pipeline: needs the permission on object *
	objRun                         // the run of {id}: its pipeline and the environments of its stages
	objStage                       // the stage a signal names (checked in sendSignal)
	objStagePath                   // the stage {stage} of the run {id} (checked in Intervene)
	objStarted                     // the run being started, once its pipeline is loaded (checked in start)
	objPipeline                    // the pipeline a check request holds, once loaded (apiCheck)
	objEnv                         // the environment {name}: PIPELINE/ENV for a pipeline that promotes it
	objList                        // a list: each entry is shown only when the caller may get it
	objSelf                        // about the caller only (can-i)
)

var objectDoc = map[objectKind]string{
	objPublic:    "none (served without a token)",
	objAll:       "`*` (the permission on every object)",
	objRun:       "PIPELINE/ENV of every environment of the run (cancel: of the stages still going)",
	objStage:     "PIPELINE/ENV of the stage named in the body",
	objStagePath: "PIPELINE/ENV of the run's stage {stage}",
	objStarted:   "PIPELINE/ENV of every environment the new run deploys to (retry: of the stages it runs again)",
	objPipeline:  "PIPELINE/ENV for any environment of the pipeline in the body",
	objEnv:       "PIPELINE/{name} for any pipeline that promotes the environment",
	objList:      "each entry's own object; entries the caller may not get are left out",
	objSelf:      "none: any signed-in caller may ask about themself",
}

// perm is what a route needs.
type perm struct {
	resource string
	action   string
	object   objectKind
}

// Permission describes one route's permission for docs/rbac.md.
type Permission struct {
	Route, Resource, Action, Object string
}

// Permissions lists every API route with the permission it needs (the table of docs/rbac.md).
func (c *Controller) Permissions() []Permission {
	var out []Permission
	for _, r := range c.routes() {
		p := Permission{Route: r.pattern, Resource: r.perm.resource, Action: r.perm.action, Object: objectDoc[r.perm.object]}
		if r.perm.object == objStage {
			p.Resource = rbac.Approvals + "|" + rbac.Interventions // an approval | another signal
		}
		out = append(out, p)
	}
	return out
}

// ForbiddenError is a request the RBAC policy refuses.
type ForbiddenError struct{ *rbac.Denied }

func (e *ForbiddenError) Unwrap() error { return e.Denied }

// ErrForbidden matches every ForbiddenError.
var ErrForbidden = errors.New("permission denied")

func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }

// forbidden is the 403 answer: a JSON error naming resource, action and object.
type forbiddenBody struct {
	Error    string   `json:"error"`
	Detail   []string `json:"detail,omitempty"` // a run policy's (never set by RBAC)
	User     string   `json:"user"`
	Groups   []string `json:"groups,omitempty"`
	Resource string   `json:"resource"`
	Action   string   `json:"action"`
	Object   string   `json:"object"`
}

func writeForbidden(w http.ResponseWriter, d *rbac.Denied) {
	writeJSON(w, http.StatusForbidden, forbiddenBody{Error: d.Error(), User: d.Subject.Name, Groups: d.Subject.Groups,
		Resource: d.Resource, Action: d.Action, Object: d.Object})
}

func subjectOf(u User) rbac.Subject { return rbac.Subject{Name: u.Name, Groups: u.Groups} }

// Can reports whether u may take action on resource for object.
func (c *Controller) Can(u User, resource, action, object string) bool {
	return c.Policy().Allowed(subjectOf(u), resource, action, object)
}

// Authorize checks u against every object; a refusal is a *ForbiddenError, audited.
func (c *Controller) Authorize(ctx context.Context, u User, remote, run, resource, action string, objects ...string) error {
	p := c.Policy()
	for _, o := range objects {
		if err := p.Check(subjectOf(u), resource, action, o); err != nil {
			var d *rbac.Denied
			errors.As(err, &d)
			detail := d.Error()
			if u.Subject != "" { // an OIDC user: the subject is the stable id, names change
				detail += "; " + u.TokenLabel()
			}
			c.record(ctx, audit.Entry{Actor: u.Name, Action: audit.RBACDenied, Run: run, Remote: remote, Detail: detail})
			c.log.Info("rbac refused", "user", u.Name, "groups", u.Groups, "resource", resource, "action", action, "object", o, "run", run)
			return &ForbiddenError{Denied: d}
		}
	}
	return nil
}

// RunObjects are the objects an action on run concerns: get needs every stage's environment;
// cancel the environments of the stages still going (every stage's when none is); retry the
// stages that did not succeed; approve the one stage's (StageObject).
func (c *Controller) RunObjects(ctx context.Context, run *pipelines.Run, action string) []string {
	var p *pipelines.Pipeline
	if run.Spec != "" {
		p, _ = c.Pipeline(ctx, run.Spec)
	}
	pick := func(sr *pipelines.StageRun) bool { return true }
	switch action {
	case rbac.Cancel:
		if slices.ContainsFunc(run.Stages, going) {
			pick = going
		}
	case rbac.Retry:
		pick = func(sr *pipelines.StageRun) bool { return sr.Status != pipelines.StSucceeded }
	}
	var out []string
	for _, sr := range run.Stages {
		if pick(sr) {
			out = appendNew(out, rbac.Object(run.Pipeline, stageEnv(p, sr.ID, run.Inputs)))
		}
	}
	if len(out) == 0 {
		out = []string{rbac.Object(run.Pipeline, "")}
	}
	return out
}

func going(sr *pipelines.StageRun) bool {
	return !sr.Status.Terminal() && sr.Status != pipelines.StPending
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// inputRef finds the input an environment template names (<+inputs.env>, ${{ inputs.env }},
// <+pipeline.variables.env>).
var inputRef = regexp.MustCompile(`^\s*(?:<\+|\$\{\{)\s*(?:inputs|pipeline\.variables)\.([A-Za-z_][A-Za-z0-9_]*)\s*(?:>|\}\})\s*$`)

// stageEnv is the environment a stage deploys to: its name, the input its template names, or
// * when it cannot be told (then only a permission on every environment of the pipeline
// allows it).
func stageEnv(p *pipelines.Pipeline, stage string, inputs map[string]any) string {
	if p == nil {
		return "*"
	}
	st := p.Stage(stage)
	if st == nil {
		return "*"
	}
	env := st.Environment
	if !template.Contains(env) {
		return env
	}
	if m := inputRef.FindStringSubmatch(env); m != nil {
		if v, ok := inputs[m[1]].(string); ok && v != "" && !strings.ContainsAny(v, "/*?[{") {
			return v
		}
	}
	return "*"
}

// StageObject is the object of an action on one stage of run.
func (c *Controller) StageObject(ctx context.Context, run *pipelines.Run, stage string) string {
	var p *pipelines.Pipeline
	if run.Spec != "" {
		p, _ = c.Pipeline(ctx, run.Spec)
	}
	return rbac.Object(run.Pipeline, stageEnv(p, stage, run.Inputs))
}

// pipelineObjects are the objects of pipeline p: one per environment its stages deploy to.
func pipelineObjects(p *pipelines.Pipeline, inputs map[string]any) []string {
	var out []string
	for _, st := range p.Stages {
		out = appendNew(out, rbac.Object(p.Name, stageEnv(p, st.ID, inputs)))
	}
	if len(out) == 0 {
		out = []string{rbac.Object(p.Name, "")}
	}
	return out
}

// canAny reports whether u may take action on resource for at least one of objects.
func (c *Controller) canAny(p *rbac.Policy, u User, resource, action string, objects []string) bool {
	return slices.ContainsFunc(objects, func(o string) bool { return p.Allowed(subjectOf(u), resource, action, o) })
}

// canAll reports whether u may take action on resource for every one of objects.
func canAll(p *rbac.Policy, u User, resource, action string, objects []string) bool {
	return !slices.ContainsFunc(objects, func(o string) bool { return !p.Allowed(subjectOf(u), resource, action, o) })
}

// CanGetRun reports whether u may see run.
func (c *Controller) CanGetRun(ctx context.Context, u User, run *pipelines.Run) bool {
	if c.Policy().IsOpen() {
		return u.Name != "" // no --rbac: no need to look up the run's environments
	}
	return canAll(c.Policy(), u, rbac.Runs, rbac.Get, c.RunObjects(ctx, run, rbac.Get))
}

// CanRun reports whether u may take action (cancel, retry, start for a re-run) on run.
func (c *Controller) CanRun(ctx context.Context, u User, run *pipelines.Run, action string) bool {
	if c.Policy().IsOpen() {
		return u.Name != ""
	}
	return canAll(c.Policy(), u, rbac.Runs, action, c.RunObjects(ctx, run, action))
}

// EnvObjects are the objects of environment e: PIPELINE/ENV for every pipeline that promotes
// it (/ENV when none is known).
func EnvObjects(e *environments.Environment) []string {
	var out []string
	for _, p := range e.Pipelines {
		out = appendNew(out, rbac.Object(p, e.Name))
	}
	if e.Desired.Pipeline != "" {
		out = appendNew(out, rbac.Object(e.Desired.Pipeline, e.Name))
	}
	if len(out) == 0 {
		out = []string{rbac.Object("", e.Name)}
	}
	return out
}

// CanEnv reports whether u may take action on environment e (for any pipeline promoting it).
func (c *Controller) CanEnv(u User, e *environments.Environment, action string) bool {
	return c.canAny(c.Policy(), u, rbac.Environments, action, EnvObjects(e))
}

// CanPipeline reports whether u may take action on resource for the pipeline name, through
// any of envs (the environments of the pipeline).
func (c *Controller) CanPipeline(u User, resource, action, name string, envs []string) bool {
	objs := []string{rbac.Object(name, "")}
	if len(envs) > 0 {
		objs = objs[:0]
		for _, e := range envs {
			objs = append(objs, rbac.Object(name, e))
		}
	}
	return c.canAny(c.Policy(), u, resource, action, objs)
}

// startCheck asks start to check the starter's permission (API and UI starts; webhook starts
// are authenticated by the forge and not checked).
type startCheckKey struct{}

// Authorizing marks ctx so that a start made with it checks the starter (StartRequest's
// Executor and Groups) for action (rbac.Start, or rbac.Retry for a retry) on runs.
func Authorizing(ctx context.Context, action string) context.Context {
	return context.WithValue(ctx, startCheckKey{}, action)
}

// checkStart is start's permission check of the new run r.
func (c *Controller) checkStart(ctx context.Context, req StartRequest, p *pipelines.Pipeline, r *pipelines.Run) error {
	action, _ := ctx.Value(startCheckKey{}).(string)
	if action == "" {
		return nil
	}
	var objs []string
	for _, sr := range r.Stages {
		if sr.CarriedFrom == "" { // a retry does not run a carried-over stage again
			objs = appendNew(objs, rbac.Object(p.Name, stageEnv(p, sr.ID, r.Inputs)))
		}
	}
	if len(objs) == 0 {
		objs = []string{rbac.Object(p.Name, "")}
	}
	return c.Authorize(ctx, User{Name: req.Executor, Groups: req.Groups}, req.Remote, r.RetryOf+r.RerunOf, rbac.Runs, action, objs...)
}

// authorize wraps a route's handler with its permission check (the checks that need the
// request body or a loaded pipeline are made where those are known: sendSignal, start,
// apiCheck; lists filter).
func (c *Controller) authorize(rt route, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := UserFrom(r.Context())
		switch rt.perm.object {
		case objAll:
			if err := c.Authorize(r.Context(), u, r.RemoteAddr, "", rt.perm.resource, rt.perm.action, "*"); err != nil {
				writeForbidden(w, err.(*ForbiddenError).Denied)
				return
			}
		case objRun:
			run, err := c.Get(r.Context(), r.PathValue("id"))
			if err != nil {
				writeErr(w, notFoundOr500(err), err)
				return
			}
			if err := c.Authorize(r.Context(), u, r.RemoteAddr, run.ID, rt.perm.resource, rt.perm.action, c.RunObjects(r.Context(), run, rt.perm.action)...); err != nil {
				writeForbidden(w, err.(*ForbiddenError).Denied)
				return
			}
		case objEnv:
			ctx, cancel := context.WithTimeout(r.Context(), envWait)
			e, err := c.envs.Get(ctx, r.PathValue("name"))
			cancel()
			if err != nil {
				envErr(w, err)
				return
			}
			if !c.CanEnv(u, e, rt.perm.action) {
				objs := EnvObjects(e)
				err := c.Authorize(r.Context(), u, r.RemoteAddr, "", rt.perm.resource, rt.perm.action, objs[0])
				if err == nil { // the first object allowed after all (a reload in between)
					break
				}
				writeForbidden(w, err.(*ForbiddenError).Denied)
				return
			}
		case objStarted:
			r = r.WithContext(Authorizing(r.Context(), rt.perm.action))
		}
		next(w, r)
	}
}

// CanIAnswer is the answer of GET /api/v1/can-i.
type CanIAnswer struct {
	Allowed  bool     `json:"allowed"`
	User     string   `json:"user"`
	Groups   []string `json:"groups,omitempty"`
	Resource string   `json:"resource"`
	Action   string   `json:"action"`
	Object   string   `json:"object"`
	Policy   string   `json:"policy"` // the policy file, or that there is none
}

// apiCanI is GET /api/v1/can-i?action=&resource=&object=: whether the caller may.
func (c *Controller) apiCanI(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"action", "resource", "object"}, k) {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("unknown query parameter %q (known: action, resource, object)", k))
			return
		}
	}
	res, act, obj := q.Get("resource"), q.Get("action"), q.Get("object")
	if err := CheckCanI(res, act, obj); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	u := UserFrom(r.Context())
	p := c.Policy()
	writeJSON(w, http.StatusOK, CanIAnswer{Allowed: p.Allowed(subjectOf(u), res, act, obj), User: u.Name, Groups: u.Groups,
		Resource: res, Action: act, Object: obj, Policy: p.Source})
}

// CheckCanI checks a can-i question: a known resource, one of its actions, an object.
func CheckCanI(resource, action, object string) error {
	acts, ok := rbac.Actions[resource]
	if !ok {
		return fmt.Errorf("resource %q: want one of %s", resource, strings.Join(rbac.Resources, ", "))
	}
	if !slices.Contains(acts, action) {
		return fmt.Errorf("action %q: resource %s takes %s", action, resource, strings.Join(acts, ", "))
	}
	if object == "" {
		return errors.New("object: want PIPELINE/ENV (or * for a request about no one pipeline)")
	}
	if object != "*" && !strings.Contains(object, "/") {
		return fmt.Errorf("object %q: want PIPELINE/ENV (or * for a request about no one pipeline)", object)
	}
	return nil
}
