package harness

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

func loadCV(t *testing.T, mapFile string) (*Result, error) {
	t.Helper()
	src, err := os.ReadFile("testdata/pr_cv.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadMap(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	return Convert("testdata/pr_cv.yaml", src, Options{Map: m})
}

// TestPRPipelineCVConverts: Harness's PR pipeline with CV converts in strict mode with a map
// that gives web's health source: the Verify step measures the map's metric for the spec's
// duration against the LAST baseline, fails on no data (failOnNoAnalysis) and tolerates no
// bad measurement (sensitivity HIGH); its ManualIntervention becomes onFailure manual with
// the 2h timeout rolling the stage back; the second strategy (Unknown errors → Ignore) is
// reported, since prflow has one strategy per step.
func TestPRPipelineCVConverts(t *testing.T) {
	res, err := loadCV(t, "testdata/pr_cv_map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := res.Pipeline.Stage("deploy")
	var verify *pipelines.Step
	for _, s := range st.Steps {
		if s.Type == "Verify" {
			verify = s
		}
	}
	if verify == nil {
		t.Fatalf("no Verify step in\n%s", res.Native)
	}
	fs := verify.OnFailure
	if fs == nil || fs.Action != pipelines.ActManual || fs.Manual.Timeout != 2*time.Hour || fs.Manual.OnTimeout != pipelines.ActRollbackStage {
		t.Fatalf("verify onFailure %+v", fs)
	}
	m := verify.With.Map["metrics"].List[0].Map
	for k, want := range map[string]any{"name": "error_ratio", "provider": "prom", "duration": "10m", "baseline": "last", "failOnNoAnalysis": "fail", "failureLimit": 0, "failureCondition": "result > 0.05"} {
		if m[k] == nil || m[k].Lit != want {
			t.Errorf("metric %s = %+v, want %v", k, m[k], want)
		}
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0].Error(), "failureStrategies[1]: prflow has one failure strategy per step") {
		t.Errorf("warnings %v", res.Warnings)
	}
	if st.OnFailure == nil || st.OnFailure.Action != pipelines.ActRollbackStage {
		t.Errorf("stage onFailure %+v", st.OnFailure)
	}
}

// Strict mode refuses a Verify whose monitored service has no health source in the map,
// naming the service and the map file, and says what to add.
func TestPRPipelineCVWithoutMapEntry(t *testing.T) {
	_, err := loadCV(t, "testdata/map.yaml")
	if err == nil {
		t.Fatal("converted without a health source")
	}
	for _, want := range []string{"testdata/pr_cv.yaml:78:21", "steps[3].step.spec.monitoredService",
		`the default monitored service of service "web" has no health source in the mapping file testdata/map.yaml`, "monitoredServices: {web: {metrics:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// Verify fields prflow cannot honour are refused with their path, not dropped.
func TestVerifyUnsupportedFields(t *testing.T) {
	src, _ := os.ReadFile("testdata/pr_cv.yaml")
	m, err := LoadMap("testdata/pr_cv_map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, says string }{
		{"type: Auto", "type: Canary", `steps[3].step.spec.type: unsupported: verification type "Canary"`},
		{"baseline: LAST", "baseline: PINNED", `spec.spec.baseline: unsupported: baseline "PINNED"`},
		{"sensitivity: HIGH", "sensitivity: EXTREME", "spec.spec.sensitivity: want HIGH, MEDIUM or LOW"},
		{"isMultiServicesOrEnvs: false", "isMultiServicesOrEnvs: true", "isMultiServicesOrEnvs: unsupported: verifying several services"},
		{"type: Default\n                      spec: {}", "type: Configured\n                      spec: {monitoredServiceRef: checkout}",
			`monitored service "checkout" has no health source`},
		{"errors:\n                          - Unknown", "errors:\n                          - Timeout", "failureStrategies[1].onFailure.errors: unsupported: failure strategies for specific error types"},
		{"type: Ignore", "type: Retry", `on timeout "Retry"`},
	} {
		bad := strings.Replace(string(src), tc.from, tc.to, 1)
		if bad == string(src) {
			t.Fatalf("%q not in the sample", tc.from)
		}
		if _, err := Convert("pr_cv.yaml", []byte(bad), Options{Map: m}); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.to, err, tc.says)
		}
	}
}
