package controller

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/yamlconf"
)

// User is an authenticated API caller.
type User struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	// Subject and Issuer are the OIDC token's sub and iss claims (empty for the tokens file).
	Subject string `json:"subject,omitempty"`
	Issuer  string `json:"issuer,omitempty"`

	tokenName string // the name the tokens file gives the token that authenticated the user
	byToken   bool   // authenticated by a bearer token (not the anonymous user of prflow dev)
	byOIDC    bool   // authenticated by an OIDC token or an OIDC sign-in session
}

// How a user was authenticated (User.Via).
const (
	ViaAnonymous = "anonymous" // prflow dev's user on loopback
	ViaToken     = "token"     // a token of the --tokens file
	ViaOIDC      = "oidc"      // an OIDC ID token (API) or an OIDC sign-in (UI)
)

// OIDCUser is the user an OIDC identity provider vouched for (sub, iss, name and groups claims).
func OIDCUser(name string, groups []string, issuer, subject string) User {
	return User{Name: name, Groups: groups, Issuer: issuer, Subject: subject, byOIDC: true}
}

// Via says how u was authenticated: ViaOIDC, ViaToken or ViaAnonymous.
func (u User) Via() string {
	switch {
	case u.byOIDC:
		return ViaOIDC
	case u.byToken:
		return ViaToken
	}
	return ViaAnonymous
}

// TokenLabel names the token that authenticated u for the audit log ("token ci of alice"),
// never the token itself; "" when no token did (the anonymous user of prflow dev).
func (u User) TokenLabel() string {
	switch {
	case u.byOIDC:
		// The subject is the stable id (names and e-mails change); the groups are what
		// permissions were decided on.
		return fmt.Sprintf("OIDC user %s (sub %q, iss %s, groups [%s])", u.Name, u.Subject, u.Issuer, strings.Join(u.Groups, ", "))
	case !u.byToken:
		return ""
	case u.tokenName != "":
		return fmt.Sprintf("token %q of %s", u.tokenName, u.Name)
	}
	return "token of " + u.Name
}

// InGroup reports whether u belongs to group g.
func (u User) InGroup(g string) bool {
	for _, x := range u.Groups {
		if x == g {
			return true
		}
	}
	return false
}

// Auth maps bearer tokens to users. Tokens are kept only as SHA-256 digests in memory.
type Auth struct {
	users []authEntry
	// Anonymous lets every request through as this user (prflow dev on loopback only).
	Anonymous *User
	// OIDC, when set, accepts bearer JWTs its identity provider issued (prflow server --oidc).
	OIDC BearerVerifier
}

// BearerVerifier checks a bearer token that is not in the tokens file: an OIDC ID token
// (package pipelines/controller/oidc). Its errors say why a token was refused and never
// contain the token.
type BearerVerifier interface {
	VerifyBearer(ctx context.Context, token string) (User, error)
}

// HasTokens reports whether a tokens file gave any token (the UI then keeps its token form).
func (a *Auth) HasTokens() bool { return len(a.users) > 0 }

type authEntry struct {
	digest [32]byte
	user   User
}

// LoadAuth reads a tokens file (--tokens):
//
//	tokens:
//	  - user: alice
//	    groups: [release-managers]
//	    token: env:ALICE_TOKEN        # or file:/path, or sha256:<hex digest>
//	    name: laptop                  # optional: which of alice's tokens, in the audit log
//
// Tokens use the connectors file's secret syntax (connector.ResolveDigestRef): a token written
// in the file is refused. Every problem is reported, each as file:line:col: field: message
// (a *connector.LoadError, see package yamlconf), never with a token or its digest.
func LoadAuth(path string) (*Auth, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var doc struct {
		Tokens []struct {
			User   string   `yaml:"user"`
			Groups []string `yaml:"groups" want:"a list of group names"`
			Token  string   `yaml:"token"`
			Name   string   `yaml:"name" want:"a name for the token (shown in the audit log)"`
		} `yaml:"tokens" want:"a list of {user, groups, token}"`
	}
	d, err := yamlconf.Load(path, raw, &doc, "tokens: [{user, groups, token}]")
	if d == nil {
		return nil, err
	}
	if !d.Has("tokens") && !d.Failed() {
		d.Errorf("tokens", "want a list of {user, groups, token}")
	}
	a := &Auth{}
	dir := filepath.Dir(path)
	seen := map[string]int{}
	for i, t := range doc.Tokens {
		at := yamlconf.Index("tokens", i)
		if d.Bad(at) {
			continue
		}
		u := User{Name: t.User, tokenName: t.Name}
		if u.Name == "" && !d.Bad(at+".user") {
			d.Errorf(at+".user", "required: the user name approvals and run records show")
		}
		for j, g := range t.Groups {
			if g == "" && !d.Bad(yamlconf.Index(at+".groups", j)) {
				d.Errorf(yamlconf.Index(at+".groups", j), "want a group name")
			}
		}
		u.Groups = slices.DeleteFunc(t.Groups, func(g string) bool { return g == "" })
		if d.Has(at+".name") && t.Name == "" && !d.Bad(at+".name") {
			d.Errorf(at+".name", "want a name for the token (shown in the audit log)")
		}
		if t.Token == "" {
			if !d.Bad(at + ".token") {
				d.Errorf(at+".token", "required (%s)", connector.DigestRefHelp)
			}
			continue
		}
		dg, err := connector.ResolveDigestRef(t.Token, dir, nil, minTokenLen)
		if err != nil {
			d.Errorf(at+".token", "user %s: %v", u.Name, err)
			continue
		}
		key := string(dg[:])
		if prev, dup := seen[key]; dup {
			// Two users behind one token: the API could not tell who acts.
			d.Errorf(at+".token", "user %s has the same token as tokens[%d]", u.Name, prev)
			continue
		}
		seen[key] = i
		if u.Name != "" {
			a.users = append(a.users, authEntry{digest: dg, user: u})
		}
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return a, nil
}

// minTokenLen refuses tokens short enough to guess.
const minTokenLen = 8

// Authenticate checks the request's bearer token in constant time.
func (a *Auth) Authenticate(r *http.Request) (User, bool) {
	u, err := a.Check(r)
	return u, err == nil
}

// errUnknownToken is the answer to a bearer token nobody has.
var errUnknownToken = errors.New("missing or unknown bearer token")

// Check is Authenticate saying why a request was refused: the tokens file first (in constant
// time), then, for a token that looks like a JWT, the OIDC provider's signature, iss, aud and exp.
func (a *Auth) Check(r *http.Request) (User, error) {
	if a.Anonymous != nil {
		return *a.Anonymous, nil
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return User{}, errUnknownToken
	}
	u, ok := a.byTokensFile(tok)
	if ok {
		return u, nil
	}
	if a.OIDC != nil && strings.Count(tok, ".") == 2 {
		return a.OIDC.VerifyBearer(r.Context(), tok)
	}
	return User{}, errUnknownToken
}

func (a *Auth) byTokensFile(tok string) (User, bool) {
	d := sha256.Sum256([]byte(tok))
	var found *User
	for i := range a.users {
		if subtle.ConstantTimeCompare(d[:], a.users[i].digest[:]) == 1 {
			found = &a.users[i].user
		}
	}
	if found == nil {
		return User{}, false
	}
	u := *found
	u.byToken = true
	return u, true
}

type userKey struct{}

// UserFrom returns the authenticated user of a request context.
func UserFrom(ctx context.Context) User {
	u, _ := ctx.Value(userKey{}).(User)
	return u
}
