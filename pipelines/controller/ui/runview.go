package ui

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/pipelines/runsummary"
	"github.com/prflow/prflow/steps"
)

// runView is everything the run page's live body shows.
type runView struct {
	*pipelines.Run
	Status   pipelines.Status // shown: waitingApproval while an approval is pending
	Duration string
	Trigger  triggerView
	Inputs   []kv
	Stages   []stageView
	// Approvals are the pending approvals, shown first on the page (the card with what is
	// being approved and the buttons) so that a phone shows them without scrolling.
	Approvals []approvalView
	// Interventions are the stages waiting for a person's decision after a failure (intervene.go),
	// shown first like approvals.
	Interventions []interventionView
	// Summary leads the page: per stage what changed (old → new), the PR, the merge commit,
	// the diff preview, the apps' health and how long it took (runsummary, as `prflow dev`).
	Summary []summaryView
	// Diffs are the diff previews of the run, shown full width below the stages.
	Diffs  []diffView
	CanAct bool // signed in (or dev), the run is active and RBAC allows cancel: cancel is offered
	CSRF   string
	Idem   string // the cancel form's idempotency key (formKey)

	// CanRerun and CanRetry: the run has ended and RBAC lets the user start it again (all its
	// environments) or retry it (the environments of the stages that did not succeed).
	CanRerun, CanRetry bool
}

type kv struct {
	Key   string
	Value template.HTML
}

type stageView struct {
	*pipelines.StageRun
	Env      string
	Clusters []string
	Duration string
	Steps    []stepView
	Rollback []stepView
	// RollbackNote is set when no rollback step has run: the rollback list is collapsed under
	// it ("not needed" once the stage succeeded and the run ended).
	RollbackNote string
	Apps         []appView
	// AlreadyPromoted is the revision that already held every value of the stage's release
	// repo edit (no PR, no merge); "" for a stage that changed something.
	AlreadyPromoted string
}

type stepView struct {
	*pipelines.StepRun
	RunID     string
	CSRF      string
	Idem      string // the decide form's idempotency key (formKey)
	Stage     string
	IsRB      bool
	Reason    string
	Timing    string
	Outputs   []kv
	Decisions []string
	// Pending: the step waits for an approval (the card at the top of the page decides it).
	Pending bool
	// Decide: the caller may approve or reject this step now; NoDecide says why not when the
	// step waits for an approval the caller may not give.
	Decide   bool
	NoDecide string
	// Created lists what an UpdateReleaseRepo edit added that the release repo did not have.
	Created []string
	// Edits are the edits output as rows (file, key, old → new), shown instead of the raw
	// output; Diff is a diff preview's outputs, shown in full below the stages.
	Edits []editView
	Diff  *diffView
}

// approvalView is an approval card: which environment, what the stage changed before it
// (UpdateReleaseRepo's edits), the PR, and the decide form (the step's).
type approvalView struct {
	Step  stepView
	Env   string
	PRURL string
	PR    string
	Edits []editView
	// MoreEdits are the keys past the first cardEdits, collapsed so that the decide form stays
	// on a phone's first screen.
	MoreEdits []editView
	Diffs     []diffView
}

// cardEdits is how many keys the approval card lists before "N more keys".
const cardEdits = 4

// editView is one key set; File is set on the first key of each file (its heading row).
// Old is the value it replaced; Created marks a key that was new; neither when the step did
// not record it.
type editView struct {
	File, Path, Key, Value string
	Old                    string
	HasOld, Created        bool
	Rollback               bool
	Step                   string
}

// summaryView is one stage of the summary at the top of the run page.
type summaryView struct {
	runsummary.Stage
	Env      string
	Duration string
	Edits    []editView
	Apps     []appView
	Diffs    []diffView
}

// diffView is a diff preview (runsummary.Diff) laid out for the page.
type diffView struct {
	runsummary.Diff
	Stage string
	ID    string // anchor: diff-<stage>-<step>
	Apps  []appDiffView
}

