package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps/fileedit"
)

// MergePR merges the PR of this stage's latest UpdateReleaseRepo or RevertPR (or a given
// prNumber) with a head-SHA guard, one merge per repo+base branch at a time. When another
// promotion merged first and the PR now conflicts, a PR opened by UpdateReleaseRepo is rebuilt
// on the new base from the edits it recorded (the branch is moved only if it still holds
// that step's commit). It parks while checks are pending; an already merged PR is success.
// With preview: true it first previews what the PR deploys, as a DiffPreview step would
// (outputs.preview), and does not merge a PR that changes nothing.
func init() {
	Register(Definition{
		Type:   "MergePR",
		Priors: []string{"UpdateReleaseRepo", "RevertPR", "MergePR", TypeDiffPreview, "FetchLinkedApps"},
		Parks:  true,
		New:    func() Step { return StepFunc(runMergePR) },
		Config: mergeConfig{},
		Validate: func(in map[string]any) error {
			if _, err := previewConfigFrom(in, true); err != nil {
				return err
			}
			_, err := linkedPart(in, true)
			return err
		},
	})
}

// mergeConfig is MergePR's `with:`.
type mergeConfig struct {
	Connector          string `input:"connector" doc:"the worker connector of the repo (default: the previous step's)"`
	Repo               string `input:"repo" doc:"the repo (default: the previous step's)"`
	PRNumber           int    `input:"prNumber" doc:"the PR to merge (default: the one the stage's UpdateReleaseRepo or RevertPR opened)"`
	MergeStrategy      string `input:"mergeStrategy,enum=merge|squash|rebase,default=merge"`
	DeleteSourceBranch bool   `input:"deleteSourceBranch,default=false" doc:"delete the PR's branch after merging"`
	Preview            bool   `input:"preview,default=false" doc:"preview what the PR deploys before merging (as DiffPreview)"`
	ApplicationSet     string `input:"applicationSet" doc:"with preview: also preview the apps this ApplicationSet generates at the PR's head"`
	Selector           string `input:"selector" doc:"with preview: a label selector of the apps to preview"`
	outageInput
	agentInputs
	previewOptions
}

