package template

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
)

// Format renders a value the way mixed text does: strings as they are,
// integers (and integral floats) without ".0", bools as true/false, times as
// RFC 3339, lists and maps as compact JSON with sorted keys. nil is an error
// (ErrNil) so that an unresolved value is never written as empty text.
func Format(v any) (string, error) {
	var b strings.Builder
	if err := appendValue(&b, v, DefaultMemoryBudget); err != nil {
		return "", err
	}
	return b.String(), nil
}

// appendValue writes v as text, failing with ErrMemoryBudget if the text
// would exceed limit bytes.
func appendValue(b *strings.Builder, v any, limit uint) error {
	lim := int(min(limit, uint(math.MaxInt32)))
	switch x := v.(type) {
	case nil:
		return fmt.Errorf("%w: the expression produced nil; use ?? to give a default", ErrNil)
	case string:
		b.WriteString(x)
		return nil
	case []byte:
		b.Write(x)
		return nil
	case bool:
		b.WriteString(strconv.FormatBool(x))
		return nil
	case time.Time:
		b.WriteString(x.Format(time.RFC3339Nano))
		return nil
	case time.Duration:
		b.WriteString(x.String())
		return nil
	case json.Number:
		b.WriteString(x.String())
		return nil
	}
	if s, ok := scalar(reflect.ValueOf(v)); ok {
		b.WriteString(s)
		return nil
	}
	w := jsonWriter{limit: lim}
	if err := w.value(v, 0); err != nil {
		return err
	}
	b.Write(w.b)
	return nil
}

// scalar formats numbers (any int, uint or float kind) and strings of named types.
func scalar(v reflect.Value) (string, bool) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10), true
	case reflect.Float32, reflect.Float64:
		return formatFloat(v.Float()), true
	case reflect.String:
		return v.String(), true
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	}
	return "", false
}

// formatFloat writes integral values without a fraction (42, not 42.0 or
// 4.2e+01) and others in the shortest form that round-trips.
func formatFloat(f float64) string {
	if f == 0 {
		return "0"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonWriter encodes values as compact JSON with sorted map keys, bounded in
// size and depth (shared sub-values could otherwise expand exponentially).
type jsonWriter struct {
	b     []byte
	limit int
}

func (w *jsonWriter) check() error {
	if len(w.b) > w.limit {
		return ErrMemoryBudget
	}
	return nil
}

func (w *jsonWriter) value(v any, depth int) error {
	if depth > maxFormatDepth {
		return fmt.Errorf("value nested more than %d deep", maxFormatDepth)
	}
	switch x := v.(type) {
	case nil:
		w.b = append(w.b, "null"...)
	case string:
		w.str(x)
	case bool:
		w.b = strconv.AppendBool(w.b, x)
	case int:
		w.b = strconv.AppendInt(w.b, int64(x), 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("cannot encode %v as JSON", x)
		}
		w.b = append(w.b, formatFloat(x)...)
	case []any:
		w.b = append(w.b, '[')
		for i, e := range x {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			if err := w.value(e, depth+1); err != nil {
				return err
			}
		}
		w.b = append(w.b, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w.b = append(w.b, '{')
		for i, k := range keys {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(k)
			w.b = append(w.b, ':')
			if err := w.value(x[k], depth+1); err != nil {
				return err
			}
		}
		w.b = append(w.b, '}')
	case time.Time:
		w.str(x.Format(time.RFC3339Nano))
	case time.Duration:
		w.str(x.String())
	case json.Number:
		w.b = append(w.b, x.String()...)
	case []byte:
		w.str(string(x))
	default:
		if err := w.reflected(reflect.ValueOf(v), depth); err != nil {
			return err
		}
	}
	return w.check()
}

func (w *jsonWriter) reflected(v reflect.Value, depth int) error {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			w.b = append(w.b, "null"...)
			return nil
		}
		v = v.Elem()
	}
	if s, ok := scalar(v); ok {
		switch v.Kind() {
		case reflect.String:
			w.str(s)
		case reflect.Float32, reflect.Float64:
			if math.IsNaN(v.Float()) || math.IsInf(v.Float(), 0) {
				return fmt.Errorf("cannot encode %v as JSON", v.Float())
			}
			w.b = append(w.b, s...)
		default:
			w.b = append(w.b, s...)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		w.b = append(w.b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			if err := w.value(v.Index(i).Interface(), depth+1); err != nil {
				return err
			}
		}
		w.b = append(w.b, ']')
		return nil
	case reflect.Map:
		type kv struct {
			k string
			v reflect.Value
		}
		entries := make([]kv, 0, v.Len())
		iter := v.MapRange()
		for iter.Next() {
			k, ok := scalar(iter.Key())
			if !ok {
				k = fmt.Sprint(iter.Key().Interface())
			}
			entries = append(entries, kv{k, iter.Value()})
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].k < entries[j].k })
		w.b = append(w.b, '{')
		for i, e := range entries {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(e.k)
			w.b = append(w.b, ':')
			if err := w.value(e.v.Interface(), depth+1); err != nil {
				return err
			}
		}
		w.b = append(w.b, '}')
		return nil
	case reflect.Struct:
		w.b = append(w.b, '{')
		n := 0
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if n > 0 {
				w.b = append(w.b, ',')
			}
			n++
			w.str(f.Name)
			w.b = append(w.b, ':')
			if err := w.value(v.Field(i).Interface(), depth+1); err != nil {
				return err
			}
		}
		w.b = append(w.b, '}')
		return nil
	}
	return fmt.Errorf("cannot format a value of type %s", v.Type())
}

// str appends s as a JSON string (no HTML escaping; invalid UTF-8 becomes U+FFFD).
func (w *jsonWriter) str(s string) {
	const hex = "0123456789abcdef"
	w.b = append(w.b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				w.b = append(w.b, '\\', c)
			case c == '\n':
				w.b = append(w.b, '\\', 'n')
			case c == '\r':
				w.b = append(w.b, '\\', 'r')
			case c == '\t':
				w.b = append(w.b, '\\', 't')
			case c < 0x20:
				w.b = append(w.b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				w.b = append(w.b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			w.b = append(w.b, `\ufffd`...)
		} else {
			w.b = append(w.b, s[i:i+size]...)
		}
		i += size
	}
	w.b = append(w.b, '"')
}
