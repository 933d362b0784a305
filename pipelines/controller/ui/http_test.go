package ui_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/controller/ui"
)

// newAnonUI is a running prflow whose API and UI need no sign-in (as on loopback): everyone
// is user dev, in groups. The server closes when the test ends.
func newAnonUI(t testing.TB, groups ...string) (*ctltest.Env, *httptest.Server) {
	e := ctltest.New(t, ctltest.Options{})
	anon := &controller.Auth{Anonymous: &controller.User{Name: "dev", Groups: groups}}
	srv := httptest.NewServer(ui.Wrap(e.Ctl.Handler(anon), ui.New(e.Ctl, anon, nil)))
	t.Cleanup(srv.Close)
	return e, srv
}

// finishedRunPage runs src to its end and returns its run page, as newAnonUI serves it.
func finishedRunPage(t *testing.T, src string) string {
	t.Helper()
	e, srv := newAnonUI(t)
	r := e.Start(src, nil)
	e.Wait(r.ID, 20*time.Second)
	_, _, page := do(t, client(t), "GET", srv.URL+"/ui/runs/"+r.ID, nil, nil)
	return page
}

// client is a cookie-keeping HTTP client that does not follow redirects.
func client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// signedIn is an HTTP client with a UI session signed in with token (the login form as the
// browser sends it).
func signedIn(t *testing.T, e *uiEnv, token string) *http.Client {
	t.Helper()
	c := client(t)
	if code, _, body := do(t, c, "POST", e.URL+"/ui/login", url.Values{"token": {token}, "next": {"/ui/"}}, map[string]string{"Origin": e.URL}); code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", code, body)
	}
	return c
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestSessionAndCSRF: the session cookie's attributes, and every way an action is refused:
// no session, a wrong or missing CSRF token, another site's Origin; then the right one works.
func TestSessionAndCSRF(t *testing.T) {
	t.Parallel()
	e, r := newApprovalUIEnv(t, ctltest.Options{})
	c := client(t)
	runURL := e.URL + "/ui/runs/" + r.ID

	// Not signed in: pages go to the login form, streams and actions are refused.
	if code, h, _ := do(t, c, "GET", runURL, nil, nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login?next=") {
		t.Fatalf("page without a session: %d %s", code, h.Get("Location"))
	}
	if code, _, _ := do(t, c, "GET", runURL+"/events", nil, map[string]string{"Accept": "text/event-stream"}); code != http.StatusUnauthorized {
		t.Errorf("events without a session: %d", code)
	}
	if code, _, body := do(t, c, "POST", runURL+"/cancel", url.Values{"csrf": {"x"}}, nil); code != http.StatusUnauthorized || !strings.Contains(body, "not signed in") {
		t.Errorf("cancel without a session: %d", code)
	}
	// The API's bearer token does not open the UI, and a UI cookie does not open the API.
	if code, _, _ := do(t, c, "GET", runURL, nil, map[string]string{"Authorization": "Bearer " + aliceToken}); code != http.StatusSeeOther {
		t.Errorf("page with a bearer header only: %d", code)
	}

	// Sign in: HttpOnly, SameSite=Strict cookie scoped to /ui/; the redirect stays on the site.
	code, h, _ := do(t, c, "POST", e.URL+"/ui/login", url.Values{"token": {aliceToken}, "next": {"https://evil.example/"}}, nil)
	if code != http.StatusSeeOther || h.Get("Location") != "/ui/" {
		t.Fatalf("login: %d → %s", code, h.Get("Location"))
	}
	sc := h.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui/"} {
		if !strings.Contains(sc, want) {
			t.Errorf("session cookie %q lacks %s", sc, want)
		}
	}
	if code, _, body := do(t, c, "GET", e.URL+"/api/v1/runs", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("API with the UI cookie only: %d %s", code, body)
	}
	_, _, page := do(t, c, "GET", runURL, nil, nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the run page:\n%s", page)
	}
	csrf := m[1]
	decide := url.Values{"stage": {"prod"}, "step": {"approve"}, "decision": {"approve"}}
	for _, tc := range []struct {
		name string
		csrf string
		hdr  map[string]string
		code int
		msg  string
	}{
		{"no CSRF token", "", nil, http.StatusForbidden, "CSRF token does not match"},
		{"wrong CSRF token", csrf + "x", nil, http.StatusForbidden, "CSRF token does not match"},
		{"another site", csrf, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, "cross-site request refused"},
	} {
		f := url.Values{}
		for k, v := range decide {
			f[k] = v
		}
		f.Set("csrf", tc.csrf)
		code, _, body := do(t, c, "POST", runURL+"/decide", f, tc.hdr)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d, want %d with %q", tc.name, code, tc.code, tc.msg)
		}
	}
	if cur, _ := e.Ctl.Get(context.Background(), r.ID); len(ctltest.Step(cur, "prod", "approve").Signals) != 0 {
		t.Fatal("a refused request reached the step")
	}
	// A bad decision value and an unknown step are named.
	f := url.Values{"csrf": {csrf}, "stage": {"prod"}, "step": {"approve"}, "decision": {"maybe"}}
	if code, _, body := do(t, c, "POST", runURL+"/decide", f, nil); code != http.StatusBadRequest || !strings.Contains(body, `got &#34;maybe&#34;`) {
		t.Errorf("decision=maybe: %d %s", code, body)
	}
	f = url.Values{"csrf": {csrf}, "stage": {"prod"}, "step": {"nope"}, "decision": {"approve"}}
	if code, _, body := do(t, c, "POST", runURL+"/decide", f, nil); code != http.StatusNotFound || !strings.Contains(body, "has no step prod.nope") {
		t.Errorf("unknown step: %d %s", code, body)
	}
	// Same origin with the token: cancel works and says so.
	code, h, _ = do(t, c, "POST", runURL+"/cancel", url.Values{"csrf": {csrf}}, map[string]string{"Origin": e.URL})
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "cancel+requested+by+alice") {
		t.Fatalf("cancel: %d %s", code, h.Get("Location"))
	}
	if final := e.Wait(r.ID, 20*time.Second); final.Status != pipelines.StCancelled {
		t.Errorf("after cancel the run is %s", final.Status)
	}
	// Cancelling again is refused with the reason, not swallowed.
	if code, _, body := do(t, c, "POST", runURL+"/cancel", url.Values{"csrf": {csrf}}, nil); code != http.StatusConflict || !strings.Contains(body, "already cancelled") {
		t.Errorf("second cancel: %d %s", code, body)
	}
}

