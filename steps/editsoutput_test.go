package steps

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/prflow/prflow/steps/fileedit"
)

// The edits output goes through JSON (KV) to MergePR, which re-applies it on a moved base:
// each change must come back aimed at the same YAML document.
func TestEditsOutputKeepsDocuments(t *testing.T) {
	edits := []fileEdit{{path: "envs/dev/app.yaml", changes: []editChange{
		{Change: fileedit.Change{Key: "spec.replicas", Value: int64(3)}, doc: fileedit.Document{Kind: "Deployment", Name: "web"}},
		{Change: fileedit.Change{Key: "spec.backoffLimit", Value: int64(5)}, doc: fileedit.DocumentAt(0)},
		{Change: fileedit.Change{Key: "a", Value: "b"}},
	}}}
	b, err := json.Marshal(map[string]any{"edits": editsOutput(edits, nil)})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got, ok := editsFrom(back["edits"])
	if !ok || len(got) != 1 || len(got[0].changes) != 3 {
		t.Fatalf("editsFrom: %v %+v", ok, got)
	}
	for i, c := range got[0].changes {
		if w := edits[0].changes[i]; c.Key != w.Key || !reflect.DeepEqual(c.doc, w.doc) {
			t.Errorf("change %d: %s in %s, want %s in %s", i, c.Key, c.doc, w.Key, w.doc)
		}
	}
}
