package pipelines

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

const promoHead = `name: promote-web
inputs:
  tag: {type: string, required: true}
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
  - name: staging
    clusters: [{name: staging-eu, agent: sim}]
`

// promoSrc is promoHead plus a promotion whose extra lines (indented two spaces) go before
// its environments list.
func promoSrc(extra, envs string) string {
	return promoHead + `promotion:
  applicationSet: web
  connector: release
  repo: acme/release
  filePath: "envs/<+env.name>/config.json"
  set:
    image.tag: "${{ inputs.tag }}"
    replicas: 2
` + extra + "  environments:\n" + envs
}

func stepIDs(list []*Step) string {
	var out []string
	for _, s := range list {
		out = append(out, s.ID+":"+s.Type)
	}
	return strings.Join(out, " ")
}

func TestPromotionExpandsToStages(t *testing.T) {
	const auto = "approval:Approval? update:UpdateReleaseRepo preview:DiffPreview merge:MergePR apps:FetchLinkedApps sync:GitOpsSync"
	const rollback = "revert:RevertPR mergeRevert:MergePR resync:GitOpsSync"
	cases := []struct {
		name, extra, envs string
		stages            []string // id:environment
		steps             map[string]string
		rollback          string
		check             func(t *testing.T, p *Pipeline)
	}{
		{
			name:   "names only, merged by prflow",
			envs:   "    - dev\n    - staging\n",
			stages: []string{"dev:dev", "staging:staging"},
			steps: map[string]string{
				"dev":     "update:UpdateReleaseRepo preview:DiffPreview merge:MergePR apps:FetchLinkedApps sync:GitOpsSync",
				"staging": "update:UpdateReleaseRepo preview:DiffPreview merge:MergePR apps:FetchLinkedApps sync:GitOpsSync",
			},
			rollback: rollback,
			check: func(t *testing.T, p *Pipeline) {
				up := p.Stages[0].Steps[0].With.Static()
				if up["connector"] != "release" || up["repo"] != "acme/release" || up["filePath"] != "envs/<+env.name>/config.json" {
					t.Errorf("update inputs: %v", up)
				}
				if fmt.Sprint(up["variables"]) != "[map[name:image.tag type:String value:${{ inputs.tag }}] map[name:replicas type:Number value:2]]" {
					t.Errorf("variables: %v", up["variables"])
				}
				if _, ok := up["waitForMerge"]; ok {
					t.Errorf("waitForMerge set while prflow merges")
				}
				if pv := p.Stages[0].Steps[1].With.Static(); pv["applicationSet"] != "web" || pv["allowNoop"] != nil {
					t.Errorf("DiffPreview inputs: %v", pv)
				}
				if apps := p.Stages[0].Steps[3].With.Static(); apps["applicationSet"] != "web" {
					t.Errorf("FetchLinkedApps inputs: %v", apps)
				}
				sync := p.Stages[0].Steps[4]
				if sync.Timeout != 10*time.Minute || sync.With.Static()["waitTillHealthy"] != true {
					t.Errorf("sync: %v %v", sync.Timeout, sync.With.Static())
				}
				rb := p.Stages[1].Rollback
				if rb[0].With.Static()["commitId"] != "${{ steps.merge.outputs.commitId }}" || rb[0].When.Source() != `${{ steps.merge.status == "succeeded" && steps.merge.outputs.commitId != "" }}` {
					t.Errorf("revert: %v when %s", rb[0].With.Static(), rb[0].When.Source())
				}
			},
		},
		{
			name:  "approval, soak, per-env values, a new environment, options",
			extra: "  mergeStrategy: merge\n  syncTimeout: 3m\n  degradedTimeout: 30s\n  appWaitTimeout: 5m\n  appSelector: harness.io/envRef=<+env.name>\n",
			envs: "    - name: dev\n      timeout: 1h\n    - {name: staging, soak: 10m}\n" +
				"    - name: prod\n      clusters: [{name: prod-eu, agent: eu}]\n      set: {replicas: 4, cluster.name: prod-eu}\n" +
				"      approval: {approvers: {groups: [release-managers]}, timeout: 1d}\n",
			stages: []string{"dev:dev", "staging:staging", "prod:prod"},
			steps: map[string]string{
				"dev":     "update:UpdateReleaseRepo preview:DiffPreview merge:MergePR apps:FetchLinkedApps sync:GitOpsSync",
				"staging": "update:UpdateReleaseRepo preview:DiffPreview merge:MergePR apps:FetchLinkedApps sync:GitOpsSync gate:StageGate",
				"prod":    strings.Replace(auto, "approval:Approval?", "approval:Approval", 1),
			},
			rollback: rollback,
			check: func(t *testing.T, p *Pipeline) {
				if p.Stages[0].Timeout != time.Hour {
					t.Errorf("dev timeout %v", p.Stages[0].Timeout)
				}
				if g := p.Stages[1].Steps[5].With.Static(); g["soak"] != "10m" || !strings.Contains(fmt.Sprint(g["condition"]), `"Degraded"`) {
					t.Errorf("gate: %v", g)
				}
				prod := p.Stages[2]
				if e := p.Env("prod"); e == nil || len(e.Clusters) != 1 || e.Clusters[0] != (Cluster{Name: "prod-eu", Agent: "eu"}) {
					t.Errorf("prod environment not declared by the promotion: %+v", e)
				}
				if a := prod.Steps[0]; a.Timeout != 24*time.Hour || fmt.Sprint(a.With.Static()) != "map[approvers:map[groups:[release-managers]]]" {
					t.Errorf("approval: %v %v", a.Timeout, a.With.Static())
				}
				vars := fmt.Sprint(prod.Steps[1].With.Static()["variables"])
				if !strings.HasSuffix(vars, "map[name:replicas type:Number value:4] map[name:cluster.name type:String value:prod-eu]]") {
					t.Errorf("prod variables (environment's last, so they win): %s", vars)
				}
				if pv := prod.Steps[2].With.Static(); pv["selector"] != "harness.io/envRef=<+env.name>" {
					t.Errorf("preview: %v", pv)
				}
				if m := prod.Steps[3].With.Static(); m["mergeStrategy"] != "merge" || m["deleteSourceBranch"] != true {
					t.Errorf("merge: %v", m)
				}
				if a := prod.Steps[4].With.Static(); a["appWaitTimeout"] != "5m" || a["selector"] != "harness.io/envRef=<+env.name>" {
					t.Errorf("apps: %v", a)
				}
				if s := prod.Steps[5]; s.Timeout != 3*time.Minute || s.With.Static()["degradedStateTimeout"] != "30s" {
					t.Errorf("sync: %v %v", s.Timeout, s.With.Static())
				}
			},
		},
		{
			name:     "preview off",
			extra:    "  preview: false\n",
			envs:     "    - dev\n",
			stages:   []string{"dev:dev"},
			steps:    map[string]string{"dev": "update:UpdateReleaseRepo merge:MergePR apps:FetchLinkedApps sync:GitOpsSync"},
			rollback: rollback,
			check:    func(t *testing.T, p *Pipeline) {},
		},
		{
			name:     "a PR that changes nothing may merge",
			extra:    "  allowNoop: true\n",
			envs:     "    - dev\n",
			stages:   []string{"dev:dev"},
			steps:    map[string]string{"dev": "update:UpdateReleaseRepo preview:DiffPreview merge:MergePR apps:FetchLinkedApps sync:GitOpsSync"},
			rollback: rollback,
			check: func(t *testing.T, p *Pipeline) {
				if pv := p.Stages[0].Steps[1].With.Static(); pv["allowNoop"] != true {
					t.Errorf("preview: %v", pv)
				}
			},
		},
		{
			name:     "merged by people",
			extra:    "  mergedBy: people\n",
			envs:     "    - dev\n",
			stages:   []string{"dev:dev"},
			steps:    map[string]string{"dev": "update:UpdateReleaseRepo apps:FetchLinkedApps sync:GitOpsSync"},
			rollback: rollback,
			check: func(t *testing.T, p *Pipeline) {
				s := p.Stages[0]
				if s.Steps[0].With.Static()["waitForMerge"] != true {
					t.Errorf("update does not wait for the merge: %v", s.Steps[0].With.Static())
				}
				if s.Steps[2].With.Static()["expectedRevision"] != "${{ steps.update.outputs.revision ?? steps.update.outputs.commitId }}" {
					t.Errorf("sync does not wait for the merged commit: %v", s.Steps[2].With.Static())
				}
				if s.Rollback[0].With.Static()["commitId"] != "${{ steps.update.outputs.commitId }}" {
					t.Errorf("revert: %v", s.Rollback[0].With.Static())
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Load("p.yaml", []byte(promoSrc(c.extra, c.envs)), steps.Default)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range p.Stages {
				got = append(got, s.ID+":"+s.Environment)
				if w := c.steps[s.ID]; stepIDs(s.Steps) != w {
					t.Errorf("stage %s steps:\n got %s\nwant %s", s.ID, stepIDs(s.Steps), w)
				}
				if stepIDs(s.Rollback) != c.rollback {
					t.Errorf("stage %s rollback: %s", s.ID, stepIDs(s.Rollback))
				}
				if s.Line < 19 {
					t.Errorf("stage %s line %d: want the line of its promotion entry", s.ID, s.Line)
				}
			}
			if strings.Join(got, " ") != strings.Join(c.stages, " ") {
				t.Errorf("stages %v, want %v", got, c.stages)
			}
			c.check(t, p)
		})
	}
}

// Promotion stages follow the pipeline's own stages, and may write their outputs.
func TestPromotionAfterOwnStages(t *testing.T) {
	src := strings.Replace(promoSrc("", "    - dev\n"), "promotion:", `stages:
  - id: build
    steps: [{id: b, type: Noop, with: {outputs: {tag: "2.1"}}}]
promotion:`, 1)
	src = strings.Replace(src, "inputs.tag", "stages.build.steps.b.outputs.tag", 1)
	p, err := Load("p.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 2 || p.Stages[0].ID != "build" || p.Stages[1].ID != "dev" || len(p.Deps(1)) != 1 || p.Deps(1)[0] != 0 {
		t.Fatalf("stages %v", stepIDs(nil))
	}
	if _, err := Load("p.yaml", []byte(strings.Replace(src, "steps.b.", "steps.nope.", 1)), steps.Default); err == nil ||
		!strings.Contains(err.Error(), `no step "nope" in stage "build"`) {
		t.Fatalf("a bad reference in set: is not reported: %v", err)
	}
}

// The expanded stages run on the state machine: each environment's UpdateReleaseRepo gets
// its own file, and a failing environment reverts its own merge commit.
func TestPromotionRunsAndRollsBackOnlyTheFailingEnvironment(t *testing.T) {
	m := mustLoad(t, promoSrc("  appSelector: harness.io/envRef=<+env.name>\n", "    - dev\n    - staging\n    - name: prod\n      clusters: [{name: prod-eu, agent: sim}]\n"))
	r, err := NewRun(m.P, "r1", map[string]any{"tag": "2.0"}, "me", testNow)
	if err != nil {
		t.Fatal(err)
	}
	var paths, reverted []string
	jobs := m.Advance(r, testNow)
	for n := 0; len(jobs) > 0; n++ {
		if n > 50 {
			t.Fatal("the run does not end")
		}
		j := jobs[0]
		res := steps.Done(nil)
		switch j.Step {
		case promoUpdate:
			tg := j.Inputs["targets"].([]any)[0].(map[string]any)
			paths = append(paths, fmt.Sprint(tg["filePath"]))
			if fmt.Sprint(tg["variables"]) != "[map[name:image.tag type:String value:2.0] map[name:replicas type:Number value:2]]" {
				t.Errorf("%s variables: %v", j.Stage, tg["variables"])
			}
			res = steps.Done(map[string]any{"prNumber": 1, "commitId": "branch-" + j.Stage})
		case promoMerge:
			res = steps.Done(map[string]any{"commitId": "merge-" + j.Stage})
		case promoApps:
			if j.Inputs["selector"] != "harness.io/envRef="+j.Stage || j.Inputs["applicationSet"] != "web" {
				t.Errorf("%s apps inputs: %v", j.Stage, j.Inputs)
			}
		case promoSync:
			if j.Stage == "prod" {
				res = steps.Fail("web-prod (agent sim): Degraded for longer than degradedStateTimeout 30s")
			}
		case promoRevert:
			reverted = append(reverted, fmt.Sprint(j.Stage, "@", j.Inputs["commitId"]))
			res = steps.Done(map[string]any{"prNumber": 2, "commitId": "revert-" + j.Stage})
		}
		jobs = append(jobs[1:], result(m, r, j, res, testNow)...)
	}
	if strings.Join(paths, " ") != "envs/dev/config.json envs/staging/config.json envs/prod/config.json" {
		t.Errorf("paths %v", paths)
	}
	if strings.Join(reverted, " ") != "prod@merge-prod" {
		t.Errorf("reverted %v, want only prod's merge commit", reverted)
	}
	for _, id := range []string{"dev", "staging"} {
		if s := r.Find(id); s.Status != StSucceeded {
			t.Errorf("stage %s: %s", id, s.Status)
		}
	}
	prod := r.Find("prod")
	wantPromoRollback(t, prod, StSucceeded)
	if r.Status != StFailed || !strings.Contains(r.Error, "stage prod: step sync: web-prod (agent sim): Degraded") {
		t.Errorf("run %s: %q", r.Status, r.Error)
	}
}

// A rejected approval merged nothing, so the rollback reverts nothing.
func TestPromotionRollbackSkipsWhenNothingWasMerged(t *testing.T) {
	m := mustLoad(t, promoSrc("", "    - name: dev\n      approval: {approvers: {users: [alice]}}\n"))
	r, _ := NewRun(m.P, "r1", map[string]any{"tag": "2.0"}, "me", testNow)
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 || jobs[0].Step != promoApproval {
		t.Fatalf("first job %+v", jobs)
	}
	if more := result(m, r, jobs[0], steps.Fail("rejected by alice"), testNow); len(more) != 0 {
		t.Fatalf("jobs after a rejection: %v", jobNames(more))
	}
	dev := r.Find("dev")
	wantPromoRollback(t, dev, StSkipped)
	if r.Status != StFailed || !strings.Contains(r.Error, "rejected by alice") {
		t.Errorf("run %s %q", r.Status, r.Error)
	}
}

func jobNames(jobs []*envelope.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Stage+"."+j.Step)
	}
	return out
}

func TestPromotionErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"unknown environment", promoSrc("", "    - dev\n    - prd\n"),
			[]string{`p.yaml:20:7: promotion.environments[1]: unknown environment "prd" (declare it under environments:, or give its clusters: here)`}},
		{"duplicate environment", promoSrc("", "    - dev\n    - staging\n    - name: dev\n"),
			[]string{`p.yaml:21:13: promotion.environments[2]: duplicate environment "dev"`}},
		{"empty list", promoSrc("", "    []\n"),
			[]string{"p.yaml:19:5: promotion.environments: want a non-empty list"}},
		{"no list", strings.TrimSuffix(promoSrc("", ""), "  environments:\n"),
			[]string{"p.yaml:11:3: promotion.environments: required: the environments to promote through"}},
		{"glob path", strings.Replace(promoSrc("", "    - dev\n"), `"envs/<+env.name>/config.json"`, `"envs/*/config.json"`, 1),
			[]string{`p.yaml:14:13: promotion.filePath: "envs/*/config.json" is a generator glob`}},
		{"path without env", strings.Replace(promoSrc("", "    - dev\n"), `"envs/<+env.name>/config.json"`, `envs/prod/config.json`, 1),
			[]string{`p.yaml:14:13: promotion.filePath: "envs/prod/config.json" does not name the environment`}},
		{"path escapes", strings.Replace(promoSrc("", "    - dev\n"), `"envs/<+env.name>/config.json"`, `"../<+env.name>/config.json"`, 1),
			[]string{`p.yaml:14:13: promotion.filePath: "../<+env.name>/config.json": want a path relative to the repo root`}},
		{"path bad expression", strings.Replace(promoSrc("", "    - dev\n"), `"envs/<+env.name>/config.json"`, `"envs/${{ env.name + }}/config.json"`, 1),
			[]string{`p.yaml:14:13: promotion.filePath:`}},
		{"missing fields", "name: x\npromotion:\n  environments: [dev]\n",
			[]string{"p.yaml:3:3: promotion.applicationSet: required", "promotion.connector: required", "promotion.repo: required",
				"promotion.filePath: required", "promotion.set: required", `unknown environment "dev"`}},
		{"unknown field", promoSrc("  mergedby: people\n", "    - dev\n"),
			[]string{"p.yaml:18:3: promotion.mergedby: unknown field (allowed: applicationSet,"}},
		{"bad mergedBy", promoSrc("  mergedBy: robots\n", "    - dev\n"),
			[]string{`p.yaml:18:13: promotion.mergedBy: want prflow (prflow merges each PR) or people`}},
		{"bad preview", promoSrc("  preview: maybe\n", "    - dev\n"),
			[]string{`p.yaml:18:12: promotion.preview: want true or false, got "maybe"`}},
		{"bad allowNoop", promoSrc("  allowNoop: 1\n", "    - dev\n"),
			[]string{`p.yaml:18:14: promotion.allowNoop: want true or false, got "1"`}},
		{"preview with people merging", promoSrc("  mergedBy: people\n  preview: true\n", "    - dev\n"),
			[]string{`p.yaml:19:12: promotion.preview: mergedBy: people merges outside prflow; the preview runs before prflow's merge only`}},
		{"bad soak", promoSrc("", "    - {name: dev, soak: a while}\n"),
			[]string{"p.yaml:19:25: promotion.environments[0].soak:"}},
		{"env declared twice", promoSrc("", "    - name: dev\n      clusters: [{name: x, agent: y}]\n"),
			[]string{`p.yaml:20:17: promotion.environments[0].clusters: environment "dev" is already declared under environments:`}},
		{"bad env name", promoSrc("", "    - name: eu.prod\n      clusters: [{name: x, agent: y}]\n"),
			[]string{`p.yaml:19:13: promotion.environments[0].name: "eu.prod": environment names of a promotion become stage ids`}},
		{"expression env name", promoSrc("", "    - name: ${{ inputs.tag }}\n"),
			[]string{`p.yaml:19:13: promotion.environments[0].name: an environment name is fixed at load`}},
		{"stage id clash", strings.Replace(promoSrc("", "    - dev\n"), "promotion:", "stages:\n  - id: dev\n    steps: [{id: a, type: Noop}]\npromotion:", 1),
			[]string{`p.yaml:22:7: promotion.environments[0]: stage id "dev" is taken by stages[0]`}},
		{"bad approval", promoSrc("", "    - {name: dev, approval: {approvers: 3}}\n"),
			[]string{"p.yaml:19:29: promotion.environments[0].approval: approvers: want a list or {users, groups}, got int"}},
		{"bad approval timeout", promoSrc("", "    - {name: dev, approval: {approvers: [a], timeout: soon}}\n"),
			[]string{`p.yaml:19:55: promotion.environments[0].approval.timeout: bad duration "soon"`}},
		{"bad merge strategy", promoSrc("  mergeStrategy: squish\n", "    - dev\n    - staging\n"),
			[]string{`p.yaml:18:18: promotion.mergeStrategy: mergeStrategy: "squish" is not merge, squash or rebase`}},
		{"bad app selector", promoSrc("  appSelector: \"tier in (web\"\n", "    - dev\n    - staging\n"),
			[]string{`p.yaml:18:16: promotion.appSelector: selector: `}},
		{"bad sync timeout", promoSrc("  syncTimeout: 5 minutes\n", "    - dev\n    - staging\n"),
			[]string{`p.yaml:18:16: promotion.syncTimeout: `}},
		{"bad set", promoSrc("", "    - {name: dev, set: [a]}\n"),
			[]string{"p.yaml:19:24: promotion.environments[0].set: want a mapping of key"}},
		{"unknown input in set", strings.Replace(promoSrc("", "    - dev\n    - staging\n"), "inputs.tag", "inputs.tga", 1),
			[]string{`p.yaml:16:16: promotion.set.image.tag: inputs.tga: no input "tga" declared under inputs:`}},
		{"bad expression in set", strings.Replace(promoSrc("", "    - dev\n    - staging\n"), "inputs.tag", "inputs.tag +", 1),
			[]string{`p.yaml:16:`, `promotion.set.image.tag: `}},
		{"duplicate promotion", promoSrc("", "    - dev\n") + "promotion: {}\n",
			[]string{"p.yaml:20:1: promotion: duplicate key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := loadErr(t, c.src)
			for _, w := range c.want {
				if n := strings.Count(err.Error(), w); n != 1 {
					t.Errorf("error\n%s\ncontains %d times (want once)\n%s", err, n, w)
				}
			}
		})
	}
}

