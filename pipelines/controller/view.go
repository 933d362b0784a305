package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
)

// This file gives read-side views (the web UI) what they need from a controller without
// reaching into its fields: the NATS buckets, the stored pipelines, and approval decisions
// with the same checks the API makes.

// Conn is the controller's NATS connection (the logs stream is read through it).
func (c *Controller) Conn() *queue.Conn { return c.conn }

// Pipeline returns the stored pipeline a run was started from (its Spec hash).
func (c *Controller) Pipeline(ctx context.Context, spec string) (*pipelines.Pipeline, error) {
	m, err := c.machine(ctx, spec)
	if err != nil {
		return nil, err
	}
	return m.P, nil
}

// DecisionError is a refused approval decision; Code is the HTTP status that fits it.
type DecisionError struct {
	Code int
	Err  error
}

func (e *DecisionError) Error() string { return e.Err.Error() }
func (e *DecisionError) Unwrap() error { return e.Err }

// writeDecisionErr answers a refused or failed decision: a *DecisionError with its code and
// error, anything else 500.
func writeDecisionErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if de := (*DecisionError)(nil); errors.As(err, &de) {
		code, err = de.Code, de.Err
	}
	writeErr(w, code, err)
}

// Decide records user u's approval decision on a parked step, after the API's checks: the run
// and step exist, the step is not finished and waits for an approval, and u may decide.
// Refusals are *DecisionError; an unknown run also matches ErrNotFound.
func (c *Controller) Decide(ctx context.Context, runID string, req SignalRequest, u User) error {
	req.Kind = "approval"
	_, err := c.sendSignal(ctx, runID, req, u)
	return err
}

// sendSignal checks and sends a signal for the API and the UI alike; an approval also needs a
// caller who may decide.
func (c *Controller) sendSignal(ctx context.Context, runID string, req SignalRequest, u User) (steps.Signal, error) {
	run, err := c.Get(ctx, runID)
	if err != nil {
		return steps.Signal{}, &DecisionError{Code: notFoundOr500(err), Err: err}
	}
	sr := run.Find(req.Stage)
	if sr == nil || sr.Step(req.Step, req.Rollback) == nil {
		return steps.Signal{}, &DecisionError{Code: http.StatusNotFound, Err: fmt.Errorf("run %s has no step %s.%s", run.ID, req.Stage, req.Step)}
	}
	st := sr.Step(req.Step, req.Rollback)
	if st.Status.Terminal() {
		return steps.Signal{}, &DecisionError{Code: http.StatusConflict, Err: fmt.Errorf("step %s.%s is already %s", req.Stage, req.Step, st.Status)}
	}
	kind := req.Kind
	if kind == "" {
		kind = "approval"
	}
	// RBAC first, then the step's own approvers: both must allow (rbac.go).
	res := rbac.Approvals
	if kind != "approval" {
		res = rbac.Interventions
	}
	if err := c.Authorize(ctx, u, "", run.ID, res, rbac.Approve, c.StageObject(ctx, run, req.Stage)); err != nil {
		return steps.Signal{}, &DecisionError{Code: http.StatusForbidden, Err: err}
	}
	if kind == "approval" {
		if code, err := mayDecide(run, req.Stage, st, u); err != nil {
			return steps.Signal{}, &DecisionError{Code: code, Err: err}
		}
	}
	sig := steps.Signal{Kind: kind, User: u.Name, Groups: u.Groups, Approve: req.Approve, Comment: req.Comment, At: time.Now().UTC()}
	if err := c.signal(ctx, run.ID, req.Stage, req.Step, req.Rollback, sig); err != nil {
		return steps.Signal{}, &DecisionError{Code: http.StatusInternalServerError, Err: err}
	}
	return sig, nil
}

// MayDecide reports whether u may decide on step st of run now (the UI shows its buttons
// only then); the error says why not.
func MayDecide(run *pipelines.Run, stage string, st *pipelines.StepRun, u User) error {
	if st.Status.Terminal() {
		return fmt.Errorf("step %s.%s is already %s", stage, st.ID, st.Status)
	}
	_, err := mayDecide(run, stage, st, u)
	return err
}
