package harness

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

func testMap(t *testing.T) *Map {
	t.Helper()
	m, err := LoadMap("testdata/map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRewriteExpr(t *testing.T) {
	for _, tc := range []struct{ in, want, problem string }{
		{in: "<+pipeline.stages.deploy.spec.execution.steps.updateReleaseRepo.updateReleaseRepoOutcome.commitId>",
			want: "<+stages.deploy.steps.updateReleaseRepo.outputs.commitId>"},
		{in: "<+execution.steps.mergePR.mergePROutcome.commitId>", want: "<+steps.mergePR.outputs.commitId>"},
		{in: "PR <+execution.steps.u.updateReleaseRepoOutcome.prNumber> at <+execution.steps.u.updateReleaseRepoOutcome.prlink>",
			want: "PR <+steps.u.outputs.prNumber> at <+steps.u.outputs.prlink>"},
		{in: "<+execution.steps.g.steps.fetch.GITOPS_LINKED_APPS_OUTCOME.apps>", want: "<+steps.g_fetch.outputs.apps>"},
		{in: "<+pipeline.stages.s.spec.execution.rollbackSteps.revert.revertPROutcome.ref>", want: "<+stages.s.steps.revert.outputs.ref>"},
		{in: "<+execution.steps.x.output.outputVariables.y>", want: "<+steps.x.outputs.y>"},
		{in: "<+execution.steps.x.status> == \"Success\"", want: "<+steps.x.status> == \"Success\""},
		{in: "<+pipeline.variables.apps.split(',')>", want: "<+pipeline.variables.apps.split(',')>"},
		{in: "<+stage.variables.v.toLowerCase()>", want: "<+stage.variables.v.toLowerCase()>"},
		{in: "envs/<+env.name>/<+cluster.name>.json", want: "envs/<+env.name>/<+cluster.name>.json"},
		{in: "<+pipeline.executionId>-<+stage.identifier>", want: "<+run.id>-<+stage.id>"},
		{in: "no expression", want: "no expression"},
		{in: "<+execution.steps.u.spec.variables.x>", problem: "reads step u's inputs (spec)"},
		{in: "<+execution.steps.u.foo>", problem: `unknown step field "foo"`},
		{in: "<+trigger.branch>", problem: `"trigger" expressions are not supported`},
		{in: "<+env.type>", problem: "prflow has no env.type"},
		{in: "<+pipeline.stages.dev.variables.x>", problem: "prflow has no pipeline.stages"},
		{in: "<+secrets.getValue(\"token\")>", problem: `unknown method "getValue"`},
	} {
		got, probs := rewriteExpr(tc.in)
		if tc.problem != "" {
			if len(probs) == 0 || !strings.Contains(strings.Join(probs, "\n"), tc.problem) {
				t.Errorf("%s: problems %q, want one with %q", tc.in, probs, tc.problem)
			}
			continue
		}
		if got != tc.want || len(probs) > 0 {
			t.Errorf("%s:\n got %s %q\nwant %s", tc.in, got, probs, tc.want)
		}
	}
}

func TestParseInput(t *testing.T) {
	for _, tc := range []struct {
		in      string
		def     string
		allowed []string
		problem string
	}{
		{in: "<+input>"},
		{in: "<+input>.default(1.4.2)", def: "1.4.2"},
		{in: `<+input>.default("a,b")`, def: "a,b"},
		{in: "<+input>.allowedValues(dev,prod).default(dev)", def: "dev", allowed: []string{"dev", "prod"}},
		{in: `<+input>.default("x) y")`, def: "x) y"},
		{in: "<+input>.executionInput()", problem: "executionInput"},
		{in: "<+input>.regex(^v)", problem: "regex"},
		{in: "x-<+input>", problem: "whole value"},
	} {
		ri, ok := parseInput(tc.in)
		if !ok {
			t.Fatalf("%s: not an input", tc.in)
		}
		if tc.problem != "" {
			if !strings.Contains(strings.Join(ri.probs, " "), tc.problem) {
				t.Errorf("%s: problems %q, want %q", tc.in, ri.probs, tc.problem)
			}
			continue
		}
		def := ""
		if ri.def != nil {
			def = *ri.def
		}
		if def != tc.def || !reflect.DeepEqual(ri.allowed, tc.allowed) || len(ri.probs) > 0 {
			t.Errorf("%s: default %q allowed %q problems %q", tc.in, def, ri.allowed, ri.probs)
		}
	}
}

// The converted text is what runs store: it must load with the plain native loader, without
// the map, and keep the converted structure.
func TestConvertedSourceLoadsWithoutMap(t *testing.T) {
	m := testMap(t)
	for _, f := range []string{"approval.yaml", "rollback.yaml", "appset.yaml", "matrix.yaml"} {
		t.Run(f, func(t *testing.T) {
			src, err := os.ReadFile("testdata/" + f)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Convert(f, src, Options{Map: m, Inputs: map[string]any{"tag": "1", "image": "x", "apps": "shop-a,shop-b"}})
			if err != nil {
				t.Fatalf("convert: %v", err)
			}
			if len(res.Warnings) > 0 && f != "matrix.yaml" {
				t.Errorf("warnings: %v", res.Warnings)
			}
			p, err := pipelines.Load(f, res.Native, steps.Default)
			if err != nil {
				t.Fatalf("native load: %v\n%s", err, res.Native)
			}
			if p.Hash != res.Pipeline.Hash || len(p.Stages) == 0 {
				t.Errorf("reloaded pipeline differs")
			}
		})
	}
	src, _ := os.ReadFile("testdata/approval.yaml")
	if _, err := pipelines.Load("approval.yaml", src, steps.Default); err == nil || !strings.Contains(err.Error(), "--harness-map") {
		t.Errorf("native loader on Harness YAML: %v, want a hint to --harness-map", err)
	}
}

func TestConvertStructure(t *testing.T) {
	m := testMap(t)
	src, _ := os.ReadFile("testdata/rollback.yaml")
	res, err := Convert("rollback.yaml", src, Options{Map: m})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Pipeline
	dev := p.Stage("dev")
	var ids, rb []string
	for _, s := range dev.Steps {
		ids = append(ids, s.ID+":"+s.Type)
	}
	for _, s := range dev.Rollback {
		rb = append(rb, s.ID+":"+s.Type)
	}
	if want := []string{"release_updateReleaseRepo:UpdateReleaseRepo", "release_mergePR:MergePR", "verify:Approval"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("steps %v, want %v", ids, want)
	}
	if want := []string{"revertPR:RevertPR", "mergeRevertPR:MergePR"}; !reflect.DeepEqual(rb, want) {
		t.Errorf("rollback steps %v, want %v", rb, want)
	}
	if dev.OnFailure == nil || dev.OnFailure.Action != pipelines.ActRollbackStage {
		t.Errorf("stage onFailure %+v, want rollbackStage", dev.OnFailure)
	}
	if !reflect.DeepEqual(dev.Clusters, []string{"dev-eu"}) || dev.Environment != "dev" {
		t.Errorf("environment %q clusters %v", dev.Environment, dev.Clusters)
	}
	if e := p.Env("dev"); e == nil || len(e.Clusters) != 1 || e.Clusters[0].Agent != "eu" {
		t.Errorf("environment from the map: %+v", e)
	}
	with := dev.Rollback[0].With.Static()
	if with["commitId"] != "<+stages.dev.steps.release_mergePR.outputs.commitId>" || with["repo"] != "acme/release" || with["connector"] != "release" {
		t.Errorf("RevertPR inputs: %v", with)
	}
	if len(p.Inputs) != 1 || p.Inputs[0].Name != "tag" || p.Inputs[0].Default != "9.9.9" || p.Inputs[0].Required {
		t.Errorf("inputs %+v", p.Inputs)
	}
}

func TestFailureStrategies(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		action string
		want   pipelines.FailureStrategy
	}{
		{"{type: StageRollback}", pipelines.FailureStrategy{Action: "rollbackStage"}},
		{"{type: PipelineRollback}", pipelines.FailureStrategy{Action: "rollbackPipeline"}},
		{"{type: Ignore}", pipelines.FailureStrategy{Action: "ignore"}},
		{"{type: MarkAsSuccess}", pipelines.FailureStrategy{Action: "ignore"}},
		{"{type: Abort}", pipelines.FailureStrategy{Action: "fail"}},
		{"{type: Retry, spec: {retryCount: 3, retryIntervals: [10s], onRetryFailure: {action: {type: StageRollback}}}}",
			pipelines.FailureStrategy{Action: "retry", Retries: 3, Backoff: 10e9, Then: "rollbackStage"}},
	} {
		src := fill(base, map[string]string{"STEP": "failureStrategies:\n  - onFailure: {errors: [AllErrors], action: " + tc.action + "}"})
		res, err := Convert("p.yaml", []byte(src), Options{Map: m})
		if err != nil {
			t.Fatalf("%s: %v", tc.action, err)
		}
		got := res.Pipeline.Stages[0].Steps[0].OnFailure
		if got == nil || got.Action != tc.want.Action || got.Retries != tc.want.Retries || got.Then != tc.want.Then ||
			(tc.want.Backoff != 0 && got.Backoff != tc.want.Backoff) {
			t.Errorf("%s: %+v, want %+v", tc.action, got, tc.want)
		}
	}
}

