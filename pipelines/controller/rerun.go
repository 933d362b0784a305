package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/policy"
)

// ErrStillRunning refuses to re-run or retry a run that has not ended.
var ErrStillRunning = errors.New("run has not ended")

// ErrCannotRetry refuses a retry from the failed stage that would not mean anything: the run
// did not fail, or the pipeline changed under what it carried over.
var ErrCannotRetry = errors.New("cannot retry")

// Rerun starts a new run of a finished run's stored pipeline source with its inputs and
// trigger, every stage again. req says who asks (Executor, Groups, Remote) and may fix the new
// run's id; its File, Source and Inputs are ignored. The start goes through everything Start
// does: the connector and agent checks, the run policies (as the caller) and the audit log
// ("re-run of" the old run). An unknown run is ErrNotFound, an active one ErrStillRunning.
func (c *Controller) Rerun(ctx context.Context, id string, req StartRequest) (*pipelines.Run, error) {
	old, err := c.finishedRun(ctx, id, "re-run")
	if err != nil {
		return nil, err
	}
	if req, err = c.fromRun(ctx, old, req); err != nil {
		return nil, err
	}
	return c.start(ctx, req, func(_ *pipelines.Pipeline, r *pipelines.Run) error {
		r.RerunOf = old.ID
		return nil
	})
}

// Retry starts a new run of a failed or cancelled run from its failed stage: the stages that
// succeeded are carried over with their outputs instead of running again (see
// pipelines.CarryOver). The source is the old run's stored one, or req.Source when given (a
// fixed pipeline; refused with ErrCannotRetry when it no longer fits what the old run did).
// The inputs, trigger, checks, policies and audit are as for Rerun.
func (c *Controller) Retry(ctx context.Context, id string, req StartRequest) (*pipelines.Run, error) {
	old, err := c.finishedRun(ctx, id, "retry")
	if err != nil {
		return nil, err
	}
	if old.Status != pipelines.StFailed && old.Status != pipelines.StCancelled {
		return nil, fmt.Errorf("%w run %s: it %s, there is no failed stage to retry from (re-run it to run every stage again)", ErrCannotRetry, old.ID, old.Status)
	}
	src, file := req.Source, req.File
	if req, err = c.fromRun(ctx, old, req); err != nil {
		return nil, err
	}
	if len(src) > 0 {
		req.Source, req.File = src, cmp.Or(file, req.File)
	}
	return c.start(ctx, req, func(p *pipelines.Pipeline, r *pipelines.Run) error {
		if _, err := pipelines.CarryOver(p, r, old); err != nil {
			return fmt.Errorf("%w: %w", ErrCannotRetry, err)
		}
		r.RetryOf = old.ID
		return nil
	})
}

// finishedRun reads the run to re-run or retry; it must have ended.
func (c *Controller) finishedRun(ctx context.Context, id, what string) (*pipelines.Run, error) {
	old, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !old.Status.Terminal() {
		return nil, fmt.Errorf("%w: cannot %s run %s: it is %s; wait for it to end or cancel it first", ErrStillRunning, what, id, old.Shown())
	}
	return old, nil
}

// fromRun fills req with what old ran: its stored pipeline source, inputs and trigger.
func (c *Controller) fromRun(ctx context.Context, old *pipelines.Run, req StartRequest) (StartRequest, error) {
	e, err := c.b.Specs.Get(ctx, old.Spec)
	if err != nil {
		return req, fmt.Errorf("run %s: its pipeline source %s: %w", old.ID, old.Spec, errors.Join(ErrUnknownSpec, err))
	}
	var sp storedSpec
	if err := json.Unmarshal(e.Value(), &sp); err != nil {
		return req, fmt.Errorf("run %s: stored pipeline %s: %w", old.ID, old.Spec, err)
	}
	req.File, req.Source, req.Inputs = sp.File, sp.Source, maps.Clone(old.Inputs)
	if req.Inputs == nil {
		req.Inputs = map[string]any{}
	}
	req.Trigger = retrigger(old.Trigger)
	return req, nil
}

// retrigger copies what started a run for a new run of it: expressions and commit statuses
// see the same trigger. A path check that had not passed is done again.
func retrigger(t *pipelines.TriggerInfo) *pipelines.TriggerInfo {
	if t == nil {
		return nil
	}
	cp := *t
	cp.Paths = append([]string(nil), t.Paths...)
	if t.PathCheck != nil {
		if t.PathCheck.Status == pipelines.StSucceeded {
			pc := *t.PathCheck
			pc.Outputs = maps.Clone(t.PathCheck.Outputs)
			cp.PathCheck = &pc
		} else {
			cp.PathCheck = nil
		}
	}
	return &cp
}

