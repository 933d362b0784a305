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
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/transport"
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
	AppID          int64
	InstallationID int64
	PrivateKeyFile string
	PrivateKey     Secret // PEM read from PrivateKeyFile
}

// RateLimit is the client-side token bucket (0 rps = none).
type RateLimit struct {
	RPS   float64
	Burst int
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

// LoadError points at the place in the file that is wrong.
type LoadError struct {
	File   string
	Line   int
	Column int
	Field  string // e.g. connectors[1].auth.token
	Msg    string
}

func (e *LoadError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += fmt.Sprintf(":%d:%d", e.Line, e.Column)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
	}
	return loc + ": " + e.Msg
}

type parser struct {
	file    string
	baseDir string
	lookup  func(string) (string, bool)
	errs    []error
}

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) {
	e := &LoadError{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

// fields walks a mapping node, reporting unknown and duplicate keys.
func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.errf(n, path, "want a mapping, got %s", NodeKind(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		if !contains(known, k.Value) {
			hint := ""
			for _, kn := range known {
				if strings.EqualFold(kn, k.Value) {
					hint = fmt.Sprintf(" (did you mean %q?)", kn)
				}
			}
			p.errf(k, field, "unknown field%s; known fields: %s", hint, strings.Join(known, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.errf(k, field, "set twice")
			continue
		}
		out[k.Value] = v
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// NodeKind names what a YAML node is, for "want X, got Y" errors of the YAML files that use
// this package's secret references (connectors, tokens, notifiers).
func NodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func (p *parser) str(n *yaml.Node, field string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!null" && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool") {
		p.errf(n, field, "want a string, got %s", NodeKind(n))
		return ""
	}
	if n.Tag == "!!null" {
		return ""
	}
	return strings.TrimSpace(n.Value)
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	if n == nil {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errf(n, field, "want true or false, got %s", NodeKind(n))
	}
	return b
}

func (p *parser) number(n *yaml.Node, field string) float64 {
	return nonNegative(p, n, field, "a number", func(v string) (float64, error) { return strconv.ParseFloat(v, 64) })
}

func (p *parser) integer(n *yaml.Node, field string) int64 {
	return nonNegative(p, n, field, "a whole number", func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) })
}

// nonNegative reads a scalar that parse takes and that is not below zero; anything else is
// reported at n as not being what (a number, a whole number) and reads as 0.
func nonNegative[T int64 | float64](p *parser, n *yaml.Node, field, what string, parse func(string) (T, error)) T {
	if n == nil {
		return 0
	}
	v, err := parse(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		p.errf(n, field, "want %s, got %s", what, NodeKind(n))
		return 0
	}
	if v < 0 {
		p.errf(n, field, "must not be negative")
		return 0
	}
	return v
}

func (p *parser) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(p.baseDir, s)
}

// secret resolves "env:NAME" or "file:PATH". The value is never echoed in an error.
func (p *parser) secret(n *yaml.Node, field string) Secret {
	ref := p.str(n, field)
	if ref == "" {
		return Secret{}
	}
	s, err := ResolveSecretRef(ref, p.baseDir, p.lookup)
	if err != nil {
		p.errf(n, field, "%v", err)
		return Secret{}
	}
	return s
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

func (p *parser) connector(n *yaml.Node, idx int) (Config, bool) {
	path := fmt.Sprintf("connectors[%d]", idx)
	f := p.fields(n, path, "name", "provider", "baseURL", "auth", "caFile", "insecureSkipVerify", "author", "rateLimit")
	before := len(p.errs)
	c := Config{Source: fmt.Sprintf("%s:%d", p.file, n.Line)}
	c.Name = p.str(f["name"], path+".name")
	switch {
	case f["name"] == nil || c.Name == "":
		p.errf(n, path+".name", "required")
	case !nameRe.MatchString(c.Name):
		p.errf(f["name"], path+".name", "%q: use lower-case letters, digits, '.', '_' and '-' (at most 63)", c.Name)
	}
	c.Provider = p.str(f["provider"], path+".provider")
	if c.Provider == "" {
		p.errf(n, path+".provider", "required (one of %s)", strings.Join(knownProviders, ", "))
	} else if !contains(knownProviders, c.Provider) {
		p.errf(f["provider"], path+".provider", "unknown provider %q (one of %s)", c.Provider, strings.Join(knownProviders, ", "))
	}
	c.BaseURL = p.str(f["baseURL"], path+".baseURL")
	p.checkBaseURL(f["baseURL"], path+".baseURL", c)

	if a := f["auth"]; a != nil {
		af := p.fields(a, path+".auth", "token", "username", "githubApp")
		c.Auth.Username = p.str(af["username"], path+".auth.username")
		c.Auth.Token = p.secret(af["token"], path+".auth.token")
		if g := af["githubApp"]; g != nil {
			c.Auth.GitHubApp = p.githubApp(g, path+".auth.githubApp")
			if c.Provider != "" && c.Provider != "github" {
				p.errf(g, path+".auth.githubApp", "only for provider github")
			}
			if af["token"] != nil {
				p.errf(g, path+".auth.githubApp", "set either token or githubApp, not both")
			}
		}
	}
	if c.Provider != "" && c.Provider != "local" && c.Auth.Token.IsZero() && c.Auth.GitHubApp == nil && len(p.errs) == before {
		p.errf(n, path+".auth", "provider %s needs auth.token (or auth.githubApp for github)", c.Provider)
	}
	if ca := f["caFile"]; ca != nil {
		c.CAFile = p.path(p.str(ca, path+".caFile"))
		if c.CAFile != "" {
			data, err := os.ReadFile(c.CAFile)
			switch {
			case err != nil:
				p.errf(ca, path+".caFile", "read %s: %v", c.CAFile, cause(err))
			case !x509.NewCertPool().AppendCertsFromPEM(data):
				p.errf(ca, path+".caFile", "%s holds no PEM certificate", c.CAFile)
			default:
				c.CA = data
			}
		}
	}
	c.InsecureSkipVerify = p.boolean(f["insecureSkipVerify"], path+".insecureSkipVerify")
	if a := f["author"]; a != nil {
		af := p.fields(a, path+".author", "name", "email")
		c.Author = scm.Signature{Name: p.str(af["name"], path+".author.name"), Email: p.str(af["email"], path+".author.email")}
		if c.Author.Name == "" || c.Author.Email == "" {
			p.errf(a, path+".author", "needs both name and email")
		} else if !strings.Contains(c.Author.Email, "@") || strings.ContainsAny(c.Author.Email, "<> \n") {
			p.errf(af["email"], path+".author.email", "%q is not an email address", c.Author.Email)
		}
	}
	if r := f["rateLimit"]; r != nil {
		rf := p.fields(r, path+".rateLimit", "rps", "burst")
		c.RateLimit.RPS = p.number(rf["rps"], path+".rateLimit.rps")
		c.RateLimit.Burst = int(p.integer(rf["burst"], path+".rateLimit.burst"))
	}
	return c, len(p.errs) == before
}

func (p *parser) checkBaseURL(n *yaml.Node, field string, c Config) {
	if c.BaseURL == "" {
		if c.Provider == "local" {
			p.errf(n, field, "required for provider local (a git remote URL or directory)")
		}
		return
	}
	if c.Provider == "local" && (filepath.IsAbs(c.BaseURL) || !strings.Contains(c.BaseURL, "://")) {
		return // a directory of bare repositories
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		p.errf(n, field, "not a URL: %v", err)
	case u.User != nil:
		p.errf(n, field, "must not contain credentials; use auth.token")
	case c.Provider == "local" && (u.Scheme == "file" || u.Scheme == "ssh" || u.Scheme == "http" || u.Scheme == "https"):
	case u.Scheme != "http" && u.Scheme != "https":
		p.errf(n, field, "want an http(s) URL, got scheme %q", u.Scheme)
	case u.Host == "":
		p.errf(n, field, "URL has no host")
	}
}

func (p *parser) githubApp(n *yaml.Node, path string) *GitHubApp {
	f := p.fields(n, path, "appID", "installationID", "privateKeyFile")
	g := &GitHubApp{
		AppID:          p.integer(f["appID"], path+".appID"),
		InstallationID: p.integer(f["installationID"], path+".installationID"),
		PrivateKeyFile: p.path(p.str(f["privateKeyFile"], path+".privateKeyFile")),
	}
	if g.AppID == 0 {
		p.errf(n, path+".appID", "required")
	}
	if g.InstallationID == 0 {
		p.errf(n, path+".installationID", "required")
	}
	if g.PrivateKeyFile == "" {
		p.errf(n, path+".privateKeyFile", "required")
		return g
	}
	data, err := os.ReadFile(g.PrivateKeyFile)
	if err != nil {
		p.errf(f["privateKeyFile"], path+".privateKeyFile", "read %s: %v", g.PrivateKeyFile, cause(err))
		return g
	}
	if !strings.Contains(string(data), "PRIVATE KEY-----") {
		p.errf(f["privateKeyFile"], path+".privateKeyFile", "%s is not a PEM private key", g.PrivateKeyFile)
		return g
	}
	g.PrivateKey = NewSecret(string(data))
	return g
}

// parse reads the document into configs, collecting every error.
func (p *parser) parse(data []byte) []Config {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errs = append(p.errs, &LoadError{File: p.file, Msg: "invalid YAML: " + err.Error()})
		return nil
	}
	if len(doc.Content) == 0 {
		p.errs = append(p.errs, &LoadError{File: p.file, Msg: "empty file: want a connectors list"})
		return nil
	}
	root := doc.Content[0]
	list := root
	if root.Kind == yaml.MappingNode {
		f := p.fields(root, "", "connectors")
		if list = f["connectors"]; list == nil {
			if len(p.errs) == 0 {
				p.errf(root, "connectors", "required")
			}
			return nil
		}
	}
	if list.Kind != yaml.SequenceNode {
		p.errf(list, "connectors", "want a list, got %s", NodeKind(list))
		return nil
	}
	var out []Config
	seen := map[string]int{}
	for i, item := range list.Content {
		c, ok := p.connector(item, i)
		if !ok {
			continue
		}
		if line, dup := seen[c.Name]; dup {
			p.errf(item, fmt.Sprintf("connectors[%d].name", i), "connector %q is already defined at line %d", c.Name, line)
			continue
		}
		seen[c.Name] = item.Line
		out = append(out, c)
	}
	return out
}

// cause drops the *PathError wrapper (whose message repeats the path) when there is one.
func cause(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
