package pipelines

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/prflow/prflow/steps"
)

// Schema is the JSON Schema of the pipeline format, for editors (yaml-language-server:
// `# yaml-language-server: $schema=…/pipelines/schema.json`). It is generated (GenerateSchema)
// from schema_base.json and the step types' declared inputs; a test fails when it drifts.
//
//go:generate sh -c "go run ../cmd/prflow schema > schema.json"
//go:embed schema.json
var Schema []byte

// schemaBase is the hand-written part of the schema: everything but the step types' inputs.
//
//go:embed schema_base.json
var schemaBase []byte

// SchemaCommand regenerates schema.json; messages about a stale schema name it.
const SchemaCommand = "go generate ./pipelines (or: go run ./cmd/prflow schema > pipelines/schema.json)"

// GenerateSchema returns the pipeline JSON Schema for the step types of reg: the step's `type`
// is one of the types a pipeline may name (internal ones left out), and for each type `with`
// holds exactly its declared inputs, each typed (an expression is accepted wherever a literal is).
func GenerateSchema(reg *steps.Registry) ([]byte, error) {
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(schemaBase))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("schema_base.json: %w", err)
	}
	root["$comment"] = "Generated from pipelines/schema_base.json and the step types' declared inputs; do not edit. Regenerate: " + SchemaCommand
	defs, _ := root["$defs"].(map[string]any)
	step, _ := defs["step"].(map[string]any)
	props, _ := step["properties"].(map[string]any)
	if defs == nil || step == nil || props == nil {
		return nil, fmt.Errorf("schema_base.json: no $defs.step.properties")
	}
	// The notification events come from the loader's list, so schema and loader agree.
	if top, ok := root["properties"].(map[string]any); ok {
		if n, ok := top["notifications"].(map[string]any); ok {
			items, _ := n["items"].(map[string]any)
			ip, _ := items["properties"].(map[string]any)
			if ip == nil || ip["on"] == nil {
				return nil, fmt.Errorf("schema_base.json: no properties.notifications.items.properties.on")
			}
			ip["on"] = map[string]any{"description": "one event or a list of them", "oneOf": []any{
				map[string]any{"enum": NotifyEvents},
				map[string]any{"type": "array", "minItems": 1, "uniqueItems": true, "items": map[string]any{"enum": NotifyEvents}},
			}}
		}
	}
	defs["expression"] = map[string]any{"type": "string", "pattern": `\$\{\{|<\+`,
		"description": "an expression (${{ … }} or <+ … >), checked when it is evaluated"}
	for _, t := range []steps.InputType{steps.InputString, steps.InputBool, steps.InputInt, steps.InputDuration, steps.InputStrings} {
		defs["input-"+string(t)] = map[string]any{"anyOf": []any{shapeSchema(&steps.Input{Type: t}), map[string]any{"$ref": "#/$defs/expression"}}}
	}
	var names []string
	var rules []any
	for _, typ := range userTypes(reg) {
		d, _ := reg.Lookup(typ)
		all := append([]string{d.Type}, d.Aliases...)
		names = append(names, all...)
		ref := "with" + d.Type
		defs[ref] = objectSchema(d.Inputs, d.Inputs == nil)
		rules = append(rules, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"enum": all}}, "required": []string{"type"}},
			"then": map[string]any{"properties": map[string]any{"with": map[string]any{"$ref": "#/$defs/" + ref}}},
		})
		if required(d.Inputs) {
			rules = append(rules, map[string]any{
				"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"enum": all}}, "required": []string{"type"}},
				"then": map[string]any{"required": []string{"with"}},
			})
		}
	}
	sort.Strings(names)
	props["type"] = map[string]any{"enum": names, "description": "the step type; its inputs go under with:"}
	props["with"] = map[string]any{"type": "object", "description": "the step's inputs (declared per type)"}
	step["allOf"] = rules
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // patterns and docs hold <+ … >
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func required(list []steps.Input) bool {
	for _, in := range list {
		if in.Required {
			return true
		}
	}
	return false
}

