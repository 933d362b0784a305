// Package notify holds a worker's notification channels: the `--notifiers` file, and one
// sender per channel type (slack.go, webhook.go, email.go). Pipelines name channels; the URLs,
// HMAC keys and SMTP passwords stay here, on the worker, resolved from env: or file:
// references like connector tokens.
//
//	channels:
//	  - name: team-slack
//	    type: slack
//	    url: env:SLACK_WEBHOOK_URL     # the incoming webhook URL is a secret
//	  - name: audit
//	    type: webhook
//	    url: file:/run/secrets/hook-url
//	    secret: env:HOOK_HMAC_KEY      # X-Prflow-Signature: sha256=<hex HMAC of the body>
//	  - name: release-mail
//	    type: email
//	    smtp: {address: smtp.example.com:587, starttls: true, username: prflow, password: env:SMTP_PASSWORD}
//	    from: prflow@example.com
//	    to: [releases@example.com]
//	    attempts: 5                    # deliveries before giving up (default 4)
//	    timeout: 10s                   # per delivery (default 10s)
package notify

import (
	"bytes"
	"context"
	"fmt"
	"github.com/prflow/prflow/steps/spelling"
	"net"
	"net/http"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// Types are the channel types.
var Types = []string{"slack", "webhook", "email"}

// DefaultAttempts is how many deliveries a notification gets unless the channel says.
const DefaultAttempts = 4

// DefaultTimeout bounds one delivery unless the channel says.
const DefaultTimeout = 10 * time.Second

// sender delivers one notification; its errors name no secret.
type sender interface {
	send(ctx context.Context, n steps.Notification) error
	secrets() []string
}

type channel struct {
	name, typ string
	attempts  int
	timeout   time.Duration
	s         sender
}

// Set is a worker's channels (steps.Notifier).
type Set struct {
	byName map[string]*channel
	names  []string
}

// Option configures Load and Parse.
type Option func(*options)

type options struct {
	client *http.Client
	lookup func(string) (string, bool)
}

// WithHTTPClient sets the client of slack and webhook channels (default: one with the
// channel's timeout).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.client = c } }

// WithLookup sets how env: references are read (default os.LookupEnv).
func WithLookup(fn func(string) (string, bool)) Option { return func(o *options) { o.lookup = fn } }

// Load reads a notifiers file.
func Load(path string, opts ...Option) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("notifiers file: %w", err)
	}
	return Parse(path, data, filepath.Dir(path), opts...)
}

// Parse reads a notifiers file's content; file: references are relative to baseDir. Every
// problem is reported with its line, none with a secret's value.
func Parse(file string, data []byte, baseDir string, opts ...Option) (*Set, error) {
	o := &options{}
	for _, fn := range opts {
		fn(o)
	}
	p := &parser{file: file, baseDir: baseDir, o: o}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: YAML: %w", file, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty file", file)
	}
	root := doc.Content[0]
	list := root
	if root.Kind == yaml.MappingNode {
		f := p.fields(root, "", "channels")
		list = f["channels"]
		if list == nil {
			p.errf(root, "channels", "required: a list of channels")
			return nil, p.result()
		}
	}
	if list.Kind != yaml.SequenceNode {
		p.errf(list, "channels", "want a list of channels, got %s", connector.NodeKind(list))
		return nil, p.result()
	}
	s := &Set{byName: map[string]*channel{}}
	for i, n := range list.Content {
		path := fmt.Sprintf("channels[%d]", i)
		c := p.channel(n, path)
		if c == nil {
			continue
		}
		if _, dup := s.byName[c.name]; dup {
			p.errf(n, path+".name", "channel %q is defined twice", c.name)
			continue
		}
		s.byName[c.name] = c
		s.names = append(s.names, c.name)
	}
	if err := p.result(); err != nil {
		return nil, err
	}
	sort.Strings(s.names)
	return s, nil
}

// Channels lists the channel names (sorted).
func (s *Set) Channels() []string { return slices.Clone(s.names) }

// Attempts is how many deliveries a notification to channel gets.
func (s *Set) Attempts(channel string) int {
	if c := s.byName[channel]; c != nil {
		return c.attempts
	}
	return 1
}

