package fileedit

import (
	"errors"
	"reflect"
	"testing"
)

// Lookup finds what Apply would replace, and says "not found" exactly where Apply would
// create; bad keys, ambiguous documents and broken files are errors, not "not found".
func TestLookup(t *testing.T) {
	const y = "base: &b\n  timeout: 30\nsvc:\n  <<: *b\n  ports: [80, 443]\n  annotations:\n    a.b/c: \"1\"\n  empty: null\n1: one\n"
	const multi = "kind: Job\nmetadata: {name: m}\nspec: {replicas: 9}\n---\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n"
	for _, tc := range []struct {
		name  string
		f     Format
		src   string
		key   string
		doc   Document
		want  any
		found bool
		err   error
	}{
		{"scalar", YAML, y, "base.timeout", Document{}, int64(30), true, nil},
		{"merged", YAML, y, "svc.timeout", Document{}, int64(30), true, nil},
		{"list item", YAML, y, "svc.ports[1]", Document{}, int64(443), true, nil},
		{"past the list", YAML, y, "svc.ports[2]", Document{}, nil, false, nil},
		{"quoted dotted key", YAML, y, `svc.annotations["a.b/c"]`, Document{}, "1", true, nil},
		{"dotted key split", YAML, y, "svc.annotations.a.b/c", Document{}, nil, false, nil},
		{"null leaf", YAML, y, "svc.empty", Document{}, nil, true, nil},
		{"through null", YAML, y, "svc.empty.x", Document{}, nil, false, nil},
		{"missing", YAML, y, "svc.tga", Document{}, nil, false, nil},
		{"index into map", YAML, y, "svc[0]", Document{}, nil, false, nil},
		{"key into scalar", YAML, y, "base.timeout.x", Document{}, nil, false, nil},
		{"non-string key", YAML, y, "1", Document{}, "one", true, nil},
		{"subtree", YAML, y, "svc.ports", Document{}, []any{int64(80), int64(443)}, true, nil},
		{"empty file", YAML, "", "a", Document{}, nil, false, nil},
		{"document by kind", YAML, multi, "spec.replicas", Document{Kind: "Deployment"}, int64(2), true, nil},
		{"document by index", YAML, multi, "spec.replicas", DocumentAt(0), int64(9), true, nil},
		{"ambiguous", YAML, multi, "spec.replicas", Document{}, nil, false, ErrAmbiguousDocument},
		{"no such document", YAML, multi, "spec.replicas", Document{Kind: "StatefulSet"}, nil, false, ErrNoDocument},
		{"json", JSON, `{"image": {"tag": "1.4.1"}, "n": 2.5, "l": [true]}`, "image.tag", Document{}, "1.4.1", true, nil},
		{"json number", JSON, `{"n": 2.5}`, "n", Document{}, 2.5, true, nil},
		{"json list", JSON, `{"l": [true]}`, "l[0]", Document{}, true, true, nil},
		{"json missing", JSON, `{"l": [true]}`, "m", Document{}, nil, false, nil},
		{"bad key", YAML, y, "a..b", Document{}, nil, false, ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, found, err := Lookup(tc.f, []byte(tc.src), tc.key, tc.doc)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || found != tc.found || !reflect.DeepEqual(v, tc.want) {
				t.Fatalf("Lookup = %#v, %v, %v; want %#v, %v", v, found, err, tc.want, tc.found)
			}
		})
	}
	var se *SyntaxError
	for _, bad := range []struct {
		f   Format
		src string
	}{{YAML, "a: [1\n"}, {JSON, `{"a": `}, {YAML, "a: \xff\n"}} {
		if _, _, err := Lookup(bad.f, []byte(bad.src), "a", Document{}); !errors.As(err, &se) {
			t.Errorf("Lookup(%q) err = %v, want a *SyntaxError", bad.src, err)
		}
	}
}
