package yamlconf_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/prflow/prflow/yamlconf"
)

type auth struct {
	Token    string `yaml:"token"`
	Username string `yaml:"username"`
}

type entry struct {
	Name     string            `yaml:"name"`
	BaseURL  string            `yaml:"baseURL"`
	Insecure bool              `yaml:"insecureSkipVerify"`
	RPS      float64           `yaml:"rps"`
	Burst    int               `yaml:"burst"`
	Port     uint16            `yaml:"port"`
	Timeout  time.Duration     `yaml:"timeout"`
	Auth     *auth             `yaml:"auth"`
	Labels   map[string]string `yaml:"labels"`
	Groups   []string          `yaml:"groups" want:"a list of group names"`
	Extra    any               `yaml:"extra"`
	Internal string            `yaml:"-"`
}

type file struct {
	Entries []entry `yaml:"entries"`
}

type tree struct {
	Name string `yaml:"name"`
	Kids []tree `yaml:"kids"`
}

// Each mistake is reported once, at its own line and column, with the field's path and
// what is wrong; a file with several mistakes reports them all, in file order.
func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // the whole error, one line per problem
	}{
		{"unknown key with a hint", "entries:\n  - name: a\n    baseUrl: x\n",
			[]string{`c.yaml:3:5: entries[0].baseUrl: unknown field (did you mean "baseURL"?); known fields: name, baseURL, insecureSkipVerify, rps, burst, port, timeout, auth, labels, groups, extra`}},
		{"unknown key without a hint", "entries:\n  - auth: {token: t, password: p}\n",
			[]string{`c.yaml:2:22: entries[0].auth.password: unknown field; known fields: token, username`}},
		{"a skipped field is unknown", "entries:\n  - internal: x\n",
			[]string{`c.yaml:2:5: entries[0].internal: unknown field; known fields: name, baseURL, insecureSkipVerify, rps, burst, port, timeout, auth, labels, groups, extra`}},
		{"top-level unknown key", "entris: []\n",
			[]string{`c.yaml:1:1: entris: unknown field (did you mean "entries"?); known fields: entries`}},
		{"a key far from any field", "things: []\n",
			[]string{`c.yaml:1:1: things: unknown field; known fields: entries`}},
		{"string wanted", "entries:\n  - name: [a]\n", []string{`c.yaml:2:11: entries[0].name: want a string, got a list`}},
		{"bool wanted", "entries:\n  - insecureSkipVerify: maybe\n", []string{`c.yaml:2:25: entries[0].insecureSkipVerify: want true or false, got "maybe"`}},
		{"number wanted", "entries:\n  - rps: fast\n", []string{`c.yaml:2:10: entries[0].rps: want a number, got "fast"`}},
		{"whole number wanted", "entries:\n  - burst: 1.5\n", []string{`c.yaml:2:12: entries[0].burst: want a whole number, got "1.5"`}},
		{"out of range", "entries:\n  - port: 70000\n", []string{`c.yaml:2:11: entries[0].port: want a whole number, got "70000"`}},
		{"duration wanted", "entries:\n  - timeout: soon\n", []string{`c.yaml:2:14: entries[0].timeout: want a duration such as 30s or 5m, got "soon"`}},
		{"mapping wanted", "entries:\n  - auth: token\n", []string{`c.yaml:2:11: entries[0].auth: want a mapping, got "token"`}},
		{"list wanted", "entries: {name: a}\n", []string{`c.yaml:1:10: entries: want a list, got a mapping`}},
		{"map of strings", "entries:\n  - labels: {a: [x]}\n", []string{`c.yaml:2:17: entries[0].labels.a: want a string, got a list`}},
		{"what the field wants, in words", "entries:\n  - groups: admins\n", []string{`c.yaml:2:13: entries[0].groups: want a list of group names, got "admins"`}},
		{"list item", "entries:\n  - groups: [a, {b: c}]\n", []string{`c.yaml:2:17: entries[0].groups[1]: want a string, got a mapping`}},
		{"duplicate key", "entries:\n  - name: a\n    name: b\n", []string{`c.yaml:3:5: entries[0].name: set twice (first at line 2)`}},
		{"duplicate map key", "entries:\n  - labels:\n      a: x\n      a: y\n", []string{`c.yaml:4:7: entries[0].labels.a: set twice (first at line 3)`}},
		{"a key that is not a name", "entries:\n  - ? [a]\n    : x\n", []string{`c.yaml:2:7: entries[0]: want a name as key, got a list`}},
		{"every problem, in file order", "entries:\n  - burst: x\n    zzz: 1\n  - rps: y\n",
			[]string{
				`c.yaml:2:12: entries[0].burst: want a whole number, got "x"`,
				`c.yaml:3:5: entries[0].zzz: unknown field; known fields: name, baseURL, insecureSkipVerify, rps, burst, port, timeout, auth, labels, groups, extra`,
				`c.yaml:4:10: entries[1].rps: want a number, got "y"`,
			}},
		{"empty file", "", []string{`c.yaml: empty file: want an entries list`}},
		{"only a comment", "# nothing yet\n", []string{`c.yaml: empty file: want an entries list`}},
		{"null document", "~\n", []string{`c.yaml: empty file: want an entries list`}},
		{"two documents", "entries: []\n---\nentries: []\n", []string{`c.yaml:2:1: more than one YAML document; the file holds one`}},
		{"syntax error at the mistake's line", "entries:\n  - name: a\n    baseURL: x\n   burst: 1\n", []string{`c.yaml:4: YAML: did not find expected '-' indicator`}},
		{"unknown alias", "entries: *nope\n", []string{`c.yaml:1: YAML: unknown anchor 'nope' referenced`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f file
			_, err := yamlconf.Load("c.yaml", []byte(tc.src), &f, "an entries list")
			if err == nil {
				t.Fatalf("no error; decoded %+v", f)
			}
			if got := err.Error(); got != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", got, strings.Join(tc.want, "\n"))
			}
			var e *yamlconf.Error
			if !errors.As(err, &e) || e.File != "c.yaml" {
				t.Errorf("errors.As finds no *yamlconf.Error naming the file: %#v", err)
			}
		})
	}
}

