package main

import (
	"context"
	"encoding/json"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps/worker"
)

// runCtx runs a command until ctx ends (for -w), returning its output.
func runCtx(ctx context.Context, args ...string) (string, error) {
	root := newRoot()
	var out lockedBuffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// firstLineFields is a table's header.
func headerOf(out string) []string {
	line, _, _ := strings.Cut(out, "\n")
	return strings.Fields(line)
}

// TestReadCommandsOutput: runs, status, workers and logs print tables with headers (AGE and
// DURATION columns), -o wide adds columns, -o json and -o yaml print the API's documents, and
// a wrong -o is refused.
func TestReadCommandsOutput(t *testing.T) {
	e := newTruthEnv(t)
	p := e.pipeline(t, "name: outputs\nstages:\n  - id: build\n    steps:\n      - {id: hello, type: Noop, with: {message: hello from the step}}\n")
	id := e.start(t, p, "-f")

	t.Run("runs table", func(t *testing.T) {
		out, err := run(t, append([]string{"runs"}, e.cli...)...)
		if err != nil {
			t.Fatal(err, out)
		}
		if h := strings.Join(headerOf(out), " "); h != "ID PIPELINE STATUS AGE DURATION" {
			t.Fatalf("header %q\n%s", h, out)
		}
		if !strings.Contains(out, id) || !strings.Contains(out, "outputs") || !strings.Contains(out, "succeeded") {
			t.Fatalf("row missing:\n%s", out)
		}
	})
	t.Run("runs wide", func(t *testing.T) {
		out, err := run(t, append([]string{"runs", "-o", "wide"}, e.cli...)...)
		if err != nil || !strings.Contains(strings.Join(headerOf(out), " "), "TRIGGER STAGES ERROR") || !strings.Contains(out, "api:cli") || !strings.Contains(out, "1/1") {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	t.Run("runs json and yaml", func(t *testing.T) {
		out, err := run(t, append([]string{"runs", "-o", "json"}, e.cli...)...)
		var runs []pipelines.Run
		if err != nil || json.Unmarshal([]byte(out), &runs) != nil || len(runs) == 0 || runs[0].ID != id {
			t.Fatalf("json: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"runs", "-o", "yaml"}, e.cli...)...)
		var doc []map[string]any
		if err != nil || yaml.Unmarshal([]byte(out), &doc) != nil || len(doc) == 0 || doc[0]["id"] != id || doc[0]["status"] != "succeeded" {
			t.Fatalf("yaml: %v\n%s", err, out)
		}
	})
	t.Run("status of a run", func(t *testing.T) {
		out, err := run(t, append([]string{"status", id}, e.cli...)...)
		if err != nil || !strings.Contains(out, "run "+id) || !strings.Contains(out, "STAGE") || !strings.Contains(out, "DURATION") ||
			!strings.Contains(out, "hello") || !strings.Contains(out, "Noop") {
			t.Fatalf("%v\n%s", err, out)
		}
		out, err = run(t, append([]string{"status", id, "-o", "wide"}, e.cli...)...)
		if err != nil || !strings.Contains(out, "WORKER") || !strings.Contains(out, "w1") {
			t.Fatalf("wide: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"status", id, "-o", "yaml"}, e.cli...)...)
		var r pipelines.Run
		var m map[string]any
		if err != nil || yaml.Unmarshal([]byte(out), &m) != nil || m["id"] != id {
			t.Fatalf("yaml: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"status", id, "-o", "json"}, e.cli...)...)
		if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.ID != id {
			t.Fatalf("json: %v\n%s", err, out)
		}
	})
	t.Run("status -w of an ended run", func(t *testing.T) {
		out, err := run(t, append([]string{"status", "-w", id}, e.cli...)...)
		if err != nil || !strings.Contains(out, "run "+id+" succeeded") {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	t.Run("workers", func(t *testing.T) {
		out, err := run(t, append([]string{"workers"}, e.cli...)...)
		if err != nil || strings.Join(headerOf(out), " ") != "ID POOLS CONNECTORS VERSION RUNNING COMPLETED AGE SEEN" || !strings.Contains(out, "w1") {
			t.Fatalf("%v\n%s", err, out)
		}
		out, err = run(t, append([]string{"workers", "-o", "json"}, e.cli...)...)
		var ws []worker.Info
		if err != nil || json.Unmarshal([]byte(out), &ws) != nil || len(ws) != 1 || ws[0].ID != "w1" {
			t.Fatalf("json: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"workers", "-o", "wide"}, e.cli...)...)
		if err != nil || !strings.Contains(out, "HOST") {
			t.Fatalf("wide: %v\n%s", err, out)
		}
	})
	t.Run("logs", func(t *testing.T) {
		out, err := run(t, append([]string{"logs", id}, e.cli...)...)
		if err != nil || !strings.Contains(out, "build.hello: hello from the step") {
			t.Fatalf("%v\n%s", err, out)
		}
		out, err = run(t, append([]string{"logs", id, "-o", "json"}, e.cli...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var l worker.LogLine
		if err != nil || len(lines) == 0 || json.Unmarshal([]byte(lines[0]), &l) != nil || l.Msg != "hello from the step" {
			t.Fatalf("json: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"logs", id, "-o", "wide"}, e.cli...)...)
		if err != nil || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S+ INFO  build\.hello: hello from the step`).MatchString(out) {
			t.Fatalf("wide: %v\n%s", err, out)
		}
		out, err = run(t, append([]string{"logs", id, "-o", "yaml"}, e.cli...)...)
		if err != nil || !strings.Contains(out, "msg: hello from the step") {
			t.Fatalf("yaml: %v\n%s", err, out)
		}
	})
	t.Run("bad output format", func(t *testing.T) {
		for _, cmd := range [][]string{{"runs"}, {"status", id}, {"workers"}, {"logs", id}, {"version"}} {
			if _, err := run(t, append(append(cmd, "-o", "xml"), e.cli...)...); err == nil || !strings.Contains(err.Error(), `--output "xml": want json, yaml or wide`) {
				t.Errorf("%s -o xml: %v", cmd[0], err)
			}
		}
	})
	t.Run("runs -w shows a new run", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan string, 1)
		go func() { out, _ := runCtx(ctx, append([]string{"runs", "-w"}, e.cli...)...); done <- out }()
		time.Sleep(2 * watchEvery)
		out, err := run(t, append([]string{"run", p, "-f"}, e.cli...)...)
		if err != nil {
			t.Fatal(err, out)
		}
		id2 := strings.Fields(out)[1]
		time.Sleep(3 * watchEvery)
		cancel()
		out = <-done
		if strings.Count(out, "ID ") != 1 || !strings.Contains(out, id) || !strings.Contains(out, id2) {
			t.Fatalf("watch output lacks the new run %s (or repeats the header):\n%s", id2, out)
		}
	})
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || strings.Join(headerOf(out), " ") != "MODULE VERSION COMMIT COMMITTED BUILT GO PLATFORM" || !strings.Contains(out, "github.com/prflow/prflow") {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err = run(t, "version", "-o", "json")
	var b buildInfo
	if err != nil || json.Unmarshal([]byte(out), &b) != nil || b.Go == "" || b.Version == "" {
		t.Fatalf("json: %v\n%s", err, out)
	}
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/prflow/prflow", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-24T04:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name, ldVersion, ldDate string
		want                    buildInfo
	}{
		{"module version", "dev", "", buildInfo{Version: "v1.2.3", Commit: "0123456789abcdef0123", CommitDate: "2026-11-24T04:00:00Z", Modified: true}},
		{"ldflags win", "v9.9.9", "2026-11-24", buildInfo{Version: "v9.9.9", Commit: "0123456789abcdef0123", CommitDate: "2026-11-24T04:00:00Z", Modified: true, BuildDate: "2026-11-24"}},
	} {
		got := fromBuildInfo(bi, tc.ldVersion, tc.ldDate)
		if got.Version != tc.want.Version || got.Commit != tc.want.Commit || got.CommitDate != tc.want.CommitDate || got.Modified != tc.want.Modified || got.BuildDate != tc.want.BuildDate {
			t.Errorf("%s: got %+v", tc.name, got)
		}
		if s := got.String(); !strings.Contains(s, "commit 0123456789ab (modified)") {
			t.Errorf("%s: String() = %q", tc.name, s)
		}
	}
}
