// Package scm holds the types and small interfaces that prflow's steps use to talk to Git forges.
// Each driver (github, gitlab, bitbucket, local) lives in its own folder and implements Provider;
// an operation a forge cannot do returns an error matching ErrNotSupported.
package scm

import "context"

// Repo names a repository on a forge: "owner/name" on GitHub, "group/sub/project" on GitLab,
// "workspace/slug" on Bitbucket, or a path relative to the remote base for the local driver.
type Repo string

// Provider is everything the steps need from a forge. Drivers implement all of it; the pieces
// are separate interfaces so that code can ask for only what it uses.
type Provider interface {
	Name() string // driver name: github, gitlab, bitbucket, local
	Contents
	Git
	PullRequests
	Statuses
}

// Identity is the connector's user as the forge sees it; `prflow connectors check` prints it.
type Identity struct {
	Login string
	Name  string
	Email string
}

// Checker verifies that credentials work and a repo is visible.
type Checker interface {
	Whoami(ctx context.Context) (Identity, error)
	RepoExists(ctx context.Context, repo Repo) error
}

// Signature is a commit author or committer.
type Signature struct {
	Name  string
	Email string
}
