package pipelines

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// stepSrc is a pipeline with one environment, a service and one stage running steps (YAML
// lines indented for a step list).
func stepSrc(stepsYAML string) string {
	return `name: x
service: {name: web}
environments:
  - name: prod
    clusters: [{name: eu, agent: a1}]
stages:
  - id: prod
    environment: prod
    steps:
` + stepsYAML + "inputs: {x: {}, t: {}}\nvariables: {n: 2}\n"
}

// Unknown keys, values of the wrong type, enums and required inputs are refused at load with
// file:line:col, the field's path and (for typos) the input meant.
func TestStepInputsRefused(t *testing.T) {
	const fetch = "      - {id: apps, type: FetchLinkedApps}\n"
	cases := []struct {
		name, steps string
		want        []string
	}{
		{"typo waitTilHealthy", fetch + "      - id: sync\n        type: GitOpsSync\n        with:\n          waitTilHealthy: true\n",
			[]string{`p.yaml:14:11: stages[0].steps[1].with.waitTilHealthy: unknown GitOpsSync input "waitTilHealthy"; did you mean "waitTillHealthy"? (allowed: applicationsList,`}},
		{"typo mergeStrategey", "      - id: m\n        type: MergePR\n        with: {mergeStrategey: squash}\n",
			[]string{`p.yaml:12:16: stages[0].steps[0].with.mergeStrategey: unknown MergePR input "mergeStrategey"; did you mean "mergeStrategy"?`}},
		{"unknown key far from any", "      - {id: w, type: Wait, with: {duration: 1m, colour: blue}}\n",
			[]string{`stages[0].steps[0].with.colour: unknown Wait input "colour" (allowed: duration)`}},
		{"alias type checked too", "      - id: u\n        type: GitOpsUpdateReleaseRepo\n        with: {connector: c, repo: r, filePath: f.yaml, prTitel: x}\n",
			[]string{`with.prTitel: unknown UpdateReleaseRepo input "prTitel"; did you mean "prTitle"?`}},
		{"bool", fetch + "      - {id: sync, type: GitOpsSync, with: {waitTillHealthy: yes please}}\n",
			[]string{`p.yaml:11:62: stages[0].steps[1].with.waitTillHealthy: want true or false, got a scalar (str) "yes please"`}},
		{"bool given a number", fetch + "      - {id: sync, type: GitOpsSync, with: {prune: 1}}\n",
			[]string{`with.prune: want true or false, got a scalar (int) "1"`}},
		{"whole number", "      - {id: m, type: MergePR, with: {prNumber: 1.5}}\n", []string{`with.prNumber: want a whole number, got "1.5"`}},
		{"enum", "      - {id: m, type: MergePR, with: {mergeStrategy: squish}}\n",
			[]string{`with.mergeStrategy: "squish" is not one of merge, squash, rebase; did you mean "squash"?`}},
		{"duration", "      - {id: w, type: Wait, with: {duration: a while}}\n", []string{`with.duration: `}},
		{"required", "      - {id: u, type: UpdateReleaseRepo, with: {repo: r, filePath: f.yaml}}\n",
			[]string{`stages[0].steps[0].with.connector: required`}},
		{"required without with", "      - {id: w, type: Wait}\n", []string{`p.yaml:10:9: stages[0].steps[0].with.duration: required`}},
		{"nested object key", fetch + "      - {id: sync, type: GitOpsSync, with: {syncOptions: {autoCreateNamespce: true}}}\n",
			[]string{`with.syncOptions.autoCreateNamespce: unknown field "autoCreateNamespce"; did you mean "autoCreateNamespace"?`}},
		{"nested required", fetch + "      - {id: sync, type: GitOpsSync, with: {retryStrategy: {baseBackoffDuration: 5s}}}\n",
			[]string{`with.retryStrategy.limit: required`}},
		{"list item key", "      - id: u\n        type: UpdateReleaseRepo\n        with:\n          connector: c\n          repo: r\n          filePath: f.yaml\n          variables: [{nmae: image.tag, value: v1}]\n",
			[]string{`with.variables[0].nmae: unknown field "nmae"; did you mean "name"?`, `with.variables[0].name: required`}},
		{"wrong shape", "      - {id: u, type: UpdateReleaseRepo, with: {connector: c, repo: r, filePath: f.yaml, variables: {image.tag: v1}}}\n",
			[]string{`with.variables: want a list, got a mapping`}},
		{"approvers shapes", "      - {id: a, type: Approval, with: {approvers: {users: [ann], minimumCont: 2}}}\n",
			[]string{`with.approvers.minimumCont: unknown field "minimumCont"; did you mean "minimumCount"?`}},
		{"Number value", "      - id: u\n        type: UpdateReleaseRepo\n        with:\n          connector: c\n          repo: r\n          filePath: f.yaml\n          variables: [{name: replicas, type: Number, value: three}]\n",
			[]string{`p.yaml:16:61: stages[0].steps[0].with.variables[0].value: value does not match its type: type Number: "three" is not a decimal number`}},
		{"Boolean value", "      - id: u\n        type: UpdateReleaseRepo\n        with:\n          connector: c\n          repo: r\n          filePath: f.yaml\n          variables: [{name: on, type: Boolean, value: maybe}]\n",
			[]string{`with.variables[0].value: value does not match its type: type Boolean: "maybe" is not true or false`}},
		{"String value from a map", "      - id: u\n        type: UpdateReleaseRepo\n        with:\n          connector: c\n          repo: r\n          filePath: f.yaml\n          variables: [{name: x, value: {a: 1}}]\n",
			[]string{`with.variables[0].value: a String value cannot be a mapping (use type: Raw)`}},
		{"variable type", "      - id: u\n        type: UpdateReleaseRepo\n        with:\n          connector: c\n          repo: r\n          filePath: f.yaml\n          variables: [{name: x, type: Strng, value: a}]\n",
			[]string{`with.variables[0].type: "Strng" is not one of String,`, `did you mean "String"?`}},
		{"internal CommitStatus", "      - {id: c, type: CommitStatus, with: {state: success}}\n",
			[]string{`p.yaml:10:23: stages[0].steps[0].type: step type "CommitStatus" is internal to prflow`}},
		{"internal StageGate", "      - {id: g, type: StageGate, with: {soak: 1m}}\n",
			[]string{`step type "StageGate" is internal to prflow and cannot be used in a pipeline (give the stage a gate:`}},
		{"type typo", "      - {id: g, type: GitOpsSnyc}\n", []string{`unknown step type "GitOpsSnyc"; did you mean "GitOpsSync"?`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := loadErr(t, stepSrc(c.steps))
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", err, w)
				}
			}
			if strings.Contains(err.Error(), "CommitStatus") && strings.Contains(err.Error(), "known: ") &&
				strings.Contains(err.Error()[strings.Index(err.Error(), "known: "):], "CommitStatus") {
				t.Errorf("internal types are offered: %v", err)
			}
		})
	}
}

