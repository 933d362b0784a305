package fileedit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// fuzzValue turns fuzzer input into a Change value of a chosen kind.
func fuzzValue(kind uint8, raw string) any {
	switch kind % 7 {
	case 1:
		v, err := ParseValue(TypeNumber, raw)
		if err != nil || v == nil {
			return int64(len(raw))
		}
		return v
	case 2:
		return len(raw)%2 == 0
	case 3:
		return nil
	case 4:
		v, err := ParseValue(TypeRaw, raw)
		if err != nil {
			return raw
		}
		return v
	case 5:
		return map[string]any{"k": raw, "n": int64(len(raw))}
	case 6:
		return []any{raw, int64(1)}
	}
	return raw
}

// lookup follows p through decoded data.
func lookup(v any, p keyPath) (any, bool) {
	for _, s := range p {
		if s.isIndex {
			l, ok := v.([]any)
			if !ok || s.index >= len(l) {
				return nil, false
			}
			v = l[s.index]
			continue
		}
		switch m := v.(type) {
		case map[string]any:
			x, ok := m[s.key]
			if !ok {
				return nil, false
			}
			v = x
		case map[any]any:
			// Keys such as 0 or true decode to non-string keys; match them
			// by their text as the editor does.
			x, found := m[s.key]
			var resolved any // what the key's text means as a YAML scalar
			_ = yaml.Unmarshal([]byte("k: "+s.key), &resolved)
			if rm, ok := resolved.(map[string]any); ok {
				resolved = normalizeDecoded(rm["k"])
			}
			for k, y := range m {
				if _, isStr := k.(string); !found && !isStr && (fmt.Sprint(k) == s.key || valuesEqual(normalizeDecoded(k), resolved)) {
					x, found = y, true
				}
			}
			if !found {
				return nil, false
			}
			v = x
		default:
			return nil, false
		}
	}
	return v, true
}

// lookupNode follows p through a YAML document by key text (the meaning of
// a key path), not by decoded key values, which can collide ("0", "00").
func lookupNode(n *yaml.Node, p keyPath) *yaml.Node {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	for _, s := range p {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		switch {
		case s.isIndex && n.Kind == yaml.SequenceNode && s.index < len(n.Content):
			n = n.Content[s.index]
		case !s.isIndex && n.Kind == yaml.MappingNode:
			var found *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Tag != "!!merge" && k.Value == s.key {
					found = n.Content[i+1]
				}
			}
			if found == nil {
				return nil
			}
			n = found
		default:
			return nil
		}
	}
	return n
}

func seedFiles(f *testing.F, exts ...string) [][]byte {
	var out [][]byte
	for _, ext := range exts {
		files, _ := filepath.Glob(filepath.Join("testdata", "*", "*"+ext))
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			out = append(out, b)
		}
	}
	return out
}

// checkFuzzResult asserts what must hold for any successful Apply.
func checkFuzzResult(t *testing.T, f Format, src []byte, key string, value any, opts Options) {
	out, changed, err := Apply(f, src, []Change{{Key: key, Value: value}}, opts)
	if err != nil {
		if errors.Is(err, errEditCheck) {
			t.Fatalf("edit check failed: %v\nsrc:\n%q\nkey=%q value=%#v", err, src, key, value)
		}
		return
	}
	if !changed && !bytes.Equal(out, src) {
		t.Fatalf("changed=false but output differs")
	}
	p, _ := parsePath(key)
	want, _ := canonical(value)
	var got any
	switch f {
	case YAML:
		docs, err := decodeYAMLNodes(out)
		if err != nil {
			t.Fatalf("output does not parse: %v\n%q", err, out)
		}
		srcDocs, err := decodeYAMLNodes(src)
		if err != nil {
			t.Fatalf("Apply accepted a source that does not parse: %v", err)
		}
		idx, err := selectDocument(yamlDocInfos(srcDocs), opts.Document)
		if err != nil {
			t.Fatalf("Apply accepted a selector that selects nothing: %v", err)
		}
		if idx >= len(docs) {
			t.Fatalf("document %d missing from output %q", idx, out)
		}
		if _, err := decodeYAMLValue(docs[idx]); err != nil {
			t.Fatalf("output does not decode: %v\n%q", err, out)
		}
		n := lookupNode(docs[idx], p)
		if n == nil {
			t.Fatalf("%q not found in output %q", key, out)
		}
		d, err := decodeYAMLValue(n)
		if err != nil {
			t.Fatal(err)
		}
		got = normalizeDecoded(d)
	case JSON:
		d, err := decodeJSONValue(out)
		if err != nil {
			t.Fatalf("output is not JSON: %v\n%q", err, out)
		}
		got, _ = lookup(d, p)
		orig, err := decodeJSONValue(src)
		if err == nil && !valuesEqual(setAny(orig, p, want), d) {
			t.Fatalf("JSON output changed more than %q:\nsrc %q\nout %q", key, src, out)
		}
	}
	if !valuesEqual(got, want) {
		t.Fatalf("value at %q is %#v, want %#v\nsrc %q\nout %q", key, got, want, src, out)
	}
	// Idempotency: applying the same change again is a no-op.
	again, changed2, err := Apply(f, out, []Change{{Key: key, Value: value}}, opts)
	if err != nil || changed2 || !bytes.Equal(again, out) {
		t.Fatalf("re-apply not a no-op: changed=%v err=%v\nout %q\nagain %q", changed2, err, out, again)
	}
}

