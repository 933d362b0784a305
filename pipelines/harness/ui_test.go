package harness

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

// lineOf is the 1-based line of the first line of src holding mark.
func lineOf(t *testing.T, src, mark string) int {
	t.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, mark) {
			return i + 1
		}
	}
	t.Fatalf("marker %q not in source", mark)
	return 0
}

// A GitOps PR pipeline as the Harness UI saves it converts in strict mode: serviceInputs
// artifact fields become optional inputs defaulting to the map's values, gitOpsEnabled and
// the empty lists the UI writes are no-ops, GitOpsGetAppDetails is a step, Harness agent ids
// are mapped, and a notification rule that only names a user group the map leaves out on
// purpose is reported once as not carried.
func TestUIPipelineStrict(t *testing.T) {
	m := testMap(t)
	src, err := os.ReadFile("testdata/ui_pr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Convert("ui_pr.yaml", src, Options{Map: m, Inputs: map[string]any{"tag": "1.2.3"}})
	if err != nil {
		t.Fatalf("strict conversion: %v", err)
	}
	var notif []string
	for _, w := range res.Warnings {
		if strings.Contains(w.Error(), "notificationRules") {
			notif = append(notif, w.Error())
		} else {
			t.Errorf("unexpected warning: %v", w)
		}
	}
	after := strings.Index(string(src), "notificationRules:")
	l := lineOf(t, string(src[after:]), "- release_managers") + strings.Count(string(src[:after]), "\n")
	if len(notif) != 1 || !strings.Contains(notif[0], fmt.Sprintf("ui_pr.yaml:%d:", l)) ||
		!strings.Contains(notif[0], `notificationRules[0].notificationMethod.spec.userGroups[0]: not carried: rule "tell_team" to user group "release_managers": the mapping file testdata/map.yaml gives the group no channel`) {
		t.Errorf("notificationRules warnings %q, want one at line %d: the user group the map leaves out", notif, l)
	}
	p := res.Pipeline
	st := p.Stage("promote_dev")
	var types []string
	for _, s := range st.Steps {
		types = append(types, s.ID+":"+s.Type)
	}
	if got := strings.Join(types, " "); got != "updateReleaseRepo:UpdateReleaseRepo approveMerge:Approval mergePR:MergePR getAppDetails:GetAppDetails syncWeb:GitOpsSync" {
		t.Errorf("steps %s", got)
	}
	for _, id := range []string{"getAppDetails", "syncWeb"} {
		var s *pipelines.Step
		for _, x := range st.Steps {
			if x.ID == id {
				s = x
			}
		}
		if got := fmt.Sprint(s.With.Static()["applicationsList"]); got != "[map[agentId:eu applicationName:web-dev]]" {
			t.Errorf("%s applicationsList %s, want the Harness agent mapped to eu", id, got)
		}
	}
	if _, ok := st.Steps[2].With.Static()["variables"]; ok {
		t.Errorf("MergePR kept variables: []")
	}
	var in *pipelines.Input
	for i := range p.Inputs {
		if p.Inputs[i].Name == "web_primaryArtifactRef" {
			in = &p.Inputs[i]
		}
	}
	if in == nil || in.Required || in.Default != "web_image" {
		t.Errorf("artifact input web_primaryArtifactRef: %+v, want optional with the map's default", in)
	}
	for _, x := range p.Inputs {
		if x.Name == "web_sources" && x.Required {
			t.Errorf("artifact input without a map value must be optional: %+v", x)
		}
	}
	if e := p.Env("dev"); e == nil || len(e.Clusters) != 1 || e.Clusters[0].Agent != "eu" {
		t.Errorf("environment dev: %+v", e)
	}
}

// What the UI writes empty is a no-op; the same field with content is a real feature prflow
// does not have, and is refused at its line.
func TestUIFieldsWithContent(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		name  string
		parts map[string]string
		ok    bool
		mark  string
		path  string
		msg   string
	}{
		{"empty merge variables", map[string]string{"SPEC": "variables: []"}, true, "", "", ""},
		{"merge variables", map[string]string{"SPEC": "variables:\n  - {name: x, type: String, value: y}"}, false, "variables:",
			"pipeline.stages[0].stage.spec.execution.steps[0].step.spec.variables", "Azure Repos"},
		{"empty notification rules", map[string]string{"PIPE": "notificationRules: []"}, true, "", "", ""},
		{"stage gitOpsEnabled", map[string]string{"STAGE": "gitOpsEnabled: true"}, true, "", "", ""},
		{"stage gitOpsEnabled false", map[string]string{"STAGE": "gitOpsEnabled: false"}, false, "gitOpsEnabled: false",
			"pipeline.stages[0].stage.gitOpsEnabled", "gitOpsEnabled: true"},
		{"approver inputs", map[string]string{"STEPS": "- step:\n    identifier: ok\n    type: HarnessApproval\n    spec:\n      approvers: {userGroups: [g], minimumCount: 1}\n      approverInputs:\n        - {name: reason, defaultValue: x}"},
			false, "approverInputs:", "pipeline.stages[0].stage.spec.execution.steps[1].step.spec.approverInputs", "approver inputs"},
		{"empty approver inputs", map[string]string{"STEPS": "- step:\n    identifier: ok\n    type: HarnessApproval\n    spec:\n      approvers: {userGroups: [g], minimumCount: 1}\n      approverInputs: []"},
			true, "", "", ""},
		{"service variable inputs", map[string]string{"STAGE": "spec:\n  service:\n    serviceRef: web\n    serviceInputs:\n      serviceDefinition:\n        type: Kubernetes\n        spec:\n          variables:\n            - {name: replicas, type: String, value: <+input>}"},
			false, "variables:", "pipeline.stages[0].stage.spec.service.serviceInputs.serviceDefinition.spec.variables", "mapping file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fill(base, tc.parts)
			if strings.HasPrefix(tc.parts["STAGE"], "spec:") {
				// replace the stage's service with the one in the snippet
				src = strings.Replace(fill(base, nil), "          service: {serviceRef: web}\n", indent(strings.TrimPrefix(tc.parts["STAGE"], "spec:\n"), "        "), 1)
			}
			_, err := Convert("p.yaml", []byte(src), Options{Map: m})
			if tc.ok {
				if err != nil {
					t.Fatalf("%v\n%s", err, src)
				}
				return
			}
			var le *pipelines.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err %v, want a LoadError\n%s", err, src)
			}
			line := lineOf(t, src, tc.mark)
			found := false
			for _, fe := range le.Errs {
				found = found || (fe.Line == line && fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg))
			}
			if !found {
				t.Errorf("no error at p.yaml:%d %s with %q; got:\n%v", line, tc.path, tc.msg, err)
			}
		})
	}
}

