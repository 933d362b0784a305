// Package oidc signs people in to prflow through an OpenID Connect identity provider: the web
// UI's authorization code flow (PKCE, state, nonce) with a sealed session cookie, and the API's
// check of bearer ID tokens the provider issued. It says who the caller is (subject, name,
// groups); what they may do is decided elsewhere.
//
// The client side is github.com/coreos/go-oidc/v3 with golang.org/x/oauth2: a small, widely
// used pair that does discovery, JWKS caching and ID token verification, and leaves the session
// to us (zitadel/oidc's rp would bring its own cookie handler, which we do not want beside ours).
package oidc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm/connector"
)

// Config is the --oidc file.
//
//	issuer: https://dex.example.com          # the provider's issuer URL (discovery is read from it)
//	name: Dex                                # on the sign-in button; default: the issuer's host
//	clientID: prflow                         # the UI's confidential client
//	clientSecret: env:PRFLOW_OIDC_SECRET     # env:NAME or file:PATH, never the value
//	cliClientID: prflow-cli                  # optional public client for `prflow login`
//	scopes: [openid, profile, email, groups, offline_access]
//	groupsClaim: groups                      # default groups
//	usernameClaim: preferred_username        # default preferred_username, then email, then sub
//	audiences: [prflow, prflow-cli]          # API bearer tokens: default clientID and cliClientID
//	sessionKey: env:PRFLOW_SESSION_KEY       # seals session cookies; the same on every replica
type Config struct {
	Issuer        string
	Name          string
	ClientID      string
	ClientSecret  connector.Secret
	CLIClientID   string
	Scopes        []string
	GroupsClaim   string
	UsernameClaim string
	Audiences     []string
	SessionKey    connector.Secret
	// RedirectURL is derived from the server's --external-url: <url>/ui/oidc/callback.
	RedirectURL string
}

// CallbackPath is where the provider sends the browser back.
const CallbackPath = "/ui/oidc/callback"

// minSessionKey keeps the session key long enough that it cannot be guessed.
const minSessionKey = 32

var configFields = []string{"issuer", "name", "clientID", "clientSecret", "cliClientID", "scopes", "groupsClaim", "usernameClaim", "audiences", "sessionKey"}

// LoadConfig reads an --oidc file. externalURL is the server's --external-url, which the
// redirect URL is derived from. Every problem is reported, each as file:line:col: field:
// message (a *connector.LoadError); secrets are read through env:/file: and never appear in
// an error.
func LoadConfig(path, externalURL string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oidc file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, &connector.LoadError{File: path, Msg: "invalid YAML: " + err.Error()}
	}
	if len(doc.Content) == 0 {
		return nil, &connector.LoadError{File: path, Msg: "empty file: want issuer, clientID, clientSecret, sessionKey"}
	}
	var errs []error
	errf := func(n *yaml.Node, field, format string, args ...any) {
		e := &connector.LoadError{File: path, Field: field, Msg: fmt.Sprintf(format, args...)}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		errs = append(errs, e)
	}
	top := doc.Content[0]
	f := map[string]*yaml.Node{}
	if top.Kind != yaml.MappingNode {
		errf(top, "", "want a mapping with %s", strings.Join(configFields, ", "))
		return nil, errors.Join(errs...)
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k := top.Content[i]
		switch {
		case !slices.Contains(configFields, k.Value):
			errf(k, k.Value, "unknown field (known: %s)", strings.Join(configFields, ", "))
		case f[k.Value] != nil:
			errf(k, k.Value, "given twice")
		default:
			f[k.Value] = top.Content[i+1]
		}
	}
	str := func(name string, required bool, help string) (string, *yaml.Node) {
		n := f[name]
		if n == nil {
			if required {
				errf(top, name, "required: %s", help)
			}
			return "", top
		}
		if n.Kind != yaml.ScalarNode || n.Value == "" {
			errf(n, name, "want %s", help)
			return "", n
		}
		return n.Value, n
	}
	list := func(name string) []string {
		n := f[name]
		if n == nil {
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			errf(n, name, "want a list of strings")
			return nil
		}
		var out []string
		for i, v := range n.Content {
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				errf(v, fmt.Sprintf("%s[%d]", name, i), "want a non-empty string")
				continue
			}
			out = append(out, v.Value)
		}
		return out
	}
	dir := filepath.Dir(path)
	secret := func(name, help string) connector.Secret {
		v, n := str(name, true, help)
		if v == "" {
			return connector.Secret{}
		}
		s, err := connector.ResolveSecretRef(v, dir, nil)
		if err != nil {
			errf(n, name, "%v", err)
		}
		return s
	}

	c := &Config{}
	var n *yaml.Node
	c.Issuer, n = str("issuer", true, "the identity provider's issuer URL, e.g. https://dex.example.com")
	if c.Issuer != "" {
		if u, err := url.Parse(c.Issuer); err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) {
			errf(n, "issuer", "want an https URL (http only on loopback), got %q", c.Issuer)
		}
	}
	c.Name, _ = str("name", false, "the provider's name for the sign-in button")
	c.ClientID, _ = str("clientID", true, "the client ID registered with the provider for prflow's UI")
	c.ClientSecret = secret("clientSecret", "the client's secret as "+connector.SecretRefHelp)
	c.CLIClientID, _ = str("cliClientID", false, "a public client ID for prflow login")
	c.Scopes = list("scopes")
	if c.Scopes == nil {
		c.Scopes = []string{"openid", "profile", "email", "groups", "offline_access"}
	} else if !slices.Contains(c.Scopes, "openid") {
		errf(f["scopes"], "scopes", "must contain openid (without it the provider issues no ID token)")
	}
	c.GroupsClaim, _ = str("groupsClaim", false, "the claim that lists the user's groups")
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	c.UsernameClaim, _ = str("usernameClaim", false, "the claim that names the user")
	c.Audiences = list("audiences")
	if c.Audiences == nil && c.ClientID != "" {
		c.Audiences = []string{c.ClientID}
		if c.CLIClientID != "" {
			c.Audiences = append(c.Audiences, c.CLIClientID)
		}
	}
	c.SessionKey = secret("sessionKey", "a key of at least 32 characters as "+connector.SecretRefHelp+", the same on every controller replica")
	if !c.SessionKey.IsZero() && len(c.SessionKey.Value()) < minSessionKey {
		errf(f["sessionKey"], "sessionKey", "the key is shorter than %d characters", minSessionKey)
	}
	if c.Name == "" {
		if u, err := url.Parse(c.Issuer); err == nil {
			c.Name = u.Hostname()
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	eu, err := url.Parse(externalURL)
	if externalURL == "" || err != nil || eu.Host == "" {
		return nil, fmt.Errorf("--oidc needs --external-url: the provider redirects the browser back to <external-url>%s", CallbackPath)
	}
	if eu.Scheme != "https" && !isLoopback(eu.Hostname()) {
		// Session cookies are Secure off loopback; a browser drops them over plain http.
		return nil, fmt.Errorf("--oidc needs an https --external-url (http only on loopback), got %q", externalURL)
	}
	c.RedirectURL = strings.TrimRight(externalURL, "/") + CallbackPath
	return c, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
