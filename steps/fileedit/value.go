package fileedit

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Value types accepted by ParseValue (case-insensitive).
const (
	TypeString  = "String"
	TypeNumber  = "Number"
	TypeBoolean = "Boolean"
	// TypeRaw is a JSON or YAML text that is written as the value it denotes:
	// a map, a list or a typed scalar. "Object" is accepted as an alias.
	TypeRaw = "Raw"
	// TypeSecret is listed by Harness's schema, but Harness stopped writing
	// secrets into release files (CDS-58530); ParseValue refuses it.
	TypeSecret = "Secret"
)

// ParseValue turns a pipeline variable (Harness's {name, type, value}) into a
// Change value:
//
//   - String: the raw text, unchanged.
//   - Number: a decimal integer (int64) or float (float64); surrounding white
//     space is ignored; "3.0" becomes 3 as in Harness; blank means nil (missing).
//   - Boolean: true or false in any letter case; blank means nil.
//   - Raw (or Object): a JSON or YAML text decoded into maps, lists and typed
//     scalars; blank means nil.
//   - Secret: refused with ErrSecretValue.
//
// Errors name the type and the value and wrap ErrBadValue.
func ParseValue(typ, raw string) (any, error) {
	switch strings.ToLower(typ) {
	case "string":
		return raw, nil
	case "number":
		s := strings.TrimSpace(raw)
		if s == "" {
			return nil, nil
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || !looksDecimal(s) {
			return nil, fmt.Errorf("%w: type Number: %q is not a decimal number", ErrBadValue, raw)
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
		return f, nil
	case "boolean":
		switch strings.ToLower(strings.TrimSpace(raw)) {
		case "":
			return nil, nil
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, fmt.Errorf("%w: type Boolean: %q is not true or false", ErrBadValue, raw)
	case "raw", "object":
		if strings.TrimSpace(raw) == "" {
			return nil, nil
		}
		var v any
		if err := yaml.Unmarshal([]byte(raw), &v); err != nil {
			return nil, fmt.Errorf("%w: type %s: %q is not JSON or YAML: %v", ErrBadValue, typ, abbreviate(raw), err)
		}
		c, err := canonical(v)
		if err != nil {
			return nil, fmt.Errorf("%w: type %s: %q: %v", ErrBadValue, typ, abbreviate(raw), err)
		}
		return c, nil
	case "secret":
		return nil, ErrSecretValue
	}
	return nil, fmt.Errorf("%w: unknown variable type %q (want String, Number, Boolean or Raw)", ErrBadValue, typ)
}

// looksDecimal rejects the hex floats and "Inf" spellings ParseFloat accepts.
func looksDecimal(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}

func abbreviate(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// canonical validates a Change value and reduces it to the types the editors
// handle: nil, bool, string, int64, uint64 (above MaxInt64), float64 (never
// integral), []any and map[string]any.
func canonical(v any) (any, error) {
	return canonicalDepth(v, 0)
}

const maxValueDepth = 100

func canonicalDepth(v any, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels", maxValueDepth)
	}
	switch v := v.(type) {
	case nil, bool:
		return v, nil
	case string:
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("string %q is not valid UTF-8", abbreviate(v))
		}
		return v, nil
	case json.Number:
		return canonicalNumber(string(v))
	case float64:
		return canonicalFloat(v), nil
	case float32:
		return canonicalFloat(float64(v)), nil
	case int:
		return int64(v), nil
	case int64:
		return v, nil
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v), nil
		}
		return v, nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := canonicalDepth(x, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("map key %q is not valid UTF-8", abbreviate(k))
			}
			c, err := canonicalDepth(x, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return canonicalDepth(rv.Uint(), depth)
	case reflect.Float32, reflect.Float64:
		return canonicalFloat(rv.Float()), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.String:
		return canonicalDepth(rv.String(), depth)
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			c, err := canonicalDepth(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map keys must be strings, have %s", rv.Type().Key())
		}
		out := make(map[string]any, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			k := it.Key().String()
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("map key %q is not valid UTF-8", abbreviate(k))
			}
			c, err := canonicalDepth(it.Value().Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return canonicalDepth(rv.Elem().Interface(), depth)
	}
	return nil, fmt.Errorf("values of type %T cannot be written", v)
}

func canonicalFloat(f float64) any {
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return int64(f)
	}
	return f
}

func canonicalNumber(s string) (any, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return n, nil
	}
	if !isJSONNumber(s) {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	return canonicalFloat(f), nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// isJSONNumber reports whether s follows the JSON number grammar.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := i + 1
		if i = skipDigits(s, j); i == j {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if i = skipDigits(s, j); i == j {
			return false
		}
	}
	return i == len(s)
}

// skipDigits returns the index of the first byte at or after i in s that is
// not an ASCII digit.
func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// scalarText writes the canonical scalars that JSON and YAML spell the same
// way: null, true and false, integers, and finite floats in the shortest form
// that reads back. ok is false for anything else (strings, collections, NaN
// and infinities), which each format writes its own way.
func scalarText(v any) (text string, ok bool) {
	switch x := v.(type) {
	case nil:
		return "null", true
	case bool:
		return strconv.FormatBool(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64), true
		}
	}
	return "", false
}