type appDiffView struct {
	agent.AppDiff
	ID                      string // the <details> id, so a live update keeps it open
	Added, Changed, Removed int
	Resources               []resourceView
}

type resourceView struct {
	agent.ResourceDiff
	Title string // Kind namespace/name
	// Diff is the unified diff as HTML, escaped here once: a diff can have thousands of lines
	// and the live page re-renders it on every change of the run.
	Diff template.HTML
}

// diffLine is one line of a unified diff with its class: add, del, hunk, file or ctx. A YAML
// line is split for highlighting: Mark (+, -, space), Lead (indent and list dash), Key (with
// its colon, "" when the line has none) and Rest; other lines are all Rest.
type diffLine struct{ Class, Mark, Lead, Key, Rest string }

type appView struct {
	Name           string
	Agent          string
	URL            string
	Sync           string
	Health         string
	Revision       string
	SyncedRevision string
	Message        string
	Stale          string
	Problem        string
}

type triggerView struct {
	Text    string
	PRURL   string
	PRText  string
	SHA     string
	SHAURL  string
	Kind    string
	Trigger string
}

func (u *UI) runView(ctx context.Context, run *pipelines.Run, s *session) runView {
	now := time.Now()
	v := runView{Run: run, Status: run.Shown(), Duration: duration(run.Started, run.Ended, now), Trigger: trigger(run.Trigger), CanAct: s != nil && run.Active()}
	if s != nil {
		v.CSRF, v.Idem = s.csrf, formKey()
		v.CanAct = v.CanAct && u.ctl.CanRun(ctx, s.user, run, rbac.Cancel) // rbac.go
		v.CanRerun = run.Status.Terminal() && u.ctl.CanRun(ctx, s.user, run, rbac.Start)
		v.CanRetry = run.Status.Terminal() && u.ctl.CanRun(ctx, s.user, run, rbac.Retry)
	}
	keys := make([]string, 0, len(run.Inputs))
	for k := range run.Inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v.Inputs = append(v.Inputs, kv{k, value(k, run.Inputs[k])})
	}
	var p *pipelines.Pipeline
	if run.Spec != "" {
		p, _ = u.ctl.Pipeline(ctx, run.Spec)
	}
	for _, sr := range run.Stages {
		sv := stageView{StageRun: sr, Duration: duration(sr.Started, sr.Ended, now)}
		if p != nil {
			if st := p.Stage(sr.ID); st != nil {
				sv.Env, sv.Clusters = st.Environment, st.Clusters
			}
		}
		for _, st := range sr.Steps {
			sv.Steps = append(sv.Steps, stepOf(run, sr.ID, st, false, s, now))
			if a, _ := st.Outputs["alreadyPromoted"].(bool); a && sr.Status == pipelines.StSucceeded && sv.AlreadyPromoted == "" {
				sv.AlreadyPromoted = fmt.Sprint(st.Outputs["revision"])
			}
		}
		for _, st := range sr.Rollback {
			sv.Rollback = append(sv.Rollback, stepOf(run, sr.ID, st, true, s, now))
		}
		u.gateDecide(ctx, run, sr.ID, sv.Steps, s) // rbac.go
		u.gateDecide(ctx, run, sr.ID, sv.Rollback, s)
		sv.RollbackNote = rollbackNote(run, sr)
		for _, list := range [][]stepView{sv.Steps, sv.Rollback} {
			for _, st := range list {
				if st.Pending {
					v.Approvals = append(v.Approvals, approvalOf(sr, sv.Env, st))
				}
				if st.Diff != nil {
					v.Diffs = append(v.Diffs, *st.Diff)
				}
			}
		}
		if sr.Intervention != nil && !run.Status.Terminal() {
			iv := interventionOf(run, sr, sv.Env, s, now)
			u.gateIntervene(ctx, run, &iv, s)
			v.Interventions = append(v.Interventions, iv)
		}
		sv.Apps = u.stageApps(ctx, sr)
		v.Stages = append(v.Stages, sv)
	}
	for i, st := range runsummary.Of(run) {
		sv := v.Stages[i]
		sum := summaryView{Stage: st, Env: sv.Env, Duration: sv.Duration, Edits: editViews(st.Edits), Apps: sv.Apps}
		if len(sum.Apps) == 0 {
			for _, a := range st.Apps { // no live status: as the sync step reported them
				sum.Apps = append(sum.Apps, appView{Name: a.Name, Agent: a.Agent, URL: a.URL, Sync: a.Sync, Health: a.Health})
			}
		}
		for _, d := range st.Diffs { // the summary line and the link to the stage's diff
			sum.Diffs = append(sum.Diffs, diffView{Diff: d, Stage: st.ID, ID: "diff-" + st.ID + "-" + d.Step})
		}
		v.Summary = append(v.Summary, sum)
	}
	return v
}

