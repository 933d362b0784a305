package envelope

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/steps"
)

// A worker runs a job whose priors hold every type its step reads: all earlier steps (a
// controller from before Definition.Priors, or a type that declares nothing), or a filter
// that covers its declaration. It refuses one whose filter leaves a read type out, naming it.
func TestCheckPriors(t *testing.T) {
	sync := &steps.Definition{Type: "GitOpsSync", Priors: []string{"MergePR", "FetchLinkedApps"}}
	quiet := &steps.Definition{Type: "Noop", Priors: steps.NoPriors}
	custom := &steps.Definition{Type: "Mine"}
	for _, c := range []struct {
		name  string
		job   string // JSON as a controller sends it
		def   *steps.Definition
		fault string // "" = runs
	}{
		{"controller before Priors (no filter)", `{"priors":[{"id":"m","type":"MergePR"}]}`, sync, ""},
		{"filter covers the declaration", `{"priorTypes":["FetchLinkedApps","MergePR","RevertPR"]}`, sync, ""},
		{"filter equal to the declaration", `{"priorTypes":["MergePR","FetchLinkedApps"]}`, sync, ""},
		{"none sent, none read", `{"priorTypes":[]}`, quiet, ""},
		{"custom type, every prior sent", `{"priors":[]}`, custom, ""},
		{"filter lacks a read type", `{"priorTypes":["MergePR"]}`, sync, "reads FetchLinkedApps as well"},
		{"none sent to a reader", `{"priorTypes":[]}`, sync, "reads MergePR, FetchLinkedApps as well"},
		{"filter sent for a type that reads all", `{"priorTypes":["MergePR"]}`, custom, "reads any type as well"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := DecodeJob([]byte(`{"v":1,"run":"r","stage":"s","step":"x","type":"` + c.def.Type + `","attempt":1,` + strings.TrimPrefix(c.job, "{")))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckPriors(j, c.def)
			switch {
			case c.fault == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.fault != "" && err == nil:
				t.Fatal("ran a job missing priors its step reads")
			case c.fault != "" && (!strings.Contains(err.Error(), c.fault) || !strings.Contains(err.Error(), "upgrade the controllers")):
				t.Fatalf("error %q does not say %q and what to do", err, c.fault)
			}
		})
	}
}
