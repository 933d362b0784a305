package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/steps"
)

// The TestReal… tests run prflow against the real Argo CD of ../shared/realenv (up.sh):
// argocd-server, application controller, repo-server and ApplicationSet controller on a real
// kube-apiserver, reading a real git server. Each test makes its own release repo on realenv's
// git server (the local driver pushes and merges there), its own ApplicationSet (git files
// generator over envs/*/config.json, a jsonnet app rendering a ConfigMap whose data.simulate
// the Lua health check of up.sh reads) and its own names, so they do not see each other.
// They are skipped unless PRFLOW_REALENV names realenv.env; `task e2e-real` runs them.

// realEnv is one test's view of the realenv.
type realEnv struct {
	t    *testing.T
	vars map[string]string
	dir  string // $REALENV
	home string // HOME for git commands (realenv's identity)
	id   string // unique per test: repo, ApplicationSet, service and namespaces
	repo string // release repo name on the git server ("<id>")
	url  string // its URL (what Argo CD reads)
	e    *ctltest.Env
	set  string // ApplicationSet name
	auto bool   // the apps sync automatically
	log  *slog.Logger
	// project is the AppProject of the generated apps ("default" unless a test makes its own).
	project string
}

func realSetup(t *testing.T, envs ...string) *realEnv {
	t.Helper()
	return realSetupWith(t, false, envs...)
}

// realSetupAgent is realSetup once the envs' apps exist, with agent "real" running.
func realSetupAgent(t *testing.T, envs ...string) *realEnv {
	t.Helper()
	r := realSetup(t, envs...)
	r.waitApps(envs...)
	r.startAgent(r.vars["ARGOCD_TOKEN"], argocd.AppSetRefreshOptions{})
	return r
}

// realSetupWith is realSetup; auto gives the generated apps Argo CD's automated sync.
func realSetupWith(t *testing.T, auto bool, envs ...string) *realEnv {
	t.Helper()
	return realSetupOpts(t, realOpts{auto: auto, envs: envs})
}

// realSetupProject is realSetupWith; windows, when not nil, are the sync windows of an
// AppProject the test makes for its apps (deleted at the end) instead of "default".
func realSetupProject(t *testing.T, auto bool, windows []map[string]any, envs ...string) *realEnv {
	t.Helper()
	return realSetupOpts(t, realOpts{auto: auto, envs: envs, windows: windows})
}

// realOpts: files and appSet replace the generated release repo and ApplicationSet (id then
// names the ApplicationSet and the service); windows as for realSetupProject.
type realOpts struct {
	auto    bool
	envs    []string
	id      string
	files   map[string]string
	appSet  func(r *realEnv) map[string]any
	windows []map[string]any
	// policies are files of examples/policies the controller loads (--policies).
	policies []string
}