// TestAnonymousLoopback: prflow dev --serve's open mode needs no login, but its actions still
// need the CSRF token of the session the first page set.
func TestAnonymousLoopback(t *testing.T) {
	t.Parallel()
	e, srv := newAnonUI(t, "dev")
	r := e.Start("name: slow\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10m}}\n", nil)
	c := client(t)
	if code, h, _ := do(t, c, "GET", srv.URL+"/", nil, nil); code != http.StatusFound || h.Get("Location") != "/ui/" {
		t.Errorf("/: %d %s", code, h.Get("Location"))
	}
	code, _, page := do(t, c, "GET", srv.URL+"/ui/runs/"+r.ID, nil, nil)
	m := csrfRE.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("run page: %d, csrf %v", code, m)
	}
	if code, _, _ := do(t, client(t), "POST", srv.URL+"/ui/runs/"+r.ID+"/cancel", url.Values{"csrf": {m[1]}}, nil); code != http.StatusUnauthorized {
		t.Errorf("cancel from another browser (no session cookie) with a copied CSRF token: %d, want 401", code)
	}
	if code, _, _ := do(t, c, "POST", srv.URL+"/ui/runs/"+r.ID+"/cancel", url.Values{"csrf": {m[1]}}, nil); code != http.StatusSeeOther {
		t.Errorf("cancel with the session's token: %d", code)
	}
	e.Wait(r.ID, 20*time.Second)
}

