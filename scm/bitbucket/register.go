package bitbucket

import (
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a Bitbucket Cloud provider from a connector: auth.token alone (or with
// username x-token-auth, the git user of access tokens) is a repository/project/workspace
// access token sent as Bearer; with another username (the Atlassian account email) it is an
// API token sent with basic auth. baseURL defaults to api.bitbucket.org/2.0.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	hc, err := c.ForgeClient(d, Name, false)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithLogger(d.Logger)}
	switch user := c.Auth.Username; user {
	case "", "x-token-auth":
		opts = append(opts, WithToken(c.Auth.Token.Value()))
	default:
		opts = append(opts, WithBasicAuth(user, c.Auth.Token.Value()))
	}
	p, err := New(opts...)
	if err != nil {
		return nil, connector.ForgeError(Name, c, err)
	}
	return p, nil
}
