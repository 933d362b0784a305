// Package connector loads the worker-side connectors file: which forges a worker can reach,
// with which credentials. A pipeline job names a connector, never a secret; the worker resolves
// the secrets here, at load time, from environment variables or files, and builds one
// scm.Provider per connector through the driver registry.
//
//	connectors:
//	  - name: github-prod
//	    provider: github            # github | gitlab | bitbucket | local
//	    baseURL: https://api.github.com
//	    auth:
//	      token: env:GITHUB_TOKEN   # or file:/run/secrets/token
//	      username: x-access-token  # basic-auth user for git over HTTPS
//	      # githubApp: {appID: 1, installationID: 2, privateKeyFile: /run/secrets/app.pem}
//	    caFile: /etc/ssl/corp-ca.pem
//	    insecureSkipVerify: false
//	    author: {name: prflow, email: prflow@example.com}
//	    rateLimit: {rps: 10, burst: 20}
//
// A bare list (without the connectors key) is accepted too.
package connector

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
	"github.com/prflow/prflow/yamlconf"
)

// Providers prflow knows how to configure.
var knownProviders = []string{"github", "gitlab", "bitbucket", "local"}

// Config is one connector, with its secrets resolved.
type Config struct {
	Name               string
	Provider           string
	BaseURL            string
	Auth               Auth
	CAFile             string
	CA                 []byte // PEM read from CAFile
	InsecureSkipVerify bool
	Author             scm.Signature
	RateLimit          RateLimit
	Source             string // file:line of the entry, for messages
}

// Auth is how a connector authenticates.
type Auth struct {
	Token     Secret
	Username  string
	GitHubApp *GitHubApp
}

// GitHubApp authenticates as a GitHub App installation.
type GitHubApp struct {
	AppID          int64  `yaml:"appID"`
	InstallationID int64  `yaml:"installationID"`
	PrivateKeyFile string `yaml:"privateKeyFile"`
	PrivateKey     Secret `yaml:"-"` // PEM read from PrivateKeyFile
}

// RateLimit is the client-side token bucket (0 rps = none).
type RateLimit struct {
	RPS   float64 `yaml:"rps"`
	Burst int     `yaml:"burst"`
}

// Secrets returns the connector's credential values, for log masking.
func (c Config) Secrets() []string {
	var out []string
	if !c.Auth.Token.IsZero() {
		out = append(out, c.Auth.Token.Value())
	}
	if c.Auth.GitHubApp != nil && !c.Auth.GitHubApp.PrivateKey.IsZero() {
		out = append(out, c.Auth.GitHubApp.PrivateKey.Value())
	}
	return out
}

// TLSConfig returns the client TLS settings (system roots plus CA, insecure flag).
func (c Config) TLSConfig() (*tls.Config, error) {
	return transport.TLSConfig(c.CA, c.InsecureSkipVerify)
}

// HTTPClient builds the connector's API client: rate limit, retries, TLS, metrics and secret
// redaction (see package transport). extra options come last and win.
func (c Config) HTTPClient(d Deps, extra ...transport.Option) (*http.Client, error) {
	opts := []transport.Option{
		transport.WithProvider(c.Provider, c.Name),
		transport.WithRateLimit(c.RateLimit.RPS, c.RateLimit.Burst),
		transport.WithTLS(c.CA, c.InsecureSkipVerify),
		transport.WithSecrets(c.Secrets()...),
		transport.WithLogger(d.logger()),
		transport.WithMetrics(d.Metrics),
	}
	return transport.NewClient(append(opts, extra...)...)
}

// ForgeClient is where a REST forge driver's factory starts (github, gitlab, bitbucket): the
// connector's HTTP client (HTTPClient). A forge that takes no GitHub App (allowApp false)
// refuses a connector with auth.githubApp. Errors name the provider and the connector
// (ForgeError).
func (c Config) ForgeClient(d Deps, provider string, allowApp bool) (*http.Client, error) {
	if !allowApp && c.Auth.GitHubApp != nil {
		return nil, ForgeError(provider, c, errors.New("auth.githubApp is for GitHub; use auth.token"))
	}
	hc, err := c.HTTPClient(d)
	if err != nil {
		return nil, ForgeError(provider, c, err)
	}
	return hc, nil
}

