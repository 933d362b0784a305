package pipelines

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prflow/prflow/steps"
)

// Status of a run, stage or step.
type Status string

const (
	StPending    Status = "pending"
	StQueued     Status = "queued"  // a job is out; a worker will report
	StWaiting    Status = "waiting" // parked: holds no worker
	StRunning    Status = "running" // stages only
	StSucceeded  Status = "succeeded"
	StFailed     Status = "failed"
	StSkipped    Status = "skipped"
	StCancelled  Status = "cancelled"
	StRolledBack Status = "rolledBack" // a succeeded stage undone by a pipeline rollback
	// StNotRun: never started because something it follows failed (or the pipeline is rolling
	// back). Unlike StSkipped (its own when was false) it propagates: what follows it does not
	// run either, unless its when calls failure() or always().
	StNotRun Status = "notRun"
	// StWaitingApproval is never stored: the API, CLI and UI show it in place of a run's
	// stored status while one of its steps is parked on an approval (see Run.Shown). Derived
	// on read so it cannot go stale when the approval is decided, the run is cancelled or the
	// step times out; the list reads whole runs from KV anyway, so the filter costs nothing.
	StWaitingApproval Status = "waitingApproval"
	// StWaitingIntervention, like StWaitingApproval, is derived on read: a stage waits for a
	// person's decision after a failure (a manual failure strategy, intervene.go).
	StWaitingIntervention Status = "waitingIntervention"
)

// Terminal reports whether s is final.
func (s Status) Terminal() bool {
	switch s {
	case StSucceeded, StFailed, StSkipped, StCancelled, StRolledBack, StNotRun:
		return true
	}
	return false
}

// Run is the whole state of one pipeline run; it is what the prflow-runs KV holds.
type Run struct {
	ID       string         `json:"id"`
	Pipeline string         `json:"pipeline"`
	Spec     string         `json:"spec"` // prflow-specs key (the pipeline's hash)
	File     string         `json:"file,omitempty"`
	Inputs   map[string]any `json:"inputs,omitempty"`
	Executor string         `json:"executor,omitempty"`
	Status   Status         `json:"status"`
	Error    string         `json:"error,omitempty"`
	// RollingBack is set when a rollbackPipeline failure strategy fired.
	RollingBack bool              `json:"rollingBack,omitempty"`
	Created     time.Time         `json:"created"`
	Started     time.Time         `json:"started,omitzero"`
	Ended       time.Time         `json:"ended,omitzero"`
	Deadline    time.Time         `json:"deadline,omitzero"`
	Stages      []*StageRun       `json:"stages"`
	Trigger     *TriggerInfo      `json:"trigger,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`

	// RollbackFailed is set when a stage's rollback could not finish: what git and the
	// cluster hold then (the run is failed; a person has to finish the job).
	RollbackFailed string `json:"rollbackFailed,omitempty"`

	// Warnings are what run policies warned about when it started (prflow.pipeline and
	// prflow.run warn rules), and notifications that could not be sent (they never fail a run).
	Warnings []string `json:"warnings,omitempty"`

	// RerunOf is the run this one re-runs (same pipeline source and inputs, every stage again);
	// RetryOf the failed or cancelled run it retries from its failed stages (see CarryOver).
	RerunOf string `json:"rerunOf,omitempty"`
	RetryOf string `json:"retryOf,omitempty"`
}

// Parked reports whether a step of the unfinished run r is parked (waits for something and
// holds no worker): an approval, a PR merge, an Argo CD sync.
func (r *Run) Parked() bool {
	return !r.Status.Terminal() && (r.parkedOn("") || r.WaitingIntervention())
}

// WaitingApproval reports whether a step of the unfinished run r waits for an approval.
func (r *Run) WaitingApproval() bool {
	return !r.Status.Terminal() && r.parkedOn("approval")
}

// parkedOn reports whether some step is parked; with a topic, on that wait topic.
func (r *Run) parkedOn(topic string) bool {
	for _, s := range r.Stages {
		for _, list := range [][]*StepRun{s.Steps, s.Rollback} {
			for _, st := range list {
				if st.Status != StWaiting {
					continue
				}
				if topic == "" || st.Wait != nil && slices.Contains(st.Wait.Topics, topic) {
					return true
				}
			}
		}
	}
	return false
}

// Shown is the status to show for r: StWaitingApproval while it waits for an approval, else
// the stored status.
func (r *Run) Shown() Status {
	if r.WaitingApproval() {
		return StWaitingApproval
	}
	if r.WaitingIntervention() {
		return StWaitingIntervention
	}
	return r.Status
}

