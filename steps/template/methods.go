package template

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// callSpec describes a method or function: its argument count (max < 0:
// unbounded) and implementation.
type callSpec struct {
	min, max int
	fn       func(st *evalState, recv any, args []any) (any, error)
}

// methods are the Harness (Java-style) string methods, usable as
// x.name(args) inside both delimiters. Indexes count characters (runes).
var methods = map[string]callSpec{
	"split":       {1, 1, mSplit},
	"contains":    {1, 1, mContains},
	"toLowerCase": {0, 0, mLower},
	"toUpperCase": {0, 0, mUpper},
	"startsWith":  {1, 1, mStartsWith},
	"endsWith":    {1, 1, mEndsWith},
	"replace":     {2, 2, mReplace},
	"trim":        {0, 0, mTrim},
	"length":      {0, 0, mLength},
	"equals":      {1, 1, mEquals},
	"substring":   {1, 2, mSubstring},
	"indexOf":     {1, 1, mIndexOf},
	"concat":      {1, 1, mConcat},
}

// methodFunc adapts a method to the call the rewriter emits:
// (state, mode, receiver, displayCall, args...).
func methodFunc(name string, spec callSpec) func(args ...any) (any, error) {
	return func(args ...any) (any, error) {
		st, err := stateOf(args)
		if err != nil {
			return nil, err
		}
		if len(args) < 4 {
			return nil, fmt.Errorf("%s(): internal error: missing receiver", name)
		}
		mode, _ := args[1].(int)
		recv := args[2]
		call, _ := args[3].(string)
		if isNil(recv) {
			if mode != modeStrict {
				return nil, nil
			}
			return nil, fmt.Errorf("%s: receiver %w", call, ErrNil)
		}
		out, err := spec.fn(st, recv, args[4:])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", call, err)
		}
		return out, nil
	}
}

func recvString(recv any) (string, error) {
	switch s := recv.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", fmt.Errorf("receiver is %s, want string", typeName(recv))
}

