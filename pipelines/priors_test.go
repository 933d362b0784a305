package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// priorsRegistry holds Noop (declares it reads no prior) and three test types: Produce (reads
// none), Consume (reads Produce) and Legacy (declares nothing, as a custom type written before
// Definition.Priors: it gets every earlier step).
func priorsRegistry(t *testing.T) *steps.Registry {
	t.Helper()
	reg := steps.NewRegistry()
	noop, _ := steps.Default.Lookup("Noop")
	reg.Register(*noop)
	run := func() steps.Step {
		return steps.StepFunc(func(context.Context, *steps.Context) (steps.Result, error) { return steps.Done(nil), nil })
	}
	reg.Register(steps.Definition{Type: "Produce", Priors: steps.NoPriors, New: run})
	reg.Register(steps.Definition{Type: "Consume", Priors: []string{"Produce"}, New: run})
	reg.Register(steps.Definition{Type: "Legacy", New: run})
	return reg
}

func loadWith(t *testing.T, reg *steps.Registry, src string) *Machine {
	t.Helper()
	p, err := Load("t.yaml", []byte(src), reg)
	if err != nil {
		t.Fatal(err)
	}
	return &Machine{P: p, Reg: reg}
}

func priorIDs(j *envelope.Job) []string {
	var ids []string
	for _, p := range j.Priors {
		ids = append(ids, p.ID)
	}
	return ids
}

// A 10-step run whose steps each output 4 KB: a step's job does not grow with the outputs of
// earlier steps it does not read. Each job carried every earlier step's outputs before
// (the tenth job 36 KB of them).
func TestJobsDoNotGrowWithPriorsTheyDoNotRead(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("name: x\nstages:\n  - id: s\n    steps:\n")
	for i := range 10 {
		fmt.Fprintf(&sb, "      - {id: n%d, type: Noop}\n", i)
	}
	m := mustLoad(t, sb.String())
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	big := map[string]any{"blob": strings.Repeat("x", 4096)}
	j := m.Advance(r, testNow)[0]
	var sizes []int
	for i := range 10 {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(b))
		if len(j.Priors) != 0 {
			t.Errorf("job %d (%s) carries priors %v; Noop reads none", i, j.Step, priorIDs(j))
		}
		if !strings.Contains(string(b), `"priorTypes":[]`) {
			t.Errorf("job %d does not tell the worker that no priors were sent: %.200s", i, b)
		}
		next := result(m, r, j, steps.Done(big), testNow)
		if i < 9 {
			j = next[0]
		}
	}
	if r.Status != StSucceeded {
		t.Fatalf("run %s", r.Status)
	}
	if slices.Max(sizes)-slices.Min(sizes) > 16 {
		t.Errorf("job sizes grow along the run: %v bytes", sizes)
	}
}

// A step gets the earlier steps of the types it declares, in order, with their outputs, in
// its stage and in its stage's rollback; a type that declares nothing gets all of them.
func TestJobsCarryThePriorsTheirStepReads(t *testing.T) {
	src := `
name: x
stages:
  - id: s
    steps:
      - {id: p1, type: Produce}
      - {id: n1, type: Noop}
      - {id: p2, type: Produce}
      - {id: c1, type: Consume}
      - {id: l1, type: Legacy}
      - {id: boom, type: Noop}
    rollbackSteps:
      - {id: rp, type: Produce}
      - {id: rn, type: Noop}
      - {id: rc, type: Consume}
      - {id: rl, type: Legacy}
`
	m := loadWith(t, priorsRegistry(t), src)
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	jobs := map[string]*envelope.Job{}
	j := m.Advance(r, testNow)[0]
	for j != nil {
		jobs[j.Step] = j
		res := steps.Done(map[string]any{"from": j.Step})
		if j.Step == "boom" {
			res = steps.Fail("boom")
		}
		next := result(m, r, j, res, testNow)
		j = nil
		if len(next) > 0 {
			j = next[0]
		}
	}
	want := map[string][]string{
		"p1": nil, "n1": nil, "p2": nil, "c1": {"p1", "p2"}, "l1": {"p1", "n1", "p2", "c1"}, "boom": nil,
		"rp": nil, "rn": nil, "rc": {"p1", "p2", "rp"}, "rl": {"p1", "n1", "p2", "c1", "l1", "rp", "rn", "rc"},
	}
	for step, w := range want {
		jb := jobs[step]
		if jb == nil {
			t.Fatalf("step %s never dispatched (got %v)", step, jobs)
		}
		if got := priorIDs(jb); !slices.Equal(got, w) {
			t.Errorf("%s's job carries priors %v, want %v", step, got, w)
		}
	}
	if c := jobs["c1"]; !slices.Equal(c.PriorTypes, []string{"Produce"}) || c.Priors[1].Outputs["from"] != "p2" || c.Priors[1].Type != "Produce" {
		t.Errorf("c1's job: types %v, priors %+v", c.PriorTypes, c.Priors)
	}
	if l := jobs["l1"]; l.PriorTypes != nil {
		t.Errorf("Legacy declares nothing, yet its job says only %v were sent", l.PriorTypes)
	}
}

