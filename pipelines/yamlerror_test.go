package pipelines

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prflow/prflow/steps"
)

// yaml.v3 reports a syntax error at the line where the enclosing block began, often lines
// above the mistake; Load reports the mistake's own line, and says "YAML" once.
func TestLoadYAMLSyntaxErrorLine(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      string
	}{
		{"bad indentation", "name: x\nstages:\n  - id: a\n    steps:\n      - id: s\n        type: Wait\n       with: {duration: 1s}\n", "p.yaml:7: YAML: did not find expected '-' indicator"},
		{"list item at the wrong level", "name: x\nstages:\n  - id: a\n    steps:\n      - {id: s, type: Noop}\n    - {id: t, type: Noop}\n", "p.yaml:6: YAML: did not find expected key"},
		{"unclosed flow sequence", "name: x\nstages: [\n", "p.yaml:2: YAML: did not find expected node content"},
		{"tab", "name: x\nstages:\n  - id: a\n\tsteps: []\n", "p.yaml:4: YAML: found a tab character that violates indentation"},
		{"mapping value in a plain scalar", "name: x\ndescription: a: b\n", "p.yaml:2: YAML: mapping values are not allowed in this context"},
		{"unknown anchor", "name: x\nstages: *nope\n", "p.yaml:2: YAML: unknown anchor 'nope' referenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("p.yaml", []byte(tc.src), steps.Default)
			var le *LoadError
			if !errors.As(err, &le) || len(le.Errs) != 1 {
				t.Fatalf("want one problem, got %v", err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if strings.Contains(le.Errs[0].Msg, "yaml:") || strings.Contains(le.Errs[0].Msg, "line ") {
				t.Errorf("doubled prefix: %v", err)
			}
		})
	}
}

// A long file (the bisection parses it a few times, not once per line) with the mistake near
// its end, after multi-line flow sequences that are fine: the line is still the mistake's.
func TestSyntaxErrorLineInALongFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\nvariables:\n")
	for i := 0; i < 8000; i++ {
		if i%1000 == 0 {
			b.WriteString("  list" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + itoa(i) + ": [a,\n    b]\n")
			continue
		}
		b.WriteString("  v" + itoa(i) + ": value\n")
	}
	b.WriteString("   bad: indentation\n  after: 1\n")
	src := b.String()
	if len(src) > maxBisect {
		t.Fatalf("%d bytes: longer than SyntaxError bisects", len(src))
	}
	want := strings.Count(src[:strings.Index(src, "   bad:")], "\n") + 1
	_, err := Load("p.yaml", []byte(src), steps.Default)
	var le *LoadError
	if !errors.As(err, &le) || len(le.Errs) != 1 || le.Errs[0].Line != want {
		t.Fatalf("got %v, want the error at line %d", err, want)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
