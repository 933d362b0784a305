package steps

import (
	"reflect"
	"testing"

	"github.com/prflow/prflow/steps/fileedit"
)

// EditedKeys reads back exactly what editsOutput writes (skipped files left out, order kept),
// and leaves out what is not in that shape instead of failing on it.
func TestEditedKeysReadsEditsOutput(t *testing.T) {
	out := editsOutput([]fileEdit{
		{path: "envs/dev/values.yaml", changes: []editChange{{Change: fileedit.Change{Key: "image.tag", Value: "1.5.0"}}, {Change: fileedit.Change{Key: "replicas", Value: 3}}}},
		{path: "envs/qa/values.yaml", changes: []editChange{{Change: fileedit.Change{Key: "image.tag", Value: "1.5.0"}}}},
	}, []string{"envs/qa/values.yaml"})
	want := []EditedKey{{"envs/dev/values.yaml", "image.tag", "1.5.0"}, {"envs/dev/values.yaml", "replicas", 3}}
	if got := EditedKeys(any(out)); !reflect.DeepEqual(got, want) {
		t.Fatalf("EditedKeys = %#v, want %#v", got, want)
	}
	for _, bad := range []any{nil, "x", []any{"x", map[string]any{"file": 1, "changes": "y"}}} {
		if got := EditedKeys(bad); len(got) != 0 {
			t.Errorf("EditedKeys(%#v) = %#v, want none", bad, got)
		}
	}
}