// BuildForge is a REST forge driver's whole factory around its own constructor: build gets
// the connector's HTTP client (ForgeClient) and its error is named with the provider and the
// connector (ForgeError).
func BuildForge[P scm.Provider](provider string, c Config, d Deps, allowApp bool, build func(hc *http.Client) (P, error)) (scm.Provider, error) {
	hc, err := c.ForgeClient(d, provider, allowApp)
	if err != nil {
		return nil, err
	}
	p, err := build(hc)
	if err != nil {
		return nil, ForgeError(provider, c, err)
	}
	return p, nil
}

// ForgeError names the provider and connector a driver could not be built for.
func ForgeError(provider string, c Config, err error) error {
	return fmt.Errorf("%s connector %s: %w", provider, c.Name, err)
}

// LoadError points at the place in the file that is wrong: file:line:col: field: what.
type LoadError = yamlconf.Error

// NodeKind names what a YAML node is, for "want X, got Y" errors of the YAML files that use
// this package's secret references.
func NodeKind(n *yaml.Node) string { return yamlconf.Kind(n) }

// The file as written; parse checks it and resolves it into Configs.
type (
	connectorsFile struct {
		Connectors []rawConnector `yaml:"connectors"`
	}
	rawConnector struct {
		Name               string     `yaml:"name"`
		Provider           string     `yaml:"provider"`
		BaseURL            string     `yaml:"baseURL"`
		Auth               *rawAuth   `yaml:"auth"`
		CAFile             string     `yaml:"caFile"`
		InsecureSkipVerify bool       `yaml:"insecureSkipVerify"`
		Author             *rawAuthor `yaml:"author"`
		RateLimit          RateLimit  `yaml:"rateLimit"`
	}
	rawAuth struct {
		Token     string     `yaml:"token"`
		Username  string     `yaml:"username"`
		GitHubApp *GitHubApp `yaml:"githubApp"`
	}
	rawAuthor struct {
		Name  string `yaml:"name"`
		Email string `yaml:"email"`
	}
)

type parser struct {
	d       *yamlconf.Doc
	baseDir string
	lookup  func(string) (string, bool)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(p.baseDir, s)
}

