package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// TestRealArgoCD runs `prflow agent` logic, FetchLinkedApps and GitOpsSync against a real
// Argo CD (../shared/realenv). It is skipped unless PRFLOW_REALENV names the realenv.env that
// up.sh writes, e.g. PRFLOW_REALENV=/tmp/realenv/realenv.env go test -run TestRealArgoCD ./deploy/e2e/
func TestRealArgoCD(t *testing.T) {
	envFile := os.Getenv("PRFLOW_REALENV")
	if envFile == "" {
		t.Skip("set PRFLOW_REALENV to realenv.env (after ../shared/realenv/up.sh) to run against a real Argo CD")
	}
	vars := readEnvFile(t, envFile)
	for _, k := range []string{"ARGOCD_URL", "ARGOCD_TOKEN", "GIT_URL", "GIT_WORKTREE"} {
		if vars[k] == "" {
			t.Fatalf("%s lacks %s", envFile, k)
		}
	}
	ctx := context.Background()
	api := func(method, path string, body any) (int, []byte) {
		var rd bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = *bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, vars["ARGOCD_URL"]+path, &rd)
		req.Header.Set("Authorization", "Bearer "+vars["ARGOCD_TOKEN"])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		return resp.StatusCode, out.Bytes()
	}
	simulate := func(v string) {
		path := filepath.Join(vars["GIT_WORKTREE"], "apps/demo/configmap.yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		nb := regexp.MustCompile(`(?m)^  simulate: .*$`).ReplaceAll(b, []byte("  simulate: "+v))
		if bytes.Equal(nb, b) {
			return
		}
		_ = os.WriteFile(path, nb, 0o644)
		for _, args := range [][]string{{"commit", "-qam", "simulate " + v}, {"push", "-q", "origin", "main"}} {
			cmd := exec.Command("git", append([]string{"-C", vars["GIT_WORKTREE"]}, args...)...)
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+filepath.Join(filepath.Dir(envFile), "data", "home"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v %s", args, err, out)
			}
		}
	}
	simulate("healthy")
	t.Cleanup(func() { simulate("healthy") })
	app := fmt.Sprintf("prflow-it-%d", time.Now().UnixNano()%1e6)
	code, body := api("POST", "/api/v1/applications", map[string]any{
		"metadata": map[string]any{"name": app, "labels": map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}},
		"spec": map[string]any{"project": "default",
			"source":      map[string]any{"repoURL": vars["GIT_URL"], "path": "apps/demo", "targetRevision": "main"},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "demo"},
			"syncPolicy":  map[string]any{"syncOptions": []string{"CreateNamespace=true"}}},
	})
	if code != 200 {
		t.Fatalf("create app: %d %s", code, body)
	}
	t.Cleanup(func() { api("DELETE", "/api/v1/applications/"+app+"?cascade=true", nil) })

	e := ctltest.New(t, ctltest.Options{Workers: 1})
	cl, err := argocd.NewClient(argocd.ClientOptions{URL: vars["ARGOCD_URL"], Token: vars["ARGOCD_TOKEN"]})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := argocd.New(argocd.Options{AgentID: "real", Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = ag.Run(actx, e.Conn) }()
	e.WaitAgent("real") // a run naming an agent that has not registered yet is refused at start

	healthy := `
name: real
service: {name: web}
environments: [{name: dev, clusters: [{name: in-cluster, agent: real}]}]
stages:
  - id: dev
    environment: dev
    steps:
      - {id: apps, type: FetchLinkedApps, timeout: 1m}
      - {id: sync, type: GitOpsSync, timeout: 2m, with: {waitTillHealthy: true, prune: true}}
`
	start := time.Now()
	r := e.Wait(e.Start(healthy, nil).ID, 3*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("healthy sync: %s %s\n%s", r.Status, r.Error, e.Logs.String())
	}
	apps := ctltest.Step(r, "dev", "apps").Outputs["apps"].([]any)
	found := false
	for _, a := range apps {
		found = found || a.(map[string]any)["name"] == app
	}
	if !found {
		t.Fatalf("FetchLinkedApps did not find %s: %v", app, apps)
	}
	t.Logf("real Argo CD: FetchLinkedApps + GitOpsSync to Healthy in %s", time.Since(start).Round(time.Millisecond))

	simulate("degraded")
	degraded := strings.Replace(healthy, "with: {waitTillHealthy: true, prune: true}", "with: {waitTillHealthy: true, degradedStateTimeout: 5s, applicationsList: [{agentId: real, applicationName: "+app+"}]}", 1)
	degraded = strings.Replace(degraded, "      - {id: apps, type: FetchLinkedApps, timeout: 1m}\n", "", 1)
	start = time.Now()
	r = e.Wait(e.Start(degraded, nil).ID, 3*time.Minute)
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "Degraded") {
		t.Fatalf("degraded sync: %s %s", r.Status, r.Error)
	}
	t.Logf("real Argo CD: Degraded detected and the step failed in %s: %s", time.Since(start).Round(time.Millisecond), r.Error)
}

func readEnvFile(t *testing.T, path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "))
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		out[k] = strings.Trim(v, `"'`)
	}
	return out
}
