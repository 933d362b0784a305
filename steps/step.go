// Package steps holds the step contract, the registry every step type registers with, and one
// file per step type. A step runs on a worker: it gets its resolved inputs and what earlier steps
// produced, and returns Succeeded with outputs, Failed (terminal), or Waiting (parked by the
// controller, holding no worker, until something it named happens).
package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Step is one step type's implementation. Run must be idempotent: a redelivered or re-run job
// has to find the work an earlier attempt already did instead of doing it again.
type Step interface {
	Run(ctx context.Context, sc *Context) (Result, error)
}

// StepFunc adapts a function to Step.
type StepFunc func(ctx context.Context, sc *Context) (Result, error)

// Run calls f.
func (f StepFunc) Run(ctx context.Context, sc *Context) (Result, error) { return f(ctx, sc) }

// Status is a step result's outcome.
type Status string

const (
	Succeeded Status = "succeeded"
	Failed    Status = "failed"
	Waiting   Status = "waiting"
)

// Result is what Run returns. A non-nil error from Run is classified with IsTerminal: terminal
// errors become a Failed result, others are retried by the worker with backoff.
type Result struct {
	Status  Status         `json:"status"`
	Outputs map[string]any `json:"outputs,omitempty"`
	Message string         `json:"message,omitempty"` // for Failed: what went wrong, for a person
	Wait    *Wait          `json:"wait,omitempty"`    // for Waiting
	// Memo is carried to the next run of a parked step (e.g. "sync started at T for revision R").
	Memo json.RawMessage `json:"memo,omitempty"`
	// NoRollback (Failed only): the step could not observe what happened (its GitOps agent
	// could not see Argo CD), so the stage must fail without running its rollback steps: a
	// rollback it cannot observe may revert a healthy change and then fail itself.
	NoRollback bool `json:"noRollback,omitempty"`
	// Warnings (Succeeded only) are recorded on the run: something the step did that a
	// person should look at although it is no failure (a Harness import creating new keys).
	Warnings []string `json:"warnings,omitempty"`
}

// Wait says what wakes a parked step. Any of them wakes it; it is re-run and decides again.
type Wait struct {
	// Keys are prflow-apps KV keys (<agent>.<app>); a change to any wakes the step.
	Keys []string `json:"keys,omitempty"`
	// Topics are event topics such as "approval" or "pr:github:acme/deploy#12".
	Topics []string `json:"topics,omitempty"`
	// Poll is the fallback: wake after this long even if nothing happened. 0 = no polling.
	Poll time.Duration `json:"poll,omitempty"`
	// Deadline: wake then for the last time; a step still Waiting after it fails as timed out.
	Deadline time.Time `json:"deadline,omitzero"`
	// Reason is shown in status output ("waiting for PR #12 to be merged").
	Reason string `json:"reason,omitempty"`
	// Approvers, on an approval wait, says who may decide: the API refuses anyone else
	// instead of accepting a decision the step would ignore.
	Approvers *Approvers `json:"approvers,omitempty"`
}

// Approvers are the users and groups allowed to decide on an approval wait.
type Approvers struct {
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// NotExecutor: the person who started the run may not decide (disallowPipelineExecutor).
	NotExecutor bool `json:"notExecutor,omitempty"`
}

// Allows reports whether user (member of groups) is one of the approvers.
func (a *Approvers) Allows(user string, groups []string) bool {
	for _, u := range a.Users {
		if u == user {
			return true
		}
	}
	for _, g := range a.Groups {
		for _, ug := range groups {
			if g == ug {
				return true
			}
		}
	}
	return false
}

// Done returns a Succeeded result.
func Done(outputs map[string]any) Result { return Result{Status: Succeeded, Outputs: outputs} }

// Fail returns a terminal Failed result.
func Fail(msg string) Result { return Result{Status: Failed, Message: msg} }

// FailBlind returns a terminal Failed result that must not trigger a rollback (NoRollback).
func FailBlind(msg string) Result { return Result{Status: Failed, Message: msg, NoRollback: true} }

// Park returns a Waiting result.
func Park(w Wait, memo any) Result {
	r := Result{Status: Waiting, Wait: &w}
	if memo != nil {
		if b, err := json.Marshal(memo); err == nil {
			r.Memo = b
		}
	}
	return r
}

// Signal is something a person or system sent to a parked step: an approval, a PR event.
type Signal struct {
	Kind    string         `json:"kind"` // approval, pr, status
	User    string         `json:"user,omitempty"`
	Groups  []string       `json:"groups,omitempty"`
	Approve bool           `json:"approve,omitempty"`
	Comment string         `json:"comment,omitempty"`
	Data    map[string]any `json:"data,omitempty"`
	At      time.Time      `json:"at"`
}

// Cluster is a deployment target of an environment.
type Cluster struct {
	Name  string `json:"name"`
	Agent string `json:"agent,omitempty"`
}

