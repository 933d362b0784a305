package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
)

const triggerPipeline = `name: app
inputs:
  tag: {type: string, required: true}
  who: {type: string, default: ""}
triggers:
  - name: merged
    connector: app
    pullRequest:
      provider: github
      repo: acme/*
      actions: [merged]
      branches: [main, "release/*"]
    if: ${{ !("no-deploy" in event.pr.labels) }}
    inputs:
      tag: ${{ event.sha[:7] }}
      who: ${{ event.sender }}
  - name: labeled
    pullRequest:
      repo: acme/web
      actions: [labeled]
      labels: [deploy]
    inputs:
      tag: pr-${{ event.pr.number }}
  - name: pushed
    push:
      provider: github
      repo: acme/web
      branches: [main]
      paths: ["services/web/**", "*.md"]
    inputs:
      tag: ${{ event.after }}
  - name: webpr
    connector: web
    pullRequest:
      repo: acme/web
      actions: [opened]
      paths: ["services/web/**"]
    inputs:
      tag: pr-${{ event.pr.number }}
stages:
  - id: s
    steps: [{id: a, type: Noop}]
`

func loadTriggers(t *testing.T) *Pipeline {
	t.Helper()
	p, err := Load("app.yaml", []byte(triggerPipeline), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Triggers) != 4 {
		t.Fatalf("%d triggers", len(p.Triggers))
	}
	return p
}

func mergedEvent() *scm.Event {
	return &scm.Event{Provider: "github", DeliveryID: "d1", Kind: scm.EventPullRequest, Repo: "acme/web", Sender: "alice",
		Action: scm.PRMergedEvt, PR: &scm.PullRequest{Number: 7, State: scm.PRMerged, Base: "main", Head: "feat",
			HeadSHA: "1111111111111111111111111111111111111111", MergeSHA: "abcdef0123456789abcdef0123456789abcdef01"}}
}

