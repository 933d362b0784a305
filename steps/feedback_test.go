package steps_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

// TestCommitStatusOrder: a stage's pending and final statuses are separate jobs, and a worker
// may run the final one first. The pending one must then not overwrite it.
func TestCommitStatusOrder(t *testing.T) {
	ctx := context.Background()
	conn, err := queue.Open(ctx, queue.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "web", map[string]string{"README.md": "v1\n"}); err != nil {
		t.Fatal(err)
	}
	p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	head, err := p.Branch(ctx, "acme/web", "main")
	if err != nil {
		t.Fatal(err)
	}
	def, _ := steps.Default.Lookup(steps.TypeCommitStatus)
	svc := steps.NewServices(map[string]any{steps.ServiceSCM: connector.Static{"web": p},
		steps.ServiceLocks: &worker.LeaseLocker{Leases: &queue.Leases{KV: b.Locks}, Holder: "w"}})
	set := func(state string, order int) steps.Result {
		t.Helper()
		sc := &steps.Context{RunID: "r1", Stage: "dev", StepID: "prflow-status-" + state, Type: steps.TypeCommitStatus, Attempt: 1,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: svc,
			Inputs: map[string]any{"connector": "web", "repo": "acme/web", "sha": head.SHA, "context": "prflow/dev", "state": state, "order": order}}
		res, err := def.New().Run(ctx, sc)
		if err != nil || res.Status != steps.Succeeded {
			t.Fatalf("%s: %v %+v", state, err, res)
		}
		return res
	}
	latest := func() string {
		all, err := gh.Statuses("acme", "web", head.SHA)
		if err != nil || len(all) == 0 {
			t.Fatalf("statuses: %v %v", err, all)
		}
		return all[len(all)-1].State
	}
	set("success", 2)
	if res := set("pending", 1); res.Outputs["skipped"] != true || latest() != "success" {
		t.Errorf("a late pending overwrote success: %+v, latest %s", res, latest())
	}
	if res := set("success", 2); res.Outputs["skipped"] == true || latest() != "success" {
		t.Errorf("a retry of the final status was skipped: %+v", res)
	}
	set("failure", 3) // a rolled-back stage: a later, higher order wins
	if latest() != "failure" {
		t.Errorf("latest %s, want failure", latest())
	}
}
