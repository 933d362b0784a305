package argocdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- a real git smart-HTTP server: git http-backend behind net/http/cgi ----

type gitServer struct {
	t       testing.TB
	root    string // GIT_PROJECT_ROOT with <name>.git bare repos
	work    string // worktrees
	srv     *httptest.Server
	user    string
	pass    string
	mu      sync.Mutex
	inited  map[string]bool
	current map[string]string // repo -> checked-out branch
}

func newGitServer(t testing.TB, user, pass string) *gitServer {
	t.Helper()
	g := &gitServer{t: t, root: t.TempDir(), work: t.TempDir(), user: user, pass: pass, inited: map[string]bool{}, current: map[string]string{}}
	backend := &cgi.Handler{
		Path:   "/usr/lib/git-core/git-http-backend",
		Env:    []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
		Stderr: io.Discard,
	}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// url of repo name, with credentials when the server requires them.
func (g *gitServer) url(name string) string {
	u, _ := url.Parse(g.srv.URL + "/" + name + ".git")
	if g.user != "" {
		u.User = url.UserPassword(g.user, g.pass)
	}
	return u.String()
}

func (g *gitServer) git(dir string, args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (and removes deletes) on branch of repo, pushes, and
// returns the new commit SHA. The first branch of a repo becomes its HEAD.
func (g *gitServer) commit(repo, branch string, files map[string]string, deletes ...string) string {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	bare := filepath.Join(g.root, repo+".git")
	wt := filepath.Join(g.work, repo)
	if !g.inited[repo] {
		g.git("", "init", "-q", "--bare", "-b", branch, bare)
		g.git("", "init", "-q", "-b", branch, wt)
		g.git(wt, "remote", "add", "origin", bare)
		g.inited[repo] = true
	}
	switch cur := g.current[repo]; {
	case cur == "":
		g.current[repo] = branch // fresh worktree, already on branch
	case cur == branch:
	case g.git(wt, "branch", "--list", branch) != "":
		g.git(wt, "checkout", "-q", branch)
		g.current[repo] = branch
	default:
		g.git(wt, "checkout", "-q", "-b", branch)
		g.current[repo] = branch
	}
	for p, c := range files {
		full := filepath.Join(wt, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
	for _, p := range deletes {
		g.git(wt, "rm", "-q", "-r", p)
	}
	g.git(wt, "add", "-A")
	g.git(wt, "commit", "-q", "--allow-empty", "-m", "change")
	g.git(wt, "push", "-q", "origin", branch)
	return g.git(wt, "rev-parse", "HEAD")
}

func (g *gitServer) tag(repo, tag string) {
	g.t.Helper()
	wt := filepath.Join(g.work, repo)
	g.git(wt, "tag", "-a", "-m", tag, tag)
	g.git(wt, "push", "-q", "origin", tag)
}

// ---- fake setup ----

const configMapHealthy = `apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
data:
  simulate: healthy
`

func configMap(name, simulate string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  simulate: " + simulate + "\n"
}

// newFake starts a fake with MemGit holding repo "https://git.example/demo.git"
// whose main branch has apps/demo/cm.yaml, and registers Close.
func newFake(t testing.TB, opts ...Option) (*Server, *MemGit, string) {
	t.Helper()
	mg := NewMemGit()
	repo := "https://git.example/demo.git"
	sha := mg.Commit(repo, "main", map[string]string{"apps/demo/cm.yaml": configMapHealthy})
	s := New(append([]Option{WithGitReader(mg), WithTimeline(3*time.Millisecond, 1)}, opts...)...)
	t.Cleanup(s.Close)
	return s, mg, sha
}

func demoApp(name, repo, path string) Application {
	return Application{
		Metadata: ObjectMeta{Name: name, Labels: map[string]string{"team": "payments"}},
		Spec: ApplicationSpec{
			Project:     "default",
			Source:      &ApplicationSource{RepoURL: repo, Path: path, TargetRevision: "main"},
			Destination: ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "demo"},
		},
	}
}

// ---- HTTP client helpers ----

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// call sends a request with the admin token and Content-Type JSON unless
// headers override them ("" removes a header).
func call(t testing.TB, s *Server, method, path string, body any, headers ...string) resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token())
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

func getApp(t testing.TB, s *Server, name string) Application {
	t.Helper()
	var a Application
	getJSON(t, s, "/api/v1/applications/"+name, "GET app "+name, &a)
	return a
}

// getJSON GETs path, fails the test (naming what) unless the answer is 200, and decodes the
// body into out.
func getJSON(t testing.TB, s *Server, path, what string, out any) resp {
	t.Helper()
	r := call(t, s, "GET", path, nil)
	if r.status != 200 {
		t.Fatalf("%s: %d %s", what, r.status, r.body)
	}
	r.json(t, out)
	return r
}

func wantError(t testing.TB, r resp, status, code int, msg string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	var e ErrorBody
	r.json(t, &e)
	if e.Code != code || e.Error != msg || e.Message != msg {
		t.Fatalf("error body = %s, want code %d message %q", r.body, code, msg)
	}
}

// ---- stream reader ----

type streamMsg struct {
	raw    string
	Result *ApplicationWatchEvent `json:"result"`
	Error  *StreamError           `json:"error"`
}

type stream struct {
	t    testing.TB
	res  *http.Response
	msgs chan streamMsg
	done chan error // read error (nil on clean EOF)
}

// openStream opens /api/v1/stream/applications?query and reads it in the
// background. accept "" means plain JSON lines.
func openStream(t testing.TB, s *Server, query, accept string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/api/v1/stream/applications?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token())
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{t: t, res: res, msgs: make(chan streamMsg, 1000), done: make(chan error, 1)}
	go func() {
		defer res.Body.Close()
		br := bufio.NewReader(res.Body)
		for {
			line, err := br.ReadString('\n')
			if l := strings.TrimRight(line, "\n"); strings.TrimSpace(l) != "" {
				payload := l
				if accept == "text/event-stream" {
					if !strings.HasPrefix(l, "data: ") {
						st.msgs <- streamMsg{raw: l}
						continue
					}
					payload = strings.TrimSuffix(strings.TrimPrefix(l, "data: "), " ")
				}
				m := streamMsg{raw: l}
				_ = json.Unmarshal([]byte(payload), &m)
				st.msgs <- m
			}
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				st.done <- err
				close(st.msgs)
				return
			}
		}
	}()
	return st
}

