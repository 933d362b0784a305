package environments

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
)

// entry is one revision of a key, as a KV watcher hands it over.
type entry struct {
	key   string
	value []byte
	rev   uint64
}

func (e entry) Bucket() string                  { return "prflow-runs" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// Most runs under load belong to pipelines without environments. Their later revisions change
// nothing in the model: it must not decode them (a run's spec never changes) nor load their
// pipeline again. Decoding every revision of every run was 13 % of the whole path's CPU.
func TestRunOfPipelineWithoutEnvironmentsNotDecodedAgain(t *testing.T) {
	loads := 0
	m := New(Sources{Pipeline: func(context.Context, string) (*pipelines.Pipeline, error) {
		loads++
		return &pipelines.Pipeline{Name: "build", Stages: []*pipelines.Stage{{ID: "ci"}}}, nil
	}})
	r := pipelines.Run{ID: "r1", Pipeline: "build", Spec: "s1", Status: pipelines.StRunning, Created: time.Now(),
		Inputs: map[string]any{"commit": "abc"}}
	for i := range 200 { // a run with many steps' outputs: a big value to decode
		r.Stages = append(r.Stages, &pipelines.StageRun{ID: fmt.Sprintf("s%d", i), Status: pipelines.StSucceeded,
			Steps: []*pipelines.StepRun{{ID: "x", Type: "Noop", Status: pipelines.StSucceeded, Outputs: map[string]any{"v": "some output text"}}}})
	}
	data, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if changed := m.applyRun(ctx, entry{"r1", data, 1}); changed {
		t.Fatal("a run of a pipeline without environments changed the model")
	}
	if loads != 1 {
		t.Fatalf("pipeline loaded %d times for the first revision", loads)
	}
	rev := uint64(1)
	allocs := testing.AllocsPerRun(20, func() {
		rev++
		if m.applyRun(ctx, entry{"r1", data, rev}) {
			t.Fatal("a later revision changed the model")
		}
	})
	if loads != 1 || allocs > 2 {
		t.Fatalf("a later revision loaded the pipeline %d times in all and took %.0f allocations: it was decoded again", loads, allocs)
	}
	m.mu.Lock()
	_, known := m.runs["r1"]
	m.mu.Unlock()
	if !known {
		t.Fatal("the run is not known to the model")
	}
}
