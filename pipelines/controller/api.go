package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// MaxRequest bounds API request bodies.
const MaxRequest = 2 << 20

// Handler serves the HTTP API:
//
//	POST /api/v1/runs                 start a run {file, source, inputs}; Idempotency-Key header (idempotency.go)
//	GET  /api/v1/runs                 list runs
//	GET  /api/v1/runs/{id}            a run's state
//	POST /api/v1/runs/{id}/cancel     cancel
//	POST /api/v1/runs/{id}/rerun      start a finished run again: same source and inputs (rerun.go)
//	POST /api/v1/runs/{id}/retry      retry a failed run from its failed stage (rerun.go)
//	GET  /api/v1/pipelines            the pipelines a run can be started of by name (catalog.go)
//	POST /api/v1/pipelines/{name}/runs start a run of a pipeline by name {inputs}
//	POST /api/v1/runs/{id}/signals    approve/reject a parked step {stage, step, approve, comment}
//	POST /api/v1/runs/{id}/interventions/{stage}  decide a stage parked by onFailure manual {action, comment} (intervene.go)
//	GET  /api/v1/runs/{id}/logs       step logs (?step=stage.step&follow=1), NDJSON
//	GET  /api/v1/workers              live workers
//	GET  /api/v1/schema               the pipeline JSON Schema (no token needed)
//	POST /api/v1/pipelines/check      check a pipeline {file, source, inputs} as a start would, start nothing
//	GET  /api/v1/openapi.json         this list as an OpenAPI document (no token needed)
//	GET  /api/v1/environments[/{name}[/history]]  what runs where (environments.go)
//	GET  /healthz /readyz /metrics
func (c *Controller) Handler(auth *Auth) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-c.ready:
		default:
			http.Error(w, "loading runs", http.StatusServiceUnavailable)
			return
		}
		if !c.conn.NC.IsConnected() {
			http.Error(w, "NATS disconnected", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.metrics.Registry, promhttp.HandlerOpts{}))
	api := http.NewServeMux()
	for _, r := range c.routes() {
		var h http.Handler = r.handler
		if !r.public {
			h = c.authorize(r, r.handler) // rbac.go
		}
		if r.changes {
			h = c.auditTokenUse(h) // audit.go
		}
		h = c.metrics.instrument(r.pattern, h)
		if r.public {
			mux.Handle(r.pattern, h)
		} else {
			api.Handle(r.pattern, h)
		}
	}
	mux.Handle("/api/", c.requireAuth(auth, api))
	mux.Handle("POST /hooks/{provider}", c.metrics.instrument("POST /hooks/{provider}", http.HandlerFunc(c.serveHook))) // authenticated by the forge's signature
	return mux
}

// route is one API endpoint; the OpenAPI document (openapi.json) describes each of them, a
// test holds the two together.
type route struct {
	pattern string
	handler http.HandlerFunc
	public  bool // served without a bearer token
	changes bool // changes something: the token that authenticates it is audited (token.used)
	perm    perm // what the caller needs (rbac.go); docs/rbac.md lists them
}

