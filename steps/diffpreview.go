package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/scm"
)

// DiffPreview asks the agents what a merge of the stage's PR would deploy: each linked app
// rendered at the PR's head and compared with what it runs (deploy/agent.DiffRequest). It
// keeps one PR comment per run and environment up to date (collapsed per app, size-capped)
// and sets the commit status prflow/diff on the head. A PR that changes nothing any app
// deploys fails the step before the merge (a mistyped key or file promotes nothing), unless
// allowNoop. An agent that is offline or an Argo CD that cannot render parks the step: it
// never reads as "no change". MergePR with preview: true runs the same code before merging.
const TypeDiffPreview = "DiffPreview"

// StatusDiff is the commit status the preview sets on the PR's head.
const StatusDiff = "prflow/diff"

// ServiceRunURL names a func(runID string) string in Services giving the link to a run's
// page in prflow's UI (the server's --external-url); the comment links the full diff there.
const ServiceRunURL = "runURL"

func init() {
	Register(Definition{
		Type:   TypeDiffPreview,
		Priors: []string{"UpdateReleaseRepo", "RevertPR", "MergePR", TypeDiffPreview, "FetchLinkedApps"},
		Parks:  true,
		New:    func() Step { return StepFunc(runDiffPreview) },
		Config: diffPreviewConfig{},
		Validate: func(in map[string]any) error {
			if _, err := previewConfigFrom(in, true); err != nil {
				return err
			}
			_, err := linkedPart(in, true)
			return err
		},
	})
}

// diffPreviewConfig is DiffPreview's `with:`.
type diffPreviewConfig struct {
	Connector                 string             `input:"connector" doc:"the worker connector (SCM credentials) of the repo"`
	Repo                      string             `input:"repo" doc:"the repo, e.g. acme/release"`
	PRNumber                  int                `input:"prNumber" doc:"the PR to preview (default: the one the stage's UpdateReleaseRepo opened)"`
	HeadSha                   string             `input:"headSha" doc:"the PR head commit to render (default: the UpdateReleaseRepo's commit, else the PR's head)"`
	ApplicationSet            string             `input:"applicationSet" doc:"also preview the apps this ApplicationSet generates at the head (new environments)"`
	Labels                    labelSelectorInput `input:"labels" doc:"a label selector: \"k=v,k2=v2\", a list of \"k:v\" or a mapping"`
	Selector                  selectorText       `input:"selector" doc:"a label selector such as \"team=payments,tier in (web,api)\""`
	FilterByServiceEnvCluster bool               `input:"filterByServiceEnvCluster,default=false" doc:"every app of the environment on its clusters, whatever its service"`
	outageInput
	agentInputs
	previewOptions
}

// previewOptions are DiffPreview's own inputs; MergePR takes them too for preview: true.
type previewOptions struct {
	AllowNoop bool `input:"allowNoop,default=false" doc:"pass when the PR changes nothing the apps deploy (default: fail before the merge)"`
	Comment   bool `input:"comment,default=true" doc:"keep a PR comment with the diff, one per run and environment, updated in place"`
	// MaxCommentBytes' default is defaultMaxCommentBytes (TestConfigDefaults).
	MaxCommentBytes int    `input:"maxCommentBytes,default=60000" doc:"cap of the PR comment; longer diffs link to the run page"`
	MaxDiffBytes    int    `input:"maxDiffBytes,default=65536" doc:"cap of each app's unified diff as the agent returns it"`
	RunURL          string `input:"runUrl" doc:"link to the run's page for the full diff (default: the worker's --external-url)"`
}

const defaultMaxCommentBytes = 60000 // below GitHub's 65536 and Bitbucket's 32768×2

type previewConfig struct {
	allowNoop, comment bool
	maxComment         int
	maxDiff            int
	runURL             string
}

func previewConfigFrom(in map[string]any, static bool) (*previewConfig, error) {
	o, err := decodePart[previewOptions](in, static)
	if err != nil {
		return nil, err
	}
	for f, n := range map[string]int{"maxCommentBytes": o.MaxCommentBytes, "maxDiffBytes": o.MaxDiffBytes} {
		if n < 1000 && !hasExprIn(in, f) {
			return nil, fmt.Errorf("%s: %d is too small to say anything (at least 1000)", f, n)
		}
	}
	return &previewConfig{allowNoop: o.AllowNoop, comment: o.Comment, maxComment: o.MaxCommentBytes, maxDiff: o.MaxDiffBytes, runURL: o.RunURL}, nil
}

