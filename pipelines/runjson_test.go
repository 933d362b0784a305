package pipelines

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A run state that cannot be encoded is an error, never bytes the controller would store.
func TestAppendJSONRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, ts := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
	} {
		r := &Run{Created: ts}
		if _, err := json.Marshal(r); err == nil {
			t.Fatalf("encoding/json took %v", ts)
		}
		if _, err := r.AppendJSON(nil); err == nil || !strings.Contains(err.Error(), "Time.MarshalJSON") {
			t.Fatalf("AppendJSON on %v: %v, want encoding/json's error", ts, err)
		}
	}
	bad := &Run{Stages: []*StageRun{{Steps: []*StepRun{{Outputs: map[string]any{"f": func() {}}}}}}}
	if _, err := bad.AppendJSON(nil); err == nil {
		t.Fatal("AppendJSON encoded a func output")
	}
}
