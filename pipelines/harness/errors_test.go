package harness

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

// posOf is the 1-based line and column of token on the first line of src holding lineMark.
func posOf(t *testing.T, src, lineMark, token string) (int, int) {
	t.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, lineMark) {
			c := strings.Index(l, token)
			if c < 0 {
				t.Fatalf("line %d %q has no %q", i+1, l, token)
			}
			return i + 1, c + 1
		}
	}
	t.Fatalf("no line with %q in\n%s", lineMark, src)
	return 0, 0
}

func loadErrs(t *testing.T, err error) []pipelines.FieldError {
	t.Helper()
	var le *pipelines.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("err %v, want a *pipelines.LoadError", err)
	}
	return le.Errs
}

// wantErr is one expected problem: at the position of token on the line holding mark, with a
// Harness path and message holding the given texts.
type wantErr struct {
	mark, token string
	path, msg   string
}

func checkErrs(t *testing.T, src string, got []pipelines.FieldError, want []wantErr) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(got), len(want), joinErrs(got))
	}
	for i, w := range want {
		line, col := posOf(t, src, w.mark, w.token)
		if i >= len(got) {
			t.Errorf("missing problem %d at %d:%d (%s %s)", i, line, col, w.path, w.msg)
			continue
		}
		g := got[i]
		if g.File != "p.yaml" || g.Line != line || g.Col != col || !strings.Contains(g.Path, w.path) || !strings.Contains(g.Msg, w.msg) {
			t.Errorf("problem %d is\n  %v\nwant p.yaml:%d:%d: …%s…: …%s…", i, g, line, col, w.path, w.msg)
		}
	}
}

func joinErrs(list []pipelines.FieldError) string {
	var b strings.Builder
	for _, e := range list {
		fmt.Fprintf(&b, "  %v\n", e)
	}
	return b.String()
}

// One conversion reports every problem of the file: the ones the converter finds (an
// unsupported step type, a misspelt field) and the ones the native loader finds in the
// converted pipeline (a count that is not a number), each at the Harness field's own
// line:col, sorted by position.
func TestEveryErrorOfAFileAtOnce(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		name  string
		parts map[string]string
		want  []wantErr
	}{
		{
			name: "converter and native problems together",
			parts: map[string]string{"STEPS": `- step:
    identifier: approve
    name: approve
    type: HarnessApproval
    spec:
      approvalMessage: ok
      approvers:
        userGroups: [rm]
        minimumCount: one
- step:
    identifier: update
    name: update
    type: GitOpsUpdateReleaseRepo
    spec:
      prTitel: Bump
- step: {identifier: sh, name: sh, type: ShellScript, spec: {}}`},
			want: []wantErr{
				{"minimumCount: one", "one", "steps[1].step.spec.approvers.minimumCount", "whole number"},
				{"prTitel: Bump", "prTitel", "steps[2].step.spec.prTitel", `did you mean "prTitle"?`},
				{"ShellScript", "ShellScript", "steps[3].step.type", `step type "ShellScript"`},
			},
		},
		{
			name: "three native problems in three steps",
			parts: map[string]string{"SPEC": "mergeStrategy: fastforward", "STEPS": `- step: {identifier: w, name: w, type: Wait, spec: {duration: soon}}
- step:
    identifier: approve
    name: approve
    type: HarnessApproval
    spec:
      approvers:
        userGroups: [rm]
        minimumCount: one`},
			want: []wantErr{
				{"mergeStrategy: fastforward", "fastforward", "steps[0].step.spec.mergeStrategy", "fastforward"},
				{"duration: soon", "soon", "steps[1].step.spec.duration", "soon"},
				{"minimumCount: one", "one", "steps[2].step.spec.approvers.minimumCount", "whole number"},
			},
		},
		{
			name: "a missing input, a bad timeout, a step id used twice",
			parts: map[string]string{"STEP": "timeout: 10 minutes", "STEPS": `- step:
    identifier: w
    name: w
    type: Wait
    spec:
      mergeStrategy: squash
- step: {identifier: merge, name: again, type: Wait, spec: {duration: 1s}}`},
			want: []wantErr{
				{"timeout: 10 minutes", "10 minutes", "steps[0].step.timeout", "10 minutes"},
				{"identifier: w", "identifier", "steps[1].step.spec.duration", "required"},
				{"mergeStrategy: squash", "mergeStrategy", "steps[1].step.spec.mergeStrategy", "not supported"},
				{"identifier: merge, name: again", "{identifier", "steps[2].step", `duplicate step id "merge"`},
			},
		},
		{
			// A step left out is reported once, not again at each expression reading it.
			name: "a refused step and a reference to it",
			parts: map[string]string{"STEPS": `- step: {identifier: sh, name: sh, type: ShellScript, spec: {}}
- step: {identifier: r, name: r, type: RevertPR, spec: {commitId: <+execution.steps.sh.output.outputVariables.sha>}}`},
			want: []wantErr{{"ShellScript", "ShellScript", "steps[1].step.type", `step type "ShellScript"`}},
		},
		{
			// Without that step the same reference is an error at the field.
			name:  "a reference to no step",
			parts: map[string]string{"STEPS": `- step: {identifier: r, name: r, type: RevertPR, spec: {commitId: <+execution.steps.sh.output.outputVariables.sha>}}`},
			want:  []wantErr{{"type: RevertPR", "commitId:", "steps[1].step.spec.commitId", `no step "sh"`}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fill(base, tc.parts)
			_, err := Convert("p.yaml", []byte(src), Options{Map: m})
			checkErrs(t, src, loadErrs(t, err), tc.want)
		})
	}
}

