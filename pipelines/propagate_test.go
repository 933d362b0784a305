package pipelines

import (
	"testing"

	"github.com/prflow/prflow/steps"
)

// drive answers each job with the outcome named for its step (default: success) until the
// run ends, and returns the steps dispatched in order.
func drive(t *testing.T, m *Machine, r *Run, fail map[string]bool) []string {
	t.Helper()
	var order []string
	jobs := m.Advance(r, testNow)
	for i := 0; len(jobs) > 0 && i < 100; i++ {
		j := jobs[0]
		jobs = jobs[1:]
		name := j.Stage + "." + j.Step
		if j.Rollback {
			name = j.Stage + ".rollback." + j.Step
		}
		order = append(order, name)
		res := steps.Done(nil)
		if fail[name] {
			res = steps.Fail("boom")
		}
		jobs = append(jobs, result(m, r, j, res, testNow)...)
	}
	if !r.Status.Terminal() {
		t.Fatalf("run did not end: %s", dumpRun(r))
	}
	return order
}

func TestFailurePropagation(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		fail      map[string]bool
		want      map[string]Status // stage or stage.step → status
		order     []string
		reason    map[string]string // stage → its not-run reason
	}{
		{
			name:   "a stage after a failed one does not run, nor the one after it",
			src:    "name: x\nstages:\n  - {id: dev, steps: [{id: a, type: Noop}]}\n  - {id: staging, steps: [{id: a, type: Noop}]}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			fail:   map[string]bool{"dev.a": true},
			want:   map[string]Status{"dev": StFailed, "staging": StNotRun, "prod": StNotRun, "prod.a": StNotRun},
			order:  []string{"dev.a"},
			reason: map[string]string{"staging": "dev failed", "prod": "dev failed"},
		},
		{
			name:  "a stage skipped by its own when does not stop the next",
			src:   "name: x\nstages:\n  - {id: dev, when: 'false', steps: [{id: a, type: Noop}]}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			want:  map[string]Status{"dev": StSkipped, "prod": StSucceeded},
			order: []string{"prod.a"},
		},
		{
			name: "failure() runs after a failure; what follows it still does not",
			src: "name: x\nstages:\n  - {id: dev, steps: [{id: a, type: Noop}]}\n  - {id: notify, when: 'failure()', steps: [{id: a, type: Noop}]}\n" +
				"  - {id: prod, steps: [{id: a, type: Noop}]}\n  - {id: cleanup, needs: [dev], when: 'always()', steps: [{id: a, type: Noop}]}\n",
			fail:   map[string]bool{"dev.a": true},
			want:   map[string]Status{"dev": StFailed, "notify": StSucceeded, "prod": StNotRun, "cleanup": StSucceeded},
			order:  []string{"dev.a", "notify.a", "cleanup.a"},
			reason: map[string]string{"prod": "dev failed"},
		},
		{
			name:  "failure() is false when all went well",
			src:   "name: x\nstages:\n  - {id: dev, steps: [{id: a, type: Noop}]}\n  - {id: notify, when: 'failure()', steps: [{id: a, type: Noop}]}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			want:  map[string]Status{"dev": StSucceeded, "notify": StSkipped, "prod": StSucceeded},
			order: []string{"dev.a", "prod.a"},
		},
		{
			name: "within a stage: later steps do not run, an always() step does, then the rollback",
			src: "name: x\nstages:\n  - id: dev\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n      - {id: notify, type: Noop, when: 'always()'}\n" +
				"      - {id: onfail, type: Noop, when: 'failure()'}\n      - {id: onok, type: Noop, when: 'success()'}\n    rollbackSteps:\n      - {id: undo, type: Noop}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			fail:  map[string]bool{"dev.a": true},
			want:  map[string]Status{"dev": StFailed, "dev.b": StNotRun, "dev.notify": StSucceeded, "dev.onfail": StSucceeded, "dev.onok": StNotRun, "prod": StNotRun},
			order: []string{"dev.a", "dev.notify", "dev.onfail", "dev.rollback.undo"},
		},
		{
			name:  "an ignored failure is not a failure",
			src:   "name: x\nstages:\n  - id: dev\n    steps:\n      - {id: a, type: Noop, onFailure: ignore}\n      - {id: b, type: Noop}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			fail:  map[string]bool{"dev.a": true},
			want:  map[string]Status{"dev": StSucceeded, "dev.b": StSucceeded, "prod": StSucceeded},
			order: []string{"dev.a", "dev.b", "prod.a"},
		},
		{
			name: "parallel stages: one failing stops only what follows it",
			src: "name: x\nstages:\n  - {id: eu, needs: [], steps: [{id: a, type: Noop}]}\n  - {id: us, needs: [], steps: [{id: a, type: Noop}]}\n" +
				"  - {id: euprod, needs: [eu], steps: [{id: a, type: Noop}]}\n  - {id: usprod, needs: [us], steps: [{id: a, type: Noop}]}\n  - {id: all, needs: [euprod, usprod], steps: [{id: a, type: Noop}]}\n",
			fail:   map[string]bool{"eu.a": true},
			want:   map[string]Status{"eu": StFailed, "euprod": StNotRun, "usprod": StSucceeded, "all": StNotRun},
			reason: map[string]string{"euprod": "eu failed", "all": "eu failed"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustLoad(t, tc.src)
			r, _ := NewRun(m.P, "r1", nil, "me", testNow)
			order := drive(t, m, r, tc.fail)
			for k, want := range tc.want {
				stage, stepID, _ := cut(k)
				sr := r.Find(stage)
				got := sr.Status
				if stepID != "" {
					got = sr.Step(stepID, false).Status
				}
				if got != want {
					t.Errorf("%s: %s, want %s (%s)", k, got, want, dumpRun(r))
				}
			}
			for stage, why := range tc.reason {
				if got := r.Find(stage).Error; got != why {
					t.Errorf("%s's reason %q, want %q", stage, got, why)
				}
			}
			if tc.order != nil && !equalStrings(order, tc.order) {
				t.Errorf("dispatched %v, want %v", order, tc.order)
			}
			wantRun := StSucceeded
			if len(tc.fail) > 0 && tc.want["dev"] != StSucceeded && tc.name != "an ignored failure is not a failure" {
				wantRun = StFailed
			}
			if r.Status != wantRun {
				t.Errorf("run %s, want %s", r.Status, wantRun)
			}
		})
	}
}

func cut(k string) (string, string, bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '.' {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
