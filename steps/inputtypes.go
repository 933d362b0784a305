package steps

import (
	"fmt"
	"regexp"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/steps/duration"
	"github.com/prflow/prflow/steps/fileedit"
	"github.com/prflow/prflow/steps/template"
)

// Config field types and input groups shared by several step types (steps/config.go).

// agentInputs are agentId and its alias agent.
type agentInputs struct {
	AgentID string `input:"agentId" doc:"the GitOps agent to ask (default: the agents of the stage's clusters)"`
	Agent   string `input:"agent" doc:"same as agentId"`
}

// agent is the agent the step names, "" for the stage's.
func (a agentInputs) agent() string { return orDefault(a.AgentID, a.Agent) }

// outageInput is agentOutageTimeout, on the steps that read the agent's view.
type outageInput struct {
	AgentOutageTimeout time.Duration `input:"agentOutageTimeout" doc:"how long the agent may be unable to see Argo CD before the stage fails, without rollback (default 10m)"`
}

// outageTimeout is agentOutageTimeout, defaultOutageTimeout when unset or 0.
func (o outageInput) outageTimeout() time.Duration {
	if o.AgentOutageTimeout <= 0 {
		return defaultOutageTimeout
	}
	return o.AgentOutageTimeout
}

// labelSelectorInput is a label selector given as "k=v,k2=v2", a list of "k:v" or a mapping,
// decoded to the selector text (labelSelector).
type labelSelectorInput string

func (labelSelectorInput) InputShape() Input {
	return Input{Type: InputStrings, Or: []Input{{Type: InputMap, Items: &Input{Type: InputString}}}}
}

func (l *labelSelectorInput) DecodeInput(v any, field string, static bool) error {
	s, err := labelSelector(v, field, static)
	*l = labelSelectorInput(s)
	return err
}

// durationText is a duration kept as written ("5s"), for Argo CD fields that take the text.
type durationText string

func (durationText) InputShape() Input { return Input{Type: InputDuration} }

func (d *durationText) DecodeInput(v any, field string, static bool) error {
	s := fmt.Sprint(v)
	if !(static && template.Contains(s)) {
		if _, err := duration.Parse(s); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	*d = durationText(s)
	return nil
}

// appRef is one entry of applicationsList; Harness spells its fields several ways.
type appRef struct {
	ApplicationName string `input:"applicationName" doc:"the app (namespace/name for apps outside Argo CD's namespace)"`
	Name            string `input:"name" doc:"same as applicationName"`
	AppName         string `input:"appName" doc:"same as applicationName"`
	AgentID         string `input:"agentId"`
	Agent           string `input:"agent"`
	AgentIdentifier string `input:"agentIdentifier"`
}

// appRefs is applicationsList: [{agentId|agent, applicationName|name}].
type appRefs []appRef

// targets resolves the entries; an entry without an agent takes defAgent (the step's).
func (l appRefs) targets(defAgent string, static bool) ([]appTarget, error) {
	var out []appTarget
	for i, e := range l {
		t := appTarget{Agent: orDefault(e.AgentID, orDefault(e.Agent, e.AgentIdentifier)),
			App: orDefault(e.ApplicationName, orDefault(e.Name, e.AppName))}
		if t.Agent == "" {
			t.Agent = defAgent
		}
		if t.App == "" {
			return nil, fmt.Errorf("applicationsList[%d].applicationName: required", i)
		}
		if t.Agent == "" && !static {
			return nil, fmt.Errorf("applicationsList[%d] (%s): agentId required (or set the step's agentId)", i, t.App)
		}
		out = append(out, t)
	}
	return out, nil
}

// regexInput is a Go regular expression, compiled at decode (an expression at load is left
// for run time).
type regexInput struct {
	Source string
	re     *regexp.Regexp
}

func (regexInput) InputShape() Input { return Input{Type: InputString} }

func (r *regexInput) DecodeInput(v any, field string, static bool) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s: want a string (a Go regular expression), got %T", field, v)
	}
	r.Source = s
	if static && template.Contains(s) {
		return nil
	}
	var err error
	if r.re, err = regexp.Compile(s); err != nil {
		return fmt.Errorf("%s: %v", field, err)
	}
	return nil
}

// selectorText is a Kubernetes label selector string, checked at decode.
type selectorText string

func (selectorText) InputShape() Input { return Input{Type: InputString} }

func (s *selectorText) DecodeInput(v any, field string, static bool) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s: want a label selector string such as \"team=payments,tier in (web,api)\", got %T", field, v)
	}
	if !(static && template.Contains(str)) {
		if _, err := agent.ParseSelector(str); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	*s = selectorText(str)
	return nil
}

// hasValue reports whether the input holds a value ("" and null are none).
func hasValue(in map[string]any, field string) bool {
	v, ok := in[field]
	return ok && v != nil && v != ""
}

// restraintInputs switch Harness's git restraint on the PR-creating steps (restraint).
type restraintInputs struct {
	GitRestraint        bool `input:"gitRestraint,default=false" doc:"one PR-creating step per connector at a time (Harness's git restraint)"`
	DisableGitRestraint bool `input:"disableGitRestraint,default=false" doc:"turn gitRestraint off (Harness name)"`
}

// documentSel selects the document of a multi-document YAML file: {index: N} or {kind, name}
// (documentInput).
type documentSel struct{ fileedit.Document }

type documentFields struct {
	Index int    `input:"index" doc:"the document's position, from 0"`
	Kind  string `input:"kind" doc:"the document's kind"`
	Name  string `input:"name" doc:"the document's metadata.name"`
}

func (documentSel) InputShape() Input {
	return Input{Type: InputObject, Fields: InputsOf[documentFields]()}
}

func (d *documentSel) DecodeInput(v any, field string, static bool) (err error) {
	d.Document, err = documentInput(v, field, static)
	return err
}
