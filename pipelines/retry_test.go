package pipelines

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// drive runs r to its end, answering every job with decide, and returns the jobs in the
// order they were dispatched.
func driveRetry(t *testing.T, m *Machine, r *Run, decide func(j *envelope.Job) steps.Result) []*envelope.Job {
	t.Helper()
	var all []*envelope.Job
	queue := m.Advance(r, testNow)
	for n := 0; len(queue) > 0; n++ {
		if n > 200 {
			t.Fatalf("run %s does not end", r.ID)
		}
		j := queue[0]
		queue = queue[1:]
		all = append(all, j)
		queue = append(queue, result(m, r, j, decide(j), testNow)...)
	}
	if !r.Status.Terminal() {
		t.Fatalf("run %s stuck %s", r.ID, r.Status)
	}
	return all
}

// failing answers every job with success and outputs naming the step and run, except the
// steps listed, which fail.
func failing(fail ...string) func(j *envelope.Job) steps.Result {
	return func(j *envelope.Job) steps.Result {
		if slices.Contains(fail, j.Stage+"."+j.Step) {
			return steps.Fail("boom in " + j.Stage + "." + j.Step)
		}
		return steps.Done(map[string]any{"commitId": j.Run + "/" + j.Stage + "." + j.Step, "go": "yes"})
	}
}

func ids(jobs []*envelope.Job) []string {
	var out []string
	for _, j := range jobs {
		id := j.Stage + "." + j.Step
		if j.Rollback {
			id += "(rollback)"
		}
		out = append(out, id)
	}
	return out
}

func statuses(r *Run) string {
	var out []string
	for _, s := range r.Stages {
		st := s.ID + "=" + string(s.Status)
		if s.CarriedFrom != "" {
			st += "(from " + s.CarriedFrom + ")"
		}
		out = append(out, st)
	}
	return strings.Join(out, " ")
}

const linearSrc = `
name: promo
stages:
  - id: dev
    steps:
      - {id: update, type: Noop}
      - {id: merge, type: Noop}
  - id: prod
    steps:
      - {id: update, type: Noop, with: {message: "${{ stages.dev.steps.merge.outputs.commitId }}"}}
      - {id: merge, type: Noop}
`

