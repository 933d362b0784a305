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
	"context"
	"fmt"
	"net"
	"net/http"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/yamlconf"
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
	p := &parser{baseDir: baseDir, o: o}
	d, err := yamlconf.Parse(file, data)
	if err != nil {
		return nil, err
	}
	p.d = d
	var doc struct {
		Channels []rawChannel `yaml:"channels" want:"a list of channels"`
	}
	switch {
	case d.Root == nil:
		d.ErrorAt(nil, "", "empty file: want a list of channels")
	case d.Root.Kind == yaml.SequenceNode: // a bare list
		d.Decode(d.Root, "channels", &doc.Channels)
	default:
		d.Decode(d.Root, "", &doc)
		if !d.Has("channels") && !d.Failed() {
			d.Errorf("channels", "required: a list of channels")
		}
	}
	s := &Set{byName: map[string]*channel{}}
	for i, r := range doc.Channels {
		path := yamlconf.Index("channels", i)
		if d.Bad(path) {
			continue
		}
		c := p.channel(r, path)
		if c == nil {
			continue
		}
		if _, dup := s.byName[c.name]; dup {
			d.ErrorAt(d.Node(path), path+".name", "channel %q is defined twice", c.name)
			continue
		}
		s.byName[c.name] = c
		s.names = append(s.names, c.name)
	}
	if err := d.Err(); err != nil {
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

// The file as written; channel checks it and builds the senders.
type (
	rawChannel struct {
		Name     string        `yaml:"name"`
		Type     string        `yaml:"type"`
		URL      string        `yaml:"url"`
		Secret   string        `yaml:"secret"`
		SMTP     *rawSMTP      `yaml:"smtp"`
		From     string        `yaml:"from"`
		To       addressList   `yaml:"to"`
		Subject  string        `yaml:"subject"`
		Attempts int           `yaml:"attempts" want:"a whole number from 1 to 20"`
		Timeout  time.Duration `yaml:"timeout" want:"a duration such as 10s"`
	}
	rawSMTP struct {
		Address  string `yaml:"address"`
		StartTLS *bool  `yaml:"starttls"`
		Username string `yaml:"username"`
		Password string `yaml:"password"`
	}
)

// addressList is `to`: one address or a list of them.
type addressList []string

func (a *addressList) UnmarshalYAMLConf(d *yamlconf.Doc, n *yaml.Node, path string) {
	if n.Kind == yaml.SequenceNode {
		d.Decode(n, path, (*[]string)(a))
		return
	}
	var s string
	d.Decode(n, yamlconf.Index(path, 0), &s)
	*a = addressList{s}
}

type parser struct {
	d       *yamlconf.Doc
	baseDir string
	o       *options
}

// secret resolves a required secret reference (env:, file:); never a plain value.
func (p *parser) secret(ref, field string) connector.Secret {
	if ref == "" {
		if !p.d.Bad(field) {
			p.d.Errorf(field, "required (%s)", connector.SecretRefHelp)
		}
		return connector.Secret{}
	}
	s, err := connector.ResolveSecretRef(ref, p.baseDir, p.o.lookup)
	if err != nil {
		p.d.Errorf(field, "%v", err)
	}
	return s
}

func (p *parser) channel(r rawChannel, path string) *channel {
	d := p.d
	before := d.Count()
	c := &channel{name: r.Name, typ: r.Type, attempts: DefaultAttempts, timeout: DefaultTimeout}
	switch {
	case d.Bad(path + ".name"):
	case !d.Has(path + ".name"):
		d.Errorf(path+".name", "required")
	case !idRE(c.name):
		d.Errorf(path+".name", "%q: use letters, digits, - and _ (start with a letter, ≤ 63 chars)", c.name)
	}
	if f := path + ".attempts"; d.Has(f) && !d.Bad(f) {
		if r.Attempts < 1 || r.Attempts > 20 {
			d.Errorf(f, "want a whole number from 1 to 20, got %q", d.Node(f).Value)
		} else {
			c.attempts = r.Attempts
		}
	}
	if f := path + ".timeout"; d.Has(f) && !d.Bad(f) {
		if r.Timeout <= 0 {
			d.Errorf(f, "want a duration such as 10s, got %q", d.Node(f).Value)
		} else {
			c.timeout = r.Timeout
		}
	}
	allowed := map[string][]string{
		"slack":   {"url"},
		"webhook": {"url", "secret"},
		"email":   {"smtp", "from", "to", "subject"},
	}
	if !d.Has(path + ".type") {
		d.Errorf(path+".type", "required: one of %s", strings.Join(Types, ", "))
		return nil
	}
	keys, ok := allowed[c.typ]
	if !ok {
		if !d.Bad(path + ".type") {
			d.Errorf(path+".type", "unknown channel type %q; want one of %s", c.typ, strings.Join(Types, ", "))
		}
		return nil
	}
	for _, k := range []string{"url", "secret", "smtp", "from", "to", "subject"} {
		if d.Has(path+"."+k) && !slices.Contains(keys, k) {
			d.Errorf(path+"."+k, "not a field of a %s channel (its fields: %s)", c.typ, strings.Join(keys, ", "))
		}
	}
	switch c.typ {
	case "slack":
		c.s = &slack{url: p.secret(r.URL, path+".url"), client: p.client(c.timeout)}
	case "webhook":
		c.s = &webhook{url: p.secret(r.URL, path+".url"), key: p.secret(r.Secret, path+".secret"), client: p.client(c.timeout)}
	case "email":
		c.s = p.email(r, path)
	}
	if d.Count() > before || c.s == nil {
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

func (p *parser) email(r rawChannel, path string) *email {
	d := p.d
	e := &email{starttls: true}
	sm := r.SMTP
	if sm == nil {
		if !d.Bad(path + ".smtp") {
			d.Errorf(path+".smtp", "required: {address: host:port, starttls: true, username: …, password: env:…}")
		}
		return nil
	}
	e.addr = sm.Address
	switch f := path + ".smtp.address"; {
	case d.Bad(f):
	case !d.Has(f):
		d.Errorf(f, "required: host:port")
	default:
		if host, port, err := net.SplitHostPort(e.addr); err != nil || host == "" || port == "" {
			d.Errorf(f, "want host:port, got %q", e.addr)
		} else {
			e.host = host
		}
	}
	if sm.StartTLS != nil {
		e.starttls = *sm.StartTLS
	}
	e.user = sm.Username
	if e.user != "" || d.Has(path+".smtp.password") {
		e.pass = p.secret(sm.Password, path+".smtp.password")
		if e.user == "" {
			d.ErrorAt(d.Node(path+".smtp"), path+".smtp.username", "required with a password")
		}
	}
	switch f := path + ".from"; {
	case d.Bad(f):
	case !d.Has(f):
		d.Errorf(f, "required: the sender address")
	default:
		if a, err := mail.ParseAddress(r.From); err != nil {
			d.Errorf(f, "%q is not an email address", r.From)
		} else {
			e.from = a
		}
	}
	switch f := path + ".to"; {
	case d.Bad(f):
	case !d.Has(f):
		d.Errorf(f, "required: one or more recipient addresses")
	case len(r.To) == 0:
		d.Errorf(f, "empty: one or more recipient addresses")
	default:
		for i, s := range r.To {
			if d.Bad(yamlconf.Index(f, i)) {
				continue
			}
			if a, err := mail.ParseAddress(s); err != nil {
				d.Errorf(yamlconf.Index(f, i), "%q is not an email address", s)
			} else {
				e.to = append(e.to, a)
			}
		}
	}
	e.subject = r.Subject
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
