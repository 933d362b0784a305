package environments

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
)

// This file computes the environments from what the model holds in memory: the pipelines'
// declarations, the environment stages of the runs, the push events of release branches,
// the agents' app records and views. build is pure apart from the since-when marks it keeps
// between builds (drift and app state), so the tests drive it directly too.

// pushEvent is a push to a branch, as the forge's webhook reported it.
type pushEvent struct {
	repo, branch  string
	before, after string
	sender        string
	at            time.Time
	files         []string
	incomplete    bool // the forge may have listed only some files (Bitbucket: none)
}

// inputs is everything a build reads.
type inputs struct {
	decls  map[string][]envDecl        // pipeline → its environments
	facts  map[string][]stageFacts     // run → its environment stages
	apps   map[string]*agent.AppStatus // prflow-apps key → record (tombstones left out)
	views  map[string]agent.View       // agent → its view of its backend
	pushes []pushEvent                 // in arrival order
	reads  map[string]*readRecord      // prflow-envs reads, by id
}

// marks are the since-when times a build carries over to the next one.
type marks struct {
	drift map[string]time.Time  // environment → drifted since
	app   map[string]stateSince // agent/app → its shown state, since
}

type stateSince struct {
	state string
	since time.Time
}

func newMarks() *marks {
	return &marks{drift: map[string]time.Time{}, app: map[string]stateSince{}}
}

// built is one build's result.
type built struct {
	envs    []Environment
	byName  map[string]int
	history map[string][]Promotion // computed from the runs, newest first
	json    []byte                 // envs as JSON, encoded once per build (ListJSON)
	wants   []readRequest          // reads of release values the model needs
}

// envAcc gathers one environment's facts during a build.
type envAcc struct {
	name   string
	decls  []envDecl
	facts  []*stageFacts
	appSet string
	apps   map[string]appRef // StatusKey → app
}

func build(in *inputs, mk *marks, now time.Time) *built {
	accs := map[string]*envAcc{}
	acc := func(name string) *envAcc {
		a := accs[name]
		if a == nil {
			a = &envAcc{name: name, apps: map[string]appRef{}}
			accs[name] = a
		}
		return a
	}
	for _, ds := range in.decls {
		for _, d := range ds {
			a := acc(d.name)
			a.decls = append(a.decls, d)
			a.appSet = cmpOr(a.appSet, d.appSet)
		}
	}
	// Commits prflow made on release branches: a push of one of them is not a hand change.
	ours := map[string]bool{}
	for _, fs := range in.facts {
		for i := range fs {
			f := &fs[i]
			if a := accs[f.env]; a != nil {
				a.facts = append(a.facts, f)
			}
			for _, c := range []string{f.merged, f.reverted} {
				if c != "" {
					ours[c] = true
				}
			}
		}
	}
	// Apps the agents report for an environment no pipeline declares (labelled with it and
	// owned by an ApplicationSet) make that environment known too.
	appSets := map[string]string{}
	for _, st := range in.apps {
		if env := st.Labels[labelEnvRef]; env != "" && st.ApplicationSet != "" {
			if cur, ok := appSets[env]; !ok || st.ApplicationSet < cur {
				appSets[env] = st.ApplicationSet
			}
		}
	}
	for env, set := range appSets {
		if a := acc(env); a.appSet == "" {
			a.appSet = set
		}
	}
	ix := &index{parents: map[string]string{}, pushes: map[string][]int{}, byEnv: map[string][]string{}, bySet: map[string][]string{},
		head: map[string]string{}, reads: map[string][]*readRecord{}, tracked: map[string]*readRequest{}}
	for _, r := range in.reads {
		bk := branchKey(r.Repo, r.Branch)
		ix.reads[bk] = append(ix.reads[bk], r)
	}
	in.pushes = withComparedFiles(in.pushes, ix.reads)
	for i, p := range in.pushes {
		bk := branchKey(p.repo, p.branch)
		if p.before != "" && p.after != "" {
			ix.parents[bk+"/"+p.after] = p.before
			ix.head[bk] = p.after
		}
		for _, f := range p.files {
			ix.pushes[bk+"|"+f] = append(ix.pushes[bk+"|"+f], i)
		}
	}
	for key, st := range in.apps {
		if env := st.Labels[labelEnvRef]; env != "" {
			ix.byEnv[strings.ToLower(env)] = append(ix.byEnv[strings.ToLower(env)], key)
		} else if st.ApplicationSet != "" {
			ix.bySet[st.ApplicationSet] = append(ix.bySet[st.ApplicationSet], key)
		}
	}

	out := &built{byName: map[string]int{}, history: map[string][]Promotion{}}
	for _, a := range accs {
		e, hist, want := a.environment(in, mk, ours, ix, now)
		out.envs = append(out.envs, e)
		if len(hist) > 0 {
			out.history[a.name] = hist
		}
		if want != nil {
			out.wants = append(out.wants, *want)
		}
	}
	out.wants = finishWants(in, append(mergeWants(out.wants), compareWants(in, ix, ours, now)...), now)
	for name := range mk.drift {
		if accs[name] == nil {
			delete(mk.drift, name)
		}
	}
	slices.SortFunc(out.envs, func(a, b Environment) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Order, b.Order), cmp.Compare(a.Name, b.Name))
	})
	for i, e := range out.envs {
		out.byName[e.Name] = i
	}
	return out
}