// A pipeline's gitOpsClusters[].agentIdentifier that the map's cluster entry contradicts is
// overridden with a warning at its line; one that agrees (directly or through agents:) is not.
func TestAgentMapping(t *testing.T) {
	m := testMap(t)
	env := "environment: {environmentRef: dev, deployToAll: true}"
	for _, tc := range []struct {
		agent, warn string
	}{
		{"harnessdevagent", ""},
		{"eu", ""},
		{"account.otheragent", `agent "account.otheragent"`},
	} {
		src := strings.Replace(fill(base, nil), env, "environment:\n            environmentRef: dev\n            gitOpsClusters:\n              - {identifier: dev_cluster, agentIdentifier: "+tc.agent+"}", 1)
		res, err := Convert("p.yaml", []byte(src), Options{Map: m})
		if err != nil {
			t.Fatalf("%s: %v", tc.agent, err)
		}
		var ws []string
		for _, w := range res.Warnings {
			ws = append(ws, w.Error())
		}
		got := strings.Join(ws, "\n")
		if tc.warn == "" {
			if got != "" {
				t.Errorf("%s: warnings %s", tc.agent, got)
			}
			continue
		}
		line := lineOf(t, src, "agentIdentifier")
		if !strings.Contains(got, fmt.Sprintf("p.yaml:%d:", line)) || !strings.Contains(got, tc.warn) || !strings.Contains(got, `agent "eu"`) {
			t.Errorf("%s: warnings %q, want one at line %d naming both agents", tc.agent, got, line)
		}
		if a := res.Pipeline.Env("dev").Clusters[0].Agent; a != "eu" {
			t.Errorf("%s: cluster agent %s, want the map's eu", tc.agent, a)
		}
	}
}

