package environments

import (
	"fmt"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
)

// TestHasDesiredFromPushOrder: the branch's pushes order its commits: a revision at or after
// the desired commit has it, one before it or an earlier desired commit does not, and a
// commit never seen pushed is unknown rather than guessed.
func TestHasDesiredFromPushOrder(t *testing.T) {
	parents := map[string]string{}
	bk := branchKey("Acme/Release", "main")
	for _, p := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}} {
		parents[branchKey("acme/release", "main")+"/"+p[1]] = p[0]
	}
	for _, tc := range []struct {
		rev, desired string
		earlier      []string
		want         string
	}{
		{"c", "c", nil, "yes"},
		{"d", "b", nil, "yes"}, // a later commit of the branch
		{"a", "c", nil, "no"},  // an ancestor
		{"z", "c", []string{"z"}, "no"},
		{"z", "c", nil, "unknown"}, // never pushed, never desired
		{"", "c", nil, "unknown"},
		{"c", "", nil, "unknown"},
	} {
		if got := hasDesired(tc.rev, tc.desired, tc.earlier, parents, bk); got != tc.want {
			t.Errorf("hasDesired(%s, %s, %v) = %s, want %s", tc.rev, tc.desired, tc.earlier, got, tc.want)
		}
	}
	// A push cycle (a force push back and forth) ends the walk instead of looping.
	parents[bk+"/a"] = "d"
	if got := hasDesired("a", "q", nil, parents, bk); got != "unknown" {
		t.Errorf("cycle: %s", got)
	}
}

// TestBuildHostileInput: malformed step outputs, odd labels and records of unknown agents
// build without a panic and without inventing values.
func TestBuildHostileInput(t *testing.T) {
	p := &pipelines.Pipeline{Name: "p", Stages: []*pipelines.Stage{{ID: "dev", Environment: "dev"}}}
	now := time.Now()
	run := &pipelines.Run{ID: "r1", Pipeline: "p", Stages: []*pipelines.StageRun{{ID: "dev", Status: pipelines.StSucceeded, Started: now, Ended: now, Steps: []*pipelines.StepRun{
		{ID: "u", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{"edits": map[string]any{"not": "a list"}, "repo": 42}},
		{ID: "u2", Type: "UpdateReleaseRepo", Status: pipelines.StSucceeded, Outputs: map[string]any{"edits": []any{"x", 1, map[string]any{"file": 3, "changes": "no"}}}},
		{ID: "m", Type: "MergePR", Status: pipelines.StSucceeded, Outputs: map[string]any{"commitId": []any{"weird"}}},
		{ID: "f", Type: "FetchLinkedApps", Status: pipelines.StSucceeded, Outputs: map[string]any{"apps": []any{nil, map[string]any{"name": "x"}, "y"}}},
	}}}}
	in := &inputs{decls: map[string][]envDecl{"p": declared(p)}, facts: map[string][]stageFacts{"r1": runFacts(run, p)},
		apps: map[string]*agent.AppStatus{
			"ghost.a": {Agent: "ghost", Name: "a", Labels: map[string]string{labelEnvRef: "<script>alert(1)</script>"}, ApplicationSet: "s", Sync: "Synced", Health: "Healthy"},
			"ghost.b": {Agent: "ghost", Name: "b", Labels: map[string]string{labelEnvRef: "dev"}, Sync: "Synced", Health: "Healthy"},
		},
		views: map[string]agent.View{}}
	b := build(in, newMarks(), now)
	if len(b.envs) != 2 {
		t.Fatalf("environments %+v", b.envs)
	}
	dev := b.envs[b.byName["dev"]]
	if len(dev.Desired.Values) != 0 || dev.Desired.Commit != "" || dev.Desired.Repo != "" {
		t.Errorf("values invented from malformed edits: %+v", dev.Desired.Values)
	}
	for _, a := range dev.Apps {
		if a.Unknown == "" || a.Health != "Unknown" {
			t.Errorf("app of an agent that never registered shown as %+v", a)
		}
	}
}

// TestUnknownSinceHolds: an app whose agent is offline stays Unknown with the since of when
// it went, build after build, and is shown again once the agent is back.
func TestUnknownSinceHolds(t *testing.T) {
	st := &agent.AppStatus{Agent: "sim", Name: "web", ApplicationSet: "web", Labels: map[string]string{labelEnvRef: "dev"}, Sync: "Synced", Health: "Healthy", SyncedRevision: "c1"}
	in := &inputs{apps: map[string]*agent.AppStatus{"sim.web": st}, views: map[string]agent.View{"sim": {Agent: "sim", Reason: "no replica"}}}
	mk := newMarks()
	t0 := time.Now()
	first := build(in, mk, t0).envs[0].Apps[0]
	later := build(in, mk, t0.Add(time.Minute)).envs[0].Apps[0]
	if first.Health != "Unknown" || !later.Since.Equal(t0) || later.Revision != "" {
		t.Fatalf("offline: first %+v later %+v", first, later)
	}
	in.views["sim"] = agent.View{Agent: "sim", Fresh: true}
	back := build(in, mk, t0.Add(2*time.Minute)).envs[0].Apps[0]
	if back.Health != "Healthy" || back.Unknown != "" || !back.Since.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("back: %+v", back)
	}
}

