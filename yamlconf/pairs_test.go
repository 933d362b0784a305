package yamlconf_test

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/yamlconf"
)

type filter struct {
	Provider string           `yaml:"provider"`
	Branches yamlconf.Strings `yaml:"branches" want:"a list of branch globs"`
}

type rule struct {
	filter `yaml:",inline"`
	Labels yamlconf.Strings `yaml:"labels"`
}

type ordered struct {
	Vars  yamlconf.Pairs[string] `yaml:"vars" want:"a mapping of name: value"`
	Rules []rule                 `yaml:"rules"`
}

// Pairs keep a mapping's order and refuse a key given twice; Strings take one string or a
// list and refuse null; an inline struct's fields are the outer struct's own.
func TestPairsStringsInline(t *testing.T) {
	var v ordered
	src := "vars: {b: 1, a: two}\nrules:\n  - {provider: github, branches: main, labels: [x, y]}\n"
	if _, err := yamlconf.Load("c.yaml", []byte(src), &v, "vars"); err != nil {
		t.Fatal(err)
	}
	if len(v.Vars) != 2 || v.Vars[0].Key != "b" || v.Vars[0].Value != "1" || v.Vars[1].Key != "a" || v.Vars[1].KeyNode.Line != 1 {
		t.Errorf("vars: %+v", v.Vars)
	}
	if r := v.Rules[0]; r.Provider != "github" || len(r.Branches) != 1 || r.Branches[0] != "main" || len(r.Labels) != 2 {
		t.Errorf("rule: %+v", r)
	}
	for _, tc := range []struct{ src, want string }{
		{"vars: {a: 1, a: 2}\n", "c.yaml:1:14: vars.a: set twice (first at line 1)"},
		{"vars: [a]\n", `c.yaml:1:7: vars: want a mapping of name: value, got a list`},
		{"vars: {a: [x]}\n", `c.yaml:1:11: vars.a: want a string, got a list`},
		{"rules: [{branches: ~}]\n", "c.yaml:1:20: rules[0].branches: want a list of branch globs, got null"},
		{"rules: [{branches: [main, ~]}]\n", "c.yaml:1:27: rules[0].branches[1]: want a string, got null"},
		{"rules: [{labels: {a: b}}]\n", "c.yaml:1:18: rules[0].labels: want a string or a list of strings, got a mapping"},
		{"rules: [{provder: x}]\n", `c.yaml:1:10: rules[0].provder: unknown field (did you mean "provider"?); known fields: provider, branches, labels`},
	} {
		var v ordered
		_, err := yamlconf.Load("c.yaml", []byte(tc.src), &v, "vars")
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\ngot  %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// A file type can word unknown keys its own way.
func TestUnknownFieldOption(t *testing.T) {
	var v ordered
	_, err := yamlconf.Load("c.yaml", []byte("rulez: []\n"), &v, "rules", yamlconf.UnknownField(func(key string, known []string) string {
		return key + " is not one of " + strings.Join(known, "|")
	}))
	if want := "c.yaml:1:1: rulez: rulez is not one of vars|rules"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// Schema violations are added only where nothing was reported at the field, inside it or
// around it (the field of an anyOf for its branches); a type mismatch is worded as Decode
// words it, and a scalar where a string is wanted is taken as its text.
func TestAddUnrelated(t *testing.T) {
	s := compileSchema(t, `{
		"type": "object",
		"properties": {
			"name": {"type": "string"},
			"when": {"anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": false, "properties": {"x": {"type": "integer"}}}]},
			"size": {"type": "integer"},
			"other": {"type": "boolean"}}}`)
	d, err := yamlconf.Parse("c.yaml", []byte("name: 5\nwhen: {x: a, y: 1}\nsize: ~\nother: ~\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := d.Violations(s)
	if d.Err() != nil {
		t.Fatalf("Violations recorded: %v", d.Err())
	}
	d.Errorf("when.x", "the decode's own complaint") // at the top: nothing was decoded
	d.Errorf("size", "the decode's own complaint")
	d.AddUnrelated(v)
	want := strings.Join([]string{
		"c.yaml:1:1: when.x: the decode's own complaint",
		"c.yaml:1:1: size: the decode's own complaint",
		"c.yaml:4:8: other: want true or false, got null",
	}, "\n")
	if got := d.Err(); got == nil || got.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", got, want)
	}
}

// A file whose aliases expand past the limit is refused before anything walks it.
func TestBounded(t *testing.T) {
	src := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 7 {
		name := "b" + itoa(i)
		src += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
		prev = name
	}
	d, err := yamlconf.Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if d.Bounded() || d.Err() == nil || !strings.Contains(d.Err().Error(), "c.yaml:1:1: the file expands to more than") {
		t.Fatalf("alias bomb not refused: %v", d.Err())
	}
	small, _ := yamlconf.Parse("c.yaml", []byte("a: &a [x]\nb: [*a, *a]\n"))
	if !small.Bounded() || small.Err() != nil {
		t.Fatalf("small file refused: %v", small.Err())
	}
}