// TestRunEventsStream: the events stream sends the rendered body at once and an end event
// when the run finishes; it is the only thing the page needs for live status.
func TestRunEventsStream(t *testing.T) {
	t.Parallel()
	e, srv := newAnonUI(t)
	r := e.Start("name: s\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop, with: {message: hello from a}}\n", nil)
	e.Wait(r.ID, 20*time.Second)
	for _, path := range []string{"/events", "/logs"} {
		resp, err := http.Get(srv.URL + "/ui/runs/" + r.ID + path)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("%s: content type %q", path, ct)
		}
		var events []string
		var data strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if ev, ok := strings.CutPrefix(l, "event: "); ok {
				events = append(events, ev)
			}
			if d, ok := strings.CutPrefix(l, "data: "); ok {
				data.WriteString(d + "\n")
			}
		}
		resp.Body.Close()
		if len(events) == 0 || events[len(events)-1] != "end" {
			t.Errorf("%s: events %v, want them to end with end", path, events)
		}
		switch path {
		case "/events":
			if !strings.Contains(data.String(), `st-succeeded`) || !strings.Contains(data.String(), `data-step="s.a"`) {
				t.Errorf("events data:\n%s", data.String())
			}
		case "/logs":
			if !strings.Contains(data.String(), "hello from a") {
				t.Errorf("log lines:\n%s", data.String())
			}
		}
	}
	for _, path := range []string{"", "/events", "/logs"} { // the page and its two streams
		if code, _, body := do(t, client(t), "GET", srv.URL+"/ui/runs/nope"+path, nil, nil); code != http.StatusNotFound {
			t.Errorf("GET /ui/runs/nope%s (an unknown run): %d %.300s, want 404", path, code, body)
		}
	}
}

// TestOutputsEscaped: outputs are data from forges and pipelines: markup is escaped, only
// http(s) URLs become links, and a SHA is shortened with its full value kept for copying.
func TestOutputsEscaped(t *testing.T) {
	t.Parallel()
	page := finishedRunPage(t, `name: x
stages:
  - id: s
    steps:
      - id: a
        type: Noop
        with:
          outputs:
            html: "<script>alert(1)</script>"
            js: "javascript:alert(1)"
            link: "https://forge.example/pr/1?a=1&b=<2>"
            sha: "89abcdef0123456789abcdef0123456789abcdef"
`)
	for _, bad := range []string{"<script>alert", `href="javascript:`} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %s", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `<a href="https://forge.example/pr/1?a=1&amp;b=&lt;2&gt;"`,
		`<code class="sha" title="89abcdef0123456789abcdef0123456789abcdef">89abcdef</code>`, `data-copy="89abcdef0123456789abcdef0123456789abcdef"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

// TestRunEventsAppStatus: a change of an app's status in prflow-apps (what the agent reports)
// re-renders the run page of a run whose steps named the app, with no run change.
func TestRunEventsAppStatus(t *testing.T) {
	t.Parallel()
	e, srv, r := appsEnv(t) // web-dev Healthy at 1111…
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/ui/runs/"+r.ID+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() string { return nextRun(t, sc) } // the data of the next run event
	if first := next(); !strings.Contains(first, `class="h-Healthy"`) || !strings.Contains(first, "11111111") {
		t.Fatalf("first render lacks the app's status:\n%s", first)
	}
	putApp(t, e, agent.HealthDegraded, "2222222222222222222222222222222222222222")
	if got := next(); !strings.Contains(got, `class="h-Degraded"`) || !strings.Contains(got, "22222222") {
		t.Fatalf("after the app turned Degraded:\n%s", got)
	}
	if err := e.Ctl.Cancel(context.Background(), r.ID, "test"); err != nil {
		t.Fatal(err)
	}
}