// rollbackNote says why a stage's rollback steps are collapsed: none of them has run ("" when
// one has, and the list is shown). Rollback steps start pending and stay so unless the
// stage, or a pipeline rollback, needs them.
func rollbackNote(run *pipelines.Run, sr *pipelines.StageRun) string {
	if len(sr.Rollback) == 0 {
		return ""
	}
	for _, st := range sr.Rollback {
		if st.Status != pipelines.StPending && st.Status != pipelines.StNotRun {
			return ""
		}
	}
	switch {
	case run.Status.Terminal() && sr.Status == pipelines.StSucceeded:
		return "not needed"
	case run.Status.Terminal():
		return "not run"
	}
	return "not run (only if the stage is rolled back)"
}

// editViews lays out a stage's edits: a heading row per file, then key, old → new.
func editViews(es []runsummary.Edit) []editView {
	var out []editView
	for _, e := range es {
		ev := editView{Path: e.File, Key: e.Key, Value: runsummary.Text(e.New), HasOld: e.HasOld, Created: e.Created, Rollback: e.Rollback, Step: e.Step}
		if e.HasOld {
			ev.Old = runsummary.Text(e.Old)
		}
		if len(out) == 0 || out[len(out)-1].Path != e.File {
			ev.File = e.File // a heading row per file: the rows fit a phone
		}
		out = append(out, ev)
	}
	return out
}

// diffViewOf lays out a diff preview of stage; prefix keeps the ids of the approval card's
// copy apart from the page's.
func diffViewOf(stage string, d runsummary.Diff, prefix string) diffView {
	v := diffView{Diff: d, Stage: stage, ID: "diff-" + stage + "-" + d.Step}
	for _, a := range d.Apps {
		av := appDiffView{AppDiff: a, ID: prefix + "-" + stage + "-" + d.Step + "-" + a.Agent + "-" + a.App}
		for _, r := range a.Resources {
			switch r.Change {
			case agent.ChangeAdded:
				av.Added++
			case agent.ChangeRemoved:
				av.Removed++
			default:
				av.Changed++
			}
			title := r.Kind + " "
			if r.Namespace != "" {
				title += r.Namespace + "/"
			}
			av.Resources = append(av.Resources, resourceView{ResourceDiff: r, Title: title + r.Name, Diff: diffHTML(diffLines(r.Diff))})
		}
		v.Apps = append(v.Apps, av)
	}
	return v
}

// diffLines classes each line of a unified diff for colouring.
func diffLines(diff string) []diffLine {
	if diff == "" {
		return nil
	}
	var out []diffLine
	for _, l := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		c := "ctx"
		switch {
		case strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "):
			c = "file"
		case strings.HasPrefix(l, "@@"):
			c = "hunk"
		case strings.HasPrefix(l, "+"):
			c = "add"
		case strings.HasPrefix(l, "-"):
			c = "del"
		}
		dl := diffLine{Class: c, Rest: l}
		if (c == "add" || c == "del" || c == "ctx") && l != "" {
			dl.Mark, dl.Rest = l[:1], l[1:]
			dl.Lead, dl.Key, dl.Rest = yamlKey(dl.Rest)
		}
		out = append(out, dl)
	}
	return out
}