// TriggerInfo records what started a run (a webhook delivery, the CLI).
type TriggerInfo struct {
	Kind       string `json:"kind"`
	DeliveryID string `json:"deliveryId,omitempty"`
	// For webhook-triggered runs: the trigger, the forge event and where to report back.
	Trigger   string `json:"trigger,omitempty"`   // trigger name in the pipeline
	Provider  string `json:"provider,omitempty"`  // github, gitlab, bitbucket
	Event     string `json:"event,omitempty"`     // push, pull_request
	Action    string `json:"action,omitempty"`    // PR action (merged, opened, …)
	Repo      string `json:"repo,omitempty"`      // the triggering repo
	SHA       string `json:"sha,omitempty"`       // the triggering commit (statuses go here)
	PR        int    `json:"pr,omitempty"`        // the triggering PR number
	Connector string `json:"connector,omitempty"` // worker connector of that repo
	// Before is a push's previous head: a push's path check compares Before..SHA.
	Before string `json:"before,omitempty"`
	// Paths are a trigger's changed-path globs that the webhook could not settle (PR webhooks
	// list no files; a push's may list only some): before any stage starts, a TriggerPaths job
	// reads the PR's files, or the push's Before..SHA comparison, through Connector. PathCheck
	// is that check's state (ids PathCheckStage/PathCheckStep).
	Paths     []string `json:"paths,omitempty"`
	PathCheck *StepRun `json:"pathCheck,omitempty"`
}

// PathCheckStage and PathCheckStep name the path check's job and result. Both start with an
// underscore, which no pipeline stage or step id may (idRE), so they never collide.
const (
	PathCheckStage = "_trigger"
	PathCheckStep  = "_paths"
)

// PathsPending reports whether the run still waits for its trigger's path check.
func (r *Run) PathsPending() bool {
	return r.Trigger != nil && len(r.Trigger.Paths) > 0 && (r.Trigger.PathCheck == nil || r.Trigger.PathCheck.Status != StSucceeded)
}

// StageRun is one stage's state.
type StageRun struct {
	ID          string `json:"id"`
	Status      Status `json:"status"`
	Error       string `json:"error,omitempty"`
	RollingBack bool   `json:"rollingBack,omitempty"`
	// Failing is the failure action (fail, rollbackStage, …) held back while steps whose when
	// calls failure() or always() still run; it is applied when they are done.
	Failing string `json:"failing,omitempty"`
	// Warnings are what policies warned about before the stage started (prflow.stage warn).
	Warnings []string   `json:"warnings,omitempty"`
	Started  time.Time  `json:"started,omitzero"`
	Ended    time.Time  `json:"ended,omitzero"`
	Deadline time.Time  `json:"deadline,omitzero"`
	Steps    []*StepRun `json:"steps"`
	Rollback []*StepRun `json:"rollback,omitempty"`
	// RollbackOrder is when a pipeline rollback reached this stage (later stages first).
	Finished int `json:"finished,omitempty"` // completion order, for pipeline rollback
	// CarriedFrom is the run whose result of this stage a retry took over instead of running
	// it again (its steps' outputs are that run's); "" for a stage this run ran.
	CarriedFrom string `json:"carriedFrom,omitempty"`
	// Intervention: the stage is parked by a manual failure strategy until a person decides
	// or its deadline passes (intervene.go); Interventions are the decided ones, in order.
	Intervention  *Intervention  `json:"intervention,omitempty"`
	Interventions []Intervention `json:"interventions,omitempty"`
}

// StepRun is one step's state.
type StepRun struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Status     Status          `json:"status"`
	Attempt    int             `json:"attempt,omitempty"`
	Wake       int             `json:"wake,omitempty"`
	WakeReason string          `json:"wakeReason,omitempty"`
	Ignored    bool            `json:"ignored,omitempty"` // failed, but its failure strategy was ignore
	NoRollback bool            `json:"noRollback,omitempty"`
	Outputs    map[string]any  `json:"outputs,omitempty"`
	Error      string          `json:"error,omitempty"`
	Queued     time.Time       `json:"queued,omitzero"`
	Started    time.Time       `json:"started,omitzero"`
	Ended      time.Time       `json:"ended,omitzero"`
	RetryAt    time.Time       `json:"retryAt,omitzero"`
	Deadline   time.Time       `json:"deadline,omitzero"`
	Wait       *steps.Wait     `json:"wait,omitempty"`
	WaitSince  time.Time       `json:"waitSince,omitzero"`
	Memo       json.RawMessage `json:"memo,omitempty"`
	Signals    []steps.Signal  `json:"signals,omitempty"`
	Worker     string          `json:"worker,omitempty"`
}

