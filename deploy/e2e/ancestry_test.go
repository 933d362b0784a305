package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// The ancestry tests run promotions into one shared release repo on the fake GitHub (real git
// merges) that the fake Argo CD reads over git smart-HTTP, with the real UpdateReleaseRepo,
// MergePR and GitOpsSync steps: the app tracks the branch, so it syncs to whatever the branch
// holds when the sync runs, which after concurrent merges is a later commit than a run's own.

type ancestryStack struct {
	*stack
	gh      *scmtest.GitHub
	p       *github.Driver
	repoURL string
}

func newAncestryStack(t *testing.T) *ancestryStack {
	t.Helper()
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", map[string]string{"apps/web/cm.yaml": configMap("web", "healthy")}); err != nil {
		t.Fatal(err)
	}
	p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := argocdtest.NewGitCLI("", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Close() })
	reader.SetCredentials(gh.Git().URL(), "x-access-token", scmtest.DefaultToken)
	reg := steps.NewRegistry()
	for _, typ := range []string{"UpdateReleaseRepo", "MergePR", "GitOpsSync"} {
		d, ok := steps.Default.Lookup(typ)
		if !ok {
			t.Fatalf("step type %s not registered", typ)
		}
		reg.Register(*d)
	}
	s := newStack(t, stackOpts{gitReader: reader, registry: reg,
		services: map[string]any{steps.ServiceSCM: connector.Static{"release": p}}})
	return &ancestryStack{stack: s, gh: gh, p: p, repoURL: gh.Git().CloneURL("acme", "release")}
}

// waitStepLong is waitStep with room for several concurrent UpdateReleaseRepo and MergePR
// runs on a loaded machine.
func (s *ancestryStack) waitStepLong(id, stage, stepID string, cond func(*pipelines.StepRun) bool) *pipelines.Run {
	s.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		r, err := s.ctl.Get(context.Background(), id)
		if err == nil {
			if st := step(r, stage, stepID); st != nil && cond(st) {
				return r
			}
			if r.Status == pipelines.StFailed {
				s.t.Fatalf("run %s failed before %s/%s parked: %s", id, stage, stepID, r.Error)
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("step %s/%s of run %s did not park behind alice's operation\n%s", stage, stepID, id, describeRun(r))
		}
	}
}

// addWeb adds the app web tracking targetRevision of the release repo.
func (s *ancestryStack) addWeb(targetRevision string) {
	a := app("web", "apps/web", nil)
	a.Spec.Source.RepoURL = s.repoURL
	a.Spec.Source.TargetRevision = targetRevision
	s.addApp(a)
	s.waitRecord("web")
}

// promotion is one run: edit envs/<env>/config.json, merge the PR, sync web.
func promotion(env string) string {
	return `name: promote-` + env + `
environments:
  - name: dev
    clusters: [{name: in-cluster, agent: eu}]
stages:
  - id: dev
    environment: dev
    steps:
      - id: update
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: envs/` + env + `/config.json
          create: true
          variables: [{name: image.tag, type: String, value: "` + env + `"}]
      - {id: merge, type: MergePR, with: {mergeStrategy: merge}}
` + syncBlind("")
}