// The built-in step types of a promotion (UpdateReleaseRepo, DiffPreview, MergePR,
// FetchLinkedApps, GitOpsSync, StageGate; RevertPR, MergePR and GitOpsSync to roll back) get,
// in their jobs, exactly the earlier steps of the types their Definition.Priors declare, with
// their outputs: GitOpsSync the merge commit, RevertPR the release repo, StageGate the synced apps.
func TestBuiltInStepsGetThePriorsTheyRead(t *testing.T) {
	m := mustLoad(t, promoSrc("", "    - dev\n    - {name: staging, soak: 10m}\n"))
	r, err := NewRun(m.P, "r1", map[string]any{"tag": "2.0"}, "me", testNow)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		stage string
		j     *envelope.Job
	}
	var all []seen
	jobs := m.Advance(r, testNow)
	for n := 0; len(jobs) > 0; n++ {
		if n > 50 {
			t.Fatal("the run does not end")
		}
		j := jobs[0]
		all = append(all, seen{j.Stage, j})
		out := map[string]any{"from": j.Step + "@" + j.Stage, "commitId": "c-" + j.Step, "blob": strings.Repeat("x", 2048)}
		res := steps.Done(out)
		if j.Stage == "staging" && j.Step == promoSync && !j.Rollback {
			res = steps.Fail("Degraded") // staging rolls back
		}
		jobs = append(jobs[1:], result(m, r, j, res, testNow)...)
	}
	ran := map[string]bool{}
	for _, s := range all {
		j := s.j
		key := j.Stage + "/" + j.Step
		if j.Rollback {
			key += "(rollback)"
		}
		ran[key] = true
		def, _ := steps.Default.Lookup(j.Type)
		if def.Priors == nil {
			t.Errorf("%s: built-in type %s declares no Priors", key, j.Type)
			continue
		}
		// What the job should carry: the succeeded steps before it, of the declared types.
		var want []string
		st := r.Find(j.Stage)
		list := st.Steps
		if j.Rollback {
			list = append(append([]*StepRun{}, st.Steps...), st.Rollback...)
		}
		for _, p := range list {
			if p.ID == j.Step && (!j.Rollback || slices.Contains(st.Rollback, p)) {
				break
			}
			if p.Status == StSucceeded && slices.Contains(def.Priors, p.Type) {
				want = append(want, p.ID)
			}
		}
		if got := priorIDs(j); !slices.Equal(got, want) {
			t.Errorf("%s (%s): priors %v, want %v", key, j.Type, got, want)
		}
		for _, p := range j.Priors {
			if p.Outputs["from"] != p.ID+"@"+j.Stage {
				t.Errorf("%s: prior %s carries outputs %v", key, p.ID, p.Outputs["from"])
			}
		}
	}
	for _, k := range []string{"dev/sync", "dev/merge", "staging/sync", "staging/revert(rollback)", "staging/resync(rollback)"} {
		if !ran[k] {
			t.Fatalf("the run never dispatched %s (ran %v)", k, ran)
		}
	}
	for _, s := range all {
		got := strings.Join(priorIDs(s.j), " ")
		switch s.stage + "/" + s.j.Step + fmt.Sprint(s.j.Rollback) {
		case "dev/syncfalse":
			if got != "update merge apps" {
				t.Errorf("dev sync got %q, want the update, the merge and the linked apps", got)
			}
		case "staging/revertfalse", "staging/reverttrue":
			if got != "update" {
				t.Errorf("staging revert got %q, want only the update", got)
			}
		}
	}
}