// What the declarations accept: expressions of any type (checked once evaluated), strings for
// booleans ("true"), lists or comma-separated strings, both shapes of approvers and syncOptions.
func TestStepInputsAccepted(t *testing.T) {
	for _, s := range []string{
		"      - {id: apps, type: FetchLinkedApps}\n      - {id: sync, type: GitOpsSync, with: {waitTillHealthy: \"${{ inputs.x == 'y' }}\", prune: \"true\", degradedStateTimeout: 0, applicationLabels: {team: a}}}\n",
		"      - {id: apps, type: FetchLinkedApps, with: {labels: [\"team:a\"], appWaitTimeout: 30s}}\n      - {id: sync, type: GitOpsSync, with: {syncOptions: [CreateNamespace=true], retryStrategy: {limit: 2}}}\n",
		"      - {id: a, type: Approval, with: {approvers: [ann, \"group:ops\"], minimumCount: \"<+pipeline.variables.n>\"}}\n",
		"      - {id: a, type: Approval, with: {approvers: {users: ann, groups: [ops], minimumCount: 1}}}\n",
		"      - {id: u, type: GitOpsUpdateReleaseRepo, with: {connector: c, repo: r, filePaths: \"a.yaml,b.yaml\", labels: [x], variables: [{name: a, type: \"${{ inputs.t }}\", value: 1}, {name: b, type: Raw, value: {k: [1]}}]}}\n      - {id: m, type: MergePR, with: {prNumber: \"${{ steps.u.outputs.prNumber }}\", mergeStrategy: squash}}\n",
		"      - {id: n, type: Noop, with: {outputs: {any: {thing: [1]}}, message: hi}}\n      - {id: w, type: Wait, with: {duration: 1h30m}}\n",
	} {
		if _, err := Load("p.yaml", []byte(stepSrc(s)), steps.Default); err != nil {
			t.Errorf("refused:\n%s\n%v", s, err)
		}
	}
}

