package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/steps/envelope"
)

// InterveneRequest is a person's decision on a stage parked by a manual failure strategy:
// POST /api/v1/runs/{id}/interventions/{stage}.
type InterveneRequest struct {
	Action  string `json:"action"` // retry, ignore, abort, rollback
	Comment string `json:"comment,omitempty"`
}

// evIntervention is the kind of the event handleWith is given for a decision; it never goes
// through the events stream.
const evIntervention = "intervention"

// Intervene records u's decision on stage of run and moves the run on. The decision is
// applied with a revision-checked update of the stored run, so of two concurrent decisions
// exactly one is taken; the other gets a DecisionError with 409. Unknown action or stage: 400;
// u not among the intervention's approvers: 403; unknown run: 404.
func (c *Controller) Intervene(ctx context.Context, runID, stage string, req InterveneRequest, u User) (*pipelines.Intervention, error) {
	if !validKey(runID) {
		return nil, &DecisionError{Code: http.StatusNotFound, Err: fmt.Errorf("%w: %q", ErrNotFound, runID)}
	}
	run, err := c.Get(ctx, runID)
	if err != nil {
		return nil, &DecisionError{Code: notFoundOr500(err), Err: err}
	}
	// RBAC first, then the strategy's own approvers (below): both must allow (rbac.go).
	if err := c.Authorize(ctx, u, "", runID, rbac.Interventions, rbac.Approve, c.StageObject(ctx, run, stage)); err != nil {
		return nil, &DecisionError{Code: http.StatusForbidden, Err: err}
	}
	var decided *pipelines.Intervention
	ev := &envelope.Event{Kind: evIntervention, Run: runID, Stage: stage, User: u.Name}
	err = c.handleWith(ctx, ev, false, func(m *pipelines.Machine, r *pipelines.Run, now time.Time) error {
		decided = nil
		if sr := r.Find(stage); sr != nil && sr.Intervention != nil && validAction(req.Action) && !sr.Intervention.MayIntervene(u.Name, u.Groups) {
			a := sr.Intervention.Approvers
			who := append(append([]string{}, a.Users...), prefixAll("group:", a.Groups)...)
			sort.Strings(who)
			return &DecisionError{Code: http.StatusForbidden, Err: fmt.Errorf("%s may not decide on stage %s of run %s (approvers: %s)", u.Name, stage, runID, strings.Join(who, ", "))}
		}
		if err := m.Intervene(r, stage, req.Action, u.Name, req.Comment, now); err != nil {
			code := http.StatusConflict
			if errors.Is(err, pipelines.ErrBadIntervention) {
				code = http.StatusBadRequest
			}
			return &DecisionError{Code: code, Err: err}
		}
		list := r.Find(stage).Interventions
		rec := list[len(list)-1]
		decided = &rec
		return nil
	})
	if err != nil {
		if de := (*DecisionError)(nil); errors.As(err, &de) {
			return nil, de
		}
		return nil, &DecisionError{Code: http.StatusInternalServerError, Err: err}
	}
	if decided == nil {
		return nil, &DecisionError{Code: http.StatusInternalServerError, Err: fmt.Errorf("run %s: decision not recorded", runID)}
	}
	detail := stage + "." + decided.Step + ": " + decided.Outcome
	if decided.Comment != "" {
		detail += ": " + clip(decided.Comment, 200)
	}
	c.record(ctx, audit.Entry{Actor: u.Name, Action: audit.InterventionDecided, Run: runID, Detail: detail})
	c.log.Info("intervention decided", "run", runID, "stage", stage, "action", decided.Action, "user", u.Name)
	return decided, nil
}

func validAction(a string) bool {
	for _, x := range pipelines.InterventionActions {
		if x == a {
			return true
		}
	}
	return false
}

// MayIntervene reports whether u may decide on stage of run now (the UI shows its buttons only
// then); the error says why not.
func MayIntervene(run *pipelines.Run, stage string, u User) error {
	sr := run.Find(stage)
	if sr == nil || sr.Intervention == nil || run.Status.Terminal() {
		return fmt.Errorf("stage %s is not waiting for an intervention", stage)
	}
	if !sr.Intervention.MayIntervene(u.Name, u.Groups) {
		return fmt.Errorf("%s is not among the approvers of this intervention", u.Name)
	}
	return nil
}

func (c *Controller) apiIntervene(w http.ResponseWriter, r *http.Request) {
	var req InterveneRequest
	if err := decodeBody(r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	rec, err := c.Intervene(r.Context(), r.PathValue("id"), r.PathValue("stage"), req, UserFrom(r.Context()))
	if err != nil {
		writeDecisionErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}