func realSetupOpts(t *testing.T, o realOpts) *realEnv {
	t.Helper()
	envFile := os.Getenv("PRFLOW_REALENV")
	if envFile == "" {
		t.Skip("set PRFLOW_REALENV to realenv.env (after ../shared/realenv/up.sh) to run against a real Argo CD")
	}
	vars := readEnvFile(t, envFile)
	for _, k := range []string{"ARGOCD_URL", "ARGOCD_TOKEN", "GIT_URL", "KUBECONFIG"} {
		if vars[k] == "" {
			t.Fatalf("%s lacks %s", envFile, k)
		}
	}
	dir := filepath.Dir(envFile)
	id := fmt.Sprintf("r%s%d", strings.ToLower(strings.TrimPrefix(t.Name(), "TestReal"))[:min(6, len(t.Name())-8)], time.Now().UnixNano()%1e5)
	id = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, id)
	r := &realEnv{t: t, vars: vars, dir: dir, home: filepath.Join(dir, "data", "home"), id: id, repo: id, set: id, auto: o.auto}
	if o.id != "" {
		r.id, r.set = o.id, o.id
	}
	gitBase := strings.TrimSuffix(vars["GIT_URL"], "/demo.git")
	r.url = gitBase + "/" + r.repo + ".git"
	if o.files != nil {
		r.seedFiles(o.files)
	} else {
		r.seedRepo(o.envs)
	}
	p, err := local.New(gitBase)
	if err != nil {
		t.Fatal(err)
	}
	r.e = ctltest.New(t, ctltest.Options{Concurrency: 8, Listen: "127.0.0.1:0",
		Services:   map[string]any{steps.ServiceSCM: connector.Static{"release": p}},
		Tuning:     queue.ConsumerTuning{AckWait: 10 * time.Second, MaxDeliver: 5},
		Controller: realPolicies(t, o.policies)})
	r.log = slog.New(slog.NewJSONHandler(r.e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.project = "default"
	if o.windows != nil {
		r.createProject(o.windows)
	}
	if o.appSet != nil {
		if code, body := r.api("POST", "/api/v1/applicationsets", o.appSet(r)); code != 200 {
			t.Fatalf("create ApplicationSet: %d %s", code, body)
		}
	} else {
		r.createAppSet()
	}
	t.Cleanup(func() {
		r.api("DELETE", "/api/v1/applicationsets/"+r.set, nil)
		if t.Failed() {
			t.Logf("prflow logs (last 20000 bytes):\n%s", tail(r.e.Logs.String(), 20000))
		}
	})
	return r
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// realConfig is an environment's config.json (the example release repo's shape).
func realConfig(env string) string {
	return "{\n  \"env\": \"" + env + "\",\n  \"image\": {\"repository\": \"registry.example.com/shop/web\", \"tag\": \"1.4.1\"},\n  \"replicas\": 2\n}\n"
}

// git runs git with realenv's identity in dir.
func (r *realEnv) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.home, "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// seedRepo creates the release repo on realenv's git server with the example's jsonnet and
// one config.json per environment.
func (r *realEnv) seedRepo(envs []string) {
	r.t.Helper()
	jsonnet, err := os.ReadFile("../../examples/release-repo/manifests/web/web.jsonnet")
	if err != nil {
		r.t.Fatal(err)
	}
	files := map[string]string{"manifests/web/web.jsonnet": string(jsonnet)}
	for _, e := range envs {
		files["envs/"+e+"/config.json"] = realConfig(e)
	}
	r.seedFiles(files)
}

// seedFiles creates the release repo on realenv's git server with these files on main.
func (r *realEnv) seedFiles(files map[string]string) {
	r.t.Helper()
	bare := filepath.Join(r.dir, "data", "git", r.repo+".git")
	r.git(r.dir, "init", "-q", "--bare", "-b", "main", bare)
	r.t.Cleanup(func() { _ = os.RemoveAll(bare) })
	work := r.t.TempDir()
	r.git(work, "init", "-q", "-b", "main")
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(work, filepath.Dir(p)), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, p), []byte(c), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git(work, "add", "-A")
	r.git(work, "commit", "-qm", "release repo")
	r.git(work, "push", "-q", r.url, "main")
}

// createAppSet creates the test's ApplicationSet through Argo CD's API.
func (r *realEnv) createAppSet() {
	r.t.Helper()
	as := map[string]any{
		"metadata": map[string]any{"name": r.set, "namespace": "argocd"},
		"spec": map[string]any{
			"generators": []any{map[string]any{"git": map[string]any{"repoURL": r.url, "revision": "main",
				"files": []any{map[string]any{"path": "envs/*/config.json"}}}}},
			"template": map[string]any{
				"metadata": map[string]any{"name": r.id + "-{{path.basename}}",
					"labels": map[string]any{"harness.io/serviceRef": r.id, "harness.io/envRef": "{{path.basename}}"}},
				"spec": map[string]any{"project": r.project,
					"source": map[string]any{"repoURL": r.url, "targetRevision": "main", "path": "manifests/web",
						"directory": map[string]any{"include": "*.jsonnet", "jsonnet": map[string]any{"tlas": []any{
							map[string]any{"name": "env", "value": "{{path.basename}}"},
							map[string]any{"name": "image", "value": "{{image.repository}}:{{image.tag}}"},
							map[string]any{"name": "replicas", "value": "{{replicas}}"},
							map[string]any{"name": "simulate", "value": "{{simulate}}"},
						}}}},
					"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": r.id + "-{{path.basename}}"},
					"syncPolicy":  map[string]any{"syncOptions": []any{"CreateNamespace=true"}}},
			},
		},
	}
	if r.auto {
		tmpl := as["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		tmpl["syncPolicy"].(map[string]any)["automated"] = map[string]any{"prune": true}
	}
	if code, body := r.api("POST", "/api/v1/applicationsets", as); code != 200 {
		r.t.Fatalf("create ApplicationSet: %d %s", code, body)
	}
}

// createProject makes the test's own AppProject (any repo, any destination) with sync windows;
// it is deleted once its apps are gone.
func (r *realEnv) createProject(windows []map[string]any) {
	r.t.Helper()
	r.project = r.id
	p := map[string]any{"project": map[string]any{
		"metadata": map[string]any{"name": r.project, "namespace": "argocd"},
		"spec": map[string]any{"sourceRepos": []any{"*"}, "destinations": []any{map[string]any{"server": "*", "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}}, "syncWindows": windows},
	}}
	if code, body := r.api("POST", "/api/v1/projects", p); code != 200 {
		r.t.Fatalf("create AppProject %s: %d %s", r.project, code, body)
	}
	r.t.Cleanup(func() {
		// The ApplicationSet's deletion (registered later, so run earlier) removes the apps in
		// the background; a project still referenced is refused meanwhile.
		for end := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			code, body := r.api("DELETE", "/api/v1/projects/"+r.project, nil)
			if code == 200 || code == 404 {
				return
			}
			if time.Now().After(end) {
				r.t.Logf("AppProject %s left behind: %d %s", r.project, code, body)
				return
			}
		}
	})
}

// api calls Argo CD's REST API with the admin token.
func (r *realEnv) api(method, path string, body any) (int, []byte) {
	return r.apiAs(r.vars["ARGOCD_TOKEN"], method, path, body)
}

func (r *realEnv) apiAs(token, method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.vars["ARGOCD_URL"]+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitApps waits until the ApplicationSet generated an app per env.
func (r *realEnv) waitApps(envs ...string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, e := range envs {
		for {
			code, _ := r.api("GET", "/api/v1/applications/"+r.id+"-"+e, nil)
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("the ApplicationSet did not generate %s-%s", r.id, e)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// agentProc is a running agent: in process, or a `prflow agent` process.
type agentProc struct {
	stop func()
	cmd  *exec.Cmd
}

// startAgent runs the Argo CD agent "real" in process with token and waits until its view is
// fresh.
func (r *realEnv) startAgent(token string, o argocd.AppSetRefreshOptions) *agentProc {
	r.t.Helper()
	cl, err := argocd.NewClient(argocd.ClientOptions{URL: r.vars["ARGOCD_URL"], Token: token})
	if err != nil {
		r.t.Fatal(err)
	}
	cl.Timeout = 10 * time.Second
	a, err := argocd.New(argocd.Options{AgentID: "real", Client: cl, AppSetRefresh: o, Log: r.log})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, r.e.Conn) }()
	p := &agentProc{stop: func() { cancel(); <-done }}
	r.t.Cleanup(p.stop)
	r.waitFresh()
	return p
}

// runAgentClient runs agent "real" in process with o until the test ends, its Argo CD client
// made with co (realenv's URL and token), waits until its view is fresh and returns a client
// for it with a minute's timeout.
func (r *realEnv) runAgentClient(co argocd.ClientOptions, o argocd.Options) *agent.Client {
	r.t.Helper()
	co.URL, co.Token = r.vars["ARGOCD_URL"], r.vars["ARGOCD_TOKEN"]
	cl, err := argocd.NewClient(co)
	if err != nil {
		r.t.Fatal(err)
	}
	o.AgentID, o.Client, o.Log = "real", cl, r.log
	a, err := argocd.New(o)
	if err != nil {
		r.t.Fatal(err)
	}
	runUntilEnd(r.t, func(ctx context.Context) { _ = a.Run(ctx, r.e.Conn) })
	r.waitFresh()
	b, err := queue.OpenBuckets(context.Background(), r.e.Conn.JS)
	if err != nil {
		r.t.Fatal(err)
	}
	c := agent.NewClient(r.e.Conn.NC, b.Apps, b.Agents)
	c.Timeout = time.Minute
	return c
}

// waitFresh waits until agent "real" leads with a fresh view.
func (r *realEnv) waitFresh() {
	r.t.Helper()
	b, err := queue.OpenBuckets(context.Background(), r.e.Conn.JS)
	if err != nil {
		r.t.Fatal(err)
	}
	ac := agent.NewClient(r.e.Conn.NC, b.Apps, b.Agents)
	deadline := time.Now().Add(60 * time.Second)
	for !ac.View(context.Background(), "real").Fresh {
		if time.Now().After(deadline) {
			r.t.Fatal("agent real did not get a fresh view of Argo CD")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// file reads a file of the release repo's main branch.
func (r *realEnv) file(path string) string {
	r.t.Helper()
	work := r.t.TempDir()
	r.git(work, "init", "-q")
	r.git(work, "fetch", "-q", "--depth", "1", r.url, "main")
	cmd := exec.Command("git", "show", "FETCH_HEAD:"+path)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.home)
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// configMap reads the deployed ConfigMap's data of an environment from the cluster.
func (r *realEnv) configMap(env string) map[string]string {
	r.t.Helper()
	cmd := exec.Command("kubectl", "--kubeconfig", r.vars["KUBECONFIG"], "get", "configmap", "web", "-n", r.id+"-"+env, "-o", "json")
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	_ = json.Unmarshal(out, &cm)
	return cm.Data
}

// waitStepStatus waits until a step is in one of the statuses (or the run ended).
func (r *realEnv) waitStep(id, stage, step string, d time.Duration, cond func(*pipelines.StepRun) bool) *pipelines.Run {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		cur, err := r.e.Ctl.Get(context.Background(), id)
		if err == nil {
			if st := ctltest.Step(cur, stage, step); st != nil && cond(st) {
				return cur
			}
			if cur.Status.Terminal() {
				r.t.Fatalf("run ended (%s: %s) before %s/%s got there\n%s", cur.Status, cur.Error, stage, step, describeRun(cur))
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s/%s\n%s", stage, step, describeRun(cur))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mintToken makes an API key for the local account "ci" (up.sh: role admin) and returns it
// and its id, for a test that revokes it.
func (r *realEnv) mintToken() (string, string) {
	r.t.Helper()
	id := r.id + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	code, body := r.api("POST", "/api/v1/account/ci/token", map[string]any{"name": "ci", "id": id})
	if code != 200 {
		r.t.Fatalf("mint a token for ci: %d %s", code, body)
	}
	var tok struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &tok); err != nil || tok.Token == "" {
		r.t.Fatalf("mint a token: %s", body)
	}
	return tok.Token, id
}

// realProc is a process up.sh started (from $REALENV/pids): its command line and environment,
// so a test can stop it and start it again the same way.
type realProc struct {
	pid  int
	name string
	exe  string // the binary's path: argv[0] is a bare name resolved on up.sh's PATH, not ours
	args []string
	env  []string
	dir  string
}

func (r *realEnv) proc(name string) *realProc {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, "pids"))
	if err != nil {
		r.t.Fatal(err)
	}
	var found *realProc
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[1] != name {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		found = &realProc{pid: pid, name: name, exe: exe, args: splitNul(cmdline), env: splitNul(environ), dir: cwd}
	}
	if found == nil {
		r.t.Fatalf("no running %s in %s/pids", name, r.dir)
	}
	return found
}

func splitNul(b []byte) []string {
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// stopProc stops a realenv process (SIGTERM, then SIGKILL after 10 s).
func (r *realEnv) stopProc(p *realProc) {
	r.t.Helper()
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(p.pid, 0) != nil {
			return
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid)); strings.Contains(string(b), ") Z ") {
			return
		}
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
}

// startProc starts a stopped realenv process again as up.sh did (own session, log appended)
// and records it in $REALENV/pids so down.sh stops it.
func (r *realEnv) startProc(p *realProc) *realProc {
	r.t.Helper()
	logf, err := os.OpenFile(filepath.Join(r.dir, "run", p.name+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(p.exe, p.args[1:]...)
	cmd.Args[0] = p.args[0] // a multi-call binary may read its role from argv[0]
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("restart %s: %v", p.name, err)
	}
	go func() { _ = cmd.Wait() }()
	f, err := os.OpenFile(filepath.Join(r.dir, "pids"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintf(f, "%d %s\n", cmd.Process.Pid, p.name)
		f.Close()
	}
	np := *p
	np.pid = cmd.Process.Pid
	return &np
}

// waitArgo waits until argocd-server answers with the admin token.
func (r *realEnv) waitArgo() {
	r.t.Helper()
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if code, _ := r.api("GET", "/api/v1/applications?fields=metadata.resourceVersion", nil); code == 200 {
			return
		}
		if time.Now().After(end) {
			r.t.Fatal("argocd-server did not come back")
		}
	}
}

// promotion renders the test's promotion pipeline over envs (YAML entries).
func (r *realEnv) promotion(envs []string, entries []string, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ninputs:\n  tag: {type: string, required: true}\nservice: {name: %s}\nenvironments:\n", r.id, r.id)
	for _, e := range envs {
		fmt.Fprintf(&b, "  - name: %s\n    clusters: [{name: in-cluster, agent: real}]\n", e)
	}
	fmt.Fprintf(&b, "promotion:\n  applicationSet: %s\n  connector: release\n  repo: %s\n  filePath: \"envs/<+env.name>/config.json\"\n"+
		"  set:\n    image.tag: \"${{ inputs.tag }}\"\n  mergeStrategy: merge\n  syncTimeout: 3m\n  degradedTimeout: 5s\n%s  environments:\n",
		r.set, r.repo, extra)
	for _, e := range entries {
		fmt.Fprintf(&b, "    - %s\n", e)
	}
	return b.String()
}

// waitHealthy waits until Argo CD has the env's app Synced and Healthy (read with the admin
// token, not through prflow).
func (r *realEnv) waitHealthy(env string) {
	r.t.Helper()
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		code, body := r.api("GET", "/api/v1/applications/"+r.id+"-"+env, nil)
		var a struct {
			Status struct {
				Sync   struct{ Status string } `json:"sync"`
				Health struct{ Status string } `json:"health"`
			} `json:"status"`
		}
		if code == 200 && json.Unmarshal(body, &a) == nil && a.Status.Sync.Status == "Synced" && a.Status.Health.Status == "Healthy" {
			return
		}
		if time.Now().After(end) {
			r.t.Fatalf("Argo CD did not get %s-%s Synced/Healthy: %d %s", r.id, env, code, tail(string(body), 500))
		}
	}
}

// setConfig commits key=value into envs/<env>/config.json on main directly (as a person or
// another pipeline would) and returns the new commit.
func (r *realEnv) setConfig(env, key, value string) string {
	r.t.Helper()
	work := r.t.TempDir()
	r.git(work, "clone", "-q", "--branch", "main", r.url, ".")
	p := filepath.Join(work, "envs", env, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		r.t.Fatal(err)
	}
	m[key] = value
	nb, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(p, append(nb, '\n'), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.git(work, "commit", "-qam", "set "+key+" in "+env)
	r.git(work, "push", "-q", "origin", "main")
	return r.git(work, "rev-parse", "HEAD")
}

// pushEvent tells Argo CD's ApplicationSet controller (its own webhook; up.sh sets no secret)
// that main moved, so it regenerates the test's set without the API server.
func (r *realEnv) pushEvent() {
	r.t.Helper()
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/main",
		"repository": map[string]any{"html_url": strings.TrimSuffix(r.url, ".git"), "default_branch": "main"}})
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+envOr("APPSET_WEBHOOK_PORT", "18087")+"/api/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("ApplicationSet webhook: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		r.t.Fatalf("ApplicationSet webhook: HTTP %d", resp.StatusCode)
	}
}
