package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
)

// clean is an observation of six runs (two per group) that did everything right.
func clean() ([]RunSpec, Observed) {
	specs := Specs(6, 7)
	obs := Observed{Runs: map[string]RunResult{}, BranchPrefix: branchPrefix, Repo: &RepoState{Final: map[FileKey]string{}}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, s := range specs {
		obs.Runs[s.ID] = RunResult{Status: "succeeded"}
		head := branchPrefix + s.ID + "/promote-update"
		sha := fmt.Sprintf("%040d", i+1)
		obs.Repo.PRs = append(obs.Repo.PRs, PRRecord{Number: i + 1, State: "merged", Head: head, Base: "main", MergeSHA: sha})
		obs.Repo.History = append(obs.Repo.History, Commit{SHA: sha, Message: fmt.Sprintf("Merge pull request #%d from %s\n", i+1, head),
			Changed: map[FileKey]string{{s.File, s.Key}: s.Value}})
		obs.Repo.Final[FileKey{s.File, s.Key}] = s.Value
		job := s.ID + "/promote/update/1/0"
		// A job run twice one after the other (a redelivery after a kill) is not an overlap.
		obs.Execs = append(obs.Execs,
			Exec{Job: job, Worker: "w0-0", Start: t0, End: t0.Add(time.Second), Killed: true},
			Exec{Job: job, Worker: "w1-0", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second)})
	}
	return specs, obs
}

func TestEvaluateCleanPasses(t *testing.T) {
	specs, obs := clean()
	for _, c := range Evaluate(specs, obs) {
		if !c.OK() {
			t.Errorf("check %q failed on a clean run: %v", c.Name, c.Details)
		}
	}
}

// TestEvaluateWithoutRepo: when the release repo could not be read, each check over it fails
// saying so, and only so; "values applied twice" still counts the runs.
func TestEvaluateWithoutRepo(t *testing.T) {
	specs, obs := clean()
	obs.Repo = nil
	repoChecks := map[string]bool{"lost updates": true, "values applied twice": true, "leftover branches": true,
		"open PRs": true, "commits not from a run's merge": true, "PR comments posted twice": true}
	for _, c := range Evaluate(specs, obs) {
		switch {
		case !repoChecks[c.Name]:
			continue
		case c.Bad != 1 || len(c.Details) != 1 || c.Details[0] != "release repo not read":
			t.Errorf("check %q without the repo: %d misses %v, want one: release repo not read", c.Name, c.Bad, c.Details)
		case c.Name == "values applied twice" && c.Counted != len(specs):
			t.Errorf("values applied twice counted %d, want the %d runs", c.Counted, len(specs))
		}
		delete(repoChecks, c.Name)
	}
	for name := range repoChecks {
		t.Errorf("no check %q", name)
	}
}