// base is a minimal Harness pipeline; %NAME% lines are replaced by test snippets (indented).
const base = `pipeline:
  identifier: p
  name: p
  %PIPE%
  stages:
    - stage:
        identifier: dev
        name: dev
        type: Deployment
        %STAGE%
        spec:
          deploymentType: Kubernetes
          gitOpsEnabled: true
          service: {serviceRef: web}
          environment: {environmentRef: dev, deployToAll: true}
          execution:
            steps:
              - step:
                  identifier: merge
                  name: merge
                  type: MergePR
                  %STEP%
                  spec:
                    deleteSourceBranch: true
                    %SPEC%
              %STEPS%
`

func fill(tmpl string, parts map[string]string) string {
	var out []string
	for _, l := range strings.Split(tmpl, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "%") && strings.HasSuffix(t, "%") {
			snip := parts[strings.Trim(t, "%")]
			if snip == "" {
				continue
			}
			ind := l[:len(l)-len(strings.TrimLeft(l, " "))]
			for _, s := range strings.Split(snip, "\n") {
				out = append(out, ind+s)
			}
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// Every unsupported construct is reported with its Harness path and file:line, all in one
// error; --allow-unsupported turns them into warnings.
func TestUnsupportedConstructs(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		name  string
		parts map[string]string
		mark  string // the line the problem is on holds this text
		path  string
	}{
		{"step type", map[string]string{"STEPS": "- step: {identifier: sh, name: sh, type: ShellScript, spec: {}}"}, "ShellScript",
			"pipeline.stages[0].stage.spec.execution.steps[1].step.type"},
		{"spec field", map[string]string{"SPEC": "foo: bar"}, "foo: bar", "pipeline.stages[0].stage.spec.execution.steps[0].step.spec.foo"},
		{"step field", map[string]string{"STEP": "enforce: {policySets: [x]}"}, "enforce:", "pipeline.stages[0].stage.spec.execution.steps[0].step.enforce"},
		{"unknown failure action", map[string]string{"STAGE": "failureStrategies:\n  - onFailure: {errors: [AllErrors], action: {type: ProceedWithDefaultValues}}"},
			"ProceedWithDefaultValues", "pipeline.stages[0].stage.failureStrategies[0].onFailure.action.type"},
		{"manual intervention timing out into a retry", map[string]string{"STAGE": "failureStrategies:\n  - onFailure: {errors: [AllErrors], action: {type: ManualIntervention, spec: {timeout: 1h, onTimeout: {action: {type: Retry}}}}}"},
			"ManualIntervention", "pipeline.stages[0].stage.failureStrategies[0].onFailure.action.spec.onTimeout.action.type"},
		{"specific errors", map[string]string{"STEP": "failureStrategies:\n  - onFailure:\n      errors: [Timeout]\n      action: {type: Ignore}"},
			"errors: [Timeout]", "pipeline.stages[0].stage.spec.execution.steps[0].step.failureStrategies[0].onFailure.errors"},
		{"unknown when status", map[string]string{"STEP": "when: {stageStatus: Sometimes}"}, "stageStatus: Sometimes",
			"pipeline.stages[0].stage.spec.execution.steps[0].step.when.stageStatus"},
		{"secret variable", map[string]string{"PIPE": "variables:\n  - {name: pw, type: Secret, value: account.pw}"}, "type: Secret",
			"pipeline.variables[0].type"},
		{"execution input", map[string]string{"PIPE": "variables:\n  - name: v\n    type: String\n    value: <+input>.executionInput()"}, "executionInput",
			"pipeline.variables[0].value"},
		{"trigger expression", map[string]string{"SPEC": "mergeStrategy: <+trigger.branch>"}, "trigger.branch",
			"pipeline.stages[0].stage.spec.execution.steps[0].step.spec.mergeStrategy"},
		{"CI properties", map[string]string{"PIPE": "properties:\n  ci: {codebase: {build: <+input>}}"}, "properties:", "pipeline.properties"},
		{"step group rollback", map[string]string{"STEPS": "- stepGroup:\n    identifier: g\n    name: g\n    steps:\n      - step: {identifier: w, name: w, type: Wait, spec: {duration: 1s}}\n    rollbackSteps: []"},
			"rollbackSteps: []", "pipeline.stages[0].stage.spec.execution.steps[1].stepGroup.rollbackSteps"},
		{"step matrix repeat", map[string]string{"STEP": "strategy: {repeat: {times: 2}}"}, "repeat", "pipeline.stages[0].stage.spec.execution.steps[0].step.strategy.repeat"},
		{"multi-service stage", map[string]string{"STAGE": "delegateSelectors: [a, b]"}, "delegateSelectors", "pipeline.stages[0].stage.delegateSelectors"},
		{"sync rollout behaviour", map[string]string{"STEPS": "- step:\n    identifier: s\n    name: s\n    type: GitOpsSync\n    spec: {autoPromoteRolloutBehavior: resume, applicationsList: [{applicationName: a, agentId: x}]}"},
			"autoPromoteRolloutBehavior", "pipeline.stages[0].stage.spec.execution.steps[1].step.spec.autoPromoteRolloutBehavior"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fill(base, tc.parts)
			line := 0
			for i, l := range strings.Split(src, "\n") {
				if strings.Contains(l, tc.mark) {
					line = i + 1
					break
				}
			}
			if line == 0 {
				t.Fatalf("marker %q not in source", tc.mark)
			}
			_, err := Convert("p.yaml", []byte(src), Options{Map: m})
			var le *pipelines.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err %v, want a LoadError\n%s", err, src)
			}
			found := false
			for _, fe := range le.Errs {
				found = found || (fe.Line == line && fe.Path == tc.path && fe.File == "p.yaml")
			}
			if !found {
				t.Errorf("no error at p.yaml:%d %s; got:\n%v", line, tc.path, err)
			}
			res, err := Convert("p.yaml", []byte(src), Options{Map: m, AllowUnsupported: true})
			if err != nil {
				t.Fatalf("with AllowUnsupported: %v", err)
			}
			warned := false
			for _, w := range res.Warnings {
				warned = warned || (w.Line == line && w.Path == tc.path)
			}
			if !warned {
				t.Errorf("no warning at line %d %s: %v", line, tc.path, res.Warnings)
			}
		})
	}
}

