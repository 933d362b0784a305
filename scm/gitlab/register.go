package gitlab

import (
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a GitLab provider from a connector: baseURL is the instance (empty =
// gitlab.com), auth.token a personal, group or project access token; caFile,
// insecureSkipVerify and rateLimit apply through the connector's HTTP client.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	hc, err := c.ForgeClient(d, Name, false)
	if err != nil {
		return nil, err
	}
	p, err := New(WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithToken(c.Auth.Token.Value()), WithLogger(d.Logger))
	if err != nil {
		return nil, connector.ForgeError(Name, c, err)
	}
	return p, nil
}