func TestTriggerMatch(t *testing.T) {
	p := loadTriggers(t)
	ctx := context.Background()
	fired := func(ev *scm.Event) map[string]map[string]any {
		t.Helper()
		out := map[string]map[string]any{}
		for _, tr := range p.Triggers {
			m, err := tr.Match(ctx, p.File, ev)
			if err != nil {
				t.Fatalf("%s: %v", tr.Name, err)
			}
			if m != nil {
				out[tr.Name] = m.Inputs
				if m.PendingPaths != nil {
					out[tr.Name]["(pending)"] = m.PendingPaths
				}
			}
		}
		return out
	}
	cases := []struct {
		name string
		ev   func() *scm.Event
		want string // JSON of trigger → inputs
	}{
		{"merged into main", mergedEvent, `{"merged":{"tag":"abcdef0","who":"alice"}}`},
		{"merged into a release branch", func() *scm.Event { e := mergedEvent(); e.PR.Base = "release/1.2"; return e }, `{"merged":{"tag":"abcdef0","who":"alice"}}`},
		{"other base branch", func() *scm.Event { e := mergedEvent(); e.PR.Base = "dev"; return e }, `{}`},
		{"other repo", func() *scm.Event { e := mergedEvent(); e.Repo = "other/web"; return e }, `{}`},
		{"other forge", func() *scm.Event { e := mergedEvent(); e.Provider = "gitlab"; return e }, `{}`},
		{"closed unmerged", func() *scm.Event { e := mergedEvent(); e.Action = scm.PRClosedOnly; return e }, `{}`},
		{"if: false", func() *scm.Event { e := mergedEvent(); e.PR.Labels = []string{"no-deploy"}; return e }, `{}`},
		{"labeled deploy", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Label, e.PR.Labels = scm.PRLabeled, "deploy", []string{"x", "deploy"}
			return e
		}, `{"labeled":{"tag":"pr-7"}}`},
		{"labeled something else on a PR that carries deploy", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Label, e.PR.Labels = scm.PRLabeled, "docs", []string{"deploy", "docs"}
			return e
		}, `{"labeled":{"tag":"pr-7"}}`},
		{"labeled something else on a PR without deploy", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Label, e.PR.Labels = scm.PRLabeled, "docs", []string{"docs"}
			return e
		}, `{}`},
		{"labeled deploy, PR labels listed before the change", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Label, e.PR.Labels = scm.PRLabeled, "deploy", nil
			return e
		}, `{"labeled":{"tag":"pr-7"}}`},
		{"push touching the service", func() *scm.Event {
			return &scm.Event{Provider: "github", Kind: scm.EventPush, Repo: "acme/web", Branch: "main", After: "ff00",
				Changed: []string{"go.mod", "services/web/cmd/main.go"}}
		}, `{"pushed":{"tag":"ff00"}}`},
		{"push of a top-level doc", func() *scm.Event {
			return &scm.Event{Provider: "github", Kind: scm.EventPush, Repo: "acme/web", Branch: "main", After: "ff01", Changed: []string{"README.md"}}
		}, `{"pushed":{"tag":"ff01"}}`},
		{"push elsewhere", func() *scm.Event {
			return &scm.Event{Provider: "github", Kind: scm.EventPush, Repo: "acme/web", Branch: "main", After: "ff02",
				Changed: []string{"services/api/main.go", "docs/x.md"}}
		}, `{}`},
		{"PR opened, webhook lists no files: provisional", func() *scm.Event {
			e := mergedEvent()
			e.Action = scm.PROpened
			return e
		}, `{"webpr":{"(pending)":["services/web/**"],"tag":"pr-7"}}`},
		{"PR opened, event lists a matching file", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Changed = scm.PROpened, []string{"services/web/a.go"}
			return e
		}, `{"webpr":{"tag":"pr-7"}}`},
		{"PR opened, event lists other files", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Changed = scm.PROpened, []string{"services/api/a.go"}
			return e
		}, `{}`},
		{"PR opened on another repo", func() *scm.Event {
			e := mergedEvent()
			e.Action, e.Repo = scm.PROpened, "acme/api"
			return e
		}, `{}`},
		{"push to another branch", func() *scm.Event {
			return &scm.Event{Provider: "gitlab", Kind: scm.EventPush, Repo: "acme/web", Branch: "dev", After: "ff03", Changed: []string{"services/web/a"}}
		}, `{}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := json.Marshal(fired(tc.ev()))
			if string(got) != tc.want {
				t.Errorf("fired %s, want %s", got, tc.want)
			}
		})
	}
}

// TestTriggerBranchDeletion: deleting a release branch is a push with event.deleted; push
// triggers ignore it unless they set deleted: true.
func TestTriggerBranchDeletion(t *testing.T) {
	src := `name: x
inputs:
  tag: {type: string, required: true}
stages: [{id: s, steps: [{id: a, type: Noop}]}]
triggers:
  - name: release
    push: {branches: ["release/*"]}
    inputs: {tag: "${{ event.after }}"}
  - name: cleanup
    push: {branches: ["release/*"], deleted: true}
    if: ${{ event.deleted }}
    inputs: {tag: "gone-${{ event.branch }}"}
`
	p, err := Load("p.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	push := &scm.Event{Provider: "github", Kind: scm.EventPush, Repo: "acme/web", Branch: "release/1.4", Before: "8d2c", After: "9e3d"}
	deletion := &scm.Event{Provider: "github", Kind: scm.EventPush, Repo: "acme/web", Branch: "release/1.4", Before: "8d2c", After: scm.ZeroSHA, Deleted: true}
	for _, tc := range []struct {
		ev   *scm.Event
		want map[string]string
	}{
		{push, map[string]string{"release": "9e3d"}},
		{deletion, map[string]string{"cleanup": "gone-release/1.4"}},
	} {
		got := map[string]string{}
		for _, tr := range p.Triggers {
			m, err := tr.Match(context.Background(), p.File, tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if m != nil {
				got[tr.Name] = m.Inputs["tag"].(string)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("deleted=%v: fired %v, want %v", tc.ev.Deleted, got, tc.want)
		}
	}
	if _, err := Load("p.yaml", []byte(strings.Replace(src, "deleted: true", "deleted: sometimes", 1)), steps.Default); err == nil ||
		!strings.Contains(err.Error(), `p.yaml:10:46: triggers[1].push.deleted: want true or false, got "sometimes"`) {
		t.Errorf("bad deleted: %v", err)
	}
}

// TestTriggerDraftMarkedReady: a PR opened as a draft and marked ready later starts its run on
// ready_for_review; event.branch is the base branch and event.pr.headBranch the source.
func TestTriggerDraftMarkedReady(t *testing.T) {
	src := `name: x
inputs:
  tag: {type: string, required: true}
stages: [{id: s, steps: [{id: a, type: Noop}]}]
triggers:
  - name: ready
    pullRequest: {actions: [opened, ready_for_review], branches: [main]}
    if: ${{ !event.pr.draft }}
    inputs: {tag: "${{ event.pr.headBranch }}->${{ event.branch }}"}
`
	p, err := Load("p.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	ev := mergedEvent()
	ev.Action, ev.PR.State, ev.PR.Draft, ev.PR.Head = scm.PROpened, scm.PROpen, true, "feature/x"
	if m, err := p.Triggers[0].Match(context.Background(), p.File, ev); m != nil || err != nil {
		t.Fatalf("draft opened fired: %v %v", m, err)
	}
	ev.Action, ev.PR.Draft = scm.PRReady, false
	m, err := p.Triggers[0].Match(context.Background(), p.File, ev)
	if err != nil || m == nil {
		t.Fatalf("marked ready did not fire: %v %v", m, err)
	}
	if got := m.Inputs["tag"]; got != "feature/x->main" {
		t.Errorf("tag = %v, want feature/x->main", got)
	}
	for _, a := range []string{"unlabeled", "edited", "ready_for_review", "converted_to_draft"} {
		if _, err := Load("p.yaml", []byte(strings.Replace(src, "ready_for_review]", a+"]", 1)), steps.Default); err != nil {
			t.Errorf("action %s refused: %v", a, err)
		}
	}
}

func TestTriggerLoadErrors(t *testing.T) {
	head := "name: x\ninputs:\n  tag: {type: string, required: true}\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\ntriggers:\n"
	cases := []struct{ name, src, want string }{
		{"no kind", "  - name: t\n    inputs: {tag: x}\n", "p.yaml:6:5: triggers[0]: required: pullRequest or push"},
		{"both kinds", "  - pullRequest: {}\n    push: {}\n    inputs: {tag: x}\n", "p.yaml:7:5: triggers[0]: set either pullRequest or push"},
		{"unknown action", "  - pullRequest: {actions: [merged, reopen]}\n    inputs: {tag: x}\n", `p.yaml:6:37: triggers[0].pullRequest.actions[1]: unknown action "reopen"`},
		{"unknown field", "  - pullRequest: {branch: main}\n    inputs: {tag: x}\n", "p.yaml:6:19: triggers[0].pullRequest.branch: unknown field"},
		{"bad provider", "  - push: {provider: gitea}\n    inputs: {tag: x}\n", `triggers[0].push.provider: unknown provider "gitea"`},
		{"bad glob", "  - push: {paths: [\"a/[\"]}\n    inputs: {tag: x}\n", `triggers[0].push.paths[0]: bad glob "a/["`},
		{"push paths without connector", "  - push: {provider: bitbucket, paths: [x/**]}\n    inputs: {tag: x}\n",
			"p.yaml:6:33: triggers[0].push.paths: a push trigger with paths needs a connector unless provider is github (Bitbucket push webhooks list no files"},
		{"push paths, any forge, without connector", "  - push: {paths: [x/**]}\n    inputs: {tag: x}\n",
			"p.yaml:6:12: triggers[0].push.paths: a push trigger with paths needs a connector unless provider is github"},
		{"bad if", "  - push: {}\n    if: ${{ event.sha == }}\n    inputs: {tag: x}\n", "p.yaml:7:9: triggers[0].if"},
		{"if reads inputs", "  - push: {}\n    if: ${{ inputs.tag == 'x' }}\n    inputs: {tag: x}\n", "triggers[0].if: inputs.tag: a trigger expression can only read event.*"},
		{"unknown input", "  - push: {}\n    inputs: {tag: x, nope: y}\n", `p.yaml:7:22: triggers[0].inputs.nope: the pipeline has no input "nope"`},
		{"required input unset", "  - push: {}\n", `p.yaml:6:5: triggers[0].inputs: required input "tag" is not set by this trigger`},
		{"bad input expression", "  - push: {}\n    inputs:\n      tag: ${{ event.sha + }}\n", "p.yaml:8:12: triggers[0].inputs.tag"},
		{"duplicate name", "  - {name: a, push: {}, inputs: {tag: x}}\n  - {name: a, push: {}, inputs: {tag: x}}\n", `triggers[1].name: duplicate trigger name "a"`},
		{"not a list", "  push: {}\n", "p.yaml:6:3: triggers: want a list of triggers"},
		{"PR paths without connector", "  - pullRequest: {repo: a/b, paths: [\"web/**\"]}\n    inputs: {tag: x}\n",
			"p.yaml:6:30: triggers[0].pullRequest.paths: a pullRequest trigger with paths needs a connector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("p.yaml", []byte(head+tc.src), steps.Default)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestTriggerExpressionErrorsAtRunTime: an input expression that fails on an event names the
// file, line and field; the event does not fire the trigger.
func TestTriggerExpressionErrorsAtRunTime(t *testing.T) {
	src := "name: x\ninputs:\n  tag: {type: string, required: true}\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\ntriggers:\n" +
		"  - push: {}\n    inputs:\n      tag: ${{ event.pr.nope }}\n"
	p, err := Load("p.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Triggers[0].Match(context.Background(), p.File, &scm.Event{Kind: scm.EventPush, Repo: "a/b", Branch: "main"})
	if ok := m != nil; ok || err == nil || !strings.Contains(err.Error(), "p.yaml:8: triggers[0].inputs.tag") {
		t.Fatalf("got %v %v", ok, err)
	}
}

func TestTriggerRunIDIsStable(t *testing.T) {
	a := TriggerRunID("github", "d-1", "promote", 0)
	if a != TriggerRunID("github", "d-1", "promote", 0) {
		t.Fatal("same delivery, different ids")
	}
	for _, b := range []string{TriggerRunID("github", "d-2", "promote", 0), TriggerRunID("gitlab", "d-1", "promote", 0),
		TriggerRunID("github", "d-1", "other", 0), TriggerRunID("github", "d-1", "promote", 1)} {
		if a == b {
			t.Fatalf("different deliveries/pipelines/triggers share id %s", a)
		}
	}
	if len(a) > 64 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		t.Fatalf("id %q is not a KV key / subject token", a)
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		glob, name string
		want       bool
	}{
		{"services/web/**", "services/web/a/b/c.go", true}, {"services/web/**", "services/web", true},
		{"services/web/**", "services/api/x", false}, {"**/*.md", "README.md", true}, {"**/*.md", "a/b/c.md", true},
		{"**/*.md", "a/b/c.go", false}, {"a/**/z", "a/z", true}, {"a/**/z", "a/b/c/z", true}, {"a/**/z", "a/b/c/y", false},
		{"*.md", "a/b.md", false}, {"release/*", "release/1.2", true},
	} {
		if got, err := path2Match(tc.glob, tc.name); got != tc.want || err != nil {
			t.Errorf("%s ~ %s = %v, %v; want %v", tc.glob, tc.name, got, err, tc.want)
		}
	}
}

// FuzzTriggerMatch: any event (as the normalisers could produce it, or worse) against the
// triggers never panics, and a match always yields inputs the pipeline accepts.
func FuzzTriggerMatch(f *testing.F) {
	f.Add("github", "pull_request", "acme/web", "merged", "main", "abcdef0123", "deploy", "services/web/a.go", 7)
	f.Add("gitlab", "push", "acme/web", "", "main", "ff", "", "README.md", 0)
	f.Add("github", "pull_request", "acme/x", "labeled", "release/1", "", "deploy", "", -1)
	f.Add("bitbucket", "status", "", "closed", "", "", "", "**", 1<<30)
	p, err := Load("app.yaml", []byte(triggerPipeline), steps.Default)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, provider, kind, repo, action, branch, sha, label, changed string, n int) {
		ev := &scm.Event{Provider: provider, Kind: scm.EventKind(kind), Repo: scm.Repo(repo), Action: scm.PRAction(action),
			Branch: branch, After: sha, Label: label}
		if changed != "" {
			ev.Changed = strings.Split(changed, ",")
		}
		if kind == "pull_request" {
			ev.PR = &scm.PullRequest{Number: n, Base: branch, HeadSHA: sha, MergeSHA: sha, Labels: []string{label}}
		}
		for _, tr := range p.Triggers {
			m, err := tr.Match(context.Background(), p.File, ev)
			if err != nil {
				if !strings.Contains(err.Error(), "app.yaml:") {
					t.Fatalf("error without a location: %v", err)
				}
				continue
			}
			if m != nil {
				if _, err := p.CheckInputs(m.Inputs); err != nil {
					t.Fatalf("trigger %s fired with inputs the pipeline rejects: %v (%v)", tr.Name, err, m.Inputs)
				}
				// Only a PR trigger with paths on an event listing no file is provisional.
				if m.PendingPaths != nil && (ev.Kind != scm.EventPullRequest || len(tr.Paths) == 0 || len(ev.Changed) > 0) {
					t.Fatalf("trigger %s: provisional match on %+v", tr.Name, ev)
				}
			}
		}
		_, _ = path2Match(changed, repo)
	})
}

// TestTriggerPushPathsIncomplete: a push whose payload may not list every file (Bitbucket:
// none; GitLab: 20 commits) is a provisional match for a push trigger with paths and a
// connector: the run checks before..after through a worker. Without a connector (GitHub only)
// or without a before commit (a new branch) the paths are decided on the list sent, and the
// trigger says so (the controller logs and records it).
func TestTriggerPushPathsIncomplete(t *testing.T) {
	src := `name: p
inputs:
  sha: {type: string, required: true}
triggers:
  - name: checked
    connector: app
    push: {paths: ["services/web/**"]}
    inputs: {sha: "${{ event.after }}"}
  - name: github-only
    push: {provider: github, paths: ["services/web/**"]}
    inputs: {sha: "${{ event.after }}"}
stages:
  - id: s
    steps: [{id: a, type: Noop}]
`
	p, err := Load("p.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	checked, ghOnly := p.Triggers[0], p.Triggers[1]
	bb := &scm.Event{Provider: "bitbucket", Kind: scm.EventPush, Repo: "acme/web", Branch: "main", Before: "aa11", After: "bb22", ChangedIncomplete: true}
	m, err := checked.Match(context.Background(), p.File, bb)
	if err != nil || m == nil || fmt.Sprint(m.PendingPaths) != "[services/web/**]" || checked.PathsOnPartialList(bb) {
		t.Errorf("bitbucket push, connector: %+v, %v (partial %v); want a provisional match", m, err, checked.PathsOnPartialList(bb))
	}
	created := *bb
	created.Before = scm.ZeroSHA
	if m, err := checked.Match(context.Background(), p.File, &created); err != nil || m != nil || !checked.PathsOnPartialList(&created) {
		t.Errorf("new bitbucket branch: %+v, %v; want no match decided on the (empty) list, flagged", m, err)
	}
	gh := &scm.Event{Provider: "github", Kind: scm.EventPush, Repo: "acme/web", Branch: "main", Before: "aa11", After: "cc33",
		Changed: []string{"services/web/a.go"}, ChangedIncomplete: true}
	if m, err := ghOnly.Match(context.Background(), p.File, gh); err != nil || m == nil || len(m.PendingPaths) != 0 || !ghOnly.PathsOnPartialList(gh) {
		t.Errorf("github push of 2,048+ commits, no connector: %+v, %v; want a match on the list, flagged", m, err)
	}
	complete := *gh
	complete.ChangedIncomplete = false
	if m, err := checked.Match(context.Background(), p.File, &complete); err != nil || m == nil || len(m.PendingPaths) != 0 || checked.PathsOnPartialList(&complete) {
		t.Errorf("complete list: %+v, %v; want decided at once", m, err)
	}
}
