package controller

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// User is an authenticated API caller.
type User struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
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
}

type authEntry struct {
	digest [32]byte
	user   User
}

// tokensFile is the format of --tokens:
//
//	tokens:
//	  - user: alice
//	    groups: [release-managers]
//	    token: env:ALICE_TOKEN        # or file:/path, or sha256:<hex digest>
type tokensFile struct {
	Tokens []struct {
		User   string   `yaml:"user"`
		Groups []string `yaml:"groups"`
		Token  string   `yaml:"token"`
	} `yaml:"tokens"`
}

// LoadAuth reads a tokens file. Errors name the entry, never the token.
func LoadAuth(path string) (*Auth, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var tf tokensFile
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&tf); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	a := &Auth{}
	for i, t := range tf.Tokens {
		if t.User == "" {
			return nil, fmt.Errorf("tokens file %s: tokens[%d].user is required", path, i)
		}
		var digest [32]byte
		switch {
		case strings.HasPrefix(t.Token, "sha256:"):
			b, err := hex.DecodeString(strings.TrimPrefix(t.Token, "sha256:"))
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("tokens file %s: tokens[%d] (user %s): sha256: wants 64 hex digits", path, i, t.User)
			}
			copy(digest[:], b)
		default:
			tok, err := ResolveSecret(t.Token)
			if err != nil {
				return nil, fmt.Errorf("tokens file %s: tokens[%d] (user %s): %w", path, i, t.User, err)
			}
			if len(tok) < 8 {
				return nil, fmt.Errorf("tokens file %s: tokens[%d] (user %s): token shorter than 8 characters", path, i, t.User)
			}
			digest = sha256.Sum256([]byte(tok))
		}
		a.users = append(a.users, authEntry{digest: digest, user: User{Name: t.User, Groups: t.Groups}})
	}
	return a, nil
}

// ResolveSecret reads "env:NAME" or "file:PATH"; a literal value is accepted too.
func ResolveSecret(ref string) (string, error) {
	switch {
	case strings.HasPrefix(ref, "env:"):
		name := strings.TrimPrefix(ref, "env:")
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		return v, nil
	case strings.HasPrefix(ref, "file:"):
		p := strings.TrimPrefix(ref, "file:")
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("secret file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	case ref == "":
		return "", fmt.Errorf("token is empty")
	}
	return ref, nil
}

// Authenticate checks the request's bearer token in constant time.
func (a *Auth) Authenticate(r *http.Request) (User, bool) {
	if a.Anonymous != nil {
		return *a.Anonymous, true
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return User{}, false
	}
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
	return *found, true
}

type userKey struct{}

// UserFrom returns the authenticated user of a request context.
func UserFrom(ctx context.Context) User {
	u, _ := ctx.Value(userKey{}).(User)
	return u
}