// yamlKey splits a YAML line into its indent (with a list dash), its key with the colon, and
// the rest; a line that holds no plain key is all rest.
func yamlKey(l string) (lead, key, rest string) {
	i := 0
	for i < len(l) && l[i] == ' ' {
		i++
	}
	if strings.HasPrefix(l[i:], "- ") {
		i += 2
	}
	if i == len(l) || strings.IndexByte("#'\"{[-", l[i]) >= 0 {
		return "", "", l
	}
	for j := i; j < len(l); j++ {
		switch l[j] {
		case '#':
			return "", "", l
		case ':':
			if j+1 == len(l) || l[j+1] == ' ' {
				return l[:i], l[i : j+1], l[j+1:]
			}
		}
	}
	return "", "", l
}

// diffHTML renders diff lines as the spans of a <pre>, the key of a YAML line highlighted.
func diffHTML(lines []diffLine) template.HTML {
	esc := template.HTMLEscapeString
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(`<span class="` + l.Class + `">`) // Class is one of diffLines' own words
		if l.Mark != "" {
			b.WriteString(`<i class="m">` + esc(l.Mark) + `</i>`)
		}
		b.WriteString(esc(l.Lead))
		if l.Key != "" {
			b.WriteString(`<b class="yk">` + esc(l.Key) + `</b>`)
		}
		b.WriteString(esc(l.Rest))
		b.WriteString("</span>")
	}
	return template.HTML(b.String())
}