// previewTarget is the PR a preview renders.
type previewTarget struct {
	connector, repo string
	number          int
	head            string
	edited          []string // the keys the stage's UpdateReleaseRepo wrote
}

// previewMemo is kept while the preview waits for an agent, and caches its answer.
type previewMemo struct {
	OutageSince time.Time `json:"outageSince,omitzero"`
	// Key names what is previewed (head + apps asked); Answers are the agents that answered
	// for it already, so a wake asks only those that could not.
	Key     string                     `json:"key,omitempty"`
	Answers map[string][]agent.AppDiff `json:"answers,omitempty"`
}

func runDiffPreview(ctx context.Context, sc *Context) (Result, error) {
	if _, err := Decode[diffPreviewConfig](sc.Inputs, false); err != nil {
		return Result{}, Terminal(err)
	}
	cfg, err := previewConfigFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	t, skip, err := previewTargetOf(ctx, sc)
	if err != nil || skip != nil {
		return derefResult(skip), err
	}
	var m previewMemo
	if _, err := sc.DecodeMemo(&m); err != nil {
		return Result{}, Terminalf("DiffPreview memo: %w", err)
	}
	return preview(ctx, sc, cfg, t, &m)
}

func derefResult(r *Result) Result {
	if r == nil {
		return Result{}
	}
	return *r
}

// previewTargetOf finds the PR to preview: the inputs, else the stage's UpdateReleaseRepo.
// A stage whose update opened no PR (already promoted, nothing changed) has nothing to
// preview: skip says so.
func previewTargetOf(ctx context.Context, sc *Context) (previewTarget, *Result, error) {
	in, err := decodePart[diffPreviewConfig](sc.Inputs, false) // MergePR's inputs too
	if err != nil {
		return previewTarget{}, nil, Terminal(err)
	}
	t := previewTarget{connector: in.Connector, repo: in.Repo, head: in.HeadSha, number: in.PRNumber}
	if t.number == 0 {
		prior := priorPR(sc)
		if prior == nil {
			return t, nil, Terminalf("no PR to preview: give prNumber, or put an UpdateReleaseRepo step before this one in stage %s", sc.Stage)
		}
		if already, _ := prior.Outputs["alreadyPromoted"].(bool); already {
			sc.Log.Info("already promoted: no PR, nothing to preview", "step", prior.ID)
			r := Done(map[string]any{"apps": []any{}, "summary": "already promoted: no PR to preview", "changed": false, "skipped": true})
			return t, &r, nil
		}
		if prior.Outputs["prNumber"] == "" || prior.Outputs["prNumber"] == nil {
			sc.Log.Info("the previous step opened no PR; nothing to preview", "step", prior.ID)
			r := Done(map[string]any{"apps": []any{}, "summary": "no PR to preview", "changed": false, "skipped": true})
			return t, &r, nil
		}
		n, err := intInput(prior.Outputs["prNumber"], "prNumber of step "+prior.ID, false)
		if err != nil {
			return t, nil, Terminal(err)
		}
		t.number = n
		if t.connector == "" {
			t.connector, _ = prior.Outputs["connector"].(string)
		}
		if t.repo == "" {
			t.repo, _ = prior.Outputs["repo"].(string)
		}
		if t.head == "" {
			t.head, _ = prior.Outputs["commitId"].(string)
		}
		for _, k := range EditedKeys(prior.Outputs["edits"]) {
			t.edited = append(t.edited, k.Key)
		}
	}
	if t.repo == "" || t.connector == "" {
		return t, nil, Terminalf("connector and repo: required with prNumber")
	}
	if t.head == "" {
		p, err := scmFor(ctx, sc, t.connector)
		if err != nil {
			return t, nil, err
		}
		pr, err := p.GetPR(ctx, scm.Repo(t.repo), t.number)
		if err != nil {
			return t, nil, classify(err, fmt.Sprintf("get PR #%d of %s", t.number, t.repo))
		}
		t.head = pr.HeadSHA
	}
	return t, nil, nil
}

// differ is the agent client's diff request (agent.Client has it).
type differ interface {
	Diff(ctx context.Context, agentID string, req agent.DiffRequest) ([]agent.AppDiff, error)
}