// TestEvaluateCatches: each kind of damage makes exactly its check fail (and those that must
// follow from it), with a detail naming the run, PR, branch or job.
func TestEvaluateCatches(t *testing.T) {
	specs, _ := clean()
	distinct, oneKey := specs[0], specs[2]
	cases := []struct {
		name   string
		damage func(o *Observed)
		fail   map[string]string // check → a substring of its detail
	}{
		{"run failed", func(o *Observed) {
			o.Runs[distinct.ID] = RunResult{Status: "failed", Where: "promote/sync failed", Error: "revision mismatch"}
		}, map[string]string{"runs succeeded": distinct.ID + " (distinct-files): failed at promote/sync failed: revision mismatch"}},
		{"run still waiting", func(o *Observed) {
			o.Runs[distinct.ID] = RunResult{Status: "running", Where: "promote/merge waiting"}
		}, map[string]string{"runs terminal": "still running", "runs succeeded": distinct.ID}},
		{"run never started", func(o *Observed) { delete(o.Runs, distinct.ID) },
			map[string]string{"runs terminal": "never started", "runs succeeded": distinct.ID}},
		{"second PR", func(o *Observed) {
			o.Repo.PRs = append(o.Repo.PRs, PRRecord{Number: 9, State: "closed", Head: branchPrefix + distinct.ID + "/promote-update", Base: "main"})
		}, map[string]string{"exactly one PR per run": distinct.ID + ": 2 PRs (#1 merged, #9 closed)"}},
		{"no PR", func(o *Observed) { o.Repo.PRs = o.Repo.PRs[1:] },
			// Its merge commit is still attributed by the message.
			map[string]string{"exactly one PR per run": distinct.ID + ": 0 PRs"}},
		{"merged twice", func(o *Observed) {
			c := o.Repo.History[0]
			c.SHA, c.Changed = strings.Repeat("a", 40), map[FileKey]string{}
			o.Repo.History = append(o.Repo.History, c)
		}, map[string]string{"exactly one merge per run": distinct.ID + ": merged 2 times"}},
		{"distinct value lost", func(o *Observed) {
			o.Repo.Final[FileKey{distinct.File, distinct.Key}] = "older"
		}, map[string]string{"lost updates": `is "older" at the end, want "v7-00"`}},
		{"one-key value from no run", func(o *Observed) {
			o.Repo.Final[FileKey{oneKey.File, oneKey.Key}] = "seed"
		}, map[string]string{"lost updates": "no merged run of the group set it"}},
		{"run never merged", func(o *Observed) {
			// Not merged, so its value is missing, but nothing was lost: other checks count it.
			o.Runs[distinct.ID] = RunResult{Status: "failed", Where: "promote/merge failed"}
			o.Repo.PRs[0].State, o.Repo.PRs[0].MergeSHA = "closed", ""
			o.Repo.History = o.Repo.History[1:]
			delete(o.Repo.Final, FileKey{distinct.File, distinct.Key})
		}, map[string]string{"runs succeeded": distinct.ID, "exactly one merge per run": distinct.ID + ": merged 0 times"}},
		{"one-key last merge lost", func(o *Observed) {
			// Run 05 merged after run 02, yet the key holds run 02's value.
			o.Repo.Final[FileKey{oneKey.File, oneKey.Key}] = oneKey.Value
		}, map[string]string{"lost updates": `is "v7-02" (run chaos-s7-02) at the end, but the last merge of the group was run chaos-s7-05's`}},
		{"value applied twice", func(o *Observed) {
			o.Repo.History = append(o.Repo.History, Commit{SHA: strings.Repeat("b", 40), Message: "Merge pull request #1 from " + branchPrefix + distinct.ID + "/promote-update",
				Changed: map[FileKey]string{{distinct.File, distinct.Key}: distinct.Value}})
		}, map[string]string{"values applied twice": distinct.ID + ": " + distinct.File + "#value=\"v7-00\" applied by 2 commits",
			"exactly one merge per run": distinct.ID}},
		{"succeeded without its value", func(o *Observed) { o.Repo.History[0].Changed = map[FileKey]string{} },
			map[string]string{"values applied twice": "never reached the base branch"}},
		{"leftover branch", func(o *Observed) { o.Repo.Branches = []string{branchPrefix + distinct.ID + "/promote-update"} },
			map[string]string{"leftover branches": "branch prflow/chaos/chaos-s7-00/promote-update still exists"}},
		{"open PR", func(o *Observed) {
			o.Repo.PRs = append(o.Repo.PRs, PRRecord{Number: 8, State: "open", Head: "x", Base: "main"})
			o.Repo.OpenSlots = []string{"refs/prflow/open/abc"}
		}, map[string]string{"open PRs": "PR #8 x → main is open"}},
		{"open slot without open PR", func(o *Observed) { o.Repo.OpenSlots = []string{"refs/prflow/open/abc"} },
			map[string]string{"open PRs": "1 open-PR slots"}},
		{"comment posted twice", func(o *Observed) {
			pr := &o.Repo.PRs[1]
			pr.Comments = append(pr.Comments, PRComment{"**prflow**: this PR updates"}, PRComment{"looks good"}, PRComment{"**prflow**: this PR updates"})
		}, map[string]string{"PR comments posted twice": "PR #2 (prflow/chaos/chaos-s7-01/promote-update) has 2 prflow comments"}},
		{"worker panicked", func(o *Observed) { o.Crashes = map[string]string{"worker-w1-0": "panic: boom"} },
			map[string]string{"processes crashed (panic, race)": "worker-w1-0: panic: boom"}},
		{"stray commit", func(o *Observed) {
			o.Repo.History = append(o.Repo.History, Commit{SHA: strings.Repeat("c", 40), Message: "direct push\n"})
		}, map[string]string{"commits not from a run's merge": `"direct push"`}},
		{"job overlaps after a kill", func(o *Observed) {
			e := o.Execs[0]
			o.Execs = append(o.Execs, Exec{Job: e.Job, Worker: "w2-1", Start: e.End.Add(-time.Millisecond), End: e.End.Add(time.Second)})
		}, map[string]string{"jobs run twice at the same time": "on w0-0", "steps run twice at the same time": "on w0-0"}},
		{"job overlaps on one worker", func(o *Observed) {
			e := o.Execs[1]
			o.Execs = append(o.Execs, Exec{Job: e.Job, Worker: e.Worker, Start: e.Start.Add(500 * time.Millisecond), End: e.End.Add(time.Second)})
		}, map[string]string{"jobs run twice at the same time": "on w1-0", "steps run twice at the same time": "on w1-0"}},
		{"two wakes of one step overlap", func(o *Observed) {
			e := o.Execs[1]
			o.Execs = append(o.Execs, Exec{Job: strings.TrimSuffix(e.Job, "/0") + "/1", Worker: "w2-0", Start: e.Start.Add(500 * time.Millisecond), End: e.End.Add(time.Second)})
		}, map[string]string{"steps run twice at the same time": "jobs " + specs[0].ID + "/promote/update/1/0 and " + specs[0].ID + "/promote/update/1/1"}},
		{"next wake after the previous one", func(o *Observed) {
			e := o.Execs[1]
			o.Execs = append(o.Execs, Exec{Job: strings.TrimSuffix(e.Job, "/0") + "/1", Worker: "w2-0", Start: e.End, End: e.End.Add(time.Second)})
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, obs := clean()
			tc.damage(&obs)
			for _, c := range Evaluate(specs, obs) {
				want, shouldFail := tc.fail[c.Name]
				switch {
				case shouldFail && c.OK():
					t.Errorf("check %q passed; want it to catch %s", c.Name, tc.name)
				case shouldFail && !strings.Contains(strings.Join(c.Details, "\n"), want):
					t.Errorf("check %q details %q; want one containing %q", c.Name, c.Details, want)
				case !shouldFail && !c.OK():
					t.Errorf("check %q failed too: %v", c.Name, c.Details)
				}
			}
		})
	}
}

