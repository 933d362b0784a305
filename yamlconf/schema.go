package yamlconf

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v3"
)

// Validate checks the document against a JSON Schema and records each violation at the
// node it concerns, as "file:line:col: field.path: what the schema says". It runs before
// or instead of Decode for files that have a schema (pipelines/schema.json): the schema
// catches shape, Decode and the file's checks the rest.
func (d *Doc) Validate(s *jsonschema.Schema) {
	d.validate(s, false, func(n *yaml.Node, field, _, format string, a ...any) { d.ErrorAt(n, field, format, a...) })
}

// Violations returns what Validate would record, without recording it, for a file that is
// also decoded (see AddUnrelated): a non-null scalar where the schema wants a scalar of
// another type is left to Decode, which reads it as the field's Go type.
func (d *Doc) Violations(s *jsonschema.Schema) Errors {
	var out Errors
	d.validate(s, true, func(n *yaml.Node, field, scope, format string, a ...any) {
		e := &Error{File: d.File, Field: field, Msg: fmt.Sprintf(format, a...), scope: scope}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		out = append(out, e)
	})
	return out
}

// AddUnrelated records each problem of es unless one is already recorded at its field, at a
// field inside it or at one enclosing it (for a schema violation inside an anyOf or oneOf,
// the field of the anyOf: its other branches' complaints are about the same value). A check
// that runs after the decode (a schema) so adds what the decode and the file's own checks
// missed, and one mistake is not reported twice in two wordings.
func (d *Doc) AddUnrelated(es Errors) {
	known := make([]string, len(d.errs))
	for i, e := range d.errs {
		known[i] = e.Field
	}
	for _, e := range es {
		scope := e.Field
		if e.scope != "" || e.Field == "" {
			scope = e.scope
		}
		if !slices.ContainsFunc(known, func(k string) bool { return related(k, scope) }) {
			d.ErrorAt(&yaml.Node{Line: e.Line, Column: e.Column}, e.Field, "%s", e.Msg)
		}
	}
}

// Bounded reports whether the document, aliases followed, holds at most DefaultMaxNodes
// values nested at most DefaultMaxDepth levels; when not, it records why. A reader that
// keeps parts of the file as nodes and walks them itself (a pipeline's step inputs) calls
// it first, so that an alias bomb costs it nothing.
func (d *Doc) Bounded() bool {
	if d.Root == nil {
		return true
	}
	if _, ok := d.jsonRoot(); !ok {
		d.ErrorAt(d.Root, "", "the file expands to more than %d values or %d levels (aliases counted each time they are used)", DefaultMaxNodes, DefaultMaxDepth)
		return false
	}
	return true
}

// related reports whether field paths a and b are the same or one encloses the other.
func related(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	if a == "" || a == b {
		return true
	}
	return strings.HasPrefix(b, a) && (b[len(a)] == '.' || b[len(a)] == '[')
}

// decoded: the caller decodes the file too (Violations), and its decode judges the scalars.
func (d *Doc) validate(s *jsonschema.Schema, decoded bool, report func(n *yaml.Node, field, scope, format string, a ...any)) {
	if d.Root == nil {
		return
	}
	v, ok := d.jsonRoot()
	if !ok {
		report(d.Root, "", "", "too large or too deeply nested to check against the schema")
		return
	}
	err := s.Validate(v)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		if err != nil {
			report(d.Root, "", "", "schema: %v", err)
		}
		return
	}
	for _, leaf := range leaves(ve, nil, nil) {
		n, path := d.locate(leaf.InstanceLocation)
		scope := path
		if leaf.scope != nil {
			_, scope = d.locate(leaf.scope)
		}
		if ap, ok := leaf.ErrorKind.(*kind.AdditionalProperties); ok {
			// a stray key: report it where it is written, as Decode does
			for _, k := range ap.Properties {
				report(keyNode(n, k), Join(path, k), scope, "unknown field (the schema does not allow it)")
			}
			continue
		}
		if t, ok := leaf.ErrorKind.(*kind.Type); ok {
			if decoded && n.Kind == yaml.ScalarNode && !isNull(n) && scalarTypes(t.Want) {
				// Decode judges a scalar by the field's Go type: 1.10 is text where a string
				// is wanted, yes is true where a bool is (as yaml.v3 has it).
				continue
			}
			report(n, path, scope, "want %s, got %s", jsonTypes(t.Want), Kind(n))
			continue
		}
		msg := "does not match the schema"
		if out := leaf.BasicOutput(); out.Error != nil {
			msg = out.Error.String()
		}
		report(n, path, scope, "%s", msg)
	}
}

