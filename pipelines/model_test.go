package pipelines

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// The model test drives the state machine through random pipelines (DAGs of stages and steps
// with when conditions, failure strategies and rollback steps) and random outcomes (succeed,
// fail, park then time out, stage timeout, cancel), and checks the safety invariants after
// every event. CI runs modelCases seeded cases; `task fuzz` runs more with -model.cases.
var (
	modelCases = flag.Int("model.cases", 400, "random pipelines the model test runs")
	modelSeed  = flag.Uint64("model.seed", 1, "first seed of the model test")
)

type modelStep struct {
	id, when, onFailure string
}

type modelStage struct {
	id, when, onFailure string
	needs               []string // nil: the previous stage
	needsSet            bool
	timeout             bool
	steps, rollback     []modelStep
}

var (
	stageWhens = []string{"", "", "", "false", "true", "failure()", "always()", "success()", "${{ failure() || inputs.n == 1 }}"}
	stepWhens  = []string{"", "", "", "", "false", "failure()", "always()", "success()"}
	failures   = []string{"", "", "", "ignore", "rollbackStage", "rollbackPipeline", "retry", "fail"}
)

func genModel(rng *rand.Rand) ([]modelStage, string) {
	n := 1 + rng.IntN(5)
	stages := make([]modelStage, n)
	var b strings.Builder
	b.WriteString("name: model\ninputs: {n: {type: number, default: 0}}\nstages:\n")
	genSteps := func(prefix string, k int) []modelStep {
		out := make([]modelStep, k)
		for i := range out {
			out[i] = modelStep{id: fmt.Sprintf("%s%d", prefix, i), when: stepWhens[rng.IntN(len(stepWhens))], onFailure: failures[rng.IntN(len(failures))]}
		}
		return out
	}
	for i := range stages {
		s := &stages[i]
		s.id = fmt.Sprintf("s%d", i)
		s.when = stageWhens[rng.IntN(len(stageWhens))]
		if i > 0 && rng.IntN(2) == 0 {
			s.needsSet = true
			for j := 0; j < i; j++ {
				if rng.IntN(3) == 0 {
					s.needs = append(s.needs, fmt.Sprintf("s%d", j))
				}
			}
		}
		s.timeout = rng.IntN(4) == 0
		s.steps = genSteps("a", 1+rng.IntN(3))
		if rng.IntN(2) == 0 {
			s.rollback = genSteps("r", 1+rng.IntN(2))
			for j := range s.rollback {
				s.rollback[j].onFailure = "" // rollback steps always fail their stage
			}
		}
		fmt.Fprintf(&b, "  - id: %s\n", s.id)
		if s.needsSet {
			fmt.Fprintf(&b, "    needs: [%s]\n", strings.Join(s.needs, ", "))
		}
		if s.when != "" {
			fmt.Fprintf(&b, "    when: %q\n", s.when)
		}
		if s.timeout {
			b.WriteString("    timeout: 10m\n")
		}
		for _, list := range []struct {
			key   string
			steps []modelStep
		}{{"steps", s.steps}, {"rollbackSteps", s.rollback}} {
			if len(list.steps) == 0 {
				continue
			}
			fmt.Fprintf(&b, "    %s:\n", list.key)
			for _, st := range list.steps {
				fmt.Fprintf(&b, "      - id: %s\n        type: Noop\n", st.id)
				if st.when != "" {
					fmt.Fprintf(&b, "        when: %q\n", st.when)
				}
				if st.onFailure != "" {
					fmt.Fprintf(&b, "        onFailure: %s\n", st.onFailure)
				}
			}
		}
	}
	return stages, b.String()
}

func TestModelStateMachine(t *testing.T) {
	for c := 0; c < *modelCases; c++ {
		seed := *modelSeed + uint64(c)
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		model, src := genModel(rng)
		p, err := Load("model.yaml", []byte(src), steps.Default)
		if err != nil {
			t.Fatalf("seed %d: load: %v\n%s", seed, err, src)
		}
		if msg := runModel(rng, &Machine{P: p}, model); msg != "" {
			t.Fatalf("seed %d: %s\npipeline:\n%s", seed, msg, src)
		}
	}
}

