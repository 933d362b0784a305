package bitbucket

import (
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a Bitbucket Cloud provider from a connector: auth.token alone (or with
// username x-token-auth, the git user of access tokens) is a repository/project/workspace
// access token sent as Bearer; with another username (the Atlassian account email) it is an
// API token sent with basic auth. baseURL defaults to api.bitbucket.org/2.0.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	if c.Auth.GitHubApp != nil {
		return nil, fmt.Errorf("bitbucket connector %s: auth.githubApp is for GitHub; use auth.token", c.Name)
	}
	hc, err := c.HTTPClient(d)
	if err != nil {
		return nil, fmt.Errorf("bitbucket connector %s: %w", c.Name, err)
	}
	opts := []Option{WithHTTPClient(hc), WithBaseURL(c.BaseURL)}
	if d.Logger != nil {
		opts = append(opts, WithLogger(d.Logger))
	}
	switch user := c.Auth.Username; user {
	case "", "x-token-auth":
		opts = append(opts, WithToken(c.Auth.Token.Value()))
	default:
		opts = append(opts, WithBasicAuth(user, c.Auth.Token.Value()))
	}
	p, err := New(opts...)
	if err != nil {
		return nil, fmt.Errorf("bitbucket connector %s: %w", c.Name, err)
	}
	return p, nil
}
