package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prflow/prflow/deploy/agent"
)

// Argo CD can be up and still unable to work: its repo-server or redis is down or slow, or it
// fails with a 5xx. A sync request then fails (Argo CD v3.2 answers HTTP 400 "error resolving
// repo revision: … code = Unavailable …"), but that says nothing about the change. GitOpsSync
// asks again until the step's deadline, says so in its wait reason, and at the deadline fails
// without rollback, as on a stale view (outage.go): a rollback would need the same Argo CD to
// sync the revert, and could not be observed either.

// cannotWork reports whether an agent error means the GitOps backend cannot work right now
// (the bridge classifies Argo CD's answers: deploy/argocd.Unavailable) rather than that the
// request or the change is wrong.
func cannotWork(err error) bool {
	for _, s := range []error{agent.ErrUnavailable, agent.ErrUnreachable, agent.ErrInternal, agent.ErrTimeout} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// unavailableApps counts the apps whose sync could not be requested yet because Argo CD could
// not work.
func (r *syncRun) unavailableApps() int {
	n := 0
	for _, a := range r.m.Apps {
		if a.State == appTodo && a.Unavailable != "" {
			n++
		}
	}
	return n
}

// unavailableAtDeadline is the verdict at the deadline when Argo CD still could not start
// some app's sync: fail without rollback, naming what Argo CD answered.
func (r *syncRun) unavailableAtDeadline(ctx context.Context, status []*agent.AppStatus) (Result, bool) {
	var apps []string
	for _, a := range r.m.Apps {
		if a.State == appTodo && a.Unavailable != "" {
			apps = append(apps, fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, a.Unavailable))
		}
	}
	if len(apps) == 0 {
		return Result{}, false
	}
	res := FailBlind(fmt.Sprintf("GitOps sync could not start: Argo CD could not work until the step's deadline (%d attempt(s)): %s; "+
		"refusing to roll back (the rollback would need the same Argo CD to sync the revert; check Argo CD's repo-server and redis, then re-run or roll back by hand)",
		r.attempts(), strings.Join(apps, "; ")))
	res.Outputs = map[string]any{"applications": r.outputs(ctx, status)}
	return res, true
}

func (r *syncRun) attempts() int {
	n := 0
	for _, a := range r.m.Apps {
		if a.Unavailable != "" {
			n = max(n, a.Tries)
		}
	}
	return n
}
