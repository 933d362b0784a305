package pipelines

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
	"github.com/prflow/prflow/steps/template"
)

// DefaultPool is the worker pool of steps that name none.
const DefaultPool = "default"

// Machine moves runs of one pipeline forward. It is pure: it reads and changes a *Run and
// returns the jobs to publish; the controller persists the run with a revision check and then
// publishes. Every method is deterministic given the run, the event and now.
type Machine struct {
	P   *Pipeline
	Reg *steps.Registry
	// Gate, when set, is asked before each stage starts (after its own when): a deny fails
	// the stage before any of its jobs, with every message; warnings are kept on the stage.
	Gate StageGate
}

// StageGate decides whether stage si of run r may start (policy as code). It reads live
// state (app status), so a Machine with a gate is no longer a pure function of the run.
type StageGate interface {
	StageAllowed(r *Run, si int) (deny, warn []string)
}

// PreviewGate, when the Gate has it, is asked again after a DiffPreview step of stage si
// succeeded, now that the stage's diff is known (its outputs are on the run): a deny fails
// the step, so the stage fails before its merge.
type PreviewGate interface {
	PreviewAllowed(r *Run, si int) (deny, warn []string)
}

// Apply records an event in the run. It reports whether the state changed; a duplicate or
// stale event (a result for an attempt that is no longer current) changes nothing.
func (m *Machine) Apply(r *Run, ev *envelope.Event, now time.Time) bool {
	if ev.Stage == NotifyStage {
		return m.applyNotify(r, ev) // also after the run ended: run.succeeded goes out then
	}
	if r.Status.Terminal() {
		return false
	}
	switch ev.Kind {
	case queue.EvStart, queue.EvTick:
		return false // Advance does the work
	case queue.EvCancel:
		m.cancel(r, ev.User, now)
		return true
	}
	if ev.Stage == PathCheckStage {
		return m.applyPathCheck(r, ev, now)
	}
	si, sr := m.stageRun(r, ev.Stage)
	if sr == nil {
		return false
	}
	st := sr.Step(ev.Step, ev.Rollback)
	if st == nil {
		return false
	}
	switch ev.Kind {
	case queue.EvResult, queue.EvDead:
		res, ok := takeResult(st, ev)
		if !ok {
			return false
		}
		for _, w := range res.Warnings {
			if res.Status != steps.Failed && !slices.Contains(r.Warnings, w) {
				r.Warnings = append(r.Warnings, w)
			}
		}
		switch res.Status {
		case steps.Succeeded:
			st.Status, st.Outputs, st.Ended, st.Wait, st.Error = StSucceeded, res.Outputs, now, nil, ""
			if pg, ok := m.Gate.(PreviewGate); ok && st.Type == steps.TypeDiffPreview && !ev.Rollback {
				deny, warn := pg.PreviewAllowed(r, si)
				for _, w := range warn {
					if !slices.Contains(sr.Warnings, w) {
						sr.Warnings = append(sr.Warnings, w)
					}
				}
				if len(deny) > 0 {
					st.Status, st.Ended = StRunning, time.Time{} // failStep decides what the failure does
					m.failStep(r, si, st, ev.Rollback, "denied by policy: "+strings.Join(deny, "; "), now)
				}
			}
		case steps.Waiting:
			w := res.Wait
			if w == nil {
				w = &steps.Wait{}
			}
			if st.WakeReason == "deadline" || (!st.Deadline.IsZero() && !now.Before(st.Deadline)) {
				m.failStep(r, si, st, ev.Rollback, fmt.Sprintf("timed out: %s", orDefault(w.Reason, "still waiting")), now)
				return true
			}
			st.Status, st.Wait, st.WaitSince, st.Memo = StWaiting, w, now, res.Memo
			if !w.Deadline.IsZero() && (st.Deadline.IsZero() || w.Deadline.Before(st.Deadline)) {
				st.Deadline = w.Deadline
			}
		default:
			// A failed step keeps what it saw (GitOpsSync's per-app state); NoRollback: it
			// could not observe the cluster, so no rollback runs blind.
			st.Outputs, st.NoRollback = res.Outputs, res.NoRollback
			m.failStep(r, si, st, ev.Rollback, orDefault(res.Message, "step failed"), now)
		}
		return true
	case queue.EvWake:
		if st.Status != StWaiting || st.Wake != ev.Wake {
			return false
		}
		m.wake(st, ev.Reason, now)
		return true
	case queue.EvSignal:
		if st.Status.Terminal() || ev.Signal == nil {
			return false
		}
		st.Signals = append(st.Signals, *ev.Signal)
		if st.Status == StWaiting {
			m.wake(st, "signal", now)
		}
		return true
	}
	return false
}

