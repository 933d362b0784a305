package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/prflow/prflow/pipelines/controller/oidc"
)

// storedLogin is what `prflow login` keeps in os.UserConfigDir()/prflow/login.json (mode 0600):
// the ID token the API takes as a bearer token and what renewing it needs.
type storedLogin struct {
	Server       string    `json:"server"`
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"clientID"`
	Scopes       []string  `json:"scopes,omitempty"`
	IDToken      string    `json:"idToken"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Expiry       time.Time `json:"expiry"`
	User         string    `json:"user"`
}

// loginPath is where the CLI keeps its sign-in; PRFLOW_CONFIG_DIR moves it (tests, CI).
func loginPath() (string, error) {
	dir := os.Getenv("PRFLOW_CONFIG_DIR")
	if dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("finding the user config directory for the sign-in: %w", err)
		}
		dir = filepath.Join(base, "prflow")
	}
	return filepath.Join(dir, "login.json"), nil
}

func newLogin(g *globals) *cobra.Command {
	var issuer, clientID string
	var noDevice bool
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign in with the server's OIDC provider; client commands then use the token",
		Long: "Signs in with the identity provider the server is configured with (prflow server --oidc, its cliClientID):\n" +
			"by the device flow when the provider offers it (open a URL, enter a code), else through a browser\n" +
			"redirect to a loopback port with PKCE. The ID token and refresh token are kept in the user config\n" +
			"directory (prflow/login.json, mode 0600) and used when neither --token nor PRFLOW_TOKEN is set.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			server := strings.TrimRight(g.server, "/")
			cc := oidc.CLIConfig{Issuer: issuer, ClientID: clientID, Scopes: []string{"openid", "profile", "email", "groups", "offline_access"}}
			if issuer == "" || clientID == "" {
				var err error
				if cc, err = fetchCLIConfig(ctx, server); err != nil {
					return err
				}
			}
			p, err := gooidc.NewProvider(ctx, cc.Issuer)
			if err != nil {
				return fmt.Errorf("discovering the identity provider %s: %w", cc.Issuer, err)
			}
			var disc struct {
				DeviceAuth string `json:"device_authorization_endpoint"`
			}
			_ = p.Claims(&disc)
			conf := &oauth2.Config{ClientID: cc.ClientID, Endpoint: p.Endpoint(), Scopes: cc.Scopes}
			conf.Endpoint.DeviceAuthURL = disc.DeviceAuth
			errw := cmd.ErrOrStderr()
			var tok *oauth2.Token
			if disc.DeviceAuth != "" && !noDevice {
				tok, err = deviceLogin(ctx, conf, errw)
			} else {
				tok, err = loopbackLogin(ctx, conf, errw)
			}
			if err != nil {
				return err
			}
			raw, _ := tok.Extra("id_token").(string)
			if raw == "" {
				return errors.New("the identity provider's answer has no ID token (the CLI's client needs the openid scope)")
			}
			id, err := p.Verifier(&gooidc.Config{ClientID: cc.ClientID}).Verify(ctx, raw)
			if err != nil {
				return fmt.Errorf("the identity provider's ID token was refused: %w", err)
			}
			var claims struct {
				PreferredUsername string `json:"preferred_username"`
				Email             string `json:"email"`
			}
			_ = id.Claims(&claims)
			name := firstNonEmpty(claims.PreferredUsername, claims.Email, id.Subject)
			l := storedLogin{Server: server, Issuer: cc.Issuer, ClientID: cc.ClientID, Scopes: cc.Scopes, IDToken: raw,
				RefreshToken: tok.RefreshToken, Expiry: id.Expiry, User: name}
			path, err := saveLogin(l)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed in to %s as %s (token kept in %s until %s)\n", server, name, path, id.Expiry.Local().Format(time.DateTime))
			return nil
		},
	}
	cmd.Flags().StringVar(&issuer, "issuer", "", "the provider's issuer URL (default: the one the server names at /ui/oidc/cli)")
	cmd.Flags().StringVar(&clientID, "client-id", "", "the CLI's public client ID (default: the server's cliClientID)")
	cmd.Flags().BoolVar(&noDevice, "browser", false, "sign in through a browser and a loopback redirect even when the provider offers the device flow")
	return cmd
}

func newLogout(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the sign-in of prflow login",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := loginPath()
			if err != nil {
				return err
			}
			err = os.Remove(path)
			if errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(cmd.OutOrStdout(), "not signed in: nothing to remove (%s does not exist)\n", path)
				return nil
			}
			if err != nil {
				return fmt.Errorf("removing the sign-in: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed out: removed %s\n", path)
			return nil
		},
	}
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// fetchCLIConfig asks the server which provider and client the CLI signs in with.
func fetchCLIConfig(ctx context.Context, server string) (oidc.CLIConfig, error) {
	var cc oidc.CLIConfig
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/ui/oidc/cli", nil)
	if err != nil {
		return cc, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cc, unreachable(server, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(b, &e)
		if e.Error == "" {
			e.Error = fmt.Sprintf("HTTP %d", resp.StatusCode)
		}
		return cc, fmt.Errorf("prflow server %s: %s (or give --issuer and --client-id)", server, e.Error)
	}
	if err := json.Unmarshal(b, &cc); err != nil || cc.Issuer == "" || cc.ClientID == "" {
		return cc, fmt.Errorf("prflow server %s: /ui/oidc/cli did not name an issuer and client ID", server)
	}
	return cc, nil
}

// deviceLogin is the device authorization grant (RFC 8628): the person opens a URL anywhere
// and enters a code while the CLI polls.
func deviceLogin(ctx context.Context, conf *oauth2.Config, errw io.Writer) (*oauth2.Token, error) {
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the device sign-in: %s", oauthErr(err))
	}
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(errw, "To sign in, open %s\n(or open %s and enter the code %s)\n", da.VerificationURIComplete, da.VerificationURI, da.UserCode)
	} else {
		fmt.Fprintf(errw, "To sign in, open %s and enter the code %s\n", da.VerificationURI, da.UserCode)
	}
	tok, err := conf.DeviceAccessToken(ctx, da)
	if err != nil {
		return nil, fmt.Errorf("device sign-in: %s", oauthErr(err))
	}
	return tok, nil
}

