package gitlab

import (
	"net/http"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a GitLab provider from a connector: baseURL is the instance (empty =
// gitlab.com), auth.token a personal, group or project access token; caFile,
// insecureSkipVerify and rateLimit apply through the connector's HTTP client.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	return connector.BuildForge(Name, c, d, false, func(hc *http.Client) (*Driver, error) {
		return New(WithHTTPClient(hc), WithBaseURL(c.BaseURL), WithToken(c.Auth.Token.Value()), WithLogger(d.Logger))
	})
}