// wake makes a parked step pending again; Advance dispatches it with the next wake number.
func (m *Machine) wake(st *StepRun, reason string, now time.Time) {
	st.Status, st.Wake, st.WakeReason = StPending, st.Wake+1, reason
}

// Tick handles everything that is due at now: retries, poll fallbacks, deadlines and stage
// and run timeouts. It reports whether anything changed.
func (m *Machine) Tick(r *Run, now time.Time) bool {
	if r.Status.Terminal() {
		return false
	}
	changed := false
	if !r.Deadline.IsZero() && !now.Before(r.Deadline) {
		m.failRun(r, fmt.Sprintf("pipeline timed out after %s", m.P.Timeout), now)
		return true
	}
	for si, sr := range r.Stages {
		if sr.Status != StRunning {
			continue
		}
		if sr.Intervention != nil {
			// Parked for a person: only the intervention's own deadline applies.
			if !now.Before(sr.Intervention.Deadline) {
				m.timeoutIntervention(r, si, now)
				changed = true
			}
			continue
		}
		if !sr.Deadline.IsZero() && !now.Before(sr.Deadline) && !sr.RollingBack && sr.Failing == "" {
			for _, st := range sr.Steps {
				if st.Status == StQueued || st.Status == StWaiting || st.Status == StPending {
					st.Status, st.Ended = StFailed, now
					st.Error = fmt.Sprintf("stage timed out after %s", m.P.Stages[si].Timeout)
					m.stageFailed(r, si, sr, fmt.Sprintf("step %s: %s", st.ID, st.Error), m.strategy(si, m.P.Stages[si].Steps[indexOf(sr.Steps, st)], false).terminalAction(), now)
					break
				}
			}
			changed = true
			continue
		}
		for _, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				switch st.Status {
				case StWaiting:
					switch {
					case !st.Deadline.IsZero() && !now.Before(st.Deadline):
						m.wake(st, "deadline", now)
						changed = true
					case st.Wait != nil && st.Wait.Poll > 0 && !now.Before(st.WaitSince.Add(st.Wait.Poll)):
						m.wake(st, "poll", now)
						changed = true
					}
				case StPending:
					if !st.RetryAt.IsZero() && !now.Before(st.RetryAt) {
						st.RetryAt = time.Time{}
						changed = true
					}
				}
			}
		}
	}
	return changed
}

// NextDue is the earliest time Tick has something to do (zero: nothing scheduled).
func (m *Machine) NextDue(r *Run) time.Time {
	var due time.Time
	min := func(t time.Time) {
		if !t.IsZero() && (due.IsZero() || t.Before(due)) {
			due = t
		}
	}
	if r.Status.Terminal() {
		return due
	}
	min(r.Deadline)
	for _, sr := range r.Stages {
		if sr.Status != StRunning {
			continue
		}
		if sr.Intervention != nil {
			min(sr.Intervention.Deadline)
			continue
		}
		if !sr.RollingBack && sr.Failing == "" { // as in Tick: a failing stage's deadline is spent
			min(sr.Deadline)
		}
		for _, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				switch st.Status {
				case StWaiting:
					min(st.Deadline)
					if st.Wait != nil && st.Wait.Poll > 0 {
						min(st.WaitSince.Add(st.Wait.Poll))
					}
				case StPending:
					min(st.RetryAt)
				}
			}
		}
	}
	return due
}

func (m *Machine) cancel(r *Run, user string, now time.Time) {
	for _, sr := range r.Stages {
		for _, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if !st.Status.Terminal() {
					st.Status, st.Ended = StCancelled, now
				}
			}
		}
		if !sr.Status.Terminal() {
			sr.Status, sr.Ended = StCancelled, now
		}
	}
	if r.Trigger != nil && r.Trigger.PathCheck != nil && !r.Trigger.PathCheck.Status.Terminal() {
		r.Trigger.PathCheck.Status, r.Trigger.PathCheck.Ended = StCancelled, now
	}
	r.Status, r.Ended = StCancelled, now
	r.Error = "cancelled"
	if user != "" {
		r.Error += " by " + user
	}
}

func (m *Machine) failRun(r *Run, msg string, now time.Time) {
	m.cancel(r, "", now)
	r.Status, r.Error = StFailed, msg
}

func (m *Machine) stageRun(r *Run, id string) (int, *StageRun) {
	for i, s := range r.Stages {
		if s.ID == id {
			return i, s
		}
	}
	return -1, nil
}

