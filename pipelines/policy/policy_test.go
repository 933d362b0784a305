package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func write(t testing.TB, dir, name, src string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

const denyProd = `package prflow.stage

deny contains sprintf("stage %s: no prod on Fridays", [input.stage.id]) if input.stage.environment == "prod"

warn contains "heads up" if input.stage.environment == "staging"
`

// openDenyProd opens an engine over a new directory holding denyProd as stage.rego, and
// returns the directory too, for the test to edit.
func openDenyProd(t *testing.T) (*Engine, string) {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, "stage.rego", denyProd)
	e, err := Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e, dir
}

func TestEvaluate(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "stage.rego", denyProd)
	write(t, dir, "pipe.rego", "package prflow.pipeline\n\ndeny contains {\"msg\": \"structured\"} if input.name == \"x\"\n\n"+
		"deny contains {\"code\": 7} if input.name == \"y\"\n\nwarn contains 42 if input.name == \"y\"\n")
	s, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has(Stage) || !s.Has(Pipeline) || s.Has(Run) {
		t.Fatalf("covered points wrong: stage %v pipeline %v run %v", s.Has(Stage), s.Has(Pipeline), s.Has(Run))
	}
	for _, tc := range []struct {
		point      Point
		input      any
		deny, warn []string
	}{
		{Stage, map[string]any{"stage": map[string]any{"id": "p", "environment": "prod"}}, []string{"stage p: no prod on Fridays"}, nil},
		{Stage, map[string]any{"stage": map[string]any{"id": "s", "environment": "staging"}}, nil, []string{"heads up"}},
		{Stage, map[string]any{}, nil, nil},     // missing fields are undefined, not errors
		{Run, map[string]any{"x": 1}, nil, nil}, // no package: nothing to say
		{Pipeline, map[string]any{"name": "x"}, []string{"structured"}, nil},
		{Pipeline, map[string]any{"name": "y"}, []string{`{"code":7}`}, []string{"42"}}, // other values as JSON
	} {
		d, err := s.Evaluate(context.Background(), tc.point, tc.input)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.Deny) != fmt.Sprint(tc.deny) || fmt.Sprint(d.Warn) != fmt.Sprint(tc.warn) {
			t.Errorf("%s %v: deny %q warn %q, want %q %q", tc.point, tc.input, d.Deny, d.Warn, tc.deny, tc.warn)
		}
		if err := d.Err(tc.point); (err != nil) != (len(tc.deny) > 0) || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("%s: Err() = %v", tc.point, err)
		}
	}
}

// TestEvaluateCancelled: an evaluation stops when its context ends (a deadline mid-way, or a
// context already done) and says so; the set stays usable.
func TestEvaluateCancelled(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "stage.rego", "package prflow.stage\n\ndeny contains \"slow\" if {\n  count([x | some x in numbers.range(1, 50000000); x % 7 == 0]) > 0\n}\n")
	s, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, err := s.Evaluate(ctx, Stage, map[string]any{}); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("evaluation past its deadline: %v", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the evaluation ran %s past a 100ms deadline", d)
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := s.Evaluate(done, Stage, map[string]any{}); !errors.Is(err, ErrPolicy) || !errors.Is(err, context.Canceled) {
		t.Fatalf("evaluation with a done context: %v", err)
	}
}

func TestLoadErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"syntax", "package prflow.stage\n\ndeny contains msg if {\n  msg := \n}\n", "bad.rego:5"},
		{"v0 syntax", "package prflow.stage\n\ndeny[msg] { msg := \"x\" }\n", "bad.rego:3"},
		{"unsafe var", "package prflow.stage\n\ndeny contains msg if {\n  input.x == 1\n}\n", "bad.rego:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "good.rego", denyProd)
			write(t, dir, "bad.rego", tc.src)
			_, err := Load(context.Background(), dir)
			if !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if _, err := Load(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .rego policy files") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := Load(context.Background(), filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrPolicy) {
		t.Errorf("missing dir: %v", err)
	}
}