// Environment is the stage's target environment and its clusters. Variables are the merged
// service → environment → override values (resolved), for steps that write them.
type Environment struct {
	Name      string         `json:"name"`
	Group     string         `json:"group,omitempty"`
	Clusters  []Cluster      `json:"clusters,omitempty"`
	Service   string         `json:"service,omitempty"`
	Variables map[string]any `json:"variables,omitempty"`
}

// Prior is an earlier step of the same stage, for steps that act on "the latest PR of this stage".
type Prior struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Outputs map[string]any `json:"outputs,omitempty"`
}

// Context is everything a step run gets.
type Context struct {
	RunID      string
	Pipeline   string
	Stage      string
	StepID     string
	Type       string
	Attempt    int
	Delivery   int    // how often the queue delivered this job (1 = first); >1: an earlier delivery may have done part of it
	Wake       int    // how many times this parked step has been woken (0 on first run)
	WakeReason string // "key prflow-apps/x.y changed", "poll", "deadline", "signal"
	Executor   string // user who started the run
	Rollback   bool   // a rollback step of its stage
	Inputs     map[string]any
	Env        *Environment
	Priors     []Prior
	Memo       json.RawMessage
	Signals    []Signal
	Deadline   time.Time // overall deadline of this step across parks
	Log        *slog.Logger
	Services   Services
}

// Repeat reports whether an earlier run of this step may have done part of its work: a
// redelivered job, a retried attempt or a woken park. Steps still check (any hint can be
// missing, e.g. a job re-sent after a controller crash); it only says which check to try first.
func (sc *Context) Repeat() bool { return sc.Delivery > 1 || sc.Attempt > 1 || sc.Wake > 0 }

// DecodeMemo unmarshals the memo an earlier parked run of this step left.
func (sc *Context) DecodeMemo(v any) (bool, error) {
	if len(sc.Memo) == 0 {
		return false, nil
	}
	return true, json.Unmarshal(sc.Memo, v)
}

// Services are the worker-side capabilities steps may use. Each is an interface defined in
// this package; nil when the worker was started without it (the step then fails saying so).
type Services struct {
	SCM     SCM               // forge connectors
	Locks   Locker            // leases; the worker's also queue runs (RunQueues), merges (MergeQueue) and comments (Sequencer)
	GitOps  GitOps            // the GitOps agents
	Metrics MetricsConnectors // Verify's metrics servers
	Notify  Notifier          // notification channels
	// NotifyMarks records which notifications were sent.
	NotifyMarks NotifyMarks
	// RunURL is the run's page for a run ID ("" when there is none), linked from PR comments.
	RunURL func(runID string) string
}

// serviceNames maps the Service* names to the fields of Services, for NewServices and Get.
var serviceNames = map[string]struct {
	get func(Services) any
	set func(*Services, any) // leaves the field nil when v lacks its interface
}{
	ServiceSCM:         {func(s Services) any { return nilOr(s.SCM) }, func(s *Services, v any) { s.SCM, _ = v.(SCM) }},
	ServiceLocks:       {func(s Services) any { return nilOr(s.Locks) }, func(s *Services, v any) { s.Locks, _ = v.(Locker) }},
	ServiceGitOps:      {func(s Services) any { return nilOr(s.GitOps) }, func(s *Services, v any) { s.GitOps, _ = v.(GitOps) }},
	ServiceMetrics:     {func(s Services) any { return nilOr(s.Metrics) }, func(s *Services, v any) { s.Metrics, _ = v.(MetricsConnectors) }},
	ServiceNotify:      {func(s Services) any { return nilOr(s.Notify) }, func(s *Services, v any) { s.Notify, _ = v.(Notifier) }},
	ServiceNotifyMarks: {func(s Services) any { return nilOr(s.NotifyMarks) }, func(s *Services, v any) { s.NotifyMarks, _ = v.(NotifyMarks) }},
	ServiceRunURL: {func(s Services) any {
		if s.RunURL == nil {
			return nil
		}
		return s.RunURL
	}, func(s *Services, v any) { s.RunURL, _ = v.(func(string) string) }},
}

// NewServices builds Services from capabilities named by the Service* constants. It is the
// compatibility path for code outside this package that assembles them by name (cmd/prflow,
// the controller test harness, deploy's end-to-end tests); a value that does not implement
// its capability's interface is left out, and an unknown name panics (a programming error).
func NewServices(kv map[string]any) Services {
	var s Services
	for k, v := range kv {
		f, ok := serviceNames[k]
		if !ok {
			panic(fmt.Sprintf("steps: unknown service %q", k))
		}
		f.set(&s, v)
	}
	return s
}

// Get returns a capability by its Service* name (nil when absent), for code outside this
// package that looks them up by name (the worker's connector list).
func (s Services) Get(name string) any {
	if f, ok := serviceNames[name]; ok {
		return f.get(s)
	}
	return nil
}

func nilOr[T any](v T) any {
	if any(v) == nil {
		return nil
	}
	return v
}
