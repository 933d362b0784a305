package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerServesUI: prflow server serves the web UI beside the API: / goes to /ui/, which
// asks for a token; the tokens file's token signs in, another is refused.
func TestServerServesUI(t *testing.T) {
	dir := t.TempDir()
	tokens := tokensFile(t, dir, "carol", "PRFLOW_TEST_UI_TOKEN", "ui-token-0123456789")
	base := "http://" + startServer(t, "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"))
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	get := func(u string) (int, string, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Request.URL.Path, string(b)
	}
	if code, path, body := get(base + "/"); code != http.StatusOK || path != "/ui/login" || !strings.Contains(body, "API bearer token") {
		t.Fatalf("/ → %d %s", code, path)
	}
	login := func(tok string) (int, string, string) {
		t.Helper()
		resp, err := c.PostForm(base+"/ui/login", url.Values{"token": {tok}, "next": {"/ui/workers"}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Request.URL.Path, string(b)
	}
	if code, _, body := login("wrong-token-0123"); code != http.StatusUnauthorized || !strings.Contains(body, "this token is not valid") {
		t.Fatalf("wrong token: %d", code)
	}
	if code, path, body := login("ui-token-0123456789"); code != http.StatusOK || path != "/ui/workers" || !strings.Contains(body, "carol") {
		t.Fatalf("sign in: %d %s\n%s", code, path, body)
	}
}