// preview renders t on the agents, reports it on the PR and decides. m is the step's memo
// (outage start, cached answer).
func preview(ctx context.Context, sc *Context, cfg *previewConfig, t previewTarget, m *previewMemo) (Result, error) {
	lcfg, g, err := gitopsInputs(sc, linkedPart)
	if err != nil {
		return Result{}, err
	}
	d, ok := g.(differ)
	if !ok {
		return Result{}, Terminalf("this worker's GitOps client cannot ask agents for diffs")
	}
	asked, out0, err := previewApps(ctx, sc, g, lcfg)
	if err != nil {
		return Result{}, err
	}
	final := sc.WakeReason == "deadline"
	key := t.head + "|" + lcfg.ApplicationSet + "|" + strings.Join(asked.names(), ",")
	if cached := cachedPreview(sc, key); cached != nil {
		sc.Log.Info("this head was previewed already in the stage; not asking the agents again", "head", t.head)
		return previewVerdict(ctx, sc, cfg, t, cached)
	}
	if m.Key != key {
		m.Key, m.Answers = key, nil
	}
	if !out0.any() {
		for _, a := range asked.agents() {
			if _, done := m.Answers[a]; done {
				continue // answered before this step parked for another agent
			}
			if len(asked.byAgent[a]) == 0 && lcfg.ApplicationSet == "" {
				continue
			}
			got, err := d.Diff(ctx, a, agent.DiffRequest{Apps: asked.byAgent[a], ApplicationSet: lcfg.ApplicationSet, RepoURL: t.repo,
				Revision: t.head, MaxDiffBytes: cfg.maxDiff})
			if v, isOutage := outageErr(a, err); isOutage || cannotWork(err) {
				if !isOutage {
					v = agent.View{Agent: a, Reason: "Argo CD cannot render: " + err.Error()}
				}
				out0.add(v)
				continue
			}
			if errors.Is(err, agent.ErrUnsupported) {
				return Result{}, Terminalf("agent %s cannot preview revisions (%v); update it, or turn the preview off (preview: false)", a, err)
			}
			if err != nil {
				return Result{}, agentErr(err, fmt.Sprintf("preview %.12s of %s on agent %s", t.head, t.repo, a))
			}
			kept := keepDiffs(got, asked.set(a))
			if why := unavailableApp(kept); why != "" {
				// Argo CD answered for the app that it cannot work now (repo-server down):
				// not the change's fault, so wait as for an outage.
				out0.add(agent.View{Agent: a, Reason: "Argo CD cannot render: " + why})
				continue
			}
			if m.Answers == nil {
				m.Answers = map[string][]agent.AppDiff{}
			}
			m.Answers[a] = kept
		}
	}
	if res, stop := out0.settle(sc, &m, &m.OutageSince, lcfg.outageTimeout(), final,
		outageWords{"the PR's diff could not be previewed", "cannot preview yet; waiting", "waiting to preview the PR's diff"}); stop {
		return res, nil
	}
	var diffs []agent.AppDiff
	for _, a := range sortedKeysOf(m.Answers) {
		diffs = append(diffs, m.Answers[a]...)
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].Agent+"/"+diffs[i].App < diffs[j].Agent+"/"+diffs[j].App })
	outputs := previewOutputs(diffs, t)
	outputs["previewKey"] = key
	return previewVerdict(ctx, sc, cfg, t, outputs)
}

// cachedPreview is a copy of an earlier preview of the same head and apps in this stage (a
// DiffPreview before a MergePR with preview: true), or nil.
func cachedPreview(sc *Context, key string) map[string]any {
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		p := sc.Priors[i]
		o := p.Outputs
		if p.Type == "MergePR" {
			o, _ = o["preview"].(map[string]any)
		} else if p.Type != TypeDiffPreview {
			continue
		}
		if k, _ := o["previewKey"].(string); k == key {
			c := make(map[string]any, len(o))
			for k, v := range o {
				c[k] = v
			}
			return c
		}
	}
	return nil
}

// askedApps are the linked apps to preview, per agent.
type askedApps struct {
	byAgent map[string][]string
}

func (a askedApps) agents() []string { return sortedKeysOf(a.byAgent) }

func (a askedApps) names() []string {
	var out []string
	for _, ag := range a.agents() {
		for _, n := range a.byAgent[ag] {
			out = append(out, ag+"/"+n)
		}
	}
	return out
}

func (a askedApps) set(agentID string) map[string]bool {
	s := map[string]bool{}
	for _, n := range a.byAgent[agentID] {
		s[n] = true
	}
	return s
}