// secret resolves "env:NAME" or "file:PATH". The value is never echoed in an error.
func (p *parser) secret(ref, field string) Secret {
	if ref == "" {
		return Secret{}
	}
	s, err := ResolveSecretRef(strings.TrimSpace(ref), p.baseDir, p.lookup)
	if err != nil {
		p.d.Errorf(field, "%v", err)
		return Secret{}
	}
	return s
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

func (p *parser) connector(r rawConnector, path string) (Config, bool) {
	d := p.d
	before := d.Count()
	c := Config{Source: fmt.Sprintf("%s:%d", d.File, d.Near(path).Line), Name: r.Name, Provider: r.Provider, BaseURL: r.BaseURL,
		InsecureSkipVerify: r.InsecureSkipVerify, RateLimit: r.RateLimit}
	switch {
	case c.Name == "" && d.Bad(path+".name"):
	case c.Name == "":
		d.Errorf(path+".name", "required")
	case !nameRe.MatchString(c.Name):
		d.Errorf(path+".name", "%q: use lower-case letters, digits, '.', '_' and '-' (at most 63)", c.Name)
	}
	switch {
	case c.Provider == "" && d.Bad(path+".provider"):
	case c.Provider == "":
		d.Errorf(path+".provider", "required (one of %s)", strings.Join(knownProviders, ", "))
	case !contains(knownProviders, c.Provider):
		d.Errorf(path+".provider", "unknown provider %q (one of %s)", c.Provider, strings.Join(knownProviders, ", "))
	}
	p.checkBaseURL(path+".baseURL", c)

	if a := r.Auth; a != nil {
		c.Auth.Username = a.Username
		c.Auth.Token = p.secret(a.Token, path+".auth.token")
		if a.GitHubApp != nil {
			c.Auth.GitHubApp = p.githubApp(a.GitHubApp, path+".auth.githubApp")
			if c.Provider != "" && c.Provider != "github" {
				d.Errorf(path+".auth.githubApp", "only for provider github")
			}
			if d.Has(path + ".auth.token") {
				d.Errorf(path+".auth.githubApp", "set either token or githubApp, not both")
			}
		}
	}
	if c.Provider != "" && c.Provider != "local" && c.Auth.Token.IsZero() && c.Auth.GitHubApp == nil && d.Count() == before {
		d.ErrorAt(d.Node(path), path+".auth", "provider %s needs auth.token (or auth.githubApp for github)", c.Provider)
	}
	if c.CAFile = p.path(r.CAFile); c.CAFile != "" {
		data, err := os.ReadFile(c.CAFile)
		switch {
		case err != nil:
			d.Errorf(path+".caFile", "read %s: %v", c.CAFile, cause(err))
		case !x509.NewCertPool().AppendCertsFromPEM(data):
			d.Errorf(path+".caFile", "%s holds no PEM certificate", c.CAFile)
		default:
			c.CA = data
		}
	}
	if a := r.Author; a != nil {
		c.Author = scm.Signature{Name: a.Name, Email: a.Email}
		if c.Author.Name == "" || c.Author.Email == "" {
			d.Errorf(path+".author", "needs both name and email")
		} else if !strings.Contains(c.Author.Email, "@") || strings.ContainsAny(c.Author.Email, "<> \n") {
			d.Errorf(path+".author.email", "%q is not an email address", c.Author.Email)
		}
	}
	if c.RateLimit.RPS < 0 {
		d.Errorf(path+".rateLimit.rps", "must not be negative")
	}
	if c.RateLimit.Burst < 0 {
		d.Errorf(path+".rateLimit.burst", "must not be negative")
	}
	return c, d.Count() == before
}

func (p *parser) checkBaseURL(field string, c Config) {
	d := p.d
	if c.BaseURL == "" {
		if c.Provider == "local" {
			d.Errorf(field, "required for provider local (a git remote URL or directory)")
		}
		return
	}
	if c.Provider == "local" && (filepath.IsAbs(c.BaseURL) || !strings.Contains(c.BaseURL, "://")) {
		return // a directory of bare repositories
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		d.Errorf(field, "not a URL: %v", err)
	case u.User != nil:
		d.Errorf(field, "must not contain credentials; use auth.token")
	case c.Provider == "local" && (u.Scheme == "file" || u.Scheme == "ssh" || u.Scheme == "http" || u.Scheme == "https"):
	case u.Scheme != "http" && u.Scheme != "https":
		d.Errorf(field, "want an http(s) URL, got scheme %q", u.Scheme)
	case u.Host == "":
		d.Errorf(field, "URL has no host")
	}
}

func (p *parser) githubApp(g *GitHubApp, path string) *GitHubApp {
	d := p.d
	g.PrivateKeyFile = p.path(g.PrivateKeyFile)
	for _, f := range []struct {
		name string
		v    int64
	}{{"appID", g.AppID}, {"installationID", g.InstallationID}} {
		switch field := path + "." + f.name; {
		case f.v < 0:
			d.Errorf(field, "must not be negative")
		case f.v == 0 && !d.Bad(field):
			d.ErrorAt(d.Node(path), field, "required")
		}
	}
	if g.PrivateKeyFile == "" {
		d.ErrorAt(d.Node(path), path+".privateKeyFile", "required")
		return g
	}
	data, err := os.ReadFile(g.PrivateKeyFile)
	if err != nil {
		d.Errorf(path+".privateKeyFile", "read %s: %v", g.PrivateKeyFile, cause(err))
		return g
	}
	if !strings.Contains(string(data), "PRIVATE KEY-----") {
		d.Errorf(path+".privateKeyFile", "%s is not a PEM private key", g.PrivateKeyFile)
		return g
	}
	g.PrivateKey = NewSecret(string(data))
	return g
}

// parse reads the document into configs, collecting every error.
func (p *parser) parse(file string, data []byte) ([]Config, error) {
	d, err := yamlconf.Parse(file, data)
	if err != nil {
		return nil, err
	}
	p.d = d
	if d.Root == nil {
		return nil, yamlconf.Errors{{File: file, Msg: "empty file: want a connectors list"}}
	}
	var f connectorsFile
	if d.Root.Kind == yaml.SequenceNode { // a bare list
		d.Decode(d.Root, "connectors", &f.Connectors)
	} else {
		d.Decode(d.Root, "", &f)
		if !d.Has("connectors") && !d.Failed() {
			d.Errorf("connectors", "required")
		}
	}
	var out []Config
	seen := map[string]int{}
	for i, r := range f.Connectors {
		path := yamlconf.Index("connectors", i)
		if d.Bad(path) {
			continue // not a mapping: nothing more to say about it
		}
		c, ok := p.connector(r, path)
		if !ok {
			continue
		}
		item := d.Node(path)
		if line, dup := seen[c.Name]; dup {
			d.ErrorAt(item, path+".name", "connector %q is already defined at line %d", c.Name, line)
			continue
		}
		seen[c.Name] = item.Line
		out = append(out, c)
	}
	return out, d.Err()
}

// cause drops the *PathError wrapper (whose message repeats the path) when there is one.
func cause(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
