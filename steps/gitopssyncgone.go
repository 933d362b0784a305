package steps

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// What GitOpsSync does when an app goes away under it. The agent replaces a deleted app's
// record with a tombstone (Client.Status: ErrDeleted, "app X was deleted at T"), and every
// record carries the app's uid:
//   - a deleted app fails the step at once, unless an ApplicationSet owns it: then the step
//     waits syncGoneGrace for the ApplicationSet to create it again or, when the stage links
//     its apps by that ApplicationSet, follows the ApplicationSet's app under its new name;
//   - an app deleted and created again (another uid) is synced again and judged anew: the
//     operation the step started went with the old app;
//   - a rollback follows a renamed app likewise, and skips an app that no longer exists, saying
//     so.

// remember keeps what identifies the app beyond its name: its owner and destination.
func (a *syncApp) remember(st *agent.AppStatus) {
	if st == nil {
		return
	}
	if st.ApplicationSet != "" {
		a.AppSet = st.ApplicationSet
	}
	if st.Cluster != "" || st.Namespace != "" {
		a.Cluster, a.Namespace = st.Cluster, st.Namespace
	}
}

// replaced handles the apps that were deleted (gone[i]) or deleted and created again. It
// returns failure messages; status[i] is replaced when the step follows an app to its new
// name, and hold[i] set for an app waited for (not to be judged or synced on this wake).
func (r *syncRun) replaced(ctx context.Context, status []*agent.AppStatus, gone []*agent.Error, hold []bool) []string {
	var failures []string
	for i := range r.m.Apps {
		a := &r.m.Apps[i]
		if a.State == appDone || hold[i] {
			continue
		}
		if gone[i] != nil {
			if f := r.gone(ctx, i, gone[i], status); f != "" {
				failures = append(failures, fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, f))
			}
			// Still gone, waiting for its ApplicationSet: nothing to judge or sync yet.
			hold[i] = !a.GoneSince.IsZero()
			continue
		}
		a.GoneSince = time.Time{}
		st := status[i]
		if st == nil || a.UID == "" || st.UID == "" || st.UID == a.UID || a.State == appTodo {
			continue
		}
		// Same name, another app: ours was deleted and its ApplicationSet (or someone)
		// created it again, without the operation we started.
		created := ""
		if !st.CreatedAt.IsZero() {
			created = " at " + st.CreatedAt.UTC().Format(time.RFC3339)
		}
		note := fmt.Sprintf("the app was deleted and created again%s (uid %s, was %s) while the step waited: synced again and judged anew", created, st.UID, a.UID)
		if f := r.restart(a, note); f != "" {
			failures = append(failures, fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, f))
		}
	}
	return failures
}

// gone decides about a deleted app; it returns a failure message, or "" while waiting for
// its ApplicationSet, after following it to its new name, or when a rollback skips it.
func (r *syncRun) gone(ctx context.Context, i int, e *agent.Error, status []*agent.AppStatus) string {
	a := &r.m.Apps[i]
	if a.AppSet == "" && !r.sc.Rollback {
		return e.Message
	}
	if a.GoneSince.IsZero() {
		a.GoneSince = r.now
	}
	// Renamed through the ApplicationSet the stage links its apps by: follow it (a rollback
	// too: the change went to the app under its new name).
	if set := linkedAppSet(r.sc); a.AppSet != "" && set != "" && (set == a.AppSet || strings.HasSuffix(set, "/"+a.AppSet)) {
		next, fail := r.renamed(ctx, a)
		if fail != "" {
			return e.Message + "; " + fail
		}
		if next != nil {
			old := a.App
			note := fmt.Sprintf("%s; following %s, the app its ApplicationSet %s generates in its place", e.Message, next.Ref(), a.AppSet)
			if f := r.restart(a, note); f != "" {
				return f
			}
			a.App = next.Ref()
			a.remember(next)
			status[i] = next
			r.sc.Log.Warn("app was deleted; following its ApplicationSet's new app", "app", old, "new", a.App, "applicationSet", a.AppSet, "agent", a.Agent)
			return ""
		}
	}
	if r.sc.Rollback {
		r.skip(a, e.Message)
		return ""
	}
	if r.now.Sub(a.GoneSince) < syncGoneGrace {
		a.Waiting = fmt.Sprintf("%s; waiting up to %s for its ApplicationSet %s to create it again", e.Message, syncGoneGrace, a.AppSet)
		return ""
	}
	return fmt.Sprintf("%s, and its ApplicationSet %s did not create it again within %s", e.Message, a.AppSet, syncGoneGrace)
}

