package scm

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// PRState is a pull request's lifecycle state, normalised across forges.
type PRState string

const (
	PROpen   PRState = "open"
	PRClosed PRState = "closed" // closed without merge (GitLab "closed", Bitbucket "DECLINED")
	PRMerged PRState = "merged"
)

// Mergeability is whether the forge would merge the PR now.
type Mergeability string

const (
	MergeClean   Mergeability = "clean"
	MergeDirty   Mergeability = "dirty"   // conflicts
	MergeUnknown Mergeability = "unknown" // the forge is still computing; ask again
	MergeBlocked Mergeability = "blocked" // checks pending/failed, approvals missing
)

// PullRequest is the normalised view of a PR/MR.
type PullRequest struct {
	Number       int
	Title        string
	Body         string
	State        PRState
	Draft        bool
	Head         string // source branch
	Base         string // target branch
	HeadSHA      string
	MergeSHA     string // merge, squash or rebase result on Base once merged
	Mergeability Mergeability
	Labels       []string
	URL          string // the forge's web URL for people
}

// NewPR is what OpenPR needs.
type NewPR struct {
	Title     string
	Body      string
	Head      string
	Base      string
	Labels    []string
	Draft     bool
	Reviewers []string
}

// Check reports the first thing missing in a NewPR, worded the same by every driver.
func (in NewPR) Check() error {
	switch {
	case in.Head == "" || in.Base == "":
		return errors.New("NewPR.Head and NewPR.Base are required")
	case strings.TrimSpace(in.Title) == "":
		return errors.New("NewPR.Title is empty")
	}
	return nil
}

// MergeMethod is how a PR is merged.
type MergeMethod string

const (
	MergeCommit MergeMethod = "merge"
	Squash      MergeMethod = "squash"
	Rebase      MergeMethod = "rebase"
)

// MergeInput guards and shapes a merge.
type MergeInput struct {
	Method MergeMethod
	// SHA, when set, is the head the caller reviewed; the forge refuses the merge if the head
	// moved (ErrConflict).
	SHA          string
	Message      string
	DeleteBranch bool
	// Head is the PR's source branch when the caller knows it (prflow's own PRs); drivers
	// use it for DeleteBranch instead of reading the PR again. Empty means "read it".
	Head string
}

// Done reports whether pr is merged at the head the caller reviewed (any head when SHA is
// unset): a merge asked for again by a redelivered job has nothing left to do.
func (in MergeInput) Done(pr *PullRequest) bool {
	return pr.State == PRMerged && (in.SHA == "" || pr.HeadSHA == in.SHA)
}

// Refused reads a merge the forge refused against the PR as it shows it now: done when it is
// merged at the expected head (Done); merged at another head is a ConflictError, closed a
// NotMergeableError with the forge's reason. Any other state is (false, nil): the refusal is
// the forge's to explain. short and long name a PR as the forge does ("MR", "merge request").
func (in MergeInput) Refused(pr *PullRequest, short, long, reason string) (done bool, err error) {
	switch {
	case in.Done(pr):
		return true, nil
	case pr.State == PRMerged:
		return false, &ConflictError{Msg: fmt.Sprintf("%s was already merged at head %s, not %s", short, pr.HeadSHA, in.SHA)}
	case pr.State == PRClosed:
		return false, &NotMergeableError{Msg: "the " + long + " is closed: " + reason}
	}
	return false, nil
}

// PullRequests covers the PR life cycle.
type PullRequests interface {
	// FindPR returns the newest PR from head into base in any state; ErrNotFound when none.
	FindPR(ctx context.Context, repo Repo, head, base string) (*PullRequest, error)
	OpenPR(ctx context.Context, repo Repo, in NewPR) (*PullRequest, error)
	GetPR(ctx context.Context, repo Repo, number int) (*PullRequest, error)
	// MergePR merges and returns the PR as merged: Number, State and MergeSHA are always set;
	// drivers whose merge answer carries no more may leave the other fields empty rather than
	// read the PR again. A PR that cannot be merged returns an error matching ErrNotMergeable
	// (or ErrConflict when in.SHA is stale). A PR already merged at in.SHA is success.
	MergePR(ctx context.Context, repo Repo, number int, in MergeInput) (*PullRequest, error)
	ClosePR(ctx context.Context, repo Repo, number int) error
	Comment(ctx context.Context, repo Repo, number int, body string) error
	// ListComments returns a PR's conversation comments, oldest first, every page (GitLab
	// system notes left out). ErrNotSupported where the forge cannot list them.
	ListComments(ctx context.Context, repo Repo, number int) ([]PRComment, error)
	// ChangedFiles lists the paths a PR changes.
	ChangedFiles(ctx context.Context, repo Repo, number int) ([]string, error)
}

// PRReader reads one PR in full.
type PRReader interface {
	GetPR(ctx context.Context, repo Repo, number int) (*PullRequest, error)
}