// previewApps finds the stage's linked apps as FetchLinkedApps would (its output when the
// stage ran one). Every agent of the stage is asked, also one with no app yet (a new
// environment's app appears in the ApplicationSet's answer).
func previewApps(ctx context.Context, sc *Context, g GitOps, cfg *linkedConfig) (askedApps, *outage, error) {
	asked := askedApps{byAgent: map[string][]string{}}
	out0 := &outage{}
	targets, err := linkedTargets(sc, cfg)
	if err != nil {
		return asked, out0, Terminal(err)
	}
	for _, t := range targets {
		if _, ok := asked.byAgent[t.agent]; !ok {
			asked.byAgent[t.agent] = nil // asked for the ApplicationSet's new apps
		}
	}
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		if sc.Priors[i].Type != "FetchLinkedApps" {
			continue
		}
		list, _ := sc.Priors[i].Outputs["apps"].([]any)
		for _, x := range list {
			am, _ := x.(map[string]any)
			n, _ := am["name"].(string)
			a, _ := am["agent"].(string)
			if n != "" && a != "" {
				asked.byAgent[a] = append(asked.byAgent[a], n)
			}
		}
		return asked, out0, nil
	}
	q, _, err := linkedQuery(sc, cfg)
	if err != nil {
		return asked, out0, Terminal(err)
	}
	otherEnv := otherEnvFilter(sc, cfg)
	done := map[string]bool{}
	for _, t := range targets {
		if done[t.agent+"\x00"+t.cluster] {
			continue
		}
		done[t.agent+"\x00"+t.cluster] = true
		apps, err := g.Apps(ctx, t.agent, q)
		if v, isOutage := outageErr(t.agent, err); isOutage {
			out0.add(v)
			continue
		}
		if err != nil {
			return asked, out0, agentErr(err, fmt.Sprintf("list apps on agent %s", t.agent))
		}
		for _, a := range apps {
			if t.cluster != "" && a.Cluster != t.cluster && a.ClusterServer != t.cluster || otherEnv(a) {
				continue
			}
			if !containsStr(asked.byAgent[t.agent], a.Ref()) {
				asked.byAgent[t.agent] = append(asked.byAgent[t.agent], a.Ref())
			}
		}
	}
	for a := range asked.byAgent {
		sort.Strings(asked.byAgent[a])
	}
	return asked, out0, nil
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// keepDiffs keeps the linked apps and, from an ApplicationSet's answer, the apps the PR
// makes it create or delete (a new environment). Other apps of the ApplicationSet are left
// out: their difference from what they run need not be this PR's (one not deployed yet
// differs by everything), and their own stages preview them.
func keepDiffs(got []agent.AppDiff, linked map[string]bool) []agent.AppDiff {
	var out []agent.AppDiff
	for _, d := range got {
		if linked[d.App] || d.Created || d.Deleted {
			out = append(out, d)
		}
	}
	return out
}

// unavailableApp names the first app whose error says Argo CD cannot work right now, or "".
func unavailableApp(diffs []agent.AppDiff) string {
	for _, d := range diffs {
		if d.Error != "" && agent.UnavailableText(d.Error) {
			return d.App + ": " + d.Error
		}
	}
	return ""
}

// previewOutputs are the step's outputs: apps (the AppDiffs), summary (a line per app),
// changed, and what was previewed.
func previewOutputs(diffs []agent.AppDiff, t previewTarget) map[string]any {
	var lines []string
	changed := false
	for i := range diffs {
		lines = append(lines, summaryLine(&diffs[i]))
		changed = changed || diffs[i].Changed()
	}
	apps := []any{}
	if b, err := json.Marshal(diffs); err == nil && len(diffs) > 0 {
		_ = json.Unmarshal(b, &apps)
	}
	if len(lines) == 0 {
		lines = []string{"no app to preview"}
	}
	return map[string]any{"apps": apps, "summary": strings.Join(lines, "\n"), "changed": changed,
		"revision": t.head, "prNumber": t.number}
}