func indexOf(list []*StepRun, st *StepRun) int {
	for i, x := range list {
		if x == st {
			return i
		}
	}
	return -1
}

func (m *Machine) spec(si int, st *StepRun, rollback bool) *Step {
	s := m.P.Stages[si]
	list := s.Steps
	if rollback {
		list = s.Rollback
	}
	for _, x := range list {
		if x.ID == st.ID {
			return x
		}
	}
	return nil
}

type strategy struct{ *FailureStrategy }

func (s strategy) terminalAction() string {
	if s.Action == ActRetry {
		return orDefault(s.Then, ActFail)
	}
	return s.Action
}

// strategy is the step's failure strategy, else the stage's, else rollbackStage when the stage
// has rollback steps, else fail.
func (m *Machine) strategy(si int, sp *Step, rollback bool) strategy {
	if rollback {
		return strategy{&FailureStrategy{Action: ActFail}}
	}
	if sp != nil && sp.OnFailure != nil {
		return strategy{sp.OnFailure}
	}
	if s := m.P.Stages[si]; s.OnFailure != nil {
		return strategy{s.OnFailure}
	} else if len(s.Rollback) > 0 {
		return strategy{&FailureStrategy{Action: ActRollbackStage}}
	}
	return strategy{&FailureStrategy{Action: ActFail}}
}

func (m *Machine) failStep(r *Run, si int, st *StepRun, rollback bool, msg string, now time.Time) {
	sr := r.Stages[si]
	fs := m.strategy(si, m.spec(si, st, rollback), rollback)
	st.Error, st.Wait = msg, nil
	action := fs.Action
	if action == ActRetry {
		if st.Attempt <= fs.Retries {
			backoff := fs.Backoff << (st.Attempt - 1)
			st.Status, st.RetryAt, st.Attempt, st.Wake, st.Memo, st.Outputs = StPending, now.Add(backoff), st.Attempt+1, 0, nil, nil
			st.WakeReason = ""
			return
		}
		action = orDefault(fs.Then, ActFail)
		msg = fmt.Sprintf("%s (after %d attempts)", msg, st.Attempt)
		st.Error = msg
	}
	st.Status, st.Ended = StFailed, now
	if st.NoRollback && (action == ActRollbackStage || action == ActRollbackPipeline) {
		action = ActFail
		st.Error = msg + " [not rolled back: prflow could not observe the cluster]"
		msg = st.Error
	}
	if action == ActIgnore {
		st.Ignored = true
		return
	}
	if action == ActManual && !sr.RollingBack && sr.Failing == "" {
		m.park(r, si, st, fs.Manual, msg, now) // intervene.go: a person decides
		return
	}
	if action == ActManual {
		action = ActFail // after another failure (whose action stands) or in rollback
	}
	m.stageFailed(r, si, sr, fmt.Sprintf("step %s: %s", st.ID, msg), action, now)
}

func (m *Machine) stageFailed(r *Run, si int, sr *StageRun, msg, action string, now time.Time) {
	if sr.RollingBack {
		// A rollback step failed: the stage ends failed; keep the original error first, and
		// say what git and the cluster hold now (RollbackFailed).
		state := rollbackState(sr)
		sr.Error = joinErr(sr.Error, "rollback failed: "+msg+" ("+state+")")
		r.RollbackFailed = joinErr(r.RollbackFailed, "stage "+sr.ID+": "+state)
		sr.Status, sr.Ended, sr.RollingBack = StFailed, now, false
		m.notRun(sr.Rollback, "an earlier rollback step failed", now)
		return
	}
	if sr.Failing != "" {
		// A step that ran after the failure failed too: the first failure's action stands.
		sr.Error = joinErr(sr.Error, msg)
		m.notRunUnlessAfterFailure(si, sr, now)
		return
	}
	sr.Error = msg
	if action == ActRollbackPipeline {
		r.RollingBack = true
	}
	if m.notRunUnlessAfterFailure(si, sr, now) {
		// Steps asking for failure() or always() run first; advanceStage applies the action.
		sr.Failing = action
		return
	}
	m.applyFailure(sr, action, now)
}

// notRunUnlessAfterFailure ends the stage's pending steps as not run, except those whose when
// calls failure() or always(); it reports whether any of those is left to run.
func (m *Machine) notRunUnlessAfterFailure(si int, sr *StageRun, now time.Time) bool {
	left := false
	for _, st := range sr.Steps {
		if st.Status != StPending {
			continue
		}
		if sp := m.spec(si, st, false); sp != nil && sp.When != nil && sp.When.RunsAfterFailure() {
			left = true
			continue
		}
		st.Status, st.Ended, st.Error, st.RetryAt = StNotRun, now, "an earlier step of the stage failed", time.Time{}
	}
	return left
}