func runMergePR(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := Decode[mergeConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	if !cfg.Preview {
		return mergePR(ctx, sc, cfg)
	}
	var mm mergeMemo
	if _, err := sc.DecodeMemo(&mm); err != nil {
		return Result{}, Terminalf("MergePR memo: %w", err)
	}
	previewed, warnings := mm.Previewed, []string(nil)
	if previewed == nil {
		res, err := mergePreview(ctx, sc, mm.Preview)
		if err != nil || res.Status != Succeeded {
			return res, err
		}
		previewed, warnings = res.Outputs, res.Warnings
	}
	res, err := mergePR(ctx, sc, cfg)
	if err != nil || previewed == nil {
		return res, err
	}
	// The preview is done once per PR head: a merge that parks (queue, pending checks) keeps
	// it in its memo instead of asking the agents again when it wakes.
	switch res.Status {
	case Succeeded:
		if res.Outputs == nil {
			res.Outputs = map[string]any{}
		}
		res.Outputs["preview"] = previewed
		res.Warnings = append(res.Warnings, warnings...)
	case Waiting:
		var m mergeMemo
		if len(res.Memo) > 0 {
			if err := json.Unmarshal(res.Memo, &m); err != nil {
				return Result{}, Terminalf("MergePR memo: %w", err)
			}
		}
		m.Previewed = previewed
		b, err := json.Marshal(m)
		if err != nil {
			return Result{}, Terminal(err)
		}
		res.Memo = b
	}
	return res, nil
}

// mergePreview previews the PR before MergePR merges it: Succeeded with the preview's
// outputs (nil when there is no PR to preview), or the Waiting or Failed result to return.
func mergePreview(ctx context.Context, sc *Context, pm *previewMemo) (Result, error) {
	cfg, err := previewConfigFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	t, skip, err := previewTargetOf(ctx, sc)
	if err != nil {
		return Result{}, err
	}
	if skip != nil {
		return Done(nil), nil // no PR: the merge says so
	}
	if pm == nil {
		pm = &previewMemo{}
	}
	res, err := preview(ctx, sc, cfg, t, pm)
	if err != nil {
		return res, err
	}
	switch res.Status {
	case Waiting:
		b, err := json.Marshal(mergeMemo{Preview: pm})
		if err != nil {
			return Result{}, Terminal(err)
		}
		res.Memo = b
	case Failed:
		res.Outputs = map[string]any{"preview": res.Outputs}
	}
	return res, nil
}

func mergePR(ctx context.Context, sc *Context, cfg mergeConfig) (Result, error) {
	connector, repo, number := cfg.Connector, cfg.Repo, cfg.PRNumber
	var edits []fileEdit
	var known *scm.PullRequest // what the prior step reported about its PR, if anything
	if number == 0 {
		prior := priorPR(sc)
		if prior == nil {
			return Result{}, Terminalf("no PR to merge: give prNumber, or put an UpdateReleaseRepo or RevertPR step before this one in stage %s", sc.Stage)
		}
		if already, _ := prior.Outputs["alreadyPromoted"].(bool); already {
			// The values were on the base before this run: nothing merges. commitId stays
			// empty (a rollback must not revert a commit this run did not make); revision is
			// the base head that GitOpsSync requires the apps to contain.
			rev, _ := prior.Outputs["revision"].(string)
			sc.Log.Info("already promoted: the release repo holds every value; nothing to merge", "step", prior.ID, "revision", rev)
			return Done(map[string]any{"commitId": "", "prNumber": "", "prlink": "", "alreadyPromoted": true, "revision": rev}), nil
		}
		if prior.Outputs["prNumber"] == "" || prior.Outputs["prNumber"] == nil {
			sc.Log.Info("the previous step opened no PR (nothing changed); nothing to merge", "step", prior.ID)
			return Done(map[string]any{"commitId": ""}), nil
		}
		n, err := intInput(prior.Outputs["prNumber"], "prNumber of step "+prior.ID, false)
		if err != nil {
			return Result{}, Terminal(err)
		}
		number = n
		if connector == "" {
			connector, _ = prior.Outputs["connector"].(string)
		}
		if repo == "" {
			repo, _ = prior.Outputs["repo"].(string)
		}
		edits, _ = editsFrom(prior.Outputs["edits"])
		// A repeat reads the PR first: an earlier run may have merged or rebuilt it. A merge
		// woken from its place in the queue did nothing to the PR before it parked, so it
		// merges with what the prior step reported (the head-SHA guard refuses a stale head,
		// and a refusal reads the PR): the handover to the next merge saves a PR read.
		if !sc.Repeat() || queuedOnly(sc) {
			known = reportedPR(prior.Outputs, number)
		}
	}
	if repo == "" {
		return Result{}, Terminalf("repo: required with prNumber")
	}
	method := scm.MergeMethod(orDefault(cfg.MergeStrategy, string(scm.MergeCommit)))
	del := deleteRevertBranch(sc, number, cfg.DeleteSourceBranch)
	p, err := scmFor(ctx, sc, connector)
	if err != nil {
		return Result{}, err
	}
	r := scm.Repo(repo)
	// pr is what is believed about the PR; when it says "clean" a merge is tried with its head
	// SHA as the guard. With the head and base the prior step reported, the first merge needs
	// no PR read, and after a rebuild the merge goes straight to the new head; any refusal
	// other than a conflict to rebuild makes the loop read the PR again.
	var pr *scm.PullRequest
	if known != nil {
		pr = known
		pr.Mergeability = scm.MergeClean
	} else {
		if pr, err = readPR(ctx, p, r, number, edits); err != nil {
			return Result{}, err
		}
		if res, done := prFinal(pr); done {
			if q, _ := sc.Services.Locks.(MergeQueue); q != nil {
				// An earlier delivery merged it and died before leaving the line.
				if err := q.LeaveMergeQueue(ctx, queueID(sc), connector, repo, pr.Base); err != nil {
					return Result{}, fmt.Errorf("merge queue of %s@%s: %w", repo, pr.Base, err)
				}
			}
			return res, nil
		}
	}
	// One merge per repo+branch at a time, in order of arrival: a merge that cannot go yet
	// parks in the branch's line (holding no worker) and is woken when the one ahead ends.
	id := queueID(sc)
	var turn *QueueTurn
	q, _ := sc.Services.Locks.(MergeQueue)
	if q != nil {
		if turn, err = q.JoinMergeQueue(ctx, id, connector, repo, pr.Base); err != nil {
			return Result{}, fmt.Errorf("merge queue of %s@%s: %w", repo, pr.Base, err)
		}
	}
	if turn == nil {
		// No merge queue on this worker (tests, embedded use): wait for the branch lease here.
		unlock, err := lock(ctx, sc, "repo", connector, repo, pr.Base)
		if err != nil {
			return Result{}, err
		}
		defer unlock()
		return mergeLoop(ctx, sc, p, r, pr, number, edits, method, del)
	}
	if !turn.Head {
		turn.Done(false)
		if sc.WakeReason == "deadline" {
			_ = q.LeaveMergeQueue(context.WithoutCancel(ctx), id, connector, repo, pr.Base)
			return Fail(fmt.Sprintf("PR #%d (%s) waited in the merge queue of %s@%s until the step's deadline; %d merges were still ahead",
				pr.Number, pr.URL, repo, pr.Base, turn.Ahead)), nil
		}
		poll := 30 * time.Second // a safety net: the merge ahead wakes this one when it ends
		switch turn.Ahead {
		case 0:
			poll = time.Second // at the head; the previous merge is releasing the branch
		case 1:
			poll = 5 * time.Second // next in line: also watches for the head's holder dying
		}
		sc.Log.Info("waiting in the merge queue", "pr", pr.Number, "branch", pr.Base, "ahead", turn.Ahead)
		memo := &mergeMemo{Queued: true, Untouched: sc.Delivery <= 1 && (len(sc.Memo) == 0 || queuedOnly(sc))}
		return Park(Wait{Keys: []string{turn.WakeKey}, Poll: poll, Deadline: sc.Deadline,
			Reason: fmt.Sprintf("PR #%d is in the merge queue of %s@%s: %d ahead", pr.Number, repo, pr.Base, turn.Ahead)}, memo), nil
	}
	res, err := mergeLoop(ctx, sc, p, r, pr, number, edits, method, del)
	// A transient error keeps the place at the head for the retry (a retry that never comes
	// loses it after the grace); anything else ends this merge's turn and wakes the next.
	turn.Done(err == nil || IsTerminal(err))
	return res, err
}

// mergeLoop merges pr, rebuilding it when it conflicts; the caller holds the branch.
func mergeLoop(ctx context.Context, sc *Context, p scm.Provider, r scm.Repo, pr *scm.PullRequest, number int, edits []fileEdit, method scm.MergeMethod, del bool) (Result, error) {
	repo := string(r)
	var err error
	rebuilds := 0 // bounded: under the lock only a merge from outside prflow can make a rebuilt PR conflict again
	wait := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if pr == nil {
			if pr, err = readPR(ctx, p, r, number, edits); err != nil {
				return Result{}, err
			}
		}
		number = pr.Number
		if res, done := prFinal(pr); done {
			return res, nil
		}
		rebuildable := rebuilds < maxRebuildsPerRun && len(edits) > 0 && strings.HasPrefix(pr.Head, "prflow/")
		dirty := false
		switch pr.Mergeability {
		case scm.MergeClean:
			merged, err := p.MergePR(ctx, r, pr.Number, scm.MergeInput{Method: method, SHA: pr.HeadSHA, DeleteBranch: del, Head: pr.Head})
			if err == nil {
				return mergedResult(sc, merged, pr, method), nil
			}
			if isConflictFiles(err) && rebuildable {
				dirty = true // no need to read the PR to know that
				break
			}
			again := errors.Is(err, scm.ErrNotMergeable) || errors.Is(err, scm.ErrConflict) || scm.Transient(err)
			if !again || errors.Is(err, scm.ErrRateLimited) || attempt > 20 {
				// Rate limits and the rest go back to the worker (backoff, bounded deliveries).
				return Result{}, classify(err, fmt.Sprintf("merge PR #%d of %s", pr.Number, repo))
			}
			// The base or head moved, the forge is still computing, or the PR changed: look again.
			sc.Log.Debug("merge refused; reading the PR again", "pr", pr.Number, "err", err.Error())
			pr = nil
			if attempt == 0 {
				continue // the first try may have used what the prior step reported
			}
		case scm.MergeDirty:
			if !rebuildable {
				files, _ := p.ChangedFiles(ctx, r, pr.Number)
				return Fail(fmt.Sprintf("PR #%d (%s) has conflicts with %s; files: %s", pr.Number, pr.URL, pr.Base, strings.Join(files, ", "))), nil
			}
			dirty = true
		case scm.MergeBlocked:
			return parkMerge(sc, p, repo, pr, 30*time.Second)
		default: // unknown: the forge is computing; ask again shortly, then park
			if attempt > 40 {
				return parkMerge(sc, p, repo, pr, 2*time.Second)
			}
			pr = nil
		}
		if dirty {
			next, err := rebuild(ctx, sc, p, r, pr, edits)
			if err != nil {
				return Result{}, err
			}
			rebuilds++
			pr = next // try the merge on the rebuilt head at once
			continue
		}
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(wait):
		}
		if wait < time.Second {
			wait *= 2
		}
	}
}

