package steps

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
)

func TestRevisionGateSources(t *testing.T) {
	update := Prior{ID: "update", Type: "UpdateReleaseRepo", Outputs: map[string]any{"connector": "release", "repo": "acme/release"}}
	revert := Prior{ID: "revert", Type: "RevertPR", Outputs: map[string]any{"connector": "other", "repo": "acme/other"}}
	merge := Prior{ID: "merge", Type: "MergePR", Outputs: map[string]any{"commitId": strings.Repeat("a", 40)}}
	cases := []struct {
		name            string
		in              map[string]any
		priors          []Prior
		connector, repo string
		err             string
	}{
		{"from UpdateReleaseRepo", nil, []Prior{update, merge}, "release", "acme/release", ""},
		{"the latest PR step wins (rollback)", nil, []Prior{update, merge, revert, merge}, "other", "acme/other", ""},
		{"inputs win", map[string]any{"connector": "mine", "repo": "me/repo"}, []Prior{update, merge}, "mine", "me/repo", ""},
		{"one input, the other defaulted", map[string]any{"repo": "me/repo"}, []Prior{update}, "release", "me/repo", ""},
		{"nothing known: exact only", nil, []Prior{merge}, "", "", ""},
		{"bad input", map[string]any{"connector": []any{"x"}}, nil, "", "", "connector: want a string"},
	}
	for _, c := range cases {
		g, err := newRevisionGate(&Context{Inputs: c.in, Priors: c.priors})
		if c.err != "" {
			if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want a terminal %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || g.connector != c.connector || g.repo != c.repo || g.enabled() != (c.connector != "" && c.repo != "") {
			t.Errorf("%s: %+v %v", c.name, g, err)
		}
	}
}

func TestRevisionGateHas(t *testing.T) {
	ours, later, sibling := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	tracking := &agent.AppStatus{Source: agent.Source{TargetRevision: "main"}}
	pinnedLater := &agent.AppStatus{Source: agent.Source{TargetRevision: later}}
	g := &revisionGate{connector: "release", repo: "acme/release",
		known:    map[string]bool{pairKey(ours, later): true, pairKey(ours, sibling): false},
		notFound: map[string]bool{}}
	cases := []struct {
		name      string
		g         *revisionGate
		st        *agent.AppStatus
		want, got string
		pass      bool
		why       string
	}{
		{"exact", g, tracking, ours, ours, true, ""},
		{"no expectation", g, tracking, "", later, true, ""},
		{"later commit containing ours", g, tracking, ours, later, true, ""},
		{"sibling commit", g, tracking, ours, sibling, false, "does not contain " + ours[:12]},
		{"never looked up", g, tracking, ours, strings.Repeat("d", 40), false, "does not contain"},
		{"unknown revision", g, tracking, ours, "", false, ""},
		{"pinned app: exact only", g, pinnedLater, ours, later, false, "pinned to " + later[:12]},
		{"pinned app at its commit", g, pinnedLater, later, later, true, ""},
		{"no gate: exact only", nil, tracking, ours, later, false, ""},
	}
	for _, c := range cases {
		if got := c.g.has(c.st, c.want, c.got); got != c.pass {
			t.Errorf("%s: has = %v, want %v", c.name, got, c.pass)
		}
		if !c.pass {
			if why := c.g.why(c.st, c.want, c.got); !strings.Contains(why, c.why) || (c.why == "" && why != "") {
				t.Errorf("%s: why %q, want %q", c.name, why, c.why)
			}
		}
	}
	g.notFound[sibling] = true
	if why := g.why(tracking, ours, sibling); !strings.Contains(why, "is not a commit of acme/release") {
		t.Errorf("not found: why %q", why)
	}
}

func TestGitOpsSyncRevisionInputsAtLoad(t *testing.T) {
	def, ok := Default.Lookup("GitOpsSync")
	if !ok {
		t.Fatal("GitOpsSync not registered")
	}
	for _, c := range []struct {
		in  map[string]any
		err string
	}{
		{map[string]any{"connector": "release", "repo": "acme/release"}, ""},
		{map[string]any{"connector": "${{ inputs.connector }}"}, ""},
		{map[string]any{"connector": map[string]any{"name": "release"}}, "connector: want a string"},
		{map[string]any{"repo": []any{"acme/release"}}, "repo: want a string"},
	} {
		err := def.Validate(c.in)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Validate(%v) = %v, want %q", c.in, err, c.err)
		}
	}
}
