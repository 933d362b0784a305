package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/steps"
)

func envPipeline(name string, envs ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ninputs:\n  tag: {type: string, required: true}\nenvironments:\n", name)
	for _, e := range envs {
		fmt.Fprintf(&b, "  - {name: %s, clusters: [{name: %s-eu, agent: sim}]}\n", e, e)
	}
	b.WriteString("triggers:\n  - name: push\n    push: {provider: github, repo: acme/app, branches: [main]}\n    inputs: {tag: \"${{ event.after }}\"}\nstages:\n")
	for _, e := range envs {
		fmt.Fprintf(&b, "  - id: %s\n    environment: %s\n    steps:\n      - id: update\n        type: UpdateReleaseRepo\n"+
			"        with: {connector: release, repo: acme/release, filePath: \"envs/<+env.name>/config.json\", variables: [{name: image.tag, type: String, value: \"${{ inputs.tag }}\"}]}\n", e, e)
	}
	return []byte(b.String())
}

// setPipelines puts files (name: pipeline source) in force as the server's pipelines.
func setPipelines(tb testing.TB, e *ctltest.Env, files map[string][]byte) {
	tb.Helper()
	ts, err := controller.NewTriggerSet(steps.Default, files)
	if err != nil {
		tb.Fatal(err)
	}
	e.Ctl.SetTriggers(ts)
}

// heartbeatSim keeps agent sim registered as its leader replica until the test ends.
func heartbeatSim(tb testing.TB, e *ctltest.Env) {
	tb.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done, err := agent.Heartbeat(ctx, e.Ctl.Buckets().Agents, time.Second, func() agent.Registration {
		return agent.Registration{Agent: "sim", Replica: "r1", Kind: "simulated", Leader: true, Healthy: true}
	}, nil)
	if err != nil {
		stop()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stop(); <-done })
}

// TestEnvironmentsAPI: the three endpoints answer from the model with a token only; an
// unknown name is a 404 naming it, a bad limit a 400 naming the parameter; hostile names do
// no harm; reads while the pipelines change are consistent (run with -race).
func TestEnvironmentsAPI(t *testing.T) {
	t.Parallel()
	e := ctltest.New(t, ctltest.Options{})
	dir := t.TempDir()
	const token = "viewer-token-0123456789"
	sum := sha256.Sum256([]byte(token))
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  - {user: viewer, token: sha256:"+hex.EncodeToString(sum[:])+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := controller.LoadAuth(tokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Ctl.Handler(auth))
	t.Cleanup(srv.Close)
	setPipelines(t, e, map[string][]byte{"web.yaml": envPipeline("web", "dev", "prod")})
	heartbeatSim(t, e)
	st := agent.AppStatus{V: agent.Version, Agent: "sim", Name: "web-dev", Cluster: "dev-eu", ApplicationSet: "web",
		Labels: map[string]string{"harness.io/envRef": "dev"}, Sync: "Synced", Health: "Healthy", SyncedRevision: "abc"}
	raw, _ := json.Marshal(st)
	if _, err := e.Ctl.Buckets().Apps.Put(context.Background(), agent.StatusKey("sim", "web-dev"), raw); err != nil {
		t.Fatal(err)
	}

	get := func(path, tok string) (int, []byte) {
		t.Helper()
		code, body := ctltest.CallAPI(t, "GET", srv.URL+path, tok, "")
		return code, []byte(body)
	}
	if code, _ := get("/api/v1/environments", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d", code)
	}
	var envs []environments.Environment
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := get("/api/v1/environments", token)
		envs = nil
		if code == http.StatusOK && json.Unmarshal(body, &envs) == nil && len(envs) == 2 && len(envs[0].Apps) == 1 && envs[0].Apps[0].Health == "Healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list: %d %s", code, body)
		}
	}
	// dev's app names the ApplicationSet; prod (no app) stays under the promotion.
	if envs[0].Name != "dev" || envs[0].Group != "appset:web" || envs[1].Name != "prod" || envs[1].Group != "promotion:web" || envs[1].State != "empty" {
		t.Errorf("list: %+v", envs)
	}
	code, body := get("/api/v1/environments/dev", token)
	var dev environments.Environment
	if code != http.StatusOK || json.Unmarshal(body, &dev) != nil || dev.Name != "dev" || len(dev.Apps) != 1 || dev.Apps[0].Health != "Healthy" {
		t.Errorf("get dev: %d %s", code, body)
	}
	if code, body := get("/api/v1/environments/dev/history", token); code != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("history of an environment without promotions: %d %s, want []", code, body)
	}
	for _, bad := range []string{"0", "51", "x", "-1"} {
		if code, body := get("/api/v1/environments/dev/history?limit="+bad, token); code != http.StatusBadRequest || !strings.Contains(string(body), `limit \"`+bad+`\"`) {
			t.Errorf("limit %s: %d %s", bad, code, body)
		}
	}
	for _, name := range []string{"nope", "..%2F..%2Fetc", strings.Repeat("x", 5000), "dev%00", "%3Cscript%3E"} {
		code, body := get("/api/v1/environments/"+name, token)
		if code != http.StatusNotFound || !strings.Contains(string(body), "environment not found") {
			t.Errorf("GET %.40s: %d %.200s", name, code, body)
		}
		if code, _ := get("/api/v1/environments/"+name+"/history", token); code != http.StatusNotFound {
			t.Errorf("history of %.40s: %d", name, code)
		}
	}
	if _, body := get("/api/v1/environments/nope", token); !strings.Contains(string(body), `\"nope\"`) {
		t.Errorf("404 does not name the environment: %s", body)
	}

	// Readers during pipeline changes see whole states: two environments or one.
	stop := ctltest.RepeatUntilStopped(8, func() bool {
		list, err := e.Ctl.Environments().List(context.Background())
		if err != nil || (len(list) != 2 && len(list) != 1) {
			t.Errorf("list during changes: %d %v", len(list), err)
			return false
		}
		return true
	})
	setPipelines(t, e, map[string][]byte{"web.yaml": envPipeline("web", "dev")})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := get("/api/v1/environments/prod", token); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("prod still listed after its pipeline dropped it")
		}
	}
	stop()
}
