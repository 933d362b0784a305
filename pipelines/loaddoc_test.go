package pipelines

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prflow/prflow/steps"
)

// The pipeline loader decodes through yamlconf: keys given twice in name → value mappings
// (variables, inputs, a trigger's inputs), a fraction where a whole number is wanted and a
// null where the schema wants a value were let through by the hand-written walker; each is
// now refused once, at its place, with the field's path.
func TestLoadRefusesWhatTheWalkerLetThrough(t *testing.T) {
	st := "stages:\n  - id: s\n    steps: [{id: a, type: Noop}]\n"
	for _, tc := range []struct{ name, src, want string }{
		{"pipeline variable twice", "name: x\nvariables: {tag: a, tag: b}\n" + st,
			"p.yaml:2:21: variables.tag: set twice (first at line 2)"},
		{"stage variable twice", "name: x\nstages:\n  - id: s\n    variables:\n      a: 1\n      a: 2\n    steps: [{id: a, type: Noop}]\n",
			"p.yaml:6:7: stages[0].variables.a: set twice (first at line 5)"},
		{"environment variable twice", "name: x\nenvironments:\n  - name: dev\n    overrides: {a: 1, a: 2}\n" + st,
			"p.yaml:4:23: environments[0].overrides.a: set twice (first at line 4)"},
		{"service variable twice", "name: x\nservice: {name: web, variables: {a: 1, a: 2}}\n" + st,
			"p.yaml:2:40: service.variables.a: set twice (first at line 2)"},
		{"input declared twice", "name: x\ninputs:\n  tag: {type: string}\n  tag: {type: number}\n" + st,
			"p.yaml:4:3: inputs.tag: set twice (first at line 3)"},
		{"trigger input twice", "name: x\ninputs:\n  tag: {type: string}\ntriggers:\n  - push: {repo: a/b}\n    inputs: {tag: x, tag: y}\n" + st,
			"p.yaml:6:22: triggers[0].inputs.tag: set twice (first at line 6)"},
		{"retries a fraction", "name: x\nstages:\n  - id: s\n    onFailure: {action: retry, retries: 1.5}\n    steps: [{id: a, type: Noop}]\n",
			`p.yaml:4:41: stages[0].onFailure.retries: want a whole number ≥ 0, got "1.5"`},
		{"null where the schema wants true or false", "name: x\ncleanup: {keepFailedPRs: ~}\n" + st,
			"p.yaml:2:26: cleanup.keepFailedPRs: want true or false, got null"},
		{"null approver reported once", "name: x\nstages:\n  - id: s\n    steps: [{id: a, type: Noop, onFailure: {manual: {approvers: [bob, ~]}}}]\n",
			"p.yaml:4:71: stages[0].steps[0].onFailure.manual.approvers[1]: want a string, got null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := loadFails(t, tc.src, tc.want)
			var le *LoadError
			if !errors.As(err, &le) || len(le.Errs) != 1 {
				t.Fatalf("want one *LoadError problem, got %#v", err)
			}
		})
	}
}

// A misspelt key deep inside a trigger, a notification rule or a promotion names the
// allowed keys and the likely one; a value of the wrong kind at depth names what was wanted.
func TestLoadMisspeltKeysAtDepth(t *testing.T) {
	st := "stages:\n  - id: s\n    steps: [{id: a, type: Noop}]\n"
	for _, tc := range []struct{ name, src, want string }{
		{"trigger filter", "name: x\ntriggers:\n  - push: {repo: a/b, delted: true}\n" + st,
			`p.yaml:3:23: triggers[0].push.delted: unknown field (allowed: provider, repo, branches, paths, deleted); did you mean "deleted"?`},
		{"notification rule", "name: x\nnotifications:\n  - {on: [run.failed], chanel: team}\n" + st,
			"p.yaml:3:5: notifications[0].channel: required: the name of a channel configured on the workers (--notifiers)\n" +
				`p.yaml:3:24: notifications[0].chanel: unknown field (allowed: on, stages, channel); did you mean "channel"?`},
		{"manual strategy", "name: x\nstages:\n  - id: s\n    steps: [{id: a, type: Noop, onFailure: {manual: {aprovers: [bob]}}}]\n",
			`p.yaml:4:54: stages[0].steps[0].onFailure.manual.aprovers: unknown field (allowed: timeout, onTimeout, approvers); did you mean "approvers"?`},
		{"cluster list of the wrong kind", "name: x\nenvironments:\n  - name: dev\n    clusters: {name: c}\n" + st,
			`p.yaml:4:15: environments[0].clusters: want a list of {name, agent}, got a mapping`},
		{"gate soak of the wrong kind", "name: x\nstages:\n  - id: s\n    gate: {soak: [1m]}\n    steps: [{id: a, type: Noop}]\n",
			`p.yaml:4:18: stages[0].gate.soak: want a string, got a list`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loadFails(t, tc.src, tc.want)
		})
	}
}