func argString(args []any, i int) (string, error) {
	if s, ok := args[i].(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("argument %d is %s, want string", i+1, typeName(args[i]))
}

// recvAndArg is the string receiver and the first string argument of a method.
func recvAndArg(recv any, args []any) (string, string, error) {
	s, err := recvString(recv)
	if err != nil {
		return "", "", err
	}
	a, err := argString(args, 0)
	return s, a, err
}

func argInt(args []any, i int) (int, error) {
	if n, ok := toIndex(args[i]); ok {
		return n, nil
	}
	return 0, fmt.Errorf("argument %d is %s, want integer", i+1, typeName(args[i]))
}

// mSplit splits on a literal separator (not a regular expression) and keeps
// empty fields.
func mSplit(st *evalState, recv any, args []any) (any, error) {
	s, sep, err := recvAndArg(recv, args)
	if err != nil {
		return nil, err
	}
	n := utf8.RuneCountInString(s)
	if sep != "" {
		n = strings.Count(s, sep) + 1
	}
	if err := st.reserve(n); err != nil {
		return nil, err
	}
	parts := strings.Split(s, sep)
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// mContains: substring for strings, element for lists, key for maps.
func mContains(st *evalState, recv any, args []any) (any, error) {
	switch r := recv.(type) {
	case string:
		sub, err := argString(args, 0)
		if err != nil {
			return nil, err
		}
		return strings.Contains(r, sub), nil
	case []any:
		i, err := listIndex(st, r, args[0])
		if err != nil {
			return nil, err
		}
		return i >= 0, nil
	case map[string]any:
		k, err := argString(args, 0)
		if err != nil {
			return nil, err
		}
		_, ok := r[k]
		return ok, nil
	}
	return nil, fmt.Errorf("receiver is %s, want string, list or map", typeName(recv))
}

func mLower(st *evalState, recv any, _ []any) (any, error) {
	return mapCase(st, recv, strings.ToLower)
}

func mUpper(st *evalState, recv any, _ []any) (any, error) {
	return mapCase(st, recv, strings.ToUpper)
}

// mapCase is toLowerCase or toUpperCase: the result is as long as the receiver (reserved first).
func mapCase(st *evalState, recv any, to func(string) string) (any, error) {
	s, err := recvString(recv)
	if err != nil {
		return nil, err
	}
	if err := st.reserve(len(s)); err != nil {
		return nil, err
	}
	return to(s), nil
}

func mStartsWith(_ *evalState, recv any, args []any) (any, error) {
	s, p, err := recvAndArg(recv, args)
	if err != nil {
		return nil, err
	}
	return strings.HasPrefix(s, p), nil
}

func mEndsWith(_ *evalState, recv any, args []any) (any, error) {
	s, p, err := recvAndArg(recv, args)
	if err != nil {
		return nil, err
	}
	return strings.HasSuffix(s, p), nil
}

// mReplace replaces every occurrence of a literal string.
func mReplace(st *evalState, recv any, args []any) (any, error) {
	s, old, err := recvAndArg(recv, args)
	if err != nil {
		return nil, err
	}
	repl, err := argString(args, 1)
	if err != nil {
		return nil, err
	}
	return replaceN(st, s, old, repl, -1)
}

// replaceN is strings.Replace with the result size reserved first.
func replaceN(st *evalState, s, old, repl string, n int) (string, error) {
	count := strings.Count(s, old)
	if n >= 0 && n < count {
		count = n
	}
	if grow := len(repl) - len(old); grow > 0 && count > 0 && grow > (st.remaining()-len(s))/count {
		return "", ErrMemoryBudget
	}
	if err := st.reserve(len(s) + count*(len(repl)-len(old))); err != nil {
		return "", err
	}
	return strings.Replace(s, old, repl, n), nil
}

func mTrim(_ *evalState, recv any, _ []any) (any, error) {
	s, err := recvString(recv)
	if err != nil {
		return nil, err
	}
	return strings.TrimSpace(s), nil
}

// mLength: characters of a string, elements of a list or map.
func mLength(_ *evalState, recv any, _ []any) (any, error) {
	switch r := recv.(type) {
	case string:
		return utf8.RuneCountInString(r), nil
	case []any:
		return len(r), nil
	case map[string]any:
		return len(r), nil
	}
	v := reflect.ValueOf(recv)
	switch v.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return v.Len(), nil
	}
	return nil, fmt.Errorf("receiver is %s, want string, list or map", typeName(recv))
}

func mEquals(st *evalState, recv any, args []any) (any, error) {
	return st.equal(recv, args[0], 0)
}

// mSubstring(begin[, end]) follows Java: 0 <= begin <= end <= length, in characters.
func mSubstring(_ *evalState, recv any, args []any) (any, error) {
	s, err := recvString(recv)
	if err != nil {
		return nil, err
	}
	begin, err := argInt(args, 0)
	if err != nil {
		return nil, err
	}
	runes := utf8.RuneCountInString(s)
	end := runes
	if len(args) > 1 {
		if end, err = argInt(args, 1); err != nil {
			return nil, err
		}
	}
	if begin < 0 || end > runes || begin > end {
		return nil, fmt.Errorf("range [%d, %d) out of bounds for length %d", begin, end, runes)
	}
	return string([]rune(s)[begin:end]), nil
}

// mIndexOf: character index of a substring, or list index of an element; -1 if absent.
func mIndexOf(st *evalState, recv any, args []any) (any, error) {
	switch r := recv.(type) {
	case string:
		sub, err := argString(args, 0)
		if err != nil {
			return nil, err
		}
		i := strings.Index(r, sub)
		if i < 0 {
			return -1, nil
		}
		return utf8.RuneCountInString(r[:i]), nil
	case []any:
		i, err := listIndex(st, r, args[0])
		if err != nil {
			return nil, err
		}
		return i, nil
	}
	return nil, fmt.Errorf("receiver is %s, want string or list", typeName(recv))
}

// listIndex is the index of the first element equal to x, or -1.
func listIndex(st *evalState, list []any, x any) (int, error) {
	if err := st.reserve(len(list)); err != nil {
		return 0, err
	}
	for i, e := range list {
		ok, err := st.equal(e, x, 0)
		if err != nil {
			return 0, err
		}
		if ok {
			return i, nil
		}
	}
	return -1, nil
}

func mConcat(st *evalState, recv any, args []any) (any, error) {
	s, t, err := recvAndArg(recv, args)
	if err != nil {
		return nil, err
	}
	if err := st.reserve(len(s) + len(t)); err != nil {
		return nil, err
	}
	return s + t, nil
}

// overrides replace expr builtins whose result can be much larger than their
// input, so the size is checked against the budget before allocating.
var overrides = map[string]callSpec{
	"repeat":  {2, 2, fRepeat},
	"join":    {1, 2, fJoin},
	"replace": {3, 4, fReplace},
	"toJSON":  {1, 1, fToJSON},
	"string":  {1, 1, fString},
	"concat":  {1, -1, fConcat},
	"flatten": {1, 1, fFlatten},
	"uniq":    {1, 1, fUniq},
}

// overrideFunc adapts an override to the call the rewriter emits: (state, args...).
func overrideFunc(name string, spec callSpec) func(args ...any) (any, error) {
	return func(args ...any) (any, error) {
		st, err := stateOf(args)
		if err != nil {
			return nil, err
		}
		out, err := spec.fn(st, nil, args[1:])
		if err != nil {
			return nil, fmt.Errorf("%s(): %w", name, err)
		}
		return out, nil
	}
}

func fRepeat(st *evalState, _ any, args []any) (any, error) {
	s, err := argString(args, 0)
	if err != nil {
		return nil, err
	}
	n, err := argInt(args, 1)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("negative count %d", n)
	}
	if len(s) > 0 && n > st.remaining()/len(s) {
		return nil, ErrMemoryBudget
	}
	if err := st.reserve(len(s) * n); err != nil {
		return nil, err
	}
	return strings.Repeat(s, n), nil
}

