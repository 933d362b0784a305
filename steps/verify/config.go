package verify

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/transport"
	"github.com/prflow/prflow/steps/duration"
)

// The metrics connectors file (`prflow worker --metrics FILE`) names the metrics backends a
// worker can query. Pipelines name a connector; its credentials stay on the worker, resolved
// from env: or file: references like forge tokens, and never reach a job, a log or an error.
//
//	metrics:
//	  - name: prom
//	    provider: prometheus
//	    baseURL: https://prometheus.example.com
//	    auth: {token: env:PROM_TOKEN}              # bearer; or {username: u, password: env:PROM_PASSWORD}
//	    timeout: 30s                              # per query (default 30s)
//	  - name: dd
//	    provider: datadog
//	    site: datadoghq.eu                        # API at https://api.<site> (default datadoghq.com)
//	    auth: {apiKey: env:DD_API_KEY, appKey: env:DD_APP_KEY}

// DefaultTimeout bounds one query unless the connector says otherwise.
const DefaultTimeout = 30 * time.Second

// Config is one metrics connector with its secrets resolved.
type Config struct {
	Name     string
	Provider string
	BaseURL  string // API root; for datadog derived from Site unless set
	Site     string // datadog only
	Token    connector.Secret
	Username string
	Password connector.Secret
	APIKey   connector.Secret // datadog DD-API-KEY
	AppKey   connector.Secret // datadog DD-APPLICATION-KEY
	CA       []byte
	Insecure bool
	Timeout  time.Duration
	Source   string // file:line, for messages
}

// Secrets lists the credential values, for masking.
func (c Config) Secrets() []string {
	var out []string
	for _, s := range []connector.Secret{c.Token, c.Password, c.APIKey, c.AppKey} {
		if !s.IsZero() {
			out = append(out, s.Value())
		}
	}
	return out
}

// HTTPClient is a plain client with the connector's TLS settings and timeout. It does not
// retry: the step decides when to ask again, parked, holding no worker.
func (c Config) HTTPClient() (*http.Client, error) {
	ht := http.DefaultTransport.(*http.Transport).Clone()
	if len(c.CA) > 0 || c.Insecure {
		tc, err := transport.TLSConfig(c.CA, c.Insecure)
		if err != nil {
			return nil, err
		}
		ht.TLSClientConfig = tc
	}
	t := c.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return &http.Client{Transport: ht, Timeout: t}, nil
}

// Set is a loaded metrics connectors file; safe for concurrent use.
type Set struct {
	source  string
	configs []Config
	mu      sync.Mutex
	built   map[string]Provider
}

// Static serves fixed providers by connector name (tests, the dev sandbox).
type Static map[string]Provider