// applyFailure ends a failed stage or starts its rollback steps.
func (m *Machine) applyFailure(sr *StageRun, action string, now time.Time) {
	sr.Failing = ""
	if (action == ActRollbackStage || action == ActRollbackPipeline) && len(sr.Rollback) > 0 {
		sr.RollingBack = true
		return
	}
	sr.Status, sr.Ended = StFailed, now
}

// Advance moves the run as far as it can go now and returns the jobs to dispatch. Steps whose
// inputs do not resolve fail here, with the field named, before any job is sent.
func (m *Machine) Advance(r *Run, now time.Time) []*envelope.Job {
	if r.Status.Terminal() {
		return nil
	}
	if r.Status == StPending {
		r.Status, r.Started = StRunning, now
	}
	if r.PathsPending() {
		return m.startPathCheck(r, now)
	}
	var jobs []*envelope.Job
	for pass := 0; pass < 4*len(r.Stages)+4; pass++ {
		progressed := false
		for si, sr := range r.Stages {
			switch sr.Status {
			case StPending:
				if m.startStage(r, si, now) {
					progressed = true
				}
			}
			if sr.Status == StRunning {
				j, p := m.advanceStage(r, si, now)
				jobs = append(jobs, j...)
				progressed = progressed || p
			}
		}
		if r.RollingBack && m.startPipelineRollback(r, now) {
			progressed = true
		}
		if !progressed {
			break
		}
	}
	m.finishRun(r, now)
	return jobs
}

func (m *Machine) startStage(r *Run, si int, now time.Time) bool {
	sr := r.Stages[si]
	sp := m.P.Stages[si]
	for _, d := range m.P.Deps(si) {
		if !r.Stages[d].Status.Terminal() {
			return false
		}
	}
	why := m.upstreamFailure(r, si)
	if why == "" && r.RollingBack {
		why = "the pipeline is rolling back"
	}
	afterFailure := sp.When != nil && sp.When.RunsAfterFailure()
	if why != "" && !afterFailure {
		// Only a failure propagates; a stage skipped by its own when does not.
		m.notRun(sr.Steps, why, now)
		sr.Status, sr.Ended, sr.Error = StNotRun, now, why
		return true
	}
	if sp.When != nil {
		env := m.Env(r, si, false)
		env[template.StatusKey] = statusEnv(why != "", m.cancelledUpstream(r, si))
		ok, err := sp.When.EvalBool(context.Background(), env)
		if err != nil {
			sr.Status, sr.Started, sr.Ended, sr.Error = StFailed, now, now, "when: "+err.Error()
			return true
		}
		if !ok {
			sr.Status, sr.Ended = StSkipped, now
			for _, st := range sr.Steps {
				st.Status = StSkipped
			}
			return true
		}
	}
	if m.Gate != nil {
		deny, warn := m.Gate.StageAllowed(r, si)
		sr.Warnings = warn
		if len(deny) > 0 {
			why := "denied by policy: " + strings.Join(deny, "; ")
			m.notRun(sr.Steps, why, now)
			sr.Status, sr.Started, sr.Ended, sr.Error = StFailed, now, now, why
			return true
		}
	}
	sr.Status, sr.Started = StRunning, now
	if sp.Timeout > 0 {
		sr.Deadline = now.Add(sp.Timeout)
	}
	return true
}

// upstreamFailure says why stage si must not run on its own: a stage it follows (directly or
// through others) failed, was cancelled or rolled back. "" when every one succeeded or was
// skipped by its own when.
func (m *Machine) upstreamFailure(r *Run, si int) string {
	for _, a := range m.ancestors(si) {
		switch as := r.Stages[a]; as.Status {
		case StFailed, StCancelled, StRolledBack:
			return fmt.Sprintf("%s %s", as.ID, statusWord(as.Status))
		}
	}
	for _, d := range m.P.Deps(si) {
		if ds := r.Stages[d]; ds.Status == StNotRun {
			return ds.Error // the original cause, e.g. "dev failed"
		}
	}
	return ""
}

func (m *Machine) cancelledUpstream(r *Run, si int) bool {
	for _, a := range m.ancestors(si) {
		if r.Stages[a].Status == StCancelled {
			return true
		}
	}
	return false
}