// All problems come in one error, and a missing map entry is not waived by AllowUnsupported.
func TestAllProblemsAtOnce(t *testing.T) {
	m := testMap(t)
	src := fill(base, map[string]string{"SPEC": "foo: 1\nbar: 2", "STEPS": "- step: {identifier: sh, name: sh, type: ShellScript}"})
	src = strings.Replace(src, "serviceRef: web", "serviceRef: nosuch", 1)
	_, err := Convert("p.yaml", []byte(src), Options{Map: m})
	var le *pipelines.LoadError
	if !errors.As(err, &le) || len(le.Errs) < 4 {
		t.Fatalf("want ≥ 4 problems in one error, got %v", err)
	}
	for _, want := range []string{"spec.foo", "spec.bar", "ShellScript", `service "nosuch" is not in the mapping file testdata/map.yaml`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	_, err = Convert("p.yaml", []byte(src), Options{Map: m, AllowUnsupported: true})
	if err == nil || !strings.Contains(err.Error(), "nosuch") || strings.Contains(err.Error(), "ShellScript") {
		t.Errorf("with AllowUnsupported: %v, want only the missing service", err)
	}
	if _, err := Convert("p.yaml", []byte(fill(base, nil)), Options{}); err == nil || !strings.Contains(err.Error(), "--harness-map") {
		t.Errorf("without a map: %v", err)
	}
}

func TestMatrix(t *testing.T) {
	m := testMap(t)
	src, _ := os.ReadFile("testdata/matrix.yaml")
	res, err := Convert("matrix.yaml", src, Options{Map: m, Inputs: map[string]any{"apps": "x,y,z"}})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Pipeline
	var ids []string
	for _, s := range p.Stages {
		ids = append(ids, fmt.Sprintf("%s%v", s.ID, s.Needs))
	}
	if want := []string{"dev[]", "report_0[dev]", "report_1[dev]", "report_2[dev]"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("stages %v, want %v", ids, want)
	}
	if n := p.Stage("report_1").Steps[0].Name; n != "soak y" {
		t.Errorf("matrix value in a name: %q", n)
	}
	var regex []any
	for _, s := range p.Stage("dev").Steps {
		if strings.HasPrefix(s.ID, "syncEach_") {
			regex = append(regex, s.With.Static()["applicationRegex"])
		}
	}
	if want := []any{"^x$", "^y$", "^z$"}; !reflect.DeepEqual(regex, want) {
		t.Errorf("matrix steps' applicationRegex %v, want %v", regex, want)
	}
	// Without --set the default (one app) is used; an input with no default must be given.
	res, err = Convert("matrix.yaml", src, Options{Map: m})
	if err != nil || res.Pipeline.Stage("report_1") != nil || res.Pipeline.Stage("report_0") == nil {
		t.Errorf("default input: %v", err)
	}
	nodef := strings.Replace(string(src), "<+input>.default(shop-a)", "<+input>", 1)
	if _, err := Convert("matrix.yaml", []byte(nodef), Options{Map: m}); err == nil || !strings.Contains(err.Error(), "--set apps=") {
		t.Errorf("missing input for a matrix axis: %v", err)
	}
	if _, err := Convert("matrix.yaml", []byte(nodef), Options{Map: m, Validate: true}); err != nil {
		t.Errorf("validate mode: %v", err)
	}
}

func TestMapErrors(t *testing.T) {
	src := `services:
  web:
    releaseRepo: {connector: release, path: x.json}
    deploymentRepo: {}
    colour: blue
environments:
  dev:
    gitOpsClusters: [nope]
gitOpsClusters:
  c1: {name: c1}
`
	_, err := ParseMap("m.yaml", []byte(src))
	for _, want := range []string{
		"m.yaml:3:18: services.web.releaseRepo.repo: required",
		"m.yaml:4:21: services.web.deploymentRepo: give applicationSet",
		"m.yaml:5:5: services.web.colour: unknown field",
		`m.yaml:8:22: environments.dev.gitOpsClusters[0]: unknown GitOps cluster "nope"`,
		"m.yaml:10:7: gitOpsClusters.c1.agent: required",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("map error lacks %q:\n%v", want, err)
		}
	}
}

