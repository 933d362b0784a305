package steps

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/steps/template"
)

// Typed step configs. A step type declares its `with:` inputs as a struct whose fields carry
//
//	input:"name[,required][,enum=a|b][,default=v[,fallback]][,list][,typedby=f][,internal]"
//	doc:"one line"
//
// and sets Definition.Config to a zero value of it. Register derives Definition.Inputs (and so
// the load-time checks, `prflow validate`, pipelines/schema.json and docs/steps.md) from the
// struct, and the step reads its inputs with Decode into the same struct: the declaration and
// the reading cannot drift.
//
// Field types and the input type they declare: string (InputString), bool (InputBool), int
// (InputInt), time.Duration (InputDuration), []string (InputStrings, or InputList of strings
// with `list`), map[string]string and map[string]any (InputMap), any (InputAny), a struct or
// *struct (InputObject), a slice of structs (InputList). A type with its own shape (several
// accepted shapes, a selector) implements InputValue. `internal` fields are inputs the
// controller adds (PerTarget's targets): decoded, never declared.

// InputValue is a config field type that declares and decodes its own shape, e.g. an input that
// takes a list or a mapping (Input.Or).
type InputValue interface {
	// InputShape is the declaration without Name, Doc, Required and Default (from the tag).
	InputShape() Input
	// DecodeInput sets the value from v (never nil); field names it in errors. static: at
	// pipeline load, where v may still hold unresolved expressions.
	DecodeInput(v any, field string, static bool) error
}

var inputValueType = reflect.TypeFor[InputValue]()

// fieldTag is one parsed `input` tag.
type fieldTag struct {
	name     string
	required bool
	enum     []string
	def      string
	hasDef   bool
	list     bool
	typedBy  string
	internal bool
	// fallback: the default is documented but not applied at decode; the step falls back
	// to something else first (RevertPR's baseBranch: the stage's UpdateReleaseRepo's).
	fallback bool
}

func parseTag(f reflect.StructField) (fieldTag, bool) {
	raw, ok := f.Tag.Lookup("input")
	if !ok || raw == "-" {
		return fieldTag{}, false
	}
	parts := strings.Split(raw, ",")
	t := fieldTag{name: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "required":
			t.required = true
		case "enum":
			t.enum = strings.Split(v, "|")
		case "default":
			t.def, t.hasDef = v, true
		case "list":
			t.list = true
		case "typedby":
			t.typedBy = v
		case "internal":
			t.internal = true
		case "fallback":
			t.fallback = true
		default:
			panic(fmt.Sprintf("steps: field %s: unknown input tag option %q", f.Name, k))
		}
	}
	return t, true
}

// InputsOf derives the input declaration of config struct type T.
func InputsOf[T any]() []Input { return inputsOfType(reflect.TypeFor[T]()) }

func inputsOfType(t reflect.Type) []Input {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("steps: config %s is not a struct", t))
	}
	out := []Input{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("input") == "" {
			out = append(out, inputsOfType(f.Type)...) // embedded groups of shared inputs
			continue
		}
		tag, ok := parseTag(f)
		if !ok || tag.internal {
			continue
		}
		in := shapeOf(f.Type, tag)
		in.Name, in.Required, in.Doc = tag.name, tag.required, f.Tag.Get("doc")
		if len(tag.enum) > 0 {
			in.Enum = tag.enum
		}
		if tag.hasDef {
			in.Default = defaultValue(in.Type, tag.def)
		}
		if tag.typedBy != "" {
			in.TypedBy = tag.typedBy
		}
		out = append(out, in)
	}
	return out
}