// objectSchema is a mapping holding exactly the declared fields (any key when free).
func objectSchema(fields []steps.Input, free bool) map[string]any {
	s := map[string]any{"type": "object"}
	if free {
		return s
	}
	props := map[string]any{}
	var req []string
	for i := range fields {
		props[fields[i].Name] = inputSchema(&fields[i])
		if fields[i].Required {
			req = append(req, fields[i].Name)
		}
	}
	s["properties"] = props
	s["additionalProperties"] = false
	if len(req) > 0 {
		s["required"] = req
	}
	return s
}

// inputSchema is one input's schema: its shape, its other shapes, or an expression.
func inputSchema(in *steps.Input) map[string]any {
	alts := []any{shapeSchema(in)}
	for i := range in.Or {
		alts = append(alts, shapeSchema(&in.Or[i]))
	}
	var s map[string]any
	switch {
	case in.Type == steps.InputAny || in.TypedBy != "":
		s = map[string]any{}
	case len(in.Or) == 0 && len(in.Enum) == 0 && isSimple(in.Type):
		s = map[string]any{"$ref": "#/$defs/input-" + string(in.Type)}
	default:
		s = map[string]any{"anyOf": append(alts, map[string]any{"$ref": "#/$defs/expression"})}
	}
	if in.Doc != "" {
		s["description"] = in.Doc
	}
	if in.Default != nil {
		s["default"] = in.Default
	}
	return s
}

var scalarTypes = []string{"string", "number", "boolean"}

func shapeSchema(in *steps.Input) map[string]any {
	switch in.Type {
	case steps.InputString:
		if len(in.Enum) > 0 {
			return map[string]any{"enum": in.Enum}
		}
		return map[string]any{"type": scalarTypes} // any scalar, taken as its text
	case steps.InputBool:
		return map[string]any{"anyOf": []any{map[string]any{"type": "boolean"},
			map[string]any{"type": "string", "pattern": "^\\s*([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])\\s*$"}}}
	case steps.InputInt:
		return map[string]any{"anyOf": []any{map[string]any{"type": "integer"},
			map[string]any{"type": "string", "pattern": "^\\s*[-+]?[0-9]+\\s*$"}}}
	case steps.InputDuration:
		return map[string]any{"anyOf": []any{map[string]any{"$ref": "#/$defs/duration"}, map[string]any{"enum": []any{0, "0"}}}}
	case steps.InputStrings:
		return map[string]any{"anyOf": []any{map[string]any{"type": scalarTypes},
			map[string]any{"type": "array", "items": map[string]any{"type": scalarTypes}}}}
	case steps.InputMap:
		s := map[string]any{"type": "object"}
		if in.Items != nil {
			s["additionalProperties"] = inputSchema(in.Items)
		}
		return s
	case steps.InputObject:
		return objectSchema(in.Fields, false)
	case steps.InputList:
		return map[string]any{"type": "array", "items": inputSchema(in.Items)}
	}
	return map[string]any{}
}

func isSimple(t steps.InputType) bool {
	switch t {
	case steps.InputString, steps.InputBool, steps.InputInt, steps.InputDuration, steps.InputStrings:
		return true
	}
	return false
}

// schemas holds the compiled schema of each registry Load was given: the generated
// schema.json for steps.Default, one generated from the registry's types for any other (a
// build or a test with types of its own), again when types were registered since.
var schemas sync.Map // schemaKey → *jsonschema.Schema

type schemaKey struct {
	reg   *steps.Registry
	types string
}

// schemaFor returns the compiled pipeline schema for the step types of reg.
func schemaFor(reg *steps.Registry) (*jsonschema.Schema, error) {
	key := schemaKey{reg: reg}
	if reg != steps.Default {
		key.types = strings.Join(reg.Types(), ",")
	}
	if s, ok := schemas.Load(key); ok {
		return s.(*jsonschema.Schema), nil
	}
	src := Schema
	if reg != steps.Default {
		var err error
		if src, err = GenerateSchema(reg); err != nil {
			return nil, err
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("pipeline schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		return nil, fmt.Errorf("pipeline schema: %w", err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		return nil, fmt.Errorf("pipeline schema: %w", err)
	}
	schemas.Store(key, s)
	return s, nil
}
