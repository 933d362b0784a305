package environments

import (
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

func readInputs(decl envDecl, pushes []pushEvent, facts map[string][]stageFacts, reads map[string]*readRecord) *inputs {
	return &inputs{decls: map[string][]envDecl{decl.pipeline: {decl}}, facts: facts, apps: map[string]*agent.AppStatus{},
		views: map[string]agent.View{}, pushes: pushes, reads: reads}
}

// TestPushBeforeBranchKnownIsAttributed: a hand commit pushed while no run had said which
// release branch the environment lives on (its repo and branch are expressions) is not
// attributed then, and is once a run reports the branch: the pushes are kept and replayed.
func TestPushBeforeBranchKnownIsAttributed(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	decl := envDecl{name: "dev", pipeline: "p", connector: "release", files: []string{"envs/dev/config.json"}, keys: []string{"image.tag"}}
	pushes := []pushEvent{{repo: "acme/release", branch: "main", before: "m1", after: "h1", sender: "carol", at: t0.Add(2 * time.Minute),
		files: []string{"envs/dev/config.json"}}}
	b := build(readInputs(decl, pushes, nil, nil), newMarks(), time.Now())
	if dev := b.envs[b.byName["dev"]]; dev.Desired.Outside != nil || len(b.wants) != 0 {
		t.Fatalf("attributed without a known branch: %+v, wants %+v", dev.Desired, b.wants)
	}
	run := stageFacts{run: "r1", pipeline: "p", stage: "dev", env: "dev", status: pipelines.StSucceeded, started: t0, ended: t0.Add(time.Minute),
		repo: "acme/release", branch: "main", merged: "m1", mergedAt: t0.Add(time.Minute),
		edits: []edit{{File: "envs/dev/config.json", Key: "image.tag", Value: "1.0.0"}}}
	b = build(readInputs(decl, pushes, map[string][]stageFacts{"r1": {run}}, nil), newMarks(), time.Now())
	dev := b.envs[b.byName["dev"]]
	if o := dev.Desired.Outside; o == nil || o.Commit != "h1" || o.Author != "carol" || !dev.Desired.ValuesUnknown {
		t.Fatalf("once the branch is known: %+v (outside %+v)", dev.Desired, dev.Desired.Outside)
	}
	if len(b.wants) != 1 || b.wants[0].commit != "h1" || b.wants[0].connector != "release" || len(b.wants[0].keys) != 1 {
		t.Fatalf("wants %+v: want one read of h1 through release", b.wants)
	}
	if dev.Desired.Read == nil || dev.Desired.Read.State != "reading" {
		t.Errorf("read %+v: want reading", dev.Desired.Read)
	}
}

// TestComparePushesWithoutFiles: three pushes whose webhook listed no files (Bitbucket) make
// one comparison from before the first to after the last; its result attributes the change
// to the last push, with the values it read. A failed read never shows the run's values.
func TestComparePushesWithoutFiles(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	decl := envDecl{name: "dev", pipeline: "p", repo: "acme/release", branch: "main", connector: "release", files: []string{"envs/dev/config.json"}, keys: []string{"image.tag"}}
	run := stageFacts{run: "r1", pipeline: "p", stage: "dev", env: "dev", status: pipelines.StSucceeded, started: t0, ended: t0.Add(time.Minute),
		repo: "acme/release", branch: "main", merged: "m1", mergedAt: t0.Add(time.Minute),
		edits: []edit{{File: "envs/dev/config.json", Key: "image.tag", Value: "1.0.0"}}}
	facts := map[string][]stageFacts{"r1": {run}}
	var pushes []pushEvent
	prev := "m1"
	for i, c := range []string{"a", "b", "c"} {
		pushes = append(pushes, pushEvent{repo: "acme/release", branch: "main", before: prev, after: c, sender: "dave", at: t0.Add(time.Duration(2+i) * time.Minute), incomplete: true})
		prev = c
	}
	reads := map[string]*readRecord{}
	b := build(readInputs(decl, pushes, facts, reads), newMarks(), time.Now())
	var cmpWant *readRequest
	for i, w := range b.wants {
		if w.before != "" {
			if cmpWant != nil {
				t.Fatalf("two comparisons for one burst: %+v", b.wants)
			}
			cmpWant = &b.wants[i]
		}
	}
	if cmpWant == nil || cmpWant.before != "m1" || cmpWant.commit != "c" {
		t.Fatalf("wants %+v: want one comparison m1..c", b.wants)
	}
	rec := &readRecord{ID: cmpWant.id(), Repo: "acme/release", Branch: "main", Connector: "release", Commit: "c", Before: "m1",
		Files: cmpWant.files, Keys: cmpWant.keys, State: readDone, Attempt: 1, Requested: time.Now(), Ended: time.Now(),
		Result: &steps.ReadResult{Repo: "acme/release", Commit: "c", Before: "m1", Changed: []string{"envs/dev/config.json", "README.md"},
			Files: []steps.ReadFile{{File: "envs/dev/config.json", Exists: true, Values: []steps.ReadValue{{Key: "image.tag", Found: true, Value: "1.7.0"}}}}}}
	reads[rec.ID] = rec
	b = build(readInputs(decl, pushes, facts, reads), newMarks(), time.Now())
	dev := b.envs[b.byName["dev"]]
	if o := dev.Desired.Outside; o == nil || o.Commit != "c" || dev.Desired.ValuesUnknown || len(dev.Desired.Values) != 1 || dev.Desired.Values[0].Value != "1.7.0" {
		t.Fatalf("after the comparison: %+v (outside %+v)", dev.Desired, dev.Desired.Outside)
	}
	for _, w := range b.wants {
		t.Errorf("nothing more to read, but wants %+v", w)
	}
	// The same read failed on a 403: no values (not the run's 1.0.0), no retry.
	failed := *rec
	failed.State, failed.Result, failed.Error = readFailed, nil, "read envs/dev/config.json: 403 Forbidden"
	reads[rec.ID] = &failed
	b = build(readInputs(decl, pushes, facts, reads), newMarks(), time.Now())
	dev = b.envs[b.byName["dev"]]
	if dev.Desired.Outside != nil || len(dev.Desired.Values) != 1 || dev.Desired.Values[0].Value != "1.0.0" || dev.Desired.Read == nil || dev.Desired.Read.State != "failed" {
		// Without the comparison's files the pushes are not attributed: the run's values stand,
		// and the environment says the read after them failed.
		t.Fatalf("failed comparison: %+v", dev.Desired)
	}
}
