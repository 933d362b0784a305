package argocdtest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Argo CD's own tokens are HS256 JWTs with issuer "argocd", signed with the
// server's secret. The fake mints and verifies the same shape, so the
// distinctions the real server makes between "no token", "not a JWT" and "a
// JWT that does not verify" are reproduced.

const tokenIssuer = "argocd"

type tokenSigner struct {
	key []byte
}

func newTokenSigner() (*tokenSigner, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("argocdtest: token key: %w", err)
	}
	return &tokenSigner{key: key}, nil
}

type claims struct {
	Iss string `json:"iss"`
	Sub string `json:"sub"`
	Nbf int64  `json:"nbf,omitempty"`
	Iat int64  `json:"iat"`
	Exp int64  `json:"exp,omitempty"`
	Jti string `json:"jti"`
}

var b64 = base64.RawURLEncoding

// mint returns a signed token for subject; ttl 0 means no expiry (API keys).
func (s *tokenSigner) mint(subject string, now time.Time, ttl time.Duration) (string, error) {
	jti := make([]byte, 8)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	c := claims{Iss: tokenIssuer, Sub: subject, Nbf: now.Unix(), Iat: now.Unix(), Jti: fmt.Sprintf("%x", jti)}
	if ttl > 0 {
		c.Exp = now.Add(ttl).Unix()
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	head := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := head + "." + b64.EncodeToString(payload)
	return body + "." + b64.EncodeToString(s.sign(body)), nil
}

func (s *tokenSigner) sign(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// errNoSession is the real server's answer when no (JWT-shaped) token is sent.
var errNoSession = errors.New("no session information")

// looksLikeJWT is Argo CD's jwtutil.IsValid: three dot-separated parts. A
// bearer token failing it is ignored, as if none had been sent.
func looksLikeJWT(tok string) bool { return len(strings.SplitN(tok, ".", 3)) == 3 }

// verify returns the username of a valid token, or the error text the real
// server would put after "invalid session: ".
func (s *tokenSigner) verify(tok string, now time.Time) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("token is malformed: token contains an invalid number of segments")
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return "", errors.New("token is malformed: could not base64 decode header")
	}
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return "", errors.New("token is malformed: could not JSON decode header")
	}
	pb, err := b64.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("token is malformed: could not base64 decode claim")
	}
	var c claims
	if err := json.Unmarshal(pb, &c); err != nil {
		return "", errors.New("token is malformed: could not JSON decode claim")
	}
	if c.Iss != tokenIssuer {
		// The real server hands foreign issuers to the SSO provider.
		return "", errors.New("SSO is not configured")
	}
	if hdr.Alg != "HS256" {
		return "", errors.New("token is unverifiable: error while executing keyfunc: unexpected signing method")
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, s.sign(parts[0]+"."+parts[1])) {
		return "", errors.New("token signature is invalid: signature is invalid")
	}
	if c.Exp != 0 && now.Unix() >= c.Exp {
		return "", errors.New("token has invalid claims: token is expired")
	}
	user, _, _ := strings.Cut(c.Sub, ":")
	return user, nil
}

func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