// BenchmarkBuild: one rebuild with 200 environments × 5 apps, 4,000 run stages and 2,000
// pushes; a rebuild runs at most every 50 ms however fast changes come.
func BenchmarkBuild(b *testing.B) {
	in := &inputs{decls: map[string][]envDecl{}, facts: map[string][]stageFacts{}, apps: map[string]*agent.AppStatus{}, views: map[string]agent.View{"sim": {Agent: "sim", Fresh: true}}}
	now := time.Now()
	for p := range 40 {
		var ds []envDecl
		for i := range 5 {
			ds = append(ds, envDecl{name: fmt.Sprintf("e%03d", p*5+i), pipeline: fmt.Sprintf("p%02d", p), order: i, repo: "acme/release", branch: "main",
				files: []string{fmt.Sprintf("envs/e%03d/config.json", p*5+i)}})
		}
		in.decls[fmt.Sprintf("p%02d", p)] = ds
	}
	for r := range 4000 {
		env := fmt.Sprintf("e%03d", r%200)
		at := now.Add(time.Duration(r) * time.Second)
		in.facts[fmt.Sprintf("r%d", r)] = []stageFacts{{run: fmt.Sprintf("r%d", r), pipeline: fmt.Sprintf("p%02d", (r%200)/5), stage: env, env: env,
			status: pipelines.StSucceeded, started: at, ended: at, repo: "acme/release", branch: "main", merged: fmt.Sprintf("m%d", r), mergedAt: at,
			edits: []edit{{File: "envs/" + env + "/config.json", Key: "image.tag", Value: fmt.Sprint(r)}}}}
	}
	for i := range 2000 {
		in.pushes = append(in.pushes, pushEvent{repo: "acme/release", branch: "main", before: fmt.Sprintf("m%d", i), after: fmt.Sprintf("m%d", i+1),
			at: now, files: []string{fmt.Sprintf("envs/e%03d/config.json", i%200)}})
	}
	for env := range 200 {
		for a := range 5 {
			name := fmt.Sprintf("web%d-e%03d", a, env)
			in.apps["sim."+name] = &agent.AppStatus{Agent: "sim", Name: name, Labels: map[string]string{labelEnvRef: fmt.Sprintf("e%03d", env)},
				Sync: "Synced", Health: "Healthy", SyncedRevision: fmt.Sprintf("m%d", 3800+env)}
		}
	}
	mk := newMarks()
	for b.Loop() {
		if out := build(in, mk, now); len(out.envs) != 200 {
			b.Fatalf("%d environments", len(out.envs))
		}
	}
}

// TestHistoryResults: every ended environment stage is one entry with its result; a stage
// that never started, or was skipped, is none; an already-promoted stage keeps the commit that
// held the values as the desired one.
func TestHistoryResults(t *testing.T) {
	now := time.Now()
	f := func(run string, st pipelines.Status, started bool) stageFacts {
		x := stageFacts{run: run, pipeline: "p", stage: "dev", env: "dev", status: st, ended: now}
		if started {
			x.started = now.Add(-time.Minute)
		}
		return x
	}
	already := f("r-already", pipelines.StSucceeded, true)
	already.already, already.revision = true, "c0ffee"
	already.edits = []edit{{File: "envs/dev/config.json", Key: "image.tag", Value: "1.0"}}
	in := &inputs{decls: map[string][]envDecl{"p": {{name: "dev", pipeline: "p"}}}, facts: map[string][]stageFacts{
		"r-already": {already}, "r-cancel": {f("r-cancel", pipelines.StCancelled, true)}, "r-failed": {f("r-failed", pipelines.StFailed, true)},
		"r-rb": {f("r-rb", pipelines.StRolledBack, true)}, "r-skip": {f("r-skip", pipelines.StSkipped, true)},
		"r-notrun": {f("r-notrun", pipelines.StNotRun, false)}, "r-running": {f("r-running", pipelines.StRunning, true)},
	}, apps: map[string]*agent.AppStatus{}, views: map[string]agent.View{}}
	b := build(in, newMarks(), now)
	got := map[string]string{}
	for _, p := range b.history["dev"] {
		got[p.Run] = p.Result
		if p.Run == "r-rb" && !p.RolledBack {
			t.Errorf("rolled back stage not marked: %+v", p)
		}
	}
	want := map[string]string{"r-already": "alreadyPromoted", "r-cancel": "cancelled", "r-failed": "failed", "r-rb": "rolledBack"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("results %v, want %v", got, want)
	}
	dev := b.envs[b.byName["dev"]]
	if dev.Desired.Commit != "c0ffee" || len(dev.Desired.Values) != 1 || dev.State != "unknown" {
		t.Errorf("already promoted: %+v state %s", dev.Desired, dev.State)
	}
}