// fuzzApply fuzzes Apply on format through checkFuzzResult; sources over 16 KiB and values
// that are not UTF-8 are passed over.
func fuzzApply(f *testing.F, format Format) {
	f.Fuzz(func(t *testing.T, src []byte, key string, kind uint8, raw string) {
		if len(src) > 1<<14 || !utf8.ValidString(raw) {
			return
		}
		checkFuzzResult(t, format, src, key, fuzzValue(kind, raw), Options{})
	})
}

func FuzzApplyYAML(f *testing.F) {
	for _, b := range seedFiles(f, ".yaml") {
		f.Add(b, "image.tag", uint8(0), "v2")
		f.Add(b, "spec.containers[0].image", uint8(0), "nginx:1.27")
		f.Add(b, "new.key[0].x", uint8(5), "x")
	}
	seeds := []string{
		"a: 1\n", "a:\n  b: c # c\n", "- a\n- b\n", "a: {b: 1, c: [x, y]}\n", "a: |\n  x\n  y\nb: 2\n",
		"a: &x\n  b: 1\nc: *x\n", "a: 'q'\nb: \"d\"\n", "a:\r\n  b: 1\r\n", "a: 1\n---\nb: 2\n", "",
		"a:\n- b: 1\n  c: 2\n", "a: >-\n  folded\n  text\n", "a: plain\n  continued\nb: 1", "{a: , b}\n",
		"a: !!str 5\n", "a: ~\n", "a:\n  # only comment\nb: 1\n", "x: [\n  1,\n  2\n]\n",
	}
	for i, s := range seeds {
		f.Add([]byte(s), "a.b", uint8(i), "v")
		f.Add([]byte(s), "a", uint8(i+1), "1.0")
		f.Add([]byte(s), "[1]", uint8(i+2), "multi\nline")
	}
	fuzzApply(f, YAML)
}

func FuzzApplyJSON(f *testing.F) {
	for _, b := range seedFiles(f, ".json") {
		f.Add(b, "image.tag", uint8(0), "v2")
		f.Add(b, "servers[1].port", uint8(1), "8443")
		f.Add(b, "a.b[0]", uint8(4), `{"x": [1, 2]}`)
	}
	seeds := []string{
		"{}", "[]", `{"a":1}`, "{\n  \"a\": [1, 2],\n  \"b\": {}\n}\n", "{\r\n\t\"a\": null\r\n}", `[{"a": "b"}]`,
		"\xEF\xBB\xBF{\"a\": 1}", "", `{"a": 1, "a": 2}`, `{"a": "\u00e9\n"}`,
	}
	for i, s := range seeds {
		f.Add([]byte(s), "a.b", uint8(i), "v")
		f.Add([]byte(s), "[0]", uint8(i+1), "12")
		f.Add([]byte(s), "a", uint8(i+5), "x")
	}
	fuzzApply(f, JSON)
}

// TestFuzzHelpers keeps the helpers honest: lookup must find nested values
// and fail on missing ones, or the fuzz targets would check nothing.
func TestFuzzHelpers(t *testing.T) {
	var v any
	if err := yaml.Unmarshal([]byte("a:\n  b: [x, {c: 1}]\n"), &v); err != nil {
		t.Fatal(err)
	}
	p, _ := parsePath("a.b[1].c")
	if got, ok := lookup(normalizeDecoded(v), p); !ok || got != int64(1) {
		t.Fatalf("lookup = %#v, %v", got, ok)
	}
	p, _ = parsePath("a.b[2]")
	if _, ok := lookup(v, p); ok {
		t.Fatal("lookup found a missing index")
	}
}
