package steps

import (
	"strings"
	"testing"
	"time"
)

// TestVerifyTypedConfig: Verify reads verifyInputs. A misspelt key inside a metric, which the
// step used to ignore when it ran (a job from an older pipeline version), is refused naming
// it; expressions in count, duration and interval are left for run time at load; the values
// reach the metric.
func TestVerifyTypedConfig(t *testing.T) {
	metric := func(over map[string]any) map[string]any {
		return oneMetric(map[string]any{"name": "errors", "provider": "prom", "query": "up", "count": 4, "failureCondition": "result > 0.05"}, over)
	}
	if _, err := verifyConfigFrom(metric(map[string]any{"failurLimit": 2}), false); err == nil || !strings.Contains(err.Error(), "metrics[0].failurLimit: unknown input") {
		t.Errorf("misspelt key at run time: %v", err)
	}
	if _, err := verifyConfigFrom(map[string]any{"metrics": metric(nil)["metrics"], "onInconclusiv": "succeed"}, false); err == nil || !strings.Contains(err.Error(), "onInconclusiv: unknown input") {
		t.Errorf("misspelt top-level key at run time: %v", err)
	}
	for _, in := range []map[string]any{
		metric(map[string]any{"count": nil, "duration": "${{ inputs.soak }}"}),
		metric(map[string]any{"count": nil, "duration": "10s", "interval": "${{ inputs.every }}"}),
		{"metrics": "${{ inputs.metrics }}", "onInconclusive": "${{ inputs.verdict }}"},
	} {
		if _, err := verifyConfigFrom(in, true); err != nil {
			t.Errorf("at load %v: %v", in, err)
		}
	}
	c, err := verifyConfigFrom(metric(map[string]any{"count": nil, "duration": "5m", "interval": "30s", "failOnNoAnalysis": false,
		"baseline": "LAST", "failureCondition": "ratio > 2", "inconclusiveLimit": "1"}), false)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.metrics[0]; s.Count != 10 || s.Interval != 30*time.Second || s.NoData != noDataPass || !s.Baseline || s.InconclusiveLim != 1 || s.failure == nil {
		t.Errorf("metric %+v", s)
	}
}