func TestParseWorkerLog(t *testing.T) {
	log := `{"time":"2026-01-01T00:00:00.100Z","level":"INFO","msg":"worker started","worker":"w0-0"}
{"time":"2026-01-01T00:00:00.200Z","level":"DEBUG","msg":"job started","worker":"w0-0","job":"r/s/a/1/0","delivery":1}
{"time":"2026-01-01T00:00:00.300Z","level":"DEBUG","msg":"job started","worker":"w0-0","job":"r/s/b/1/0","delivery":1}
{"time":"2026-01-01T00:00:00.400Z","level":"DEBUG","msg":"job returned","worker":"w0-0","job":"r/s/a/1/0","delivery":1,"err":false}
not json: goroutine 1 [running]
{"time":"2026-01-01T00:00:00.500Z","level":"DEBUG","msg":"job st`
	exit := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	got, err := ParseWorkerLog(strings.NewReader(log), "w0-0", exit, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d executions, want 2: %+v", len(got), got)
	}
	a, b := got[0], got[1]
	if a.Job != "r/s/a/1/0" || a.Killed || a.End.Sub(a.Start) != 200*time.Millisecond {
		t.Errorf("finished execution: %+v", a)
	}
	if b.Job != "r/s/b/1/0" || !b.Killed || !b.End.Equal(exit) {
		t.Errorf("execution cut by the kill: %+v", b)
	}
	if l := CrashLine(strings.NewReader(log + "\nWARNING: DATA RACE\nWrite at 0x00c000\n")); l != "WARNING: DATA RACE" {
		t.Errorf("CrashLine: %q", l)
	}
	if l := CrashLine(strings.NewReader(log)); l != "" {
		t.Errorf("CrashLine of a log without a crash: %q", l)
	}
	if _, err := ParseWorkerLog(strings.NewReader(`{"time":"2026-01-01T00:00:00Z","msg":"job returned","job":"x"}`), "w", exit, false); err == nil ||
		!strings.Contains(err.Error(), "returned without having started") {
		t.Errorf("a return without a start: %v", err)
	}
}