// TestHotReload: a changed file is picked up; a broken edit keeps the last good set; fixing
// it loads again. The engine is read concurrently while it reloads (run with -race).
func TestHotReload(t *testing.T) {
	e, dir := openDenyProd(t)
	prod := map[string]any{"stage": map[string]any{"id": "p", "environment": "prod"}}
	deny := func() []string {
		t.Helper()
		d, err := e.Evaluate(context.Background(), Stage, prod)
		if err != nil {
			t.Fatal(err)
		}
		return d.Deny
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // concurrent readers during reloads
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = e.Evaluate(context.Background(), Stage, prod)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	if changed, err := e.Reload(context.Background()); changed || err != nil {
		t.Fatalf("reload without a change: %v %v", changed, err)
	}
	bump := func(src string) {
		write(t, dir, "stage.rego", src)
		// mtime granularity: make the change visible even within one tick
		future := time.Now().Add(time.Duration(len(src)) * time.Second)
		_ = os.Chtimes(filepath.Join(dir, "stage.rego"), future, future)
	}
	bump(strings.Replace(denyProd, "no prod on Fridays", "frozen", 1))
	if changed, err := e.Reload(context.Background()); !changed || err != nil {
		t.Fatalf("reload after a change: %v %v", changed, err)
	}
	if got := deny(); len(got) != 1 || got[0] != "stage p: frozen" {
		t.Fatalf("after reload: %q", got)
	}
	bump("package prflow.stage\n\ndeny contains msg if {\n")
	if _, err := e.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "stage.rego:") {
		t.Fatalf("broken reload: %v", err)
	}
	if got := deny(); len(got) != 1 || got[0] != "stage p: frozen" {
		t.Fatalf("last good set not kept: %q", got)
	}
	bump(denyProd + "\n")
	if changed, err := e.Reload(context.Background()); !changed || err != nil {
		t.Fatalf("reload after the fix: %v %v", changed, err)
	}
	if got := deny(); len(got) != 1 || got[0] != "stage p: no prod on Fridays" {
		t.Fatalf("after the fix: %q", got)
	}
}

// TestWatch: the polling watcher picks up a change by itself.
func TestWatch(t *testing.T) {
	e, dir := openDenyProd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Watch(ctx, 20*time.Millisecond)
	write(t, dir, "run.rego", "package prflow.run\n\ndeny contains \"no\" if true\n")
	deadline := time.Now().Add(20 * time.Second)
	for !e.Has(Run) {
		if time.Now().After(deadline) {
			t.Fatal("the watcher never loaded run.rego")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkStagePolicy measures one prflow.stage evaluation of the example policies' shape
// on a realistic input (a 3-stage pipeline, 50 app records) and reports the p99.
func BenchmarkStagePolicy(b *testing.B) {
	dir := b.TempDir()
	for _, f := range []string{"stage.rego", "pipeline.rego", "run.rego"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", f))
		if err != nil {
			b.Fatal(err)
		}
		write(b, dir, f, string(src))
	}
	s, err := Load(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	apps := []any{}
	for i := range 50 {
		env := []string{"dev", "staging", "prod"}[i%3]
		apps = append(apps, Converted(map[string]any{"key": fmt.Sprintf("sim.web-%d", i), "name": fmt.Sprintf("web-%d", i), "cluster": env + "-eu",
			"health": "Healthy", "sync": "Synced", "labels": map[string]any{"harness.io/envRef": env}}))
	}
	envs := []any{}
	for _, n := range []string{"dev", "staging", "prod"} {
		envs = append(envs, map[string]any{"name": n, "clusters": []any{map[string]any{"name": n + "-eu", "agent": "sim"}}})
	}
	stage := map[string]any{"id": "prod", "environment": "prod", "steps": []any{map[string]any{"id": "approval", "type": "Approval"}}}
	// As the controller builds it: the pipeline, its stages and environments converted once
	// per pipeline, the app list once per change of prflow-apps; the run as it is now.
	input := map[string]any{"stage": Converted(stage), "environment": Converted(envs[2]), "pipeline": Converted(map[string]any{"environments": envs}),
		"run": map[string]any{"id": "r1", "stages": []any{}}, "apps": Converted(apps)}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		d, err := s.Evaluate(context.Background(), Stage, input)
		lat = append(lat, time.Since(t0))
		if err != nil || len(d.Deny) != 0 {
			b.Fatalf("%v %v", d, err)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