// shapeOf is the declared shape of a field type.
func shapeOf(t reflect.Type, tag fieldTag) Input {
	if reflect.PointerTo(t).Implements(inputValueType) {
		return reflect.New(t).Interface().(InputValue).InputShape()
	}
	if t == reflect.TypeFor[time.Duration]() {
		return Input{Type: InputDuration}
	}
	switch t.Kind() {
	case reflect.String:
		return Input{Type: InputString}
	case reflect.Bool:
		return Input{Type: InputBool}
	case reflect.Int, reflect.Int64:
		return Input{Type: InputInt}
	case reflect.Interface:
		return Input{Type: InputAny}
	case reflect.Pointer:
		return shapeOf(t.Elem(), tag)
	case reflect.Struct:
		return Input{Type: InputObject, Fields: inputsOfType(t)}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			break
		}
		if t.Elem().Kind() == reflect.Interface {
			return Input{Type: InputMap}
		}
		item := shapeOf(t.Elem(), fieldTag{})
		return Input{Type: InputMap, Items: &item}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String && !tag.list {
			return Input{Type: InputStrings}
		}
		item := shapeOf(t.Elem(), fieldTag{})
		return Input{Type: InputList, Items: &item}
	}
	panic(fmt.Sprintf("steps: config field type %s has no input type", t))
}

func defaultValue(t InputType, s string) any {
	switch t {
	case InputBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			panic("steps: default " + s + ": not a boolean")
		}
		return b
	case InputInt:
		n, err := strconv.Atoi(s)
		if err != nil {
			panic("steps: default " + s + ": not a whole number")
		}
		return n
	}
	return s
}

// Decode reads a step's inputs into config struct T: every key must be a declared (or
// internal) field, values are converted as the loader accepts them (a string "true", a
// number as text, a comma-separated list, durations such as 1d), absent values take the
// tag's default, and errors name the field ("retryStrategy.limit: want a whole number, …").
// static is pipeline-load validation: a value that is still an expression is left unset.
func Decode[T any](in map[string]any, static bool) (T, error) {
	var cfg T
	err := decodeStruct(reflect.ValueOf(&cfg).Elem(), in, "", static)
	return cfg, err
}

func decodeStruct(dst reflect.Value, in map[string]any, prefix string, static bool) error {
	known := map[string]bool{}
	if err := decodeFields(dst, in, prefix, static, known); err != nil {
		return err
	}
	for _, k := range sortedMapKeys(in) {
		if !known[k] {
			var names []string
			for n := range known {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("%s%s: unknown input (known: %s)", prefix, k, strings.Join(names, ", "))
		}
	}
	return nil
}

func decodeFields(dst reflect.Value, in map[string]any, prefix string, static bool, known map[string]bool) error {
	t := dst.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("input") == "" {
			if err := decodeFields(dst.Field(i), in, prefix, static, known); err != nil {
				return err
			}
			continue
		}
		tag, ok := parseTag(f)
		if !ok {
			continue
		}
		known[tag.name] = true
		field := prefix + tag.name
		v, given := in[tag.name]
		expr := false
		if s, isStr := v.(string); isStr && static && template.Contains(s) {
			// Checked once evaluated; a string keeps the expression's text meanwhile.
			if _, own := dst.Field(i).Addr().Interface().(InputValue); !own {
				if k := dst.Field(i).Kind(); k == reflect.String || k == reflect.Pointer {
					_ = decodeValue(dst.Field(i), s, prefix+tag.name, tag, static)
					continue
				}
				given, expr = false, true
			}
		} else if v == nil || (v == "" && (tag.hasDef || !textOrInt(dst.Field(i)))) {
			given = false // "" is absent, except where it is a value (text) or refused (a number)
		}
		if !given {
			if tag.required && !expr {
				return fmt.Errorf("%s: required", field)
			}
			if tag.hasDef && !tag.fallback {
				if err := decodeValue(dst.Field(i), tag.def, field, tag, static); err != nil {
					return err
				}
			}
			continue
		}
		if err := decodeValue(dst.Field(i), v, field, tag, static); err != nil {
			return err
		}
	}
	return nil
}