// MergeQueue lines up the merges of one repo+branch across all workers (worker.LeaseLocker
// implements it in KV). line names the branch: connector, repo, base branch.
type MergeQueue interface {
	// JoinMergeQueue puts merge id in line, or finds it where an earlier run of the step put it.
	// nil, nil: there is no merge queue here (the caller waits for the branch's lock instead).
	JoinMergeQueue(ctx context.Context, id string, line ...string) (*QueueTurn, error)
	// LeaveMergeQueue takes merge id out of line (no-op when it is not there).
	LeaveMergeQueue(ctx context.Context, id string, line ...string) error
}

// QueueTurn is a merge's place in its line.
type QueueTurn struct {
	Head    bool   // it may merge now: it holds the branch
	Ahead   int    // merges ahead of it
	WakeKey string // a Wait key that changes when it reaches the head
	// Done releases the branch; with leave the merge also leaves the line, waking the next.
	Done func(leave bool)
}

// mergeMemo is what a merge parked in its queue remembers. Untouched: every run of the step
// so far was a first delivery that only joined the queue, so the PR is as the prior step
// reported it.
type mergeMemo struct {
	Queued    bool `json:"queued"`
	Untouched bool `json:"untouched,omitempty"`
	// With preview: true, Preview is the preview's memo while it waits for an agent, and
	// Previewed its outputs once done.
	Preview   *previewMemo   `json:"preview,omitempty"`
	Previewed map[string]any `json:"previewed,omitempty"`
}