// The JSON Schema editors use knows the promotion section: what loads matches it, and the
// common mistakes are flagged in the editor too.
func TestPromotionSchema(t *testing.T) {
	validateYAML := schemaValidator(t)
	validate := func(src string) error { return validateYAML([]byte(src)) }
	good := promoSrc("  mergedBy: people\n  syncTimeout: 5m\n", "    - dev\n    - {name: staging, soak: 10m, approval: {approvers: [a]}}\n"+
		"    - {name: qa, clusters: [{name: qa-eu, agent: sim}], set: {cluster.name: qa-eu}}\n")
	if _, err := Load("p.yaml", []byte(good), steps.Default); err != nil {
		t.Fatal(err)
	}
	if err := validate(good); err != nil {
		t.Fatalf("schema rejects a valid promotion: %v", err)
	}
	for name, bad := range map[string]string{
		"mergedBy":       promoSrc("  mergedBy: robots\n", "    - dev\n"),
		"path":           strings.Replace(promoSrc("", "    - dev\n"), "<+env.name>", "prod", 1),
		"empty list":     promoSrc("", "    []\n"),
		"unknown field":  promoSrc("  auto: true\n", "    - dev\n"),
		"env field":      promoSrc("", "    - {name: dev, wait: 1m}\n"),
		"soak":           promoSrc("", "    - {name: dev, soak: later}\n"),
		"no environment": strings.TrimSuffix(promoSrc("", ""), "  environments:\n"),
	} {
		if validate(bad) == nil {
			t.Errorf("%s: schema accepts\n%s", name, bad)
		}
		if _, err := Load("p.yaml", []byte(bad), steps.Default); err == nil {
			t.Errorf("%s: loader accepts it", name)
		}
	}
}

// wantPromoRollback checks that each of a promotion stage's rollback steps (revert, merge the
// revert, resync) ended in status want.
func wantPromoRollback(t *testing.T, s *StageRun, want Status) {
	t.Helper()
	for _, id := range []string{promoRevert, promoMergeRevert, promoResync} {
		if st := s.Step(id, true); st.Status != want {
			t.Errorf("rollback step %s: %s, want %s", id, st.Status, want)
		}
	}
}