// summaryLine says in one line what the PR does to an app:
// "web-prod: 1 changed (ConfigMap web-prod/web: data.image)".
func summaryLine(d *agent.AppDiff) string {
	if strings.HasPrefix(d.Error, "not previewed: ") {
		return d.App + ": " + d.Error
	}
	if d.Error != "" {
		return fmt.Sprintf("%s: cannot preview: %s", d.App, d.Error)
	}
	if d.Created && d.SpecNotRendered {
		return fmt.Sprintf("%s: creates app %s; its resources are not rendered before it exists (the agent renders new apps only with --preview-apps)", d.App, d.App)
	}
	if d.Created {
		return fmt.Sprintf("%s: creates app %s with %s (%s)", d.App, d.App, plural(len(d.Resources), "resource"), resourceList(d.Resources, false))
	}
	if d.Deleted {
		return fmt.Sprintf("%s: deletes app %s and its %s", d.App, d.App, plural(len(d.Resources), "resource"))
	}
	if !d.Changed() {
		if len(d.SecretsNotCompared) > 0 {
			return fmt.Sprintf("%s: no change seen; the values of Secret %s were not compared (Argo CD hides them)", d.App, strings.Join(d.SecretsNotCompared, "; Secret "))
		}
		return d.App + ": no change"
	}
	counts := map[string]int{}
	for _, r := range d.Resources {
		counts[r.Change]++
	}
	var parts []string
	for _, c := range []string{agent.ChangeAdded, agent.ChangeChanged, agent.ChangeRemoved} {
		if counts[c] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[c], c))
		}
	}
	if len(d.Resources) == 0 && d.SpecNotRendered {
		return fmt.Sprintf("%s: its spec changes (%s); its resources under the new spec are not known before it is applied (Argo CD renders only the current spec)", d.App, strings.Join(d.SpecChanges, "; "))
	}
	if len(d.Resources) == 0 {
		return fmt.Sprintf("%s: its spec changes (%s), its resources render the same", d.App, strings.Join(d.SpecChanges, "; "))
	}
	return fmt.Sprintf("%s: %s (%s)", d.App, strings.Join(parts, ", "), resourceList(d.Resources, true))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func resourceList(rs []agent.ResourceDiff, paths bool) string {
	var out []string
	for i, r := range rs {
		if i == 5 {
			out = append(out, fmt.Sprintf("and %d more", len(rs)-i))
			break
		}
		s := r.Kind + " " + r.Name
		if r.Namespace != "" {
			s = r.Kind + " " + r.Namespace + "/" + r.Name
		}
		if paths && r.Change == agent.ChangeChanged && len(r.Paths) > 0 {
			s += ": " + strings.Join(r.Paths, ", ")
		} else if paths && r.Change != agent.ChangeChanged {
			s += " " + r.Change
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// appDiffsOf reads the apps output back.
func appDiffsOf(v any) []agent.AppDiff {
	var out []agent.AppDiff
	b, err := json.Marshal(v)
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// previewVerdict reports the preview on the PR (comment, status) and decides: an app that
// cannot be rendered or a PR that changes nothing fails the step.
func previewVerdict(ctx context.Context, sc *Context, cfg *previewConfig, t previewTarget, outputs map[string]any) (Result, error) {
	diffs := appDiffsOf(outputs["apps"])
	changed, _ := outputs["changed"].(bool)
	var broken, names, hidden []string
	n := 0
	for _, d := range diffs {
		names = append(names, d.App)
		for _, h := range d.SecretsNotCompared {
			hidden = append(hidden, d.App+": Secret "+h)
		}
		if d.Error != "" {
			broken = append(broken, d.App+": "+d.Error)
		}
		if d.Changed() {
			n++
		}
	}
	failure := ""
	switch {
	case len(broken) > 0:
		failure = fmt.Sprintf("the PR's head %.12s cannot be rendered: %s", t.head, strings.Join(broken, "; "))
	case !changed && !cfg.allowNoop:
		failure = noopMessage(names, t.edited)
		if len(hidden) > 0 {
			// A value-only Secret change is the one change the preview cannot see.
			failure += "; the values of " + strings.Join(hidden, ", ") + " were not compared (Argo CD hides Secret values): if the PR changes only a Secret value, set allowNoop: true"
		}
	}
	var warnings []string
	p, err := scmFor(ctx, sc, t.connector)
	if err != nil {
		return Result{}, err
	}
	runURL := cfg.runURL
	if runURL == "" {
		if f := sc.Services.RunURL; f != nil {
			runURL = f(sc.RunID)
		}
	}
	r := scm.Repo(t.repo)
	if cfg.comment {
		body := previewComment(sc, t, diffs, outputs, failure, runURL, cfg.maxComment)
		how, err := scm.UpsertComment(ctx, p, r, t.number, "prflow-diff/"+sc.RunID+"/"+envOrStage(sc), body)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s/%s: the diff comment on PR #%d of %s could not be posted: %v", sc.Stage, sc.StepID, t.number, t.repo, err))
		} else {
			outputs["comment"] = how
			sc.Log.Info("diff comment "+how, "pr", t.number, "repo", t.repo)
		}
	}
	st := scm.Status{Context: StatusDiff, State: scm.StatusSuccess, TargetURL: runURL}
	switch {
	case failure != "":
		st.State, st.Description = scm.StatusFailure, clipText(failure, 140)
	case !changed:
		st.Description = "changes no app (allowed: allowNoop)"
	default:
		st.Description = fmt.Sprintf("%d apps change", n)
		if n == 1 {
			st.Description = "1 app changes"
		}
	}
	if err := p.SetStatus(ctx, r, t.head, st); err != nil {
		warnings = append(warnings, fmt.Sprintf("%s/%s: status %s on %.12s of %s could not be set: %v", sc.Stage, sc.StepID, StatusDiff, t.head, t.repo, err))
	}
	for _, w := range warnings {
		sc.Log.Warn(w)
	}
	if failure != "" {
		if len(warnings) > 0 {
			failure += " (" + strings.Join(warnings, "; ") + ")"
		}
		return Result{Status: Failed, Message: failure, Outputs: outputs}, nil
	}
	res := Done(outputs)
	res.Warnings = warnings
	return res, nil
}

// noopMessage explains a PR that changes nothing deployed, naming the keys it edits.
func noopMessage(apps, edited []string) string {
	if len(apps) == 0 {
		return "the PR changes no app: no linked app was found to preview, and the ApplicationSet generates none from it (set allowNoop: true to merge anyway)"
	}
	msg := "the PR changes no resource of " + strings.Join(apps, ", ")
	switch len(edited) {
	case 0:
	case 1:
		msg += ": " + edited[0] + " is not used by the chart or manifests"
	default:
		msg += ": " + strings.Join(edited, ", ") + " are not used by the chart or manifests"
	}
	return msg + " (set allowNoop: true to merge anyway)"
}

func envOrStage(sc *Context) string {
	if sc.Env != nil && sc.Env.Name != "" {
		return sc.Env.Name
	}
	return sc.Stage
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// previewComment is the PR comment: a summary line per app, then each app's diff collapsed,
// as many as fit in max bytes; the rest is on the run page.
func previewComment(sc *Context, t previewTarget, diffs []agent.AppDiff, outputs map[string]any, failure, runURL string, max int) string {
	var head strings.Builder
	fmt.Fprintf(&head, "### prflow diff preview: %s\n\n", envOrStage(sc))
	fmt.Fprintf(&head, "Run `%s`, stage `%s`, PR head `%.12s`.\n\n", sc.RunID, sc.Stage, t.head)
	if failure != "" {
		fmt.Fprintf(&head, "**Not merged: %s**\n\n", htmlEscape(failure))
	}
	summary, _ := outputs["summary"].(string)
	for _, l := range strings.Split(summary, "\n") {
		head.WriteString("- " + htmlEscape(l) + "\n")
	}
	link := "the run's page in prflow"
	if runURL != "" {
		link = runURL
	}
	tail := fmt.Sprintf("\n_Some diffs are left out to keep this comment short; the full diff: %s_\n", link)
	budget := max - head.Len() - len(tail) - 200 // room for the marker UpsertComment adds
	var body strings.Builder
	left := false
	for i := range diffs {
		block := appBlock(&diffs[i])
		if block == "" {
			continue
		}
		if body.Len()+len(block) > budget {
			left = true
			continue
		}
		body.WriteString(block)
	}
	out := head.String() + body.String()
	if left {
		out += tail
	}
	return out
}

// appBlock is one app's collapsed diff ("" for an app without one).
func appBlock(d *agent.AppDiff) string {
	if !d.Changed() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n<details><summary>%s</summary>\n\n", htmlEscape(summaryLine(d)))
	for _, s := range d.SpecChanges {
		fmt.Fprintf(&b, "- spec: `%s`\n", strings.ReplaceAll(s, "`", "'"))
	}
	for _, r := range d.Resources {
		if r.Diff == "" {
			continue
		}
		fence := "```"
		for strings.Contains(r.Diff, fence) {
			fence += "`"
		}
		fmt.Fprintf(&b, "\n%sdiff\n%s%s\n", fence, strings.TrimRight(r.Diff, "\n")+"\n", fence)
	}
	if d.Truncated {
		b.WriteString("\n_The agent cut this app's diff at maxDiffBytes._\n")
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
