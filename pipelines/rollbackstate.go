package pipelines

import (
	"fmt"
	"strings"
)

// rollbackState says what git and the cluster hold when a stage's rollback could not finish,
// from the outputs its steps and rollback steps recorded: the merge of the change, the revert
// PR and whether it merged, and each app's last known state. A person has to finish the job;
// this is where they start.
func rollbackState(sr *StageRun) string {
	var git []string
	for _, st := range sr.Steps {
		if st.Type == "MergePR" && st.Status == StSucceeded {
			if c, _ := st.Outputs["commitId"].(string); c != "" {
				git = append(git, "the change is merged as "+short(c))
			}
		}
	}
	revertOpened, revertMerged := "", ""
	for _, st := range sr.Rollback {
		switch {
		case st.Type == "RevertPR" && st.Status == StSucceeded:
			revertOpened = fmt.Sprint(st.Outputs["prlink"])
			if revertOpened == "" || revertOpened == "<nil>" {
				revertOpened = fmt.Sprintf("#%v", st.Outputs["prNumber"])
			}
		case st.Type == "MergePR" && st.Status == StSucceeded:
			c, _ := st.Outputs["commitId"].(string)
			revertMerged = short(c)
		}
	}
	switch {
	case revertMerged != "":
		git = append(git, "the revert is merged as "+revertMerged)
	case revertOpened != "":
		git = append(git, "the revert PR "+revertOpened+" is open, not merged")
	case len(git) > 0:
		git = append(git, "no revert was made")
	}
	// The cluster: the latest GitOpsSync that recorded apps, rollback first.
	var cluster []string
	for _, list := range [][]*StepRun{sr.Rollback, sr.Steps} {
		for i := len(list) - 1; i >= 0 && cluster == nil; i-- {
			st := list[i]
			apps, _ := st.Outputs["applications"].([]any)
			if st.Type != "GitOpsSync" || len(apps) == 0 {
				continue
			}
			for _, a := range apps {
				m, _ := a.(map[string]any)
				if skipped, ok := m["skipped"].(string); ok && skipped != "" {
					cluster = append(cluster, fmt.Sprintf("%v skipped (%s)", m["name"], skipped))
					continue
				}
				s := fmt.Sprintf("%v %v/%v at %v", m["name"], orDash(m["sync"]), orDash(m["health"]), short(fmt.Sprint(orDash(m["revision"]))))
				if stale, ok := m["stale"].(string); ok && stale != "" {
					s += " (stale view: " + stale + ")"
				}
				cluster = append(cluster, s)
			}
		}
	}
	out := "git: " + orDefault(strings.Join(git, ", "), "unknown (no merge recorded)")
	out += "; cluster: " + orDefault(strings.Join(cluster, ", "), "unknown (no sync recorded)")
	return out
}

func orDash(v any) any {
	if v == nil || v == "" {
		return "?"
	}
	return v
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