// Send delivers n through channel, within the channel's timeout.
func (s *Set) Send(ctx context.Context, channel string, n steps.Notification) error {
	c := s.byName[channel]
	if c == nil {
		return steps.Terminalf("no channel %q on this worker (channels: %s)", channel, strings.Join(s.names, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.s.send(ctx, n); err != nil {
		return fmt.Errorf("%s: %w", c.typ, err)
	}
	return nil
}

// Secrets are the channels' URLs, keys and passwords, for the worker's log masking.
func (s *Set) Secrets() []string {
	var out []string
	for _, name := range s.names {
		out = append(out, s.byName[name].s.secrets()...)
	}
	return out
}

type parser struct {
	file, baseDir string
	o             *options
	errs          []string
}

func (p *parser) errf(n *yaml.Node, field, format string, a ...any) {
	e := &connector.LoadError{File: p.file, Field: field, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e.Error())
}

func (p *parser) result() error {
	if len(p.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(p.errs, "\n"))
}

func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.errf(n, path, "want a mapping, got %s", connector.NodeKind(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		if !slices.Contains(known, k.Value) {
			hint := ""
			for _, kn := range known {
				if spelling.Distance(strings.ToLower(kn), strings.ToLower(k.Value)) <= 2 {
					hint = fmt.Sprintf(" (did you mean %q?)", kn)
					break
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

func (p *parser) str(n *yaml.Node, field string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errf(n, field, "want a string, got %s", connector.NodeKind(n))
		return ""
	}
	return n.Value
}

// secret resolves a required secret reference (env:, file:); never a plain value.
func (p *parser) secret(n *yaml.Node, parent *yaml.Node, field string) connector.Secret {
	if n == nil {
		p.errf(parent, field, "required (%s)", connector.SecretRefHelp)
		return connector.Secret{}
	}
	ref := p.str(n, field)
	if ref == "" {
		return connector.Secret{}
	}
	s, err := connector.ResolveSecretRef(ref, p.baseDir, p.o.lookup)
	if err != nil {
		p.errf(n, field, "%v", err)
	}
	return s
}

func (p *parser) channel(n *yaml.Node, path string) *channel {
	f := p.fields(n, path, "name", "type", "url", "secret", "smtp", "from", "to", "subject", "attempts", "timeout")
	if n.Kind != yaml.MappingNode {
		return nil
	}
	c := &channel{name: p.str(f["name"], path+".name"), typ: p.str(f["type"], path+".type"), attempts: DefaultAttempts, timeout: DefaultTimeout}
	switch {
	case f["name"] == nil:
		p.errf(n, path+".name", "required")
	case !idRE(c.name):
		p.errf(f["name"], path+".name", "%q: use letters, digits, - and _ (start with a letter, ≤ 63 chars)", c.name)
	}
	if v := f["attempts"]; v != nil {
		k, err := strconv.Atoi(v.Value)
		if err != nil || k < 1 || k > 20 {
			p.errf(v, path+".attempts", "want a whole number from 1 to 20, got %q", v.Value)
		} else {
			c.attempts = k
		}
	}
	if v := f["timeout"]; v != nil {
		d, err := time.ParseDuration(v.Value)
		if err != nil || d <= 0 {
			p.errf(v, path+".timeout", "want a duration such as 10s, got %q", v.Value)
		} else {
			c.timeout = d
		}
	}
	allowed := map[string][]string{
		"slack":   {"url"},
		"webhook": {"url", "secret"},
		"email":   {"smtp", "from", "to", "subject"},
	}
	if f["type"] == nil {
		p.errf(n, path+".type", "required: one of %s", strings.Join(Types, ", "))
		return nil
	}
	keys, ok := allowed[c.typ]
	if !ok {
		p.errf(f["type"], path+".type", "unknown channel type %q; want one of %s", c.typ, strings.Join(Types, ", "))
		return nil
	}
	for _, k := range []string{"url", "secret", "smtp", "from", "to", "subject"} {
		if f[k] != nil && !slices.Contains(keys, k) {
			p.errf(f[k], path+"."+k, "not a field of a %s channel (its fields: %s)", c.typ, strings.Join(keys, ", "))
		}
	}
	before := len(p.errs)
	switch c.typ {
	case "slack":
		c.s = &slack{url: p.secret(f["url"], n, path+".url"), client: p.client(c.timeout)}
	case "webhook":
		c.s = &webhook{url: p.secret(f["url"], n, path+".url"), key: p.secret(f["secret"], n, path+".secret"), client: p.client(c.timeout)}
	case "email":
		c.s = p.email(f, n, path)
	}
	if len(p.errs) > before || c.s == nil {
		return nil
	}
	return c
}

func (p *parser) client(timeout time.Duration) *http.Client {
	if p.o.client != nil {
		return p.o.client
	}
	return &http.Client{Timeout: timeout}
}

func (p *parser) email(f map[string]*yaml.Node, n *yaml.Node, path string) *email {
	e := &email{}
	sm := f["smtp"]
	if sm == nil {
		p.errf(n, path+".smtp", "required: {address: host:port, starttls: true, username: …, password: env:…}")
		return nil
	}
	sf := p.fields(sm, path+".smtp", "address", "starttls", "username", "password")
	e.addr = p.str(sf["address"], path+".smtp.address")
	if sf["address"] == nil {
		p.errf(sm, path+".smtp.address", "required: host:port")
	} else if host, port, err := net.SplitHostPort(e.addr); err != nil || host == "" || port == "" {
		p.errf(sf["address"], path+".smtp.address", "want host:port, got %q", e.addr)
	} else {
		e.host = host
	}
	e.starttls = true
	if v := sf["starttls"]; v != nil {
		if err := v.Decode(&e.starttls); err != nil || v.Kind != yaml.ScalarNode {
			p.errf(v, path+".smtp.starttls", "want true or false, got %q", v.Value)
		}
	}
	e.user = p.str(sf["username"], path+".smtp.username")
	if e.user != "" || sf["password"] != nil {
		e.pass = p.secret(sf["password"], sm, path+".smtp.password")
		if e.user == "" {
			p.errf(sm, path+".smtp.username", "required with a password")
		}
	}
	from := p.str(f["from"], path+".from")
	if f["from"] == nil {
		p.errf(n, path+".from", "required: the sender address")
	} else if a, err := mail.ParseAddress(from); err != nil {
		p.errf(f["from"], path+".from", "%q is not an email address", from)
	} else {
		e.from = a
	}
	to := f["to"]
	if to == nil {
		p.errf(n, path+".to", "required: one or more recipient addresses")
	} else {
		list := []*yaml.Node{to}
		if to.Kind == yaml.SequenceNode {
			list = to.Content
		}
		for i, t := range list {
			s := p.str(t, fmt.Sprintf("%s.to[%d]", path, i))
			if a, err := mail.ParseAddress(s); err != nil {
				p.errf(t, fmt.Sprintf("%s.to[%d]", path, i), "%q is not an email address", s)
			} else {
				e.to = append(e.to, a)
			}
		}
		if len(list) == 0 {
			p.errf(to, path+".to", "empty: one or more recipient addresses")
		}
	}
	e.subject = p.str(f["subject"], path+".subject")
	return e
}

func idRE(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter {
			return false
		}
		if !letter && !(c >= '0' && c <= '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}