// A String value is written as it is written in the file: YAML would read 1.10 as 1.1, 0755
// as 493, a long number as a float and a date as a time. Number and Boolean values keep their
// text too; the step parses them.
func TestStringValuesKeepTheirText(t *testing.T) {
	src := stepSrc(`      - id: u
        type: UpdateReleaseRepo
        with:
          connector: c
          repo: r
          filePath: envs/prod.yaml
          prTitle: 1.10
          variables:
            - {name: a, type: String, value: 1.10}
            - {name: b, type: String, value: 0755}
            - {name: c, type: String, value: 12345678901234567890}
            - {name: d, type: String, value: 2024-01-02}
            - {name: e, value: 1e3}
            - {name: f, type: String, value: true}
            - {name: g, type: Number, value: 1.50}
            - {name: h, type: Boolean, value: false}
            - {name: i, type: String, value: "quoted 1.10"}
`)
	m := mustLoad(t, src)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 {
		t.Fatalf("jobs: %v", jobs)
	}
	// The job crosses JetStream as JSON: check what the worker gets.
	data, err := json.Marshal(jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	var j envelope.Job
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	if j.Inputs["prTitle"] != "1.10" {
		t.Errorf("prTitle: %#v", j.Inputs["prTitle"])
	}
	targets, _ := j.Inputs["targets"].([]any)
	if len(targets) != 1 {
		t.Fatalf("targets: %#v", j.Inputs)
	}
	vars, _ := targets[0].(map[string]any)["variables"].([]any)
	want := []string{"1.10", "0755", "12345678901234567890", "2024-01-02", "1e3", "true", "1.50", "false", "quoted 1.10"}
	if len(vars) != len(want) {
		t.Fatalf("variables: %#v", vars)
	}
	for i, w := range want {
		if got := vars[i].(map[string]any)["value"]; got != w {
			t.Errorf("variables[%d].value = %#v (%T), want %q", i, got, got, w)
		}
	}
}

// A stage that finds its apps through the service (FetchLinkedApps without an ApplicationSet
// or selector, GitOpsSync without an app list) must have what that needs, at load: before,
// such a pipeline merged dev and then failed in FetchLinkedApps.
func TestLinkedAppsNeedAServiceOrSelector(t *testing.T) {
	noService := func(s string) string { return strings.Replace(stepSrc(s), "service: {name: web}\n", "", 1) }
	bad := []struct {
		name, src, want string
	}{
		{"no service", noService("      - {id: apps, type: FetchLinkedApps}\n"),
			`p.yaml:9: stages[0].steps[0]: stage "prod", step "apps" (FetchLinkedApps): no way to find the apps: give applicationSet, selector or labels, or declare the pipeline's service:`},
		{"no environment", strings.Replace(stepSrc("      - {id: apps, type: FetchLinkedApps}\n"), "    environment: prod\n", "", 1),
			`stage "prod", step "apps" (FetchLinkedApps): no way to find the apps`},
		{"env filter without environment", strings.Replace(stepSrc("      - {id: apps, type: FetchLinkedApps, with: {filterByServiceEnvCluster: true}}\n"), "    environment: prod\n", "", 1),
			`(FetchLinkedApps): filterByServiceEnvCluster needs the stage's environment`},
		{"sync without apps", noService("      - {id: u, type: Noop}\n      - {id: sync, type: GitOpsSync, with: {waitTillHealthy: true}}\n"),
			`stages[0].steps[1]: stage "prod", step "sync" (GitOpsSync): no apps to sync: give applicationsList, applicationRegex or applicationLabels, or put a FetchLinkedApps or UpdateGitOpsApp step before it`},
		{"sync before fetch", stepSrc("      - {id: sync, type: GitOpsSync}\n      - {id: apps, type: FetchLinkedApps}\n"), `step "sync" (GitOpsSync): no apps to sync`},
	}
	for _, c := range bad {
		_, err := Load("p.yaml", []byte(c.src), steps.Default)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %s", c.name, err, c.want)
		}
	}
	good := []string{
		stepSrc("      - {id: apps, type: FetchLinkedApps}\n      - {id: sync, type: GitOpsSync}\n"),
		noService("      - {id: apps, type: FetchLinkedApps, with: {applicationSet: web}}\n      - {id: sync, type: GitOpsSync}\n"),
		noService("      - {id: apps, type: FetchLinkedApps, with: {selector: \"team=a\"}}\n"),
		noService("      - {id: apps, type: FetchLinkedApps, with: {filterByServiceEnvCluster: true}}\n"),
		noService("      - {id: apps, type: FetchLinkedApps, with: {filterByServiceEnvCluster: \"${{ inputs.x == 'all' }}\"}}\n"),
		noService("      - {id: sync, type: GitOpsSync, with: {applicationsList: [{applicationName: web, agentId: a1}]}}\n"),
		noService("      - {id: sync, type: GitOpsSync, with: {applicationRegex: \"^web-\"}}\n"),
		stepSrc("      - {id: apps, type: FetchLinkedApps}\n    rollbackSteps:\n      - {id: resync, type: GitOpsSync}\n"),
	}
	for i, src := range good {
		if _, err := Load("p.yaml", []byte(src), steps.Default); err != nil {
			t.Errorf("good[%d] refused: %v\n%s", i, err, src)
		}
	}
}