func stepOf(run *pipelines.Run, stage string, st *pipelines.StepRun, rb bool, s *session, now time.Time) stepView {
	v := stepView{StepRun: st, RunID: run.ID, Stage: stage, IsRB: rb}
	if s != nil {
		v.CSRF, v.Idem = s.csrf, formKey()
	}
	switch {
	case st.Status == pipelines.StWaiting && st.Wait != nil && st.Wait.Reason != "":
		v.Reason = st.Wait.Reason
	case st.WakeReason != "" && !st.Status.Terminal():
		v.Reason = st.WakeReason
	}
	switch {
	case !st.Started.IsZero():
		v.Timing = st.Started.UTC().Format("15:04:05") + " · " + duration(st.Started, st.Ended, now)
	case !st.Queued.IsZero():
		v.Timing = "queued " + ago(st.Queued, now)
	}
	if st.Status == pipelines.StWaiting && !st.WaitSince.IsZero() {
		v.Timing += " · waiting " + duration(st.WaitSince, time.Time{}, now)
	}
	shown := map[string]bool{} // outputs laid out on their own, left out of the list
	if d, ok := runsummary.DiffOf(st); ok {
		dv := diffViewOf(stage, d, "diff")
		v.Diff = &dv
		shown["apps"], shown["summary"], shown["changed"] = true, true, true
	}
	if es := steps.EditedKeys(st.Outputs["edits"]); len(es) > 0 {
		edits := make([]runsummary.Edit, len(es))
		for i, e := range es {
			edits[i] = runsummary.Edit{File: e.File, Key: e.Key, Old: e.Old, New: e.Value, HasOld: e.HasOld, Created: e.Created}
		}
		v.Edits = editViews(edits)
		shown["edits"] = true
	}
	for _, c := range asList(st.Outputs["created"]) {
		v.Created = append(v.Created, fmt.Sprint(c))
	}
	shown["created"] = len(v.Created) > 0 // the step's warning line lists them
	if html, ok := chartsHTML(st.Outputs["charts"]); ok {
		v.Outputs = append(v.Outputs, kv{"charts", html})
		shown["charts"] = true
	}
	keys := make([]string, 0, len(st.Outputs))
	for k := range st.Outputs {
		if !shown[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v.Outputs = append(v.Outputs, kv{k, valueIn("out-"+stage+"-"+st.ID+"-"+k, k, st.Outputs[k])})
	}
	for _, sig := range st.Signals {
		if sig.Kind != "" && sig.Kind != "approval" {
			continue
		}
		d := "rejected"
		if sig.Approve {
			d = "approved"
		}
		line := fmt.Sprintf("%s %s at %s", sig.User, d, sig.At.UTC().Format("15:04:05"))
		if sig.Comment != "" {
			line += ": " + sig.Comment
		}
		v.Decisions = append(v.Decisions, line)
	}
	v.Pending = st.Status == pipelines.StWaiting && st.Wait != nil && slices.Contains(st.Wait.Topics, "approval")
	if s != nil && st.Wait != nil && slices.Contains(st.Wait.Topics, "approval") && !st.Status.Terminal() {
		if err := controller.MayDecide(run, stage, st, s.user); err != nil {
			v.NoDecide = err.Error()
		} else {
			v.Decide = true
		}
	}
	return v
}

// approvalOf builds the card of approval step st of stage sr: the release-repo edits and the
// PR of the stage's finished steps (UpdateReleaseRepo's edits and prlink outputs).
func approvalOf(sr *pipelines.StageRun, env string, st stepView) approvalView {
	a := approvalView{Step: st, Env: env}
	var edits []runsummary.Edit
	for _, o := range sr.Steps {
		if d, ok := runsummary.DiffOf(o); ok && (o.Status == pipelines.StSucceeded || o.Status == pipelines.StFailed) {
			a.Diffs = append(a.Diffs, diffViewOf(sr.ID, d, "appr"))
		}
		if o.Status != pipelines.StSucceeded {
			continue
		}
		if link, _ := o.Outputs["prlink"].(string); link != "" {
			a.PR = link
			if runsummary.IsURL(link) {
				a.PRURL = link // anything else stays text, never a link
			}
			if n := o.Outputs["prNumber"]; n != nil && n != "" {
				a.PR = fmt.Sprintf("PR #%v", n)
			}
		}
		for _, e := range steps.EditedKeys(o.Outputs["edits"]) {
			edits = append(edits, runsummary.Edit{File: e.File, Key: e.Key, Old: e.Old, New: e.Value, HasOld: e.HasOld, Created: e.Created})
		}
	}
	if len(edits) > cardEdits+1 { // collapsing a single key saves nothing
		a.Edits, a.MoreEdits = editViews(edits[:cardEdits]), editViews(edits[cardEdits:])
	} else {
		a.Edits = editViews(edits)
	}
	return a
}

// stageApps lists the apps a stage's steps found (FetchLinkedApps' apps, GitOpsSync's
// applications) with their status as the agent reports it now in prflow-apps.
func (u *UI) stageApps(ctx context.Context, sr *pipelines.StageRun) []appView {
	var out []appView
	for _, ref := range stageAppRefs(sr) {
		av := appView{Name: ref.name, Agent: ref.agent, URL: ref.url}
		e, err := u.ctl.Buckets().Apps.Get(ctx, agent.StatusKey(ref.agent, ref.name))
		if err != nil {
			av.Problem = "no status from agent " + ref.agent + ": " + err.Error()
			out = append(out, av)
			continue
		}
		var as agent.AppStatus
		if err := json.Unmarshal(e.Value(), &as); err != nil {
			av.Problem = "unreadable status: " + err.Error()
			out = append(out, av)
			continue
		}
		if as.Gone() {
			av.Problem = agent.DeletedErr(&as).Message
			out = append(out, av)
			continue
		}
		av.Sync, av.Health, av.Revision, av.SyncedRevision, av.Message = as.Sync, as.Health, as.Revision, as.SyncedRevision, as.Message
		if as.URL != "" {
			av.URL = as.URL
		}
		if as.Stale != nil {
			av.Stale = fmt.Sprintf("stale since %s: %s", as.Stale.Since.UTC().Format("15:04:05"), as.Stale.Reason)
		}
		out = append(out, av)
	}
	return out
}

type appRef struct{ name, agent, url string }

// stageAppRefs are the apps a stage's steps name in their outputs, once each.
func stageAppRefs(sr *pipelines.StageRun) []appRef {
	var out []appRef
	seen := map[string]bool{}
	for _, st := range sr.Steps {
		for _, key := range []string{"apps", "applications"} {
			for _, a := range asList(st.Outputs[key]) {
				m, _ := a.(map[string]any)
				name, _ := m["name"].(string)
				ag, _ := m["agent"].(string)
				if name == "" || ag == "" || seen[ag+"/"+name] {
					continue
				}
				seen[ag+"/"+name] = true
				url, _ := m["url"].(string)
				out = append(out, appRef{name: name, agent: ag, url: url})
			}
		}
	}
	return out
}

// trigger describes what started a run, with links to the forge for the public hosts.
func trigger(t *pipelines.TriggerInfo) triggerView {
	if t == nil {
		return triggerView{Text: "manual"}
	}
	v := triggerView{Kind: t.Kind, Trigger: t.Trigger, SHA: t.SHA}
	if t.Provider == "" {
		v.Text = cmpOr(t.Kind, "manual")
		return v
	}
	v.Text = t.Provider + " " + t.Repo
	base := map[string]string{"github": "https://github.com/", "gitlab": "https://gitlab.com/", "bitbucket": "https://bitbucket.org/"}[t.Provider]
	if t.PR > 0 {
		v.PRText = fmt.Sprintf("#%d", t.PR)
		if base != "" && t.Repo != "" {
			v.PRURL = base + t.Repo + map[string]string{"github": "/pull/", "gitlab": "/-/merge_requests/", "bitbucket": "/pull-requests/"}[t.Provider] + fmt.Sprint(t.PR)
		}
	}
	if base != "" && t.Repo != "" && t.SHA != "" {
		v.SHAURL = base + t.Repo + map[string]string{"github": "/commit/", "gitlab": "/-/commit/", "bitbucket": "/commits/"}[t.Provider] + t.SHA
	}
	if t.Action != "" {
		v.Text += " (" + t.Action + ")"
	}
	return v
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// value renders an output or input as a person reads it: URLs as links, commit SHAs short with
// a copy button, lists as lists, maps as key: value rows (nested as deep as they go, to a
// limit), never Go's map[...] or a JSON blob.
func value(key string, v any) template.HTML { return valueIn("", key, v) }

// valueIn is value with an id prefix for the <details> it makes (a list of named objects,
// such as a sync's applications, shows one line per object and the rest on a click; the ids
// keep them open across live updates).
// chartsHTML draws a step's charts output (metric → SVG, as Verify writes it) as images. An
// SVG in an <img> runs no script whatever it holds, and the page's CSP allows data: images;
// a value that is not an SVG document is left to the ordinary output list.
func chartsHTML(v any) (template.HTML, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return "", false
	}
	names := make([]string, 0, len(m))
	for k, c := range m {
		svg, _ := c.(string)
		if !strings.HasPrefix(strings.TrimSpace(svg), "<svg") {
			return "", false
		}
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(`<div class="charts">`)
	for _, k := range names {
		esc := template.HTMLEscapeString(k)
		fmt.Fprintf(&b, `<figure class="chart" data-chart="%s"><img alt="chart of %s" src="data:image/svg+xml;base64,%s"><figcaption>%s</figcaption></figure>`,
			esc, esc, base64.StdEncoding.EncodeToString([]byte(m[k].(string))), esc)
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String()), true
}

func valueIn(id, key string, v any) template.HTML {
	var b strings.Builder
	writeValue(&b, id, key, v, 0)
	return template.HTML(b.String())
}

// maxDepth bounds the nesting shown; deeper values say how much they hold.
const maxDepth = 8

func writeValue(b *strings.Builder, id, key string, v any, depth int) {
	esc := template.HTMLEscapeString
	switch x := v.(type) {
	case string:
		switch {
		case runsummary.IsURL(x):
			fmt.Fprintf(b, `<a href="%s" rel="noreferrer">%s</a>`, esc(x), esc(x))
		case shaRE.MatchString(x):
			fmt.Fprintf(b, `<code class="sha" title="%s">%s</code><button type="button" class="copy" data-copy="%s" title="copy %s">copy</button>`, esc(x), esc(x[:8]), esc(x), esc(key))
		case x == "":
			b.WriteString(`<span class="muted">(empty)</span>`)
		default:
			b.WriteString(esc(x))
		}
	case []any:
		if writeBrief(b, len(x), "items", depth) {
			return
		}
		b.WriteString(`<ul class="val">`)
		for i, e := range x {
			b.WriteString("<li>")
			if m, ok := e.(map[string]any); ok && itemTitle(m) != "" && depth+1 < maxDepth {
				idAttr := ""
				if id != "" {
					idAttr = fmt.Sprintf(` id="%s-%d"`, esc(id), i)
				}
				fmt.Fprintf(b, `<details class="item"%s><summary>%s</summary>`, idAttr, itemTitle(m))
				writeValue(b, fmt.Sprintf("%s-%d", id, i), key, e, depth+1)
				b.WriteString("</details></li>")
				continue
			}
			writeValue(b, fmt.Sprintf("%s-%d", id, i), key, e, depth+1)
			b.WriteString("</li>")
		}
		b.WriteString("</ul>")
	case map[string]any:
		if writeBrief(b, len(x), "keys", depth) {
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(`<dl class="obj">`)
		for _, k := range keys {
			fmt.Fprintf(b, `<dt>%s</dt><dd>`, esc(k))
			sub := id
			if id != "" {
				sub = id + "-" + k
			}
			writeValue(b, sub, k, x[k], depth+1)
			b.WriteString("</dd>")
		}
		b.WriteString("</dl>")
	case nil:
		b.WriteString(`<span class="muted">null</span>`)
	default:
		b.WriteString(esc(runsummary.Text(x)))
	}
}

// writeBrief writes what stands for a list or object of n items (unit: "items", "keys") that
// is empty or nested too deep to show; false when it is to be shown in full.
func writeBrief(b *strings.Builder, n int, unit string, depth int) bool {
	switch {
	case n == 0:
		b.WriteString(`<span class="muted">none</span>`)
	case depth >= maxDepth:
		fmt.Fprintf(b, `<span class="muted">(%d %s)</span>`, n, unit)
	default:
		return false
	}
	return true
}

// itemTitle is the one-line title of an object in a list: its name and its state (an app's
// sync and health), as HTML; "" when it has no name to show.
func itemTitle(m map[string]any) string {
	var name string
	for _, k := range []string{"name", "app", "id", "key"} {
		if s, ok := m[k].(string); ok && s != "" {
			name = s
			break
		}
	}
	if name == "" {
		return ""
	}
	out := "<b>" + template.HTMLEscapeString(name) + "</b>"
	if a, ok := m["agent"].(string); ok && a != "" {
		out += ` <span class="muted">@` + template.HTMLEscapeString(a) + `</span>`
	}
	for _, k := range []string{"sync", "health", "status", "phase"} {
		if s, ok := m[k].(string); ok && s != "" {
			out += fmt.Sprintf(` <span class="h-%s">%s</span>`, template.HTMLEscapeString(s), template.HTMLEscapeString(s))
		}
	}
	return out
}

func isURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func duration(from, to, now time.Time) string {
	if from.IsZero() {
		return ""
	}
	if to.IsZero() {
		to = now
	}
	d := to.Sub(from)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func urlq(s string) string { return url.QueryEscape(s) }

var funcs = template.FuncMap{
	"short": func(s string) string {
		if len(s) > 8 && shaRE.MatchString(s) {
			return s[:8]
		}
		return s
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"lower": strings.ToLower,
}

// formKey is a new idempotency key for one rendered form: sending the form again (a double
// click, the browser's resend after a lost answer) repeats its key, so the action happens
// once (controller.CancelOnce, DecideOnce).
func formKey() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return "ui-" + base64.RawURLEncoding.EncodeToString(b[:])
}