// Conditions, runtime inputs in step fields, parallel stages and what the map adds.
func TestWhenInputsParallelAndMapValues(t *testing.T) {
	m, err := ParseMap("m.yaml", []byte(`services:
  web:
    releaseRepo: {connector: release, repo: acme/release, path: "envs/<+serviceVariables.folder>/values.yaml"}
    variables: {team: shop, folder: "<+pipeline.variables.target>-<+env.name>"}
environments:
  dev:
    gitOpsClusters: [c1]
    variables: {replicas: 1}
    overrides: {logLevel: debug}
gitOpsClusters:
  c1: {name: dev-eu, agent: eu}
`))
	if err != nil {
		t.Fatal(err)
	}
	src := `pipeline:
  identifier: p
  variables:
    - {name: target, type: String, value: "<+input>.allowedValues(dev,prod).default(dev)"}
  stages:
    - stage:
        identifier: dev
        type: Deployment
        when: {pipelineStatus: Success, condition: <+pipeline.variables.target> == "dev"}
        variables:
          - {name: note, type: String, value: <+input>}
          - {name: size, type: Number, value: <+input>, default: 3}
        spec:
          deploymentType: Kubernetes
          gitOpsEnabled: true
          service: {serviceRef: web}
          environment: {environmentRef: dev, deployToAll: true}
          execution:
            steps:
              - step:
                  identifier: update
                  type: GitOpsUpdateReleaseRepo
                  when: {stageStatus: Success, condition: <+stage.variables.note.contains("go")>}
                  spec:
                    variables:
                      - {name: image.tag, type: String, value: <+input>}
    - parallel:
        - stage: {identifier: a, type: Custom, spec: {execution: {steps: [{step: {identifier: w, type: Wait, spec: {duration: 1s}}}]}}}
        - stage: {identifier: b, type: Custom, spec: {execution: {steps: [{step: {identifier: w, type: Wait, spec: {duration: 1s}}}]}}}
    - stage: {identifier: c, type: Custom, spec: {execution: {steps: [{step: {identifier: w, type: Wait, spec: {duration: 1s}}}]}}}
`
	res, err := Convert("p.yaml", []byte(src), Options{Map: m})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Pipeline
	var ins []string
	for _, in := range p.Inputs {
		ins = append(ins, fmt.Sprintf("%s:%v:%v:%v", in.Name, in.Required, in.Default, in.Allowed))
	}
	if want := []string{"target:false:dev:[dev prod]", "dev_note:true:<nil>:[]", "dev_size:false:3:[]", "dev_update_image_tag:true:<nil>:[]"}; !reflect.DeepEqual(ins, want) {
		t.Errorf("inputs %v, want %v", ins, want)
	}
	dev := p.Stage("dev")
	if dev.When == nil || dev.When.Source() != `<+pipeline.variables.target> == "dev"` || dev.Steps[0].When == nil {
		t.Errorf("conditions: stage %v step %v", dev.When, dev.Steps[0].When)
	}
	if got := dev.Steps[0].With.Static()["filePath"]; got != "envs/<+pipeline.variables.target>-<+env.name>/values.yaml" {
		t.Errorf("filePath with <+serviceVariables.folder>: %v", got)
	}
	if got := dev.Steps[0].With.Static()["variables"]; fmt.Sprint(got) != "[map[name:image.tag type:String value:<+inputs.dev_update_image_tag>]]" {
		t.Errorf("step variables %v", got)
	}
	var needs []string
	for _, s := range p.Stages {
		needs = append(needs, fmt.Sprintf("%s%v", s.ID, s.Needs))
	}
	if want := []string{"dev[]", "a[dev]", "b[dev]", "c[a b]"}; !reflect.DeepEqual(needs, want) {
		t.Errorf("needs %v, want %v", needs, want)
	}
	e := p.Env("dev")
	if p.Service == nil || len(p.Service.Variables) != 2 || e == nil || len(e.Variables) != 1 || len(e.Overrides) != 1 {
		t.Errorf("service %+v environment %+v", p.Service, e)
	}
}

