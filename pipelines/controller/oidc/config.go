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
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/yamlconf"
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

// The file as written.
type rawConfig struct {
	Issuer        string   `yaml:"issuer"`
	Name          string   `yaml:"name"`
	ClientID      string   `yaml:"clientID"`
	ClientSecret  string   `yaml:"clientSecret"`
	CLIClientID   string   `yaml:"cliClientID"`
	Scopes        []string `yaml:"scopes" want:"a list of strings"`
	GroupsClaim   string   `yaml:"groupsClaim"`
	UsernameClaim string   `yaml:"usernameClaim"`
	Audiences     []string `yaml:"audiences" want:"a list of strings"`
	SessionKey    string   `yaml:"sessionKey"`
}

// LoadConfig reads an --oidc file. externalURL is the server's --external-url, which the
// redirect URL is derived from. Every problem is reported, each as file:line:col: field:
// message (a *connector.LoadError, see package yamlconf); secrets are read through
// env:/file: and never appear in an error.
func LoadConfig(path, externalURL string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oidc file: %w", err)
	}
	var r rawConfig
	d, err := yamlconf.Load(path, raw, &r, "issuer, clientID, clientSecret, sessionKey")
	if d == nil || d.Root == nil {
		return nil, err
	}
	// str checks a string field: required ones must be set, and none may be set empty.
	str := func(name, v string, required bool, help string) string {
		switch {
		case d.Bad(name):
		case !d.Has(name) && required:
			d.Errorf(name, "required: %s", help)
		case d.Has(name) && v == "":
			d.Errorf(name, "want %s", help)
		}
		return v
	}
	list := func(name string, v []string) []string {
		for i, s := range v {
			if s == "" && !d.Bad(yamlconf.Index(name, i)) {
				d.Errorf(yamlconf.Index(name, i), "want a non-empty string")
			}
		}
		return slices.DeleteFunc(v, func(s string) bool { return s == "" })
	}
	dir := filepath.Dir(path)
	secret := func(name, v, help string) connector.Secret {
		if str(name, v, true, help) == "" {
			return connector.Secret{}
		}
		s, err := connector.ResolveSecretRef(v, dir, nil)
		if err != nil {
			d.Errorf(name, "%v", err)
		}
		return s
	}

	c := &Config{}
	c.Issuer = str("issuer", r.Issuer, true, "the identity provider's issuer URL, e.g. https://dex.example.com")
	if c.Issuer != "" {
		if u, err := url.Parse(c.Issuer); err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) {
			d.Errorf("issuer", "want an https URL (http only on loopback), got %q", c.Issuer)
		}
	}
	c.Name = str("name", r.Name, false, "the provider's name for the sign-in button")
	c.ClientID = str("clientID", r.ClientID, true, "the client ID registered with the provider for prflow's UI")
	c.ClientSecret = secret("clientSecret", r.ClientSecret, "the client's secret as "+connector.SecretRefHelp)
	c.CLIClientID = str("cliClientID", r.CLIClientID, false, "a public client ID for prflow login")
	c.Scopes = list("scopes", r.Scopes)
	if !d.Has("scopes") {
		c.Scopes = []string{"openid", "profile", "email", "groups", "offline_access"}
	} else if !slices.Contains(c.Scopes, "openid") && !d.Bad("scopes") {
		d.Errorf("scopes", "must contain openid (without it the provider issues no ID token)")
	}
	c.GroupsClaim = str("groupsClaim", r.GroupsClaim, false, "the claim that lists the user's groups")
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	c.UsernameClaim = str("usernameClaim", r.UsernameClaim, false, "the claim that names the user")
	c.Audiences = list("audiences", r.Audiences)
	if len(c.Audiences) == 0 && c.ClientID != "" {
		c.Audiences = []string{c.ClientID}
		if c.CLIClientID != "" {
			c.Audiences = append(c.Audiences, c.CLIClientID)
		}
	}
	c.SessionKey = secret("sessionKey", r.SessionKey, "a key of at least 32 characters as "+connector.SecretRefHelp+", the same on every controller replica")
	if !c.SessionKey.IsZero() && len(c.SessionKey.Value()) < minSessionKey {
		d.Errorf("sessionKey", "the key is shorter than %d characters", minSessionKey)
	}
	if c.Name == "" {
		if u, err := url.Parse(c.Issuer); err == nil {
			c.Name = u.Hostname()
		}
	}
	if err := d.Err(); err != nil {
		return nil, err
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
