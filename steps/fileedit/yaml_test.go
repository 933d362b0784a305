package fileedit

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

type editCase struct {
	name    string
	src     string
	changes []Change
	want    string
}

func ch(key string, v any) Change { return Change{Key: key, Value: v} }

func runEditCases(t *testing.T, f Format, cases []editCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := Apply(f, []byte(tc.src), tc.changes, Options{})
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if string(out) != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s\n(%q)", out, tc.want, out)
			}
			if changed != (tc.src != tc.want) {
				t.Fatalf("changed = %v", changed)
			}
		})
	}
}

// errorCase is one refused change: check and, when set, msg say what the error must be.
type errorCase struct {
	name, src, key string
	value          any
	check          func(error) bool
	msg            string
}

// runErrorCases applies each case's change and wants an error, no output and no change.
func runErrorCases(t *testing.T, f Format, cases []errorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := Apply(f, []byte(tc.src), []Change{ch(tc.key, tc.value)}, Options{})
			if err == nil || out != nil || changed {
				t.Fatalf("Apply = %q, %v, %v; want an error", out, changed, err)
			}
			if !tc.check(err) {
				t.Fatalf("unexpected error %T: %v", err, err)
			}
			if tc.msg != "" && err.Error() != tc.msg {
				t.Fatalf("message %q, want %q", err.Error(), tc.msg)
			}
		})
	}
}

