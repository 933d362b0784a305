package environments_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// The tests run a whole prflow (ctltest: embedded NATS, controller, worker) against the fake
// GitHub, whose real signed webhooks (pushes of prflow's merges and of hand commits) reach
// the controller's /hooks/github and PRFLOW_SCM.

const hookSecret = "envs-hook-secret-0123456789"

// promote is a pipeline promoting tag into one environment's config file.
func promote(name, env string) string {
	return fmt.Sprintf(`
name: %s
inputs:
  tag: {type: string, required: true}
environments:
  - {name: %s, clusters: [{name: %s-eu, agent: sim}]}
stages:
  - id: %s
    environment: %s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: "envs/<+env.name>/config.json",
               variables: [{name: image.tag, type: String, value: "${{ inputs.tag }}"}]}
      - id: merge
        type: MergePR
        with: {mergeStrategy: squash}
`, name, env, env, env, env)
}

type envEnv struct {
	*ctltest.Env
	gh    *scmtest.GitHub
	ghp   scm.Provider
	URL   string
	model environments.Reader
}

func newEnvEnv(t *testing.T) *envEnv {
	t.Helper()
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", examples.ReleaseRepo()); err != nil {
		t.Fatal(err)
	}
	ghp, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	e := ctltest.New(t, ctltest.Options{Services: map[string]any{steps.ServiceSCM: connector.Static{"release": ghp}}, Secrets: []string{scmtest.DefaultToken}, Audit: true})
	e.Ctl.SetWebhooks(controller.NewWebhooks(0, map[string]string{"github": hookSecret}))
	srv := httptest.NewServer(e.Ctl.Handler(&controller.Auth{}))
	t.Cleanup(srv.Close)
	gh.RegisterWebhook(srv.URL+"/hooks/github", hookSecret)
	ee := &envEnv{Env: e, gh: gh, ghp: ghp, URL: srv.URL, model: e.Ctl.Environments()}
	return ee
}

// agentUp keeps a leader registration of agent id (as a live agent does) until stop.
func (e *envEnv) agentUp(id string) (stop func()) {
	e.T.Helper()
	b, err := queue.OpenBuckets(context.Background(), e.Conn.JS)
	if err != nil {
		e.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := agent.Heartbeat(ctx, b.Agents, time.Second, func() agent.Registration {
		return agent.Registration{Agent: id, Replica: "r1", Kind: "simulated", Leader: true, Healthy: true, Started: time.Now()}
	}, nil)
	if err != nil {
		cancel()
		e.T.Fatal(err)
	}
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			<-done
		}
	}
	e.T.Cleanup(stop)
	return stop
}

// putApp writes an app record into prflow-apps as the agent would.
func (e *envEnv) putApp(st agent.AppStatus) {
	e.T.Helper()
	st.V = agent.Version
	st.ConfirmedAt = time.Now().UTC()
	b, _ := json.Marshal(st)
	if _, err := e.Ctl.Buckets().Apps.Put(context.Background(), agent.StatusKey(st.Agent, st.Ref()), b); err != nil {
		e.T.Fatal(err)
	}
}

// app is a record of app name in env, owned by ApplicationSet web.
func app(name, env, sync, health, rev string) agent.AppStatus {
	return agent.AppStatus{Agent: "sim", Name: name, Cluster: env + "-eu", Namespace: "web-" + env, ApplicationSet: "web",
		Labels: map[string]string{"harness.io/envRef": env}, Sync: sync, Health: health, SyncedRevision: rev, Revision: rev}
}

// run starts src and waits for it to end with want.
func (e *envEnv) run(src, tag string, want pipelines.Status) *pipelines.Run {
	e.T.Helper()
	r := e.Start(src, map[string]any{"tag": tag})
	f := e.Wait(r.ID, 90*time.Second)
	if f.Status != want {
		e.T.Fatalf("run %s: %s (%s), want %s", r.ID, f.Status, f.Error, want)
	}
	return f
}

// waitEnv waits until environment name satisfies ok, and returns it.
func (e *envEnv) waitEnv(name, what string, ok func(*environments.Environment) bool) *environments.Environment {
	e.T.Helper()
	return waitEnvOf(e.T, e.model, name, what, ok)
}

func waitEnvOf(t testing.TB, m environments.Reader, name, what string, ok func(*environments.Environment) bool) *environments.Environment {
	t.Helper()
	var last *environments.Environment
	var lastErr error
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last, lastErr = m.Get(ctx, name)
		cancel()
		if lastErr == nil && ok(last) {
			return last
		}
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("environment %s: never %s (err %v):\n%s", name, what, lastErr, b)
	return nil
}

func mergeCommit(r *pipelines.Run, stage string) string {
	c, _ := ctltest.Step(r, stage, "merge").Outputs["commitId"].(string)
	return c
}

func valueOf(e *environments.Environment, key string) any {
	for _, v := range e.Desired.Values {
		if v.Key == key {
			return v.Value
		}
	}
	return nil
}

func history(t testing.TB, m environments.Reader, env string) []environments.Promotion {
	t.Helper()
	h, err := m.History(context.Background(), env, 50)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// pushTrigger makes a pipeline a webhook-triggered one (of another repo than the release repo).
const pushTrigger = `triggers:
  - name: push
    push: {provider: github, repo: acme/app, branches: [main]}
    inputs: {tag: "${{ event.after }}"}
`

// newModel runs a second model over e's buckets, as another controller replica would.
func newModel(t testing.TB, e *envEnv, triggers []*pipelines.Pipeline) *environments.Model {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hist, err := queue.OpenEnvHistory(ctx, e.Conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	b := e.Ctl.Buckets()
	ac := agent.NewClient(e.Conn.NC, b.Apps, b.Agents)
	m := environments.New(environments.Sources{JS: e.Conn.JS, Runs: b.Runs, Apps: b.Apps, Agents: b.Agents, History: hist,
		Pipeline: e.Ctl.Pipeline, View: ac.View, Triggers: func() []*pipelines.Pipeline { return triggers }})
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// storedHistory reads an environment's entries from prflow-envs itself.
func storedHistory(t testing.TB, e *envEnv, env string) []environments.Promotion {
	t.Helper()
	hist, err := queue.OpenEnvHistory(context.Background(), e.Conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := hist.Get(context.Background(), queue.EnvHistoryKey(env))
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Promotions []environments.Promotion }
	if err := json.Unmarshal(entry.Value(), &h); err != nil {
		t.Fatal(err)
	}
	return h.Promotions
}
