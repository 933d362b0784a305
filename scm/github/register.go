package github

import (
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a GitHub provider from a connector: baseURL selects GitHub Enterprise
// (empty = api.github.com), auth.token a PAT, auth.githubApp an App installation; caFile,
// insecureSkipVerify and rateLimit apply through the connector's HTTP client.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	hc, err := c.ForgeClient(d, Name, true)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithLogger(d.Logger)}
	if app := c.Auth.GitHubApp; app != nil {
		opts = append(opts, WithApp(app.AppID, app.InstallationID, []byte(app.PrivateKey.Value())))
	} else {
		opts = append(opts, WithToken(c.Auth.Token.Value()))
	}
	p, err := New(opts...)
	if err != nil {
		return nil, connector.ForgeError(Name, c, err)
	}
	return p, nil
}
