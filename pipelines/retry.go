package pipelines

import (
	"fmt"
	"maps"
	"strings"
)

// CarryOver makes r, a new run of p that has not started, a retry of old, a failed or
// cancelled run of the same pipeline: every stage that succeeded in old (or was skipped by its
// own when) and follows only stages carried over too is taken over as it ended there, with
// its steps' outputs, so expressions such as stages.dev.steps.merge.output.commitId still
// resolve; its CarriedFrom names the run that ran it. The other stages (failed, cancelled,
// rolled back, not run) start from scratch, so a stage whose change was rolled back is
// promoted again. It returns the ids of the stages carried over.
//
// It refuses, changing nothing, when p changed so that what old did no longer fits it: a
// stage that succeeded there no longer exists, or its steps are not the same ids and types.
// It also refuses when every stage would be carried over: nothing would run, and a run that
// ran nothing must not succeed.
func CarryOver(p *Pipeline, r, old *Run) ([]string, error) {
	if old.Pipeline != p.Name {
		return nil, fmt.Errorf("run %s is a run of pipeline %q, not %q", old.ID, old.Pipeline, p.Name)
	}
	if old.Status != StFailed && old.Status != StCancelled {
		return nil, fmt.Errorf("run %s %s: only a failed or cancelled run is retried from its failed stage (re-run it to run every stage again)", old.ID, old.Status)
	}
	index := map[string]int{}
	for i, s := range p.Stages {
		index[s.ID] = i
	}
	var problems []string
	cand := make([]*StageRun, len(p.Stages))
	for _, was := range old.Stages {
		if was == nil || (was.Status != StSucceeded && was.Status != StSkipped) {
			continue
		}
		si, ok := index[was.ID]
		if !ok {
			if was.Status == StSucceeded {
				problems = append(problems, fmt.Sprintf("stage %s succeeded in run %s but pipeline %s has no stage %s any more", was.ID, old.ID, p.Name, was.ID))
			}
			continue
		}
		if was.Status == StSucceeded {
			if then, now := stepList(was.Steps), specList(p.Stages[si].Steps); then != now {
				problems = append(problems, fmt.Sprintf("stage %s: its steps changed since run %s (then %s, now %s), so its outputs cannot be carried over", was.ID, old.ID, then, now))
				continue
			}
			if rollbackStarted(was) {
				continue // partly undone: run it again
			}
		}
		cand[si] = was
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("cannot retry run %s from its failed stage: %s (re-run it instead)", old.ID, strings.Join(problems, "; "))
	}
	// A stage is carried over only when everything it follows is: no stage is taken over
	// after one that runs again (what it followed would change under it).
	for changed := true; changed; {
		changed = false
		for si := range cand {
			if cand[si] == nil {
				continue
			}
			for _, d := range p.Deps(si) {
				if cand[d] == nil {
					cand[si], changed = nil, true
					break
				}
			}
		}
	}
	var carried []string
	for _, was := range cand {
		if was != nil {
			carried = append(carried, was.ID)
		}
	}
	if len(carried) == len(p.Stages) {
		return nil, fmt.Errorf("run %s has no failed stage to retry from: every stage succeeded or was skipped (it ended %s: %s); re-run it instead", old.ID, old.Status, orDefault(old.Error, "no error recorded"))
	}
	for si, was := range cand {
		if was == nil {
			continue
		}
		sr := r.Stages[si]
		from := orDefault(was.CarriedFrom, old.ID)
		sr.Status, sr.Started, sr.Ended, sr.CarriedFrom = was.Status, was.Started, was.Ended, from
		if was.Status == StSkipped {
			for _, st := range sr.Steps {
				st.Status = StSkipped
			}
			continue
		}
		sr.Finished, sr.Warnings = was.Finished, append([]string(nil), was.Warnings...)
		for i, st := range was.Steps {
			cp := *st
			cp.Outputs = maps.Clone(st.Outputs)
			cp.Wait, cp.Memo = nil, nil // finished: nothing to wake or resume
			cp.Signals = append(cp.Signals[:0:0], st.Signals...)
			sr.Steps[i] = &cp
		}
	}
	return carried, nil
}

// rollbackStarted reports whether a rollback step of the stage was ever dispatched (a cancel
// ends the others as cancelled without running them).
func rollbackStarted(s *StageRun) bool {
	for _, st := range s.Rollback {
		if st.Attempt > 0 || !st.Queued.IsZero() {
			return true
		}
	}
	return false
}

func stepList(list []*StepRun) string {
	parts := make([]string, 0, len(list))
	for _, st := range list {
		parts = append(parts, st.ID+":"+st.Type)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func specList(list []*Step) string {
	parts := make([]string, 0, len(list))
	for _, st := range list {
		parts = append(parts, st.ID+":"+st.Type)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