// TestReadRepoFindsLeftovers runs the checks on a real bare repo where the local driver merged
// one run's PR properly and left another's branch and PR open: the reader sees the merge, the
// values, the leftover branch and the open PR.
func TestReadRepoFindsLeftovers(t *testing.T) {
	gs := scmtest.NewGitServer(t)
	files := map[string]string{watchDir + "/shared.json": "{\n  \"runs\": {}\n}\n", watchDir + "/onekey.json": "{\"value\": \"seed\"}\n"}
	seed, err := gs.CreateRepo(owner, repo, files)
	if err != nil {
		t.Fatal(err)
	}
	eng := gitengine.New(gitengine.WithBasicAuth("x-access-token", scmtest.DefaultToken), gitengine.WithTempDir(t.TempDir()))
	p, err := local.New(gs.URL(), local.WithEngine(eng))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r := scm.Repo(owner + "/" + repo)
	specs := Specs(3, 1)[:2] // a distinct file, a key of the shared file
	open := func(s RunSpec, content string) *scm.PullRequest {
		head := branchPrefix + s.ID + "/promote-update"
		if _, err := p.Commit(ctx, r, scm.CommitInput{Branch: head, Parent: mustHead(t, p, r), Message: "set " + s.Key,
			Changes: []scm.FileChange{{Path: s.File, Content: []byte(content)}}}); err != nil {
			t.Fatal(err)
		}
		pr, err := p.OpenPR(ctx, r, scm.NewPR{Title: "promote " + s.ID, Head: head, Base: "main"})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	merged := open(specs[0], `{"value": "`+specs[0].Value+`"}`)
	if _, err := p.MergePR(ctx, r, merged.Number, scm.MergeInput{Method: scm.MergeCommit, DeleteBranch: true, Head: merged.Head}); err != nil {
		t.Fatal(err)
	}
	open(specs[1], `{"runs": {"r01": "`+specs[1].Value+`"}}`)

	st, err := ReadRepo(gs.Dir(owner, repo), "main", seed, watchDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.History) != 1 || len(st.History[0].Parents) != 2 || st.History[0].Changed[FileKey{specs[0].File, "value"}] != specs[0].Value {
		t.Fatalf("history: %+v", st.History)
	}
	obs := Observed{Runs: map[string]RunResult{specs[0].ID: {Status: "succeeded"}, specs[1].ID: {Status: "succeeded"}},
		Repo: st, BranchPrefix: branchPrefix}
	got := map[string]Check{}
	for _, c := range Evaluate(specs, obs) {
		got[c.Name] = c
	}
	want := map[string]int{"processes crashed (panic, race)": 0, "PR comments posted twice": 0, "steps run twice at the same time": 0, "runs terminal": 0, "runs succeeded": 0, "exactly one PR per run": 0, "exactly one merge per run": 1,
		"lost updates": 0, "values applied twice": 1, "leftover branches": 1, "open PRs": 1, "commits not from a run's merge": 0,
		"jobs run twice at the same time": 0}
	for name, bad := range want {
		if got[name].Bad != bad {
			t.Errorf("check %q: %d misses %v, want %d", name, got[name].Bad, got[name].Details, bad)
		}
	}
	if d := got["leftover branches"].Details; len(d) != 1 || !strings.Contains(d[0], specs[1].ID) {
		t.Errorf("leftover branch details: %v", d)
	}
	if d := got["open PRs"].Details; len(d) != 1 || !strings.Contains(d[0], "PR #2") {
		t.Errorf("open PR details: %v", d)
	}
}

func mustHead(t *testing.T, p *local.Provider, r scm.Repo) string {
	t.Helper()
	ref, err := p.Branch(t.Context(), r, "main")
	if err != nil {
		t.Fatal(err)
	}
	return ref.SHA
}

// Hand-back lines in a worker's log count once each plus the lines a rate-limited one stood
// for; other lines, and a line cut short by SIGKILL, do not count; each one fails the check.
func TestHandBacksCounted(t *testing.T) {
	log := `{"time":"2026-11-28T01:00:00Z","level":"WARN","msg":"job delivered with no free slot; handed back","reason":"no_free_slot"}
{"time":"2026-11-28T01:00:01Z","level":"INFO","msg":"worker started"}
{"time":"2026-11-28T01:00:12Z","level":"WARN","msg":"job delivered with no free slot; handed back","reason":"no_free_slot","repeated":2}
{"time":"2026-11-28T01:00:13Z","level":"WARN","msg":"job delivered with no free slot; hand
`
	got := HandBacks(strings.NewReader(log))
	if len(got) != 4 {
		t.Fatalf("%d hand-backs counted, want 4: %v", len(got), got)
	}
	c := checkHandBacks(Observed{HandBacks: []string{"worker-w0-0 at 01:00:00.000"}})
	if c.OK() || c.Bad != 1 {
		t.Fatalf("check = %+v, want one miss", c)
	}
	if c := checkHandBacks(Observed{}); !c.OK() {
		t.Fatalf("no hand-backs: check = %+v", c)
	}
}