func TestYAMLScalarStyles(t *testing.T) {
	runEditCases(t, YAML, []editCase{
		{"plain stays plain", "tag: v1 # c\n", []Change{ch("tag", "v2")}, "tag: v2 # c\n"},
		{"double stays double and escapes", "tag: \"v1\"\n", []Change{ch("tag", `say "hi"\now`)}, "tag: \"say \\\"hi\\\"\\\\now\"\n"},
		{"double keeps newline escaped", "m: \"a\"\n", []Change{ch("m", "x\ny")}, "m: \"x\\ny\"\n"},
		{"single stays single", "n: 'a'\n", []Change{ch("n", "it's")}, "n: 'it''s'\n"},
		{"single falls back to double for newlines", "n: 'a'\n", []Change{ch("n", "a\nb")}, "n: \"a\\nb\"\n"},
		{"plain bool-like string is quoted", "v: x\n", []Change{ch("v", "true")}, "v: \"true\"\n"},
		{"plain float-like string is quoted", "v: x\n", []Change{ch("v", "1.0")}, "v: \"1.0\"\n"},
		{"YAML 1.1 yes is quoted", "v: x\n", []Change{ch("v", "yes")}, "v: \"yes\"\n"},
		{"null-like string is quoted", "v: x\n", []Change{ch("v", "null")}, "v: \"null\"\n"},
		{"hex-like string is quoted", "v: x\n", []Change{ch("v", "0x1F")}, "v: \"0x1F\"\n"},
		{"octal-like string is quoted", "v: x\n", []Change{ch("v", "0755")}, "v: \"0755\"\n"},
		{"date-like string is quoted", "v: x\n", []Change{ch("v", "2024-01-02")}, "v: \"2024-01-02\"\n"},
		{"empty string is quoted", "v: x\n", []Change{ch("v", "")}, "v: \"\"\n"},
		{"colon space is quoted", "v: x\n", []Change{ch("v", "a: b")}, "v: \"a: b\"\n"},
		{"space hash is quoted", "v: x\n", []Change{ch("v", "a #b")}, "v: \"a #b\"\n"},
		{"indicator start is quoted", "v: x\n", []Change{ch("v", "*ref")}, "v: \"*ref\"\n"},
		{"leading space is quoted", "v: x\n", []Change{ch("v", " x")}, "v: \" x\"\n"},
		{"semver stays plain", "v: 1.2.3\n", []Change{ch("v", "1.2.4")}, "v: 1.2.4\n"},
		{"url stays plain", "v: x\n", []Change{ch("v", "http://a.b:8080/x?y=1#z")}, "v: http://a.b:8080/x?y=1#z\n"},
		{"file quote style is used", "a: 'x'\nb: 'y'\nv: x\n", []Change{ch("v", "on")}, "a: 'x'\nb: 'y'\nv: 'on'\n"},
		{"number over string is plain", "r: \"2\"\n", []Change{ch("r", int64(3))}, "r: 3\n"},
		{"string over number is quoted", "r: 2\n", []Change{ch("r", "3")}, "r: \"3\"\n"},
		{"bool", "e: false # on?\n", []Change{ch("e", true)}, "e: true # on?\n"},
		{"null", "e: x\n", []Change{ch("e", nil)}, "e: null\n"},
		{"float", "f: 1\n", []Change{ch("f", 0.25)}, "f: 0.25\n"},
		{"integral float is an integer", "f: 1\n", []Change{ch("f", 3.0)}, "f: 3\n"},
		{"literal block replaced in place", "s: |\n  a\n  b\nt: 1\n", []Change{ch("s", "x\ny\n")}, "s: |\n  x\n  y\nt: 1\n"},
		{"literal block keeps its indentation", "s: |\n    a\nt: 1\n", []Change{ch("s", "x\ny")}, "s: |-\n    x\n    y\nt: 1\n"},
		{"block header comment kept", "s: | # doc\n  a\nt: 1\n", []Change{ch("s", "b\n")}, "s: | # doc\n  b\nt: 1\n"},
		{"block to number", "s: |\n  a\n\nt: 1\n", []Change{ch("s", int64(5))}, "s: 5\n\nt: 1\n"},
		{"folded one line kept folded", "s: >-\n  long\nt: 1\n", []Change{ch("s", "longer")}, "s: >-\n  longer\nt: 1\n"},
		{"block with leading space gets indicator", "s: |\n  a\n", []Change{ch("s", " x\ny\n")}, "s: |2\n   x\n  y\n"},
		{"multi-line value becomes a literal block", "s: a # c\nt: 1\n", []Change{ch("s", "x\ny\n")}, "s: | # c\n  x\n  y\nt: 1\n"},
		{"multi-line plain scalar replaced", "s: a\n  b\n  c\nt: 1\n", []Change{ch("s", "z")}, "s: z\nt: 1\n"},
		{"tag kept when it fits", "p: !!str 80\n", []Change{ch("p", "81")}, "p: !!str \"81\"\n"},
		{"tag dropped when it does not", "p: !!str 80\n", []Change{ch("p", int64(81))}, "p: 81\n"},
		{"flow scalar", "a: {b: 1, c: x}\n", []Change{ch("a.c", "y, z")}, "a: {b: 1, c: \"y, z\"}\n"},
		{"JSON-style YAML", "{\"a\": {\"b\": \"x\"}}\n", []Change{ch("a.b", "y")}, "{\"a\": {\"b\": \"y\"}}\n"},
		{"inline comment after quoted value", "a: \"x\"  # keep\n", []Change{ch("a", "y")}, "a: \"y\"  # keep\n"},
		{"no trailing newline", "a: 1", []Change{ch("a", int64(2))}, "a: 2"},
		{"CRLF", "a: 1\r\nb: 2\r\n", []Change{ch("a", "x\ny")}, "a: |-\r\n  x\r\n  y\r\nb: 2\r\n"},
		{"unicode", "a: é\n", []Change{ch("a", "日本")}, "a: 日本\n"},
		{"control character escaped", "a: x\n", []Change{ch("a", "bell\a")}, "a: \"bell\\a\"\n"},
	})
}

