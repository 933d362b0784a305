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
		{path: "envs/dev/values.yaml", changes: []editChange{
			{Change: fileedit.Change{Key: "image.tag", Value: "1.5.0"}, was: priorValue{known: true, found: true, value: "1.4.1"}},
			{Change: fileedit.Change{Key: "replicas", Value: 3}, was: priorValue{known: true}},
			{Change: fileedit.Change{Key: "debug", Value: true}, was: priorValue{known: true, found: true}},
			{Change: fileedit.Change{Key: "legacy", Value: "x"}},
		}},
		{path: "envs/qa/values.yaml", changes: []editChange{{Change: fileedit.Change{Key: "image.tag", Value: "1.5.0"}}}},
	}, []string{"envs/qa/values.yaml"})
	want := []EditedKey{
		{File: "envs/dev/values.yaml", Key: "image.tag", Value: "1.5.0", Old: "1.4.1", HasOld: true},
		{File: "envs/dev/values.yaml", Key: "replicas", Value: 3, Created: true},
		{File: "envs/dev/values.yaml", Key: "debug", Value: true, Old: nil, HasOld: true}, // the key held null
		{File: "envs/dev/values.yaml", Key: "legacy", Value: "x"},                         // not recorded: neither
	}
	if got := EditedKeys(any(out)); !reflect.DeepEqual(got, want) {
		t.Fatalf("EditedKeys = %#v, want %#v", got, want)
	}
	for _, bad := range []any{nil, "x", []any{"x", map[string]any{"file": 1, "changes": "y"}}} {
		if got := EditedKeys(bad); len(got) != 0 {
			t.Errorf("EditedKeys(%#v) = %#v, want none", bad, got)
		}
	}
}
