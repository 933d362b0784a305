package template

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

const (
	maxListedKeys   = 20 // keys listed in a missing-key error
	ctxCheckEvery   = 64 // lookups between context checks
	maxFormatDepth  = 100
	nilDisplayValue = "value"
)

// evalState is passed to the VM as its env: the rewritten program reads
// variables only through it, and the template functions use it to account
// memory and to see the context.
type evalState struct {
	ctx    context.Context
	root   map[string]any
	budget uint
	used   uint
	calls  uint
}

// reserve counts n units against the budget before they are allocated.
func (s *evalState) reserve(n int) error {
	if n < 0 || uint(n) > s.budget-s.used {
		s.used = s.budget
		return ErrMemoryBudget
	}
	s.used += uint(n)
	return nil
}

// remaining is how many units may still be allocated.
func (s *evalState) remaining() int {
	r := s.budget - s.used
	if r > uint(^uint(0)>>1) {
		return int(^uint(0) >> 1)
	}
	return int(r)
}

func (s *evalState) tick() error {
	s.calls++
	if s.calls%ctxCheckEvery == 0 && s.ctx != nil {
		return s.ctx.Err()
	}
	return nil
}

func stateOf(args []any) (*evalState, error) {
	if len(args) > 0 {
		if st, ok := args[0].(*evalState); ok {
			return st, nil
		}
	}
	return nil, errors.New("template: internal error: evaluation state missing")
}

// internalFuncs are the functions the rewriter inserts calls to.
var internalFuncs = buildInternalFuncs()

func buildInternalFuncs() map[string]*builtin.Function {
	fns := map[string]*builtin.Function{
		fnPath:   {Name: fnPath, Func: lookupPath},
		fnAdd:    {Name: fnAdd, Func: add},
		fnAcct:   {Name: fnAcct, Func: acct},
		fnIter:   {Name: fnIter, Func: iter},
		fnWalk:   {Name: fnWalk, Func: walk},
		fnEq:     {Name: fnEq, Func: eq},
		fnIn:     {Name: fnIn, Func: in},
		fnStatus: {Name: fnStatus, Func: status},
	}
	for name, spec := range methods {
		fns[fnMethodPrefix+name] = &builtin.Function{Name: fnMethodPrefix + name, Func: methodFunc(name, spec)}
	}
	for name, spec := range overrides {
		fns[fnOverridePrefix+name] = &builtin.Function{Name: fnOverridePrefix + name, Func: overrideFunc(name, spec)}
	}
	return fns
}

// status(state, name) answers success(), failure(), cancelled() and always() from the map
// the caller put under StatusKey.
func status(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	name, _ := args[1].(string)
	if name == "always" {
		return true, nil
	}
	m, ok := st.root[StatusKey].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s() is only available in a stage's or step's when", name)
	}
	b, _ := m[name].(bool)
	return b, nil
}

// missingError is a strict lookup of something that does not exist.
type missingError struct {
	path string // full display path of the lookup
	what string
}

func (e *missingError) Error() string { return e.path + ": " + e.what }
func (e *missingError) Unwrap() error { return ErrMissing }