func TestYAMLCreate(t *testing.T) {
	runEditCases(t, YAML, []editCase{
		{"nested keys with sibling indentation", "a:\n    b: 1\n", []Change{ch("a.c.d", "x")}, "a:\n    b: 1\n    c:\n        d: x\n"},
		{"new top-level key at the end", "a: 1\n# trailing comment\n", []Change{ch("b", int64(2))}, "a: 1\nb: 2\n# trailing comment\n"},
		{"after deeper comment lines", "a:\n  b: 1\n    # about b\n\nc: 2\n", []Change{ch("a.x", int64(1))}, "a:\n  b: 1\n    # about b\n  x: 1\n\nc: 2\n"},
		{"after a block scalar", "a:\n  s: |\n    t\n\nb: 1\n", []Change{ch("a.x", "z")}, "a:\n  s: |\n    t\n  x: z\n\nb: 1\n"},
		{"empty flow map becomes block", "r: {} # none\nx: 1\n", []Change{ch("r.limits.cpu", "1")}, "r: # none\n  limits:\n    cpu: \"1\"\nx: 1\n"},
		{"empty flow list becomes block", "t: []\n", []Change{ch("t[0].key", "k")}, "t:\n  - key: k\n"},
		{"null becomes map", "n:\nx: 1\n", []Change{ch("n.a", "b")}, "n:\n  a: b\nx: 1\n"},
		{"tilde becomes map", "n: ~\n", []Change{ch("n.a", "b")}, "n:\n  a: b\n"},
		{"append to block list", "l:\n- a\n- b # last\nm: 1\n", []Change{ch("l[2]", "c")}, "l:\n- a\n- b # last\n- c\nm: 1\n"},
		{"append keeps sibling quoting", "l:\n  - \"a\"\n", []Change{ch("l[1]", "b")}, "l:\n  - \"a\"\n  - \"b\"\n"},
		{"append map item", "l:\n  - name: a\n    v: 1\n", []Change{ch("l[1]", map[string]any{"name": "b", "v": int64(2)})}, "l:\n  - name: a\n    v: 1\n  - name: b\n    v: 2\n"},
		{"append inside item", "l:\n  - name: a\n", []Change{ch("l[0].v", int64(1))}, "l:\n  - name: a\n    v: 1\n"},
		{"list under missing key", "a: 1\n", []Change{ch("b[0]", "x")}, "a: 1\nb:\n  - x\n"},
		{"non-indented list style is detected", "l:\n- a\n", []Change{ch("m[0]", "x")}, "l:\n- a\nm:\n- x\n"},
		{"flow map single line", "a: {b: 1}\n", []Change{ch("a.c", int64(2))}, "a: {b: 1, c: 2}\n"},
		{"flow map multi line", "a: {\n  b: 1\n}\n", []Change{ch("a.c", int64(2))}, "a: {\n  b: 1,\n  c: 2\n}\n"},
		{"flow list append", "a: [x, y]\n", []Change{ch("a[2]", "z")}, "a: [x, y, z]\n"},
		{"nested map inside flow", "a: {b: 1}\n", []Change{ch("a.c.d", "e")}, "a: {b: 1, c: {d: e}}\n"},
		{"quoted sibling keys", "\"a\": 1\n", []Change{ch("b", int64(2))}, "\"a\": 1\n\"b\": 2\n"},
		{"key needing quotes", "a: 1\n", []Change{ch(`"x: y"`, int64(2))}, "a: 1\n\"x: y\": 2\n"},
		{"dotted key quoted in path", "a:\n  b: 1\n", []Change{ch(`a."c.d"`, int64(2))}, "a:\n  b: 1\n  c.d: 2\n"},
		{"dotted key escaped in path", "a:\n  c.d: 1\n", []Change{ch(`a.c\.d`, int64(2))}, "a:\n  c.d: 2\n"},
		{"EOF without newline", "a:\n  b: 1", []Change{ch("a.c", int64(2))}, "a:\n  b: 1\n  c: 2"},
		{"empty file", "", []Change{ch("a.b", "c")}, "a:\n  b: c\n"},
		{"comment-only file", "# new env\n", []Change{ch("a", "b")}, "# new env\na: b\n"},
		{"root list", "- a\n", []Change{ch("[1]", "b")}, "- a\n- b\n"},
		{"multi-line string in new key", "a: 1\n", []Change{ch("s", "x\ny\n")}, "a: 1\ns: |\n  x\n  y\n"},
		{"map value sorted keys", "a: 1\n", []Change{ch("m", map[string]any{"z": int64(1), "b": []any{"x", map[string]any{"k": "v"}}})}, "a: 1\nm:\n  b:\n    - x\n    - k: v\n  z: 1\n"},
		{"several keys in one map", "a:\n  x: 1\n", []Change{ch("a.y", int64(2)), ch("a.z", int64(3))}, "a:\n  x: 1\n  \"y\": 2\n  z: 3\n"},
	})
}