func (c *Controller) routes() []route {
	return []route{
		{pattern: "POST /api/v1/runs", perm: perm{rbac.Runs, rbac.Start, objStarted}, handler: c.apiStart, changes: true},
		{pattern: "GET /api/v1/runs", perm: perm{rbac.Runs, rbac.Get, objList}, handler: c.apiList},
		{pattern: "GET /api/v1/runs/{id}", perm: perm{rbac.Runs, rbac.Get, objRun}, handler: c.apiGet},
		{pattern: "POST /api/v1/runs/{id}/cancel", perm: perm{rbac.Runs, rbac.Cancel, objRun}, handler: c.apiCancel, changes: true},
		{pattern: "POST /api/v1/runs/{id}/rerun", perm: perm{rbac.Runs, rbac.Start, objStarted}, handler: c.apiRerun, changes: true},               // rerun.go
		{pattern: "POST /api/v1/runs/{id}/retry", perm: perm{rbac.Runs, rbac.Retry, objStarted}, handler: c.apiRetry, changes: true},               // rerun.go
		{pattern: "GET /api/v1/pipelines", perm: perm{rbac.Pipelines, rbac.Get, objList}, handler: c.apiPipelines},                                 // catalog.go
		{pattern: "POST /api/v1/pipelines/{name}/runs", perm: perm{rbac.Runs, rbac.Start, objStarted}, handler: c.apiStartPipeline, changes: true}, // catalog.go
		{pattern: "POST /api/v1/runs/{id}/signals", perm: perm{rbac.Approvals, rbac.Approve, objStage}, handler: c.apiSignal, changes: true},
		{pattern: "POST /api/v1/runs/{id}/interventions/{stage}", perm: perm{rbac.Interventions, rbac.Approve, objStagePath}, handler: c.apiIntervene, changes: true}, // intervene.go
		{pattern: "GET /api/v1/runs/{id}/logs", perm: perm{rbac.Runs, rbac.Get, objRun}, handler: c.apiLogs},
		{pattern: "GET /api/v1/workers", perm: perm{rbac.Pipelines, rbac.Get, objAll}, handler: c.apiWorkers},
		{pattern: "GET /api/v1/audit", perm: perm{rbac.Audit, rbac.Get, objAll}, handler: c.apiAudit}, // audit.go
		{pattern: "GET /api/v1/schema", handler: c.apiSchema, public: true},                           // public, like the schema file itself
		{pattern: "POST /api/v1/pipelines/check", perm: perm{rbac.Pipelines, rbac.Get, objPipeline}, handler: c.apiCheck},
		{pattern: "GET /api/v1/openapi.json", handler: c.apiOpenAPI, public: true},
		{pattern: "GET /api/v1/environments", perm: perm{rbac.Environments, rbac.Get, objList}, handler: c.apiEnvironments}, // environments.go
		{pattern: "GET /api/v1/environments/{name}", perm: perm{rbac.Environments, rbac.Get, objEnv}, handler: c.apiEnvironment},
		{pattern: "GET /api/v1/environments/{name}/history", perm: perm{rbac.Environments, rbac.Get, objEnv}, handler: c.apiEnvHistory},
		{pattern: "GET /api/v1/can-i", perm: perm{object: objSelf}, handler: c.apiCanI}, // rbac.go
	}
}

