package bitbucket

import (
	"net/http"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a Bitbucket Cloud provider from a connector: auth.token alone (or with
// username x-token-auth, the git user of access tokens) is a repository/project/workspace
// access token sent as Bearer; with another username (the Atlassian account email) it is an
// API token sent with basic auth. baseURL defaults to api.bitbucket.org/2.0.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	auth := WithToken(c.Auth.Token.Value())
	if user := c.Auth.Username; user != "" && user != "x-token-auth" {
		auth = WithBasicAuth(user, c.Auth.Token.Value())
	}
	return connector.BuildForge(Name, c, d, false, func(hc *http.Client) (*Driver, error) {
		return New(WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithLogger(d.Logger), auth)
	})
}