func decodeValue(dst reflect.Value, v any, field string, tag fieldTag, static bool) error {
	if dst.CanAddr() {
		if iv, ok := dst.Addr().Interface().(InputValue); ok {
			return iv.DecodeInput(v, field, static)
		}
	}
	if s, ok := v.(string); ok && static && template.Contains(s) {
		// An expression inside a list or mapping, at load: text keeps it, the rest is
		// checked once it is evaluated.
		switch {
		case dst.Kind() == reflect.String:
			dst.SetString(s)
		case dst.Kind() == reflect.Pointer && dst.Type().Elem().Kind() == reflect.String:
			dst.Set(reflect.ValueOf(&s).Convert(dst.Type()))
		}
		return nil
	}
	if dst.Type() == reflect.TypeFor[time.Duration]() {
		d, err := durationInput(fmt.Sprint(v))
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		dst.SetInt(int64(d))
		return nil
	}
	switch dst.Kind() {
	case reflect.String:
		s, err := StringInput(map[string]any{field: v}, field)
		if err != nil {
			return err
		}
		if len(tag.enum) > 0 && s != "" && !contains(tag.enum, s) {
			return fmt.Errorf("%s: %q is not %s", field, s, orList(tag.enum))
		}
		dst.SetString(s)
	case reflect.Bool:
		b, err := BoolInput(map[string]any{field: v}, field)
		if err != nil {
			return err
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := intInput(v, field, static)
		if err != nil {
			return err
		}
		dst.SetInt(int64(n))
	case reflect.Interface:
		dst.Set(reflect.ValueOf(v))
	case reflect.Pointer:
		p := reflect.New(dst.Type().Elem())
		if err := decodeValue(p.Elem(), v, field, tag, static); err != nil {
			return err
		}
		dst.Set(p)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a mapping %s, got %T", field, describeFields(dst.Type()), v)
		}
		return decodeStruct(dst, m, field+".", static)
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a mapping, got %T", field, v)
		}
		out := reflect.MakeMapWithSize(dst.Type(), len(m))
		for _, k := range sortedMapKeys(m) {
			e := reflect.New(dst.Type().Elem()).Elem()
			if m[k] != nil {
				if err := decodeValue(e, m[k], field+"."+k, fieldTag{}, static); err != nil {
					return err
				}
			}
			out.SetMapIndex(reflect.ValueOf(k), e)
		}
		dst.Set(out)
	case reflect.Slice:
		if dst.Type().Elem().Kind() == reflect.String && !tag.list {
			l, err := stringList(v, field)
			if err != nil {
				return err
			}
			dst.Set(reflect.ValueOf(l).Convert(dst.Type()))
			return nil
		}
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want a list, got %T", field, v)
		}
		out := reflect.MakeSlice(dst.Type(), len(l), len(l))
		for i, e := range l {
			if err := decodeValue(out.Index(i), e, fmt.Sprintf("%s[%d]", field, i), fieldTag{}, static); err != nil {
				return err
			}
		}
		dst.Set(out)
	default:
		return fmt.Errorf("%s: config field of type %s cannot be decoded", field, dst.Type())
	}
	return nil
}

// describeFields names an object's fields for a type error: {a, b, c}.
func describeFields(t reflect.Type) string {
	var names []string
	for _, in := range inputsOfType(t) {
		names = append(names, in.Name)
	}
	return "{" + strings.Join(names, ", ") + "}"
}

// orList writes a, b or c.
func orList(list []string) string {
	if len(list) == 1 {
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + " or " + list[len(list)-1]
}

func textOrInt(v reflect.Value) bool {
	if _, own := v.Addr().Interface().(InputValue); own {
		return false
	}
	switch v.Kind() {
	case reflect.String, reflect.Interface, reflect.Pointer: // a pointer: given or not, "" included
		return true
	case reflect.Int, reflect.Int64:
		return v.Type() != reflect.TypeFor[time.Duration]()
	}
	return false
}

// decodePart reads the inputs T declares out of a step's inputs, ignoring the others: for
// helpers shared by several step types, each of which Decodes its whole config first.
func decodePart[T any](in map[string]any, static bool) (T, error) {
	var cfg T
	err := decodeFields(reflect.ValueOf(&cfg).Elem(), in, "", static, map[string]bool{})
	return cfg, err
}

// decodeAs reads one input value (an object, a list…) into T; field names it in errors.
func decodeAs[T any](v any, field string, static bool) (T, error) {
	var out T
	err := decodeValue(reflect.ValueOf(&out).Elem(), v, field, fieldTag{}, static)
	return out, err
}

// hasInput reports whether config struct T declares the input name.
func hasInput[T any](name string) bool {
	for _, in := range InputsOf[T]() {
		if in.Name == name {
			return true
		}
	}
	return false
}
