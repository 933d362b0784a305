package pipelines

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/steps"
)

func TestLoadErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // each must appear in the error text
	}{
		{"yaml syntax", "name: x\nstages: [\n", []string{"p.yaml:"}},
		{"no stages", "name: x\n", []string{"p.yaml:1:1: stages: required"}},
		{"unknown field", "name: x\nstagez: []\nstages:\n  - id: s\n    steps: [{id: a, type: Noop}]\n", []string{"p.yaml:2:1: stagez: unknown field"}},
		{"unknown type", "name: x\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Nope\n", []string{"p.yaml:6:15: stages[0].steps[0].type: unknown step type \"Nope\""}},
		{"bad expression", "name: x\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Noop\n        when: ${{ 1 + }}\n", []string{"p.yaml:7:", "stages[0].steps[0].when"}},
		{"unknown step ref", "name: x\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Noop\n        with: {outputs: {x: \"${{ steps.b.outputs.y }}\"}}\n", []string{"stages[0].steps[0].with", `no step "b" in stage "s"`}},
		{"unknown input", "name: x\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop, when: \"${{ inputs.nope == 1 }}\"}\n", []string{`no input "nope"`}},
		{"bad duration", "name: x\nstages:\n  - id: s\n    timeout: 10 minutes\n    steps: [{id: a, type: Noop}]\n", []string{"p.yaml:4:14: stages[0].timeout"}},
		{"needs cycle", "name: x\nstages:\n  - {id: a, needs: [b], steps: [{id: x, type: Noop}]}\n  - {id: b, needs: [a], steps: [{id: x, type: Noop}]}\n", []string{"cycle"}},
		{"needs unknown", "name: x\nstages:\n  - {id: a, needs: [zz], steps: [{id: x, type: Noop}]}\n", []string{`unknown stage "zz"`}},
		{"duplicate step", "name: x\nstages:\n  - id: a\n    steps: [{id: x, type: Noop}, {id: x, type: Noop}]\n", []string{`duplicate step id "x"`}},
		{"bad failure", "name: x\nstages:\n  - id: a\n    steps: [{id: x, type: Noop, onFailure: explode}]\n", []string{`unknown action "explode"`}},
		{"validate inputs", "name: x\nstages:\n  - id: a\n    steps: [{id: x, type: Wait}]\n", []string{"duration: required"}},
		{"unknown env", "name: x\nstages:\n  - {id: a, environment: qa, steps: [{id: x, type: Noop}]}\n", []string{`unknown environment "qa"`}},
		{"harness", "pipeline:\n  name: x\n", []string{"Harness pipeline"}},
		{"two docs", "name: x\nstages: [{id: a, steps: [{id: x, type: Noop}]}]\n---\nname: y\n", []string{"more than one YAML document"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := loadErr(t, c.src)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// schemaValidator compiles the repo's JSON Schema and returns a function that checks a
// pipeline's YAML against it.
func schemaValidator(t *testing.T) func(src []byte) error {
	t.Helper()
	sch := compiledSchema(t)
	return func(src []byte) error {
		var y any
		if err := yaml.Unmarshal(src, &y); err != nil {
			return err
		}
		j, _ := json.Marshal(y)
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		return sch.Validate(v)
	}
}

func TestExamplesLoadAndMatchSchema(t *testing.T) {
	validate := schemaValidator(t)
	n := 0
	err := fs.WalkDir(examples.FS, "pipelines", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		src, _ := examples.FS.ReadFile(path)
		if _, err := Load(path, src, steps.Default); err != nil {
			t.Errorf("example %s does not load: %v", path, err)
		}
		if err := validate(src); err != nil {
			t.Errorf("example %s does not match the schema: %v", path, err)
		}
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("no examples checked (%v)", err)
	}
	// The schema rejects what the loader rejects, for the common mistakes.
	for _, bad := range []string{
		"name: x\nstages: []\n",
		"name: x\nstages: [{id: a, steps: [{id: b}]}]\n",
		"name: x\nstages: [{id: a, steps: [{id: b, type: Noop, timeout: soon}]}]\n",
		"name: x\nextra: 1\nstages: [{id: a, steps: [{id: b, type: Noop}]}]\n",
	} {
		if validate([]byte(bad)) == nil {
			t.Errorf("schema accepted %q", bad)
		}
		if _, err := Load("bad.yaml", []byte(bad), steps.Default); err == nil {
			t.Errorf("loader accepted %q", bad)
		}
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(examples.DefaultPipeline()))
	f.Add([]byte("name: x\nstages: [{id: a, steps: [{id: b, type: Noop, with: {outputs: {v: \"${{ inputs.x }}\"}}}]}]\n"))
	f.Add([]byte("name: x\nstages:\n  - id: s\n    needs: [s]\n    steps: [{id: a, type: Wait, with: {duration: 1d}}]\n"))
	f.Add([]byte("{[}"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Load("fuzz.yaml", src, steps.Default)
		if err == nil {
			// A pipeline that loads must be runnable by the machine without panicking.
			r, err := NewRun(p, "r1", nil, "fuzz", testNow)
			if err == nil {
				m := &Machine{P: p}
				m.Advance(r, testNow)
			}
		}
	})
}

// loadErr loads src as p.yaml and returns the error, which must be a *LoadError.
func loadErr(t *testing.T, src string) error {
	t.Helper()
	_, err := Load("p.yaml", []byte(src), steps.Default)
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("want *LoadError, got %v", err)
	}
	return err
}
