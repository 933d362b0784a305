package steps

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/prflow/prflow/scm"
)

// Feedback steps report a run's progress back to the forge. The controller dispatches them on
// stage transitions of webhook-triggered runs (it never calls a forge itself: tokens stay on
// workers); the state machine ignores their results. Pipelines may use them too.
const (
	TypeCommitStatus = "CommitStatus"
	TypePRComment    = "PRComment"
)

func init() {
	Register(Definition{
		Type:     TypeCommitStatus,
		Internal: true,
		New:      func() Step { return StepFunc(runCommitStatus) },
		Inputs: []Input{inConnector, inRepo,
			{Name: "sha", Type: InputString, Required: true, Doc: "the commit"},
			{Name: "context", Type: InputString, Required: true, Doc: "the status's name"},
			{Name: "state", Type: InputString, Required: true, Enum: []string{"pending", "success", "failure", "error"}},
			{Name: "description", Type: InputString},
			{Name: "targetUrl", Type: InputString},
			{Name: "order", Type: InputInt, Doc: "sequence number: an older status never replaces a newer one"},
		},
		Validate: func(in map[string]any) error {
			if s, ok := in["state"].(string); ok && !isStatusState(s) {
				return fmt.Errorf("state: %q is not one of pending, success, failure, error", s)
			}
			return nil
		},
	})
	Register(Definition{
		Type:     TypePRComment,
		Internal: true,
		New:      func() Step { return StepFunc(runPRComment) },
		Inputs:   []Input{inConnector, inRepo, inPRNumber, {Name: "body", Type: InputString, Required: true}},
	})
}

// CommitTopic is the event topic a commit's status and check webhooks wake:
// commit:<provider>:<repo>@<first 12 hex digits>. Twelve digits, because Bitbucket's webhooks
// carry abbreviated hashes while the APIs return full ones.
func CommitTopic(provider, repo, sha string) string {
	if len(sha) > 12 {
		sha = sha[:12]
	}
	return "commit:" + provider + ":" + repo + "@" + sha
}

func isStatusState(s string) bool {
	switch scm.StatusState(s) {
	case scm.StatusPending, scm.StatusSuccess, scm.StatusFailure, scm.StatusError:
		return true
	}
	return false
}

func requiredStrings(in map[string]any, names ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range names {
		s, err := StringInput(in, n)
		if err != nil {
			return nil, Terminal(err)
		}
		if s == "" {
			return nil, Terminalf("%s: required", n)
		}
		out[n] = s
	}
	return out, nil
}

// Sequencer records the newest step of an ordered sequence (worker.LeaseLocker implements it).
type Sequencer interface {
	Advance(ctx context.Context, key string, seq int) (bool, error)
}

// runCommitStatus sets one commit status: {connector, repo, sha, context, state, description,
// targetUrl}. Setting the same status again is harmless on every forge.
func runCommitStatus(ctx context.Context, sc *Context) (Result, error) {
	v, err := requiredStrings(sc.Inputs, "connector", "repo", "sha", "context", "state")
	if err != nil {
		return Result{}, err
	}
	if !isStatusState(v["state"]) {
		return Result{}, Terminalf("state: %q is not one of pending, success, failure, error", v["state"])
	}
	desc, _ := StringInput(sc.Inputs, "description")
	target, _ := StringInput(sc.Inputs, "targetUrl")
	p, err := scmFor(ctx, sc, v["connector"])
	if err != nil {
		return Result{}, err
	}
	// A stage's pending and final statuses are separate jobs that two worker slots may run in
	// either order. With an `order` (pending 1, final 2, …) they are written under one lock and a
	// stale one is skipped, so a fast stage cannot end on "pending".
	if order, _ := intInput(sc.Inputs["order"], "order", false); order > 0 {
		key := strings.Join([]string{sc.RunID, v["repo"], v["sha"], v["context"]}, "/")
		unlock, err := lock(ctx, sc, "status", key)
		if err != nil {
			return Result{}, err
		}
		defer unlock()
		if seq, ok := sc.Services.Locks.(Sequencer); ok {
			current, err := seq.Advance(ctx, key, order)
			if err != nil {
				return Result{}, err
			}
			if !current {
				sc.Log.Info("commit status skipped: a later one is already set", "context", v["context"], "state", v["state"])
				return Done(map[string]any{"skipped": true}), nil
			}
		}
	}
	st := scm.Status{Context: v["context"], State: scm.StatusState(v["state"]), Description: desc, TargetURL: target}
	if err := p.SetStatus(ctx, scm.Repo(v["repo"]), v["sha"], st); err != nil {
		return Result{}, classify(err, fmt.Sprintf("set status %s on %.12s", st.Context, v["sha"]))
	}
	sc.Log.Info("commit status set", "repo", v["repo"], "sha", v["sha"], "context", st.Context, "state", string(st.State))
	return Done(nil), nil
}

// runPRComment comments on a PR: {connector, repo, prNumber, body}.
func runPRComment(ctx context.Context, sc *Context) (Result, error) {
	v, err := requiredStrings(sc.Inputs, "connector", "repo", "body")
	if err != nil {
		return Result{}, err
	}
	n, err := prNumberInput(sc.Inputs)
	if err != nil {
		return Result{}, err
	}
	p, err := scmFor(ctx, sc, v["connector"])
	if err != nil {
		return Result{}, err
	}
	// Posted once: a worker killed after posting and before its result was stored leaves the
	// job to be redelivered, and the redelivery finds the comment by its marker. The body's
	// hash is in the key because a run's rollback step may share an id with a forward step.
	sum := sha256.Sum256([]byte(v["body"]))
	key := fmt.Sprintf("%s/%s/%s/%x", sc.RunID, sc.Stage, sc.StepID, sum[:4])
	posted, err := scm.CommentOnce(ctx, p, scm.Repo(v["repo"]), n, key, v["body"])
	if err != nil {
		return Result{}, classify(err, fmt.Sprintf("comment on PR #%d", n))
	}
	if !posted {
		sc.Log.Info("PR comment already posted by an earlier delivery", "repo", v["repo"], "pr", n)
		return Done(map[string]any{"posted": false}), nil
	}
	sc.Log.Info("commented on PR", "repo", v["repo"], "pr", n)
	return Done(map[string]any{"posted": true}), nil
}