// index finds what belongs to an environment without going through everything.
type index struct {
	parents map[string]string   // repo@branch/commit → its push's before
	pushes  map[string][]int    // repo@branch|file → the pushes (in.pushes) that touched it
	byEnv   map[string][]string // lower-case envRef label → prflow-apps keys
	bySet   map[string][]string // ApplicationSet → keys of its apps without the label
	head    map[string]string   // repo@branch → the newest push's after
	reads   map[string][]*readRecord
	tracked map[string]*readRequest // repo@branch → the files and keys its environments track
}

// labelEnvRef is the label Harness (and FetchLinkedApps) tie an app to its environment with.
const labelEnvRef = "harness.io/envRef"

func branchKey(repo, branch string) string { return strings.ToLower(repo) + "@" + branch }

// timed is one change of an environment's desired state, in time order.
type timed struct {
	at     time.Time
	f      *stageFacts // a run's merge (revert false) or revert (revert true)
	revert bool
	p      *pushEvent // a change made outside prflow
}

func (a *envAcc) environment(in *inputs, mk *marks, ours map[string]bool, ix *index, now time.Time) (Environment, []Promotion, *readRequest) {
	e := Environment{Name: a.name, ApplicationSet: a.appSet, Order: 1 << 20}
	var files []string
	addFile := func(f string) {
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	for _, d := range a.decls {
		if !slices.Contains(e.Pipelines, d.pipeline) {
			e.Pipelines = append(e.Pipelines, d.pipeline)
		}
		e.Order = min(e.Order, d.order)
		e.Desired.Repo, e.Desired.Branch = cmpOr(e.Desired.Repo, d.repo), cmpOr(e.Desired.Branch, d.branch)
		for _, f := range d.files {
			addFile(f)
		}
	}
	slices.Sort(e.Pipelines)
	if len(a.decls) == 0 {
		e.Order = 0
	}
	switch {
	case a.appSet != "":
		e.Group = "appset:" + a.appSet
	case len(e.Pipelines) > 0:
		e.Group = "promotion:" + e.Pipelines[0]
	default:
		e.Group = "agents"
	}

	// The facts in time order; the newest run's repo and branch win over the declarations.
	slices.SortFunc(a.facts, func(x, y *stageFacts) int {
		return cmp.Or(x.started.Compare(y.started), cmp.Compare(x.run, y.run), cmp.Compare(x.stage, y.stage))
	})
	var events []timed
	active := false
	for _, f := range a.facts {
		if f.repo != "" {
			e.Desired.Repo, e.Desired.Branch = f.repo, cmpOr(f.branch, e.Desired.Branch)
		}
		for _, ed := range f.edits {
			addFile(ed.File)
		}
		if !f.status.Terminal() && !f.started.IsZero() {
			active = true
		}
		switch {
		case f.merged != "":
			events = append(events, timed{at: f.mergedAt, f: f})
		case f.already && f.status == pipelines.StSucceeded:
			events = append(events, timed{at: f.ended, f: f})
		}
		if f.reverted != "" {
			events = append(events, timed{at: f.revertedAt, f: f, revert: true})
		}
	}
	e.Desired.Files = files
	bk := branchKey(e.Desired.Repo, e.Desired.Branch)
	if e.Desired.Repo != "" && e.Desired.Branch != "" {
		seen := map[int]bool{}
		for _, f := range files {
			for _, i := range ix.pushes[bk+"|"+f] {
				p := &in.pushes[i]
				if seen[i] || ours[p.after] {
					continue
				}
				seen[i] = true
				events = append(events, timed{at: p.at, p: &pushEvent{repo: p.repo, branch: p.branch, before: p.before, after: p.after, sender: p.sender, at: p.at, files: intersect(p.files, files)}})
			}
		}
	}
	slices.SortStableFunc(events, func(x, y timed) int { return x.at.Compare(y.at) })

	// Replay: the values of the environment's files, who set them, and what each promotion
	// replaced (for its history entry and its revert).
	type vkey = [2]string
	values := map[vkey]any{}
	var order []vkey
	unknown := false
	replaced := map[*stageFacts]map[vkey]any{}
	var earlier []string // desired commits before the current one
	d := &e.Desired
	setCommit := func(c string) {
		if d.Commit != "" && d.Commit != c {
			earlier = append(earlier, d.Commit)
		}
		d.Commit = c
	}
	for _, ev := range events {
		switch {
		case ev.p != nil:
			setCommit(ev.p.after)
			d.At, d.Run, d.Stage, d.Pipeline, d.PR = ev.p.at, "", "", "", ""
			d.Outside = &OutsideChange{Author: cmpOr(ev.p.sender, "someone"), Commit: ev.p.after, At: ev.p.at, Files: ev.p.files}
			clear(values)
			order, unknown = nil, true
		case ev.revert:
			old := replaced[ev.f]
			for _, ed := range ev.f.edits {
				k := vkey{ed.File, ed.Key}
				if v, ok := old[k]; ok {
					values[k] = v
				} else {
					delete(values, k)
				}
			}
			setCommit(ev.f.reverted)
			d.At, d.Run, d.Stage, d.Pipeline, d.PR, d.Outside = ev.at, ev.f.run, ev.f.stage, ev.f.pipeline, cmpOr(ev.f.revertPR, ev.f.pr), nil
		default:
			old := map[vkey]any{}
			for _, ed := range ev.f.edits {
				k := vkey{ed.File, ed.Key}
				if v, ok := values[k]; ok {
					old[k] = v
				} else if ed.HasOld {
					old[k] = ed.Old
				}
				if _, ok := values[k]; !ok {
					order = append(order, k)
				}
				values[k] = ed.Value
			}
			replaced[ev.f] = old
			if ev.f.merged != "" {
				setCommit(ev.f.merged)
				d.At, d.Run, d.Stage, d.Pipeline, d.PR, d.Outside = ev.at, ev.f.run, ev.f.stage, ev.f.pipeline, ev.f.pr, nil
				unknown = false
			} else if d.Commit == "" {
				// Already promoted: the values were there; the commit that held them stands in.
				setCommit(ev.f.revision)
				d.At, d.Run, d.Stage, d.Pipeline = ev.at, ev.f.run, ev.f.stage, ev.f.pipeline
			}
		}
	}
	for _, k := range order {
		if v, ok := values[k]; ok {
			d.Values = append(d.Values, Value{File: k[0], Key: k[1], Value: v})
		}
	}
	d.ValuesUnknown = unknown
	want := a.readValues(in, ix, d, files, now)

	// History: one entry per environment stage that ended.
	var hist []Promotion
	for _, f := range a.facts {
		res := result(f)
		if res == "" {
			continue
		}
		p := Promotion{Environment: a.name, Pipeline: f.pipeline, Run: f.run, Stage: f.stage, Inputs: f.inputs, By: f.executor,
			At: f.ended, Result: res, RolledBack: f.reverted != "" || f.status == pipelines.StRolledBack, PR: f.pr, Commit: f.merged}
		old := replaced[f]
		for _, ed := range f.edits {
			c := Change{File: ed.File, Key: ed.Key, New: ed.Value}
			if ed.HasOld {
				c.Old = ed.Old
			} else if v, ok := old[vkey{ed.File, ed.Key}]; ok {
				c.Old = v
			}
			p.Changes = append(p.Changes, c)
		}
		hist = append(hist, p)
	}
	sortHistory(hist)

	e.Apps = a.liveApps(in, mk, ix, d.Commit, earlier, bk, now)
	e.State, e.Drift = state(&e, active, mk, now)
	return e, hist, want
}

// result is a history entry's result for a stage, or "" for a stage that has not ended (or
// never ran: skipped, or not run because something before it failed).
func result(f *stageFacts) string {
	if f.started.IsZero() {
		return ""
	}
	switch f.status {
	case pipelines.StSucceeded:
		if f.already && f.merged == "" {
			return "alreadyPromoted"
		}
		return "succeeded"
	case pipelines.StFailed, pipelines.StCancelled, pipelines.StRolledBack:
		return string(f.status)
	}
	return ""
}

func sortHistory(h []Promotion) {
	slices.SortStableFunc(h, func(a, b Promotion) int {
		return cmp.Or(b.At.Compare(a.At), cmp.Compare(b.Run, a.Run), cmp.Compare(b.Stage, a.Stage))
	})
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// liveApps is what the agents report for the environment's apps: those its newest stage
// linked, those of its ApplicationSet on its clusters, and those labelled with its name.
func (a *envAcc) liveApps(in *inputs, mk *marks, ix *index, desired string, earlier []string, bk string, now time.Time) []App {
	for i := len(a.facts) - 1; i >= 0; i-- {
		if len(a.facts[i].apps) > 0 {
			for _, r := range a.facts[i].apps {
				a.apps[agent.StatusKey(r.agent, r.ref)] = r
			}
			break
		}
	}
	clusters := map[string]string{} // cluster → agent
	for _, d := range a.decls {
		for _, c := range d.clusters {
			clusters[c.Name] = c.Agent
		}
	}
	// An app labelled with the environment belongs to it, whatever ApplicationSet owns it
	// (several services' pipelines promote one dev); an unlabelled app of its ApplicationSet
	// belongs to it when it runs on one of its clusters, through that cluster's agent.
	for _, key := range ix.byEnv[strings.ToLower(a.name)] {
		st := in.apps[key]
		a.apps[key] = appRef{agent: st.Agent, ref: st.Ref()}
	}
	if a.appSet != "" {
		for _, key := range ix.bySet[a.appSet] {
			st := in.apps[key]
			ag, ok := clusters[st.Cluster]
			if !ok {
				ag, ok = clusters[st.ClusterServer]
			}
			if ok && ag == st.Agent {
				a.apps[key] = appRef{agent: st.Agent, ref: st.Ref()}
			}
		}
	}
	out := make([]App, 0, len(a.apps))
	for key, r := range a.apps {
		out = append(out, liveApp(in, mk, key, r, desired, earlier, ix.parents, bk, now))
	}
	slices.SortFunc(out, func(x, y App) int { return cmp.Or(cmp.Compare(x.Agent, y.Agent), cmp.Compare(x.Name, y.Name)) })
	return out
}

func liveApp(in *inputs, mk *marks, key string, r appRef, desired string, earlier []string, parents map[string]string, bk string, now time.Time) App {
	app := App{Agent: r.agent, Name: r.ref, Sync: agent.SyncUnknown, Health: agent.HealthUnknown, HasDesired: "unknown"}
	st := in.apps[key]
	view, seen := in.views[r.agent]
	if !seen {
		view = agent.View{Agent: r.agent, Reason: "the agent has not registered in prflow-agents"}
	}
	var since time.Time
	switch {
	case st == nil:
		app.Unknown = "agent " + r.agent + " reports no status for this app (prflow-apps key " + key + ")"
	default:
		app.Cluster, app.Namespace, app.URL = st.Cluster, st.Namespace, st.URL
		if v := agent.RecordView(view, st); !v.Fresh {
			// Never the last record's values: they may be long out of date.
			app.Unknown, since = v.Describe(), v.Since
			break
		}
		app.Sync, app.Health = cmpOr(st.Sync, agent.SyncUnknown), cmpOr(st.Health, agent.HealthUnknown)
		app.Revision = cmpOr(st.SyncedRevision, st.Revision)
		app.HasDesired = hasDesired(app.Revision, desired, earlier, parents, bk)
		if app.Health == agent.HealthDegraded || app.Health == agent.HealthMissing || app.Health == agent.HealthProgressing {
			since = st.HealthSince
		}
	}
	shown := app.Sync + "/" + app.Health + "/" + app.Revision + "/" + app.Unknown
	prev, ok := mk.app[key]
	switch {
	case !since.IsZero():
		app.Since = since
	case ok && prev.state == shown:
		app.Since = prev.since
	default:
		app.Since = now
	}
	mk.app[key] = stateSince{state: shown, since: app.Since}
	return app
}

// hasDesired says whether revision contains the desired commit: yes when it is that commit
// or a later pushed commit of the branch, no when it is an earlier one, unknown otherwise.
func hasDesired(revision, desired string, earlier []string, parents map[string]string, bk string) string {
	switch {
	case revision == "" || desired == "":
		return "unknown"
	case revision == desired:
		return "yes"
	}
	if reaches(parents, bk, revision, desired) {
		return "yes"
	}
	if slices.Contains(earlier, revision) || reaches(parents, bk, desired, revision) {
		return "no"
	}
	return "unknown"
}

// reaches reports whether walking from's pushes back (after → before) meets to.
func reaches(parents map[string]string, bk, from, to string) bool {
	cur := from
	for range 10000 {
		p, ok := parents[bk+"/"+cur]
		if !ok {
			return false
		}
		if p == to {
			return true
		}
		cur = p
	}
	return false
}

// state sums an environment up (see Environment.State) and says why it drifted.
func state(e *Environment, active bool, mk *marks, now time.Time) (string, *Drift) {
	var reasons []string
	unknown, progressing := len(e.Apps) == 0, false
	for _, a := range e.Apps {
		if a.Unknown != "" {
			unknown = true
			continue
		}
		switch a.Health {
		case agent.HealthDegraded, agent.HealthMissing:
			reasons = append(reasons, fmt.Sprintf("%s is %s", a.Name, a.Health))
		case agent.HealthProgressing:
			progressing = true
		}
		if a.Sync == agent.SyncOutOfSync {
			if active {
				progressing = true // a promotion of it is under way
			} else {
				reasons = append(reasons, a.Name+" is OutOfSync")
			}
		}
		if a.HasDesired == "no" {
			if active {
				progressing = true
			} else {
				reasons = append(reasons, fmt.Sprintf("%s runs %s, not %s", a.Name, short(a.Revision), short(e.Desired.Commit)))
			}
		}
	}
	empty := e.Desired.Commit == "" && len(e.Desired.Values) == 0
	if len(reasons) == 0 || empty {
		delete(mk.drift, e.Name)
	}
	switch {
	case empty:
		return "empty", nil
	case len(reasons) > 0:
		since, ok := mk.drift[e.Name]
		if !ok {
			since = now
			mk.drift[e.Name] = since
		}
		return "drifted", &Drift{Reasons: reasons, Since: since}
	case unknown:
		return "unknown", nil
	case progressing:
		return "progressing", nil
	}
	return "synced", nil
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
