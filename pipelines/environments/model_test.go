package environments_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
)

// TestTwoPipelinesPromotingOneEnvironment: two pipelines writing dev make one dev row that
// lists both; its desired value is the newest merge's, whichever pipeline made it, and its
// history has both promotions with old → new.
func TestTwoPipelinesPromotingOneEnvironment(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	a := e.run(promote("web-a", "dev"), "1.5.0", pipelines.StSucceeded)
	b := e.run(promote("web-b", "dev"), "1.6.0", pipelines.StSucceeded)
	want := mergeCommit(b, "dev")
	dev := e.waitEnv("dev", "desired at web-b's merge", func(env *environments.Environment) bool {
		return env.Desired.Commit == want
	})
	if len(dev.Pipelines) != 2 || dev.Pipelines[0] != "web-a" || dev.Pipelines[1] != "web-b" {
		t.Errorf("pipelines %v, want [web-a web-b]", dev.Pipelines)
	}
	if v := valueOf(dev, "image.tag"); v != "1.6.0" || dev.Desired.Run != b.ID || dev.Desired.Pipeline != "web-b" || dev.Desired.PR == "" {
		t.Errorf("desired %+v, want image.tag 1.6.0 by run %s of web-b with its PR", dev.Desired, b.ID)
	}
	if dev.Desired.Repo != "acme/release" || dev.Desired.Branch == "" || len(dev.Desired.Files) != 1 || dev.Desired.Files[0] != "envs/dev/config.json" {
		t.Errorf("desired repo %q branch %q files %v", dev.Desired.Repo, dev.Desired.Branch, dev.Desired.Files)
	}
	list, err := e.model.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, env := range list {
		if env.Name == "dev" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d dev rows, want one", n)
	}
	h := history(t, e.model, "dev")
	if len(h) != 2 || h[0].Run != b.ID || h[1].Run != a.ID {
		t.Fatalf("history %+v, want b's then a's promotion", h)
	}
	if c := h[0].Changes; len(c) != 1 || c[0].Old != "1.5.0" || c[0].New != "1.6.0" || h[0].Result != "succeeded" || h[0].Commit != want || h[0].By != "tester" {
		t.Errorf("newest entry %+v, want 1.5.0 → 1.6.0 succeeded at %s by tester", h[0], want)
	}
	// The first promotion's old value is the one UpdateReleaseRepo replaced (its edits output
	// records it), though the model knew nothing of dev before.
	if c := h[1].Changes; len(c) != 1 || c[0].Old != "1.4.1" || c[0].New != "1.5.0" {
		t.Errorf("first entry changes %+v, want 1.4.1 → 1.5.0", c)
	}
}