// queuedOnly reports whether this run of the step follows only parks in the merge queue.
func queuedOnly(sc *Context) bool {
	var m mergeMemo
	ok, err := sc.DecodeMemo(&m)
	return ok && err == nil && m.Queued && m.Untouched && sc.Delivery <= 1 && sc.Attempt <= 1
}

// queueID names a MergePR step in its line; a redelivery, retry or wake has the same.
func queueID(sc *Context) string { return sc.RunID + "/" + sc.Stage + "/" + sc.StepID }

// readPR reads PR number, following a PR declined because it was rebuilt as a new one.
func readPR(ctx context.Context, p scm.Provider, r scm.Repo, number int, edits []fileEdit) (*scm.PullRequest, error) {
	pr, err := p.GetPR(ctx, r, number)
	if err != nil {
		return nil, classify(err, fmt.Sprintf("get PR #%d of %s", number, r))
	}
	return successor(ctx, p, r, pr, edits)
}

// reportedPR is the PR as UpdateReleaseRepo or RevertPR reported it: number, head branch
// and commit, base, link. nil when the outputs lack any of them.
func reportedPR(out map[string]any, number int) *scm.PullRequest {
	head, _ := out["commitId"].(string)
	branch, _ := out["ref"].(string)
	base, _ := out["baseBranch"].(string)
	link, _ := out["prlink"].(string)
	if head == "" || branch == "" || base == "" {
		return nil
	}
	return &scm.PullRequest{Number: number, Head: branch, HeadSHA: head, Base: base, URL: link, State: scm.PROpen}
}

