package steps_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

// TestCommitStatusOrder: a stage's pending and final statuses are separate jobs, and a worker
// may run the final one first. The pending one must then not overwrite it.
func TestCommitStatusOrder(t *testing.T) {
	t.Parallel()
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
	fg := githubRepo(t, "web", map[string]string{"README.md": "v1\n"})
	gh, p := fg.f, fg.p
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

// TestPRCommentOnceOnRedelivery: a PRComment job delivered again (its worker was killed after
// posting, before its result was stored) finds its comment by the hidden marker and does not
// post a second one, on every forge; another step's comment on the same PR is still posted.
// Before, each delivery posted (chaos: "PR comments posted twice").
func TestPRCommentOnceOnRedelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	def, _ := steps.Default.Lookup(steps.TypePRComment)
	eachForge(t, func(t *testing.T, fg forge) {
		head, err := fg.p.Branch(ctx, "acme/release", "main")
		if err != nil {
			t.Fatal(err)
		}
		if err := fg.p.CreateBranch(ctx, "acme/release", "prflow/c", head.SHA); err != nil {
			t.Fatal(err)
		}
		if _, err := fg.p.Commit(ctx, "acme/release", scm.CommitInput{Branch: "prflow/c", Parent: head.SHA, Message: "c",
			Author: scm.Signature{Name: "t", Email: "t@example.com"}, Changes: []scm.FileChange{{Path: "c.txt", Content: []byte("c\n")}}}); err != nil {
			t.Fatal(err)
		}
		pr, err := fg.p.OpenPR(ctx, "acme/release", scm.NewPR{Title: "c", Head: "prflow/c", Base: "main"})
		if err != nil {
			t.Fatal(err)
		}
		svc := steps.NewServices(map[string]any{steps.ServiceSCM: connector.Static{"release": fg.p}})
		run := func(step, body string, delivery int) steps.Result {
			t.Helper()
			sc := &steps.Context{RunID: "r1", Stage: "dev", StepID: step, Type: steps.TypePRComment, Attempt: 1, Delivery: delivery,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: svc,
				Inputs: map[string]any{"connector": "release", "repo": "acme/release", "prNumber": pr.Number, "body": body}}
			res, err := def.New().Run(ctx, sc)
			if err != nil || res.Status != steps.Succeeded {
				t.Fatalf("%s delivery %d: %v %+v", step, delivery, err, res)
			}
			return res
		}
		const body = "**prflow**: this PR promotes 1.2.3"
		for d, want := range []bool{true, false, false} {
			if res := run("prflow-comment-update", body, d+1); res.Outputs["posted"] != want {
				t.Fatalf("delivery %d: posted = %v, want %v", d+1, res.Outputs["posted"], want)
			}
		}
		if res := run("prflow-comment-revert", "**prflow**: this PR reverts 1.2.3", 1); res.Outputs["posted"] != true {
			t.Fatalf("another step's comment was not posted: %+v", res)
		}
		got, err := fg.p.ListComments(ctx, "acme/release", pr.Number)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !strings.HasPrefix(got[0].Body, body) {
			t.Fatalf("comments = %+v, want the promote comment once and the revert comment", got)
		}
	})
}
