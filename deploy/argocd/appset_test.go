package argocd

import (
	"strings"
	"testing"
)

func TestSameRepo(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"https://github.com/acme/release.git", "acme/release", true},
		{"https://github.com/acme/release", "https://github.com/Acme/Release.git", true},
		{"git@github.com:acme/release.git", "https://github.com/acme/release", true},
		{"http://127.0.0.1:18089/demo.git", "http://127.0.0.1:18089/demo.git", true},
		{"https://github.com/acme/release.git", "https://gitlab.com/acme/release.git", false},
		{"https://github.com/acme/release.git", "acme/release-2", false},
		{"https://github.com/acme/release.git", "release", true}, // a bare name matches the path's end
		{"https://github.com/acme/release.git", "", false},
	}
	for _, c := range cases {
		if got := SameRepo(c.a, c.b); got != c.want {
			t.Errorf("SameRepo(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestAppSetRefreshOptionsChecked(t *testing.T) {
	cl, err := NewClient(ClientOptions{URL: "http://argocd.example", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    AppSetRefreshOptions
		want string
	}{
		{AppSetRefreshOptions{Mode: "sometimes"}, `appset refresh mode "sometimes": want annotate, webhook or off`},
		{AppSetRefreshOptions{Mode: RefreshWebhook}, "needs the ApplicationSet controller's webhook URL"},
		{AppSetRefreshOptions{Mode: RefreshWebhook, WebhookURL: "ftp://x/api/webhook"}, "needs the ApplicationSet controller's webhook URL"},
		{AppSetRefreshOptions{Mode: RefreshWebhook, WebhookURL: "http://u:pw@x:7000/api/webhook"}, "must not carry credentials"},
	} {
		_, err := New(Options{AgentID: "a", Client: cl, AppSetRefresh: c.o})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error shows the URL's password: %v", err)
		}
	}
	a, err := New(Options{AgentID: "a", Client: cl})
	if err != nil || a.o.AppSetRefresh.Mode != RefreshAnnotate {
		t.Fatalf("default mode: %v %q", err, a.o.AppSetRefresh.Mode)
	}
}