// mergedResult is MergePR's outputs; fields the forge's merge answer lacks come from what was
// known before the merge.
func mergedResult(sc *Context, merged, before *scm.PullRequest, method scm.MergeMethod) Result {
	link := merged.URL
	if link == "" {
		link = before.URL
	}
	sc.Log.Info("PR merged", "pr", merged.Number, "commit", merged.MergeSHA, "method", string(method))
	return Done(map[string]any{"commitId": merged.MergeSHA, "prNumber": merged.Number, "prlink": link})
}

func prFinal(pr *scm.PullRequest) (Result, bool) {
	switch pr.State {
	case scm.PRMerged:
		return Done(map[string]any{"commitId": pr.MergeSHA, "prNumber": pr.Number, "prlink": pr.URL}), true
	case scm.PRClosed:
		return Fail(fmt.Sprintf("PR #%d (%s) is closed without being merged", pr.Number, pr.URL)), true
	}
	return Result{}, false
}

func parkMerge(sc *Context, p scm.Provider, repo string, pr *scm.PullRequest, poll time.Duration) (Result, error) {
	if sc.WakeReason == "deadline" {
		return Fail(fmt.Sprintf("PR #%d (%s) did not become mergeable in time (%s)", pr.Number, pr.URL, pr.Mergeability)), nil
	}
	return Park(Wait{Topics: []string{prTopic(p.Name(), repo, pr.Number), CommitTopic(p.Name(), repo, pr.HeadSHA)}, Poll: poll, Deadline: sc.Deadline,
		Reason: fmt.Sprintf("PR #%d is %s", pr.Number, pr.Mergeability)}, nil), nil
}

