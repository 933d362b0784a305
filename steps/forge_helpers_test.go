package steps_test

import (
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
	"github.com/prflow/prflow/scm/scmtest"
)

// onForge creates acme/<repo> holding files on a started fake forge and points a driver at
// the fake's API (apiURL) with scmtest.DefaultToken.
func onForge[D scm.Provider](t testing.TB, name string, f *scmtest.Forge, apiURL, repo string, files map[string]string, newDriver func(apiURL string) (D, error)) forge {
	t.Helper()
	if _, err := f.CreateRepo("acme", repo, files); err != nil {
		t.Fatal(err)
	}
	p, err := newDriver(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	return forge{name, p, f, f.Git()}
}

func githubDriver(apiURL string) (*github.Driver, error) {
	return github.New(github.WithBaseURL(apiURL), github.WithToken(scmtest.DefaultToken))
}

func gitlabDriver(apiURL string) (*gitlab.Driver, error) {
	return gitlab.New(gitlab.WithBaseURL(apiURL), gitlab.WithToken(scmtest.DefaultToken))
}

func bitbucketDriver(apiURL string) (*bitbucket.Driver, error) {
	return bitbucket.New(bitbucket.WithBaseURL(apiURL), bitbucket.WithToken(scmtest.DefaultToken))
}

// githubRepo starts a fake GitHub holding acme/<repo> with files and a GitHub driver pointed
// at it.
func githubRepo(t testing.TB, repo string, files map[string]string) forge {
	t.Helper()
	gh := scmtest.NewGitHub(t)
	return onForge(t, "github", gh.Forge, gh.APIURL(), repo, files, githubDriver)
}
