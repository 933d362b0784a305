package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

func TestSchemaCommandPrintsTheSchema(t *testing.T) {
	out, err := run(t, "schema")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(pipelines.Schema) {
		t.Errorf("prflow schema differs from pipelines/schema.json")
	}
}

// `prflow validate` refuses a typo'd step input with where it is and what was meant.
func TestValidateRefusesTypoedInput(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.yaml")
	src := "name: x\nstages:\n  - id: s\n    steps:\n      - id: sync\n        type: GitOpsSync\n        with:\n          applicationRegex: web\n          waitTilHealthy: true\n"
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "validate", f)
	if err == nil || !strings.Contains(out, f+`:9:11: stages[0].steps[0].with.waitTilHealthy: unknown GitOpsSync input "waitTilHealthy"; did you mean "waitTillHealthy"?`) {
		t.Errorf("validate: %v\n%s", err, out)
	}
}
