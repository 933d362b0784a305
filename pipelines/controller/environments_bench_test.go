package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// BenchmarkEnvironmentsAPI: GET /api/v1/environments with 200 environments (40 pipelines of
// five) and five apps each (1,000 prflow-apps records of a live agent), answered from the
// model's memory. Reports the latency percentiles of the whole HTTP round trip (JSON of
// about 1 MB) and of List alone.
func BenchmarkEnvironmentsAPI(b *testing.B) {
	e := ctltest.New(b, ctltest.Options{})
	files := map[string][]byte{}
	for p := range 40 {
		var envs []string
		for i := range 5 {
			envs = append(envs, fmt.Sprintf("e%03d", p*5+i))
		}
		files[fmt.Sprintf("p%02d.yaml", p)] = envPipeline(fmt.Sprintf("p%02d", p), envs...)
	}
	setPipelines(b, e, files)
	ctx := context.Background()
	heartbeatSim(b, e)
	for env := range 200 {
		for a := range 5 {
			name := fmt.Sprintf("web%d-e%03d", a, env)
			st := agent.AppStatus{V: agent.Version, Agent: "sim", Name: name, Cluster: fmt.Sprintf("e%03d-eu", env), ApplicationSet: fmt.Sprintf("web%d", a%2),
				Labels: map[string]string{"harness.io/envRef": fmt.Sprintf("e%03d", env)}, Sync: "Synced", Health: "Healthy", SyncedRevision: "0123456789abcdef0123456789abcdef01234567"}
			raw, _ := json.Marshal(st)
			if _, err := e.Ctl.Buckets().Apps.Put(ctx, agent.StatusKey("sim", name), raw); err != nil {
				b.Fatal(err)
			}
		}
	}
	m := e.Ctl.Environments()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list, err := m.List(ctx)
		apps := 0
		for _, env := range list {
			apps += len(env.Apps)
		}
		if err == nil && len(list) == 200 && apps == 1000 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("model has %d environments, %d apps", len(list), apps)
		}
	}
	srv := httptest.NewServer(e.Ctl.Handler(&controller.Auth{Anonymous: &controller.User{Name: "bench"}}))
	b.Cleanup(srv.Close)

	var api, list []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		resp, err := http.Get(srv.URL + "/api/v1/environments")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n < 100_000 {
			b.Fatalf("GET: %d, %d bytes", resp.StatusCode, n)
		}
		api = append(api, time.Since(t0))
		t1 := time.Now()
		if l, err := m.List(ctx); err != nil || len(l) != 200 {
			b.Fatalf("List: %d %v", len(l), err)
		}
		list = append(list, time.Since(t1))
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(float64(len(d))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(api, 0.50), "api-p50-ms")
	b.ReportMetric(pct(api, 0.99), "api-p99-ms")
	b.ReportMetric(pct(list, 0.50), "list-p50-ms")
	b.ReportMetric(pct(list, 0.99), "list-p99-ms")
}