// runModel runs one random pipeline to its end and returns the first broken invariant.
func runModel(rng *rand.Rand, m *Machine, model []modelStage) string {
	r, err := NewRun(m.P, "r1", nil, "model", testNow)
	if err != nil {
		return "new run: " + err.Error()
	}
	return runModelRun(rng, m, model, r, nil)
}

// runModelRun runs r to its end with random outcomes; extra, when set, checks every job too.
func runModelRun(rng *rand.Rand, m *Machine, model []modelStage, r *Run, extra func(*envelope.Job) string) string {
	now := testNow
	byID := map[string]int{}
	for i, s := range model {
		byID[s.id] = i
	}
	cancelAt := -1
	if rng.IntN(8) == 0 {
		cancelAt = rng.IntN(6)
	}
	pending := m.Advance(r, now)
	for event := 0; ; event++ {
		if msg := checkModel(m, r, model, byID); msg != "" {
			return msg
		}
		for _, j := range pending {
			if msg := checkDispatch(m, r, j, model, byID); msg != "" {
				return msg
			}
			if extra != nil {
				if msg := extra(j); msg != "" {
					return msg
				}
			}
		}
		if r.Status.Terminal() {
			if len(pending) != 0 {
				return fmt.Sprintf("run %s with %d jobs still dispatched", r.Status, len(pending))
			}
			return checkEnd(r, cancelAt >= 0 && event > cancelAt)
		}
		if event > 400 {
			return fmt.Sprintf("run did not end after %d events: %s", event, dumpRun(r))
		}
		now = now.Add(time.Second)
		if event == cancelAt {
			m.Apply(r, &envelope.Event{Kind: queue.EvCancel, User: "model"}, now)
			pending = live(r, append(pending, m.Advance(r, now)...))
			continue
		}
		if len(pending) == 0 {
			// Nothing is out: only time can move the run (retry backoff, stage timeouts).
			due := m.NextDue(r)
			if due.IsZero() {
				return "run is stuck: no job out and nothing due: " + dumpRun(r)
			}
			if due.After(now) {
				now = due
			}
			changed := m.Tick(r, now)
			pending = m.Advance(r, now)
			if !changed && len(pending) == 0 && !r.Status.Terminal() {
				return fmt.Sprintf("NextDue says %s but nothing happens then: %s", due, dumpRun(r))
			}
			continue
		}
		// Answer one job, or let a stage time out.
		i := rng.IntN(len(pending))
		j := pending[i]
		pending = append(pending[:i:i], pending[i+1:]...)
		var res steps.Result
		switch k := rng.IntN(10); {
		case k < 6:
			res = steps.Done(nil)
		case k < 9:
			res = steps.Fail("boom")
		default:
			// The stage runs out of time while the job is out.
			now = now.Add(11 * time.Minute)
			m.Tick(r, now)
			pending = append(pending, m.Advance(r, now)...)
			pending = live(r, append(pending, j)) // a job the timeout ended is dropped: its result would be stale
			continue
		}
		m.Apply(r, &envelope.Event{Kind: queue.EvResult, Run: r.ID, Stage: j.Stage, Step: j.Step, Rollback: j.Rollback,
			Attempt: j.Attempt, Wake: j.Wake, Result: &res}, now)
		pending = append(pending, m.Advance(r, now)...)
		pending = live(r, pending)
	}
}

// live drops jobs whose step no longer waits for them (a stale result would be ignored).
func live(r *Run, jobs []*envelope.Job) []*envelope.Job {
	out := jobs[:0]
	for _, j := range jobs {
		sr := r.Find(j.Stage)
		if sr == nil {
			continue
		}
		st := sr.Step(j.Step, j.Rollback)
		if st != nil && st.Status == StQueued && st.Attempt == j.Attempt && st.Wake == j.Wake {
			out = append(out, j)
		}
	}
	return out
}

