package harness

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

// Harness String variables are text: an unquoted 1.10, 0755, a long number or a date stay as
// written through the conversion (pipeline variables and the step's own variables), and a
// typo'd spec field or a Number variable that is no number is refused like in native YAML.
func TestHarnessStringValuesKeepTheirText(t *testing.T) {
	m := testMap(t)
	src := fill(base, map[string]string{
		"PIPE": "variables:\n  - {name: version, type: String, value: 1.10}\n  - {name: mode, value: 0755}\n  - {name: big, type: String, value: 12345678901234567890}\n  - {name: day, type: String, value: 2024-01-02}",
		"STEPS": `- step:
    identifier: update
    name: update
    type: GitOpsUpdateReleaseRepo
    spec:
      prTitle: 1.10
      variables:
        - {name: a, type: String, value: 1.10}
        - {name: b, type: String, value: 0755}
        - {name: c, type: String, value: 2024-01-02}
        - {name: d, type: Number, value: 3}
        - {name: e, type: String, value: <+pipeline.variables.version>}`,
	})
	res, err := Convert("p.yaml", []byte(src), Options{Map: m})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	for _, v := range res.Pipeline.Variables {
		want := map[string]string{"version": "1.10", "mode": "0755", "big": "12345678901234567890", "day": "2024-01-02"}[v.Name]
		if v.Value.Lit != want {
			t.Errorf("pipeline variable %s = %#v (%T), want %q\n%s", v.Name, v.Value.Lit, v.Value.Lit, want, res.Native)
		}
	}
	var with map[string]any
	for _, s := range res.Pipeline.Stages {
		for _, st := range s.Steps {
			if st.ID == "update" {
				with = st.With.Static()
			}
		}
	}
	if with == nil {
		t.Fatalf("no update step:\n%s", res.Native)
	}
	if with["prTitle"] != "1.10" {
		t.Errorf("prTitle = %#v", with["prTitle"])
	}
	vars, _ := with["variables"].([]any)
	want := []any{"1.10", "0755", "2024-01-02", "3", "<+pipeline.variables.version>"}
	if len(vars) != len(want) {
		t.Fatalf("variables: %#v", vars)
	}
	for i, w := range want {
		if got := vars[i].(map[string]any)["value"]; got != w {
			t.Errorf("variables[%d].value = %#v (%T), want %#v\n%s", i, got, got, w, res.Native)
		}
	}

	bad := fill(base, map[string]string{"STEPS": `- step:
    identifier: update
    name: update
    type: GitOpsUpdateReleaseRepo
    spec:
      variables:
        - {name: d, type: Number, value: three}`})
	_, err = Convert("p.yaml", []byte(bad), Options{Map: m})
	if err == nil || !strings.Contains(err.Error(), `"three" is not a decimal number`) {
		t.Errorf("Number variable that is no number: %v", err)
	}
}

// Every Harness spec field the converter copies into a native step's inputs is an input the
// native step type declares: otherwise converted pipelines would be refused at load.
func TestHarnessCopiedFieldsAreDeclaredInputs(t *testing.T) {
	reg := steps.Default
	for typ, sf := range specFields {
		def, ok := reg.Lookup(typ)
		if !ok {
			t.Errorf("Harness step type %s has no native step type", typ)
			continue
		}
		for _, f := range sf.copy {
			if _, ok := def.Input(f); !ok {
				t.Errorf("%s: spec field %s is copied but %s does not declare it", typ, f, def.Type)
			}
		}
	}
}

// What the converter writes matches the pipeline schema, for every Harness test pipeline.
func TestConvertedTestdataMatchesSchema(t *testing.T) {
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(pipelines.Schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("testdata/*.yaml")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(filepath.Base(f), "map.yaml") { // mapping files, not pipelines
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := testMap(t)
		if own := strings.TrimSuffix(f, ".yaml") + "_map.yaml"; fileExists(own) { // a sample with its own map
			if m, err = LoadMap(own); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Convert(f, src, Options{Map: m, Validate: true})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var y any
		if err := yaml.Unmarshal(res.Native, &y); err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(y)
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err := sch.Validate(v); err != nil {
			t.Errorf("%s converted does not match the schema: %v\n%s", f, err, res.Native)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no Harness test pipelines")
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