// A mistake the decode reports is not reported again by the schema in its own words, while
// one only the schema sees is added: the two never say the same thing twice.
func TestLoadSchemaAndDecodeReportOnce(t *testing.T) {
	src := "name: x\ntimeout: ~\nstages:\n  - id: s\n    colour: blue\n    steps: [{id: a, type: Noop, pool: [p]}]\n"
	_, err := Load("p.yaml", []byte(src), nil)
	want := strings.Join([]string{
		"p.yaml:2:10: timeout: want a string, got null", // the schema's (the decode takes null as unset)
		"p.yaml:5:5: stages[0].colour: unknown field (allowed: id, name, needs, environment, clusters, when, timeout, onFailure, variables, steps, rollbackSteps, gate)",
		"p.yaml:6:39: stages[0].steps[0].pool: want a string, got a list",
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	// A scalar is judged by the field's type, as the loader always did, not refused by the
	// schema for its YAML type: yes and on are true, a number is text where text is wanted.
	ok := "name: x\ndescription: 5\ninputs:\n  a: {type: string, required: on, default: b}\ncleanup: {keepFailedPRs: yes}\n" +
		"stages:\n  - id: s\n    steps: [{id: a, type: Noop, pool: 1}]\n"
	p, err := Load("p.yaml", []byte(ok), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Description != "5" || !p.Inputs[0].Required || !p.Cleanup.KeepFailedPRs || p.Stages[0].Steps[0].Pool != "1" {
		t.Errorf("decoded %q %v %v %q", p.Description, p.Inputs[0].Required, p.Cleanup.KeepFailedPRs, p.Stages[0].Steps[0].Pool)
	}
}

// A hostile file (an alias bomb under variables, which the loader keeps as nodes and walks
// itself) is refused before anything walks it.
func TestLoadRefusesAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\nvariables:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("stages:\n  - id: s\n    steps: [{id: a, type: Noop, with: {v: *a9}}]\n")
	_, err := Load("p.yaml", []byte(b.String()), nil)
	if err == nil || !strings.Contains(err.Error(), "p.yaml:1:1: the file expands to more than") {
		t.Fatalf("got %v", err)
	}
}

// Loads run concurrently (the controller loads on several goroutines) with the default
// registry and with one whose types change between loads: the schema of a registry follows
// the types registered in it.
func TestLoadConcurrentRegistries(t *testing.T) {
	reg := steps.NewRegistry()
	reg.Register(steps.Definition{Type: "First", New: func() steps.Step { return nil }})
	src := func(typ string) []byte {
		return []byte("name: x\nstages:\n  - id: s\n    steps: [{id: a, type: " + typ + ", with: {any: 1}}]\n")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, typ := reg, "First"
			if i%2 == 0 {
				r, typ = steps.Default, "Noop"
			}
			if _, err := Load("p.yaml", src(typ), r); err != nil && typ == "First" {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	reg.Register(steps.Definition{Type: "Second", New: func() steps.Step { return nil }})
	if _, err := Load("p.yaml", src("Second"), reg); err != nil {
		t.Fatalf("a type registered after the first load: %v", err)
	}
	if _, err := Load("p.yaml", src("Third"), reg); err == nil || !strings.Contains(err.Error(), `p.yaml:4:27: stages[0].steps[0].type: unknown step type "Third"`) {
		t.Fatalf("unknown type: %v", err)
	}
}

// A key given twice in a step, a trigger filter or a promotion environment names the line of
// the first one (the walker said only "duplicate key").
func TestLoadDuplicateKeyNamesTheFirst(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"step", "name: x\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Noop\n        id: b\n",
			"p.yaml:7:9: stages[0].steps[0].id: set twice (first at line 5)"},
		{"trigger filter", "name: x\ntriggers:\n  - push:\n      repo: a/b\n      repo: c/d\nstages:\n  - id: s\n    steps: [{id: a, type: Noop}]\n",
			"p.yaml:5:7: triggers[0].push.repo: set twice (first at line 4)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loadFails(t, tc.src, tc.want)
		})
	}
}

// loadFails loads src as p.yaml, which must fail with exactly the error want; it returns it.
func loadFails(t *testing.T, src, want string) error {
	t.Helper()
	_, err := Load("p.yaml", []byte(src), nil)
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	return err
}