// NewRunID returns a sortable, unique run id usable as a KV key and subject token.
func NewRunID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	const alpha = "0123456789abcdefghijklmnopqrstuv"
	var s strings.Builder
	s.WriteString("r")
	s.WriteString(now.UTC().Format("060102-150405"))
	s.WriteByte('-')
	for _, c := range b {
		s.WriteByte(alpha[c&31])
		s.WriteByte(alpha[(c>>3)&31])
	}
	return strings.ReplaceAll(s.String(), "-", "")
}

// NewRun builds the initial state of a run of p with the given inputs (checked and defaulted).
func NewRun(p *Pipeline, id string, inputs map[string]any, executor string, now time.Time) (*Run, error) {
	in, err := p.CheckInputs(inputs)
	if err != nil {
		return nil, err
	}
	r := &Run{ID: id, Pipeline: p.Name, Spec: p.Hash, File: p.File, Inputs: in, Executor: executor, Status: StPending, Created: now}
	if p.Timeout > 0 {
		r.Deadline = now.Add(p.Timeout)
	}
	for _, s := range p.Stages {
		sr := &StageRun{ID: s.ID, Status: StPending}
		for _, st := range s.Steps {
			sr.Steps = append(sr.Steps, &StepRun{ID: st.ID, Type: st.Type, Status: StPending})
		}
		for _, st := range s.Rollback {
			sr.Rollback = append(sr.Rollback, &StepRun{ID: st.ID, Type: st.Type, Status: StPending})
		}
		r.Stages = append(r.Stages, sr)
	}
	return r, nil
}

// CheckInputs applies defaults and checks types and required inputs. Unknown inputs are errors
// so that a typo in --set does not silently run with the default.
func (p *Pipeline) CheckInputs(given map[string]any) (map[string]any, error) {
	out := map[string]any{}
	known := map[string]bool{}
	var problems []string
	for _, in := range p.Inputs {
		known[in.Name] = true
		v, ok := given[in.Name]
		if !ok {
			if in.Default != nil {
				out[in.Name] = in.Default
			} else if in.Required {
				problems = append(problems, fmt.Sprintf("input %q is required", in.Name))
			}
			continue
		}
		cv, err := coerceInput(in, v)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		out[in.Name] = cv
	}
	for k := range given {
		if !known[k] {
			problems = append(problems, fmt.Sprintf("unknown input %q (pipeline %s declares: %s)", k, p.Name, inputNames(p)))
		}
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	return out, nil
}

// InputError is what is wrong with a run's inputs: one sentence per problem, each naming its
// input as input "NAME" (a form shows it next to that field: Field).
type InputError struct{ Problems []string }

func (e *InputError) Error() string { return strings.Join(e.Problems, "; ") }

// Field returns the problems about input name.
func (e *InputError) Field(name string) []string {
	var out []string
	for _, p := range e.Problems {
		if strings.Contains(p, fmt.Sprintf("input %q", name)) {
			out = append(out, p)
		}
	}
	return out
}

func inputNames(p *Pipeline) string {
	var n []string
	for _, in := range p.Inputs {
		n = append(n, in.Name)
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}

func coerceInput(in Input, v any) (any, error) {
	s, isStr := v.(string)
	switch in.Type {
	case "number":
		switch x := v.(type) {
		case int, int64, float64:
			return x, nil
		}
		if isStr {
			var f float64
			if _, err := fmt.Sscanf(s, "%g", &f); err == nil && fmt.Sprint(f) != "" {
				if f == float64(int64(f)) {
					return int64(f), nil
				}
				return f, nil
			}
		}
		return nil, fmt.Errorf("input %q: want a number, got %q", in.Name, fmt.Sprint(v))
	case "boolean":
		if b, ok := v.(bool); ok {
			return b, nil
		}
		if isStr && (s == "true" || s == "false") {
			return s == "true", nil
		}
		return nil, fmt.Errorf("input %q: want true or false, got %q", in.Name, fmt.Sprint(v))
	}
	if len(in.Allowed) > 0 {
		for _, a := range in.Allowed {
			if fmt.Sprint(a) == fmt.Sprint(v) {
				return v, nil
			}
		}
		return nil, fmt.Errorf("input %q: %q is not one of %v", in.Name, fmt.Sprint(v), in.Allowed)
	}
	if !isStr {
		return fmt.Sprint(v), nil
	}
	return s, nil
}

// Find returns a stage's state by id.
func (r *Run) Find(stage string) *StageRun {
	for _, s := range r.Stages {
		if s.ID == stage {
			return s
		}
	}
	return nil
}

// Step returns a step's state in a stage (rollback selects the rollback list).
func (s *StageRun) Step(id string, rollback bool) *StepRun {
	list := s.Steps
	if rollback {
		list = s.Rollback
	}
	for _, st := range list {
		if st.ID == id {
			return st
		}
	}
	return nil
}

// Active reports whether the run still has work.
func (r *Run) Active() bool { return !r.Status.Terminal() }