// ancestors lists the stages si follows, directly or transitively, nearest first.
func (m *Machine) ancestors(si int) []int {
	seen := map[int]bool{}
	var out []int
	queue := m.P.Deps(si)
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		out = append(out, d)
		queue = append(queue, m.P.Deps(d)...)
	}
	return out
}

func statusWord(s Status) string {
	if s == StRolledBack {
		return "was rolled back"
	}
	return string(s)
}

// statusEnv is what success(), failure() and cancelled() answer in a when.
func statusEnv(failed, cancelled bool) map[string]any {
	return map[string]any{"success": !failed && !cancelled, "failure": failed, "cancelled": cancelled}
}

// notRun ends the pending steps of list as not run, with why.
func (m *Machine) notRun(list []*StepRun, why string, now time.Time) {
	for _, st := range list {
		if st.Status == StPending {
			st.Status, st.Ended, st.Error, st.RetryAt = StNotRun, now, why, time.Time{}
		}
	}
}

// advanceStage runs a stage's steps in order (or its rollback steps when rolling back).
func (m *Machine) advanceStage(r *Run, si int, now time.Time) ([]*envelope.Job, bool) {
	sr := r.Stages[si]
	list, rollback := sr.Steps, false
	if sr.RollingBack {
		list, rollback = sr.Rollback, true
	}
	progressed := false
	for _, st := range list {
		switch st.Status {
		case StSucceeded, StSkipped:
			continue
		case StFailed:
			if st.Ignored || (sr.Failing != "" && !rollback) {
				continue
			}
			return nil, progressed // failStep already decided the stage's fate
		case StNotRun:
			continue
		case StQueued, StWaiting, StCancelled:
			return nil, progressed
		case StPending:
			if !st.RetryAt.IsZero() && now.Before(st.RetryAt) {
				return nil, progressed
			}
			sp := m.spec(si, st, rollback)
			var env map[string]any // built only for a step that evaluates something
			if sp.When != nil || m.needsEnv(si, sp) {
				env = m.Env(r, si, rollback)
			}
			if sp.When != nil && st.Wake == 0 {
				// In a failing stage and in rollback steps, failure() is true.
				env[template.StatusKey] = statusEnv(rollback || sr.Failing != "", false)
				ok, err := sp.When.EvalBool(context.Background(), env)
				if err != nil {
					m.failStep(r, si, st, rollback, "when: "+err.Error(), now)
					return nil, true
				}
				if !ok {
					st.Status, st.Ended = StSkipped, now
					progressed = true
					continue
				}
			}
			job, err := m.job(r, si, st, sp, rollback, env, now)
			if err != nil {
				m.failStep(r, si, st, rollback, err.Error(), now)
				return nil, true
			}
			if st.Attempt == 0 {
				st.Attempt = 1
			}
			job.Attempt = st.Attempt
			st.Status, st.Queued, st.RetryAt = StQueued, now, time.Time{}
			if st.Deadline.IsZero() && sp.Timeout > 0 {
				st.Deadline = now.Add(sp.Timeout)
			}
			job.Deadline = st.Deadline
			return []*envelope.Job{job}, true
		}
	}
	// Every step is done.
	if sr.Failing != "" && !rollback {
		m.applyFailure(sr, sr.Failing, now)
		if sr.RollingBack {
			return nil, true // the rollback steps start on the next pass
		}
		sr.Ended = now
		return nil, true
	}
	if rollback {
		sr.RollingBack = false
		if sr.Status == StRunning && sr.Error == "" {
			sr.Status = StRolledBack // undone by a pipeline rollback
		} else {
			sr.Status = StFailed
		}
	} else {
		sr.Status = StSucceeded
		sr.Finished = m.finishedCount(r) + 1
	}
	sr.Ended = now
	return nil, true
}

func (m *Machine) finishedCount(r *Run) int {
	n := 0
	for _, s := range r.Stages {
		if s.Finished > n {
			n = s.Finished
		}
	}
	return n
}

// startPipelineRollback rolls back succeeded stages, latest first, one at a time, once no
// stage is running any more.
func (m *Machine) startPipelineRollback(r *Run, now time.Time) bool {
	for _, sr := range r.Stages {
		if sr.Status == StRunning {
			return false
		}
	}
	best := -1
	for i, sr := range r.Stages {
		if sr.Status == StSucceeded && len(sr.Rollback) > 0 && sr.Rollback[0].Status == StPending {
			if best < 0 || sr.Finished > r.Stages[best].Finished {
				best = i
			}
		}
	}
	if best < 0 {
		return false
	}
	sr := r.Stages[best]
	sr.Status, sr.RollingBack = StRunning, true
	return true
}

