package steps

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/prflow/prflow/scm"
)

// SCM resolves a connector name to a forge provider; the worker builds it from its
// connectors file, so tokens never leave the worker.
type SCM interface {
	Provider(ctx context.Context, connector string) (scm.Provider, error)
}

// Locker serialises writers of one repo+branch across all workers.
type Locker interface {
	Lock(ctx context.Context, key string) (unlock func(), err error)
}

// Service names in Services.
const (
	ServiceSCM   = "scm"
	ServiceLocks = "locks"
)

func scmFor(ctx context.Context, sc *Context, connector string) (scm.Provider, error) {
	if connector == "" {
		return nil, Terminalf("connector: required (a connector name from the worker's connectors file)")
	}
	res := sc.Services.SCM
	if res == nil {
		return nil, Terminalf("connector %q: this worker has no connectors configured (start it with --connectors FILE)", connector)
	}
	p, err := res.Provider(ctx, connector)
	if err != nil {
		return nil, Terminalf("connector %q: %w", connector, err)
	}
	return p, nil
}

func lock(ctx context.Context, sc *Context, parts ...string) (func(), error) {
	l := sc.Services.Locks
	if l == nil {
		return func() {}, nil
	}
	return l.Lock(ctx, strings.Join(parts, "/"))
}

// restraint takes the repo+branch lock, and first, when the step sets gitRestraint: true,
// Harness's per-connector "git restraint" (one PR-creating step per token at a time). It is
// off by default: the repo+branch leases and the per-connector rate limiter already protect
// the forge, and a global queue per token is what Harness users complain about.
func restraint(ctx context.Context, sc *Context, connector string, parts ...string) (func(), error) {
	in, err := decodePart[restraintInputs](sc.Inputs, false)
	if err != nil {
		return nil, Terminal(err)
	}
	on := in.GitRestraint && !in.DisableGitRestraint
	var first func()
	if on {
		if first, err = lock(ctx, sc, "restraint", connector); err != nil {
			return nil, err
		}
	}
	second, err := lock(ctx, sc, parts...)
	if err != nil {
		if first != nil {
			first()
		}
		return nil, err
	}
	return func() {
		second()
		if first != nil {
			first()
		}
	}, nil
}

// workBranch is the deterministic branch of one step of one run: a redelivered or re-run job
// finds its own branch and PR instead of making new ones.
func workBranch(sc *Context, kind string) string {
	b := RunBranchPrefix(sc.Pipeline, sc.RunID) + cleanRef(sc.Stage) + "-" + cleanRef(sc.StepID)
	if kind != "" {
		b += "-" + kind
	}
	return b
}

// RunBranchPrefix starts the name of every branch the steps of one run push (workBranch). Run
// ids are unique, so no other run, and nobody but prflow, has a branch under it.
func RunBranchPrefix(pipeline, run string) string {
	return "prflow/" + cleanRef(pipeline) + "/" + cleanRef(run) + "/"
}

// WorkBranch is the branch a release step (UpdateReleaseRepo, RevertPR) of a run pushes its
// commit to, as the step names it: the cleanup of a failed run deletes it even when the step
// failed before it opened (or reported) a PR. "" for other step types.
func WorkBranch(stepType, pipeline, run, stage, step string) string {
	kind := ""
	switch stepType {
	case "UpdateReleaseRepo":
	case "RevertPR":
		kind = "revert"
	default:
		return ""
	}
	return workBranch(&Context{Pipeline: pipeline, RunID: run, Stage: stage, StepID: step}, kind)
}

// cleanRef keeps letters, digits, - and _ of s and makes every other character a -.
func cleanRef(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// safePath rejects absolute paths and escapes out of the repo.
func safePath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("file path is empty")
	}
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "\\") || (len(p) > 1 && p[1] == ':') {
		return "", fmt.Errorf("file path %q is absolute; paths are relative to the repo root", p)
	}
	c := path.Clean(strings.ReplaceAll(p, "\\", "/"))
	if c == ".." || strings.HasPrefix(c, "../") || c == "." {
		return "", fmt.Errorf("file path %q leaves the repository", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("file path %q contains '..'", p)
		}
	}
	return c, nil
}

// prOutputs are the Harness outcome fields (updateReleaseRepoOutcome / revertPROutcome) plus
// what MergePR needs to find the PR again.
func prOutputs(pr *scm.PullRequest, commit, branch, connector, repo, base string, files []string) map[string]any {
	out := map[string]any{"prNumber": "", "prlink": "", "commitId": commit, "ref": branch,
		"changedFiles": toAny(files), "connector": connector, "repo": repo, "baseBranch": base}
	if pr != nil {
		out["prNumber"] = pr.Number
		out["prlink"] = pr.URL
		if commit == "" {
			out["commitId"] = pr.HeadSHA
		}
	}
	return out
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// classify turns a forge error into terminal or transient: rate limits, 5xx and optimistic
// concurrency conflicts are retried; bad credentials, missing things and invalid requests are not.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	if scm.Transient(err) || errors.Is(err, scm.ErrConflict) && !isConflictFiles(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var se *scm.Error
	if errors.Is(err, scm.ErrUnauthorized) || errors.Is(err, scm.ErrNotFound) || errors.Is(err, scm.ErrNotMergeable) ||
		errors.Is(err, scm.ErrNotSupported) || isConflictFiles(err) || (errors.As(err, &se) && se.Status >= 400 && se.Status < 500) {
		return Terminalf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isConflictFiles(err error) bool {
	var ce *scm.ConflictError
	return errors.As(err, &ce) && len(ce.Files) > 0
}

// priorPR finds the newest UpdateReleaseRepo or RevertPR of this stage, as Harness's MergePR
// does (a revert PR wins when both exist, because it is the later one).
func priorPR(sc *Context) *Prior {
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		p := sc.Priors[i]
		if p.Type == "UpdateReleaseRepo" || p.Type == "RevertPR" {
			return &sc.Priors[i]
		}
	}
	return nil
}

// prTopic is the event topic a PR's webhooks wake: pr:<provider>:<repo>#<number>.
func prTopic(provider, repo string, n int) string {
	return fmt.Sprintf("pr:%s:%s#%d", provider, repo, n)
}