// An unknown Harness field close to a known one is a likely typo: the error says which field
// was meant, and --allow-unsupported does not leave it out (that would silently drop the
// value); a field that resembles nothing stays "not supported" and waivable.
func TestUnknownFieldDidYouMean(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		name  string
		parts map[string]string
		mark  string
		path  string
		hint  string // "" when no suggestion is expected
	}{
		{"step spec", map[string]string{"STEPS": "- step: {identifier: u, name: u, type: GitOpsUpdateReleaseRepo, spec: {prTitel: Bump}}"},
			"prTitel", "pipeline.stages[0].stage.spec.execution.steps[1].step.spec.prTitel", `did you mean "prTitle"?`},
		{"step field", map[string]string{"STEP": "timout: 10m"}, "timout", "pipeline.stages[0].stage.spec.execution.steps[0].step.timout", `did you mean "timeout"?`},
		{"stage field", map[string]string{"STAGE": "failureStrategy: []"}, "failureStrategy", "pipeline.stages[0].stage.failureStrategy", `did you mean "failureStrategies"?`},
		{"pipeline field", map[string]string{"PIPE": "notificationRule: []"}, "notificationRule", "pipeline.notificationRule", `did you mean "notificationRules"?`},
		{"approvers", map[string]string{"STEPS": "- step: {identifier: a, name: a, type: HarnessApproval, spec: {approvers: {userGroups: [rm], minimumCnt: 1}}}"},
			"minimumCnt", "pipeline.stages[0].stage.spec.execution.steps[1].step.spec.approvers.minimumCnt", `did you mean "minimumCount"?`},
		{"nothing close", map[string]string{"SPEC": "foo: bar"}, "foo: bar", "pipeline.stages[0].stage.spec.execution.steps[0].step.spec.foo", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fill(base, tc.parts)
			_, err := Convert("p.yaml", []byte(src), Options{Map: m})
			errs := loadErrs(t, err)
			if len(errs) != 1 || errs[0].Path != tc.path {
				t.Fatalf("want one problem at %s, got:\n%s", tc.path, joinErrs(errs))
			}
			var key string
			for _, f := range strings.Split(tc.path, ".") {
				key = f
			}
			line, col := posOf(t, src, tc.mark, key)
			if errs[0].Line != line || errs[0].Col != col {
				t.Errorf("at %d:%d, want %d:%d", errs[0].Line, errs[0].Col, line, col)
			}
			res, err2 := Convert("p.yaml", []byte(src), Options{Map: m, AllowUnsupported: true})
			if tc.hint == "" {
				if strings.Contains(errs[0].Msg, "did you mean") {
					t.Errorf("suggestion for a field like no other: %v", errs[0])
				}
				if err2 != nil || len(res.Warnings) != 1 {
					t.Errorf("with AllowUnsupported: %v, warnings %v; want one warning", err2, res.Warnings)
				}
				return
			}
			if !strings.Contains(errs[0].Msg, tc.hint) {
				t.Errorf("%v lacks %s", errs[0], tc.hint)
			}
			if err2 == nil || !strings.Contains(err2.Error(), tc.hint) {
				t.Errorf("with AllowUnsupported a likely typo must still fail: %v", err2)
			}
		})
	}
}