func (m *Machine) finishRun(r *Run, now time.Time) {
	failed := ""
	for _, sr := range r.Stages {
		if !sr.Status.Terminal() {
			return
		}
		if (sr.Status == StFailed || sr.Status == StCancelled) && failed == "" {
			failed = fmt.Sprintf("stage %s: %s", sr.ID, orDefault(sr.Error, string(sr.Status)))
		}
	}
	r.Ended = now
	if failed != "" || r.RollingBack {
		r.Status, r.Error = StFailed, orDefault(failed, "rolled back")
		return
	}
	r.Status = StSucceeded
}

func (m *Machine) job(r *Run, si int, st *StepRun, sp *Step, rollback bool, env map[string]any, now time.Time) (*envelope.Job, error) {
	def, _ := m.reg().Lookup(sp.Type)
	perTarget := map[string]bool{}
	if def != nil {
		for _, f := range def.PerTarget {
			perTarget[f] = true
		}
	}
	in := map[string]any{}
	if sp.With != nil {
		for _, k := range sp.With.Keys {
			if perTarget[k] {
				continue
			}
			v, err := evalAt(sp.With.Map[k], env, k)
			if err != nil {
				return nil, fmt.Errorf("input %w", err)
			}
			in[k] = v
		}
	}
	if len(perTarget) > 0 {
		targets, err := m.targets(si, sp, env)
		if err != nil {
			return nil, err
		}
		in["targets"] = targets
	}
	pool := sp.Pool
	if pool == "" {
		if def != nil && def.Pool != "" {
			pool = def.Pool
		} else {
			pool = DefaultPool
		}
	}
	j := &envelope.Job{
		V: envelope.Version, Run: r.ID, Pipeline: r.Pipeline, Stage: r.Stages[si].ID, Step: st.ID,
		Rollback: rollback, Type: sp.Type, Pool: pool, Wake: st.Wake, WakeReason: st.WakeReason,
		Inputs: in, Memo: st.Memo, Signals: st.Signals, Executor: r.Executor,
	}
	for _, k := range []string{"connector", "connectorRef"} {
		if c, ok := in[k].(string); ok && c != "" {
			j.Connectors = append(j.Connectors, c)
		}
	}
	if sp.Type == steps.TypeVerify {
		j.Connectors = append(j.Connectors, steps.VerifyRoutes(in)...) // only workers with its metrics connectors
	}
	j.Env = m.environment(si)
	if j.Env != nil {
		j.Env.Variables = m.envVariables(si, env)
	}
	// Only the earlier steps of the types the step declares it reads: with every prior, a
	// job carried each earlier output again (O(steps²) bytes per run). PriorTypes tells the
	// worker what was left out (steps/envelope: CheckPriors).
	var reads []string
	if def != nil && def.Priors != nil {
		reads = def.Priors
		j.PriorTypes = slices.Clone(reads)
	}
	sr := r.Stages[si]
	for _, p := range sr.Steps {
		if p == st {
			break
		}
		if p.Status == StSucceeded && (reads == nil || slices.Contains(reads, p.Type)) {
			j.Priors = append(j.Priors, steps.Prior{ID: p.ID, Type: p.Type, Outputs: p.Outputs})
		}
	}
	if rollback {
		for _, p := range sr.Rollback {
			if p == st {
				break
			}
			if p.Status == StSucceeded && (reads == nil || slices.Contains(reads, p.Type)) {
				j.Priors = append(j.Priors, steps.Prior{ID: p.ID, Type: p.Type, Outputs: p.Outputs})
			}
		}
	}
	return j, nil
}

// needsEnv reports whether building sp's job evaluates anything: an expression in its inputs,
// per-target inputs or an environment's variables. Most steps' inputs are literals, and the
// environment (every step's outputs) was most of the cost of dispatching them.
func (m *Machine) needsEnv(si int, sp *Step) bool {
	if sp.With.dynamic() || m.environment(si) != nil {
		return true
	}
	if def, ok := m.reg().Lookup(sp.Type); ok && len(def.PerTarget) > 0 {
		return true
	}
	return false
}

func (m *Machine) reg() *steps.Registry {
	if m.Reg != nil {
		return m.Reg
	}
	return steps.Default
}

