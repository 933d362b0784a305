package envelope

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeJob(t *testing.T) {
	good, _ := json.Marshal(Job{V: Version, Run: "r", Stage: "s", Step: "x", Type: "Noop", Attempt: 1})
	if j, err := DecodeJob(good); err != nil || j.ID() != "r/s/x/1/0" {
		t.Fatalf("good job: %v", err)
	}
	for in, want := range map[string]string{
		"{":                 "job payload",
		`{"v":2,"run":"r"}`: "envelope version 2",
		`{"v":1,"run":"r"}`: "missing stage, step, type",
		`{"v":1,"run":"r","stage":"s","step":"x","type":"T","attempt":0}`: "attempt",
	} {
		if _, err := DecodeJob([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeJob(%s) = %v, want %q", in, err, want)
		}
	}
}

func FuzzDecodeJob(f *testing.F) {
	good, _ := json.Marshal(Job{V: Version, Run: "r", Stage: "s", Step: "x", Type: "Noop", Attempt: 1, Inputs: map[string]any{"a": 1}})
	f.Add(good)
	f.Add([]byte(`{"v":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := DecodeJob(data)
		if err == nil && (j.Run == "" || j.Attempt < 1) {
			t.Fatalf("accepted invalid job %+v", j)
		}
		_, _ = DecodeEvent(data)
	})
}