// checkDispatch: a job goes out only when everything its stage follows succeeded (or was
// skipped by its own when), unless the stage's when asks for failure()/always(); and within
// a stage only when no earlier step failed, unless the step's when asks for it.
func checkDispatch(m *Machine, r *Run, j *envelope.Job, model []modelStage, byID map[string]int) string {
	si := byID[j.Stage]
	sp := m.P.Stages[si]
	afterFailure := sp.When != nil && sp.When.RunsAfterFailure()
	for _, a := range m.ancestors(si) {
		as := r.Stages[a]
		if !as.Status.Terminal() {
			return fmt.Sprintf("job %s dispatched while stage %s (which it follows) is %s", j.ID(), as.ID, as.Status)
		}
		if bad(as.Status) && !afterFailure {
			return fmt.Sprintf("job %s dispatched although stage %s is %s and %s's when is %q", j.ID(), as.ID, as.Status, j.Stage, model[si].when)
		}
	}
	if j.Rollback {
		return ""
	}
	sr := r.Stages[si]
	st := m.spec(si, sr.Step(j.Step, false), false)
	for _, prev := range sr.Steps {
		if prev.ID == j.Step {
			break
		}
		if prev.Status == StFailed && !prev.Ignored && (st.When == nil || !st.When.RunsAfterFailure()) {
			return fmt.Sprintf("job %s dispatched after step %s failed (when %q)", j.ID(), prev.ID, model[si].steps[indexOf(sr.Steps, sr.Step(j.Step, false))].when)
		}
	}
	return ""
}

func bad(s Status) bool {
	return s == StFailed || s == StCancelled || s == StRolledBack || s == StNotRun
}

// checkModel holds at every moment: a stage that did not run names why, and only a failure
// before it (or a pipeline rollback) makes a stage not run.
func checkModel(m *Machine, r *Run, model []modelStage, byID map[string]int) string {
	for si, sr := range r.Stages {
		if sr.Status != StNotRun {
			continue
		}
		if sr.Error == "" {
			return "stage " + sr.ID + " is notRun without a reason"
		}
		if sp := m.P.Stages[si]; sp.When != nil && sp.When.RunsAfterFailure() {
			return fmt.Sprintf("stage %s is notRun although its when %q asks to run after a failure", sr.ID, model[si].when)
		}
		failed := r.RollingBack
		for _, a := range m.ancestors(si) {
			if s := r.Stages[a].Status; s == StFailed || s == StCancelled || s == StRolledBack {
				failed = true
			}
		}
		if !failed {
			return fmt.Sprintf("stage %s is notRun (%s) but nothing before it failed: %s", sr.ID, sr.Error, dumpRun(r))
		}
		for _, st := range sr.Steps {
			if !st.Started.IsZero() || !st.Queued.IsZero() {
				return fmt.Sprintf("stage %s is notRun but its step %s was dispatched", sr.ID, st.ID)
			}
		}
	}
	return ""
}

// checkEnd: the run's status agrees with its stages, and everything ended.
func checkEnd(r *Run, cancelled bool) string {
	anyFailed := false
	for _, sr := range r.Stages {
		if !sr.Status.Terminal() {
			return fmt.Sprintf("run %s but stage %s is %s", r.Status, sr.ID, sr.Status)
		}
		for _, list := range [][]*StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if !st.Status.Terminal() && st.Status != StPending {
					return fmt.Sprintf("run %s but step %s.%s is %s", r.Status, sr.ID, st.ID, st.Status)
				}
			}
		}
		if sr.Status == StFailed || sr.Status == StCancelled {
			anyFailed = true
		}
	}
	switch r.Status {
	case StSucceeded:
		for _, sr := range r.Stages {
			if sr.Status != StSucceeded && sr.Status != StSkipped {
				return fmt.Sprintf("run succeeded but stage %s is %s: %s", sr.ID, sr.Status, dumpRun(r))
			}
		}
	case StFailed:
		if !anyFailed && !r.RollingBack {
			return "run failed but no stage failed and no pipeline rollback: " + dumpRun(r)
		}
	case StCancelled:
		if !cancelled {
			return "run cancelled without a cancel"
		}
	default:
		return "run ended " + string(r.Status)
	}
	return ""
}

func dumpRun(r *Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s %q rollingBack=%v;", r.Status, r.Error, r.RollingBack)
	for _, sr := range r.Stages {
		fmt.Fprintf(&b, " %s=%s[", sr.ID, sr.Status)
		for _, st := range sr.Steps {
			fmt.Fprintf(&b, "%s:%s ", st.ID, st.Status)
		}
		for _, st := range sr.Rollback {
			fmt.Fprintf(&b, "rb.%s:%s ", st.ID, st.Status)
		}
		b.WriteString("]")
	}
	return b.String()
}