func (m *Machine) environment(si int) *steps.Environment {
	sp := m.P.Stages[si]
	e := m.P.Env(sp.Environment)
	if e == nil {
		if sp.Environment == "" {
			return nil
		}
		return &steps.Environment{Name: sp.Environment}
	}
	out := &steps.Environment{Name: e.Name, Group: e.Group}
	if m.P.Service != nil {
		out.Service = m.P.Service.Name
	}
	for _, c := range e.Clusters {
		if len(sp.Clusters) > 0 && !contains(sp.Clusters, c.Name) {
			continue
		}
		out.Clusters = append(out.Clusters, steps.Cluster{Name: c.Name, Agent: c.Agent})
	}
	return out
}

// targets evaluates a step's per-target inputs once per cluster of the stage's environment.
func (m *Machine) targets(si int, sp *Step, env map[string]any) ([]any, error) {
	def, _ := m.reg().Lookup(sp.Type)
	e := m.environment(si)
	type tgt struct{ cluster map[string]any }
	var list []tgt
	if e != nil && len(e.Clusters) > 0 {
		for _, c := range e.Clusters {
			list = append(list, tgt{map[string]any{"name": c.Name, "agent": c.Agent}})
		}
	} else {
		list = append(list, tgt{nil})
	}
	var out []any
	for _, t := range list {
		tenv := make(map[string]any, len(env)+2)
		for k, v := range env {
			tenv[k] = v
		}
		item := map[string]any{}
		if t.cluster != nil {
			tenv["cluster"] = t.cluster
			item["cluster"] = t.cluster["name"]
		} else {
			delete(tenv, "cluster")
		}
		if e != nil {
			item["env"] = e.Name
			item["envgroup"] = e.Group
		}
		for _, f := range def.PerTarget {
			if sp.With == nil || sp.With.Map[f] == nil {
				continue
			}
			v, err := evalAt(sp.With.Map[f], tenv, f)
			if err != nil {
				where := ""
				if t.cluster != nil {
					where = fmt.Sprintf(" (cluster %v)", t.cluster["name"])
				}
				return nil, fmt.Errorf("input %w%s", err, where)
			}
			item[f] = v
		}
		out = append(out, item)
	}
	return out, nil
}

// envVariables merges service → environment → override variables for stage si.
func (m *Machine) envVariables(si int, env map[string]any) map[string]any {
	out := map[string]any{}
	add := func(vars []Variable) {
		for _, v := range vars {
			if val, err := evalValue(v.Value, env); err == nil {
				out[v.Name] = val
			}
		}
	}
	if m.P.Service != nil {
		add(m.P.Service.Variables)
	}
	if e := m.P.Env(m.P.Stages[si].Environment); e != nil {
		add(e.Variables)
		add(e.Overrides)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Jobs returns the jobs of every queued step, for republishing after a controller restart
// (the Nats-Msg-Id dedup makes the republish harmless if the first publish got through).
func (m *Machine) Jobs(r *Run) []*envelope.Job {
	if r.Status.Terminal() {
		return nil
	}
	var out []*envelope.Job
	if r.PathsPending() && r.Trigger.PathCheck != nil && r.Trigger.PathCheck.Status == StQueued {
		out = append(out, m.pathCheckJob(r))
	}
	for si, sr := range r.Stages {
		for ri, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if st.Status != StQueued {
					continue
				}
				rollback := ri == 1
				sp := m.spec(si, st, rollback)
				j, err := m.job(r, si, st, sp, rollback, m.Env(r, si, rollback), st.Queued)
				if err != nil {
					continue
				}
				j.Attempt, j.Deadline = st.Attempt, st.Deadline
				out = append(out, j)
			}
		}
	}
	return out
}

// startPathCheck dispatches the trigger's path check (once; Jobs re-sends it) while no stage
// may start yet.
func (m *Machine) startPathCheck(r *Run, now time.Time) []*envelope.Job {
	tr := r.Trigger
	if tr.PathCheck == nil {
		tr.PathCheck = &StepRun{ID: PathCheckStep, Type: steps.TypeTriggerPaths, Status: StPending}
	}
	st := tr.PathCheck
	if st.Status != StPending {
		return nil // queued: the worker will report
	}
	if st.Attempt == 0 {
		st.Attempt = 1
	}
	st.Status, st.Queued = StQueued, now
	return []*envelope.Job{m.pathCheckJob(r)}
}