// origin is what the audit log says about where a run came from.
func origin(r *pipelines.Run) string {
	switch {
	case r.RerunOf != "":
		return " (re-run of " + r.RerunOf + ")"
	case r.RetryOf != "":
		var carried []string
		for _, s := range r.Stages {
			if s.CarriedFrom != "" {
				carried = append(carried, s.ID)
			}
		}
		return fmt.Sprintf(" (retry of %s from its failed stage; carried over: %s)", r.RetryOf, cmp.Or(strings.Join(carried, ", "), "none"))
	}
	return ""
}

// RetryRequest is the body of POST /api/v1/runs/{id}/retry: empty, or a fixed pipeline source
// to retry with instead of the stored one.
type RetryRequest struct {
	File   string     `json:"file,omitempty"`
	Source SourceText `json:"source,omitempty"`
}

// apiRerun is POST /api/v1/runs/{id}/rerun (no body, or {}).
func (c *Controller) apiRerun(w http.ResponseWriter, r *http.Request) {
	var body struct{}
	if err := decodeOptional(r, &body); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	id := r.PathValue("id")
	c.serveStart(w, r, c.caller(r), digestOf("rerun", id), func(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
		return c.Rerun(ctx, id, req)
	})
}

// apiRetry is POST /api/v1/runs/{id}/retry (no body, or a RetryRequest).
func (c *Controller) apiRetry(w http.ResponseWriter, r *http.Request) {
	var body RetryRequest
	if err := decodeOptional(r, &body); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	id := r.PathValue("id")
	req := c.caller(r)
	req.File, req.Source = body.File, body.Source
	c.serveStart(w, r, req, digestOf("retry", id, body.File, string(body.Source)), func(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
		return c.Retry(ctx, id, req)
	})
}

// caller is a start request with who sends it, from the token (never from the body).
func (c *Controller) caller(r *http.Request) StartRequest {
	u := UserFrom(r.Context())
	return StartRequest{Executor: u.Name, Groups: u.Groups, Remote: r.RemoteAddr}
}

// decodeOptional decodes a JSON body that may be empty.
func decodeOptional(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body larger than %d bytes", mbe.Limit)
		}
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

// serveStart starts a run with start (honouring an Idempotency-Key: digest names the request
// the key stands for) and answers as POST /api/v1/runs does.
func (c *Controller) serveStart(w http.ResponseWriter, r *http.Request, req StartRequest, digest string, start func(context.Context, StartRequest) (*pipelines.Run, error)) {
	var run *pipelines.Run
	var err error
	if keys := r.Header.Values(IdempotencyHeader); len(keys) > 0 {
		if len(keys) > 1 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%d %s headers: send one", len(keys), IdempotencyHeader))
			return
		}
		if err := CheckIdempotencyKey(keys[0]); err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		var replayed bool
		run, replayed, err = c.startOnce(r.Context(), keys[0], req, digest, start)
		if err == nil && replayed {
			// The answer the first request got (or would have): the run, as it is now.
			w.Header().Set(ReplayedHeader, "true")
		}
	} else {
		run, err = start(r.Context(), req)
	}
	if run != nil {
		run.Status = run.Shown() // a replayed start answers with the run as it is now
	}
	switch {
	case errors.Is(err, ErrExists):
		writeJSON(w, http.StatusOK, run)
	case err != nil:
		writeErr(w, StartErrorStatus(err), err)
	default:
		writeJSON(w, http.StatusCreated, run)
	}
}

// StartErrorStatus is the HTTP status that fits an error of a run start (Start, Rerun, Retry,
// StartPipeline).
func StartErrorStatus(err error) int {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnknownPipeline):
		return http.StatusNotFound
	case errors.Is(err, ErrKeyReused), errors.Is(err, ErrInvalid):
		return http.StatusUnprocessableEntity
	case errors.Is(err, ErrRefused), errors.Is(err, ErrStillRunning), errors.Is(err, ErrCannotRetry), errors.Is(err, ErrUnknownSpec):
		return http.StatusConflict
	case errors.Is(err, policy.ErrDenied), errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// digestOf names an action request for its idempotency key.
func digestOf(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:])
}

// RerunOnce is Rerun under an idempotency key (the UI's form, the API's Idempotency-Key): the
// same key again returns the run the first request started (replayed true).
func (c *Controller) RerunOnce(ctx context.Context, key, id string, req StartRequest) (*pipelines.Run, bool, error) {
	return c.startOnce(ctx, key, req, digestOf("rerun", id), func(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
		return c.Rerun(ctx, id, req)
	})
}

// RetryOnce is Retry under an idempotency key (see RerunOnce).
func (c *Controller) RetryOnce(ctx context.Context, key, id string, req StartRequest) (*pipelines.Run, bool, error) {
	return c.startOnce(ctx, key, req, digestOf("retry", id, req.File, string(req.Source)), func(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
		return c.Retry(ctx, id, req)
	})
}