// renamed finds the app that a.AppSet generates in place of the deleted a: an app of that
// ApplicationSet on the same destination that the step does not sync already. None yet is
// (nil, ""); more than one is a failure, since the step cannot tell which replaces a.
func (r *syncRun) renamed(ctx context.Context, a *syncApp) (*agent.AppStatus, string) {
	apps, err := r.g.Apps(ctx, a.Agent, agent.AppsQuery{ApplicationSet: a.AppSet})
	if err != nil {
		if agent.Transient(err) {
			return nil, "" // look again on the next wake
		}
		return nil, fmt.Sprintf("listing the apps of ApplicationSet %s: %v", a.AppSet, err)
	}
	taken := map[string]bool{}
	for _, o := range r.m.Apps {
		if o.Agent == a.Agent {
			taken[o.App] = true
		}
	}
	var found []agent.AppStatus
	for _, s := range apps {
		if taken[s.Ref()] || (a.Cluster != "" && s.Cluster != a.Cluster) || (a.Namespace != "" && s.Namespace != a.Namespace) {
			continue
		}
		found = append(found, s)
	}
	switch len(found) {
	case 0:
		return nil, ""
	case 1:
		return &found[0], ""
	}
	var names []string
	for _, s := range found {
		names = append(names, s.Ref())
	}
	return nil, fmt.Sprintf("its ApplicationSet %s now generates %d apps for cluster %s namespace %s (%s): cannot tell which one replaces it",
		a.AppSet, len(found), orDefault(a.Cluster, "?"), orDefault(a.Namespace, "?"), strings.Join(names, ", "))
}

// restart makes a replaced app one to sync from scratch.
func (r *syncRun) restart(a *syncApp, note string) string {
	a.Replaced++
	if a.Replaced > syncMaxReplaced {
		return fmt.Sprintf("%s; the app was replaced %d times while the step waited, giving up", note, a.Replaced)
	}
	r.sc.Log.Warn("app replaced while the step waited; syncing it again", "app", a.App, "agent", a.Agent, "why", note)
	a.State, a.Waiting, a.Note = appTodo, note, note
	a.UID, a.Requested, a.Superseded, a.Deployed = "", time.Time{}, "", ""
	a.DriftSince, a.DegradedSince, a.GoneSince, a.Comparing = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if r.m.Expected == "" {
		a.Revision = ""
	}
	return ""
}

// skip leaves an app that no longer exists out of a rollback.
func (r *syncRun) skip(a *syncApp, why string) {
	a.State, a.Waiting, a.Skipped, a.GoneSince = appDone, "", why+": nothing to roll back there", time.Time{}
	r.sc.Log.Warn("app no longer exists; the rollback skips it", "app", a.App, "agent", a.Agent, "why", why)
}

// skippedSummary says which apps a rollback skipped ("" when none).
func (r *syncRun) skippedSummary() string {
	var parts []string
	for _, a := range r.m.Apps {
		if a.Skipped != "" {
			parts = append(parts, a.App+" (agent "+a.Agent+"): "+a.Skipped)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("skipped %d of %d application(s) that no longer exist: %s", len(parts), len(r.m.Apps), strings.Join(parts, "; "))
}
