package steps_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// BenchmarkUpdateAndMergeGitHub measures one UpdateReleaseRepo + MergePR against the GitHub
// fake: wall time and forge API calls per promotion (sequential), and wall time for 100
// concurrent promotions of one release repo.
func BenchmarkUpdateAndMergeGitHub(b *testing.B) {
	t := &testing.T{}
	fg := forges(t)[0]
	e := env(t, fg, 2)
	defer e.Stop()
	src := `
name: bench
inputs: {key: {type: string}}
stages:
  - id: s
    steps:
      - id: update
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: "k.${{ inputs.key }}", value: "v"}]}
      - id: merge
        type: MergePR
`
	run := func(key string) {
		r := e.Wait(e.Start(src, map[string]any{"key": key}).ID, 5*time.Minute)
		if r.Status != pipelines.StSucceeded {
			b.Fatalf("%s: %s", r.Status, r.Error)
		}
	}
	run("warmup")
	fg.f.ResetCalls()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		run(fmt.Sprintf("s%d", i))
	}
	seq := time.Since(start)
	calls := len(fg.f.Calls())
	b.StopTimer()
	const n = 100
	start = time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); run(fmt.Sprintf("c%d", i)) }(i)
	}
	wg.Wait()
	b.ReportMetric(float64(calls)/float64(b.N), "api-calls/promotion")
	b.ReportMetric(seq.Seconds()*1000/float64(b.N), "ms/promotion")
	b.ReportMetric(time.Since(start).Seconds(), "s/100-concurrent")
}