func (c *Controller) requireAuth(a *Auth, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := a.Check(r)
		if err != nil {
			c.metrics.HTTPRequests.WithLabelValues("unauthenticated", r.Method, "401").Inc()
			c.RecordAuthFailure(r, authFailure(r, err)) // audit.go
			w.Header().Set("WWW-Authenticate", `Bearer realm="prflow"`)
			writeErr(w, http.StatusUnauthorized, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequest)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

type apiError struct {
	Error  string   `json:"error"`
	Detail []string `json:"detail,omitempty"`
}

func writeErr(w http.ResponseWriter, code int, err error) {
	if fe := (*ForbiddenError)(nil); errors.As(err, &fe) {
		writeForbidden(w, fe.Denied) // rbac.go: names resource, action and object
		return
	}
	e := apiError{Error: err.Error()}
	var le *pipelines.LoadError
	if errors.As(err, &le) {
		e.Error = "pipeline is invalid"
		for _, fe := range le.Errs {
			e.Detail = append(e.Detail, fe.Error())
		}
	}
	writeJSON(w, code, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body larger than %d bytes", mbe.Limit)
		}
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func (c *Controller) apiStart(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if err := decodeBody(r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	u := UserFrom(r.Context())
	req.Executor, req.Groups, req.Remote = u.Name, u.Groups, r.RemoteAddr
	if req.File == "" {
		req.File = "pipeline.yaml"
	}
	c.serveStart(w, r, req, requestDigest(req), c.Start)
}

// CheckRequest is a pipeline to check against the running system without starting it.
type CheckRequest struct {
	File   string         `json:"file"`
	Source SourceText     `json:"source"` // the pipeline's text (see SourceText)
	Inputs map[string]any `json:"inputs,omitempty"`
}

// CheckResult is the answer of a check that passed.
type CheckResult struct {
	Pipeline string `json:"pipeline"`
	Stages   int    `json:"stages"`
}

// apiCheck is POST /api/v1/pipelines/check: the checks Start makes (load, inputs when given,
// connectors and agents) without starting anything. 200 ok, 422 invalid, 409 refused.
func (c *Controller) apiCheck(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if err := decodeBody(r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if req.File == "" {
		req.File = "pipeline.yaml"
	}
	p, err := c.CheckSource(r.Context(), req.File, req.Source, req.Inputs)
	if err == nil { // the pipeline's name and environments are known once it loaded (rbac.go)
		u := UserFrom(r.Context())
		if objs := pipelineObjects(p, req.Inputs); !c.canAny(c.Policy(), u, rbac.Pipelines, rbac.Get, objs) {
			err = c.Authorize(r.Context(), u, r.RemoteAddr, "", rbac.Pipelines, rbac.Get, objs[0])
		}
	}
	switch {
	case errors.Is(err, ErrInvalid):
		writeErr(w, http.StatusUnprocessableEntity, err)
	case errors.Is(err, ErrRefused):
		writeErr(w, http.StatusConflict, err)
	case errors.Is(err, policy.ErrDenied), errors.Is(err, ErrForbidden):
		writeErr(w, http.StatusForbidden, err)
	case err != nil:
		writeErr(w, http.StatusInternalServerError, err)
	default:
		writeJSON(w, http.StatusOK, CheckResult{Pipeline: p.Name, Stages: len(p.Stages)})
	}
}

func (c *Controller) apiList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains(runsQuery, k) {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("unknown query parameter %q%s (known: %s)", k, didYouMean(k, runsQuery), strings.Join(runsQuery, ", ")))
			return
		}
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("limit %.20q: want a whole number from 1 to %d (0 or none: %d)", v, MaxRunsLimit, DefaultRunsLimit))
			return
		}
		limit = n
	}
	u := UserFrom(r.Context())
	page, err := c.ListRuns(r.Context(), ListOptions{Limit: limit, Cursor: q.Get("cursor"), Pipeline: q.Get("pipeline"), Status: q.Get("status"),
		Keep: func(s *RunSummary) bool { return c.CanGetSummary(r.Context(), u, s) }}) // only the runs the caller may get (rbac.go)
	switch {
	case errors.Is(err, ErrBadCursor), errors.Is(err, ErrInvalid):
		writeErr(w, http.StatusBadRequest, err)
		return
	case err != nil:
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	// Within a page, runs waiting for a person come first: they are what a reader has to act
	// on. The cursor is the page's oldest run, so the order does not move the next page.
	slices.SortStableFunc(page.Runs, func(a, b *RunSummary) int {
		return waitingFirst(a.Status) - waitingFirst(b.Status)
	})
	if page.Next != "" {
		// The body stays a plain list (as before pages): the next page's cursor rides in
		// headers, the RFC 8288 Link one for generic clients and the bare value for scripts.
		next := url.Values{"cursor": {page.Next}, "limit": {strconv.Itoa(page.Limit)}}
		for _, k := range []string{"pipeline", "status"} {
			if v := q.Get(k); v != "" {
				next.Set(k, v)
			}
		}
		w.Header().Set("Link", "</api/v1/runs?"+next.Encode()+`>; rel="next"`)
		w.Header().Set(NextCursorHeader, page.Next)
	}
	writeJSON(w, http.StatusOK, page.Runs)
}

// NextCursorHeader carries the cursor of a runs list's next page (none on the last page).
const NextCursorHeader = "X-Next-Cursor"

// runsQuery are GET /api/v1/runs's query parameters.
var runsQuery = []string{"limit", "cursor", "pipeline", "status"}

// waitingFirst orders runs waiting for an approval before the others.
func waitingFirst(s pipelines.Status) int {
	if s == pipelines.StWaitingApproval {
		return 0
	}
	return 1
}

func (c *Controller) apiGet(w http.ResponseWriter, r *http.Request) {
	run, err := c.Get(r.Context(), r.PathValue("id"))
	if errors.Is(err, ErrNotFound) {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	c.explainQueued(r.Context(), run)
	run.Status = run.Shown()
	writeJSON(w, http.StatusOK, run)
}

func (c *Controller) apiCancel(w http.ResponseWriter, r *http.Request) {
	err := c.Cancel(r.Context(), r.PathValue("id"), UserFrom(r.Context()).Name)
	switch {
	case errors.Is(err, ErrNotFound):
		writeErr(w, http.StatusNotFound, err)
	case err != nil:
		writeErr(w, http.StatusConflict, err)
	default:
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "cancelling"})
	}
}

// SignalRequest approves or rejects a parked step.
type SignalRequest struct {
	Stage    string `json:"stage"`
	Step     string `json:"step"`
	Rollback bool   `json:"rollback,omitempty"`
	Kind     string `json:"kind,omitempty"` // default approval
	Approve  bool   `json:"approve"`
	Comment  string `json:"comment,omitempty"`
}

