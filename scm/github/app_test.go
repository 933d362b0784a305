package github

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

// TestGitHubAppAuth runs the driver as an App installation: ghinstallation signs a JWT with the
// App key, exchanges it for an installation token, and the API calls carry that token.
func TestGitHubAppAuth(t *testing.T) {
	const appID, installID = 4242, 77
	const instToken = "ghs_installationTokenForTest"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})

	g := scmtest.NewGitHub(t, scmtest.WithToken(instToken, "prflow[bot]"))
	if _, err := g.CreateRepo("acme", "release", map[string]string{"a.txt": "hello\n"}); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(g.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	var minted atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v3/app/installations/77/access_tokens" {
			raw := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			tok, err := jwt.ParseWithClaims(raw, &jwt.RegisteredClaims{}, func(*jwt.Token) (any, error) { return &key.PublicKey, nil })
			if err != nil || !tok.Valid || tok.Claims.(*jwt.RegisteredClaims).Issuer != "4242" {
				http.Error(w, `{"message":"A JSON web token could not be decoded"}`, http.StatusUnauthorized)
				return
			}
			minted.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"token": instToken, "expires_at": time.Now().Add(time.Hour)})
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	d, err := New(WithBaseURL(front.URL+"/api/v3/"), WithApp(appID, installID, keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := d.Whoami(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.Login != "app/4242 (installation 77)" {
		t.Errorf("Whoami = %+v", id)
	}
	data, err := d.ReadFile(ctx, testRepo, "main", "a.txt")
	if err != nil || string(data) != "hello\n" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	if minted.Load() != 1 {
		t.Errorf("installation token minted %d times, want 1 (cached)", minted.Load())
	}

	wrongKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	badPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(wrongKey)})
	bad, err := New(WithBaseURL(front.URL+"/api/v3/"), WithApp(appID, installID, badPEM))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Whoami(ctx); !errors.Is(err, scm.ErrUnauthorized) || !strings.Contains(err.Error(), "mint installation token") {
		t.Fatalf("wrong key: %v", err)
	}
}
