package pipelines

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps/glob"
	"github.com/prflow/prflow/steps/template"
	"github.com/prflow/prflow/yamlconf"
)

// Trigger starts a run of its pipeline when a forge webhook matches it:
//
//	triggers:
//	  - name: app-merged
//	    connector: app              # worker connector of the triggering repo: commit statuses go there
//	                                # (required with pullRequest.paths: the PR's files are read through it)
//	    pullRequest:                # or push: {repo, branches, paths, deleted}
//	      repo: acme/app            # glob over owner/name
//	      actions: [merged]         # opened, synchronized, merged, closed, labeled, unlabeled,
//	                                # edited, ready_for_review, converted_to_draft
//	      branches: [main]          # base branch globs (event.branch; the PR's source is event.pr.headBranch)
//	      paths: ["services/web/**"]
//	      labels: [deploy]          # the PR carries one of them (after the change, on labeled/unlabeled)
//	    if: ${{ !event.pr.draft }}
//	    inputs:
//	      tag: ${{ event.sha }}
type Trigger struct {
	Name      string
	Index     int
	Line      int
	Connector string
	Kind      scm.EventKind // push or pull_request
	Provider  string        // empty = any forge
	Repos     []string      // globs over the repo name; empty = any
	Actions   []scm.PRAction
	Branches  []string // base branch (PR) or pushed branch globs
	Paths     []string // changed path globs (** = any depth)
	Labels    []string
	Deleted   bool // push: also fire when the push deletes the branch
	If        *template.Template
	Inputs    []TriggerInput
}

// TriggerInput maps an event field to a pipeline input.
type TriggerInput struct {
	Name string
	Line int
	Tmpl *template.Template
}

// TriggerRoots are the names trigger expressions may read: the event (Harness pipelines call
// it trigger, as in <+trigger.commitSha>).
var TriggerRoots = []string{"event", "trigger"}

// The triggers: list as written.
type (
	triggerDoc struct {
		Name        string
		Connector   string
		PullRequest *prTriggerDoc
		Push        *pushTriggerDoc
		If          string
		Inputs      yamlconf.Pairs[*yaml.Node] `want:"a mapping of input name to value"`
	}
	// triggerFilterDoc is what pullRequest and push filters share.
	triggerFilterDoc struct {
		Provider string
		Repo     yamlconf.Strings `want:"a list of repo globs"`
		Branches yamlconf.Strings `want:"a list of branch globs"`
		Paths    yamlconf.Strings `want:"a list of path globs"`
	}
	prTriggerDoc struct {
		triggerFilterDoc `yaml:",inline"`
		Actions          yamlconf.Strings `want:"a list of actions"`
		Labels           yamlconf.Strings `want:"a list of labels"`
	}
	pushTriggerDoc struct {
		triggerFilterDoc `yaml:",inline"`
		Deleted          bool
	}
)

func (l *loader) triggers(docs []triggerDoc, p *Pipeline) []*Trigger {
	var out []*Trigger
	names := map[string]bool{}
	for i := range docs {
		t := l.trigger(&docs[i], i, p)
		if t == nil {
			continue
		}
		if names[t.Name] {
			l.errf(l.node(yamlconf.Index("triggers", i)), fmt.Sprintf("triggers[%d].name", i), "duplicate trigger name %q", t.Name)
		}
		names[t.Name] = true
		out = append(out, t)
	}
	return out
}