// lookupPath(state, modes, prefix, base, keys...) reads base[k1][k2]...; a
// base of the state itself means the first key names a variable.
func lookupPath(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	if err := st.tick(); err != nil {
		return nil, err
	}
	if len(args) <= argPathKeys {
		return nil, errors.New("template: internal error: empty path")
	}
	modes, _ := args[argPathModes].(string)
	prefix, _ := args[argPathPrefix].(string)
	cur, keys := args[argPathBase], args[argPathKeys:]
	if len(modes) != len(keys) {
		return nil, errors.New("template: internal error: path modes")
	}
	i := 0
	if cur == any(st) {
		name, _ := keys[0].(string)
		v, ok := st.root[name]
		if !ok {
			if modes[0] == modeOptional {
				return nil, nil
			}
			return nil, &missingError{path: name, what: fmt.Sprintf("no variable %q (have: %s)", name, listKeys(mapKeys(st.root)))}
		}
		cur, prefix, i = v, "", 1
	}
	for ; i < len(keys); i++ {
		mode := modes[i]
		if isNil(cur) {
			if mode != modeStrict {
				return nil, nil
			}
			at := pathOf(prefix, keys[:i])
			return nil, &missingError{path: joinPath(at, keys[i]), what: at + " is nil"}
		}
		v, found, err := fetch(cur, keys[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", joinPath(pathOf(prefix, keys[:i]), keys[i]), err)
		}
		if !found {
			if mode == modeOptional {
				return nil, nil
			}
			return nil, &missingError{path: joinPath(pathOf(prefix, keys[:i]), keys[i]), what: notFound(cur, keys[i])}
		}
		cur = v
	}
	return cur, nil
}

// pathOf renders prefix followed by keys for error messages.
func pathOf(prefix string, keys []any) string {
	path := prefix
	for _, k := range keys {
		if path == "" {
			path = fmt.Sprint(k)
			continue
		}
		path = joinPath(path, k)
	}
	if path == "" {
		return nilDisplayValue
	}
	return path
}

// fetch reads obj[key] without calling methods. found is false when the key,
// index or field does not exist or obj is nil; err reports type misuse.
func fetch(obj, key any) (any, bool, error) {
	switch o := obj.(type) {
	case nil:
		return nil, false, nil
	case map[string]any:
		k, ok := key.(string)
		if !ok {
			return nil, false, fmt.Errorf("map key must be a string, got %s", typeName(key))
		}
		v, ok := o[k]
		return v, ok, nil
	case []any:
		i, ok := toIndex(key)
		if !ok {
			return nil, false, fmt.Errorf("list index must be an integer, got %s", typeName(key))
		}
		if i < 0 {
			i += len(o)
		}
		if i < 0 || i >= len(o) {
			return nil, false, nil
		}
		return o[i], true, nil
	}
	v := reflect.ValueOf(obj)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil, false, nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Map:
		kv := reflect.ValueOf(key)
		kt := v.Type().Key()
		if !kv.IsValid() {
			return nil, false, errors.New("map key is nil")
		}
		if !kv.Type().AssignableTo(kt) {
			if !kv.Type().ConvertibleTo(kt) || kv.Kind() != kt.Kind() {
				return nil, false, fmt.Errorf("cannot use %s as a key of %s", typeName(key), v.Type())
			}
			kv = kv.Convert(kt)
		}
		r := v.MapIndex(kv)
		if !r.IsValid() {
			return nil, false, nil
		}
		return r.Interface(), true, nil
	case reflect.Slice, reflect.Array:
		i, ok := toIndex(key)
		if !ok {
			return nil, false, fmt.Errorf("list index must be an integer, got %s", typeName(key))
		}
		if i < 0 {
			i += v.Len()
		}
		if i < 0 || i >= v.Len() {
			return nil, false, nil
		}
		return v.Index(i).Interface(), true, nil
	case reflect.Struct:
		k, ok := key.(string)
		if !ok {
			return nil, false, fmt.Errorf("field name must be a string, got %s", typeName(key))
		}
		f, ok := v.Type().FieldByName(k)
		if !ok || !f.IsExported() {
			return nil, false, nil
		}
		return v.FieldByIndex(f.Index).Interface(), true, nil
	}
	return nil, false, fmt.Errorf("cannot read %s from a %s", describeKey(key), typeName(obj))
}

func notFound(obj, key any) string {
	switch o := obj.(type) {
	case map[string]any:
		return fmt.Sprintf("no key %q (have: %s)", key, listKeys(mapKeys(o)))
	case []any:
		return fmt.Sprintf("index %v out of range (length %d)", key, len(o))
	}
	v := reflect.ValueOf(obj)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, fmt.Sprint(k.Interface()))
		}
		sort.Strings(keys)
		return fmt.Sprintf("no key %s (have: %s)", describeKey(key), listKeys(keys))
	case reflect.Slice, reflect.Array:
		return fmt.Sprintf("index %v out of range (length %d)", key, v.Len())
	case reflect.Struct:
		var keys []string
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() {
				keys = append(keys, f.Name)
			}
		}
		return fmt.Sprintf("no field %s (have: %s)", describeKey(key), listKeys(keys))
	}
	return "not found"
}

func describeKey(key any) string {
	if s, ok := key.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(key)
}

func mapKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func listKeys(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	if len(keys) > maxListedKeys {
		return strings.Join(keys[:maxListedKeys], ", ") + fmt.Sprintf(", ... %d more", len(keys)-maxListedKeys)
	}
	return strings.Join(keys, ", ")
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// toIndex converts an integer-valued key (any int kind, or an integral float
// as decoded from JSON) to an int.
func toIndex(key any) (int, bool) {
	switch k := key.(type) {
	case int:
		return k, true
	case float64:
		if k == float64(int(k)) {
			return int(k), true
		}
		return 0, false
	}
	v := reflect.ValueOf(key)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() > uint64(^uint(0)>>1) {
			return 0, false
		}
		return int(v.Uint()), true
	case reflect.Float32:
		f := v.Float()
		if f == float64(int(f)) {
			return int(f), true
		}
	}
	return 0, false
}

// add(state, a, b) is expr's + with string concatenation counted against the budget.
func add(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	a, b := args[1], args[2]
	if sa, ok := a.(string); ok {
		if sb, ok := b.(string); ok {
			if err := st.reserve(len(sa) + len(sb)); err != nil {
				return nil, err
			}
			return sa + sb, nil
		}
	}
	return runtimeAdd(a, b)
}

func runtimeAdd(a, b any) (any, error) {
	return unpanic(func() any { return runtime.Add(a, b) })
}

// unpanic runs one of expr's runtime operations, which panic on operands they do not
// take, and returns the panic as an error.
func unpanic(op func() any) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return op(), nil
}

