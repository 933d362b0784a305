package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestRunsCursor: prflow runs --limit N says how to get the next page (the server's cursor),
// --cursor lists it (the older runs, none twice), a garbled cursor is refused with the
// server's reason, and --cursor with --watch is refused.
func TestRunsCursor(t *testing.T) {
	e := newTruthEnv(t)
	p := e.pipeline(t, "name: paged\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n")
	var ids []string
	for range 3 {
		ids = append(ids, e.start(t, p, "-f"))
	}
	out, err := run(t, append([]string{"runs", "--limit", "2", "--pipeline", "paged"}, e.cli...)...)
	m := regexp.MustCompile(`more runs: prflow runs --cursor (\S+)`).FindStringSubmatch(out)
	if err != nil || m == nil || !strings.Contains(out, ids[2]) || !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) {
		t.Fatalf("first page: %v\n%s", err, out)
	}
	out, err = run(t, append([]string{"runs", "--limit", "2", "--pipeline", "paged", "--cursor", m[1]}, e.cli...)...)
	if err != nil || !strings.Contains(out, ids[0]) || strings.Contains(out, ids[1]) || strings.Contains(out, "more runs") {
		t.Fatalf("second page: %v\n%s", err, out)
	}
	if out, err := run(t, append([]string{"runs", "--cursor", "nonsense"}, e.cli...)...); err == nil || !strings.Contains(err.Error()+out, `bad cursor "nonsense"`) {
		t.Fatalf("garbled cursor: %v\n%s", err, out)
	}
	if out, err := run(t, append([]string{"runs", "--cursor", m[1], "-w"}, e.cli...)...); err == nil || !strings.Contains(err.Error(), "--watch") {
		t.Fatalf("--cursor with --watch: %v\n%s", err, out)
	}
}