// loopbackLogin is the authorization code flow with PKCE and a redirect to a port on
// 127.0.0.1 (RFC 8252), for providers without the device flow.
func loopbackLogin(ctx context.Context, conf *oauth2.Config, errw io.Writer) (*oauth2.Token, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	c := *conf
	c.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	state := base64.RawURLEncoding.EncodeToString(b)
	verifier := oauth2.GenerateVerifier()
	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("error") != "":
			res.err = fmt.Errorf("the identity provider refused the sign-in: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("state") != state:
			res.err = errors.New("the sign-in answer's state does not match (a forged or stale answer)")
		default:
			res.code = q.Get("code")
		}
		if res.err != nil {
			http.Error(w, res.err.Error(), http.StatusBadRequest)
		} else {
			fmt.Fprintln(w, "Signed in: you can close this tab and return to the terminal.")
		}
		// The answer goes out before the login goes on: once done is read the server stops.
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case done <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { // let the browser's answer finish, then stop
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	fmt.Fprintf(errw, "To sign in, open this URL in a browser on this machine:\n%s\n", c.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)))
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-done:
		if res.err != nil {
			return nil, res.err
		}
		tok, err := c.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
		if err != nil {
			return nil, fmt.Errorf("exchanging the sign-in code: %s", oauthErr(err))
		}
		return tok, nil
	}
}

// oauthErr is an OAuth error answer without its body.
func oauthErr(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorDescription != "" {
			return re.ErrorCode + ": " + re.ErrorDescription
		}
		if re.ErrorCode != "" {
			return re.ErrorCode
		}
		if re.Response != nil {
			return fmt.Sprintf("the provider answered HTTP %d", re.Response.StatusCode)
		}
	}
	return err.Error()
}

// saveLogin writes the sign-in with mode 0600 (its directory 0700), replacing the old one
// whole (a reader never sees half a file).
func saveLogin(l storedLogin) (string, error) {
	path, err := loginPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("saving the sign-in: %w", err)
	}
	b, _ := json.MarshalIndent(l, "", "  ")
	f, err := os.CreateTemp(filepath.Dir(path), ".login-*.json")
	if err != nil {
		return "", fmt.Errorf("saving the sign-in: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", fmt.Errorf("saving the sign-in: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("saving the sign-in: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("saving the sign-in: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("saving the sign-in: %w", err)
	}
	return path, nil
}

// storedToken is the ID token of `prflow login` for server, renewed with its refresh token
// when it expired (or is about to). ok is false when there is no sign-in for that server.
func storedToken(ctx context.Context, server string) (tok string, ok bool, err error) {
	path, err := loginPath()
	if err != nil {
		return "", false, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the sign-in of prflow login: %w", err)
	}
	var l storedLogin
	if err := json.Unmarshal(b, &l); err != nil {
		return "", false, fmt.Errorf("%s is not a sign-in of prflow login (run prflow login again)", path)
	}
	if l.Server != server {
		return "", false, nil // signed in to another server
	}
	if time.Until(l.Expiry) > 30*time.Second || l.RefreshToken == "" {
		return l.IDToken, true, nil // an expired token without a refresh token: the server's 401 says to sign in again
	}
	p, err := gooidc.NewProvider(ctx, l.Issuer)
	if err != nil {
		return "", false, fmt.Errorf("renewing the sign-in: discovering %s: %w", l.Issuer, err)
	}
	conf := &oauth2.Config{ClientID: l.ClientID, Endpoint: p.Endpoint(), Scopes: l.Scopes}
	t, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: l.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return "", false, fmt.Errorf("your sign-in expired and the identity provider refused to renew it (%s): run prflow login", oauthErr(err))
	}
	raw, _ := t.Extra("id_token").(string)
	id, err := p.Verifier(&gooidc.Config{ClientID: l.ClientID}).Verify(ctx, raw)
	if err != nil {
		return "", false, fmt.Errorf("renewing the sign-in: the new ID token was refused: %w (run prflow login)", err)
	}
	l.IDToken, l.Expiry = raw, id.Expiry
	if t.RefreshToken != "" {
		l.RefreshToken = t.RefreshToken
	}
	if _, err := saveLogin(l); err != nil {
		return "", false, err
	}
	return raw, true, nil
}