// scalarTypes reports whether every type of types is a scalar one.
func scalarTypes(types []string) bool {
	for _, t := range types {
		if t != "string" && t != "boolean" && t != "integer" && t != "number" {
			return false
		}
	}
	return true
}

// jsonTypes words JSON Schema types as Decode words what it wants.
func jsonTypes(types []string) string {
	words := map[string]string{"string": "a string", "boolean": "true or false", "integer": "a whole number",
		"number": "a number", "array": "a list", "object": "a mapping", "null": "null"}
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = or(words[t], t)
	}
	return strings.Join(out, " or ")
}

// keyNode returns the key node named k of mapping n, or n.
func keyNode(n *yaml.Node, k string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				return n.Content[i]
			}
		}
	}
	return n
}

// leaf is an innermost error (one that says what is wrong) with the instance location of
// the outermost anyOf or oneOf it is one branch of (nil when none): its scope.
type leaf struct {
	*jsonschema.ValidationError
	scope []string
}

func leaves(e *jsonschema.ValidationError, scope []string, out []leaf) []leaf {
	if len(e.Causes) == 0 {
		return append(out, leaf{e, scope})
	}
	if scope == nil {
		switch e.ErrorKind.(type) {
		case *kind.AnyOf, *kind.OneOf:
			scope = e.InstanceLocation
		}
	}
	for _, c := range e.Causes {
		out = leaves(c, scope, out)
	}
	return out
}

// locate follows a JSON instance location down the node tree, returning the deepest node
// reached and its field path (stages[1].steps[0].type).
func (d *Doc) locate(loc []string) (*yaml.Node, string) {
	n, path := d.Root, ""
	for _, seg := range loc {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			next := (*yaml.Node)(nil)
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				return n, path
			}
			n, path = next, Join(path, seg)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(n.Content) {
				return n, path
			}
			n, path = n.Content[i], Index(path, i)
		default:
			return n, path
		}
	}
	return n, path
}

// jsonRoot is jsonValue of the document, computed once (Bounded, then Violations).
func (d *Doc) jsonRoot() (any, bool) {
	if !d.json.done {
		budget := DefaultMaxNodes
		d.json.v, d.json.ok = jsonValue(d.Root, 0, &budget)
		d.json.done = true
	}
	return d.json.v, d.json.ok
}

// jsonValue converts a node into the values encoding/json would produce (with whole numbers
// kept as int64), following aliases within budget nodes and DefaultMaxDepth levels.
func jsonValue(n *yaml.Node, depth int, budget *int) (any, bool) {
	*budget--
	if *budget < 0 || depth > DefaultMaxDepth {
		return nil, false
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, true
		}
		return jsonValue(n.Alias, depth+1, budget)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, ok := jsonValue(n.Content[i+1], depth+1, budget)
			if !ok {
				return nil, false
			}
			m[n.Content[i].Value] = v
		}
		return m, true
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, ok := jsonValue(c, depth+1, budget)
			if !ok {
				return nil, false
			}
			s[i] = v
		}
		return s, true
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case "!!int":
			if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
				return i, true
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil {
				return f, true
			}
		}
		return n.Value, true
	}
	return nil, true
}