func TestYAMLSetCollections(t *testing.T) {
	runEditCases(t, YAML, []editCase{
		{"same keys: only changed leaves", "r: # res\n  cpu: 1 # c\n  mem: 2\n", []Change{ch("r", map[string]any{"cpu": int64(1), "mem": int64(3)})}, "r: # res\n  cpu: 1 # c\n  mem: 3\n"},
		{"more keys: appended", "r:\n  cpu: 1\n", []Change{ch("r", map[string]any{"cpu": int64(1), "mem": int64(3)})}, "r:\n  cpu: 1\n  mem: 3\n"},
		{"fewer keys: rewritten", "r: # res\n  cpu: 1\n  mem: 2\nx: 1\n", []Change{ch("r", map[string]any{"cpu": int64(4)})}, "r: # res\n  cpu: 4\nx: 1\n"},
		{"longer list: appended", "l:\n  - a\n", []Change{ch("l", []any{"a", "b"})}, "l:\n  - a\n  - b\n"},
		{"shorter list: rewritten", "l:\n- a\n- b\nx: 1\n", []Change{ch("l", []any{"c"})}, "l:\n- c\nx: 1\n"},
		{"to empty map", "r:\n  cpu: 1\n", []Change{ch("r", map[string]any{})}, "r: {}\n"},
		{"compact item rewritten", "l:\n- a: 1\n  b: 2\n", []Change{ch("l[0]", map[string]any{"c": int64(3)})}, "l:\n- c: 3\n"},
		{"flow list rewritten", "l: [a, b]\n", []Change{ch("l", []any{"c"})}, "l: [c]\n"},
	})
}