// Names lists the connector names, sorted.
func (s Static) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Provider returns the provider of connector name.
func (s Static) Provider(_ context.Context, name string) (Provider, error) {
	if p, ok := s[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("no metrics connector %q (have: %v)", name, s.Names())
}

// Names lists the connectors in file order.
func (s *Set) Names() []string {
	out := make([]string, len(s.configs))
	for i, c := range s.configs {
		out[i] = c.Name
	}
	return out
}

// Secrets lists every credential value of the file, for masking logs and step output.
func (s *Set) Secrets() []string {
	var out []string
	for _, c := range s.configs {
		out = append(out, c.Secrets()...)
	}
	return out
}

// Provider returns connector name's backend, building it on first use.
func (s *Set) Provider(ctx context.Context, name string) (Provider, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(s.configs, func(c Config) bool { return c.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("metrics connector %q: not defined in %s (have: %v)", name, s.source, s.Names())
	}
	c := s.configs[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.built[name]; ok {
		return p, nil
	}
	f, ok := lookup(c.Provider)
	if !ok {
		return nil, fmt.Errorf("metrics connector %q (%s): provider %q is not available in this binary (have %v)", name, c.Source, c.Provider, Registered())
	}
	p, err := f(c)
	if err != nil {
		return nil, fmt.Errorf("metrics connector %q (%s): %w", name, c.Source, err)
	}
	s.built[name] = p
	return p, nil
}

// Load reads and checks a metrics connectors file. Every problem is reported, each naming
// file:line:column and the field (a *connector.LoadError), joined with errors.Join.
func Load(path string, lookupEnv func(string) (string, bool)) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("metrics connectors file: %w", err)
	}
	return Parse(data, path, filepath.Dir(path), lookupEnv)
}

// Parse is Load for data already read; relative file: paths resolve against baseDir.
func Parse(data []byte, source, baseDir string, lookupEnv func(string) (string, bool)) (*Set, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	p := &parser{file: source, baseDir: baseDir, lookup: lookupEnv}
	configs := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return &Set{source: source, configs: configs, built: map[string]Provider{}}, nil
}

// Providers this package knows how to configure (each needs its package linked in).
var knownProviders = []string{"prometheus", "datadog"}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

var siteRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$`)

type parser struct {
	file    string
	baseDir string
	lookup  func(string) (string, bool)
	errs    []error
}

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) {
	e := &connector.LoadError{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.errf(n, path, "want a mapping, got %s", connector.NodeKind(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := strings.TrimPrefix(path+"."+k.Value, ".")
		switch {
		case !slices.Contains(known, k.Value):
			hint := ""
			if i := slices.IndexFunc(known, func(kn string) bool { return strings.EqualFold(kn, k.Value) }); i >= 0 {
				hint = fmt.Sprintf(" (did you mean %q?)", known[i])
			}
			p.errf(k, field, "unknown field%s; known fields: %s", hint, strings.Join(known, ", "))
		case out[k.Value] != nil:
			p.errf(k, field, "set twice")
		default:
			out[k.Value] = v
		}
	}
	return out
}

func (p *parser) str(n *yaml.Node, field string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!binary" {
		p.errf(n, field, "want a string, got %s", connector.NodeKind(n))
		return ""
	}
	if n.Tag == "!!null" {
		return ""
	}
	return strings.TrimSpace(n.Value)
}

func (p *parser) secret(n *yaml.Node, field string) connector.Secret {
	ref := p.str(n, field)
	if ref == "" {
		return connector.Secret{}
	}
	s, err := connector.ResolveSecretRef(ref, p.baseDir, p.lookup)
	if err != nil {
		p.errf(n, field, "%v", err)
	}
	return s
}

func (p *parser) parse(data []byte) []Config {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errs = append(p.errs, &connector.LoadError{File: p.file, Msg: "invalid YAML: " + err.Error()})
		return nil
	}
	if len(doc.Content) == 0 {
		p.errs = append(p.errs, &connector.LoadError{File: p.file, Msg: "empty file: want metrics: [{name, provider, …}]"})
		return nil
	}
	root := doc.Content[0]
	list := p.fields(root, "", "metrics")["metrics"]
	if list == nil {
		if len(p.errs) == 0 {
			p.errf(root, "metrics", "required")
		}
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		p.errf(list, "metrics", "want a list, got %s", connector.NodeKind(list))
		return nil
	}
	var out []Config
	seen := map[string]int{}
	for i, item := range list.Content {
		c, ok := p.connector(item, fmt.Sprintf("metrics[%d]", i))
		if !ok {
			continue
		}
		if line, dup := seen[c.Name]; dup {
			p.errf(item, fmt.Sprintf("metrics[%d].name", i), "connector %q is already defined at line %d", c.Name, line)
			continue
		}
		seen[c.Name] = item.Line
		out = append(out, c)
	}
	return out
}

func (p *parser) connector(n *yaml.Node, path string) (Config, bool) {
	before := len(p.errs)
	f := p.fields(n, path, "name", "provider", "baseURL", "site", "auth", "caFile", "insecureSkipVerify", "timeout")
	c := Config{Source: fmt.Sprintf("%s:%d", p.file, n.Line)}
	c.Name = p.str(f["name"], path+".name")
	switch {
	case c.Name == "":
		p.errf(n, path+".name", "required")
	case !nameRe.MatchString(c.Name):
		p.errf(f["name"], path+".name", "%q: use lower-case letters, digits, '.', '_' and '-' (at most 63)", c.Name)
	}
	c.Provider = p.str(f["provider"], path+".provider")
	switch {
	case c.Provider == "":
		p.errf(n, path+".provider", "required (one of %s)", strings.Join(knownProviders, ", "))
	case !slices.Contains(knownProviders, c.Provider):
		p.errf(f["provider"], path+".provider", "unknown provider %q (one of %s)", c.Provider, strings.Join(knownProviders, ", "))
	}
	c.BaseURL = strings.TrimRight(p.str(f["baseURL"], path+".baseURL"), "/")
	c.Site = p.str(f["site"], path+".site")
	if c.Site != "" {
		switch {
		case c.Provider != "datadog":
			p.errf(f["site"], path+".site", "only for provider datadog")
		case !siteRe.MatchString(c.Site):
			p.errf(f["site"], path+".site", "%q is not a Datadog site such as datadoghq.com or datadoghq.eu", c.Site)
		case c.BaseURL != "":
			p.errf(f["site"], path+".site", "set either site or baseURL, not both")
		}
	}
	if c.Provider == "datadog" && c.BaseURL == "" {
		site := c.Site
		if site == "" {
			site = "datadoghq.com"
		}
		c.BaseURL = "https://api." + site
	}
	if c.BaseURL == "" && c.Provider == "prometheus" {
		p.errf(n, path+".baseURL", "required (the Prometheus server, e.g. http://prometheus:9090)")
	} else if f["baseURL"] != nil {
		u, err := url.Parse(c.BaseURL)
		switch {
		case err != nil:
			p.errf(f["baseURL"], path+".baseURL", "not a URL: %v", err)
		case u.User != nil:
			p.errf(f["baseURL"], path+".baseURL", "must not contain credentials; use auth")
		case u.Scheme != "http" && u.Scheme != "https":
			p.errf(f["baseURL"], path+".baseURL", "want an http(s) URL, got scheme %q", u.Scheme)
		case u.Host == "":
			p.errf(f["baseURL"], path+".baseURL", "URL has no host")
		case u.RawQuery != "" || u.Fragment != "":
			p.errf(f["baseURL"], path+".baseURL", "must not have a query or fragment")
		}
	}
	if a := f["auth"]; a != nil {
		ap := path + ".auth"
		af := p.fields(a, ap, "token", "username", "password", "apiKey", "appKey")
		c.Token = p.secret(af["token"], ap+".token")
		c.Username = p.str(af["username"], ap+".username")
		c.Password = p.secret(af["password"], ap+".password")
		c.APIKey = p.secret(af["apiKey"], ap+".apiKey")
		c.AppKey = p.secret(af["appKey"], ap+".appKey")
		switch c.Provider {
		case "prometheus":
			for _, k := range []string{"apiKey", "appKey"} {
				if af[k] != nil {
					p.errf(af[k], ap+"."+k, "only for provider datadog; prometheus takes token, or username and password")
				}
			}
			if af["token"] != nil && (af["username"] != nil || af["password"] != nil) {
				p.errf(a, ap, "set either token (bearer) or username and password (basic), not both")
			}
			if (af["username"] != nil) != (af["password"] != nil) {
				p.errf(a, ap, "basic auth needs both username and password")
			}
		case "datadog":
			for _, k := range []string{"token", "username", "password"} {
				if af[k] != nil {
					p.errf(af[k], ap+"."+k, "not for provider datadog; it takes apiKey and appKey")
				}
			}
		}
	}
	if c.Provider == "datadog" && len(p.errs) == before && (c.APIKey.IsZero() || c.AppKey.IsZero()) {
		p.errf(n, path+".auth", "provider datadog needs auth.apiKey and auth.appKey")
	}
	if ca := f["caFile"]; ca != nil {
		file := p.str(ca, path+".caFile")
		if file != "" && !filepath.IsAbs(file) {
			file = filepath.Join(p.baseDir, file)
		}
		data, err := os.ReadFile(file)
		switch {
		case err != nil:
			p.errf(ca, path+".caFile", "read %s: %v", file, err)
		case !x509.NewCertPool().AppendCertsFromPEM(data):
			p.errf(ca, path+".caFile", "%s holds no PEM certificate", file)
		default:
			c.CA = data
		}
	}
	if b := f["insecureSkipVerify"]; b != nil {
		if b.Kind != yaml.ScalarNode || b.Decode(&c.Insecure) != nil {
			p.errf(b, path+".insecureSkipVerify", "want true or false, got %s", connector.NodeKind(b))
		}
	}
	if t := f["timeout"]; t != nil {
		d, err := duration.Parse(p.str(t, path+".timeout"))
		switch {
		case err != nil:
			p.errf(t, path+".timeout", "%v", err)
		case d <= 0:
			p.errf(t, path+".timeout", "must be above zero")
		default:
			c.Timeout = d
		}
	}
	return c, len(p.errs) == before
}
