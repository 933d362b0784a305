package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// progress prints each stage and step transition once, as a run moves.
type progress struct {
	w      io.Writer
	seen   map[string]pipelines.Status
	reason map[string]string
	start  time.Time
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, seen: map[string]pipelines.Status{}, reason: map[string]string{}, start: time.Now()}
}

func (p *progress) update(r *pipelines.Run) {
	stamp := func() string { return fmt.Sprintf("[%6.2fs]", time.Since(p.start).Seconds()) }
	// The run's own waitingApproval (shown by the API, never stored) and its return to running:
	// a watcher sees at once that the run waits for a person, not for a worker.
	if shown := r.Status; shown == pipelines.StWaitingApproval || p.seen["run"] == pipelines.StWaitingApproval {
		if p.seen["run"] != shown {
			p.seen["run"] = shown
			fmt.Fprintf(p.w, "%s run %s: %s\n", stamp(), r.ID, shown)
		}
	}
	for _, s := range r.Stages {
		key := "stage/" + s.ID
		if p.seen[key] != s.Status && s.Status != pipelines.StPending {
			p.seen[key] = s.Status
			state := string(s.Status)
			if s.Status == pipelines.StNotRun {
				state = notRunText(s.Error)
			}
			line := fmt.Sprintf("%s stage %s: %s", stamp(), s.ID, state)
			if s.RollingBack {
				line += " (rolling back)"
			}
			if s.Status != pipelines.StNotRun && s.Error != "" && s.Status.Terminal() {
				line += " — " + s.Error
			}
			fmt.Fprintln(p.w, line)
		}
		for i, list := range [][]*pipelines.StepRun{s.Steps, s.Rollback} {
			for _, st := range list {
				key := fmt.Sprintf("step/%s/%d/%s", s.ID, i, st.ID)
				state := st.Status
				prev := p.seen[key]
				if prev == state || state == pipelines.StPending {
					if state != pipelines.StWaiting || st.Wait == nil || p.reason[key] == st.Wait.Reason {
						continue
					}
				}
				p.seen[key] = state
				if state == pipelines.StQueued && prev == pipelines.StWaiting {
					continue // a parked step woken to look again: its next state says what happened
				}
				if state == pipelines.StWaiting && st.Wait != nil {
					if p.reason[key] == st.Wait.Reason {
						continue
					}
					p.reason[key] = st.Wait.Reason
				}
				label := "step"
				if i == 1 {
					label = "rollback step"
				}
				if state == pipelines.StNotRun {
					fmt.Fprintf(p.w, "%s   %s %s.%s (%s): %s\n", stamp(), label, s.ID, st.ID, st.Type, notRunText(st.Error))
					continue
				}
				if state == pipelines.StSucceeded && st.Error == "" && len(st.Outputs) > 0 {
					// Outputs one per line, whole: a PR link to click, a commit to copy.
					fmt.Fprintf(p.w, "%s   %s %s.%s (%s): %s\n", stamp(), label, s.ID, st.ID, st.Type, state)
					for _, l := range outputLines(st.Outputs) {
						fmt.Fprintf(p.w, "%s       %s\n", strings.Repeat(" ", len(stamp())), l)
					}
					continue
				}
				line := fmt.Sprintf("%s   %s %s.%s (%s): %s", stamp(), label, s.ID, st.ID, st.Type, state)
				if d := stepDetail(st); d != "" {
					line += " " + d
				}
				fmt.Fprintln(p.w, line)
			}
		}
	}
	if r.Status.Terminal() && p.seen["run"] != r.Status {
		p.seen["run"] = r.Status
		line := fmt.Sprintf("%s run %s %s", stamp(), r.ID, r.Status)
		if r.Error != "" {
			line += ": " + r.Error
		}
		fmt.Fprintln(p.w, line)
	}
}

// notRunText shows a stage or step that never started because something before it failed,
// e.g. "not run (dev failed)".
func notRunText(why string) string {
	if why == "" {
		return "not run"
	}
	return "not run (" + why + ")"
}