func (l *loader) trigger(td *triggerDoc, i int, p *Pipeline) *Trigger {
	path := fmt.Sprintf("triggers[%d]", i)
	n := l.node(path)
	t := &Trigger{Index: i, Line: n.Line, Name: td.Name, Connector: td.Connector}
	if t.Name == "" {
		t.Name = "trigger" + strconv.Itoa(i)
	} else if !idRE.MatchString(t.Name) {
		l.errf(l.node(path+".name"), path+".name", "%q: use letters, digits, - and _ (start with a letter)", t.Name)
	}
	switch pr, push := td.PullRequest, td.Push; {
	case pr != nil && push != nil:
		l.errf(l.d.Key(path+".push"), path, "set either pullRequest or push, not both (use two triggers)")
		return nil
	case pr != nil:
		t.Kind = scm.EventPullRequest
		fp := path + ".pullRequest"
		l.triggerCommon(t, &pr.triggerFilterDoc, fp)
		for j, a := range pr.Actions {
			act := scm.PRAction(a)
			if a == "synchronize" {
				act = scm.PRSynchronize
			}
			if !containsAction(scm.PRActions, act) {
				ap := yamlconf.Index(fp+".actions", j)
				l.errf(l.node(ap), ap, "unknown action %q (one of %s)", a, actionNames())
				continue
			}
			t.Actions = append(t.Actions, act)
		}
		t.Labels = pr.Labels
		if len(t.Paths) > 0 && t.Connector == "" {
			// PR webhooks list no files: a worker asks the forge through this connector.
			l.errf(l.d.Key(fp+".paths"), fp+".paths",
				"a pullRequest trigger with paths needs a connector (the PR's changed files are read through it): set triggers[%d].connector", i)
		}
	case push != nil:
		t.Kind = scm.EventPush
		fp := path + ".push"
		l.triggerCommon(t, &push.triggerFilterDoc, fp)
		t.Deleted = push.Deleted
		if len(t.Paths) > 0 && t.Connector == "" && t.Provider != "github" {
			// Bitbucket push webhooks list no files and GitLab's only the newest 20 commits: a
			// worker asks the forge's compare API through the connector. GitHub lists the files
			// of up to 2,048 commits, so there the webhook is enough.
			l.errf(l.d.Key(fp+".paths"), fp+".paths",
				"a push trigger with paths needs a connector unless provider is github (Bitbucket push webhooks list no files, GitLab's only the newest 20 commits; a worker reads the changed files through the connector): set triggers[%d].connector", i)
		}
	default:
		if !l.d.Bad(path) {
			l.errf(n, path, "required: pullRequest or push")
		}
		return nil
	}
	if td.If != "" {
		t.If = l.cond(td.If, path+".if")
		if t.If != nil {
			l.triggerRefs(l.node(path+".if"), path+".if", t.If)
		}
	}
	for _, kv := range td.Inputs {
		ip := path + ".inputs." + kv.Key
		vn := kv.Value
		if p.input(kv.Key) == nil {
			l.errf(kv.KeyNode, ip, "the pipeline has no input %q (declare it under inputs:)", kv.Key)
			continue
		}
		if vn.Kind != yaml.ScalarNode {
			l.errf(vn, ip, "want a string or an expression, got %s", yamlconf.Kind(vn))
			continue
		}
		tm, err := template.Compile(vn.Value)
		if err != nil {
			l.exprErr(vn, ip, err)
			continue
		}
		l.triggerRefs(vn, ip, tm)
		t.Inputs = append(t.Inputs, TriggerInput{Name: kv.Key, Line: vn.Line, Tmpl: tm})
	}
	set := map[string]bool{}
	for _, ti := range t.Inputs {
		set[ti.Name] = true
	}
	for _, in := range p.Inputs {
		if in.Required && in.Default == nil && !set[in.Name] {
			l.errf(n, path+".inputs", "required input %q is not set by this trigger", in.Name)
		}
	}
	return t
}

func (l *loader) triggerCommon(t *Trigger, fd *triggerFilterDoc, path string) {
	t.Provider = fd.Provider
	switch t.Provider {
	case "", "github", "gitlab", "bitbucket":
	default:
		l.errf(l.node(path+".provider"), path+".provider", "unknown provider %q (github, gitlab or bitbucket)", t.Provider)
	}
	t.Repos, t.Branches, t.Paths = fd.Repo, fd.Branches, fd.Paths
	for name, list := range map[string][]string{"repo": t.Repos, "branches": t.Branches, "paths": t.Paths} {
		for j, g := range list {
			if _, err := path2Match(g, ""); err != nil {
				l.errf(l.node(path+"."+name), fmt.Sprintf("%s.%s[%d]", path, name, j), "bad glob %q: %v", g, err)
			}
		}
	}
}

