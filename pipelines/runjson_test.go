package pipelines

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/steps"
)

// fill sets every field reachable from v (structs, pointers, slices, maps) to a non-zero value
// derived from seed, so a field AppendJSON forgets shows up as a difference.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), seed)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 23, 10, seed%60, 7, seed*1000+1, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed*7+i)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage
			v.SetBytes([]byte(fmt.Sprintf(`{"n": %d, "s": "a<b"}`, seed)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), seed+1)
		fill(s.Index(1), seed+2)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := 0; i < 2; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			fill(k, seed+i)
			e := reflect.New(v.Type().Elem()).Elem()
			if e.Kind() == reflect.Interface {
				e.Set(reflect.ValueOf([]any{"x", float64(seed), true, map[string]any{"k": "v&"}}))
			} else {
				fill(e, seed+i)
			}
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(seed + 1))
	case reflect.Interface:
		v.Set(reflect.ValueOf(fmt.Sprintf("i%d", seed)))
	}
}

func sampleRun(now time.Time) *Run {
	r := &Run{ID: "r2611231210099h40bdpvh2", Pipeline: "bench", Spec: "70eae552dd00288d", File: "test.yaml",
		Executor: "tester", Status: StRunning, Created: now, Started: now}
	s := &StageRun{ID: "s", Status: StRunning, Started: now}
	for i := 0; i < 10; i++ {
		s.Steps = append(s.Steps, &StepRun{ID: fmt.Sprintf("n%d", i), Type: "Noop", Status: StSucceeded, Attempt: 1,
			Queued: now, Started: now.Add(time.Millisecond), Ended: now.Add(2 * time.Millisecond), Worker: "w0"})
	}
	r.Stages = []*StageRun{s}
	return r
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	full := &Run{}
	fill(reflect.ValueOf(full), 1)
	// Every field set: a field added to Run, StageRun or StepRun without AppendJSON knowing
	// is missing from its output.
	if full.Stages[0].Steps[0].Wait == nil || full.Trigger.PathCheck == nil || len(full.Stages[0].Rollback) == 0 {
		t.Fatal("fill left fields unset")
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := time.Now()
	cases := map[string]*Run{
		"every field":   full,
		"typical":       sampleRun(now),
		"local zone":    sampleRun(now.In(berlin)),
		"fixed zone":    sampleRun(now.In(time.FixedZone("odd", 5*3600+30*60+17))),
		"zero":          {},
		"nil stage":     {Stages: []*StageRun{nil, {Steps: []*StepRun{nil}}}},
		"empty slices":  {Stages: []*StageRun{}, Inputs: map[string]any{}, Labels: map[string]string{}},
		"escapes":       {ID: "a\"b\\c", Pipeline: "<x>&y", Error: "line\nbreak\t\x01", Spec: "ünïcode \u2028 é", File: "bad \xff utf8"},
		"memo and wait": {Stages: []*StageRun{{Steps: []*StepRun{{Memo: json.RawMessage(`{ "a" : [1, 2] }`), Wait: &steps.Wait{Poll: time.Second}}}}}},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			want, werr := json.Marshal(r)
			got, gerr := r.AppendJSON(nil)
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("errors differ: encoding/json %v, AppendJSON %v", werr, gerr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("AppendJSON differs from encoding/json:\n got %s\nwant %s", got, want)
			}
			var back Run
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("output does not decode: %v", err)
			}
		})
	}
}

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

func FuzzAppendJSON(f *testing.F) {
	f.Add("id", "err<>&", "w", int64(1764000000123456789), 3600)
	f.Add("\x00\"\\", "\u2028\xff", "ü", int64(-62135596800), -7200)
	f.Fuzz(func(t *testing.T, id, msg, worker string, nanos int64, off int) {
		ts := time.Unix(0, nanos).In(time.FixedZone("z", off%(30*3600)))
		r := sampleRun(ts)
		r.ID, r.Error, r.Stages[0].Steps[3].Worker, r.Stages[0].Steps[5].Error = id, msg, worker, msg
		want, werr := json.Marshal(r)
		got, gerr := r.AppendJSON(nil)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON %s (%v) != encoding/json %s (%v)", got, gerr, want, werr)
		}
	})
}

func BenchmarkRunEncode(b *testing.B) {
	r := sampleRun(time.Now())
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = r.AppendJSON(buf[:0])
		}
	})
}
