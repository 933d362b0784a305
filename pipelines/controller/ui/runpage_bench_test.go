package ui_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
)

// BenchmarkRunPageWithLargeDiff renders the page of a run whose diff preview is as large as
// the agent sends: 10 apps, each with 20 changed resources and a unified diff at the 64 KiB
// cap. The live page re-renders this body on every change of the run.
func BenchmarkRunPageWithLargeDiff(b *testing.B) {
	e, srv := newAnonUI(b)
	var apps []agent.AppDiff
	for a := 0; a < 10; a++ {
		app := agent.AppDiff{App: fmt.Sprintf("web-%d", a), Agent: "sim", Unchanged: 30}
		for r := 0; r < 20; r++ {
			var d strings.Builder
			fmt.Fprintf(&d, "--- a/Deployment/shop/web-%d\n+++ b/Deployment/shop/web-%d\n@@ -1,80 +1,80 @@\n", r, r)
			for d.Len() < 64<<10/20 {
				fmt.Fprintf(&d, "   metadata:\n-    replicas: %d\n+    replicas: %d\n     image: registry.example.com/shop/web:1.5.0\n", r, r+1)
			}
			app.Resources = append(app.Resources, agent.ResourceDiff{Kind: "Deployment", Namespace: "shop", Name: fmt.Sprintf("web-%d", r),
				Change: agent.ChangeChanged, Paths: []string{"spec.replicas"}, Diff: d.String()})
		}
		apps = append(apps, app)
	}
	out, _ := json.Marshal(map[string]any{"apps": apps, "summary": "10 apps changed", "changed": true})
	r := e.Start("name: big\nstages:\n  - id: s\n    steps:\n      - id: preview\n        type: Noop\n        with: {outputs: "+string(out)+"}\n", nil)
	if final := e.Wait(r.ID, 60*time.Second); final.Status != pipelines.StSucceeded {
		b.Fatalf("run %s: %s", final.Status, final.Error)
	}
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.Get(srv.URL + "/ui/runs/" + r.ID)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("HTTP %d", resp.StatusCode)
		}
		size = int(n)
	}
	b.ReportMetric(float64(size)/1024, "KiB/page")
}
