package main

import (
	"strings"
	"testing"
)

// The promotion examples load, and run end to end in `prflow dev` (a real git server and the
// simulated agent over examples/release-repo).
func TestPromotionExamples(t *testing.T) {
	ex := "../../examples/pipelines/"
	out, err := run(t, "validate", ex+"promotion.yaml", ex+"new-env.yaml")
	if err != nil || !strings.Contains(out, "promotion.yaml: ok (pipeline promotion, 3 stages)") ||
		!strings.Contains(out, "new-env.yaml: ok (pipeline new-env, 1 stages)") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	t.Run("promote from the CLI", func(t *testing.T) {
		out, err := run(t, "dev", "--log-level", "warn", "--pipeline", ex+"promotion.yaml", "--set", "tag=1.7.0")
		if err != nil {
			t.Fatalf("prflow dev: %v\n%s", err, out)
		}
		for _, want := range []string{"step dev.update (UpdateReleaseRepo): succeeded", "changedFiles: envs/prod/config.json",
			"step staging.gate (StageGate): succeeded", "stage prod: succeeded", "succeeded",
			// The summary shows what each PR deployed, as previewed before its merge. (dev's
			// preview may run before the agent's first deployment of web-dev, when the
			// ConfigMap is still to be added: only the later stages are exact.)
			"    preview: web-dev: 1 ",
			"    preview: web-staging: 1 changed (ConfigMap web-staging/web: data.image) (preview)",
			"    preview: web-prod: 1 changed (ConfigMap web-prod/web: data.image, data.replicas) (preview)"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("create an environment", func(t *testing.T) {
		out, err := run(t, "dev", "--log-level", "warn", "--pipeline", ex+"new-env.yaml", "--set", "tag=1.7.0")
		if err != nil {
			t.Fatalf("prflow dev: %v\n%s", err, out)
		}
		for _, want := range []string{"changedFiles: envs/qa/config.json", "step qa.sync (GitOpsSync): succeeded", "stage qa: succeeded"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}