// Stage, step and step-group templates are refused with the line of the templateRef, in one
// error, and never crash the converter.
func TestTemplatesRefused(t *testing.T) {
	m := testMap(t)
	for _, tc := range []struct {
		name, snippet, key, mark, path string
	}{
		{"step", "- step:\n    name: Update\n    identifier: upd\n    template:\n      templateRef: account.update_release\n      versionLabel: v1", "STEPS",
			"templateRef: account.update_release", "pipeline.stages[0].stage.spec.execution.steps[1].step.template"},
		{"step group", "- stepGroup:\n    name: G\n    identifier: g\n    template:\n      templateRef: org.group_tpl\n      versionLabel: \"1\"", "STEPS",
			"templateRef: org.group_tpl", "pipeline.stages[0].stage.spec.execution.steps[1].stepGroup.template"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fill(base, map[string]string{tc.key: tc.snippet})
			_, err := Convert("p.yaml", []byte(src), Options{Map: m})
			line := lineOf(t, src, tc.mark)
			var le *pipelines.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err %v", err)
			}
			found := false
			for _, fe := range le.Errs {
				found = found || (fe.Line == line && fe.Path == tc.path && strings.Contains(fe.Msg, "templates are not supported: inline it"))
			}
			if !found || len(le.Errs) != 1 {
				t.Errorf("want exactly one error at p.yaml:%d %s; got:\n%v", line, tc.path, err)
			}
		})
	}
	stage := `pipeline:
  identifier: p
  stages:
    - stage:
        name: dev
        identifier: dev
        template:
          templateRef: gitops_stage
          versionLabel: v2
          templateInputs:
            type: Deployment
`
	_, err := Convert("p.yaml", []byte(stage), Options{Map: m})
	if err == nil || !strings.Contains(err.Error(), "p.yaml:8:") || !strings.Contains(err.Error(), "templates are not supported: inline it") ||
		strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("stage template: %v", err)
	}
	pipe := "pipeline:\n  identifier: p\n  template:\n    templateRef: pr_pipeline\n    versionLabel: v1\n"
	_, err = Convert("p.yaml", []byte(pipe), Options{Map: m})
	if err == nil || !strings.Contains(err.Error(), "p.yaml:4:") || !strings.Contains(err.Error(), "templates are not supported: inline it") ||
		strings.Contains(err.Error(), "stages: required") {
		t.Errorf("pipeline template: %v", err)
	}
}

// One problem, one line: an axis that cannot be expanded and a read of another step's spec
// each give exactly one error that says what is wrong.
func TestOneErrorPerProblem(t *testing.T) {
	m := testMap(t)
	axis := `pipeline:
  identifier: p
  variables:
    - {name: apps, type: String, value: <+input>}
  stages:
    - stage:
        identifier: dev
        type: Custom
        strategy:
          matrix:
            app: <+pipeline.variables.apps.split(',')>
        spec:
          execution:
            steps:
              - step: {identifier: w, type: Wait, spec: {duration: 1s}}
`
	spec := `pipeline:
  identifier: p
  stages:
    - stage:
        identifier: dev
        type: Custom
        spec:
          execution:
            steps:
              - step: {identifier: w, type: Wait, spec: {duration: 1s}}
              - step: {identifier: w2, type: Wait, spec: {duration: <+execution.steps.w.spec.duration>}}
`
	for _, tc := range []struct{ name, src, want string }{
		{"matrix axis", axis, `p.yaml:11:18: pipeline.stages[0].stage.strategy.matrix.app: matrix axis <+pipeline.variables.apps.split(',')> cannot be expanded: input "apps" has no value: give it with --set apps=…`},
		{"spec read", spec, `p.yaml:11:69: pipeline.stages[0].stage.spec.execution.steps[1].step.spec.duration: unsupported: <+execution.steps.w.spec.duration> reads step w's inputs (spec)`},
	} {
		_, err := Convert("p.yaml", []byte(tc.src), Options{Map: m})
		var le *pipelines.LoadError
		if !errors.As(err, &le) || len(le.Errs) != 1 || !strings.HasPrefix(le.Errs[0].Error(), tc.want) {
			t.Errorf("%s: want one error starting %q, got:\n%v", tc.name, tc.want, err)
		}
	}
	for _, in := range []string{"<+execution.steps.u.spec.variables.x>", "<+pipeline.stages.s.spec.execution.steps.u.spec.prTitle>", "<+execution.steps.u.foo.bar>"} {
		if _, probs := rewriteExpr(in); len(probs) != 1 {
			t.Errorf("%s: %d problems %q, want 1", in, len(probs), probs)
		}
	}
}