// Retry from the failed stage: the stages that succeeded are carried over (not run again, their
// outputs still resolve), the state machine starts at the failed stage(s), and failure still
// propagates in the new run.
func TestCarryOverRuns(t *testing.T) {
	cases := []struct {
		name      string
		src       string
		fail      []string // steps that fail in the first run
		failAgain []string // steps that fail in the retry
		carried   []string // stages carried over
		ran       []string // what the retry dispatches, in order
		final     string   // the retry's stage statuses at the end
	}{{
		name: "linear", src: linearSrc, fail: []string{"prod.update"},
		carried: []string{"dev"}, ran: []string{"prod.update", "prod.merge"},
		final: "dev=succeeded(from r1) prod=succeeded",
	}, {
		name: "failed middle stage, the last not run",
		src: `
name: promo
stages:
  - {id: a, steps: [{id: s, type: Noop}]}
  - {id: b, steps: [{id: s, type: Noop}, {id: t, type: Noop}]}
  - {id: c, steps: [{id: s, type: Noop}]}
`,
		fail: []string{"b.t"}, carried: []string{"a"}, ran: []string{"b.s", "b.t", "c.s"},
		final: "a=succeeded(from r1) b=succeeded c=succeeded",
	}, {
		name: "fails again: what follows is not run",
		src: `
name: promo
stages:
  - {id: a, steps: [{id: s, type: Noop}]}
  - {id: b, steps: [{id: s, type: Noop}]}
  - {id: c, steps: [{id: s, type: Noop}]}
`,
		fail: []string{"b.s"}, failAgain: []string{"b.s"}, carried: []string{"a"}, ran: []string{"b.s"},
		final: "a=succeeded(from r1) b=failed c=notRun",
	}, {
		name: "parallel needs: the succeeded branch is carried, the join runs",
		src: `
name: promo
stages:
  - {id: a, steps: [{id: s, type: Noop}]}
  - {id: b, needs: [], steps: [{id: s, type: Noop}]}
  - {id: c, needs: [a, b], steps: [{id: s, type: Noop, with: {message: "${{ stages.a.steps.s.outputs.commitId }}"}}]}
`,
		fail: []string{"b.s"}, carried: []string{"a"}, ran: []string{"b.s", "c.s"},
		final: "a=succeeded(from r1) b=succeeded c=succeeded",
	}, {
		name: "a stage that succeeded after a failed one it follows runs again",
		src: `
name: promo
stages:
  - {id: a, steps: [{id: s, type: Noop}]}
  - {id: b, steps: [{id: s, type: Noop}]}
  - {id: notify, when: "${{ always() }}", steps: [{id: s, type: Noop}]}
`,
		fail: []string{"b.s"}, carried: []string{"a"}, ran: []string{"b.s", "notify.s"},
		final: "a=succeeded(from r1) b=succeeded notify=succeeded",
	}, {
		name: "rollbackStage: the failed stage was rolled back and is promoted again",
		src: `
name: promo
stages:
  - id: dev
    steps: [{id: s, type: Noop}]
    rollbackSteps: [{id: undo, type: Noop}]
  - id: prod
    steps: [{id: s, type: Noop}]
    rollbackSteps: [{id: undo, type: Noop}]
`,
		fail: []string{"prod.s"}, carried: []string{"dev"}, ran: []string{"prod.s"},
		final: "dev=succeeded(from r1) prod=succeeded",
	}, {
		name: "rollbackPipeline: every rolled-back stage is promoted again",
		src: `
name: promo
stages:
  - id: dev
    steps: [{id: s, type: Noop}]
    rollbackSteps: [{id: undo, type: Noop}]
  - id: prod
    onFailure: rollbackPipeline
    steps: [{id: s, type: Noop}]
`,
		fail: []string{"prod.s"}, carried: nil, ran: []string{"dev.s", "prod.s"},
		final: "dev=succeeded prod=succeeded",
	}, {
		name: "when conditions read the carried outputs",
		src: `
name: promo
stages:
  - {id: a, steps: [{id: s, type: Noop}]}
  - {id: b, when: "${{ stages.a.steps.s.outputs.go == 'yes' }}", steps: [{id: s, type: Noop}]}
  - {id: c, when: "${{ stages.a.steps.s.outputs.go == 'no' }}", steps: [{id: s, type: Noop}]}
`,
		fail: []string{"b.s"}, carried: []string{"a"}, ran: []string{"b.s"},
		final: "a=succeeded(from r1) b=succeeded c=skipped",
	}, {
		name: "a stage skipped by its own when is carried, and what follows it",
		src: `
name: promo
inputs: {canary: {type: boolean, default: false}}
stages:
  - {id: a, steps: [{id: s, type: Noop}]}
  - {id: canary, when: "${{ inputs.canary }}", steps: [{id: s, type: Noop}]}
  - {id: b, steps: [{id: s, type: Noop}]}
  - {id: c, steps: [{id: s, type: Noop}]}
`,
		fail: []string{"c.s"}, carried: []string{"a", "canary", "b"}, ran: []string{"c.s"},
		final: "a=succeeded(from r1) canary=skipped(from r1) b=succeeded(from r1) c=succeeded",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustLoad(t, tc.src)
			old, err := NewRun(m.P, "r1", nil, "alice", testNow)
			if err != nil {
				t.Fatal(err)
			}
			driveRetry(t, m, old, failing(tc.fail...))
			if old.Status != StFailed {
				t.Fatalf("first run %s, want failed (%s)", old.Status, statuses(old))
			}
			r, _ := NewRun(m.P, "r2", old.Inputs, "bob", testNow)
			carried, err := CarryOver(m.P, r, old)
			if err != nil {
				t.Fatalf("CarryOver: %v", err)
			}
			if !slices.Equal(carried, tc.carried) {
				t.Fatalf("carried %v, want %v", carried, tc.carried)
			}
			jobs := driveRetry(t, m, r, failing(tc.failAgain...))
			if got := ids(jobs); !slices.Equal(got, tc.ran) {
				t.Fatalf("retry dispatched %v, want %v", got, tc.ran)
			}
			if got := statuses(r); got != tc.final {
				t.Fatalf("retry ended %s\n want %s", got, tc.final)
			}
			wantStatus := StSucceeded
			if len(tc.failAgain) > 0 {
				wantStatus = StFailed
			}
			if r.Status != wantStatus {
				t.Fatalf("retry %s (%s), want %s", r.Status, r.Error, wantStatus)
			}
			// Carried stages keep the first run's outputs; the stages run again have the retry's.
			for _, s := range r.Stages {
				for _, st := range s.Steps {
					if st.Status != StSucceeded {
						continue
					}
					want := "r2/"
					if s.CarriedFrom != "" {
						want = "r1/"
					}
					if got, _ := st.Outputs["commitId"].(string); !strings.HasPrefix(got, want) {
						t.Errorf("%s.%s outputs %v, want from %s", s.ID, st.ID, st.Outputs, want)
					}
				}
			}
		})
	}
}

