package steps

import (
	"fmt"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// With automated sync, Argo CD usually deploys the stage's merge by itself before GitOpsSync
// asks (issue 32 D): syncing again costs a second operation per stage for nothing. An app is
// taken as already deployed — and judged (sync, health) instead of synced — only on the
// evidence of Argo CD's last operation, so an old operation is never mistaken for a new one:
// it was Argo CD's automated sync (a person's sync may have been partial or had other
// options: GitOpsSync waits for it, then syncs as before), it finished Succeeded (not a dry
// run) at a revision that contains the merge (safety invariant 3: ancestry, exact SHA for
// pinned apps), and the app is Synced at a revision that contains it too. Anything less (no
// operation, one still running, one that failed, one on an older revision, OutOfSync, no
// known merge commit) and the step syncs as before. dryRun and forceApply always sync: they
// ask for an operation of their own.

// mayBeDeployed is the cheap part of the check, before ancestry is looked up.
func (r *syncRun) mayBeDeployed(a *syncApp, st *agent.AppStatus) bool {
	return r.autoSucceeded(a, st) && st.Sync == agent.SyncSynced
}

// autoSucceeded: Argo CD's last operation is an automated sync that finished Succeeded (not a
// dry run), on a fresh record, and the step may take it for its own.
func (r *syncRun) autoSucceeded(a *syncApp, st *agent.AppStatus) bool {
	if st == nil || r.m.Expected == "" || r.cfg.DryRun || r.cfg.ForceApply || a.Resyncs > 0 {
		return false
	}
	op := st.Operation
	return op != nil && op.Automated && op.Finished() && op.Phase == agent.PhaseSucceeded && !op.DryRun && op.SyncedRevision != "" &&
		st.Stale == nil
}

// awaitingComparison reports whether the step should wait before syncing: Argo CD's automated
// sync finished Succeeded with the merge but the app is not Synced yet. Argo CD turns the
// phase Succeeded first and updates the sync status on a later reconcile (seconds later on a
// busy controller), so a step woken by the finished operation would otherwise sync a second
// time what was just deployed. The wait is bounded by syncDriftGrace from when the step first
// saw it so; an app still not Synced then is synced as before.
func (r *syncRun) awaitingComparison(a *syncApp, st *agent.AppStatus) bool {
	if !r.autoSucceeded(a, st) || st.Sync == agent.SyncSynced || !r.rev.has(st, r.m.Expected, st.Operation.SyncedRevision) {
		a.Comparing = time.Time{}
		return false
	}
	if a.Comparing.IsZero() {
		a.Comparing = r.now
	}
	if r.now.Sub(a.Comparing) >= syncDriftGrace {
		r.sc.Log.Info("app still not Synced after Argo CD's automated sync finished with the merge; syncing", "app", a.App, "agent", a.Agent,
			"sync", st.Sync, "syncedRevision", st.Operation.SyncedRevision)
		return false
	}
	a.Waiting = fmt.Sprintf("%s finished at %s; waiting for Argo CD to compare the app (%s) before syncing again",
		who(st.Operation), short(st.Operation.SyncedRevision), orDefault(st.Sync, "Unknown"))
	return true
}

// alreadyDeployed reports whether Argo CD's last operation already deployed the merge to the
// app; then the app is judged from that operation (as one that superseded ours) without a sync.
func (r *syncRun) alreadyDeployed(a *syncApp, st *agent.AppStatus) bool {
	if !r.mayBeDeployed(a, st) {
		return false
	}
	op, want := st.Operation, r.m.Expected
	if !r.rev.has(st, want, op.SyncedRevision) || !r.rev.has(st, want, st.Revision) {
		return false
	}
	a.State, a.Waiting = appSyncing, "already deployed by "+who(op)
	a.Requested, a.Revision, a.Superseded = r.now, want, who(op)
	a.Note = fmt.Sprintf("not synced again: %s already deployed %s, which contains %s", who(op), short(op.SyncedRevision), short(want))
	r.sc.Log.Info("app already Synced at a revision containing the merge; judging it without another sync", "app", a.App, "agent", a.Agent,
		"syncedRevision", op.SyncedRevision, "expected", want, "by", who(op))
	return true
}