// TestHandCommitIsChangedOutsidePrflow: a push to the release branch that touches dev's file
// and is not a merge prflow made says so (author, commit, files) and leaves the values
// unknown until a worker has read them (then 6.6.6); prflow's own merges, which reach the model as pushes too, never do.
func TestHandCommitIsChangedOutsidePrflow(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	r := e.run(promote("web", "dev"), "2.0.0", pipelines.StSucceeded)
	merged := mergeCommit(r, "dev")
	if err := e.gh.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	dev := e.waitEnv("dev", "desired by the run", func(env *environments.Environment) bool { return env.Desired.Commit == merged })
	if dev.Desired.Outside != nil {
		t.Fatalf("prflow's own merge shown as an outside change: %+v", dev.Desired.Outside)
	}
	// A hand commit to a file of another environment changes nothing for dev.
	ctx := context.Background()
	hand := func(file, content string) string {
		t.Helper()
		head, err := e.ghp.Branch(ctx, "acme/release", dev.Desired.Branch)
		if err != nil {
			t.Fatal(err)
		}
		sha, err := e.ghp.Commit(ctx, "acme/release", scm.CommitInput{Branch: dev.Desired.Branch, Parent: head.SHA, Message: "hand edit",
			Changes: []scm.FileChange{{Path: file, Content: []byte(content)}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.gh.WaitWebhooks(ctx); err != nil {
			t.Fatal(err)
		}
		return sha
	}
	hand("envs/prod/config.json", `{"image": {"tag": "9.9.9"}}`)
	time.Sleep(300 * time.Millisecond) // the model has seen the push by now (its webhook was delivered)
	if d, _ := e.model.Get(ctx, "dev"); d.Desired.Outside != nil || d.Desired.Commit != merged {
		t.Fatalf("a commit to prod's file changed dev: %+v", d.Desired)
	}
	sha := hand("envs/dev/config.json", `{"image": {"tag": "6.6.6"}}`)
	dev = e.waitEnv("dev", "changed outside prflow", func(env *environments.Environment) bool { return env.Desired.Outside != nil })
	o := dev.Desired.Outside
	if o.Commit != sha || o.Author == "" || len(o.Files) != 1 || o.Files[0] != "envs/dev/config.json" || dev.Desired.Commit != sha {
		t.Errorf("outside change %+v (desired commit %s), want commit %s of envs/dev/config.json", o, dev.Desired.Commit, sha)
	}
	if v := valueOf(dev, "image.tag"); v == "2.0.0" || dev.Desired.Run != "" || (v == nil) != dev.Desired.ValuesUnknown {
		t.Errorf("after a hand commit the values must be unknown or read (6.6.6), never the run's: %+v", dev.Desired)
	}
	e.waitEnv("dev", "showing the value read", func(env *environments.Environment) bool { return valueOf(env, "image.tag") == "6.6.6" })
	// The next promotion puts prflow back in charge.
	r2 := e.run(promote("web", "dev"), "2.1.0", pipelines.StSucceeded)
	dev = e.waitEnv("dev", "desired by the second run", func(env *environments.Environment) bool { return env.Desired.Commit == mergeCommit(r2, "dev") })
	if dev.Desired.Outside != nil || dev.Desired.ValuesUnknown || valueOf(dev, "image.tag") != "2.1.0" {
		t.Errorf("after a new promotion: %+v", dev.Desired)
	}
}

// rollbackPipeline is promote's prod, verified by an approval, its merge reverted on failure.
var rollbackPipeline = promote("web-prod", "prod") + `      - id: verify
        type: Approval
        timeout: 5m
        with: {approvers: {groups: [release], minimumCount: 1}}
    rollbackSteps:
      - id: revert
        type: RevertPR
        with: {connector: release, repo: acme/release, commitId: "${{ steps.merge.outputs.commitId }}"}
      - id: mergeRevert
        type: MergePR
        with: {connector: release, repo: acme/release}
`

// TestRollbackRestoresTheValue: a stage whose change was merged and then reverted (its
// verification rejected) leaves the environment at the value before it, at the revert's
// merge commit; its history entry says it was rolled back.
func TestRollbackRestoresTheValue(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	alice := controller.User{Name: "alice", Groups: []string{"release"}}
	start := func(tag string, approve bool) *pipelines.Run {
		t.Helper()
		r := e.Start(rollbackPipeline, map[string]any{"tag": tag})
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			cur, _ := e.Ctl.Get(context.Background(), r.ID)
			if cur != nil && cur.WaitingApproval() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s never waited for its approval", r.ID)
			}
		}
		if err := e.Ctl.Decide(context.Background(), r.ID, controller.SignalRequest{Stage: "prod", Step: "verify", Approve: approve}, alice); err != nil {
			t.Fatal(err)
		}
		return e.Wait(r.ID, 90*time.Second)
	}
	good := start("3.0.0", true)
	if good.Status != pipelines.StSucceeded {
		t.Fatalf("first run: %s %s", good.Status, good.Error)
	}
	bad := start("3.1.0", false)
	if bad.Status != pipelines.StFailed {
		t.Fatalf("rejected run: %s, want failed", bad.Status)
	}
	revertMerge, _ := bad.Find("prod").Step("mergeRevert", true).Outputs["commitId"].(string)
	if revertMerge == "" {
		t.Fatalf("the rollback merged nothing: %+v", bad.Find("prod").Rollback)
	}
	prod := e.waitEnv("prod", "at the revert", func(env *environments.Environment) bool { return env.Desired.Commit == revertMerge })
	if v := valueOf(prod, "image.tag"); v != "3.0.0" || prod.Desired.Run != bad.ID {
		t.Errorf("after the rollback: image.tag %v by run %s, want 3.0.0 restored by %s", v, prod.Desired.Run, bad.ID)
	}
	h := history(t, e.model, "prod")
	if len(h) != 2 || h[0].Run != bad.ID || !h[0].RolledBack || h[0].Result != "failed" || h[1].RolledBack {
		t.Fatalf("history %+v, want the rejected run rolled back first, then the good one", h)
	}
	if c := h[0].Changes; len(c) != 1 || c[0].Old != "3.0.0" || c[0].New != "3.1.0" {
		t.Errorf("rolled back entry changes %+v, want 3.0.0 → 3.1.0", c)
	}
}

// TestPipelineDeleted: an environment only a removed pipeline declared is gone (Get answers
// ErrNotFound), one another pipeline still declares stays with only that pipeline; the
// history bucket keeps what was stored.
func TestPipelineDeleted(t *testing.T) {
	e := newEnvEnv(t)
	trig := func(files map[string]string) {
		t.Helper()
		if files == nil {
			e.Ctl.SetTriggers(nil)
			return
		}
		src := map[string][]byte{}
		for n, s := range files {
			src[n] = []byte(s + pushTrigger)
		}
		ts, err := controller.NewTriggerSet(steps.Default, src)
		if err != nil {
			t.Fatal(err)
		}
		e.Ctl.SetTriggers(ts)
	}
	trig(map[string]string{"a.yaml": promote("web-a", "qa"), "b.yaml": promote("web-b", "qa"), "c.yaml": promote("web-c", "perf")})
	e.waitEnv("perf", "declared", func(env *environments.Environment) bool { return env.State == "empty" })
	e.waitEnv("qa", "declared by both", func(env *environments.Environment) bool { return len(env.Pipelines) == 2 })
	trig(map[string]string{"a.yaml": promote("web-a", "qa")})
	e.waitEnv("qa", "declared by web-a only", func(env *environments.Environment) bool {
		return len(env.Pipelines) == 1 && env.Pipelines[0] == "web-a"
	})
	if _, err := e.model.Get(context.Background(), "perf"); !errors.Is(err, environments.ErrNotFound) {
		t.Errorf("perf, whose only pipeline was removed: %v, want ErrNotFound", err)
	}
	trig(nil)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := e.model.Get(context.Background(), "qa")
		if errors.Is(err, environments.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qa still known after its pipelines were removed: %v", err)
		}
	}
	if _, err := e.model.History(context.Background(), "qa", 5); !errors.Is(err, environments.ErrNotFound) {
		t.Errorf("history of a removed environment: %v, want ErrNotFound", err)
	}
}