func TestYAMLAnchors(t *testing.T) {
	src := "base: &b\n  tag: v1\n  pull: Always\nsvc:\n  <<: *b\n  name: x\nref: *b\n"
	t.Run("editing the anchor moves its aliases", func(t *testing.T) {
		out, _, err := Apply(YAML, []byte(src), []Change{ch("base.tag", "v2")}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != strings.Replace(src, "v1", "v2", 1) {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("inherited leaf gets a local override", func(t *testing.T) {
		out, _, err := Apply(YAML, []byte(src), []Change{ch("svc.tag", "v3")}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Replace(src, "  name: x\n", "  name: x\n  tag: v3\n", 1); string(out) != want {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("inherited leaf with the same value is a no-op", func(t *testing.T) {
		out, changed, err := Apply(YAML, []byte(src), []Change{ch("svc.tag", "v1")}, Options{})
		if err != nil || changed || string(out) != src {
			t.Fatalf("changed=%v err=%v", changed, err)
		}
	})
	for _, tc := range []struct{ name, src, key string }{
		{"through an alias", src, "ref.tag"},
		{"an alias itself", src, "ref"},
		{"through an inherited map", "b: &b\n  m:\n    x: 1\ns:\n  <<: *b\n", "s.m.x"},
		{"replacing a subtree holding a used anchor", "a:\n  x: &p 1\n  y: 2\nb: *p\n", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v any = "v9"
			if tc.key == "a" {
				v = map[string]any{"z": int64(1)}
			}
			_, _, err := Apply(YAML, []byte(tc.src), []Change{ch(tc.key, v)}, Options{})
			var ke *KeyError
			if !errors.Is(err, ErrAlias) || !errors.As(err, &ke) || ke.Key != tc.key {
				t.Fatalf("err = %v, want ErrAlias for %q", err, tc.key)
			}
		})
	}
}

func TestYAMLMultiDocument(t *testing.T) {
	src := "kind: A\nv: 1\n---\nkind: B\nv: 1\n---\nkind: C\nv: 1\n"
	for doc, want := range []string{
		"kind: A\nv: 2\n---\nkind: B\nv: 1\n---\nkind: C\nv: 1\n",
		"kind: A\nv: 1\n---\nkind: B\nv: 2\n---\nkind: C\nv: 1\n",
		"kind: A\nv: 1\n---\nkind: B\nv: 1\n---\nkind: C\nv: 2\n",
	} {
		out, _, err := Apply(YAML, []byte(src), []Change{ch("v", int64(2))}, Options{Document: DocumentAt(doc)})
		if err != nil || string(out) != want {
			t.Fatalf("document %d: %q, %v", doc, out, err)
		}
	}
	out, _, err := Apply(YAML, []byte(src), []Change{ch("w", int64(2))}, Options{Document: DocumentAt(1)})
	if err != nil || string(out) != "kind: A\nv: 1\n---\nkind: B\nv: 1\nw: 2\n---\nkind: C\nv: 1\n" {
		t.Fatalf("insert into the middle document: %q, %v", out, err)
	}
	if _, _, err := Apply(YAML, []byte(src), []Change{ch("v", int64(2))}, Options{Document: DocumentAt(3)}); !errors.Is(err, ErrNoDocument) {
		t.Fatalf("err = %v, want ErrNoDocument", err)
	}
}

func TestYAMLErrors(t *testing.T) {
	runErrorCases(t, YAML, []errorCase{
		{"descend into string", "image:\n  tag: v1\n", "image.tag.x", "y", isMismatch("image.tag", "string", "map"), `key "image.tag.x": image.tag is a string in the file, not a map`},
		{"index a map", "a:\n  b: 1\n", "a[0]", "y", isMismatch("a", "map", "list"), `key "a[0]": a is a map in the file, not a list`},
		{"key into a list", "a: [1]\n", "a.b", "y", isMismatch("a", "list", "map"), ""},
		{"map set to scalar", "a:\n  b: 1\n", "a", "y", isMismatch("a", "map", "string"), ""},
		{"scalar set to map", "a: 1\n", "a", map[string]any{"b": "c"}, isMismatch("a", "number", "map"), ""},
		{"nested value of a map value", "a:\n  b:\n    c: 1\n", "a", map[string]any{"b": "x"}, isMismatch("a.b", "map", "string"), `key "a": a.b is a map in the file, not a string`},
		{"root is a list", "- 1\n", "a", "y", isMismatch("the document root", "list", "map"), ""},
		{"index out of range", "spec:\n  containers: [a, b]\n", "spec.containers[5]", "y", isErr(ErrIndexOutOfRange), `key "spec.containers[5]": index 5 out of range (list has 2 items) at spec.containers[5]; index 2 appends`},
		{"new list must start at 0", "a: 1\n", "b[1]", "y", isErr(ErrIndexOutOfRange), ""},
		{"bad key", "a: 1\n", "a..b", "y", isErr(ErrInvalidKey), ""},
		{"syntax error has a line", "a: 1\nb: [\n", "a", "y", isSyntax(0), ""},
		{"duplicate keys", "a: 1\nb: 2\na: 3\n", "b", "y", isSyntax(3), ""},
		{"tab indentation", "a:\n\tb: 1\n", "a", "y", isSyntax(2), ""},
		{"UTF-16", "\xff\xfea\x00", "a", "y", isSyntax(1), ""},
		{"unsupported value", "a: 1\n", "a", make(chan int), isErr(ErrUnsupportedValue), ""},
		{"invalid UTF-8 value", "a: 1\n", "a", "\xff", isErr(ErrUnsupportedValue), ""},
	})
}

func isMismatch(at, have, want string) func(error) bool {
	return func(err error) bool {
		var tm *TypeMismatchError
		return errors.As(err, &tm) && tm.At == at && tm.Have == have && tm.Want == want
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// isSyntax wants a *SyntaxError, at line (if not 0).
func isSyntax(line int) func(error) bool {
	return func(err error) bool {
		var se *SyntaxError
		return errors.As(err, &se) && (line == 0 && se.Line > 0 || se.Line == line)
	}
}

func TestIdempotent(t *testing.T) {
	src := []byte("image:\n  tag: \"1.0\" # c\nlist: [a]\n")
	out, changed, err := Apply(YAML, src, []Change{ch("image.tag", "1.0"), ch("list[0]", "a"), ch("list", []any{"a"})}, Options{})
	if err != nil || changed || &out[0] != &src[0] {
		t.Fatalf("changed=%v err=%v; want the input slice back", changed, err)
	}
}

func TestIgnoreMissingValues(t *testing.T) {
	src := []byte("a: 1\nb: 2\n")
	changes := []Change{ch("a", nil), ch("b", "  "), ch("c", ""), ch("d", "x")}
	out, _, err := Apply(YAML, src, changes, Options{IgnoreMissingValues: true})
	if err != nil || string(out) != "a: 1\nb: 2\nd: x\n" {
		t.Fatalf("with the option: %q, %v", out, err)
	}
	out, _, err = Apply(YAML, src, changes, Options{})
	if err != nil || string(out) != "a: null\nb: \"  \"\nc: \"\"\nd: x\n" {
		t.Fatalf("without the option: %q, %v", out, err)
	}
}

func TestCreate(t *testing.T) {
	changes := []Change{ch("replicaCount", int64(2)), ch("image.tag", "1.0"), ch("image.repository", "nginx"), ch("env[0].name", "A")}
	y, err := Create(YAML, changes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantY := "replicaCount: 2\nimage:\n  tag: \"1.0\"\n  repository: nginx\nenv:\n  - name: A\n"
	if string(y) != wantY {
		t.Fatalf("YAML:\n%s", y)
	}
	j, err := Create(JSON, changes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantJ := "{\n  \"replicaCount\": 2,\n  \"image\": {\n    \"tag\": \"1.0\",\n    \"repository\": \"nginx\"\n  },\n  \"env\": [\n    {\n      \"name\": \"A\"\n    }\n  ]\n}\n"
	if string(j) != wantJ {
		t.Fatalf("JSON:\n%s", j)
	}
	for _, f := range []Format{YAML, JSON} {
		empty, err := Create(f, []Change{ch("a", nil)}, Options{IgnoreMissingValues: true})
		if err != nil || string(empty) != "{}\n" {
			t.Fatalf("%v with nothing to write: %q, %v", f, empty, err)
		}
	}
	if _, err := Create(YAML, []Change{ch("a[3]", "x")}, Options{}); !errors.Is(err, ErrIndexOutOfRange) {
		t.Fatalf("err = %v", err)
	}
}

func TestFormatFor(t *testing.T) {
	for path, want := range map[string]Format{"a/values.yaml": YAML, "b.YML": YAML, "env/dev/config.json": JSON} {
		if f, err := FormatFor(path); err != nil || f != want {
			t.Errorf("FormatFor(%q) = %v, %v", path, f, err)
		}
	}
	for _, path := range []string{"config.toml", "Makefile", "values.yaml.bak"} {
		_, err := FormatFor(path)
		if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), path) {
			t.Errorf("FormatFor(%q) error = %v", path, err)
		}
	}
	if _, _, err := Apply(Format(9), nil, nil, Options{}); !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("Apply with a bad format: %v", err)
	}
}

// TestYAMLDocumentsUntouched checks byte identity of the other documents
// and of everything around an edit in a larger file.
func TestYAMLDocumentsUntouched(t *testing.T) {
	head := "# header\n---\na: &x 1 # keep\nb: [1, 2]\n"
	tail := "---\n# c\nz: {y: 1}\n...\n"
	src := head + "---\nk: v\n" + tail
	out, _, err := Apply(YAML, []byte(src), []Change{ch("k", "w"), ch("p.m", int64(1))}, Options{Document: DocumentAt(1)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, []byte(head)) || !bytes.HasSuffix(out, []byte(tail)) {
		t.Fatalf("other documents changed: %q", out)
	}
	if !bytes.Contains(out, []byte("---\nk: w\np:\n  m: 1\n---")) {
		t.Fatalf("edited document: %q", out)
	}
}