func TestGitOpsSyncPassesAtALaterCommitContainingTheMerge(t *testing.T) {
	t.Parallel()
	// Issue 14: promotions merge into one branch while the app is busy; when it syncs it is at
	// the branch head, which contains every run's merge but equals only the last one. Every
	// run must pass on its own sync (no re-sync), and say it passed at a containing commit.
	const runs = 4
	s := newAncestryStack(t)
	s.addWeb("main")
	if err := s.argo.StartOperation("web", "alice", argocdtest.SyncScript{Hang: true}); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, runs)
	for i := range runs {
		ids[i] = s.start(promotion(fmt.Sprintf("r%d", i)), nil).ID
	}
	// All merges land while alice's operation holds the app.
	merged := map[string]string{}
	for i, id := range ids {
		r := s.waitStepLong(id, "dev", "sync", func(st *pipelines.StepRun) bool {
			return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "alice")
		})
		sha, _ := step(r, "dev", "merge").Outputs["commitId"].(string)
		if sha == "" {
			t.Fatalf("run %d: no merge commit", i)
		}
		merged[id] = sha
	}
	head, err := s.p.Branch(context.Background(), "acme/release", "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.argo.ReleaseOperation("web"); err != nil {
		t.Fatal(err)
	}
	contains := 0
	for i, id := range ids {
		r := s.wait(id, 90*time.Second)
		if r.Status != pipelines.StSucceeded {
			t.Fatalf("run %d: %s: %s\n%s", i, r.Status, r.Error, describeRun(r))
		}
		apps := appsOut(step(r, "dev", "sync"))
		if len(apps) != 1 || apps[0]["expectedRevision"] != merged[id] || apps[0]["deployedRevision"] == nil {
			t.Fatalf("run %d: applications %v", i, apps)
		}
		dep := apps[0]["deployedRevision"].(string)
		if dep != merged[id] {
			// It passed at another commit: that commit must really contain the run's merge.
			yes, err := s.p.IsAncestor(context.Background(), "acme/release", merged[id], dep)
			if err != nil || !yes || apps[0]["revisionMatch"] != "contains" {
				t.Fatalf("run %d passed at %s (%v), which does not contain its merge %s: %v %v", i, dep, apps[0]["revisionMatch"], merged[id], yes, err)
			}
			contains++
		} else if apps[0]["revisionMatch"] != "exact" {
			t.Fatalf("run %d: revisionMatch %v at its own merge", i, apps[0]["revisionMatch"])
		}
	}
	if contains < runs-1 {
		t.Fatalf("only %d of %d runs passed at a later commit (branch head %s): the test does not test ancestry", contains, runs, head.SHA)
	}
	if n := len(s.syncRequests("web")); n != runs {
		t.Fatalf("%d syncs for %d runs: a sync at a containing commit was retried", n, runs)
	}
	compares := 0
	for _, c := range s.gh.Calls() {
		if strings.Contains(c.Path, "/compare/") {
			compares++
		}
	}
	t.Logf("%d runs, %d passed at a later commit, %d compare calls to the forge", runs, contains, compares)
}

func TestGitOpsSyncDoesNotPassAtACommitWithoutTheMerge(t *testing.T) {
	t.Parallel()
	// The app tracks a branch that does not contain the run's merge (a sibling branch, or one
	// left at an older commit): its sync succeeds and it is Synced and Healthy, but not with
	// the change. That must fail after the re-syncs, naming why.
	cases := []struct {
		name   string
		branch func(t *testing.T, s *ancestryStack, root string)
	}{
		{"sibling branch", func(t *testing.T, s *ancestryStack, root string) {
			if _, err := s.gh.Git().Commit("acme", "release", "other", map[string]string{"apps/web/extra.yaml": configMap("extra", "healthy")}, nil, "sibling"); err != nil {
				t.Fatal(err)
			}
		}},
		{"older commit", func(t *testing.T, s *ancestryStack, root string) {}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newAncestryStack(t)
			root, err := s.p.Branch(context.Background(), "acme/release", "main")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.p.CreateBranch(context.Background(), "acme/release", "other", root.SHA); err != nil {
				t.Fatal(err)
			}
			c.branch(t, s, root.SHA)
			s.addWeb("other")
			r := s.wait(s.start(promotion("dev"), nil).ID, 90*time.Second)
			st := step(r, "dev", "sync")
			merge, _ := step(r, "dev", "merge").Outputs["commitId"].(string)
			if r.Status != pipelines.StFailed || st == nil || merge == "" {
				t.Fatalf("run %s %q: an app without the merge passed the gate\n%s", r.Status, r.Error, describeRun(r))
			}
			want := fmt.Sprintf("expected %s (after 2 re-syncs with a hard refresh) (", merge)
			if !strings.Contains(st.Error, want) || !strings.Contains(st.Error, "does not contain "+merge[:12]) {
				t.Fatalf("error %q, want %q and why", st.Error, want)
			}
			// A failed step's outputs are not kept by the controller today (issue 20); when
			// they are, the app must not claim a deployed revision.
			for _, a := range appsOut(st) {
				if a["deployedRevision"] != nil || a["state"] == "done" {
					t.Fatalf("applications %v", a)
				}
			}
		})
	}
}

// directSync runs GitOpsSync for web in process, as the worker would, re-running it after each
// park; expected is the stage's merge commit. It returns the first result that is not a park,
// or the first error.
type directSync struct {
	s        *ancestryStack
	expected string
	memo     []byte
	wake     int
}

