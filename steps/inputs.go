package steps

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prflow/prflow/steps/template"
)

// Helpers that read typed step inputs and name the field when the type is wrong. `static`
// means load-time validation: a value may still be an unresolved expression string.

// gitopsInputs reads a GitOps step's typed inputs (a mistake in them is terminal) and the
// worker's GitOps client.
func gitopsInputs[C any](sc *Context, from func(in map[string]any, static bool) (C, error)) (C, GitOps, error) {
	cfg, err := from(sc.Inputs, false)
	if err != nil {
		return cfg, nil, Terminal(err)
	}
	g, err := gitopsFor(sc)
	return cfg, g, err
}

func stringList(v any, field string) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if x == "" {
			return nil, nil
		}
		return strings.Split(x, ","), nil
	case []any:
		out := make([]string, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: want a string, got %T", field, i, e)
			}
			out = append(out, s)
		}
		return out, nil
	case []string:
		return x, nil
	}
	return nil, fmt.Errorf("%s: want a list of strings, got %T", field, v)
}

func intInput(v any, field string, static bool) (int, error) {
	switch x := v.(type) {
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case uint64:
		return int(x), nil
	case float64:
		if x == float64(int(x)) {
			return int(x), nil
		}
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
			return n, nil
		}
		if static && template.Contains(x) {
			return 1, nil
		}
	}
	return 0, fmt.Errorf("%s: want a whole number, got %v", field, v)
}

// BoolInput reads a boolean input that may arrive as a string ("true").
func BoolInput(in map[string]any, field string) (bool, error) {
	switch x := in[field].(type) {
	case nil:
		return false, nil
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, nil
		case "false", "":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s: want true or false, got %v", field, in[field])
}

// StringInput reads a string input; numbers are formatted.
func StringInput(in map[string]any, field string) (string, error) {
	switch x := in[field].(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int, int64, uint64:
		return fmt.Sprint(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("%s: want a string, got %T", field, in[field])
}

// InputType is the shape a declared step input accepts.
type InputType string

// Input types. Every type also accepts an expression (`${{ … }}`, `<+ … >`), checked when it
// is evaluated; a literal is checked at pipeline load.
const (
	InputString   InputType = "string"   // any scalar, taken as its text as written (1.10 stays "1.10")
	InputBool     InputType = "boolean"  // true or false
	InputInt      InputType = "integer"  // a whole number
	InputDuration InputType = "duration" // 90s, 10m, 1h30m, 1d
	InputStrings  InputType = "strings"  // a list of strings, or one comma-separated string
	InputMap      InputType = "map"      // a mapping whose keys are the user's (values: Items, or anything)
	InputObject   InputType = "object"   // a mapping with the declared Fields only
	InputList     InputType = "list"     // a list of Items
	InputAny      InputType = "any"      // anything
)

// Input declares one input of a step type. Pipeline load, `prflow validate` and the JSON
// Schema (pipelines/schema.json) all check `with:` against these declarations, so a typo'd
// key or a value of the wrong type is refused before anything runs. Declaring a new input is
// one line in the step's Definition.
type Input struct {
	Name     string
	Type     InputType
	Required bool
	Enum     []string // allowed values of a string input
	Default  any      // what the step uses when the input is absent (documentation and schema)
	Doc      string   // one line
	Fields   []Input  // InputObject: its keys
	Items    *Input   // InputList: each element; InputMap: each value (nil = anything)
	Or       []Input  // other shapes the input also takes (e.g. a list of names, or an object); Name unused
	// TypedBy names a sibling field (in the same object) holding this value's type: String,
	// Number, Boolean or Raw. A String value keeps its source text; Number and Boolean are
	// checked at load. Absent type means String.
	TypedBy string
}

// Field returns the declared field name of an object input.
func (in *Input) Field(name string) (*Input, bool) {
	for i := range in.Fields {
		if in.Fields[i].Name == name {
			return &in.Fields[i], true
		}
	}
	return nil, false
}

// Input returns the declared input name of a step type.
func (d *Definition) Input(name string) (*Input, bool) {
	for i := range d.Inputs {
		if d.Inputs[i].Name == name {
			return &d.Inputs[i], true
		}
	}
	return nil, false
}

// Inputs shared by several step types.
var (
	inConnector  = Input{Name: "connector", Type: InputString, Doc: "the worker connector (SCM credentials) of the repo"}
	inRepo       = Input{Name: "repo", Type: InputString, Doc: "the repo, e.g. acme/release"}
	inBaseBranch = Input{Name: "baseBranch", Type: InputString, Default: "main", Doc: "the branch the PR targets"}
	inPRNumber   = Input{Name: "prNumber", Type: InputInt, Doc: "the pull request's number"}
	inAgent      = Input{Name: "agentId", Type: InputString, Doc: "the GitOps agent to ask (default: the agents of the stage's clusters)"}
	inAgentAlias = Input{Name: "agent", Type: InputString, Doc: "same as agentId"}
	inRestraint  = []Input{
		{Name: "gitRestraint", Type: InputBool, Default: false, Doc: "one PR-creating step per connector at a time (Harness's git restraint)"},
		{Name: "disableGitRestraint", Type: InputBool, Default: false, Doc: "turn gitRestraint off (Harness name)"},
	}
	// inLabels is a label selector given as "k=v,k2=v2", a list of "k:v" or a mapping.
	inLabels = func(name, doc string) Input {
		return Input{Name: name, Type: InputStrings, Doc: doc, Or: []Input{{Type: InputMap, Items: &Input{Type: InputString}}}}
	}
)

func inputs(groups ...[]Input) []Input {
	var out []Input
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
