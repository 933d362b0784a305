package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/scm/transport"
)

// get fetches url until it answers want (processes start in the background), returning the
// body.
func getUntil(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return string(body)
			}
			err = &httpError{Method: "GET", Path: url, Status: resp.StatusCode, Msg: string(body)}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: want %d, got %v", url, want, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWorkerAndAgentServeMetricsAndHealth: with --listen, prflow worker and prflow agent
// serve /healthz, /readyz (NATS connected) and /metrics with the Go runtime and process
// series; the server's /metrics has them too, beside its own.
func TestWorkerAndAgentServeMetricsAndHealth(t *testing.T) {
	dir := t.TempDir()
	tokens := cliTokens(t, dir)
	natsAddr := freeAddr(t)
	api := startServer(t, "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"), "--nats-listen", natsAddr)

	argo := argocdtest.New(argocdtest.WithToken("argo-token-0123456789"))
	t.Cleanup(argo.Close)
	tokFile := writeFile(t, dir, "argocd-token", "argo-token-0123456789\n")

	// The worker holds a connector to the fake GitHub: its forge calls show in its /metrics.
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", map[string]string{"config.json": "{\"tag\": \"1.0\"}\n"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PRFLOW_TEST_GH", scmtest.DefaultToken)
	cf := writeFile(t, dir, "connectors.yaml", "connectors:\n  - name: gh\n    provider: github\n    baseURL: "+gh.APIURL()+"\n    auth: {token: env:PRFLOW_TEST_GH}\n")

	wAddr, aAddr := freeAddr(t), freeAddr(t)
	startCmd(t, "worker", "--nats", "nats://"+natsAddr, "--log-level", "error", "--id", "wm", "--listen", wAddr, "--connectors", cf)
	startCmd(t, "agent", "--nats", "nats://"+natsAddr, "--log-level", "error", "--agent-id", "am", "--listen", aAddr,
		"--argocd-url", argo.URL(), "--argocd-token-file", tokFile)

	for name, addr := range map[string]string{"worker": wAddr, "agent": aAddr, "server": api} {
		if body := getUntil(t, "http://"+addr+"/healthz", 200); !strings.Contains(body, "ok") {
			t.Errorf("%s /healthz: %q", name, body)
		}
		getUntil(t, "http://"+addr+"/readyz", 200)
		m := getUntil(t, "http://"+addr+"/metrics", 200)
		for _, want := range []string{"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
			if !strings.Contains(m, "\n"+want) {
				t.Errorf("%s /metrics lacks %s", name, want)
			}
		}
		if name == "server" && !strings.Contains(m, "prflow_live_workers") {
			t.Errorf("server /metrics lacks its own series:\n%s", m)
		}
	}
	// The agent's re-lists: the one after connecting counts, with when it finished.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := getUntil(t, "http://"+aAddr+"/metrics", 200)
		if regexp.MustCompile(`(?m)^prflow_agent_resyncs_total [1-9]`).MatchString(m) &&
			regexp.MustCompile(`(?m)^prflow_agent_last_resync_timestamp_seconds [1-9]`).MatchString(m) &&
			regexp.MustCompile(`(?m)^prflow_agent_resync_repaired_total 0$`).MatchString(m) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent /metrics lacks its re-list:\n%s", grepLines(m, "prflow_agent"))
		}
	}
	// A run whose step calls the forge: the worker's transport metrics count the calls.
	p := writeFile(t, dir, "p.yaml", "name: m\nstages:\n  - id: s\n    steps:\n      - {id: u, type: UpdateReleaseRepo, with: {connector: gh, repo: acme/release, filePath: config.json, variables: [{name: tag, value: \"2.0\"}]}}\n")
	cli := []string{"--server", "http://" + api, "--token", "env:PRFLOW_TEST_TOKEN"}
	waitWorker(t, cli, "wm")
	if out, err := run(t, append([]string{"run", p, "-f"}, cli...)...); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	m := getUntil(t, "http://"+wAddr+"/metrics", 200)
	if !regexp.MustCompile(`(?m)^prflow_scm_requests_total\{[^}]*connector="gh"[^}]*provider="github"[^}]*status="20\d"\} [1-9]`).MatchString(m) {
		t.Errorf("worker /metrics lacks the forge calls:\n%s", grepLines(m, "prflow_scm"))
	}
	// A taken address is a clear error at start.
	if _, err := run(t, "worker", "--nats", "nats://"+natsAddr, "--listen", wAddr); err == nil || !strings.Contains(err.Error(), "--listen "+wAddr) {
		t.Errorf("worker on a taken --listen: %v", err)
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// metricNames are the names of every series the three processes can serve: the controller's
// (run, stage, step, queue and HTTP API series), the forge clients' (worker), Go runtime and
// process.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	tm, err := transport.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 1024)
	go func() {
		controller.NewMetrics(nil).Describe(ch)
		tm.Describe(ch)
		collectors.NewGoCollector().Describe(ch)
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}).Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

var promIdent = regexp.MustCompile(`\b((?:prflow|go|process)_[a-zA-Z0-9_]+)\b`)

// TestGrafanaDashboardUsesRealMetrics: every metric name in every expression of
// deploy/grafana/prflow.json is one the processes register (histogram _bucket/_sum/_count
// included), and the dashboard shows the run-level, forge and API series.
func TestGrafanaDashboardUsesRealMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/prflow.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("prflow.json: %v", err)
	}
	names := metricNames(t)
	used := map[string]bool{}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			ids := promIdent.FindAllStringSubmatch(tg.Expr, -1)
			if len(ids) == 0 {
				t.Errorf("panel %q: expression %q names no prflow, go or process metric", p.Title, tg.Expr)
			}
			for _, m := range ids {
				name := m[1]
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suf); ok && names[b] {
						base = b
					}
				}
				if !names[base] {
					t.Errorf("panel %q: %s is not a registered metric (expression %q)", p.Title, name, tg.Expr)
				}
				used[base] = true
			}
		}
	}
	if exprs == 0 {
		t.Fatal("no panel expressions")
	}
	for _, want := range []string{"prflow_runs", "prflow_runs_finished_total", "prflow_run_duration_seconds", "prflow_stage_duration_seconds",
		"prflow_approvals_pending", "prflow_parked_steps_by_reason", "prflow_scm_requests_total", "prflow_scm_retries_total",
		"prflow_scm_rate_limit_remaining", "prflow_http_requests_total", "prflow_http_request_duration_seconds", "prflow_queue_depth",
		"go_goroutines", "process_resident_memory_bytes"} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	if t.Failed() {
		var all []string
		for n := range names {
			if strings.HasPrefix(n, "prflow_") {
				all = append(all, n)
			}
		}
		sort.Strings(all)
		t.Logf("registered prflow metrics: %s", strings.Join(all, " "))
	}
}
