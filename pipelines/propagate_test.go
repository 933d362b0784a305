package pipelines

import (
	"strings"
	"testing"
	"time"

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
		run       Status            // the run's end status
		order     []string
		reason    map[string]string // stage → its not-run reason
	}{
		{
			name:   "a stage after a failed one does not run, nor the one after it",
			src:    "name: x\nstages:\n  - {id: dev, steps: [{id: a, type: Noop}]}\n  - {id: staging, steps: [{id: a, type: Noop}]}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			fail:   map[string]bool{"dev.a": true},
			want:   map[string]Status{"dev": StFailed, "staging": StNotRun, "prod": StNotRun, "prod.a": StNotRun},
			run:    StFailed,
			order:  []string{"dev.a"},
			reason: map[string]string{"staging": "dev failed", "prod": "dev failed"},
		},
		{
			name:  "a stage skipped by its own when does not stop the next",
			src:   "name: x\nstages:\n  - {id: dev, when: 'false', steps: [{id: a, type: Noop}]}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			want:  map[string]Status{"dev": StSkipped, "prod": StSucceeded},
			run:   StSucceeded,
			order: []string{"prod.a"},
		},
		{
			name: "failure() runs after a failure; what follows it still does not",
			src: "name: x\nstages:\n  - {id: dev, steps: [{id: a, type: Noop}]}\n  - {id: notify, when: 'failure()', steps: [{id: a, type: Noop}]}\n" +
				"  - {id: prod, steps: [{id: a, type: Noop}]}\n  - {id: cleanup, needs: [dev], when: 'always()', steps: [{id: a, type: Noop}]}\n",
			fail:   map[string]bool{"dev.a": true},
			want:   map[string]Status{"dev": StFailed, "notify": StSucceeded, "prod": StNotRun, "cleanup": StSucceeded},
			run:    StFailed,
			order:  []string{"dev.a", "notify.a", "cleanup.a"},
			reason: map[string]string{"prod": "dev failed"},
		},
		{
			name:  "failure() is false when all went well",
			src:   "name: x\nstages:\n  - {id: dev, steps: [{id: a, type: Noop}]}\n  - {id: notify, when: 'failure()', steps: [{id: a, type: Noop}]}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			want:  map[string]Status{"dev": StSucceeded, "notify": StSkipped, "prod": StSucceeded},
			run:   StSucceeded,
			order: []string{"dev.a", "prod.a"},
		},
		{
			name: "within a stage: later steps do not run, an always() step does, then the rollback",
			src: "name: x\nstages:\n  - id: dev\n    steps:\n      - {id: a, type: Noop}\n      - {id: b, type: Noop}\n      - {id: notify, type: Noop, when: 'always()'}\n" +
				"      - {id: onfail, type: Noop, when: 'failure()'}\n      - {id: onok, type: Noop, when: 'success()'}\n    rollbackSteps:\n      - {id: undo, type: Noop}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			fail:  map[string]bool{"dev.a": true},
			want:  map[string]Status{"dev": StFailed, "dev.b": StNotRun, "dev.notify": StSucceeded, "dev.onfail": StSucceeded, "dev.onok": StNotRun, "prod": StNotRun},
			run:   StFailed,
			order: []string{"dev.a", "dev.notify", "dev.onfail", "dev.rollback.undo"},
		},
		{
			name:  "an ignored failure is not a failure",
			src:   "name: x\nstages:\n  - id: dev\n    steps:\n      - {id: a, type: Noop, onFailure: ignore}\n      - {id: b, type: Noop}\n  - {id: prod, steps: [{id: a, type: Noop}]}\n",
			fail:  map[string]bool{"dev.a": true},
			want:  map[string]Status{"dev": StSucceeded, "dev.b": StSucceeded, "prod": StSucceeded},
			run:   StSucceeded,
			order: []string{"dev.a", "dev.b", "prod.a"},
		},
		{
			name: "parallel stages: one failing stops only what follows it",
			src: "name: x\nstages:\n  - {id: eu, needs: [], steps: [{id: a, type: Noop}]}\n  - {id: us, needs: [], steps: [{id: a, type: Noop}]}\n" +
				"  - {id: euprod, needs: [eu], steps: [{id: a, type: Noop}]}\n  - {id: usprod, needs: [us], steps: [{id: a, type: Noop}]}\n  - {id: all, needs: [euprod, usprod], steps: [{id: a, type: Noop}]}\n",
			fail:   map[string]bool{"eu.a": true},
			want:   map[string]Status{"eu": StFailed, "euprod": StNotRun, "usprod": StSucceeded, "all": StNotRun},
			run:    StFailed,
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
			if r.Status != tc.run {
				t.Errorf("run %s, want %s", r.Status, tc.run)
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

// After a stage times out, its always() steps still run; the spent stage deadline must not be
// reported as due again (the controller would wake in a loop).
func TestFailingStageDeadlineIsNotDueAgain(t *testing.T) {
	m := mustLoad(t, "name: x\nstages:\n  - id: s\n    timeout: 5m\n    steps:\n      - {id: a, type: Noop}\n      - {id: notify, type: Noop, when: 'always()'}\n")
	r, _ := NewRun(m.P, "r1", nil, "me", testNow)
	m.Advance(r, testNow)
	now := testNow.Add(6 * time.Minute)
	m.Tick(r, now)
	jobs := m.Advance(r, now)
	if len(jobs) != 1 || jobs[0].Step != "notify" {
		t.Fatalf("after the timeout: jobs %+v, %s", jobs, dumpRun(r))
	}
	if due := m.NextDue(r); !due.IsZero() && !due.After(now) {
		t.Fatalf("NextDue %s is not after now %s: %s", due, now, dumpRun(r))
	}
	result(m, r, jobs[0], steps.Done(nil), now)
	if r.Status != StFailed || !strings.Contains(r.Error, "stage timed out") || r.Find("s").Step("notify", false).Status != StSucceeded {
		t.Fatalf("end: %s", dumpRun(r))
	}
}
