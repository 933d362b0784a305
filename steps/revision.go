package steps

import (
	"context"
	"errors"
	"fmt"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/scm"
)

// revisionGate decides whether an app's revision has this stage's change (safety invariant 3).
// Apps usually track a branch, and a shared release repo gets other merges between ours and the
// app's sync: an app Synced at a later commit that contains our merge commit has the change. So
// a revision passes when it is the expected one, or — unless the app is pinned to a commit
// (targetRevision is a full SHA) — when the forge says it descends from it. Ancestry needs the
// release repo's connector: the step's `connector`/`repo` inputs, else those of the stage's
// UpdateReleaseRepo or RevertPR. Without them only the exact revision passes.
type revisionGate struct {
	sc        *Context
	connector string
	repo      string
	provider  scm.Git // resolved on the first lookup
	// known holds this wake's answers, keyed by expected+"\x00"+revision. The driver caches
	// them across wakes; nothing here is kept in the memo.
	known map[string]bool
	// notFound names revisions the forge did not know, for the wait message.
	notFound map[string]bool
}

// validateSync is GitOpsSync's load-time check. The revision gate's `connector` and `repo`
// (either may be left out: it then comes from the stage's UpdateReleaseRepo or RevertPR at run
// time) are fields of syncConfig, decoded at load with the rest.
func validateSync(in map[string]any) error {
	_, err := syncConfigFrom(in, true)
	return err
}

func newRevisionGate(sc *Context) (*revisionGate, error) {
	g := &revisionGate{sc: sc, known: map[string]bool{}, notFound: map[string]bool{}}
	ri, err := decodePart[repoInputs](sc.Inputs, false)
	if err != nil {
		return nil, Terminal(err)
	}
	g.connector, g.repo = ri.Connector, ri.Repo
	if p := priorPR(sc); p != nil {
		if g.connector == "" {
			g.connector, _ = p.Outputs["connector"].(string)
		}
		if g.repo == "" {
			g.repo, _ = p.Outputs["repo"].(string)
		}
	}
	return g, nil
}

// enabled reports whether ancestry can be asked at all.
func (g *revisionGate) enabled() bool { return g != nil && g.connector != "" && g.repo != "" }

// pinned reports whether the app tracks one commit rather than a branch or tag.
func pinned(st *agent.AppStatus) bool { return st != nil && scm.IsFullSHA(st.Source.TargetRevision) }

func pairKey(want, got string) string { return want + "\x00" + got }

// has reports whether revision got of the app whose status is st has revision want: the same
// commit, or — for an app that is not pinned — a commit the forge said contains want. Only
// answers looked up by prepare count; anything else is not a pass.
func (g *revisionGate) has(st *agent.AppStatus, want, got string) bool {
	if want == "" || got == want {
		return true
	}
	if g == nil || pinned(st) {
		return false
	}
	return g.known[pairKey(want, got)]
}

// why explains a revision that does not pass, for wait and failure messages.
func (g *revisionGate) why(st *agent.AppStatus, want, got string) string {
	switch {
	case g == nil || !g.enabled() || !scm.IsFullSHA(want) || !scm.IsFullSHA(got):
		return ""
	case pinned(st):
		return " (the app is pinned to " + short(st.Source.TargetRevision) + ": only the exact revision counts)"
	case g.notFound[got]:
		return fmt.Sprintf(" (%s is not a commit of %s)", short(got), g.repo)
	}
	return fmt.Sprintf(" (%s does not contain %s)", short(got), short(want))
}

// prepare looks up, before any app is judged, whether the revisions the apps report contain the
// revision each must reach. A lookup error is returned as a transient error (the worker retries
// the step): it never counts as a pass, and it must not trigger a re-sync either.
func (r *syncRun) prepareRevisions(ctx context.Context, status []*agent.AppStatus) error {
	g := r.rev
	if !g.enabled() {
		return nil
	}
	for i := range r.m.Apps {
		a, st := &r.m.Apps[i], status[i]
		if a.State == appDone || st == nil || pinned(st) {
			continue
		}
		ours := st.Operation.Tagged(r.sc.RunID, r.appTag(a))
		if a.State == appTodo && !ours && !r.mayBeDeployed(a, st) {
			continue // not judged before its sync is requested: nothing to ask yet
		}
		want := firstNonEmptyStr(a.Revision, r.m.Expected)
		if want == "" && ours {
			want = st.Operation.Revision // what evaluate will expect, when nothing else is known
		}
		revs := []string{st.Revision}
		if st.Operation != nil {
			revs = append(revs, st.Operation.SyncedRevision)
		}
		for _, got := range revs {
			if err := g.lookup(ctx, want, got); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *revisionGate) lookup(ctx context.Context, want, got string) error {
	if got == want || !scm.IsFullSHA(want) || !scm.IsFullSHA(got) {
		return nil
	}
	k := pairKey(want, got)
	if _, ok := g.known[k]; ok {
		return nil
	}
	if g.provider == nil {
		p, err := scmFor(ctx, g.sc, g.connector)
		if err != nil {
			return err
		}
		g.provider = p
	}
	yes, err := g.provider.IsAncestor(ctx, scm.Repo(g.repo), want, got)
	switch {
	case errors.Is(err, scm.ErrNotFound):
		// A revision the forge does not know (yet) cannot contain ours; look again next wake.
		g.known[k], g.notFound[got] = false, true
		return nil
	case err != nil:
		return fmt.Errorf("check whether %s contains %s in %s (connector %s): %w", short(got), short(want), g.repo, g.connector, err)
	}
	g.known[k] = yes
	if yes {
		g.sc.Log.Info("app revision contains the expected commit", "revision", got, "expected", want, "repo", g.repo)
	}
	return nil
}

// revisionOutputs adds how an app's revision was judged to its `applications` entry:
// deployedRevision is the revision the app passed at, and revisionMatch says how it passed:
// "exact", "contains" (a later commit with ours in its history) or "" while not passed.
func (r *syncRun) revisionOutputs(o map[string]any, a *syncApp) {
	if a.Deployed == "" {
		return
	}
	o["deployedRevision"] = a.Deployed
	switch {
	case a.Revision == "" || a.Deployed == a.Revision:
		o["revisionMatch"] = "exact"
	default:
		o["revisionMatch"] = "contains"
	}
}