// CheckHeadBase rejects a FindPR without its head or base branch.
func CheckHeadBase(head, base string) error {
	if head == "" || base == "" {
		return errors.New("head and base branches are required")
	}
	return nil
}

// GetNewest is FindPR's last step once a driver has listed the PRs from head into base: the
// one numbered newest read in full, or, when none matched (newest 0), an *Error from provider
// matching ErrNotFound. noun names a PR as the forge does ("merge request").
func GetNewest(ctx context.Context, p PRReader, provider, op string, repo Repo, noun, head, base string, newest int) (*PullRequest, error) {
	if newest == 0 {
		return nil, &Error{Provider: provider, Op: op, Repo: repo,
			Err: fmt.Errorf("%w: no %s from %s into %s", ErrNotFound, noun, head, base)}
	}
	return p.GetPR(ctx, repo, newest)
}

// PRComment is a comment on a PR as the forge lists it.
type PRComment struct {
	ID     string
	Author string
	Body   string
}

// CommentMarker is the hidden line (an HTML comment, invisible on every forge) that names a
// comment's origin, e.g. run/stage/step: CommentOnce finds its own earlier comment by it.
func CommentMarker(key string) string {
	// "--" and ">" would end the HTML comment early and show the rest.
	key = strings.NewReplacer("--", "-_", ">", "_", "\n", " ").Replace(key)
	return "<!-- prflow:" + key + " -->"
}

// CommentOnce posts body on the PR with key's marker, unless a comment carrying that marker
// is there already (an earlier delivery of the same job posted it before it could report):
// a comment is a side effect done once. Where the forge cannot list comments
// (ErrNotSupported) it posts; posted says whether it did.
func CommentOnce(ctx context.Context, p PullRequests, repo Repo, number int, key, body string) (posted bool, err error) {
	marker := CommentMarker(key)
	existing, err := p.ListComments(ctx, repo, number)
	switch {
	case errors.Is(err, ErrNotSupported):
	case err != nil:
		return false, fmt.Errorf("look for an earlier comment %s: %w", marker, err)
	default:
		for _, c := range existing {
			if strings.Contains(c.Body, marker) {
				return false, nil
			}
		}
	}
	if err := p.Comment(ctx, repo, number, strings.TrimRight(body, "\n")+"\n\n"+marker+"\n"); err != nil {
		return false, err
	}
	return true, nil
}

// CommentEditor is implemented by drivers that can replace the body of a PR comment they
// listed (ListComments' ID).
type CommentEditor interface {
	EditComment(ctx context.Context, repo Repo, number int, id, body string) error
}

// Comment upsert outcomes.
const (
	CommentPosted    = "posted"    // a new comment
	CommentUpdated   = "updated"   // the earlier comment with the key's marker was edited
	CommentUnchanged = "unchanged" // the earlier comment already says body
)

// UpsertComment keeps one comment per key on the PR: the first call posts body with key's
// marker, later calls edit that comment in place (no comment storm on re-pushes), and an
// identical body is left alone. Where the driver cannot edit (no CommentEditor, or
// ErrNotSupported) a changed body is posted as a new comment. Where the forge cannot list
// comments it posts. A body over the driver's CommentLimit is cut to fit with a note saying
// so (callers with a link to the full text cap it first: CapComment with CommentBudget).
// A forge that refuses the comment (no permission, a locked conversation) returns an error
// matching ErrForbidden.
func UpsertComment(ctx context.Context, p PullRequests, repo Repo, number int, key, body string) (string, error) {
	marker := CommentMarker(key)
	body = strings.TrimRight(body, "\n")
	if b := CommentBudget(p, key); b > 0 && len(body) > b {
		body = CapComment(body, b, "_(cut to fit the forge's comment size limit)_")
	}
	full := body + markerSuffix(key)
	existing, err := p.ListComments(ctx, repo, number)
	switch {
	case errors.Is(err, ErrNotSupported):
	case err != nil:
		return "", fmt.Errorf("look for an earlier comment %s: %w", marker, err)
	}
	// The first comment carrying the marker is prflow's own (it posts before anyone can quote
	// it); the newest of its author's is the one to keep up to date, so a person who pasted
	// the marker into a comment of theirs does not make prflow edit, or fail to edit, theirs.
	var found *PRComment
	for i := range existing {
		if !strings.Contains(existing[i].Body, marker) {
			continue
		}
		if found == nil || existing[i].Author == found.Author {
			found = &existing[i]
		}
	}
	if found != nil {
		if strings.TrimSpace(found.Body) == strings.TrimSpace(full) {
			return CommentUnchanged, nil
		}
		if ed, ok := p.(CommentEditor); ok {
			err := ed.EditComment(ctx, repo, number, found.ID, full)
			if err == nil {
				return CommentUpdated, nil
			}
			if !errors.Is(err, ErrNotSupported) {
				return "", err
			}
		}
	}
	if err := p.Comment(ctx, repo, number, full); err != nil {
		return "", err
	}
	return CommentPosted, nil
}