// rebuild re-applies the recorded edits on the base's current head and returns the PR to
// merge next. Where the forge can move a branch off its history (CommitInput.Replace: GitHub,
// GitLab, local) the PR's own branch is moved there, guarded on it still holding the PR's
// head, and the same PR comes back with its new head. Where it cannot (Bitbucket Cloud: /src
// only fast-forwards an existing branch, and deleting the branch would decline the PR), the
// edits go to a new branch named after the PR's (successorBranch), a new PR is opened from it
// and the old one is declined; rebuild returns the new PR. Each step is idempotent: a repeat
// finds the branch, OpenPR adopts the open PR, and declining again is harmless.
func rebuild(ctx context.Context, sc *Context, p scm.Provider, r scm.Repo, pr *scm.PullRequest, edits []fileEdit) (*scm.PullRequest, error) {
	base, err := p.Branch(ctx, r, pr.Base)
	if err != nil {
		return nil, classify(err, fmt.Sprintf("base branch %s of %s", pr.Base, r))
	}
	changes, err := applyEdits(ctx, p, r, base.SHA, edits, fileedit.Options{})
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("Update %s (rebuilt on %s@%.12s)", strings.Join(pathsOf(edits), ", "), pr.Base, base.SHA)
	sha, err := p.Commit(ctx, r, scm.CommitInput{Branch: pr.Head, Parent: base.SHA, Replace: pr.HeadSHA, Message: msg, Changes: changes})
	if err == nil {
		sc.Log.Info("PR conflicted after another merge; rebuilt its branch on the new base", "pr", pr.Number, "commit", sha, "base", base.SHA)
		next := *pr
		next.HeadSHA, next.Mergeability = sha, scm.MergeClean
		return &next, nil
	}
	if !errors.Is(err, scm.ErrNotSupported) {
		return nil, classify(err, fmt.Sprintf("rebuild %s of PR #%d in %s", pr.Head, pr.Number, r))
	}
	if pr.Title == "" { // known only from the prior step's outputs: read title, body and labels
		full, err := p.GetPR(ctx, r, pr.Number)
		if err != nil {
			return nil, classify(err, fmt.Sprintf("get PR #%d of %s", pr.Number, r))
		}
		pr = full
	}
	branch := successorBranch(pr.Head)
	sha, err = p.Commit(ctx, r, scm.CommitInput{Branch: branch, Parent: base.SHA, Message: msg, Changes: changes})
	switch {
	case errors.Is(err, scm.ErrConflict):
		// An earlier attempt made the branch; its PR (open or not yet) is found below.
		sc.Log.Info("the rebuilt branch exists already (an earlier attempt)", "branch", branch)
	case err != nil:
		return nil, classify(err, fmt.Sprintf("rebuild PR #%d of %s on %s", pr.Number, r, branch))
	}
	body := fmt.Sprintf("%s\n\nRebuilt by prflow on %s@%.12s because #%d conflicted after another merge; replaces #%d.",
		strings.TrimSpace(pr.Body), pr.Base, base.SHA, pr.Number, pr.Number)
	next, err := p.OpenPR(ctx, r, scm.NewPR{Title: pr.Title, Body: strings.TrimSpace(body), Head: branch, Base: pr.Base, Labels: pr.Labels})
	if err != nil {
		return nil, classify(err, fmt.Sprintf("open the rebuilt PR %s → %s in %s (replacing #%d)", branch, pr.Base, r, pr.Number))
	}
	if err := p.ClosePR(ctx, r, pr.Number); err != nil {
		return nil, classify(err, fmt.Sprintf("decline PR #%d of %s (rebuilt as #%d)", pr.Number, r, next.Number))
	}
	sc.Log.Info("PR conflicted after another merge; this forge cannot move its branch, so it was rebuilt as a new PR",
		"pr", pr.Number, "newPR", next.Number, "branch", branch, "commit", sha, "base", base.SHA)
	if next.HeadSHA != "" {
		next.Mergeability = scm.MergeClean // merge at once; a refusal reads it again
	}
	return next, nil
}

// successorBranch names the branch of a PR rebuilt as a new PR: <branch>.r2, then .r3, ...
// Work branches never contain a dot (workBranch), so these cannot collide with another step's.
func successorBranch(head string) string {
	if i := strings.LastIndex(head, ".r"); i > 0 {
		if n, err := strconv.Atoi(head[i+2:]); err == nil && n >= 2 {
			return fmt.Sprintf("%s.r%d", head[:i], n+1)
		}
	}
	return head + ".r2"
}

// maxRebuildsPerRun bounds the rebuilds of one MergePR run.
const maxRebuildsPerRun = 3

// maxRebuilds bounds how far successor follows a chain of rebuilt PRs.
const maxRebuilds = 50

// successor follows a prflow PR that was declined because it was rebuilt as a new PR to the
// newest PR of that chain (a repeat of MergePR after a crash starts from the old number). A
// PR closed for any other reason, or with no rebuilt successor, is returned as it is.
func successor(ctx context.Context, p scm.Provider, r scm.Repo, pr *scm.PullRequest, edits []fileEdit) (*scm.PullRequest, error) {
	for i := 0; i < maxRebuilds && pr.State == scm.PRClosed && len(edits) > 0 && strings.HasPrefix(pr.Head, "prflow/"); i++ {
		next, err := p.FindPR(ctx, r, successorBranch(pr.Head), pr.Base)
		if errors.Is(err, scm.ErrNotFound) {
			return pr, nil
		}
		if err != nil {
			return nil, classify(err, fmt.Sprintf("find the PR rebuilt from #%d of %s", pr.Number, r))
		}
		pr = next
	}
	return pr, nil
}