func (c *Controller) apiSignal(w http.ResponseWriter, r *http.Request) {
	var req SignalRequest
	if err := decodeBody(r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	sig, err := c.sendSignal(r.Context(), r.PathValue("id"), req, UserFrom(r.Context()))
	if err != nil {
		writeDecisionErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, sig)
}

// mayDecide checks an approval decision before it is recorded, so the caller hears the truth
// instead of a decision the step would ignore: the step must wait for an approval (409) and
// the caller must be one of its approvers (403).
func mayDecide(run *pipelines.Run, stage string, st *pipelines.StepRun, u User) (int, error) {
	// A woken approval step keeps its wait until it looks again; decisions then still count.
	if st.Wait == nil || !slices.Contains(st.Wait.Topics, "approval") {
		return http.StatusConflict, fmt.Errorf("step %s.%s is not waiting for an approval (it is a %s step, %s)", stage, st.ID, st.Type, st.Status)
	}
	a := st.Wait.Approvers
	if a == nil {
		return 0, nil // parked by a worker that does not say who may decide: the step checks
	}
	if !a.Allows(u.Name, u.Groups) {
		who := append(append([]string{}, a.Users...), prefixAll("group:", a.Groups)...)
		sort.Strings(who)
		return http.StatusForbidden, fmt.Errorf("%s is not an approver of step %s.%s (approvers: %s)", u.Name, stage, st.ID, strings.Join(who, ", "))
	}
	if a.NotExecutor && u.Name == run.Executor {
		return http.StatusForbidden, fmt.Errorf("%s started run %s and may not decide on its approvals (disallowPipelineExecutor)", u.Name, run.ID)
	}
	return 0, nil
}

func prefixAll(p string, list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = p + s
	}
	return out
}

func notFoundOr500(err error) int {
	if errors.Is(err, ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func (c *Controller) apiWorkers(w http.ResponseWriter, r *http.Request) {
	out := []json.RawMessage{}
	lister, err := c.b.Workers.ListKeys(r.Context())
	if err == nil {
		for k := range lister.Keys() {
			if e, err := c.b.Workers.Get(r.Context(), k); err == nil {
				out = append(out, json.RawMessage(e.Value()))
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// apiLogs streams a run's step log lines as NDJSON; with follow=1 it keeps streaming until the
// run ends.
func (c *Controller) apiLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	run, err := c.Get(r.Context(), id)
	if err != nil {
		writeErr(w, notFoundOr500(err), err)
		return
	}
	subject := "prflow.logs." + id + ".>"
	if step := r.URL.Query().Get("step"); step != "" {
		if strings.Count(step, ".") != 1 || !validKey(strings.ReplaceAll(step, ".", "")) {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("step: want STAGE.STEP, got %q", step))
			return
		}
		stage, id2, _ := strings.Cut(step, ".")
		if !hasStep(run, stage, id2) {
			writeErr(w, http.StatusNotFound, fmt.Errorf("run %s has no step %s", id, step))
			return
		}
		subject = "prflow.logs." + id + "." + step
	}
	follow := r.URL.Query().Get("follow") == "1" || r.URL.Query().Get("follow") == "true"
	ctx := r.Context()
	oc, err := c.conn.JS.OrderedConsumer(ctx, queue.StreamLogs, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	done := run.Status.Terminal()
	for {
		msg, err := oc.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
		if err == nil {
			_, _ = w.Write(append(msg.Data(), '\n'))
			if flusher != nil {
				flusher.Flush()
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// No line for a while: stop unless following a live run.
		if !follow || done {
			return
		}
		if cur, err := c.Get(ctx, id); err == nil && cur.Status.Terminal() {
			done = true // one more drain pass, then stop
		}
	}
}

// hasStep reports whether a run has a step (main or rollback, or the trigger's path check).
func hasStep(r *pipelines.Run, stage, step string) bool {
	if stage == pipelines.PathCheckStage && step == pipelines.PathCheckStep && r.Trigger != nil && r.Trigger.PathCheck != nil {
		return true
	}
	sr := r.Find(stage)
	return sr != nil && (sr.Step(step, false) != nil || sr.Step(step, true) != nil)
}

// Signal sends a signal (an approval, a forge event) to a step of a run. The caller is
// responsible for the signal's identity; the API stamps it from the bearer token.
func (c *Controller) Signal(ctx context.Context, run, stage, step string, sig steps.Signal) error {
	return c.signal(ctx, run, stage, step, false, sig)
}

func (c *Controller) signal(ctx context.Context, run, stage, step string, rollback bool, sig steps.Signal) error {
	ev := envelope.Event{Kind: queue.EvSignal, Run: run, Stage: stage, Step: step, Rollback: rollback, Signal: &sig, User: sig.User}
	if err := c.Publish(ctx, ev, ""); err != nil {
		return err
	}
	c.recordSignal(ctx, run, stage, step, sig) // policy.go
	return nil
}

// apiSchema serves the pipeline JSON Schema of this server's step types.
func (c *Controller) apiSchema(w http.ResponseWriter, r *http.Request) {
	reg := c.reg
	if reg == nil {
		reg = steps.Default
	}
	b, err := pipelines.GenerateSchema(reg)
	if err != nil {
		http.Error(w, "schema: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(b)
}
