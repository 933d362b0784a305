package pipelines

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prflow/prflow/steps"
)

// Intervention actions a person (or the timeout) chooses for a stage parked by a manual
// failure strategy.
const (
	IntRetry    = "retry"    // run the failed step again
	IntIgnore   = "ignore"   // treat the failed step as passed (recorded on the step)
	IntAbort    = "abort"    // fail the stage, and so the run, without rollback
	IntRollback = "rollback" // roll the stage back (its rollback steps)
)

// InterventionActions are the actions a person may choose, in the order they are offered.
var InterventionActions = []string{IntRetry, IntIgnore, IntAbort, IntRollback}

// Intervention is a stage parked by a manual failure strategy (Action empty: waiting), or,
// once decided, the record of what was chosen, by whom and why.
type Intervention struct {
	Step     string    `json:"step"`  // the failed step
	Error    string    `json:"error"` // its failure
	Since    time.Time `json:"since"`
	Deadline time.Time `json:"deadline"`
	// OnTimeout is the failure action taken at Deadline (fail, ignore, rollbackStage,
	// rollbackPipeline).
	OnTimeout string `json:"onTimeout"`
	// Approvers may decide; nil: anyone authenticated.
	Approvers *steps.Approvers `json:"approvers,omitempty"`

	Action   string    `json:"action,omitempty"` // retry, ignore, abort, rollback, or the OnTimeout action
	User     string    `json:"user,omitempty"`
	Comment  string    `json:"comment,omitempty"`
	Decided  time.Time `json:"decided,omitzero"`
	TimedOut bool      `json:"timedOut,omitempty"`
	// Outcome says what happened, for people: "rolled back by alice", "timed out after 2h: rolled back".
	Outcome string `json:"outcome,omitempty"`
}

// Errors of Intervene; the API maps them to 400 (ErrBadIntervention) and 409
// (ErrNotIntervening).
var (
	ErrBadIntervention = errors.New("bad intervention")
	ErrNotIntervening  = errors.New("not waiting for an intervention")
)

// WaitingIntervention reports whether a stage of the unfinished run r waits for a person's
// decision (a manual failure strategy).
func (r *Run) WaitingIntervention() bool {
	if r.Status.Terminal() {
		return false
	}
	for _, s := range r.Stages {
		if s.Intervention != nil {
			return true
		}
	}
	return false
}

// park parks stage si on a manual intervention after step st failed with msg.
func (m *Machine) park(r *Run, si int, st *StepRun, ms *ManualStrategy, msg string, now time.Time) {
	sr := r.Stages[si]
	on := ms.OnTimeout
	if on == "" {
		on = ActFail
		if len(m.P.Stages[si].Rollback) > 0 {
			on = ActRollbackStage
		}
	}
	timeout := ms.Timeout
	if timeout <= 0 {
		timeout = DefaultManualTimeout
	}
	sr.Intervention = &Intervention{Step: st.ID, Error: msg, Since: now, Deadline: now.Add(timeout), OnTimeout: on, Approvers: ms.Approvers}
}

// Intervene applies a person's decision on stage's parked intervention. action is one of
// InterventionActions. It returns ErrBadIntervention (unknown stage or action) or
// ErrNotIntervening (the stage waits for no decision: none was asked for, or another one
// came first), wrapped with what is wrong. The caller checks who may decide (MayIntervene).
func (m *Machine) Intervene(r *Run, stage, action, user, comment string, now time.Time) error {
	valid := false
	for _, a := range InterventionActions {
		valid = valid || a == action
	}
	if !valid {
		return fmt.Errorf("%w: unknown action %q (want %s)", ErrBadIntervention, action, strings.Join(InterventionActions, ", "))
	}
	si, sr := m.stageRun(r, stage)
	if sr == nil {
		return fmt.Errorf("%w: run %s has no stage %q", ErrBadIntervention, r.ID, stage)
	}
	iv := sr.Intervention
	if iv == nil || r.Status.Terminal() {
		why := "it is " + string(sr.Status)
		if n := len(sr.Interventions); n > 0 {
			last := sr.Interventions[n-1]
			why = "already decided: " + last.Outcome
		}
		return fmt.Errorf("%w: stage %s of run %s is not waiting for an intervention (%s)", ErrNotIntervening, stage, r.ID, why)
	}
	st := sr.Step(iv.Step, false)
	if action == IntRollback && st != nil && st.NoRollback {
		return fmt.Errorf("%w: step %s could not observe the cluster, so a rollback would run blind; choose retry or abort", ErrNotIntervening, iv.Step)
	}
	by := ""
	if user != "" {
		by = " by " + user
	}
	m.decide(r, si, action, now, func(iv *Intervention, outcome string) {
		iv.User, iv.Comment, iv.Outcome = user, comment, outcome+by
	})
	return nil
}

