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
		Priors:   NoPriors,
		Internal: true,
		New:      func() Step { return StepFunc(runCommitStatus) },
		Config:   commitStatusConfig{},
	})
	Register(Definition{
		Type:     TypePRComment,
		Priors:   NoPriors,
		Internal: true,
		New:      func() Step { return StepFunc(runPRComment) },
		Config:   prCommentConfig{},
	})
}

// repoInputs are connector and repo, which the feedback steps need (checked by nonEmpty at run
// time; the controller always sets them).
type repoInputs struct {
	Connector string `input:"connector" doc:"the worker connector (SCM credentials) of the repo"`
	Repo      string `input:"repo" doc:"the repo, e.g. acme/release"`
}

// commitStatusConfig is CommitStatus's `with:`.
type commitStatusConfig struct {
	repoInputs
	SHA         string `input:"sha,required" doc:"the commit"`
	Context     string `input:"context,required" doc:"the status's name"`
	State       string `input:"state,required,enum=pending|success|failure|error"`
	Description string `input:"description"`
	TargetURL   string `input:"targetUrl"`
	Order       int    `input:"order" doc:"sequence number: an older status never replaces a newer one"`
}

// prCommentConfig is PRComment's `with:`.
type prCommentConfig struct {
	repoInputs
	PRNumber int    `input:"prNumber" doc:"the pull request's number"`
	Body     string `input:"body,required"`
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

// nonEmpty is the first of name, value pairs whose value is "", as a terminal "required".
func nonEmpty(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return Terminalf("%s: required", pairs[i])
		}
	}
	return nil
}

// Sequencer records the newest step of an ordered sequence (worker.LeaseLocker implements it).
type Sequencer interface {
	Advance(ctx context.Context, key string, seq int) (bool, error)
}

// runCommitStatus sets one commit status: {connector, repo, sha, context, state, description,
// targetUrl}. Setting the same status again is harmless on every forge.
func runCommitStatus(ctx context.Context, sc *Context) (Result, error) {
	c, err := Decode[commitStatusConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	if err := nonEmpty("connector", c.Connector, "repo", c.Repo, "sha", c.SHA, "context", c.Context, "state", c.State); err != nil {
		return Result{}, err
	}
	p, err := scmFor(ctx, sc, c.Connector)
	if err != nil {
		return Result{}, err
	}
	// A stage's pending and final statuses are separate jobs that two worker slots may run in
	// either order. With an `order` (pending 1, final 2, …) they are written under one lock and a
	// stale one is skipped, so a fast stage cannot end on "pending".
	if order := c.Order; order > 0 {
		key := strings.Join([]string{sc.RunID, c.Repo, c.SHA, c.Context}, "/")
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
				sc.Log.Info("commit status skipped: a later one is already set", "context", c.Context, "state", c.State)
				return Done(map[string]any{"skipped": true}), nil
			}
		}
	}
	st := scm.Status{Context: c.Context, State: scm.StatusState(c.State), Description: c.Description, TargetURL: c.TargetURL}
	if err := p.SetStatus(ctx, scm.Repo(c.Repo), c.SHA, st); err != nil {
		return Result{}, classify(err, fmt.Sprintf("set status %s on %.12s", st.Context, c.SHA))
	}
	sc.Log.Info("commit status set", "repo", c.Repo, "sha", c.SHA, "context", st.Context, "state", string(st.State))
	return Done(nil), nil
}

// runPRComment comments on a PR: {connector, repo, prNumber, body}.
func runPRComment(ctx context.Context, sc *Context) (Result, error) {
	c, err := Decode[prCommentConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	if err := nonEmpty("connector", c.Connector, "repo", c.Repo, "body", c.Body); err != nil {
		return Result{}, err
	}
	n := c.PRNumber
	if n <= 0 {
		return Result{}, Terminalf("prNumber: required")
	}
	p, err := scmFor(ctx, sc, c.Connector)
	if err != nil {
		return Result{}, err
	}
	// Posted once: a worker killed after posting and before its result was stored leaves the
	// job to be redelivered, and the redelivery finds the comment by its marker. The body's
	// hash is in the key because a run's rollback step may share an id with a forward step.
	sum := sha256.Sum256([]byte(c.Body))
	key := fmt.Sprintf("%s/%s/%s/%x", sc.RunID, sc.Stage, sc.StepID, sum[:4])
	posted, err := scm.CommentOnce(ctx, p, scm.Repo(c.Repo), n, key, c.Body)
	if err != nil {
		return Result{}, classify(err, fmt.Sprintf("comment on PR #%d", n))
	}
	if !posted {
		sc.Log.Info("PR comment already posted by an earlier delivery", "repo", c.Repo, "pr", n)
		return Done(map[string]any{"posted": false}), nil
	}
	sc.Log.Info("commented on PR", "repo", c.Repo, "pr", n)
	return Done(map[string]any{"posted": true}), nil
}
