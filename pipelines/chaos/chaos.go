// Package chaos runs many promotions on one release repo through real prflow processes — a
// `prflow server` with its embedded NATS, several `prflow worker`s and the simulated agent —
// while SIGKILLing workers and the server at seeded moments, then checks what the release
// repo, the run states and the worker logs show: every run ended and succeeded, one PR and
// one merge per run, no lost update, no value applied twice, no leftover branch or open PR,
// and no job executed twice at the same time. `task chaos` runs the full suite
// (TestChaosFull); CI runs a short seeded one (TestChaosShort).
//
// It lives in the pipelines layer because it reads runs with the controller's own types
// (pipelines, pipelines/controller), which a package lower down (deploy) may not import; a
// command folder holds only commands. deploy/cluster's tests reuse its checks.
package chaos

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/scm/scmtest"
)

// Config sets one chaos run.
type Config struct {
	Bin         string // the prflow binary
	Dir         string // scratch directory (the caller removes it)
	Runs        int
	Seed        uint64
	Workers     int
	Concurrency int // per worker
	WorkerKills int
	ServerKills int
	// KillWindow: kills happen at seeded moments within this time after the last run started,
	// skipped once every run has ended.
	KillWindow time.Duration
	// Timeout bounds the wait for every run to end.
	Timeout time.Duration
	// AckWait is the workers' redelivery timeout (short, so a killed worker's jobs come back soon).
	AckWait time.Duration
	// NoPRComments starts the server with --pr-comments=false (PR comments are on by default
	// and checked: each is posted once, found again by its hidden marker on redelivery).
	NoPRComments bool
	Out          io.Writer // progress lines
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 3
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.KillWindow <= 0 {
		c.KillWindow = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.AckWait <= 0 {
		c.AckWait = 6 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Result is what a chaos run found.
type Result struct {
	Config      Config
	Specs       []RunSpec
	Runs        map[string]RunResult
	Checks      []Check
	WorkerKills int
	ServerKills int
	// Processes that exited by themselves and were started again, as a supervisor would.
	WorkerExits, AgentExits, ServerExits int
	Wall                                 time.Duration
}

// OK reports whether every check passed.
func (r *Result) OK() bool {
	for _, c := range r.Checks {
		if !c.OK() {
			return false
		}
	}
	return len(r.Checks) > 0
}

// Summary is the table printed at the end, followed by each failed check's misses (at most
// maxDetails each).
func (r *Result) Summary(maxDetails int) string {
	var b strings.Builder
	groups := map[Group]int{}
	for _, s := range r.Specs {
		groups[s.Group]++
	}
	fmt.Fprintf(&b, "chaos summary (seed %d)\n", r.Config.Seed)
	fmt.Fprintf(&b, "  %-34s %d (%d %s, %d %s, %d %s)\n", "runs", len(r.Specs),
		groups[DistinctFiles], DistinctFiles, groups[DistinctKeys], DistinctKeys, groups[OneKey], OneKey)
	fmt.Fprintf(&b, "  %-34s %d × concurrency %d\n", "workers", r.Config.Workers, r.Config.Concurrency)
	fmt.Fprintf(&b, "  %-34s %d\n", "worker kills (SIGKILL, restarted)", r.WorkerKills)
	fmt.Fprintf(&b, "  %-34s %d\n", "server kills (SIGKILL, restarted)", r.ServerKills)
	fmt.Fprintf(&b, "  %-34s %d workers, %d agents, %d servers\n", "exited by themselves (restarted)", r.WorkerExits, r.AgentExits, r.ServerExits)
	fmt.Fprintf(&b, "  %-34s %s\n", "wall time", r.Wall.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "  %-34s %8s %8s\n", "check", "of", "misses")
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK() {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %-34s %8d %8d  %s\n", c.Name, c.Counted, c.Bad, mark)
	}
	for _, c := range r.Checks {
		if c.OK() {
			continue
		}
		fmt.Fprintf(&b, "FAIL %s: %d misses\n", c.Name, c.Bad)
		for i, d := range c.Details {
			if i == maxDetails {
				fmt.Fprintf(&b, "    … %d more\n", len(c.Details)-maxDetails)
				break
			}
			fmt.Fprintf(&b, "    %s\n", d)
		}
	}
	return b.String()
}

const (
	pipelineName = "chaos"
	branchPrefix = "prflow/" + pipelineName + "/"
	watchDir     = "chaos"
	owner, repo  = "acme", "release"
)

// Specs returns the runs of a chaos run: a third each on distinct files, on distinct keys of
// one file, and on one key. Values are unique per run and seed.
func Specs(n int, seed uint64) []RunSpec {
	out := make([]RunSpec, n)
	for i := range out {
		s := RunSpec{ID: fmt.Sprintf("chaos-s%d-%02d", seed, i), Value: fmt.Sprintf("v%d-%02d", seed, i)}
		switch i % 3 {
		case 0:
			s.Group, s.File, s.Key = DistinctFiles, fmt.Sprintf("%s/files/run-%02d.json", watchDir, i), "value"
		case 1:
			s.Group, s.File, s.Key = DistinctKeys, watchDir+"/shared.json", fmt.Sprintf("runs.r%02d", i)
		default:
			s.Group, s.File, s.Key = OneKey, watchDir+"/onekey.json", "value"
		}
		out[i] = s
	}
	return out
}

// Pipeline is the pipeline name of run s: the promotion of one value in release repo repo
// (owner/name), as `prflow dev` does it (update the file, merge, find the app, sync it and
// wait until healthy).
func Pipeline(name, repo string, s RunSpec) []byte {
	return fmt.Appendf(nil, `name: %s
service: {name: web}
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
stages:
  - id: promote
    environment: dev
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: %s
          filePath: %q
          create: true
          variables: [{name: %q, type: String, value: %q}]
      - id: merge
        type: MergePR
        with: {mergeStrategy: merge, deleteSourceBranch: true}
      - id: apps
        type: FetchLinkedApps
        timeout: 2m
      - id: sync
        type: GitOpsSync
        timeout: 3m
        with: {waitTillHealthy: true, failOnTimeout: true}
`, name, repo, s.File, s.Key, s.Value)
}

// proc is one child process; its combined output goes to logPath.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	exitAt  time.Time
	killed  bool
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process and waits for it; its end is when it was reaped.
func (p *proc) kill() {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.killed = true
}

// stop asks for a graceful stop, then kills after grace.
func (p *proc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

type harness struct {
	cfg          Config
	rng          *rand.Rand
	env          []string
	apiURL       string
	apiToken     string
	natsURL      string
	server       *proc
	agent        *proc
	workers      []*proc // current process of each worker slot
	gens         []int
	serverStarts int
	agentStarts  int
	agentArgs    []string
	all          []*proc // every process started, for the logs and the final cleanup
	http         *http.Client
	logf         func(format string, a ...any)
}

// Run runs one chaos run. The error is for the harness itself failing (a process that does
// not start, a repo that cannot be read); what prflow got wrong is in Result.Checks.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	cfg.defaults()
	if cfg.Runs <= 0 {
		return nil, errors.New("chaos: Runs must be > 0")
	}
	start := time.Now()
	h := &harness{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6368616f73)), http: &http.Client{Timeout: 10 * time.Second}}
	h.logf = func(format string, a ...any) {
		fmt.Fprintf(cfg.Out, "%s chaos: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
	}
	defer h.killAll()

	// The release repo, served by the real git smart-HTTP backend from this process (never killed).
	gitToken, apiToken := randomToken(), randomToken()
	h.apiToken = apiToken
	gs, err := scmtest.OpenGitServer(filepath.Join(cfg.Dir, "git"), scmtest.WithToken(gitToken, "chaos"))
	if err != nil {
		return nil, err
	}
	defer gs.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gitSrv := &http.Server{Handler: gs, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = gitSrv.Serve(ln) }()
	defer gitSrv.Close()
	gs.SetBaseURL("http://" + ln.Addr().String())
	files := examples.ReleaseRepo()
	files[watchDir+"/shared.json"] = "{\n  \"runs\": {}\n}\n"
	files[watchDir+"/onekey.json"] = "{\n  \"value\": \"seed\"\n}\n"
	seed, err := gs.CreateRepo(owner, repo, files)
	if err != nil {
		return nil, fmt.Errorf("seed the release repo: %w", err)
	}

	// Config files: secrets by env reference only.
	connectors := filepath.Join(cfg.Dir, "connectors.yaml")
	tokens := filepath.Join(cfg.Dir, "tokens.yaml")
	if err := os.WriteFile(connectors, fmt.Appendf(nil, `connectors:
  - name: release
    provider: local
    baseURL: %s
    auth: {token: env:CHAOS_GIT_TOKEN, username: x-access-token}
    author: {name: prflow, email: prflow@chaos.invalid}
`, gs.URL()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tokens, []byte("tokens:\n  - user: chaos\n    token: env:CHAOS_API_TOKEN\n"), 0o600); err != nil {
		return nil, err
	}
	h.env = append(os.Environ(), "CHAOS_GIT_TOKEN="+gitToken, "CHAOS_API_TOKEN="+apiToken)
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	h.apiURL, h.natsURL = "http://"+apiAddr, "nats://"+natsAddr
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	serverArgs := []string{"server", "--listen", apiAddr, "--nats-listen", natsAddr, "--data-dir", filepath.Join(cfg.Dir, "nats"),
		"--tokens", tokens, "--log-format", "json", "--log-level", "info"}
	if cfg.NoPRComments {
		serverArgs = append(serverArgs, "--pr-comments=false")
	}
	startServer := func() error {
		p, err := h.start(fmt.Sprintf("server-%d", h.serverStarts), serverArgs...)
		h.serverStarts++
		if err != nil {
			return err
		}
		h.server = p
		return h.waitReady(ctx, 90*time.Second)
	}
	if err := startServer(); err != nil {
		return nil, err
	}
	h.agentArgs = []string{"agent", "--nats", h.natsURL, "--agent-id", "sim", "--sim-repo", gs.Dir(owner, repo),
		"--sim-branch", "main", "--sim-delay", "300ms", "--log-format", "json"}
	if err := h.startAgent(); err != nil {
		return nil, err
	}
	h.workers, h.gens = make([]*proc, cfg.Workers), make([]int, cfg.Workers)
	for i := range h.workers {
		if err := h.startWorker(i); err != nil {
			return nil, err
		}
	}

	specs := Specs(cfg.Runs, cfg.Seed)
	res = &Result{Config: cfg, Specs: specs}
	deadline := time.Now().Add(cfg.Timeout)
	for _, s := range specs {
		if err := h.startRun(ctx, s, deadline); err != nil {
			return nil, err
		}
	}
	h.logf("%d runs started", len(specs))

	// The kill schedule: seeded moments within the window, in order.
	type event struct {
		at     time.Duration
		server bool
	}
	var events []event
	for range cfg.WorkerKills {
		events = append(events, event{at: time.Duration(h.rng.Int64N(int64(cfg.KillWindow)))})
	}
	for range cfg.ServerKills {
		events = append(events, event{at: time.Duration(h.rng.Int64N(int64(cfg.KillWindow))), server: true})
	}
	sort.Slice(events, func(i, j int) bool { return events[i].at < events[j].at })
	restarts := map[int]time.Time{} // worker slot → when to start it again
	t0 := time.Now()
	results := map[string]RunResult{}
	lastPoll := time.Time{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := time.Now()
		for len(events) > 0 && now.Sub(t0) >= events[0].at {
			ev := events[0]
			events = events[1:]
			if allTerminal(specs, results) {
				continue
			}
			if ev.server {
				res.ServerKills++
				h.logf("SIGKILL server (kill %d)", res.ServerKills)
				h.server.kill()
				time.Sleep(time.Duration(500+h.rng.IntN(1500)) * time.Millisecond)
				if err := startServer(); err != nil {
					return nil, fmt.Errorf("restart the server on its data dir: %w", err)
				}
				h.logf("server restarted")
				continue
			}
			// A random live worker; a slot waiting for its restart is passed over.
			slot, first := -1, h.rng.IntN(cfg.Workers)
			for i := range cfg.Workers {
				if p := h.workers[(first+i)%cfg.Workers]; p.alive() {
					slot = (first + i) % cfg.Workers
					break
				}
			}
			if slot < 0 {
				h.logf("no live worker to kill; kill skipped")
				continue
			}
			p := h.workers[slot]
			res.WorkerKills++
			h.logf("SIGKILL worker %s (kill %d)", p.name, res.WorkerKills)
			p.kill()
			restarts[slot] = time.Now().Add(time.Duration(200+h.rng.IntN(1300)) * time.Millisecond)
		}
		// Supervise like a process manager: a process that exited by itself is started again
		// (and counted: the summary shows it).
		for slot, p := range h.workers {
			if _, pending := restarts[slot]; !pending && !p.alive() {
				res.WorkerExits++
				h.logf("worker %s exited by itself: %s", p.name, tail(p.logPath, 1))
				restarts[slot] = time.Now().Add(time.Second)
			}
		}
		if !h.agent.alive() {
			res.AgentExits++
			h.logf("agent exited by itself: %s", tail(h.agent.logPath, 1))
			time.Sleep(time.Second)
			if err := h.startAgent(); err != nil {
				return nil, err
			}
		}
		if !h.server.alive() {
			res.ServerExits++
			h.logf("server exited by itself: %s", tail(h.server.logPath, 1))
			if err := startServer(); err != nil {
				return nil, fmt.Errorf("restart the server after it exited: %w", err)
			}
		}
		for slot, at := range restarts {
			if time.Now().After(at) {
				delete(restarts, slot)
				if err := h.startWorker(slot); err != nil {
					return nil, err
				}
			}
		}
		if time.Since(lastPoll) >= time.Second {
			lastPoll = time.Now()
			h.poll(ctx, specs, results)
			if allTerminal(specs, results) && len(restarts) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			h.logf("timeout: not every run ended within %s", cfg.Timeout)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.logf("runs ended (or timed out); stopping the processes")
	// Feedback jobs (PR comments) may still be running: give them a moment, then drain.
	time.Sleep(time.Second)
	h.poll(ctx, specs, results)
	for _, w := range h.workers {
		if w != nil {
			w.stop(15 * time.Second)
		}
	}
	h.agent.stop(10 * time.Second)
	h.server.stop(15 * time.Second)
	res.Runs = results

	var execs []Exec
	var handBacks []string
	crashes := map[string]string{}
	for _, p := range h.all {
		if f, err := os.Open(p.logPath); err == nil {
			if l := CrashLine(f); l != "" {
				crashes[p.name] = l + " (see " + p.logPath + ")"
			}
			f.Close()
		}
		if !strings.HasPrefix(p.name, "worker-") {
			continue
		}
		f, err := os.Open(p.logPath)
		if err != nil {
			return nil, err
		}
		ex, err := ParseWorkerLog(f, p.name, p.exitAt, p.killed)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err == nil {
			for _, at := range HandBacks(f) {
				handBacks = append(handBacks, p.name+" at "+at.Format("15:04:05.000"))
			}
		}
		f.Close()
		if err != nil {
			return nil, err
		}
		execs = append(execs, ex...)
	}
	st, err := ReadRepo(gs.Dir(owner, repo), "main", seed, watchDir)
	if err != nil {
		return nil, err
	}
	res.Checks = Evaluate(specs, Observed{Runs: results, Repo: st, Execs: execs, Crashes: crashes, BranchPrefix: branchPrefix, HandBacks: handBacks})
	res.Wall = time.Since(start)
	return res, nil
}

func (h *harness) startAgent() error {
	p, err := h.start(fmt.Sprintf("agent-%d", h.agentStarts), h.agentArgs...)
	if err != nil {
		return err
	}
	h.agentStarts++
	h.agent = p
	return nil
}

func (h *harness) startWorker(slot int) error {
	id := fmt.Sprintf("w%d-%d", slot, h.gens[slot])
	h.gens[slot]++
	p, err := h.start("worker-"+id, "worker", "--nats", h.natsURL, "--id", id, "--connectors", filepath.Join(h.cfg.Dir, "connectors.yaml"),
		"--concurrency", fmt.Sprint(h.cfg.Concurrency), "--ack-wait", h.cfg.AckWait.String(), "--drain-timeout", "5s",
		"--log-format", "json", "--log-level", "debug")
	if err != nil {
		return err
	}
	h.workers[slot] = p
	return nil
}

// start runs the prflow binary with args, its output in logs/<name>.log.
func (h *harness) start(name string, args ...string) (*proc, error) {
	logPath := filepath.Join(h.cfg.Dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.cfg.Bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = h.env, f, f
	// If this process dies without its cleanup (a test timeout panics), its children die too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start prflow %s: %w", args[0], err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.exitAt = time.Now()
		f.Close()
		close(p.done)
	}()
	h.all = append(h.all, p)
	return p, nil
}

func (h *harness) killAll() {
	for _, p := range h.all {
		p.kill()
	}
}

// waitReady waits until the server answers /readyz.
func (h *harness) waitReady(ctx context.Context, limit time.Duration) error {
	end := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", h.apiURL+"/readyz", nil)
		resp, err := h.http.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !h.server.alive() {
			return fmt.Errorf("prflow server exited before it was ready; see %s:\n%s", h.server.logPath, tail(h.server.logPath, 20))
		}
		if time.Now().After(end) {
			return fmt.Errorf("prflow server not ready after %s; see %s", limit, h.server.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startRun starts a run with its own id, so a retry after a lost answer (the server killed
// mid-request) finds the same run instead of starting a second one.
func (h *harness) startRun(ctx context.Context, s RunSpec, deadline time.Time) error {
	body, _ := json.Marshal(controller.StartRequest{ID: s.ID, File: s.ID + ".yaml", Source: Pipeline(pipelineName, owner+"/"+repo, s)})
	for {
		code, data, err := h.api(ctx, "POST", "/api/v1/runs", body)
		switch {
		case err == nil && (code == http.StatusCreated || code == http.StatusOK):
			return nil
		case err == nil && code == http.StatusConflict:
			// Refused by the run-start check: the workers or the agent have not registered
			// yet (or are being restarted). Nothing was started; try again until the deadline.
		case err == nil && code < 500:
			return fmt.Errorf("start run %s: HTTP %d: %s", s.ID, code, data)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start run %s: %v HTTP %d %s", s.ID, err, code, data)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// poll reads the state of every run not yet terminal; a server that is down is tried again
// at the next poll.
func (h *harness) poll(ctx context.Context, specs []RunSpec, results map[string]RunResult) {
	for _, s := range specs {
		if r, ok := results[s.ID]; ok && terminal(r.Status) {
			continue
		}
		code, data, err := h.api(ctx, "GET", "/api/v1/runs/"+s.ID, nil)
		if err != nil || code != http.StatusOK {
			return
		}
		var run pipelines.Run
		if err := json.Unmarshal(data, &run); err != nil {
			return
		}
		results[s.ID] = RunResult{Status: string(run.Status), Error: run.Error, Where: where(&run)}
	}
}

// where names the first step that failed or has not finished, with its status and error.
func where(r *pipelines.Run) string {
	for _, st := range r.Stages {
		for _, list := range [][]*pipelines.StepRun{st.Steps, st.Rollback} {
			for _, s := range list {
				switch s.Status {
				case pipelines.StSucceeded, pipelines.StSkipped, pipelines.StPending:
					continue
				}
				msg := st.ID + "/" + s.ID + " " + string(s.Status)
				if s.Error != "" {
					msg += " (" + s.Error + ")"
				} else if s.Wait != nil && s.Wait.Reason != "" {
					msg += " (" + s.Wait.Reason + ")"
				}
				return msg
			}
		}
	}
	return ""
}

func (h *harness) api(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.apiURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, data, err
}

func allTerminal(specs []RunSpec, results map[string]RunResult) bool {
	for _, s := range specs {
		if !terminal(results[s.ID].Status) {
			return false
		}
	}
	return true
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// freeAddr returns a loopback address free right now; the server keeps it across restarts.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
