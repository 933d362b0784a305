package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/runsummary"
	"github.com/prflow/prflow/steps"
)

// outputLines renders a step's outputs as "key: value" lines, values whole (URLs included):
// lists of names are joined, the apps of a sync or lookup show name sync/health, the edits
// of UpdateReleaseRepo show file key=value.
func outputLines(outputs map[string]any) []string {
	keys := make([]string, 0, len(outputs))
	for k := range outputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		v := outputs[k]
		var text string
		switch k {
		case "applications", "apps":
			text = strings.Join(appTexts(v), ", ")
		case "edits":
			text = strings.Join(editTexts(v), "; ")
		default:
			if list, ok := v.([]any); ok {
				parts := make([]string, len(list))
				for i, x := range list {
					parts[i] = runsummary.Text(x)
				}
				text = strings.Join(parts, ", ")
			} else {
				text = runsummary.Text(v)
			}
		}
		if text == "" {
			continue // an empty output (no PR number on a no-op) says nothing
		}
		out = append(out, k+": "+text)
	}
	return out
}

func appTexts(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, a := range list {
		m, ok := a.(map[string]any)
		if !ok {
			out = append(out, runsummary.Text(a))
			continue
		}
		if name, ok := m["app"].(string); ok && m["name"] == nil {
			out = append(out, appDiffText(name, m)) // a diff preview's app
			continue
		}
		s := fmt.Sprint(m["name"])
		var st []string
		for _, k := range []string{"sync", "health"} {
			if x, ok := m[k].(string); ok && x != "" {
				st = append(st, x)
			}
		}
		if len(st) > 0 {
			s += " " + strings.Join(st, "/")
		}
		out = append(out, s)
	}
	return out
}

// editTexts shows an edits output as file key=value, with the value replaced (old → new)
// when the step recorded it.
func editTexts(v any) []string {
	var out []string
	for _, e := range steps.EditedKeys(v) {
		re := runsummary.Edit{Old: e.Old, HasOld: e.HasOld, Created: e.Created}
		val := runsummary.Text(e.Value)
		if old := re.OldText(); old != "" {
			val = old + " → " + val
		}
		out = append(out, e.File+" "+e.Key+"="+val)
	}
	return out
}

// appDiffText is one app of a diff preview: what it would change.
func appDiffText(name string, m map[string]any) string {
	res, _ := m["resources"].([]any)
	switch {
	case m["error"] != nil && m["error"] != "":
		return name + " (not rendered: " + runsummary.Text(m["error"]) + ")"
	case m["created"] == true && m["specNotRendered"] == true:
		return name + " (new app, resources not rendered)"
	case m["created"] == true:
		return fmt.Sprintf("%s (new app, %d resource(s))", name, len(res))
	case m["deleted"] == true:
		return name + " (deleted)"
	case len(res) == 0 && m["specNotRendered"] == true:
		return name + " (spec changes, resources not rendered)"
	case len(res) == 0 && m["secretsNotCompared"] != nil:
		return name + " (no change seen, Secret values not compared)"
	case len(res) == 0:
		return name + " (no change)"
	case len(res) == 1:
		return name + " (1 resource changed)"
	}
	return fmt.Sprintf("%s (%d resources changed)", name, len(res))
}

// lookupKey reads a dotted key (list indexes as numbers) from a JSON or YAML document; ok is
// false when the file or key does not exist.
func lookupKey(doc, key string) (string, bool) {
	var v any
	if doc == "" || yaml.Unmarshal([]byte(doc), &v) != nil {
		return "", false
	}
	for _, part := range strings.Split(key, ".") {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[part]
			if !ok {
				return "", false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	return runsummary.Text(v), true
}

// printSummary ends `prflow dev`: for each stage, what changed in the release repo (old → new
// value, as the step recorded it; before, the files the repo started with, only for edits
// recorded without their old value), the PR, the merge commit, the diff preview, the apps'
// health and how long it took. runsummary holds what it says; the run page shows the same.
func printSummary(w io.Writer, r *pipelines.Run, before map[string]string, now time.Time) {
	fmt.Fprintf(w, "\nsummary: run %s %s in %s\n", r.ID, r.Status, span(runStart(r), r.Ended, now))
	for _, s := range runsummary.Of(r) {
		status := string(s.Status)
		if s.Status == pipelines.StNotRun {
			status = notRunText(s.Error)
		}
		if s.AlreadyPromoted {
			status += " (already promoted: the release repo held every value; no PR, no merge)"
		}
		fmt.Fprintf(w, "  %s: %s", s.ID, status)
		if !s.Started.IsZero() {
			fmt.Fprintf(w, " in %s", span(s.Started, s.Ended, now))
		}
		fmt.Fprintln(w)
		for _, e := range s.Edits {
			if e.Already {
				fmt.Fprintf(w, "    %s %s: %s (already set at %s)\n", e.File, e.Key, runsummary.Text(e.New), shortSHA(s.Revision))
				continue
			}
			old := e.OldText()
			if !e.HasOld && !e.Created {
				if v, found := lookupKey(before[e.File], e.Key); found {
					old = v
				} else {
					old = "(unset)"
				}
			}
			line := fmt.Sprintf("    %s %s: %s → %s", e.File, e.Key, old, runsummary.Text(e.New))
			if e.Rollback {
				line += " (rollback " + e.Step + ")"
			}
			fmt.Fprintln(w, line)
		}
		for _, pr := range s.PRs {
			fmt.Fprintf(w, "    PR #%s %s (%s)\n", pr.Number, pr.Link, pr.Step)
		}
		for _, c := range s.Created {
			fmt.Fprintf(w, "    created (new in the release repo): %s (%s)\n", strings.Join(c.What, ", "), c.Step)
		}
		for _, d := range s.Diffs { // a line per app the preview names
			for _, l := range strings.Split(d.Summary, "\n") {
				if l != "" {
					fmt.Fprintf(w, "    preview: %s (%s)\n", l, d.Step)
				}
			}
		}
		for _, m := range s.Merges {
			fmt.Fprintf(w, "    merged as commit %s (%s)\n", m.Commit, m.Step)
		}
		for i := 0; i < len(s.Apps); {
			j, texts := i, []string{}
			for ; j < len(s.Apps) && s.Apps[j].Step == s.Apps[i].Step; j++ {
				t := s.Apps[j].Name
				if st := strings.Trim(s.Apps[j].Sync+"/"+s.Apps[j].Health, "/"); st != "" {
					t += " " + st
				}
				texts = append(texts, t)
			}
			fmt.Fprintf(w, "    apps: %s (%s)\n", strings.Join(texts, ", "), s.Apps[i].Step)
			i = j
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

func stringsOf(l []any) []string {
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = runsummary.Text(x)
	}
	return out
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
