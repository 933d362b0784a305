package github

import (
	"net/http"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a GitHub provider from a connector: baseURL selects GitHub Enterprise
// (empty = api.github.com), auth.token a PAT, auth.githubApp an App installation; caFile,
// insecureSkipVerify and rateLimit apply through the connector's HTTP client.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	auth := WithToken(c.Auth.Token.Value())
	if app := c.Auth.GitHubApp; app != nil {
		auth = WithApp(app.AppID, app.InstallationID, []byte(app.PrivateKey.Value()))
	}
	return connector.BuildForge(Name, c, d, true, func(hc *http.Client) (*Driver, error) {
		return New(WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithLogger(d.Logger), auth)
	})
}
