package local

import (
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/gitengine"
)

func init() { connector.Register(Name, FromConfig) }

// FromConfig builds a local provider from a connector: baseURL is the remote base (URL or
// directory); auth.token with auth.username authenticate git over HTTPS; caFile and
// insecureSkipVerify apply to it; author is prflow's identity in merges and records.
// rateLimit does not apply: git traffic does not go through the API transport.
func FromConfig(c connector.Config, d connector.Deps) (scm.Provider, error) {
	opts := []gitengine.Option{gitengine.WithTempDir(d.TempDir)}
	if d.Logger != nil {
		opts = append(opts, gitengine.WithLogger(d.Logger))
	}
	if tok := c.Auth.Token.Value(); tok != "" {
		opts = append(opts, gitengine.WithBasicAuth(c.Auth.Username, tok))
	}
	if len(c.CA) > 0 || c.InsecureSkipVerify {
		opts = append(opts, gitengine.WithTLS(c.CA, c.InsecureSkipVerify))
	}
	popts := []Option{WithEngine(gitengine.New(opts...)), WithLogger(d.Logger)}
	if c.Author.Name != "" {
		popts = append(popts, WithIdentity(c.Author))
	}
	if c.Auth.Username != "" {
		popts = append(popts, WithLogin(c.Auth.Username))
	}
	p, err := New(c.BaseURL, popts...)
	if err != nil {
		return nil, fmt.Errorf("local connector %s: %w", c.Name, err)
	}
	return p, nil
}
