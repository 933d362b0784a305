package fileedit

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	idx := func(i int) segment { return segment{index: i, isIndex: true} }
	key := func(k string) segment { return segment{key: k} }
	quoted := func(k string) segment { return segment{key: k, quoted: true} }
	for in, want := range map[string]keyPath{
		"image.tag":                         {key("image"), key("tag")},
		"spec.containers[0].image":          {key("spec"), key("containers"), idx(0), key("image")},
		"a.b[2]":                            {key("a"), key("b"), idx(2)},
		"m[1][0]":                           {key("m"), idx(1), idx(0)},
		"[0].name":                          {idx(0), key("name")},
		`annotations."app.kubernetes.io/n"`: {key("annotations"), quoted("app.kubernetes.io/n")},
		`a."x\"y".b`:                        {key("a"), quoted(`x"y`), key("b")},
		`annotations.app\.kubernetes\.io/n`: {key("annotations"), quoted("app.kubernetes.io/n")},
		"with space.$x-y_z":                 {key("with space"), key("$x-y_z")},
		`""`:                                {quoted("")},
		`a["b.c"]`:                          {key("a"), quoted("b.c")},
		`a["b.c"].d[0]`:                     {key("a"), quoted("b.c"), key("d"), idx(0)},
		`["x"]["y.z"]`:                      {quoted("x"), quoted("y.z")},
		`m["with \"q\""]`:                   {key("m"), quoted(`with "q"`)},
	} {
		got, err := parsePath(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parsePath(%q) = %v, %v; want %v", in, got, err, want)
		}
		if err == nil {
			if again, err := parsePath(got.String()); err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("String() of %q = %q does not parse back", in, got.String())
			}
		}
	}
	for in, msg := range map[string]string{
		"":             "key is empty",
		"a..b":         "empty key segment at offset 2",
		".a":           "empty key segment at offset 0",
		"a.":           "key ends with '.'",
		"a[":           "unclosed '['",
		"a[x]":         "not a number",
		"a[-1]":        "negative indexes are not supported",
		"a[]":          "empty index",
		"a.[0]":        "'[' right after '.'",
		`a."b`:         "unterminated quoted key",
		`a."b"c`:       "want '.' or '['",
		`a["b`:         "unterminated quoted key",
		`a["b"`:        "want ']' after the quoted key",
		`a["b"x]`:      "want ']' after the quoted key",
		`a.["b"]`:      "'[' right after '.'",
		`a["\q"]`:      "bad quoted key segment",
		"a]":           `unexpected ']'`,
		`a\`:           "lone backslash",
		"a[999999999]": "index too large",
		"a\xff":        "not valid UTF-8",
	} {
		_, err := parsePath(in)
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), msg) || ke.Key != in {
			t.Errorf("parsePath(%q) error = %v; want one containing %q", in, err, msg)
		}
	}
}

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		typ, raw string
		want     any
	}{
		{"String", " 3 ", " 3 "},
		{"string", "", ""},
		{"Number", "42", int64(42)},
		{"Number", " -7 ", int64(-7)},
		{"Number", "3.0", int64(3)},
		{"Number", "2.5", 2.5},
		{"Number", "1e3", int64(1000)},
		{"Number", "", nil},
		{"Boolean", "TRUE", true},
		{"Boolean", "false", false},
		{"Boolean", " ", nil},
		{"Raw", `{"a": [1, "x"], "b": null}`, map[string]any{"a": []any{int64(1), "x"}, "b": nil}},
		{"Object", "a: 1\nb: [x]\n", map[string]any{"a": int64(1), "b": []any{"x"}}},
		{"Raw", "'quoted'", "quoted"},
		{"Raw", "", nil},
	} {
		got, err := ParseValue(tc.typ, tc.raw)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseValue(%q, %q) = %#v, %v; want %#v", tc.typ, tc.raw, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ typ, raw, msg string }{
		{"Number", "3 apples", `type Number: "3 apples" is not a decimal number`},
		{"Number", "NaN", "not a decimal number"},
		{"Number", "0x10", "not a decimal number"},
		{"Boolean", "yes", `type Boolean: "yes" is not true or false`},
		{"Raw", "{a: [", "type Raw"},
		{"Raw", "{1: a}", "map keys must be strings"},
		{"Float", "1", `unknown variable type "Float"`},
	} {
		_, err := ParseValue(tc.typ, tc.raw)
		if !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseValue(%q, %q) error = %v; want one containing %q", tc.typ, tc.raw, err, tc.msg)
		}
	}
	if _, err := ParseValue("Secret", "s3cr3t"); !errors.Is(err, ErrSecretValue) || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("Secret: %v", err)
	}
}

func TestCanonical(t *testing.T) {
	type named string
	for _, tc := range []struct {
		in, want any
	}{
		{int32(5), int64(5)},
		{uint8(5), int64(5)},
		{uint64(1) << 63, uint64(1) << 63},
		{float32(2), int64(2)},
		{1.5, 1.5},
		{1e300, 1e300},
		{json.Number("12"), int64(12)},
		{json.Number("1.50"), 1.5},
		{named("x"), "x"},
		{[]string{"a"}, []any{"a"}},
		{map[string]int{"a": 1}, map[string]any{"a": int64(1)}},
		{(*int)(nil), nil},
	} {
		got, err := canonical(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("canonical(%#v) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []any{struct{}{}, map[int]string{1: "a"}, json.Number("1x"), "\xff", func() {}} {
		if _, err := canonical(bad); err == nil {
			t.Errorf("canonical(%T) accepted", bad)
		}
	}
	deep := any("x")
	for range maxValueDepth + 2 {
		deep = []any{deep}
	}
	if _, err := canonical(deep); err == nil {
		t.Error("canonical accepted a value nested too deep")
	}
}

func TestSyntaxErrorMessages(t *testing.T) {
	_, _, err := Apply(YAML, []byte("a: 1\nb: [\n"), []Change{ch("a", "x")}, Options{})
	var se *SyntaxError
	if !errors.As(err, &se) || se.Format != YAML || se.Line == 0 || !strings.HasPrefix(err.Error(), "YAML syntax error at line ") {
		t.Fatalf("YAML syntax error: %#v", err)
	}
}