func (m *Machine) pathCheckJob(r *Run) *envelope.Job {
	tr, st := r.Trigger, r.Trigger.PathCheck
	pool := DefaultPool
	if def, _ := m.reg().Lookup(steps.TypeTriggerPaths); def != nil && def.Pool != "" {
		pool = def.Pool
	}
	paths := make([]any, len(tr.Paths))
	for i, p := range tr.Paths {
		paths[i] = p
	}
	j := &envelope.Job{V: envelope.Version, Run: r.ID, Pipeline: r.Pipeline, Stage: PathCheckStage, Step: PathCheckStep,
		Type: steps.TypeTriggerPaths, Pool: pool, Attempt: st.Attempt, Wake: st.Wake, Executor: r.Executor,
		Inputs: map[string]any{"connector": tr.Connector, "repo": tr.Repo, "prNumber": tr.PR, "paths": paths}}
	if tr.PR == 0 && tr.Event == string(scm.EventPush) {
		j.Inputs = map[string]any{"connector": tr.Connector, "repo": tr.Repo, "before": tr.Before, "after": tr.SHA, "paths": paths}
	}
	if tr.Connector != "" {
		j.Connectors = []string{tr.Connector}
	}
	return j
}

// takeResult checks that ev is the result st waits for (queued, same attempt and wake), so a
// stale or repeated result changes nothing, and records who ran the step and when it started.
// A dead letter or a missing result counts as a failure.
func takeResult(st *StepRun, ev *envelope.Event) (*steps.Result, bool) {
	if st.Status != StQueued || st.Attempt != ev.Attempt || st.Wake != ev.Wake {
		return nil, false
	}
	res := ev.Result
	if ev.Kind == queue.EvDead || res == nil {
		res = &steps.Result{Status: steps.Failed, Message: ev.Reason}
	}
	if st.Started.IsZero() {
		st.Started = ev.Started
	}
	st.Worker = ev.Worker
	return res, true
}

// applyPathCheck records the path check's result: a match lets Advance start the stages, no
// match ends the run skipped, a failure fails it. Stale or duplicate results change nothing.
func (m *Machine) applyPathCheck(r *Run, ev *envelope.Event, now time.Time) bool {
	tr := r.Trigger
	if ev.Step != PathCheckStep || ev.Rollback || tr == nil || tr.PathCheck == nil {
		return false
	}
	st := tr.PathCheck
	if ev.Kind != queue.EvResult && ev.Kind != queue.EvDead {
		return false
	}
	res, ok := takeResult(st, ev)
	if !ok {
		return false
	}
	st.Ended = now
	switch res.Status {
	case steps.Succeeded:
		st.Status, st.Outputs = StSucceeded, res.Outputs
		if matched, _ := res.Outputs["matched"].(bool); !matched {
			what := fmt.Sprintf("PR #%d", tr.PR)
			if tr.PR == 0 && tr.Event == string(scm.EventPush) {
				what = fmt.Sprintf("the push %s..%s", shortSHA(tr.Before), shortSHA(tr.SHA))
			}
			m.skipRun(r, fmt.Sprintf("no changed file of %s matches paths %v", what, tr.Paths), now)
		}
	case steps.Waiting:
		st.Status, st.Error = StFailed, "unexpected wait"
		m.failRun(r, "trigger paths check: unexpected wait", now)
	default:
		msg := orDefault(res.Message, "step failed")
		st.Status, st.Error = StFailed, msg
		m.failRun(r, "trigger paths check: "+msg, now)
	}
	return true
}

// shortSHA is a commit id's usual 12-character prefix.
func shortSHA(sha string) string { return sha[:min(len(sha), 12)] }

// skipRun ends a run that has nothing to do: every stage and step is skipped.
func (m *Machine) skipRun(r *Run, msg string, now time.Time) {
	for _, sr := range r.Stages {
		for _, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if !st.Status.Terminal() {
					st.Status = StSkipped
				}
			}
		}
		if !sr.Status.Terminal() {
			sr.Status, sr.Ended = StSkipped, now
		}
	}
	r.Status, r.Ended, r.Error = StSkipped, now, msg
}

// Parked describes a waiting step for the controller's wake index.
type Parked struct {
	Stage, Step string
	Rollback    bool
	Wake        int
	Keys        []string
	Topics      []string
	Since       time.Time // when the job that parked was dispatched
}

// Parked lists the run's waiting steps.
func (m *Machine) Parked(r *Run) []Parked {
	var out []Parked
	for _, sr := range r.Stages {
		for ri, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if st.Status == StWaiting && st.Wait != nil {
					out = append(out, Parked{Stage: sr.ID, Step: st.ID, Rollback: ri == 1, Wake: st.Wake, Keys: st.Wait.Keys, Topics: st.Wait.Topics, Since: st.Queued})
				}
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func orDefault(s, d string) string {
	if strings.TrimSpace(s) == "" {
		return d
	}
	return s
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func timeDur(n int64) time.Duration { return time.Duration(n) }
