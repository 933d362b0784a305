package argocd

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
)

// BenchmarkCompareApp is the agent's own cost of a preview (parse, clean, compare, YAML diff)
// for an app of 200 objects of which 20 change, the Argo CD calls left out.
func BenchmarkCompareApp(b *testing.B) {
	var cur []ManagedResource
	var rendered []string
	for i := 0; i < 200; i++ {
		obj := func(replicas int) map[string]any {
			return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": map[string]any{"name": fmt.Sprintf("d%03d", i), "labels": map[string]any{"app": "web"},
					"annotations": map[string]any{"argocd.argoproj.io/tracking-id": "web:apps/Deployment:shop/d"}},
				"spec": map[string]any{"replicas": replicas, "template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": "web", "image": "registry.example.com/shop/web:1.4.1", "env": []any{
						map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "B", "value": "2"}}}}}}}}
		}
		t, _ := json.Marshal(obj(2))
		cur = append(cur, ManagedResource{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: fmt.Sprintf("d%03d", i), TargetState: string(t)})
		n := 2
		if i%10 == 0 {
			n = 3
		}
		r, _ := json.Marshal(obj(n))
		rendered = append(rendered, string(r))
	}
	s, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db"},
		"data": map[string]any{"password": base64.StdEncoding.EncodeToString([]byte("x"))}})
	rendered = append(rendered, string(s))
	b.ReportAllocs()
	for b.Loop() {
		d := &agent.AppDiff{}
		if err := compareApp(d, rendered, cur, "shop", "web", defaultMaxDiffBytes); err != nil {
			b.Fatal(err)
		}
		if len(d.Resources) != 21 || d.Unchanged != 180 {
			b.Fatalf("resources %d unchanged %d", len(d.Resources), d.Unchanged)
		}
	}
}