func (d *directSync) run(t *testing.T, timeout time.Duration) (steps.Result, error) {
	t.Helper()
	def, _ := steps.Default.Lookup("GitOpsSync")
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		sc := &steps.Context{RunID: "run-ancestry", Stage: "dev", StepID: "sync", Type: "GitOpsSync", Attempt: 1, Wake: d.wake,
			Inputs: map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu", "applicationName": "web"}},
				"connector": "release", "repo": "acme/release"},
			Priors: []steps.Prior{{ID: "merge", Type: "MergePR", Outputs: map[string]any{"commitId": d.expected}}},
			Memo:   d.memo, Deadline: time.Now().Add(time.Minute), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Services: steps.NewServices(map[string]any{steps.ServiceGitOps: d.s.client, steps.ServiceSCM: connector.Static{"release": d.s.p}})}
		res, err := def.New().Run(context.Background(), sc)
		if err != nil || res.Status != steps.Waiting {
			return res, err
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %s: %s", timeout, res.Wait.Reason)
		}
		d.memo, d.wake = res.Memo, d.wake+1
	}
}

// commits makes two direct commits on main: ours, then someone else's on top.
func (s *ancestryStack) commits(t *testing.T) (ours, later string) {
	t.Helper()
	var err error
	if ours, err = s.gh.Git().Commit("acme", "release", "main", map[string]string{"envs/a/config.json": "{}\n"}, nil, "ours"); err != nil {
		t.Fatal(err)
	}
	if later, err = s.gh.Git().Commit("acme", "release", "main", map[string]string{"envs/b/config.json": "{}\n"}, nil, "someone else's"); err != nil {
		t.Fatal(err)
	}
	return ours, later
}

func TestGitOpsSyncAncestryLookupErrorIsRetriedNotPassed(t *testing.T) {
	t.Parallel()
	// The forge fails the ancestry question: the step must neither pass nor re-sync; it
	// returns a transient error (the worker retries) until the forge answers, then passes.
	s := newAncestryStack(t)
	s.addWeb("main")
	ours, later := s.commits(t)
	if err := s.gh.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "/compare/", Status: 502}); err != nil {
		t.Fatal(err)
	}
	d := &directSync{s: s, expected: ours}
	_, err := d.run(t, 30*time.Second)
	if err == nil || steps.IsTerminal(err) || !strings.Contains(err.Error(), "contains "+ours[:12]) || !strings.Contains(err.Error(), "acme/release") {
		t.Fatalf("lookup error: %v (terminal %v), want a transient error naming the commits and repo", err, steps.IsTerminal(err))
	}
	// The forge answers again: the redelivered job (same memo) passes at the later commit.
	s.gh.ClearFaults()
	res, err := d.run(t, 30*time.Second)
	if err != nil || res.Status != steps.Succeeded {
		t.Fatalf("after the forge recovered: %+v %v", res, err)
	}
	apps, _ := res.Outputs["applications"].([]any)
	a, _ := apps[0].(map[string]any)
	if a["deployedRevision"] != later || a["revisionMatch"] != "contains" || a["expectedRevision"] != ours {
		t.Fatalf("applications %v, want deployed at %s", apps, later)
	}
	if n := len(s.syncRequests("web")); n != 1 {
		t.Fatalf("%d syncs: the lookup error caused a re-sync", n)
	}
}

func TestGitOpsSyncPinnedAppNeedsTheExactRevision(t *testing.T) {
	t.Parallel()
	// An app pinned to a commit (targetRevision is a full SHA) that contains ours still does
	// not pass: for pinned apps only the exact revision counts.
	s := newAncestryStack(t)
	ours, later := s.commits(t)
	s.addWeb(later)
	d := &directSync{s: s, expected: ours}
	res, err := d.run(t, 60*time.Second)
	if err != nil || res.Status != steps.Failed {
		t.Fatalf("pinned app at a containing commit: %+v %v, want Failed", res, err)
	}
	if !strings.Contains(res.Message, fmt.Sprintf("synced revision %s, expected %s", later, ours)) || !strings.Contains(res.Message, "pinned to "+later[:12]) {
		t.Fatalf("message %q", res.Message)
	}
}
