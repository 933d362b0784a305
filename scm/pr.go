package scm

import "context"

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
	// ChangedFiles lists the paths a PR changes.
	ChangedFiles(ctx context.Context, repo Repo, number int) ([]string, error)
}