func fJoin(st *evalState, _ any, args []any) (any, error) {
	sep := ""
	if len(args) > 1 {
		var err error
		if sep, err = argString(args, 1); err != nil {
			return nil, err
		}
	}
	var elems []string
	switch l := args[0].(type) {
	case []string:
		elems = l
	case []any:
		elems = make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d is %s, want string", i, typeName(e))
			}
			elems[i] = s
		}
	default:
		return nil, fmt.Errorf("argument 1 is %s, want list of strings", typeName(args[0]))
	}
	size := 0
	limit := st.remaining()
	for i, e := range elems {
		size += len(e)
		if i > 0 {
			size += len(sep)
		}
		if size > limit {
			return nil, ErrMemoryBudget
		}
	}
	if err := st.reserve(size); err != nil {
		return nil, err
	}
	return strings.Join(elems, sep), nil
}

func fReplace(st *evalState, _ any, args []any) (any, error) {
	var strs [3]string
	for i := range strs {
		s, err := argString(args, i)
		if err != nil {
			return nil, err
		}
		strs[i] = s
	}
	n := -1
	if len(args) > 3 {
		var err error
		if n, err = argInt(args, 3); err != nil {
			return nil, err
		}
	}
	return replaceN(st, strs[0], strs[1], strs[2], n)
}

// fToJSON encodes compact JSON with sorted keys (expr's own toJSON indents).
func fToJSON(st *evalState, _ any, args []any) (any, error) {
	w := jsonWriter{limit: st.remaining()}
	if err := w.value(args[0], 0); err != nil {
		return nil, err
	}
	if err := st.reserve(len(w.b)); err != nil {
		return nil, err
	}
	return string(w.b), nil
}