// Anchors and matrices cannot blow a conversion up: both are bounded, with a clear error.
func TestExpansionLimits(t *testing.T) {
	m := testMap(t)
	bomb := "x0: &a0 {spec: {deleteSourceBranch: true}}\n"
	for i := 1; i < 12; i++ {
		bomb += fmt.Sprintf("x%d: &a%d [", i, i)
		for j := 0; j < 9; j++ {
			bomb += fmt.Sprintf("*a%d,", i-1)
		}
		bomb += "]\n"
	}
	src := "anchors:\n" + indent(bomb, "  ") + fill(base, map[string]string{"STEPS": "- step: {identifier: s, type: GitOpsSync, spec: {applicationsList: *a11}}"})
	res, err := Convert("p.yaml", []byte(src), Options{Map: m})
	if err == nil || !strings.Contains(err.Error(), "too large") || res == nil || res.Native != nil {
		t.Errorf("anchor bomb: want a size error and no native text, got %v", err)
	}
	axis := "[" + strings.Repeat("v,", 99) + "v]"
	src = fill(base, map[string]string{"STEP": "strategy: {matrix: {a: " + axis + ", b: " + axis + "}}"})
	if _, err := Convert("p.yaml", []byte(src), Options{Map: m}); err == nil || !strings.Contains(err.Error(), "more than 256 combinations") {
		t.Errorf("big matrix: %v", err)
	}
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+pre) + "\n"
}

