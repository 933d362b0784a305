package argocdtest

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSyncToHealthy measures one API sync through the whole simulated
// timeline (7 published updates) with a 1µs step, i.e. the fake's own cost.
func BenchmarkSyncToHealthy(b *testing.B) {
	s, _, _ := newFake(b, WithTimeline(time.Microsecond, 0))
	if err := s.AddApp(demoApp("demo", demoRepo, "apps/demo")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := call(b, s, "POST", "/api/v1/applications/demo/sync", map[string]any{}); r.status != 200 {
			b.Fatalf("sync: %d %s", r.status, r.body)
		}
		for {
			a, _ := s.App("demo")
			if a.Operation == nil && a.Status.OperationState != nil && a.Status.OperationState.Phase == PhaseSucceeded &&
				a.Status.Health.Status == HealthHealthy && len(a.Status.History) > 0 &&
				a.Status.History[len(a.Status.History)-1].ID == int64(i) {
				break
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// BenchmarkListApps measures GET /api/v1/applications with a label selector
// over 500 apps.
func BenchmarkListApps(b *testing.B) {
	s, _, _ := newFake(b)
	for i := 0; i < 500; i++ {
		a := demoApp(fmt.Sprintf("app-%03d", i), demoRepo, "apps/demo")
		a.Metadata.Labels = map[string]string{"env": []string{"dev", "staging", "prod"}[i%3]}
		if err := s.AddApp(a); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := call(b, s, "GET", "/api/v1/applications?selector=env%3Dprod", nil); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}