// build wraps v in the maps and lists that path p (the part of a key that
// does not exist yet) describes. A list can only be created with index 0.
func build(p keyPath, full keyPath, done int, key string, v any) (any, error) {
	if len(p) == 0 {
		return v, nil
	}
	inner, err := build(p[1:], full, done+1, key, v)
	if err != nil {
		return nil, err
	}
	if p[0].isIndex {
		if p[0].index != 0 {
			return nil, outOfRange(key, full, done, p[0].index, 0)
		}
		return []any{inner}, nil
	}
	return map[string]any{p[0].key: inner}, nil
}

func outOfRange(key string, full keyPath, done, index, n int) *KeyError {
	return keyErr(key, ErrIndexOutOfRange, fmt.Sprintf("index %d out of range (list has %d items) at %s; index %d appends", index, n, full[:done+1].describe(), n))
}

// valueKind returns the YAML core tag of a canonical value and the word
// messages use for its kind ("" and the Go type for anything else).
func valueKind(v any) (tag, kind string) {
	switch v.(type) {
	case nil:
		return "!!null", "null"
	case bool:
		return "!!bool", "boolean"
	case string:
		return "!!str", "string"
	case int64, uint64:
		return "!!int", "number"
	case float64:
		return "!!float", "number"
	case []any:
		return "!!seq", "list"
	case map[string]any:
		return "!!map", "map"
	}
	return "", fmt.Sprintf("%T", v)
}

// kindOf names the kind of a canonical value for error messages.
func kindOf(v any) string {
	_, kind := valueKind(v)
	return kind
}

// valuesEqual compares decoded values; unlike reflect.DeepEqual it treats NaN
// as equal to NaN and compares times by instant.
func valuesEqual(a, b any) bool {
	switch a := a.(type) {
	case float64:
		bf, ok := b.(float64)
		return ok && (a == bf || math.IsNaN(a) && math.IsNaN(bf))
	case time.Time:
		bt, ok := b.(time.Time)
		return ok && a.Equal(bt)
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !valuesEqual(a[i], bl[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bm, ok := b.(map[string]any)
		return ok && mapsEqual(a, bm)
	case map[any]any:
		bm, ok := b.(map[any]any)
		return ok && mapsEqual(a, bm)
	}
	return reflect.DeepEqual(a, b)
}

func mapsEqual[K comparable](a, b map[K]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !valuesEqual(x, y) {
			return false
		}
	}
	return true
}

// sortedKeys returns the keys of m in byte order, which is how new maps are
// written (Go maps have no order).
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// missing lists, in byte order, the members of m that have is without: the keys an edit adds
// to an existing map.
func missing(m map[string]any, have map[string]bool) []kv {
	var add []kv
	for _, k := range sortedKeys(m) {
		if !have[k] {
			add = append(add, kv{k, m[k]})
		}
	}
	return add
}
