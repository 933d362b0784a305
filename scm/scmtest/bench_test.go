package scmtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-git/go-billy/v5/memfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-github/v62/github"
	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// benchGitHub starts a fake GitHub holding acme/release and a go-github client for it.
func benchGitHub(b *testing.B, opts ...Option) (*GitHub, *github.Client) {
	b.Helper()
	g := NewGitHub(b, opts...)
	if _, err := g.CreateRepo("acme", "release", map[string]string{"a.yaml": "x: 0\n"}); err != nil {
		b.Fatal(err)
	}
	c, _ := github.NewClient(nil).WithAuthToken(DefaultToken).WithEnterpriseURLs(g.APIURL(), g.APIURL())
	return g, c
}

// BenchmarkGitHubAPICommit measures one multi-file commit through the git data API
// (GetRef, GetCommit, CreateTree, CreateCommit, UpdateRef), the cost of an API-mode
// UpdateReleaseRepo commit against the fake.
func BenchmarkGitHubAPICommit(b *testing.B) {
	g, c := benchGitHub(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ghCommitFiles(ctx, c, "main", "main", map[string]string{"a.yaml": fmt.Sprintf("x: %d\n", i), "b.yaml": "y\n"}, nil, "bump"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(g.Calls()))/float64(b.N), "calls/op")
}

// BenchmarkGitHubOpenAndMergePR measures branch commit + PR + merge commit.
func BenchmarkGitHubOpenAndMergePR(b *testing.B) {
	_, c := benchGitHub(b, WithMergeabilityPolls(0))
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		branch := fmt.Sprintf("bump-%d", i)
		if _, err := ghCommitFiles(ctx, c, branch, "main", map[string]string{fmt.Sprintf("f%d.yaml", i): "x\n"}, nil, "bump"); err != nil {
			b.Fatal(err)
		}
		pr, _, err := c.PullRequests.Create(ctx, "acme", "release", &github.NewPullRequest{Title: github.String(branch), Head: github.String(branch), Base: github.String("main")})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.PullRequests.Merge(ctx, "acme", "release", pr.GetNumber(), "", &github.PullRequestOptions{MergeMethod: "merge"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGitLabCommitActions measures one CreateCommit with two actions.
func BenchmarkGitLabCommitActions(b *testing.B) {
	g := NewGitLab(b)
	if _, err := g.CreateRepo("group", "release", map[string]string{"a.yaml": "x: 0\n"}); err != nil {
		b.Fatal(err)
	}
	c, _ := gitlab.NewClient(DefaultToken, gitlab.WithBaseURL(g.APIURL()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _, err := c.Commits.CreateCommit("group/release", &gitlab.CreateCommitOptions{Branch: gitlab.Ptr("main"), CommitMessage: gitlab.Ptr("bump"),
			Actions: []*gitlab.CommitActionOptions{
				{Action: gitlab.Ptr(gitlab.FileUpdate), FilePath: gitlab.Ptr("a.yaml"), Content: gitlab.Ptr(fmt.Sprintf("x: %d\n", i))},
				{Action: gitlab.Ptr(gitlab.FileCreate), FilePath: gitlab.Ptr(fmt.Sprintf("n/%d", i)), Content: gitlab.Ptr("y")},
			}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGitServerShallowClone measures a go-git depth-1 in-memory clone over smart HTTP.
func BenchmarkGitServerShallowClone(b *testing.B) {
	gs := NewGitServer(b)
	files := map[string]string{}
	for i := 0; i < 50; i++ {
		files[fmt.Sprintf("apps/app%d/values.yaml", i)] = fmt.Sprintf("image: v%d\n", i)
	}
	if _, err := gs.CreateRepo("acme", "release", files); err != nil {
		b.Fatal(err)
	}
	auth := &githttp.BasicAuth{Username: "x", Password: DefaultToken}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := git.Clone(memory.NewStorage(), memfs.New(), &git.CloneOptions{URL: gs.CloneURL("acme", "release"), Auth: auth,
			Depth: 1, SingleBranch: true, ReferenceName: plumbing.NewBranchReferenceName("main")}); err != nil {
			b.Fatal(err)
		}
	}
}
