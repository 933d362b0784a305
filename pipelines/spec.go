// Package pipelines holds prflow's pipeline format (YAML), its loader and validation, and the
// run model: the state of one run and the pure state machine that moves it forward. The
// controller (pipelines/controller) feeds it events and persists what it returns.
package pipelines

import (
	"time"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/template"
)

// Pipeline is a loaded, validated pipeline. Its expressions are compiled once, at load.
type Pipeline struct {
	Name         string
	Description  string
	Variables    []Variable
	Inputs       []Input
	Environments []Environment
	Service      *Service
	Stages       []*Stage
	Timeout      time.Duration
	Triggers     []*Trigger   // webhook triggers (triggers.go)
	Cleanup      *CleanupSpec // after a failed or cancelled run (cleanup.go)
	// Notifications say which run events go to which worker-side channel (notify.go).
	Notifications []*NotifyRule

	File   string // where it was loaded from, for messages
	Source []byte // the exact text, stored with runs so a restarted controller can reload it
	Hash   string // sha256 of Source (hex, 32 chars)
}

// Variable is a pipeline or stage variable; Value may contain expressions.
type Variable struct {
	Name  string
	Value *Value
}

// Input is a runtime input given with --set or the API.
type Input struct {
	Name        string
	Type        string // string, number, boolean
	Default     any
	Required    bool
	Description string
	Allowed     []any
}

// Service is what the pipeline deploys; its variables are the base layer UpdateReleaseRepo
// writes (service → environment → overrides → step, the step wins, as in Harness).
type Service struct {
	Name      string
	Variables []Variable
}

// Environment is a deployment target and its clusters.
type Environment struct {
	Name      string
	Group     string
	Clusters  []Cluster
	Variables []Variable
	Overrides []Variable // service overrides for this environment
}

// Cluster is where an environment's apps run, and which agent reports on them.
type Cluster struct {
	Name  string
	Agent string
}

// Stage is a unit of promotion, usually one environment.
type Stage struct {
	ID          string
	Name        string
	Needs       []string // stages that must end first; nil = the previous stage
	NeedsSet    bool     // `needs:` was written (even empty: run in parallel from the start)
	Environment string
	Clusters    []string // subset of the environment's clusters; empty = all
	When        *template.Template
	Timeout     time.Duration
	OnFailure   *FailureStrategy
	Variables   []Variable
	Steps       []*Step
	Rollback    []*Step
	Line        int
}

// Step is one step of a stage.
type Step struct {
	ID        string
	Name      string
	Type      string // canonical registry type
	With      *Value // a map
	When      *template.Template
	Timeout   time.Duration
	Pool      string
	OnFailure *FailureStrategy
	Line      int
}

// Failure actions.
const (
	ActFail             = "fail"
	ActIgnore           = "ignore"
	ActRetry            = "retry"
	ActRollbackStage    = "rollbackStage"
	ActRollbackPipeline = "rollbackPipeline"
	// ActManual parks the stage until a person decides (ManualStrategy).
	ActManual = "manual"
)

// FailureStrategy says what a failing step does to its stage and run.
type FailureStrategy struct {
	Action  string
	Retries int
	Backoff time.Duration   // first retry delay; doubles each attempt
	Then    string          // after retries run out: fail, ignore, rollbackStage, rollbackPipeline
	Manual  *ManualStrategy // Action == ActManual
}

// ManualStrategy parks a stage whose step failed until a person chooses what happens (retry,
// ignore, abort, rollback), or until Timeout, when OnTimeout happens instead.
type ManualStrategy struct {
	Timeout   time.Duration
	OnTimeout string // fail, ignore, rollbackStage or rollbackPipeline
	// Approvers may decide; nil: anyone authenticated.
	Approvers *steps.Approvers
}

// Value is a YAML value whose strings may hold compiled expressions.
type Value struct {
	Lit  any                // a literal scalar (string, bool, int, float, nil)
	Tmpl *template.Template // a string with expressions
	Map  map[string]*Value
	Keys []string // map keys in file order
	List []*Value
	Line int
}

// dynamic reports whether v holds an expression anywhere.
func (v *Value) dynamic() bool {
	if v == nil {
		return false
	}
	if v.Tmpl != nil {
		return true
	}
	for _, c := range v.Map {
		if c.dynamic() {
			return true
		}
	}
	for _, c := range v.List {
		if c.dynamic() {
			return true
		}
	}
	return false
}

// Stage returns the stage with id, or nil.
func (p *Pipeline) Stage(id string) *Stage {
	for _, s := range p.Stages {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// Env returns the environment called name, or nil.
func (p *Pipeline) Env(name string) *Environment {
	for i := range p.Environments {
		if p.Environments[i].Name == name {
			return &p.Environments[i]
		}
	}
	return nil
}