// Every built-in step type declares its inputs, and every declared input has a doc line or is
// self-explanatory enough to be in the schema (a type at least).
func TestEveryStepTypeDeclaresItsInputs(t *testing.T) {
	for _, typ := range steps.Default.Types() {
		d, _ := steps.Default.Lookup(typ)
		if d.Inputs == nil {
			t.Errorf("%s declares no inputs", typ)
		}
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"waitTillHealthy", "mergeStrategy", "prune", "dryRun"}
	for in, want := range map[string]string{"waitTilHealthy": "waitTillHealthy", "mergeStrategey": "mergeStrategy", "prnue": "prune",
		"dryrun": "dryRun", "colour": "", "x": ""} {
		if got := suggest(in, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
	_ = fmt.Sprint
}

// A string pipeline input's default and allowed values are text as written, too.
func TestStringInputDefaultsKeepTheirText(t *testing.T) {
	m := mustLoad(t, "name: x\ninputs:\n  tag: {type: string, default: 1.10, allowed: [1.10, 2.0]}\n  n: {type: number, default: 1.10}\nstages:\n  - id: s\n    steps: [{id: a, type: Noop}]\n")
	tag, n := m.P.Inputs[0], m.P.Inputs[1]
	if tag.Default != "1.10" || fmt.Sprint(tag.Allowed) != "[1.10 2.0]" || n.Default != 1.1 {
		t.Errorf("defaults: %#v %#v %#v", tag.Default, tag.Allowed, n.Default)
	}
}

// BenchmarkLoadPromotion: loading (with the step input checks) the largest example.
func BenchmarkLoadPromotion(b *testing.B) {
	src, err := examplesFile("pipelines/promote.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("promote.yaml", src, steps.Default); err != nil {
			b.Fatal(err)
		}
	}
}

func examplesFile(name string) ([]byte, error) { return examples.FS.ReadFile(name) }

// UpdateGitOpsApp's inputs are typed down to the Helm and Kustomize fields; a typo'd field, a
// value of the wrong type, an empty change or a second UpdateGitOpsApp in one step list is
// refused at load, naming the line and the field. A GitOpsSync after it needs no app list.
func TestUpdateGitOpsAppRefusedAtLoad(t *testing.T) {
	upd := func(with string) string { return "      - {id: upd, type: UpdateGitOpsApp, with: " + with + "}\n" }
	bad := []struct{ name, src, want string }{
		{"typo'd helm field", stepSrc(upd("{applicationName: web, helm: {parameter: [{name: a, value: b}]}}")),
			`p.yaml:10:`},
		{"typo'd helm field names the input meant", stepSrc(upd("{applicationName: web, helm: {parameter: [{name: a, value: b}]}}")),
			`"parameters"`},
		{"typo'd top-level field", stepSrc(upd("{applicationName: web, targetRevison: v2}")), `"targetRevision"`},
		{"parameter without value", stepSrc(upd("{applicationName: web, helm: {parameters: [{name: a}]}}")), `helm.parameters[0].value`},
		{"replica count not a number", stepSrc(upd("{applicationName: web, kustomize: {replicas: [{name: w, count: many}]}}")), `count`},
		{"nothing to change", stepSrc(upd("{applicationName: web}")), "nothing to change"},
		{"empty target revision", stepSrc(upd("{applicationName: web, targetRevision: \"\"}")), "targetRevision: empty"},
		{"no app", stepSrc(upd("{targetRevision: v2}")), "applicationName: required"},
		{"rollback with a change", stepSrc(upd("{rollback: true, targetRevision: v2}")), "give no targetRevision, helm or kustomize with it"},
		{"duplicate helm parameter", stepSrc(upd("{applicationName: web, helm: {parameters: [{name: a, value: '1'}, {name: a, value: '2'}]}}")), `"a" given twice`},
		{"two in one stage", stepSrc(upd("{applicationName: web, targetRevision: v2}") +
			"      - {id: upd2, type: UpdateGitOpsApp, with: {applicationName: api, targetRevision: v2}}\n"),
			`step "upd2" (UpdateGitOpsApp): a stage's steps may hold one UpdateGitOpsApp (step "upd" is one already)`},
	}
	for _, c := range bad {
		_, err := Load("p.yaml", []byte(c.src), steps.Default)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %s", c.name, err, c.want)
		}
	}
	good := []string{
		stepSrc(upd("{applicationName: web, agentId: a1, targetRevision: v2, helm: {parameters: [{name: image.tag, value: \"${{ inputs.t }}\"}], fileParameters: [{name: f, path: files/f}], valueFiles: [a.yaml]}}") +
			"      - {id: sync, type: GitOpsSync}\n"),
		stepSrc(upd("{applicationName: web, kustomize: {images: [\"nginx:1.25\"], replicas: [{name: w, count: 3}], namespace: shop, namePrefix: a-, nameSuffix: -b, commonLabels: {team: pay}, commonAnnotations: {a: b}, forceCommonLabels: true, forceCommonAnnotations: false}}")),
		stepSrc(upd("{applicationName: web, helm: {parameters: \"${{ inputs.x }}\"}}")),
		stepSrc(upd("{applicationName: web, targetRevision: v2}") + "    rollbackSteps:\n      - {id: revert, type: UpdateGitOpsApp, with: {rollback: true}}\n" + "      - {id: resync, type: GitOpsSync}\n"),
	}
	for i, src := range good {
		if _, err := Load("p.yaml", []byte(src), steps.Default); err != nil {
			t.Errorf("good[%d] refused: %v\n%s", i, err, src)
		}
	}
}
