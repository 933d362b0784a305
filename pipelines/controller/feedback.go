package controller

import (
	"fmt"
	"strings"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// Feedback makes runs report back to the forge. The controller never calls a forge: it
// dispatches small CommitStatus / PRComment jobs through the normal job path, and a worker that
// holds the connector's token runs them. Their results are ignored by the state machine; their
// Nats-Msg-Id (run/stage/prflow-status-<state>/1/0) makes each one go out once.
type Feedback struct {
	// ExternalURL is where people reach this server (--external-url); statuses and comments
	// link to the run's page in the web UI, <ExternalURL>/ui/runs/<id>.
	ExternalURL string
	// Statuses sets prflow/<stage> commit statuses on the triggering commit of webhook-triggered
	// runs whose trigger names a connector: pending when the stage starts, then success or failure.
	Statuses bool
	// Comments adds a summary comment to each PR an UpdateReleaseRepo or RevertPR step opened.
	Comments bool
	// Pool is the worker pool of feedback jobs (default: the default pool).
	Pool string
}

// SetFeedback turns forge feedback on (nil: off).
func (c *Controller) SetFeedback(f *Feedback) { c.feedback.Store(f) }

// RunURL is the link statuses and comments carry.
func (f *Feedback) RunURL(run string) string {
	if f == nil || f.ExternalURL == "" {
		return ""
	}
	return strings.TrimRight(f.ExternalURL, "/") + "/ui/runs/" + run
}

// fbSnapshot is what feedback compares before and after an event.
type fbSnapshot struct {
	stages map[string]pipelines.Status
	steps  map[string]pipelines.Status
}

func (c *Controller) feedbackSnapshot(r *pipelines.Run) *fbSnapshot {
	f := c.feedback.Load()
	if f == nil || (!f.Comments && !f.Statuses) {
		return nil
	}
	s := &fbSnapshot{stages: map[string]pipelines.Status{}, steps: map[string]pipelines.Status{}}
	for _, sr := range r.Stages {
		s.stages[sr.ID] = sr.Status
		for ri, list := range [][]*pipelines.StepRun{sr.Steps, sr.Rollback} {
			for _, st := range list {
				if isPRStep(st.Type) {
					s.steps[stepKey(sr.ID, st.ID, ri == 1)] = st.Status
				}
			}
		}
	}
	return s
}

func isPRStep(t string) bool { return t == "UpdateReleaseRepo" || t == "RevertPR" }

func stepKey(stage, step string, rollback bool) string {
	return fmt.Sprintf("%s/%s/%t", stage, step, rollback)
}

// feedbackJobs returns the notification jobs for what changed between before and r.
func (c *Controller) feedbackJobs(before *fbSnapshot, r *pipelines.Run) []*envelope.Job {
	f := c.feedback.Load()
	if before == nil || f == nil {
		return nil
	}
	pool := f.Pool
	if pool == "" {
		pool = pipelines.DefaultPool
	}
	var jobs []*envelope.Job
	tr := r.Trigger
	if f.Statuses && tr != nil && tr.Connector != "" && tr.Repo != "" && tr.SHA != "" {
		for _, sr := range r.Stages {
			was := before.stages[sr.ID]
			if was == sr.Status {
				continue
			}
			state, desc := "", ""
			switch {
			case sr.Status == pipelines.StRunning && !was.Terminal():
				state, desc = "pending", "running"
			case sr.Status == pipelines.StSucceeded:
				state, desc = "success", "succeeded"
			case sr.Status == pipelines.StFailed:
				state, desc = "failure", "failed"
				if sr.Error != "" {
					desc += ": " + sr.Error
				}
			case sr.Status == pipelines.StRolledBack:
				state, desc = "failure", "rolled back"
			case sr.Status == pipelines.StCancelled && was == pipelines.StRunning:
				state, desc = "error", "cancelled"
			default:
				continue
			}
			step, order := "prflow-status-"+state, 2 // order: a worker skips a status older than one it set
			switch {
			case state == "pending":
				order = 1
			case sr.Status == pipelines.StRolledBack:
				step, order = "prflow-status-rolledback", 3
			}
			jobs = append(jobs, &envelope.Job{V: envelope.Version, Run: r.ID, Pipeline: r.Pipeline, Stage: sr.ID, Step: step,
				Type: steps.TypeCommitStatus, Pool: pool, Attempt: 1, Executor: r.Executor, Connectors: []string{tr.Connector},
				Inputs: map[string]any{"connector": tr.Connector, "repo": tr.Repo, "sha": tr.SHA, "context": "prflow/" + sr.ID,
					"state": state, "description": clip(r.Pipeline+" "+sr.ID+": "+desc, 140), "targetUrl": f.RunURL(r.ID), "order": order}})
		}
	}
	if f.Comments {
		for _, sr := range r.Stages {
			for ri, list := range [][]*pipelines.StepRun{sr.Steps, sr.Rollback} {
				for _, st := range list {
					if !isPRStep(st.Type) || st.Status != pipelines.StSucceeded {
						continue
					}
					if before.steps[stepKey(sr.ID, st.ID, ri == 1)] == pipelines.StSucceeded {
						continue
					}
					if j := commentJob(f, r, sr, st, ri == 1, pool); j != nil {
						jobs = append(jobs, j)
					}
				}
			}
		}
	}
	return jobs
}

func commentJob(f *Feedback, r *pipelines.Run, sr *pipelines.StageRun, st *pipelines.StepRun, rollback bool, pool string) *envelope.Job {
	conn, _ := st.Outputs["connector"].(string)
	repo, _ := st.Outputs["repo"].(string)
	n := prNumber(st.Outputs["prNumber"])
	if conn == "" || repo == "" || n <= 0 {
		return nil
	}
	var b strings.Builder
	verb := "updates the release repo"
	if st.Type == "RevertPR" {
		verb = "reverts an earlier release"
	}
	fmt.Fprintf(&b, "**prflow**: this PR %s for run `%s` (pipeline `%s`, stage `%s`, step `%s`).\n", verb, r.ID, r.Pipeline, sr.ID, st.ID)
	if edits := editLines(st.Outputs["edits"]); len(edits) > 0 {
		b.WriteString("\nChanged:\n")
		for _, l := range edits {
			b.WriteString("- " + l + "\n")
		}
	} else if files, ok := st.Outputs["changedFiles"].([]any); ok && len(files) > 0 {
		var names []string
		for _, x := range files {
			names = append(names, "`"+fmt.Sprint(x)+"`")
		}
		fmt.Fprintf(&b, "\nChanged: %s\n", strings.Join(names, ", "))
	}
	if tr := r.Trigger; tr != nil && tr.Provider != "" {
		what := tr.Repo
		if tr.PR > 0 {
			what += fmt.Sprintf("#%d", tr.PR)
		}
		if tr.Action != "" {
			what += " (" + tr.Action + ")"
		}
		fmt.Fprintf(&b, "\nTriggered by %s %s at %.12s\n", tr.Provider, what, tr.SHA)
	}
	if u := f.RunURL(r.ID); u != "" {
		fmt.Fprintf(&b, "\nRun: %s\n", u)
	}
	return &envelope.Job{V: envelope.Version, Run: r.ID, Pipeline: r.Pipeline, Stage: sr.ID, Step: "prflow-comment-" + st.ID, Rollback: rollback,
		Type: steps.TypePRComment, Pool: pool, Attempt: 1, Executor: r.Executor, Connectors: []string{conn},
		Inputs: map[string]any{"connector": conn, "repo": repo, "prNumber": n, "body": b.String()}}
}

// editLines renders UpdateReleaseRepo's edits output: "`file`: key = `value`, …" per file.
func editLines(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		m, _ := x.(map[string]any)
		file, _ := m["file"].(string)
		changes, _ := m["changes"].([]any)
		if file == "" {
			continue
		}
		var kv []string
		for _, c := range changes {
			cm, _ := c.(map[string]any)
			if k, _ := cm["key"].(string); k != "" {
				kv = append(kv, fmt.Sprintf("%s = `%s`", k, clip(fmt.Sprint(cm["value"]), 80)))
			}
		}
		line := "`" + file + "`"
		if len(kv) > 0 {
			line += ": " + strings.Join(kv, ", ")
		}
		out = append(out, line)
	}
	return out
}

func prNumber(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case float64:
		return int(x)
	case int64:
		return int(x)
	}
	return 0
}

// clip shortens s to at most n bytes, on a rune boundary, marking the cut with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len("…"), 0)
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
