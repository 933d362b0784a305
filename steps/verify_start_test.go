package steps_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/verify"
)

// A Verify naming a metrics connector no live worker holds is refused when the run starts,
// before its stage merges or syncs anything (a typo found after the merge would roll back a
// good release); one the workers hold starts.
func TestVerifyUnknownMetricsConnectorRefusedAtStart(t *testing.T) {
	t.Parallel()
	e := ctltest.New(t, ctltest.Options{Services: map[string]any{steps.ServiceMetrics: verify.Static{"prom": nil}}})
	src := func(provider string) []byte {
		return []byte(`name: v
stages:
  - id: prod
    steps:
      - {id: n, type: Noop}
      - id: verify
        type: Verify
        with:
          metrics:
            - {name: errors, provider: ` + provider + `, query: up, interval: 1m, count: 1, successCondition: result == 1}
`)
	}
	_, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "v.yaml", Executor: "tester", Source: src("prmo")})
	if err == nil || !strings.Contains(err.Error(), `refused: connector "metrics:prmo" is held by no live worker of pool "default" (live: metrics:prom)`) {
		t.Fatalf("unknown metrics connector: %v", err)
	}
	r, err := e.Ctl.Start(context.Background(), controller.StartRequest{File: "v.yaml", Executor: "tester", Source: src("prom")})
	if err != nil {
		t.Fatalf("known metrics connector: %v", err)
	}
	_ = e.Ctl.Cancel(context.Background(), r.ID, "tester")
}