// acct(state, value) counts the deep size of a value built by a builtin, a
// literal or a caller's function against the budget.
func acct(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	v := args[1]
	if s, ok := v.(string); ok {
		return v, st.reserve(len(s))
	}
	if err := st.reserveDeep(v); err != nil {
		return nil, err
	}
	return v, nil
}

// iter(state, collection) counts the iterations of a predicate builtin.
func iter(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	if err := st.tick(); err != nil {
		return nil, err
	}
	v := args[1]
	n := 0
	switch x := v.(type) {
	case []any:
		n = len(x)
	case nil:
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Slice, reflect.Array, reflect.Map, reflect.String:
			n = rv.Len()
		}
	}
	return v, st.reserve(n)
}

// walk(state, value) counts a full traversal of value (max, min, mean and
// median descend into nested lists).
func walk(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	return args[1], st.reserveDeep(args[1])
}

// eq(state, a, b) is == with the comparison of lists and maps counted.
func eq(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	return st.equal(args[1], args[2], 0)
}

// in(state, needle, haystack) is expr's "in" with list scans counted.
func in(args ...any) (any, error) {
	st, err := stateOf(args)
	if err != nil {
		return nil, err
	}
	needle, hay := args[1], args[2]
	switch h := hay.(type) {
	case []any:
		if err := st.reserve(len(h)); err != nil {
			return nil, err
		}
		for _, e := range h {
			ok, err := st.equal(e, needle, 0)
			if err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	case map[string]any:
		k, ok := needle.(string)
		if !ok {
			return nil, fmt.Errorf("cannot check whether %s is in a map: keys are strings", typeName(needle))
		}
		_, found := h[k]
		return found, nil
	}
	if rv := reflect.ValueOf(hay); rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array {
		if err := st.reserve(rv.Len()); err != nil {
			return nil, err
		}
	}
	return runtimeIn(needle, hay)
}

func runtimeIn(needle, hay any) (any, error) {
	return unpanic(func() any { return runtime.In(needle, hay) })
}

// equal compares like expr's == (numbers across types, lists and maps by
// content), counting every list element and map entry visited.
func (s *evalState) equal(a, b any, depth int) (bool, error) {
	if depth > maxFormatDepth {
		return false, fmt.Errorf("value nested more than %d deep", maxFormatDepth)
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok {
			break
		}
		if len(x) != len(y) {
			return false, nil
		}
		if err := s.reserve(len(x)); err != nil {
			return false, err
		}
		for i := range x {
			if ok, err := s.equal(x[i], y[i], depth+1); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		if len(x) != len(y) {
			return false, nil
		}
		if err := s.reserve(len(x)); err != nil {
			return false, err
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok {
				return false, nil
			}
			if ok, err := s.equal(xv, yv, depth+1); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if err := s.tick(); err != nil {
		return false, err
	}
	return runtimeEqual(a, b), nil
}

func runtimeEqual(a, b any) (out bool) {
	defer func() {
		if r := recover(); r != nil {
			out = false
		}
	}()
	return runtime.Equal(a, b)
}

// reserveDeep counts the list elements and map entries of v, recursively,
// against the budget. It stops as soon as the budget is exceeded, so the
// walk costs no more than what it counts.
func (s *evalState) reserveDeep(v any) error {
	n, err := deepSize(v, s.remaining(), 0)
	if err != nil {
		s.used = s.budget
		return err
	}
	return s.reserve(n)
}

func deepSize(v any, limit, depth int) (int, error) {
	if depth > maxFormatDepth {
		return 0, fmt.Errorf("value nested more than %d deep", maxFormatDepth)
	}
	n := 0
	// sum counts the count elements (or entries) that elems yields, and what they hold.
	sum := func(count int, elems func(yield func(any) bool)) (int, error) {
		if count > limit {
			return 0, ErrMemoryBudget
		}
		for e := range elems {
			n++
			if !isScalar(e) {
				m, err := deepSize(e, limit-n, depth+1)
				if err != nil {
					return 0, err
				}
				n += m
			}
			if n > limit {
				return 0, ErrMemoryBudget
			}
		}
		return n, nil
	}
	switch x := v.(type) {
	case nil, string, bool, int, float64:
		return 0, nil
	case []any:
		return sum(len(x), slices.Values(x))
	case map[string]any:
		return sum(len(x), maps.Values(x))
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		return sum(rv.Len(), func(yield func(any) bool) {
			for i := 0; i < rv.Len() && yield(rv.Index(i).Interface()); i++ {
			}
		})
	case reflect.Map:
		return sum(rv.Len(), func(yield func(any) bool) {
			for it := rv.MapRange(); it.Next() && yield(it.Value().Interface()); {
			}
		})
	}
	return n, nil
}

func isScalar(v any) bool {
	switch v.(type) {
	case nil, string, bool, int, float64, int64, float32, int32:
		return true
	}
	return false
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case string:
		return "string"
	case bool:
		return "bool"
	case int, int64, int32:
		return "int"
	case float64, float32:
		return "float"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	}
	return reflect.TypeOf(v).String()
}