// A good file decodes into every kind of field; aliases are followed; null leaves the zero
// value.
func TestDecodeValues(t *testing.T) {
	src := `
base: &base {token: env:T}
entries:
  - name: 123
    baseURL: https://x
    insecureSkipVerify: true
    rps: 2.5
    burst: 0x10
    port: 8080
    timeout: 1m30s
    auth: *base
    labels: {team: a}
    groups: [x, y]
    extra: {any: [1, two]}
  - name: b
    auth: ~
`
	type withBase struct {
		Base    any     `yaml:"base"`
		Entries []entry `yaml:"entries"`
	}
	var f withBase
	d, err := yamlconf.Load("c.yaml", []byte(src), &f, "entries")
	if err != nil {
		t.Fatal(err)
	}
	e := f.Entries[0]
	if e.Name != "123" || e.BaseURL != "https://x" || !e.Insecure || e.RPS != 2.5 || e.Burst != 16 || e.Port != 8080 ||
		e.Timeout != 90*time.Second || e.Auth == nil || e.Auth.Token != "env:T" || e.Labels["team"] != "a" ||
		strings.Join(e.Groups, ",") != "x,y" {
		t.Errorf("decoded %+v", e)
	}
	if m, ok := e.Extra.(map[string]any); !ok || len(m["any"].([]any)) != 2 {
		t.Errorf("extra = %#v", e.Extra)
	}
	if f.Entries[1].Auth != nil {
		t.Errorf("null auth decoded as %+v", f.Entries[1].Auth)
	}
	// Checks after decoding point at the field (an alias's at the anchored value), or at
	// the mapping that lacks it.
	if !d.Has("entries[0].auth.token") || d.Has("entries[1].baseURL") {
		t.Error("Has does not tell set fields from unset ones")
	}
	d.Errorf("entries[0].auth.token", "bad token")
	d.Errorf("entries[1].baseURL", "required")
	got := d.Err().Error()
	if got != "c.yaml:2:21: entries[0].auth.token: bad token\nc.yaml:15:5: entries[1].baseURL: required" {
		t.Errorf("got\n%s", got)
	}
}

// Hostile files are refused quickly with a clear error: a file over the size limit, nesting
// deeper than any configuration needs, and an alias bomb that would expand to billions of
// values.
func TestDecodeHostileInput(t *testing.T) {
	big := "entries:\n" + strings.Repeat("  - {name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n", 10<<20/40)
	deep := strings.Repeat("{kids: [", 1000) + strings.Repeat("]}", 1000) + "\n"
	var bomb strings.Builder
	bomb.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		bomb.WriteString("a" + itoa(i) + ": &a" + itoa(i) + " [" + strings.Repeat("*a"+itoa(i-1)+", ", 9) + "*a" + itoa(i-1) + "]\n")
	}
	bomb.WriteString("kids: [{kids: *a8}]\n")
	for _, tc := range []struct {
		name, src string
		v         any
		want      string
	}{
		{"10 MB", big, &file{}, "; the limit is 4194304"},
		{"deep nesting", deep, &tree{}, "nested more than 64 levels deep"},
		{"deeper than yaml allows", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), &tree{}, "c.yaml:1: YAML: exceeded max depth of 10000"},
		{"alias bomb", bomb.String(), &map[string]any{}, ""},
		{"alias bomb into a struct", strings.Replace(bomb.String(), "a", "x", 0), &struct {
			A0, A1, A2, A3, A4, A5, A6, A7, A8 []any
			Kids                               []tree
		}{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := yamlconf.Load("c.yaml", []byte(tc.src), tc.v, "something")
			if err == nil {
				t.Fatal("hostile input accepted")
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant %q", err, tc.want)
			}
			if len(err.Error()) > 2000 {
				t.Errorf("error is %d bytes long", len(err.Error()))
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("took %v", took)
			}
			t.Log(err)
		})
	}
}

// A schema violation is reported at the node it concerns, with its path.
func TestValidateSchema(t *testing.T) {
	s := compileSchema(t, `{
		"type": "object",
		"properties": {"entries": {"type": "array", "items": {
			"type": "object", "required": ["name"], "additionalProperties": false,
			"properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}, "burst": {"type": "integer", "minimum": 0}}}}}}`)
	d, err := yamlconf.Parse("c.yaml", []byte("entries:\n  - name: Bad\n    burst: -1\n  - burst: 2\n  - name: ok\n    burst: 3\n    colour: red\n"))
	if err != nil {
		t.Fatal(err)
	}
	d.Validate(s)
	got := d.Err()
	if got == nil {
		t.Fatal("schema violations not reported")
	}
	for _, want := range []string{
		"c.yaml:2:11: entries[0].name: ",
		"c.yaml:3:12: entries[0].burst: ",
		"c.yaml:4:5: entries[1]: ",
		"c.yaml:7:5: entries[2].colour: unknown field (the schema does not allow it)",
	} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("missing %q in\n%v", want, got)
		}
	}
	if n := strings.Count(got.Error(), "\n") + 1; n != 4 {
		t.Errorf("want 4 problems, got %d:\n%v", n, got)
	}
	ok, _ := yamlconf.Parse("c.yaml", []byte("entries:\n  - name: ok\n"))
	if ok.Validate(s); ok.Err() != nil {
		t.Errorf("valid file refused: %v", ok.Err())
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func compileSchema(t *testing.T, src string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