// The stage after a carried one gets the carried outputs in its inputs.
func TestCarryOverOutputsResolve(t *testing.T) {
	m := mustLoad(t, linearSrc)
	old, _ := NewRun(m.P, "r1", nil, "alice", testNow)
	driveRetry(t, m, old, failing("prod.merge"))
	r, _ := NewRun(m.P, "r2", nil, "bob", testNow)
	if _, err := CarryOver(m.P, r, old); err != nil {
		t.Fatal(err)
	}
	jobs := m.Advance(r, testNow)
	if len(jobs) != 1 || jobs[0].Stage != "prod" || jobs[0].Step != "update" {
		t.Fatalf("first job of the retry: %v", ids(jobs))
	}
	if got := jobs[0].Inputs["message"]; got != "r1/dev.merge" {
		t.Fatalf("prod.update message = %v, want dev's merge commit from r1", got)
	}
	// A retry of the retry still says which run ran dev.
	next := result(m, r, jobs[0], steps.Done(nil), testNow)
	result(m, r, next[0], steps.Fail("boom"), testNow)
	if r.Status != StFailed {
		t.Fatalf("retry %s", statuses(r))
	}
	r3, _ := NewRun(m.P, "r3", nil, "bob", testNow)
	if _, err := CarryOver(m.P, r3, r); err != nil {
		t.Fatal(err)
	}
	if r3.Find("dev").CarriedFrom != "r1" {
		t.Fatalf("retry of a retry: dev carried from %q, want r1", r3.Find("dev").CarriedFrom)
	}
}

// A carried stage's PRs belong to the run that made them: a failed retry's cleanup leaves
// them alone and closes only its own.
func TestCarryOverCleanupLeavesCarriedPRs(t *testing.T) {
	src := `
name: promo
stages:
  - {id: dev, steps: [{id: update, type: UpdateReleaseRepo, with: {connector: c, repo: o/r, baseBranch: main, filePath: a.yaml}}]}
  - {id: prod, steps: [{id: update, type: UpdateReleaseRepo, with: {connector: c, repo: o/r, baseBranch: main, filePath: b.yaml}}]}
`
	m := mustLoad(t, src)
	pr := func(j *envelope.Job) steps.Result {
		if j.Stage == "prod" {
			return steps.Fail("conflict")
		}
		return steps.Done(map[string]any{"connector": "c", "repo": "o/r", "prNumber": 7, "ref": "b1"})
	}
	old, _ := NewRun(m.P, "r1", nil, "alice", testNow)
	driveRetry(t, m, old, pr)
	r, _ := NewRun(m.P, "r2", nil, "bob", testNow)
	if _, err := CarryOver(m.P, r, old); err != nil {
		t.Fatal(err)
	}
	driveRetry(t, m, r, func(j *envelope.Job) steps.Result {
		return steps.Done(map[string]any{"connector": "c", "repo": "o/r", "prNumber": 9, "ref": "b2"})
	})
	// Fail prod's PR after the fact: the retry's cleanup sees dev's carried PR 7 and prod's PR 9.
	r.Status = StFailed
	j := m.CleanupJob(r)
	if j == nil {
		t.Fatal("no cleanup job for the failed retry")
	}
	prs := j.Inputs["prs"].([]any)
	if len(prs) != 1 || prs[0].(map[string]any)["prNumber"] != 9 {
		t.Fatalf("cleanup closes %v, want only the retry's own PR 9", prs)
	}
}