// A mapping with a key given twice keeps only one value in YAML: the converter says so instead
// of dropping the first silently.
func TestDuplicateHarnessKey(t *testing.T) {
	src := fill(base, map[string]string{"SPEC": "mergeStrategy: squash\nmergeStrategy: merge"})
	_, err := Convert("p.yaml", []byte(src), Options{Map: testMap(t)})
	checkErrs(t, src, loadErrs(t, err), []wantErr{{"mergeStrategy: merge", "mergeStrategy", "spec.mergeStrategy", "duplicate key"}})
}

// A YAML syntax error in the map file is reported at the line where the mistake is, once
// prefixed: "map.yaml:5: YAML: …", not "map.yaml: YAML: yaml: line 2: …".
func TestMapFileSyntaxError(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		msg       string
	}{
		{"bad indentation deep in a mapping", "services:\n  web:\n    releaseRepo:\n      connector: release\n     repo: acme/release\n", 5, "did not find expected key"},
		{"list item at the wrong level", "gitOpsClusters:\n  a: {name: a, agent: eu}\nenvironments:\n  dev:\n    gitOpsClusters:\n      - a\n    - b\n", 7, "did not find expected key"},
		{"unclosed flow sequence", "agents:\n  x: eu\nenvironments:\n  dev: {gitOpsClusters: [a, b}\n", 4, "did not find expected ',' or ']'"},
		{"tab indentation", "agents:\n  x: eu\n  y: eu\n\tz: eu\n", 4, "tab character"},
		{"a key without a colon", "services:\n  web:\n    releaseRepo: {connector: c, repo: r, path: p}\n    justtext\n    variables: {}\n", 4, "could not find expected ':'"},
		{"unclosed quote", "agents:\n  x: \"eu\n  y: eu\n", 2, "found unexpected end of stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMap("map.yaml", []byte(tc.src))
			errs := loadErrs(t, err)
			if len(errs) != 1 {
				t.Fatalf("want one problem, got:\n%s", joinErrs(errs))
			}
			e := errs[0]
			if e.Line != tc.line || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %q, want line %d and %q", e.Error(), tc.line, tc.msg)
			}
			if !strings.HasPrefix(e.Msg, "YAML: ") || strings.Contains(e.Msg, "yaml:") || strings.Contains(e.Msg, "line ") {
				t.Errorf("%q: want one YAML: prefix and the line only in file:line", e.Error())
			}
		})
	}
}

