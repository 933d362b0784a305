package ui

import (
	"strings"
	"testing"
)

// An output value's lists and objects: empty ones say "none", ones nested deeper than maxDepth
// say how much they hold, the others are shown in full (an object's keys sorted).
func TestValueInEmptyAndDeep(t *testing.T) {
	const (
		obj, objEnd   = `<dl class="obj"><dt>k</dt><dd>`, `</dd></dl>`
		list, listEnd = `<ul class="val"><li>`, `</li></ul>`
	)
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"empty list", []any{}, `<span class="muted">none</span>`},
		{"empty object", map[string]any{}, `<span class="muted">none</span>`},
		{"list", []any{"a", "b"}, `<ul class="val"><li>a</li><li>b</li></ul>`},
		{"object", map[string]any{"y": "2", "x": "1"}, `<dl class="obj"><dt>x</dt><dd>1</dd><dt>y</dt><dd>2</dd></dl>`},
		{"objects at the deepest shown", nest(maxDepth, func(v any) any { return map[string]any{"k": v} }),
			strings.Repeat(obj, maxDepth) + "leaf" + strings.Repeat(objEnd, maxDepth)},
		{"objects too deep", nest(maxDepth+1, func(v any) any { return map[string]any{"k": v} }),
			strings.Repeat(obj, maxDepth) + `<span class="muted">(1 keys)</span>` + strings.Repeat(objEnd, maxDepth)},
		{"lists too deep", nest(maxDepth+1, func(v any) any { return []any{v} }),
			strings.Repeat(list, maxDepth) + `<span class="muted">(1 items)</span>` + strings.Repeat(listEnd, maxDepth)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(valueIn("", "k", tc.v)); got != tc.want {
				t.Fatalf("valueIn =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// nest wraps "leaf" n times in wrap.
func nest(n int, wrap func(any) any) any {
	v := any("leaf")
	for range n {
		v = wrap(v)
	}
	return v
}