// Mistaken and stale requests are refused with the reason, and r is left as it was.
func TestCarryOverRefuses(t *testing.T) {
	m := mustLoad(t, linearSrc)
	old, _ := NewRun(m.P, "r1", nil, "alice", testNow)
	driveRetry(t, m, old, failing("prod.update"))
	ok, _ := NewRun(m.P, "r0", nil, "alice", testNow)
	driveRetry(t, m, ok, failing())
	cases := []struct {
		name, src string
		old       *Run
		want      string
	}{
		{"a run that succeeded", linearSrc, ok, "only a failed or cancelled run is retried"},
		{"a stage that succeeded is gone", strings.Replace(linearSrc, "id: dev", "id: staging", 1), old, "has no stage dev any more"},
		{"its steps changed", strings.Replace(linearSrc, "{id: update, type: Noop}", "{id: render, type: Noop}", 1), old, "stage dev: its steps changed since run r1 (then [update:Noop merge:Noop], now [render:Noop merge:Noop])"},
		{"another pipeline", strings.Replace(linearSrc, "name: promo", "name: other", 1), old, `run r1 is a run of pipeline "promo", not "other"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if tc.name == "a stage that succeeded is gone" {
				src = strings.Replace(src, "stages.dev.", "stages.staging.", 1)
			}
			p, err := Load("t.yaml", []byte(src), steps.Default)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := NewRun(p, "r2", nil, "bob", testNow)
			_, err = CarryOver(p, r, tc.old)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			for _, s := range r.Stages {
				if s.Status != StPending || s.CarriedFrom != "" {
					t.Fatalf("a refused retry changed the run: %s", statuses(r))
				}
			}
		})
	}
}

// A run whose every stage succeeded or was skipped (it failed elsewhere, e.g. its pipeline
// rollback had nothing to undo) has nothing to retry: carrying everything would make a run
// that succeeds without running anything.
func TestCarryOverNothingToRetry(t *testing.T) {
	m := mustLoad(t, linearSrc)
	old, _ := NewRun(m.P, "r1", nil, "alice", testNow)
	driveRetry(t, m, old, failing())
	old.Status, old.Error = StFailed, "rolled back"
	r, _ := NewRun(m.P, "r2", nil, "bob", testNow)
	if _, err := CarryOver(m.P, r, old); err == nil || !strings.Contains(err.Error(), "no failed stage to retry from") {
		t.Fatalf("err %v", err)
	}
}

// When a retry fails and rolls back the pipeline, a carried stage is rolled back too, from its
// carried outputs: the retry finishes the first run's promotion, so undoing it undoes all of it.
func TestCarryOverPipelineRollbackReachesCarried(t *testing.T) {
	src := `
name: promo
stages:
  - id: dev
    steps: [{id: merge, type: Noop}]
    rollbackSteps: [{id: undo, type: Noop, with: {message: "${{ stages.dev.steps.merge.outputs.commitId }}"}}]
  - id: prod
    onFailure: rollbackPipeline
    steps: [{id: s, type: Noop}]
`
	m := mustLoad(t, src)
	old, _ := NewRun(m.P, "r1", nil, "alice", testNow)
	driveRetry(t, m, old, failing("prod.s"))
	// The first run rolled dev back too; make it the case where dev stayed (a cancel).
	if old.Find("dev").Status != StRolledBack {
		t.Fatalf("first run: %s", statuses(old))
	}
	old2, _ := NewRun(m.P, "r1b", nil, "alice", testNow)
	jobs := m.Advance(old2, testNow)
	result(m, old2, jobs[0], steps.Done(map[string]any{"commitId": "c-dev"}), testNow)
	m.cancel(old2, "alice", testNow)
	r, _ := NewRun(m.P, "r2", nil, "bob", testNow)
	if _, err := CarryOver(m.P, r, old2); err != nil {
		t.Fatal(err)
	}
	got := driveRetry(t, m, r, failing("prod.s"))
	if s := ids(got); !slices.Equal(s, []string{"prod.s", "dev.undo(rollback)"}) {
		t.Fatalf("dispatched %v", s)
	}
	if got[1].Inputs["message"] != "c-dev" {
		t.Fatalf("rollback of the carried dev reverts %v, want c-dev", got[1].Inputs["message"])
	}
}

// TestModelRetry drives random pipelines (the model test's) to a failed or cancelled end, then
// retries them from the failed stage with random outcomes again, checking the model's
// invariants on the retry plus: no carried stage's step is dispatched (only its rollback steps,
// by a pipeline rollback), every carried stage follows only carried stages, and a carried stage
// ends as it was carried unless a pipeline rollback undid it.
func TestModelRetry(t *testing.T) {
	retried := 0
	for c := 0; c < *modelCases; c++ {
		seed := *modelSeed + uint64(c)
		rng := rand.New(rand.NewPCG(seed, 0xfa11))
		model, src := genModel(rng)
		p, err := Load("model.yaml", []byte(src), steps.Default)
		if err != nil {
			t.Fatalf("seed %d: load: %v", seed, err)
		}
		m := &Machine{P: p}
		old, _ := NewRun(p, "r1", nil, "model", testNow)
		if msg := runModelRun(rng, m, model, old, nil); msg != "" {
			t.Fatalf("seed %d: first run: %s\n%s", seed, msg, src)
		}
		r, _ := NewRun(p, "r2", nil, "model", testNow)
		carried, err := CarryOver(p, r, old)
		if old.Status != StFailed && old.Status != StCancelled {
			if err == nil {
				t.Fatalf("seed %d: a %s run was retried", seed, old.Status)
			}
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "no failed stage to retry from") {
				t.Fatalf("seed %d: CarryOver: %v", seed, err)
			}
			continue
		}
		retried++
		was := map[string]string{}
		for si, s := range r.Stages {
			if s.CarriedFrom == "" {
				continue
			}
			was[s.ID] = dumpStage(s)
			for _, d := range p.Deps(si) {
				if r.Stages[d].CarriedFrom == "" {
					t.Fatalf("seed %d: %s carried but %s, which it follows, is not", seed, s.ID, r.Stages[d].ID)
				}
			}
			if o := old.Find(s.ID); o.Status != StSucceeded && o.Status != StSkipped {
				t.Fatalf("seed %d: carried %s which ended %s", seed, s.ID, o.Status)
			}
		}
		if len(was) != len(carried) {
			t.Fatalf("seed %d: carried %v, marked %v", seed, carried, was)
		}
		extra := func(j *envelope.Job) string {
			if _, ok := was[j.Stage]; ok && !j.Rollback {
				return fmt.Sprintf("job %s dispatched for a stage carried over", j.ID())
			}
			return ""
		}
		if msg := runModelRun(rng, m, model, r, extra); msg != "" {
			t.Fatalf("seed %d: retry: %s\nfirst run: %s\npipeline:\n%s", seed, msg, dumpRun(old), src)
		}
		for _, s := range r.Stages {
			if w, ok := was[s.ID]; ok && dumpStage(s) != w && !r.RollingBack {
				t.Fatalf("seed %d: carried stage changed: %s → %s", seed, w, dumpStage(s))
			}
		}
	}
	if retried < *modelCases/10 {
		t.Fatalf("only %d of %d cases had something to retry: the model does not exercise retries", retried, *modelCases)
	}
	t.Logf("%d of %d random runs retried", retried, *modelCases)
}

func dumpStage(s *StageRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s[", s.ID, s.Status)
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "%s:%s ", st.ID, st.Status)
	}
	return b.String() + "]"
}