// fString formats like mixed text does; nil gives "null".
func fString(st *evalState, _ any, args []any) (any, error) {
	if args[0] == nil {
		return "null", nil
	}
	var b strings.Builder
	if err := appendValue(&b, args[0], uint(st.remaining())); err != nil {
		return nil, err
	}
	if err := st.reserve(b.Len()); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func fConcat(st *evalState, _ any, args []any) (any, error) {
	size := 0
	limit := st.remaining()
	for i, a := range args {
		v := reflect.ValueOf(a)
		if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
			return nil, fmt.Errorf("argument %d is %s, want list", i+1, typeName(a))
		}
		size += v.Len()
		if size > limit {
			return nil, ErrMemoryBudget
		}
	}
	out := make([]any, 0, size)
	for _, a := range args {
		v := reflect.ValueOf(a)
		for i := 0; i < v.Len(); i++ {
			out = append(out, v.Index(i).Interface())
		}
	}
	return out, st.reserveDeep(out)
}

func fFlatten(st *evalState, _ any, args []any) (any, error) {
	v, err := argList(args)
	if err != nil {
		return nil, err
	}
	size, err := flatSize(v, st.remaining(), 0)
	if err != nil {
		return nil, err
	}
	out := flattenInto(make([]any, 0, size), v)
	return out, st.reserveDeep(out)
}

// argList is the first argument, a list of any element type.
func argList(args []any) (reflect.Value, error) {
	v := reflect.ValueOf(args[0])
	if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
		return v, fmt.Errorf("argument 1 is %s, want list", typeName(args[0]))
	}
	return v, nil
}

func isList(v reflect.Value) bool {
	for v.Kind() == reflect.Interface && !v.IsNil() {
		v = v.Elem()
	}
	return v.Kind() == reflect.Slice || v.Kind() == reflect.Array
}

func flatSize(v reflect.Value, limit, depth int) (int, error) {
	if depth > maxFormatDepth {
		return 0, fmt.Errorf("list nested more than %d deep", maxFormatDepth)
	}
	size := 0
	for i := 0; i < v.Len(); i++ {
		e := v.Index(i)
		for e.Kind() == reflect.Interface && !e.IsNil() {
			e = e.Elem()
		}
		if isList(e) {
			n, err := flatSize(e, limit-size, depth+1)
			if err != nil {
				return 0, err
			}
			size += n
		} else {
			size++
		}
		if size > limit {
			return 0, ErrMemoryBudget
		}
	}
	return size, nil
}

func flattenInto(out []any, v reflect.Value) []any {
	for i := 0; i < v.Len(); i++ {
		e := v.Index(i)
		for e.Kind() == reflect.Interface && !e.IsNil() {
			e = e.Elem()
		}
		if isList(e) {
			out = flattenInto(out, e)
		} else {
			out = append(out, e.Interface())
		}
	}
	return out
}

// fUniq keeps the first of equal elements: scalars through a set, other
// values by counted comparisons.
func fUniq(st *evalState, _ any, args []any) (any, error) {
	v, err := argList(args)
	if err != nil {
		return nil, err
	}
	if err := st.reserve(v.Len()); err != nil {
		return nil, err
	}
	seen := map[any]bool{}
	var out, others []any
	for i := 0; i < v.Len(); i++ {
		e := v.Index(i).Interface()
		if k, ok := setKey(e); ok {
			if !seen[k] {
				seen[k] = true
				out = append(out, e)
			}
			continue
		}
		i, err := listIndex(st, others, e)
		if err != nil {
			return nil, err
		}
		if i < 0 {
			others = append(others, e)
			out = append(out, e)
		}
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

// setKey maps scalars that == treats as equal to the same key (1 and 1.0).
func setKey(e any) (any, bool) {
	switch x := e.(type) {
	case nil, string, bool:
		return e, true
	case int:
		return float64(x), true
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return nil, false
}
