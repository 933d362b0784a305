// Package envelope holds what prflow puts on NATS between the controller and the workers: the
// job a worker runs (Job) and the events the controller consumes (Event), with their checks.
// It sits above queue because jobs and results carry step types (steps.Result, steps.Prior,
// …); queue moves bytes and knows only subjects, streams and tokens.
package envelope

import (
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
)

// Version is the envelope version. Readers reject versions they do not know with a clear error.
const Version = 1

// Job is one step run handed to a worker. It never carries a secret: steps name connectors and
// the worker resolves them locally.
type Job struct {
	V          int                `json:"v"`
	Run        string             `json:"run"`
	Pipeline   string             `json:"pipeline"`
	Stage      string             `json:"stage"`
	Step       string             `json:"step"`
	Rollback   bool               `json:"rollback,omitempty"` // a stage's rollback step
	Type       string             `json:"type"`
	Pool       string             `json:"pool"`
	Attempt    int                `json:"attempt"`
	Wake       int                `json:"wake,omitempty"`
	WakeReason string             `json:"wakeReason,omitempty"`
	Inputs     map[string]any     `json:"inputs,omitempty"`
	Connectors []string           `json:"connectors,omitempty"`
	Env        *steps.Environment `json:"env,omitempty"`
	Priors     []steps.Prior      `json:"priors,omitempty"`
	// PriorTypes, when set, are the only step types the controller put in Priors (the step
	// type's declared Definition.Priors; empty: none). Absent: every earlier step is there.
	PriorTypes []string        `json:"priorTypes,omitzero"`
	Memo       json.RawMessage `json:"memo,omitempty"`
	Signals    []steps.Signal  `json:"signals,omitempty"`
	Executor   string          `json:"executor,omitempty"`
	Deadline   time.Time       `json:"deadline,omitzero"`
	// Token is the job's result token (JobToken); its result must carry it back.
	Token string `json:"token,omitempty"`
}

// ID is the job's idempotency key, used as Nats-Msg-Id for the job and its result.
func (j *Job) ID() string {
	rb := ""
	if j.Rollback {
		rb = "rb."
	}
	return j.Run + "/" + j.Stage + "/" + rb + j.Step + "/" + strconv.Itoa(j.Attempt) + "/" + strconv.Itoa(j.Wake)
}

// Subject is where the job is published: routed by the first connector it names
// (queue.JobSubjectOf).
func (j *Job) Subject() string { return queue.JobSubjectOf(j.Pool, j.Connectors) }

// DecodeJob parses and checks a job payload.
func DecodeJob(data []byte) (*Job, error) {
	var j Job
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("job payload: %w", err)
	}
	if j.V != Version {
		return &j, fmt.Errorf("job payload: envelope version %d, this worker reads %d", j.V, Version)
	}
	var missing []string
	for name, v := range map[string]string{"run": j.Run, "stage": j.Stage, "step": j.Step, "type": j.Type} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return &j, fmt.Errorf("job payload: missing %s", strings.Join(sorted(missing), ", "))
	}
	if j.Attempt < 1 {
		return &j, errors.New("job payload: attempt must be ≥ 1")
	}
	return &j, nil
}

// CheckPriors reports a job whose priors leave out a step type the worker's definition of
// the step reads: a controller that knows an older declaration (a rolling upgrade that
// makes a step read another prior type reached this worker first). The step would otherwise
// act without that prior, e.g. accept any revision for want of its stage's merge commit.
func CheckPriors(j *Job, def *steps.Definition) error {
	if j.PriorTypes == nil {
		return nil // every earlier step is there
	}
	var missing []string
	if def.Priors == nil {
		missing = []string{"any type"}
	}
	for _, t := range def.Priors {
		if !slices.Contains(j.PriorTypes, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("job for step %s (%s) carries earlier steps of types [%s] only, and this worker's %s reads %s as well: the controller runs an older step definition; upgrade the controllers, then retry the step",
		j.Step, j.Type, strings.Join(j.PriorTypes, ", "), j.Type, strings.Join(missing, ", "))
}

// Event is everything the controller consumes.
type Event struct {
	V        int           `json:"v"`
	Kind     string        `json:"kind"` // queue.EvResult, …
	Run      string        `json:"run"`
	Stage    string        `json:"stage,omitempty"`
	Step     string        `json:"step,omitempty"`
	Rollback bool          `json:"rollback,omitempty"`
	Attempt  int           `json:"attempt,omitempty"`
	Wake     int           `json:"wake,omitempty"`
	Result   *steps.Result `json:"result,omitempty"`
	Signal   *steps.Signal `json:"signal,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	User     string        `json:"user,omitempty"`
	Worker   string        `json:"worker,omitempty"`
	Started  time.Time     `json:"started,omitzero"`
	Ended    time.Time     `json:"ended,omitzero"`
	// Token echoes the job's Token on a result (CheckToken).
	Token string `json:"token,omitempty"`
}

// DecodeEvent parses and checks an event payload.
func DecodeEvent(data []byte) (*Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("event payload: %w", err)
	}
	if e.V != Version {
		return nil, fmt.Errorf("event payload: envelope version %d, this controller reads %d", e.V, Version)
	}
	if e.Run == "" || e.Kind == "" {
		return nil, errors.New("event payload: run and kind are required")
	}
	return &e, nil
}

// JobID is the id of the job a result event answers (Job.ID of that job).
func (e *Event) JobID() string {
	rb := ""
	if e.Rollback {
		rb = "rb."
	}
	return e.Run + "/" + e.Stage + "/" + rb + e.Step + "/" + strconv.Itoa(e.Attempt) + "/" + strconv.Itoa(e.Wake)
}

// CheckToken reports (queue.ErrBadToken) a result event whose token is not its job's.
func CheckToken(key []byte, e *Event) error {
	want := queue.JobToken(key, e.JobID())
	if !hmac.Equal([]byte(want), []byte(e.Token)) {
		return fmt.Errorf("%w %s", queue.ErrBadToken, e.JobID())
	}
	return nil
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}
