package gitlab

import (
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a GitLab provider from a connector: baseURL is the instance (empty =
// gitlab.com), auth.token a personal, group or project access token; caFile,
// insecureSkipVerify and rateLimit apply through the connector's HTTP client.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	if c.Auth.GitHubApp != nil {
		return nil, fmt.Errorf("gitlab connector %s: auth.githubApp is for GitHub; use auth.token", c.Name)
	}
	hc, err := c.HTTPClient(d)
	if err != nil {
		return nil, fmt.Errorf("gitlab connector %s: %w", c.Name, err)
	}
	opts := []Option{WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithToken(c.Auth.Token.Value())}
	if d.Logger != nil {
		opts = append(opts, WithLogger(d.Logger))
	}
	p, err := New(opts...)
	if err != nil {
		return nil, fmt.Errorf("gitlab connector %s: %w", c.Name, err)
	}
	return p, nil
}