// stageStatus/pipelineStatus Failure and All become failure() and always(): such a stage or
// step runs after a failure; Success (or none) runs only when everything before succeeded.
func TestWhenStatus(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		parts        map[string]string
		stage, step  string
		afterFailure bool
		onStage      bool
	}{
		{map[string]string{"STEP": "when: {stageStatus: All}"}, "", "always()", true, false},
		{map[string]string{"STEP": "when: {stageStatus: Failure, condition: <+pipeline.name> == \"p\"}"}, "", "failure() && (", true, false},
		{map[string]string{"STEP": "when: {stageStatus: Success}"}, "", "", false, false},
		{map[string]string{"STAGE": "when:\n  pipelineStatus: Failure"}, "failure()", "", true, true},
	} {
		res, err := Convert("p.yaml", []byte(fill(base, tc.parts)), Options{Map: m})
		if err != nil {
			t.Fatalf("%v: %v", tc.parts, err)
		}
		s := res.Pipeline.Stages[0]
		w := s.Steps[0].When
		want := tc.step
		if tc.onStage {
			w, want = s.When, tc.stage
		}
		if want == "" {
			if w != nil {
				t.Errorf("%v: when %q, want none", tc.parts, w.Source())
			}
			continue
		}
		if w == nil || !strings.HasPrefix(w.Source(), want) || w.RunsAfterFailure() != tc.afterFailure {
			t.Errorf("%v: when %v, want prefix %q (runs after failure: %v)", tc.parts, w, want, tc.afterFailure)
		}
	}
}
