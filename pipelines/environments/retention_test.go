package environments_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/steps"
)

// TestRetentionKeepsPromotionHistory: the runs retention deletes a finished promotion run
// (archived first); the environment's history still shows that promotion, and the run is gone
// from prflow-runs and from the runs list.
func TestRetentionKeepsPromotionHistory(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	// The server's pipelines keep declaring dev once its runs are gone.
	src := promote("web", "dev")
	ts, err := controller.NewTriggerSet(steps.Default, map[string][]byte{"web.yaml": []byte(src + pushTrigger)})
	if err != nil {
		t.Fatal(err)
	}
	e.Ctl.SetTriggers(ts)
	r1 := e.run(src, "2.0.0", pipelines.StSucceeded)
	e.waitEnv("dev", "at r1", func(env *environments.Environment) bool { return env.Desired.Run == r1.ID })
	ctx := context.Background()
	n, err := e.Ctl.SweepRuns(ctx, controller.RunRetention{MaxAge: 24 * time.Hour}, time.Now().Add(30*24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d deleted, %v; want the promotion run", n, err)
	}
	if _, err := e.Ctl.Get(ctx, r1.ID); !errors.Is(err, controller.ErrNotFound) {
		t.Fatalf("run %s still stored: %v", r1.ID, err)
	}
	e.waitEnv("dev", "without its run", func(env *environments.Environment) bool { return env.Desired.Run == "" })
	h := history(t, e.model, "dev")
	if len(h) != 1 || h[0].Run != r1.ID || h[0].Pipeline != "web" {
		t.Fatalf("history after the run was deleted: %+v, want the promotion by %s", h, r1.ID)
	}
	page, err := e.Ctl.ListRuns(ctx, controller.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Runs {
		if s.ID == r1.ID {
			t.Errorf("runs list still shows the deleted run %s", r1.ID)
		}
	}
}
