package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prflow/prflow/pipelines"
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
					parts[i] = valueText(x)
				}
				text = strings.Join(parts, ", ")
			} else {
				text = valueText(v)
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
			out = append(out, valueText(a))
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

// edit is one key an UpdateReleaseRepo step set.
type edit struct{ file, key, value string }

func edits(v any) []edit {
	var out []edit
	for _, e := range steps.EditedKeys(v) {
		out = append(out, edit{file: e.File, key: e.Key, value: valueText(e.Value)})
	}
	return out
}

func editTexts(v any) []string {
	var out []string
	for _, e := range edits(v) {
		out = append(out, e.file+" "+e.key+"="+e.value)
	}
	return out
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
	return valueText(v), true
}

// printSummary ends `prflow dev`: for each stage, what changed in the release repo (old → new
// value, with before read from the files the repo started with), the PR, the merge commit,
// the apps' health and how long it took.
func printSummary(w io.Writer, r *pipelines.Run, before map[string]string, now time.Time) {
	fmt.Fprintf(w, "\nsummary: run %s %s in %s\n", r.ID, r.Status, span(runStart(r), r.Ended, now))
	for _, s := range r.Stages {
		status := string(s.Status)
		if s.Status == pipelines.StNotRun {
			status = notRunText(s.Error)
		}
		if s.Status == pipelines.StSucceeded && alreadyPromoted(s) {
			status += " (already promoted: the release repo held every value; no PR, no merge)"
		}
		fmt.Fprintf(w, "  %s: %s", s.ID, status)
		if !s.Started.IsZero() {
			fmt.Fprintf(w, " in %s", span(s.Started, s.Ended, now))
		}
		fmt.Fprintln(w)
		for _, st := range append(append([]*pipelines.StepRun{}, s.Steps...), s.Rollback...) {
			if st.Status != pipelines.StSucceeded {
				continue
			}
			o := st.Outputs
			switch st.Type {
			case "UpdateReleaseRepo", "RevertPR":
				if already, _ := o["alreadyPromoted"].(bool); already {
					for _, e := range edits(o["edits"]) {
						fmt.Fprintf(w, "    %s %s: %s (already set at %s)\n", e.file, e.key, e.value, shortSHA(valueText(o["revision"])))
					}
					continue
				}
				for _, e := range edits(o["edits"]) {
					old, found := lookupKey(before[e.file], e.key)
					if !found {
						old = "(unset)"
					}
					fmt.Fprintf(w, "    %s %s: %s → %s\n", e.file, e.key, old, e.value)
				}
				if n := valueText(o["prNumber"]); n != "" {
					fmt.Fprintf(w, "    PR #%s %s (%s)\n", n, valueText(o["prlink"]), st.ID)
				}
				if c, _ := o["created"].([]any); len(c) > 0 {
					fmt.Fprintf(w, "    created (new in the release repo): %s (%s)\n", strings.Join(stringsOf(c), ", "), st.ID)
				}
			case steps.TypeDiffPreview:
				previewLines(w, o, st.ID)
			case "MergePR":
				if pv, ok := o["preview"].(map[string]any); ok {
					previewLines(w, pv, st.ID)
				}
				if c := valueText(o["commitId"]); c != "" {
					fmt.Fprintf(w, "    merged as commit %s (%s)\n", c, st.ID)
				}
			case "GitOpsSync":
				if apps := appTexts(o["applications"]); len(apps) > 0 {
					fmt.Fprintf(w, "    apps: %s (%s)\n", strings.Join(apps, ", "), st.ID)
				}
			}
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

// previewLines prints what a DiffPreview found, a line per app (nothing when it had no PR to
// preview).
func previewLines(w io.Writer, o map[string]any, id string) {
	if skipped, _ := o["skipped"].(bool); skipped {
		return
	}
	sum, _ := o["summary"].(string)
	for _, l := range strings.Split(sum, "\n") {
		if l != "" {
			fmt.Fprintf(w, "    preview: %s (%s)\n", l, id)
		}
	}
}

// alreadyPromoted reports whether a stage's UpdateReleaseRepo found every value in place.
func alreadyPromoted(s *pipelines.StageRun) bool {
	for _, st := range s.Steps {
		if st.Type == "UpdateReleaseRepo" && st.Status == pipelines.StSucceeded {
			if a, _ := st.Outputs["alreadyPromoted"].(bool); a {
				return true
			}
		}
	}
	return false
}

func stringsOf(l []any) []string {
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = valueText(x)
	}
	return out
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
