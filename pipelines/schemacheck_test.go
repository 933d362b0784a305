package pipelines

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/yamlconf"
)

// compiledSchema compiles the generated JSON Schema of pipelines (schema.json).
func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	sch, err := schemaFor(steps.Default) // steps.Default's schema is schema.json as embedded
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// yamlconf checks a pipeline against the generated schema (pipelines/schema.json) and reports
// each violation at its line and column with the field's path; every example passes.
func TestSchemaViolationsAtTheirPlace(t *testing.T) {
	sch := compiledSchema(t)
	src := "name: demo\nstages:\n  - id: a\n    colour: blue\n    steps:\n      - id: s\n        type: Noop\n"
	d, err := yamlconf.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	d.Validate(sch)
	got := d.Err()
	if want := "p.yaml:4:5: stages[0].colour: unknown field (the schema does not allow it)"; got == nil || got.Error() != want {
		t.Fatalf("got  %v\nwant %s", got, want)
	}
	n := 0
	err = fs.WalkDir(examples.FS, "pipelines", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		src, _ := examples.FS.ReadFile(path)
		d, err := yamlconf.Parse(path, src)
		if err != nil {
			return err
		}
		if d.Validate(sch); d.Err() != nil {
			t.Errorf("example %s: %v", path, d.Err())
		}
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("walked %d examples: %v", n, err)
	}
}