// triggerRefs rejects references to anything but the event: a trigger runs before the run
// exists, so inputs, steps and variables are not there yet.
func (l *loader) triggerRefs(n *yaml.Node, path string, t *template.Template) {
	for _, r := range t.Refs() {
		root, _, _ := strings.Cut(r, ".")
		root, _, _ = strings.Cut(root, "[")
		if !slices.Contains(TriggerRoots, root) {
			l.errf(n, path, "%s: a trigger expression can only read event.* (the webhook), not %s", r, root)
		}
	}
}

func (p *Pipeline) input(name string) *Input {
	for i := range p.Inputs {
		if p.Inputs[i].Name == name {
			return &p.Inputs[i]
		}
	}
	return nil
}

func actionNames() string {
	names := make([]string, len(scm.PRActions))
	for i, a := range scm.PRActions {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

func containsAction(list []scm.PRAction, a scm.PRAction) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// EventEnv is what trigger expressions see as `event` (and `trigger`). On pull request events
// `branch` is the base (target) branch and `pr.headBranch` (also `pr.head`) the source branch.
func EventEnv(ev *scm.Event) map[string]any {
	m := map[string]any{
		"provider": ev.Provider, "kind": string(ev.Kind), "repo": string(ev.Repo), "sender": ev.Sender,
		"deliveryId": ev.DeliveryID, "branch": ev.Branch, "before": ev.Before, "after": ev.After,
		"changed": toAnyList(ev.Changed), "action": string(ev.Action), "label": ev.Label, "sha": EventSHA(ev),
		"deleted": ev.Deleted,
	}
	if ev.PR != nil {
		pr := ev.PR
		m["pr"] = map[string]any{"number": pr.Number, "title": pr.Title, "body": pr.Body, "state": string(pr.State),
			"draft": pr.Draft, "head": pr.Head, "headBranch": pr.Head, "base": pr.Base, "headSha": pr.HeadSHA, "mergeSha": pr.MergeSHA,
			"labels": toAnyList(pr.Labels), "url": pr.URL}
		if ev.Branch == "" {
			m["branch"] = pr.Base
		}
	} else {
		m["pr"] = map[string]any{"number": 0, "title": "", "body": "", "state": "", "draft": false, "head": "", "headBranch": "", "base": "",
			"headSha": "", "mergeSha": "", "labels": []any{}, "url": ""}
	}
	return m
}

// EventSHA is the commit an event is about: a merged PR's merge commit, a PR's head, a push's
// new head.
func EventSHA(ev *scm.Event) string {
	if ev.PR != nil {
		if ev.Action == scm.PRMergedEvt && ev.PR.MergeSHA != "" {
			return ev.PR.MergeSHA
		}
		return ev.PR.HeadSHA
	}
	return ev.After
}

func toAnyList(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// TriggerMatch is what a matching trigger starts a run with.
type TriggerMatch struct {
	Inputs map[string]any
	// PendingPaths is set when the match is provisional: the trigger filters a pull request on
	// changed paths and the webhook lists none (GitHub, GitLab and Bitbucket PR webhooks never
	// do). The run must check the PR's files (a worker asks the forge) before any stage starts.
	PendingPaths []string
}

// Match reports whether ev fires t and, if so, the run inputs it maps (nil: no match). Errors
// are from the `if:` or input expressions (with the file, line and field).
func (t *Trigger) Match(ctx context.Context, file string, ev *scm.Event) (*TriggerMatch, error) {
	if ev == nil || ev.Kind != t.Kind {
		return nil, nil
	}
	if t.Provider != "" && t.Provider != ev.Provider {
		return nil, nil
	}
	if len(t.Repos) > 0 && !anyGlob(t.Repos, string(ev.Repo)) {
		return nil, nil
	}
	switch t.Kind {
	case scm.EventPullRequest:
		if ev.PR == nil {
			return nil, nil
		}
		if len(t.Actions) > 0 && !containsAction(t.Actions, ev.Action) {
			return nil, nil
		}
		if len(t.Branches) > 0 && !anyGlob(t.Branches, ev.PR.Base) {
			return nil, nil
		}
		if len(t.Labels) > 0 {
			// The PR's labels as they are after the change: a PR that already carries a wanted
			// label fires on any labeled event (narrow with if: event.label == '...').
			have := ev.PR.Labels
			if ev.Action == scm.PRLabeled && ev.Label != "" && !slices.Contains(have, ev.Label) {
				have = append(slices.Clone(have), ev.Label) // a forge that lists labels before the change
			}
			found := false
			for _, want := range t.Labels {
				for _, h := range have {
					found = found || h == want
				}
			}
			if !found {
				return nil, nil
			}
		}
	case scm.EventPush:
		if ev.Deleted && !t.Deleted {
			return nil, nil // a branch deletion is a push only to triggers that ask for it
		}
		if len(t.Branches) > 0 && !anyGlob(t.Branches, ev.Branch) {
			return nil, nil
		}
	}
	var pending []string
	if len(t.Paths) > 0 && t.Kind == scm.EventPullRequest && len(ev.Changed) == 0 {
		// Forges send changed paths with pushes; PR webhooks carry none. The match is
		// provisional: the run checks the PR's files through a worker before it starts a stage.
		pending = slices.Clone(t.Paths)
	} else if len(t.Paths) > 0 && t.PushPathsPending(ev) {
		// The push's payload does not list every file: the run compares before..after through
		// a worker (the connector's token) before it starts a stage.
		pending = slices.Clone(t.Paths)
	} else if len(t.Paths) > 0 {
		hit := false
		for _, c := range ev.Changed {
			if anyGlob(t.Paths, c) {
				hit = true
				break
			}
		}
		if !hit {
			return nil, nil
		}
	}
	env := map[string]any{"event": EventEnv(ev)}
	env["trigger"] = env["event"]
	where := fmt.Sprintf("%s:%d: triggers[%d]", file, t.Line, t.Index)
	if t.If != nil {
		ok, err := t.If.EvalBool(ctx, env)
		if err != nil {
			return nil, fmt.Errorf("%s.if: %w", where, err)
		}
		if !ok {
			return nil, nil
		}
	}
	in := map[string]any{}
	for _, ti := range t.Inputs {
		v, err := ti.Tmpl.Eval(ctx, env)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: triggers[%d].inputs.%s: %w", file, ti.Line, t.Index, ti.Name, err)
		}
		in[ti.Name] = v
	}
	return &TriggerMatch{Inputs: in, PendingPaths: pending}, nil
}

// PushPathsPending reports whether t's paths are checked on ev by a worker: ev is a push whose
// payload may not list every changed file, t can ask the forge (it names a connector), and the
// push has a before commit to compare with (not a new branch).
func (t *Trigger) PushPathsPending(ev *scm.Event) bool {
	return t.Kind == scm.EventPush && len(t.Paths) > 0 && ev.Kind == scm.EventPush && ev.ChangedIncomplete &&
		t.Connector != "" && !ev.Deleted && !scm.IsZeroSHA(ev.Before) && !scm.IsZeroSHA(ev.After)
}

// PathsOnPartialList reports whether t's paths are decided on ev from a file list the forge
// sent incomplete (no connector to ask, or a new branch with nothing to compare with): such a
// decision is logged and recorded on the event.
func (t *Trigger) PathsOnPartialList(ev *scm.Event) bool {
	return t.Kind == scm.EventPush && len(t.Paths) > 0 && ev.Kind == scm.EventPush && ev.ChangedIncomplete &&
		!ev.Deleted && !t.PushPathsPending(ev)
}

func anyGlob(globs []string, s string) bool { return glob.Any(globs, s) }

// path2Match is path.Match where a "**" segment matches any number of segments.
func path2Match(g, name string) (bool, error) { return glob.Match(g, name) }

// TriggerRunID is the run id a trigger's run of one webhook delivery gets: a redelivered or
// replayed webhook maps to the same id, so it never starts a second run.
func TriggerRunID(provider, delivery, pipeline string, trigger int) string {
	sum := sha256.Sum256([]byte(provider + "\x00" + delivery + "\x00" + pipeline + "\x00" + strconv.Itoa(trigger)))
	return "t" + hex.EncodeToString(sum[:20])
}