// MayIntervene reports whether user (member of groups) may decide on stage's intervention.
func (iv *Intervention) MayIntervene(user string, groups []string) bool {
	return iv.Approvers == nil || iv.Approvers.Allows(user, groups)
}

// timeoutIntervention takes the OnTimeout action of stage si's overdue intervention.
func (m *Machine) timeoutIntervention(r *Run, si int, now time.Time) {
	iv := r.Stages[si].Intervention
	action := map[string]string{ActFail: IntAbort, ActIgnore: IntIgnore, ActRollbackStage: IntRollback, ActRollbackPipeline: ActRollbackPipeline}[iv.OnTimeout]
	if action == "" {
		action = IntAbort
	}
	if st := r.Stages[si].Step(iv.Step, false); action != IntAbort && action != IntIgnore && st != nil && st.NoRollback {
		action = IntAbort // as failStep: no rollback runs blind
	}
	waited := shortDur(iv.Deadline.Sub(iv.Since))
	m.decide(r, si, action, now, func(iv *Intervention, outcome string) {
		iv.TimedOut, iv.Outcome = true, "timed out after "+waited+": "+outcome
	})
}

// decide ends stage si's intervention with action (an intervention action, or
// rollbackPipeline on timeout) and records it; note fills in who and the outcome.
func (m *Machine) decide(r *Run, si int, action string, now time.Time, note func(iv *Intervention, outcome string)) {
	sr := r.Stages[si]
	iv := sr.Intervention
	sr.Intervention = nil
	iv.Action, iv.Decided = action, now
	st := sr.Step(iv.Step, false)
	outcome := ""
	switch action {
	case IntRetry:
		outcome = "retried"
		if st != nil {
			st.Status, st.Attempt, st.Wake, st.WakeReason, st.Memo, st.Outputs = StPending, st.Attempt+1, 0, "", nil, nil
			st.Error, st.Ended, st.Started, st.Deadline, st.RetryAt, st.Wait, st.Signals = "", time.Time{}, time.Time{}, time.Time{}, time.Time{}, nil, nil
		}
	case IntIgnore:
		outcome = "ignored"
		if st != nil {
			st.Ignored = true
		}
	case IntAbort:
		outcome = "aborted"
	case IntRollback:
		outcome = "rolled back"
	case ActRollbackPipeline:
		outcome = "pipeline rolled back"
	}
	note(iv, outcome)
	sr.Interventions = append(sr.Interventions, *iv)
	msg := fmt.Sprintf("step %s: %s (%s)", iv.Step, iv.Error, iv.Outcome)
	switch action {
	case IntIgnore:
		if st != nil {
			st.Error = iv.Error + " [" + iv.Outcome + "]"
		}
	case IntAbort:
		m.stageFailed(r, si, sr, msg, ActFail, now)
	case IntRollback:
		m.stageFailed(r, si, sr, msg, ActRollbackStage, now)
	case ActRollbackPipeline:
		m.stageFailed(r, si, sr, msg, ActRollbackPipeline, now)
	}
}

// shortDur writes d as people do: 2h, 90m → 1h30m, 45s (Duration.String's "2h0m0s" trimmed).
func shortDur(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