// UpdateGitOpsApp converts: its agentId goes through the map's agents:, its Helm and Kustomize
// fields are copied, a GitOps Sync after it needs no app list, and Harness's multi-source
// `sources` is refused naming what to use instead. A whole `serviceInputs: <+input>` (as
// templates write it) asks nothing prflow uses and is accepted; an agentId the map does not
// know passes as a prflow agent id.
func TestUpdateGitOpsAppAndOtherUIShapes(t *testing.T) {
	m := testMap(t)
	src := fill(base, map[string]string{"STEPS": "- step:\n    identifier: upd\n    type: UpdateGitOpsApp\n" +
		"    spec: {agentId: harnessdevagent, applicationName: web-dev, targetRevision: v2, helm: {parameters: [{name: image.tag, value: \"2.0\"}], fileParameters: [], valueFiles: []}}\n" +
		"- step:\n    identifier: sync\n    type: GitOpsSync\n    spec: {prune: false}"})
	res, err := Convert("p.yaml", []byte(src), Options{Map: m})
	if err != nil {
		t.Fatalf("UpdateGitOpsApp: %v", err)
	}
	upd := res.Pipeline.Stages[0].Steps[1]
	w := upd.With.Static()
	if upd.Type != "UpdateGitOpsApp" || w["agentId"] != "eu" || w["applicationName"] != "web-dev" || w["targetRevision"] != "v2" ||
		!strings.Contains(fmt.Sprint(w["helm"]), "name:image.tag") || strings.Contains(fmt.Sprint(w["helm"]), "valueFiles") {
		t.Errorf("UpdateGitOpsApp converted to %s %v (blank UI lists must be dropped: a native valueFiles: [] clears the app's)", upd.Type, w)
	}
	src = fill(base, map[string]string{"STEPS": "- step:\n    identifier: upd\n    type: UpdateGitOpsApp\n" +
		"    spec: {agentId: harnessdevagent, applicationName: web-dev, sources: [{targetRevision: v2}]}"})
	if _, err := Convert("p.yaml", []byte(src), Options{Map: m}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("p.yaml:%d:", lineOf(t, src, "sources:"))) ||
		!strings.Contains(err.Error(), "source:") {
		t.Errorf("UpdateGitOpsApp sources: %v", err)
	}
	src = strings.Replace(fill(base, map[string]string{"STEPS": "- step:\n    identifier: d\n    type: GitOpsGetAppDetails\n    spec:\n      applicationsList:\n        - {applicationName: a, agentId: harnessdevagent}\n        - {applicationName: b, agentId: us}"}),
		"service: {serviceRef: web}", "service: {serviceRef: web, serviceInputs: <+input>}", 1)
	res, err = Convert("p.yaml", []byte(src), Options{Map: m})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Pipeline.Stages[0].Steps[1].With.Static()["applicationsList"]); got != "[map[agentId:eu applicationName:a] map[agentId:us applicationName:b]]" {
		t.Errorf("applicationsList %s", got)
	}
}