// TestRunDeletedKeepsHistory: when retention removes a run, the environment's history still
// has its promotion (prflow-envs), and a second model over the same buckets (a restarted or
// second controller) reads the same history without storing it twice.
func TestRunDeletedKeepsHistory(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	src := promote("web", "dev")
	ts, err := controller.NewTriggerSet(steps.Default, map[string][]byte{"web.yaml": []byte(src + pushTrigger)})
	if err != nil {
		t.Fatal(err)
	}
	e.Ctl.SetTriggers(ts)
	r1 := e.run(src, "1.0.0", pipelines.StSucceeded)
	r2 := e.run(src, "1.1.0", pipelines.StSucceeded)
	e.waitEnv("dev", "at r2", func(env *environments.Environment) bool { return env.Desired.Run == r2.ID })
	// A second model (another replica) on the same buckets.
	other := newModel(t, e, ts.Pipelines)
	waitEnvOf(t, other, "dev", "at r2 in the second model", func(env *environments.Environment) bool { return env.Desired.Run == r2.ID })
	ctx := context.Background()
	for _, id := range []string{r1.ID, r2.ID} {
		if err := e.Ctl.Buckets().Runs.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	e.waitEnv("dev", "without runs", func(env *environments.Environment) bool { return env.Desired.Run == "" })
	for _, m := range []environments.Reader{e.model, other} {
		h := history(t, m, "dev")
		if len(h) != 2 || h[0].Run != r2.ID || h[1].Run != r1.ID {
			t.Errorf("history after the runs were deleted: %+v", h)
		}
	}
	raw := storedHistory(t, e, "dev")
	if len(raw) != 2 {
		t.Errorf("prflow-envs holds %d entries for dev, want 2 (one per run and stage, whichever replica wrote)", len(raw))
	}
}

// TestAgentOfflineIsUnknown: while the agent's registration is live its app shows what it
// reports; once the agent is gone the app is Unknown, with why and since when, and never
// the last Healthy record.
func TestAgentOfflineIsUnknown(t *testing.T) {
	e := newEnvEnv(t)
	stop := e.agentUp("sim")
	r := e.run(promote("web", "dev"), "4.0.0", pipelines.StSucceeded)
	merged := mergeCommit(r, "dev")
	e.putApp(app("web-dev", "dev", agent.SyncSynced, agent.HealthHealthy, merged))
	dev := e.waitEnv("dev", "synced", func(env *environments.Environment) bool { return env.State == "synced" })
	if a := dev.Apps; len(a) != 1 || a[0].Health != "Healthy" || a[0].HasDesired != "yes" || a[0].Revision != merged {
		t.Fatalf("apps %+v", a)
	}
	if dev.Group != "appset:web" || dev.ApplicationSet != "web" {
		t.Errorf("group %q appset %q, want appset:web", dev.Group, dev.ApplicationSet)
	}
	before := time.Now()
	stop()
	dev = e.waitEnv("dev", "unknown", func(env *environments.Environment) bool { return env.State == "unknown" })
	a := dev.Apps[0]
	if a.Sync != "Unknown" || a.Health != "Unknown" || a.Unknown == "" || a.Revision != "" || a.HasDesired != "unknown" {
		t.Errorf("offline agent's app %+v: want Unknown with a reason, no revision", a)
	}
	if a.Since.IsZero() || a.Since.Before(before.Add(-time.Second)) {
		t.Errorf("unknown since %v, want about when the agent went (%v)", a.Since, before)
	}
	if dev.Drift != nil {
		t.Errorf("an unknown app is not drift: %+v", dev.Drift)
	}
}

// TestDriftAppearsAndClears: an app running an older revision, then Degraded, drifts with
// reasons and a since that holds while it lasts; converging clears it.
func TestDriftAppearsAndClears(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	old := mergeCommit(e.run(promote("web", "dev"), "5.0.0", pipelines.StSucceeded), "dev")
	cur := mergeCommit(e.run(promote("web", "dev"), "5.1.0", pipelines.StSucceeded), "dev")
	e.putApp(app("web-dev", "dev", agent.SyncSynced, agent.HealthHealthy, old))
	dev := e.waitEnv("dev", "drifted on the old revision", func(env *environments.Environment) bool { return env.State == "drifted" })
	if dev.Apps[0].HasDesired != "no" || len(dev.Drift.Reasons) != 1 || !contains(dev.Drift.Reasons, "web-dev runs "+old[:7]+", not "+cur[:7]) {
		t.Fatalf("drift %+v apps %+v", dev.Drift, dev.Apps)
	}
	since := dev.Drift.Since
	e.putApp(app("web-dev", "dev", agent.SyncOutOfSync, agent.HealthDegraded, old))
	dev = e.waitEnv("dev", "drifted and degraded", func(env *environments.Environment) bool {
		return env.Drift != nil && contains(env.Drift.Reasons, "web-dev is Degraded")
	})
	if !dev.Drift.Since.Equal(since) || !contains(dev.Drift.Reasons, "web-dev is OutOfSync") {
		t.Errorf("drift %+v: since must stay %v while the drift lasts", dev.Drift, since)
	}
	e.putApp(app("web-dev", "dev", agent.SyncSynced, agent.HealthHealthy, cur))
	dev = e.waitEnv("dev", "converged", func(env *environments.Environment) bool { return env.State == "synced" })
	if dev.Drift != nil || dev.Apps[0].HasDesired != "yes" {
		t.Errorf("converged: drift %+v apps %+v", dev.Drift, dev.Apps)
	}
}