// next returns the next message or fails after a generous timeout.
func (st *stream) next() streamMsg {
	st.t.Helper()
	select {
	case m, ok := <-st.msgs:
		if !ok {
			st.t.Fatal("stream ended")
		}
		return m
	case <-time.After(10 * time.Second):
		st.t.Fatal("timed out waiting for a stream message")
	}
	return streamMsg{}
}

// until reads events until pred holds and returns all events read.
func (st *stream) until(pred func(ApplicationWatchEvent) bool) []ApplicationWatchEvent {
	st.t.Helper()
	var evs []ApplicationWatchEvent
	for {
		m := st.next()
		if m.Result == nil {
			continue
		}
		evs = append(evs, *m.Result)
		if pred(*m.Result) {
			return evs
		}
	}
}

func synced(rev, health string) func(ApplicationWatchEvent) bool {
	return func(ev ApplicationWatchEvent) bool {
		s := ev.Application.Status
		return s.Sync.Status == SyncStatusSynced && s.Sync.Revision == rev && s.Health.Status == health
	}
}

// waitApp polls the Go API until pred holds (no timing assertion: it only
// bounds a hang).
func waitApp(t testing.TB, s *Server, name string, pred func(Application) bool) Application {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, ok := s.App(name)
		if ok && pred(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for app %s; last status %+v", name, a.Status)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func state(a Application) string {
	phase := "-"
	if a.Status.OperationState != nil {
		phase = a.Status.OperationState.Phase
	}
	return a.Status.Sync.Status + "/" + a.Status.Health.Status + "/" + phase
}