// Constructs the converter used to drop without a word (found auditing it for issue 32):
// strict conversion refuses each at its field.
func TestSilentDropsRefused(t *testing.T) {
	m := testMap(t)
	twoStages := "- stage: {identifier: a, name: a, type: Custom, spec: {execution: {steps: [{step: {identifier: w, type: Wait, spec: {duration: 1s}}}]}}}\n" +
		"  parallel: []"
	for _, tc := range []struct {
		name  string
		src   string
		parts map[string]string
		want  wantErr
	}{
		{name: "deployToAll as a runtime input", src: strings.Replace(base, "deployToAll: true", "deployToAll: <+input>", 1),
			want: wantErr{"deployToAll: <+input>", "<+input>", "spec.environment.deployToAll", "deployToAll"}},
		{name: "a stage entry that is also a parallel block", src: strings.Replace(base, "  stages:\n", "  stages:\n    "+strings.ReplaceAll(twoStages, "\n", "\n    ")+"\n", 1),
			want: wantErr{"  parallel: []", "parallel", "pipeline.stages[0].parallel", "one of stage, parallel"}},
		{name: "a step entry that is also a step group", parts: map[string]string{"STEPS": "- step: {identifier: w, type: Wait, spec: {duration: 1s}}\n  stepGroup: {identifier: g, steps: []}"},
			want: wantErr{"stepGroup: {identifier: g", "stepGroup", "steps[1].stepGroup", "one of step, stepGroup, parallel"}},
		{name: "an exclude entry that is not a mapping", parts: map[string]string{"STAGE": "strategy:\n  matrix:\n    app: [a, b]\n    exclude: [a]"},
			want: wantErr{"exclude: [a]", "a]", "strategy.matrix.exclude[0]", "want {axis: value"}},
		{name: "maxConcurrency that is not a number", parts: map[string]string{"STAGE": "strategy:\n  matrix:\n    app: [a, b]\n    maxConcurrency: two"},
			want: wantErr{"maxConcurrency: two", "two", "strategy.matrix.maxConcurrency", "whole number"}},
		{name: "an approver group that is not a name", parts: map[string]string{"STEPS": "- step: {identifier: a, type: HarnessApproval, spec: {approvers: {userGroups: [[rm]], minimumCount: 1}}}"},
			want: wantErr{"userGroups: [[rm]]", "[rm]]", "approvers.userGroups[0]", "want a user group name"}},
		{name: "a retry count that is not a number", parts: map[string]string{"STEP": "failureStrategies:\n  - onFailure: {errors: [AllErrors], action: {type: Retry, spec: {retryCount: [3]}}}"},
			want: wantErr{"retryCount: [3]", "[3]", "action.spec.retryCount", "whole number"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if src == "" {
				src = fill(base, tc.parts)
			} else {
				src = fill(src, nil)
			}
			_, err := Convert("p.yaml", []byte(src), Options{Map: m})
			checkErrs(t, src, loadErrs(t, err), []wantErr{tc.want})
		})
	}
}

// A stage matrix's maxConcurrency: N runs the combinations in waves of N (the limit holds;
// before, any value but 1 ran every combination at once).
func TestStageMatrixMaxConcurrency(t *testing.T) {
	for _, tc := range []struct {
		max  string
		want string // each stage's needs
	}{
		{"", "dev_0:[] dev_1:[] dev_2:[] dev_3:[] dev_4:[]"},
		{"maxConcurrency: 1", "dev_0:- dev_1:- dev_2:- dev_3:- dev_4:-"},
		{"maxConcurrency: 2", "dev_0:[] dev_1:[] dev_2:[dev_0 dev_1] dev_3:[dev_0 dev_1] dev_4:[dev_2 dev_3]"},
		{"maxConcurrency: 5", "dev_0:[] dev_1:[] dev_2:[] dev_3:[] dev_4:[]"},
	} {
		src := fill(base, map[string]string{"STAGE": "strategy:\n  matrix:\n    app: [a, b, c, d, e]\n    " + tc.max})
		res, err := Convert("p.yaml", []byte(src), Options{Map: testMap(t)})
		if err != nil {
			t.Fatalf("%s: %v", tc.max, err)
		}
		var got []string
		for _, s := range res.Pipeline.Stages {
			needs := "-"
			if s.NeedsSet {
				needs = fmt.Sprint(s.Needs)
			}
			got = append(got, s.ID+":"+needs)
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%q: %s, want %s", tc.max, g, tc.want)
		}
	}
}
