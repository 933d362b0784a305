package fileedit

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestJSONEdits(t *testing.T) { runEditCases(t, JSON, jsonEditCases) }

// jsonEditCases is the JSON edit corpus (TestJSONEdits; docs/plumbing.md compares tidwall/sjson on it).
var jsonEditCases = []editCase{
	{"replace keeps layout", "{\n  \"a\": \"x\",  \n  \"b\": 1\n}\n", []Change{ch("a", "y")}, "{\n  \"a\": \"y\",  \n  \"b\": 1\n}\n"},
	{"compact file stays compact", `{"a":1,"b":{"c":2}}`, []Change{ch("b.d", "x"), ch("e", []any{int64(1)})}, `{"a":1,"b":{"c":2,"d":"x"},"e":[1]}`},
	{"spaced compact file", `{"a": 1, "b": 2}`, []Change{ch("c", int64(3))}, `{"a": 1, "b": 2, "c": 3}`},
	{"four spaces", "{\n    \"a\": {\n        \"b\": 1\n    }\n}", []Change{ch("a.c.d", true)}, "{\n    \"a\": {\n        \"b\": 1,\n        \"c\": {\n            \"d\": true\n        }\n    }\n}"},
	{"tabs", "{\n\t\"a\": []\n}\n", []Change{ch("a[0]", map[string]any{"k": "v"})}, "{\n\t\"a\": [\n\t\t{\n\t\t\t\"k\": \"v\"\n\t\t}\n\t]\n}\n"},
	{"one-line array in pretty file", "{\n  \"l\": [1, 2]\n}\n", []Change{ch("l[2]", int64(3))}, "{\n  \"l\": [1, 2, 3]\n}\n"},
	{"multi-line array", "{\n  \"l\": [\n    1\n  ]\n}\n", []Change{ch("l[1]", int64(2))}, "{\n  \"l\": [\n    1,\n    2\n  ]\n}\n"},
	{"null becomes object", "{\"a\": null}", []Change{ch("a.b", "c")}, `{"a": {"b": "c"}}`},
	{"string escapes", `{"a": ""}`, []Change{ch("a", "<\"\n\u2028>")}, `{"a": "<\"\n\u2028>"}`},
	{"type change", `{"a": "1"}`, []Change{ch("a", int64(1))}, `{"a": 1}`},
	{"duplicate keys: last wins", `{"a": 1, "a": 2}`, []Change{ch("a", int64(3))}, `{"a": 1, "a": 3}`},
	{"BOM kept", "\xEF\xBB\xBF{\"a\": 1}", []Change{ch("a", int64(2))}, "\xEF\xBB\xBF{\"a\": 2}"},
	{"CRLF", "{\r\n  \"a\": 1\r\n}\r\n", []Change{ch("b", int64(2))}, "{\r\n  \"a\": 1,\r\n  \"b\": 2\r\n}\r\n"},
	{"root array", "[1]", []Change{ch("[1]", "x")}, `[1, "x"]`},
	{"empty file", "", []Change{ch("a", "b")}, "{\n  \"a\": \"b\"\n}\n"},
	{"numbers equal across forms", `{"a": 1.0, "b": 1e2}`, []Change{ch("a", int64(1)), ch("b", 100.0)}, `{"a": 1.0, "b": 1e2}`},
	{"shorter array rewritten", "{\n  \"l\": [1, 2]\n}", []Change{ch("l", []any{int64(3)})}, "{\n  \"l\": [\n    3\n  ]\n}"},
	{"fewer keys rewritten", `{"m": {"a": 1, "b": 2}}`, []Change{ch("m", map[string]any{"b": int64(2)})}, `{"m": {"b": 2}}`},
	{"big and small numbers", `{"a": 0}`, []Change{ch("a", json.Number("18446744073709551615")), ch("b", 1e-7)}, `{"a": 18446744073709551615, "b": 1e-07}`},
}

func TestJSONErrors(t *testing.T) {
	runErrorCases(t, JSON, []errorCase{
		{"missing colon", "{\n  \"a\" 1\n}", "a", "x", isSyntaxAt(2, 7), `JSON syntax error at line 2, column 7: unexpected '1', want ':' after key "a"`},
		{"trailing comma", "{\"a\": 1,}", "a", "x", isSyntaxAt(1, 9), ""},
		{"two values", "{} {}", "a", "x", isSyntaxAt(1, 4), ""},
		{"bad number", "{\"a\": 01}", "a", "x", isSyntaxAt(1, 7), ""},
		{"control char", "{\"a\": \"\x01\"}", "a", "x", isSyntaxAt(1, 8), ""},
		{"unclosed", "[1, 2", "a", "x", isSyntaxAt(1, 6), ""},
		{"descend into number", `{"a": 1}`, "a.b", "x", isMismatch("a", "number", "map"), `key "a.b": a is a number in the file, not a map`},
		{"index an object", `{"a": {}}`, "a[0]", "x", isMismatch("a", "map", "list"), ""},
		{"object to scalar", `{"a": {}}`, "a", "x", isMismatch("a", "map", "string"), ""},
		{"nested value of a map value", `{"a": {"b": [1]}}`, "a", map[string]any{"b": map[string]any{}}, isMismatch("a.b", "list", "map"), ""},
		{"out of range", `{"a": [1]}`, "a[3]", "x", isErr(ErrIndexOutOfRange), ""},
		{"NaN", `{"a": 1}`, "a", math.NaN(), isErr(ErrUnsupportedValue), ""},
	})
}

func isSyntaxAt(line, col int) func(error) bool {
	return func(err error) bool {
		var se *SyntaxError
		return errors.As(err, &se) && se.Format == JSON && se.Line == line && se.Column == col
	}
}
