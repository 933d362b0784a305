package verifytest

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
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

// App is a scrape target standing in for a released app: it serves Prometheus text metrics
// for a request counter that grows by RPS per second, split into code="200" and code="500" by
// the error ratio the test sets (SetErrorRatio), so rate() queries see the release go bad.
type App struct {
	*httptest.Server
	mu     sync.Mutex
	ratio  float64
	last   time.Time
	ok     float64
	errors float64
	rps    float64
	labels string // extra labels of every series, e.g. app="web-prod"
}

// NewApp starts a target serving /metrics with the given error ratio and 100 requests/s.
func NewApp(ratio float64) *App {
	a := &App{ratio: ratio, last: time.Now(), rps: 100}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

// NewAppLabelled is NewApp whose series also carry labels (Prometheus label syntax without
// braces, e.g. `app="web-prod"`), for queries that select an app by name.
func NewAppLabelled(ratio float64, labels string) *App {
	a := &App{ratio: ratio, last: time.Now(), rps: 100, labels: labels + ","}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

// SetErrorRatio changes the share of requests answered with 500 from now on.
func (a *App) SetErrorRatio(r float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.advance()
	a.ratio = r
}

func (a *App) advance() {
	now := time.Now()
	n := a.rps * now.Sub(a.last).Seconds()
	a.errors += n * a.ratio
	a.ok += n * (1 - a.ratio)
	a.last = now
}

func (a *App) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	a.advance()
	ok, bad := math.Floor(a.ok), math.Floor(a.errors)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP http_requests_total Requests served.\n# TYPE http_requests_total counter\n")
	fmt.Fprintf(w, "http_requests_total{%scode=\"200\"} %g\nhttp_requests_total{%scode=\"500\"} %g\n", a.labels, ok, a.labels, bad)
}

// Prometheus is a real Prometheus server (the Debian package's binary) on loopback.
type Prometheus struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPrometheus starts `prometheus` scraping targets (host:port) every second, with its
// configuration and storage in a temporary directory; it is killed at test cleanup. The binary
// must be installed (.ci/run installs the Debian package); a missing one fails the test.
func StartPrometheus(t testing.TB, targets ...string) *Prometheus {
	t.Helper()
	return StartPrometheusWith(t, "", nil, targets...)
}

// StartPrometheusWith is StartPrometheus with Prometheus's own web configuration (e.g.
// basic_auth_users) when webConfig is not empty. authorize, when not nil, signs the readiness
// probes: behind basic auth Prometheus answers 401 before it is ready, so a 401 says nothing.
func StartPrometheusWith(t testing.TB, webConfig string, authorize func(*http.Request), targets ...string) *Prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus binary not found (apt-get install prometheus; .ci/run installs it): %v", err)
	}
	dir := t.TempDir()
	cfg := "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: ["
	for i, tg := range targets {
		if i > 0 {
			cfg += ", "
		}
		cfg += fmt.Sprintf("%q", tg)
	}
	cfg += "]\n"
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &Prometheus{URL: "http://" + addr, done: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
		"--log.level=warn")
	if webConfig != "" {
		wc := filepath.Join(dir, "web.yml")
		if err := os.WriteFile(wc, []byte(webConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		p.cmd.Args = append(p.cmd.Args, "--web.config.file="+wc)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	go func() { _ = p.cmd.Wait(); _ = logf.Close(); close(p.done) }()
	t.Cleanup(p.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/-/ready", nil)
		if authorize != nil {
			authorize(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("prometheus exited: %s", b)
		case <-ctx.Done():
			t.Fatal("prometheus not ready after 60s")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill ends the server with SIGKILL and waits for it to be gone.
func (p *Prometheus) Kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// WaitSamples waits until query returns data (the target has been scraped enough for rate()).
func (p *Prometheus) WaitSamples(t testing.TB, query string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(p.URL + "/api/v1/query?query=" + url.QueryEscape(query))
		if err == nil {
			var b [4096]byte
			n, _ := resp.Body.Read(b[:])
			_ = resp.Body.Close()
			if resp.StatusCode == 200 && n > 0 && !containsEmptyResult(string(b[:n])) {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("prometheus has no data for %s after 90s", query)
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func containsEmptyResult(body string) bool { return strings.Contains(body, `"result":[]`) }
