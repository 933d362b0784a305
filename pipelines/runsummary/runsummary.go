// Package runsummary says what a run did, stage by stage: the release-repo values it
// changed (old → new), the PRs it opened, the commits it merged, the apps it synced and what
// they report, the diff previews, and when each stage ran. `prflow dev` prints it at the end
// of a run and the UI's run page leads with it, so both say the same thing.
package runsummary

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

// Stage is what one stage did. Only steps that succeeded count (a failed step claims
// nothing), except diff previews, whose failure (a promotion that changes nothing) says why.
type Stage struct {
	ID     string
	Status pipelines.Status
	// Error is why the stage failed or did not run.
	Error          string
	Started, Ended time.Time
	// AlreadyPromoted: the release repo held every value already (at Revision); no PR, no
	// merge.
	AlreadyPromoted bool
	Revision        string
	Edits           []Edit
	PRs             []PR
	Created         []Created
	Merges          []Merge
	Apps            []App
	Diffs           []Diff
}

// Edit is one release-repo key a step set.
type Edit struct {
	Step     string
	Rollback bool // set by a rollback step
	File     string
	Key      string
	Old, New any
	// HasOld: Old is the value the key held; Created: the key (or its file) was new. Neither
	// is set for steps that did not record it.
	HasOld, Created bool
	// Already: the value was in place before the step (an already-promoted stage).
	Already bool
}

// OldText is the value the edit replaced as text: "(unset)" for a created key, "" when not
// recorded.
func (e Edit) OldText() string {
	switch {
	case e.HasOld:
		return Text(e.Old)
	case e.Created:
		return "(unset)"
	}
	return ""
}

// PR is a pull request a step opened. URL is set only for an http(s) link.
type PR struct {
	Step, Number, Link, URL string
}

// Created lists what a step added to the release repo that it did not have.
type Created struct {
	Step string
	What []string
}

// Merge is a commit a MergePR step made.
type Merge struct{ Step, Commit string }

// App is an app a sync step reported, as it reported it then.
type App struct{ Step, Name, Agent, URL, Sync, Health string }

// Diff is a diff preview: what the PR would change in each linked app.
type Diff struct {
	Step    string
	Failed  bool // the step failed (e.g. the PR changes nothing deployed)
	Summary string
	Changed bool
	Apps    []agent.AppDiff
}

// Of summarises each stage of r.
func Of(r *pipelines.Run) []Stage {
	out := make([]Stage, 0, len(r.Stages))
	for _, s := range r.Stages {
		out = append(out, stageOf(s))
	}
	return out
}

func stageOf(s *pipelines.StageRun) Stage {
	v := Stage{ID: s.ID, Status: s.Status, Error: s.Error, Started: s.Started, Ended: s.Ended}
	for i, list := range [][]*pipelines.StepRun{s.Steps, s.Rollback} {
		rb := i == 1
		for _, st := range list {
			if d, ok := DiffOf(st); ok && (st.Status == pipelines.StSucceeded || st.Status == pipelines.StFailed) {
				v.Diffs = append(v.Diffs, d)
				if st.Type != "MergePR" { // MergePR preview: true also merged
					continue
				}
			}
			if st.Status != pipelines.StSucceeded {
				continue
			}
			o := st.Outputs
			switch st.Type {
			case "UpdateReleaseRepo", "RevertPR":
				already, _ := o["alreadyPromoted"].(bool)
				if already && !rb && s.Status == pipelines.StSucceeded {
					v.AlreadyPromoted, v.Revision = true, Text(o["revision"])
				}
				for _, e := range steps.EditedKeys(o["edits"]) {
					v.Edits = append(v.Edits, Edit{Step: st.ID, Rollback: rb, File: e.File, Key: e.Key, Old: e.Old, New: e.Value,
						HasOld: e.HasOld, Created: e.Created, Already: already})
				}
				if n := Text(o["prNumber"]); n != "" && !already {
					link := Text(o["prlink"])
					pr := PR{Step: st.ID, Number: n, Link: link}
					if IsURL(link) {
						pr.URL = link
					}
					v.PRs = append(v.PRs, pr)
				}
				if c, _ := o["created"].([]any); len(c) > 0 {
					what := make([]string, len(c))
					for i, x := range c {
						what[i] = Text(x)
					}
					v.Created = append(v.Created, Created{Step: st.ID, What: what})
				}
			case "MergePR":
				if c := Text(o["commitId"]); c != "" {
					v.Merges = append(v.Merges, Merge{Step: st.ID, Commit: c})
				}
			case "GitOpsSync":
				for _, a := range listOf(o["applications"]) {
					m, ok := a.(map[string]any)
					if !ok {
						continue
					}
					app := App{Step: st.ID, Name: Text(m["name"]), Agent: Text(m["agent"]), Sync: Text(m["sync"]), Health: Text(m["health"])}
					if u := Text(m["url"]); IsURL(u) {
						app.URL = u
					}
					if app.Name != "" {
						v.Apps = append(v.Apps, app)
					}
				}
			}
		}
	}
	return v
}

// DiffOf reads a diff preview's outputs (apps: [agent.AppDiff], summary, changed): a step
// of type DiffPreview, or any step with outputs of that shape (MergePR's preview).
func DiffOf(st *pipelines.StepRun) (Diff, bool) {
	o := st.Outputs
	if pv, ok := o["preview"].(map[string]any); ok && st.Type == "MergePR" {
		o = pv // MergePR with preview: true keeps its preview under "preview"
	}
	if o == nil {
		return Diff{}, false
	}
	if skipped, _ := o["skipped"].(bool); skipped {
		return Diff{}, false // nothing to preview (no PR)
	}
	summary, hasSummary := o["summary"].(string)
	changed, hasChanged := o["changed"].(bool)
	if st.Type != "DiffPreview" && (!hasSummary || !hasChanged) {
		return Diff{}, false
	}
	d := Diff{Step: st.ID, Failed: st.Status == pipelines.StFailed, Summary: summary, Changed: changed}
	if raw, ok := o["apps"]; ok {
		b, err := json.Marshal(raw)
		if err != nil || json.Unmarshal(b, &d.Apps) != nil {
			return Diff{}, false
		}
		for _, a := range d.Apps {
			if a.App == "" {
				return Diff{}, false // another step's apps (FetchLinkedApps names them "name")
			}
		}
	}
	if st.Type != "DiffPreview" && len(d.Apps) == 0 && summary == "" {
		return Diff{}, false
	}
	return d, true
}

// Text is a value as a person reads it: strings as they are, numbers and booleans plain,
// lists and maps as JSON, nothing for nil.
func Text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case float64, int, int64, bool, json.Number:
		return fmt.Sprint(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// IsURL reports whether s is an absolute http(s) URL, the only links shown as links.
func IsURL(s string) bool {
	if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}
