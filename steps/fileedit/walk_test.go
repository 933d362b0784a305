package fileedit

import (
	"errors"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The JSON and YAML editors share one walk (walk.go). The same document in
// both formats must therefore give the same outcome for every change: the
// same error, field for field and word for word, or the same decoded result
// and the same changed flag.
func TestWalkSameForJSONAndYAML(t *testing.T) {
	const jsonSrc = `{
  "image": {"tag": "v1"},
  "ports": [80, 443],
  "env": null,
  "meta": {"a": 1, "b": 2},
  "list": [{"x": 1}]
}
`
	const yamlSrc = `image:
  tag: v1
ports: [80, 443]
env: null
meta:
  a: 1
  b: 2
list:
  - x: 1
`
	for _, tc := range []struct {
		name  string
		key   string
		value any
		check func(error) bool // nil: the change must apply
		want  any              // with check nil: the value found at key afterwards
	}{
		{"descend into a string", "image.tag.x", "y", isMismatch("image.tag", "string", "map"), nil},
		{"index a map", "image[0]", "y", isMismatch("image", "map", "list"), nil},
		{"key into a list", "ports.a", "y", isMismatch("ports", "list", "map"), nil},
		{"index the root map", "[0]", "y", isMismatch("the document root", "map", "list"), nil},
		{"index past the end", "ports[5]", int64(1), isErr(ErrIndexOutOfRange), nil},
		{"new list not at 0", "env.a[1]", "x", isErr(ErrIndexOutOfRange), nil},
		{"new list below a new key not at 0", "fresh[2].b", "x", isErr(ErrIndexOutOfRange), nil},
		{"map set to a scalar", "image", "x", isMismatch("image", "map", "string"), nil},
		{"scalar set to a list", "image.tag", []any{"x"}, isMismatch("image.tag", "string", "list"), nil},
		{"list item inside a map value", "list", []any{map[string]any{"x": []any{}}}, isMismatch("list[0].x", "number", "list"), nil},
		{"value that cannot be written", "meta.a", make(chan int), isErr(ErrUnsupportedValue), nil},
		{"append at the length", "ports[2]", int64(8443), nil, int64(8443)},
		{"through null", "env.a[0].b", "c", nil, "c"},
		{"new keys and list", "new.deep[0]", true, nil, true},
		{"scalar in place", "list[0].x", "two", nil, "two"},
		{"map loses a key", "meta", map[string]any{"b": int64(2)}, nil, map[string]any{"b": int64(2)}},
		{"map gains a key", "meta", map[string]any{"a": int64(1), "b": int64(3), "c": "x"}, nil,
			map[string]any{"a": int64(1), "b": int64(3), "c": "x"}},
		{"shorter list", "ports", []any{int64(80)}, nil, []any{int64(80)}},
		{"longer list", "ports", []any{int64(80), int64(443), int64(8080)}, nil, []any{int64(80), int64(443), int64(8080)}},
		{"already set", "image.tag", "v1", nil, "v1"},
		{"map already set", "meta", map[string]any{"a": int64(1), "b": int64(2)}, nil, map[string]any{"a": int64(1), "b": int64(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := []Change{ch(tc.key, tc.value)}
			jOut, jChanged, jErr := Apply(JSON, []byte(jsonSrc), changes, Options{})
			yOut, yChanged, yErr := Apply(YAML, []byte(yamlSrc), changes, Options{})
			if tc.check != nil {
				if !tc.check(jErr) || !tc.check(yErr) {
					t.Fatalf("errors: JSON %v, YAML %v", jErr, yErr)
				}
				if jErr.Error() != yErr.Error() {
					t.Fatalf("messages differ:\nJSON: %v\nYAML: %v", jErr, yErr)
				}
				return
			}
			if jErr != nil || yErr != nil {
				t.Fatalf("errors: JSON %v, YAML %v", jErr, yErr)
			}
			if jChanged != yChanged {
				t.Fatalf("changed: JSON %v, YAML %v", jChanged, yChanged)
			}
			jv, err := decodeJSONValue(jOut)
			if err != nil {
				t.Fatalf("JSON result %q: %v", jOut, err)
			}
			var yv any
			if err := yaml.Unmarshal(yOut, &yv); err != nil {
				t.Fatalf("YAML result %q: %v", yOut, err)
			}
			yv = normalizeDecoded(yv)
			if !valuesEqual(jv, yv) {
				t.Fatalf("results differ:\nJSON: %s\nYAML: %s", jOut, yOut)
			}
			p, err := parsePath(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := lookup(jv, p); !ok || !valuesEqual(got, tc.want) {
				t.Fatalf("%s = %#v (found %v), want %#v\n%s", tc.key, got, ok, tc.want, jOut)
			}
		})
	}
}

// TestWalkErrorsNameTheKey checks that the shared walk's errors stay
// matchable and name the key as given, in both formats.
func TestWalkErrorsNameTheKey(t *testing.T) {
	for _, f := range []Format{JSON, YAML} {
		src := map[Format]string{JSON: `{"a": [1]}`, YAML: "a: [1]\n"}[f]
		_, _, err := Apply(f, []byte(src), []Change{ch(`a[7]`, "x")}, Options{})
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != "a[7]" || !errors.Is(err, ErrIndexOutOfRange) {
			t.Fatalf("%v: err = %v, want a *KeyError for a[7] wrapping ErrIndexOutOfRange", f, err)
		}
		_, _, err = Apply(f, []byte(src), []Change{ch(`a.b`, "x")}, Options{})
		var tm *TypeMismatchError
		if !errors.As(err, &tm) || tm.Key != "a.b" {
			t.Fatalf("%v: err = %v, want a *TypeMismatchError for a.b", f, err)
		}
	}
}