// agents: and artifacts: in the map are checked like the rest of it, with file:line.
func TestMapAgentsAndArtifactsErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"agents: [a, b]\n", "m.yaml:1:9: agents: want a mapping of Harness agent identifier: prflow agent id"},
		{"agents:\n  h1: \"\"\n", "m.yaml:2:7: agents.h1: required"},
		{"agents:\n  h1: eu\n  h1: us\n", "m.yaml:3:3: agents.h1: set twice (first at line 2)"},
		{"services:\n  web:\n    releaseRepo: {connector: c, repo: r, path: p, branch: [x]}\n", "m.yaml:3:59: services.web.releaseRepo.branch: want a string, got a list"},
		{"services:\n  web:\n    releaseRepo: {connector: c, repo: r, path: p, brnch: x}\n", `m.yaml:3:51: services.web.releaseRepo.brnch: unknown field (did you mean "branch"?); known fields: connector, repo, branch, path`},
		{"gitOpsClusters: {a: {agent: eu}}\nenvironments:\n  dev: {gitOpsClusters: a}\n", `m.yaml:3:25: environments.dev.gitOpsClusters: want a list of GitOps cluster identifiers, got "a"`},
		{"# nothing\n", "m.yaml: empty file: want services, environments"},
		{"services:\n  web:\n    artifacts: [x]\n", "m.yaml:3:16: services.web.artifacts: want a mapping of name: value"},
		{"services:\n  web:\n    artifacts: {tag: {a: b}}\n", "m.yaml:3:22: services.web.artifacts.tag: want a string"},
	} {
		_, err := ParseMap("m.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.src, err, tc.want)
		}
	}
	m, err := ParseMap("m.yaml", []byte("agents: {account.h1: eu}\nservices:\n  web: {artifacts: {primaryArtifactRef: img, tag: \"1.10\"}}\n"))
	if err != nil || m.Agents["account.h1"] != "eu" || m.Services["web"].Artifacts["tag"] != "1.10" {
		t.Errorf("map: %v %+v", err, m)
	}
}

// The UI-saved Update GitOps App pipeline converts in strict mode with no warning: the update
// keeps its Helm parameter (blank lists dropped), the sync takes its app from the update, the
// Get App Details reads the app through the update's outcome, and the Rollback tab's step
// without configuration becomes the native rollback mode.
func TestUIUpdateGitOpsAppPipelineStrict(t *testing.T) {
	src, err := os.ReadFile("testdata/ui_update.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Convert("ui_update.yaml", src, Options{Map: testMap(t), Inputs: map[string]any{"tag": "1.2.3"}})
	if err != nil {
		t.Fatalf("strict conversion: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("unexpected warning: %v", w)
	}
	st := res.Pipeline.Stage("update_dev")
	var ids []string
	for _, s := range st.Steps {
		ids = append(ids, s.ID+":"+s.Type)
	}
	for _, s := range st.Rollback {
		ids = append(ids, "rollback "+s.ID+":"+s.Type)
	}
	if got := strings.Join(ids, " "); got != "updateApp:UpdateGitOpsApp syncApp:GitOpsSync getAppDetails:GetAppDetails verify:Approval rollback revertApp:UpdateGitOpsApp rollback syncReverted:GitOpsSync" {
		t.Errorf("steps %s", got)
	}
	upd := st.Steps[0].With.Static()
	if upd["agentId"] != "eu" || upd["applicationName"] != "web-dev" || !strings.HasPrefix(fmt.Sprint(upd["helm"]), "map[parameters:[map[name:image.tag value:") ||
		!strings.Contains(fmt.Sprint(upd["helm"]), "pipeline.variables.tag") {
		t.Errorf("updateApp with %v", upd)
	}
	if rb := st.Rollback[0].With.Static(); fmt.Sprint(rb) != "map[rollback:true]" {
		t.Errorf("revertApp with %v, want rollback: true", rb)
	}
	if got := fmt.Sprint(st.Steps[2].With.Static()["applicationName"]); !strings.Contains(got, "steps.updateApp.outputs.application.name") {
		t.Errorf("getAppDetails applicationName %s, want the update's outcome", got)
	}
}
