package steps

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/steps/duration"
	"github.com/prflow/prflow/steps/template"
)

// ServiceGitOps names the agent client in Services (an *agent.Client on workers).
const ServiceGitOps = "gitops"

// GitOps is what the GitOps steps need from the agents; *agent.Client implements it.
type GitOps interface {
	Sync(ctx context.Context, agentID string, req agent.SyncRequest) (*agent.SyncReply, error)
	Apps(ctx context.Context, agentID string, q agent.AppsQuery) ([]agent.AppStatus, error)
	Status(ctx context.Context, agentID, app string) (*agent.AppStatus, error)
	// View says whether the agent's records can be decided on (a live, current leader).
	View(ctx context.Context, agentID string) agent.View
}

func gitopsFor(sc *Context) (GitOps, error) {
	g := sc.Services.GitOps
	if g == nil {
		return nil, Terminalf("this worker has no GitOps agent client (service %q); GitOps steps need a worker connected to prflow's NATS", ServiceGitOps)
	}
	return g, nil
}

// GitOpsSync syncs apps through their agents — tagging each Argo CD operation with the run —
// and parks, holding no worker, until the operation this run started has finished on the
// expected revision (the stage's MergePR commit, else what Argo CD resolved) and, with
// waitTillHealthy, the app is Healthy. It wakes on the apps' status records changing; a slow
// poll is only a safety net.
func init() {
	Register(Definition{
		Type:             "GitOpsSync",
		JudgesAtDeadline: true,
		Priors:           []string{"MergePR", "FetchLinkedApps", "UpdateGitOpsApp", "UpdateReleaseRepo", "RevertPR"},
		Parks:            true,
		New:              func() Step { return StepFunc(runGitOpsSync) },
		Validate:         validateSync,
		Config:           syncConfig{},
	})
}

// Defaults and limits of GitOpsSync.
const (
	// syncPollSafetyNet: a step that waits only for app records to change is woken by the
	// controller when one does (or when its agent's registration changes, or on a restart
	// for records written meanwhile); the poll is a backstop minutes apart, so that 10,000
	// parked steps cost a few jobs a second, not hundreds.
	syncPollSafetyNet = 30 * time.Minute
	syncFirstPoll     = time.Second      // a retried sync request: first pause
	syncRetryMax      = 30 * time.Second // a retried sync request: the pause doubles up to this
	syncRetryPoll     = 3 * time.Second  // an agent was offline or busy answering
	syncDefaultWait   = 10 * time.Minute
	syncMaxResyncs    = 2 // a Succeeded operation on the wrong revision is retried this often
	// syncDriftGrace: how long an app may stay OutOfSync at a good revision after our sync
	// finished before it is synced again (Argo CD compares again within a few seconds).
	syncDriftGrace = 5 * time.Second
	syncMaxApps    = 1000
	// syncGoneGrace: how long an app its ApplicationSet owns may stay deleted before the
	// step fails: the ApplicationSet controller creates a deleted app again, or the app
	// under its new name, within seconds.
	syncGoneGrace = 30 * time.Second
	// syncMaxReplaced bounds how often an app may be created again or renamed under a step.
	syncMaxReplaced = 3
	// syncWindowPoll bounds the poll fallback while a sync window blocks: the agent
	// rewrites the record when the window opens (or is edited), which wakes the step at
	// once; a long block costs a wake a quarter of an hour, not one every 30s.
	syncWindowPoll = 15 * time.Minute
)

// The values of GitOpsSync's syncWindow input.
const (
	syncWindowWait     = "wait"
	syncWindowOverride = "override"
)

type appTarget struct {
	Agent string `json:"agent"`
	App   string `json:"app"`
}

// syncConfig is GitOpsSync's `with:`.
type syncConfig struct {
	ApplicationsList     appRefs            `input:"applicationsList" doc:"the apps to sync (besides the apps of the stage's FetchLinkedApps and UpdateGitOpsApp)"`
	ApplicationRegex     regexInput         `input:"applicationRegex" doc:"sync the apps whose names match (Go regular expression)"`
	ApplicationLabels    labelSelectorInput `input:"applicationLabels" doc:"sync the apps with these labels"`
	Prune                bool               `input:"prune,default=false"`
	DryRun               bool               `input:"dryRun,default=false"`
	ApplyOnly            bool               `input:"applyOnly,default=false"`
	ForceApply           bool               `input:"forceApply,default=false"`
	WaitTillHealthy      bool               `input:"waitTillHealthy,default=false" doc:"wait until every app is Healthy, not only synced"`
	FailOnTimeout        bool               `input:"failOnTimeout,default=false" doc:"fail when health is not reached in time (needs waitTillHealthy)"`
	DegradedStateTimeout time.Duration      `input:"degradedStateTimeout" doc:"fail once an app has been Degraded this long (needs waitTillHealthy)"`
	// ExpectedRevision: a SHA, "any", or "".
	ExpectedRevision string           `input:"expectedRevision" doc:"the revision apps must reach: a SHA, or any (default: the stage's merge commit)"`
	SyncOptions      syncOptionsInput `input:"syncOptions" doc:"Harness sync options, or a list of Argo CD items such as CreateNamespace=true"`
	RetryStrategy    retryInput       `input:"retryStrategy" doc:"Argo CD's retry of a failed sync"`
	// SyncWindow override: sync through sync windows that allow manual syncs.
	SyncWindow string `input:"syncWindow,enum=wait|override,default=wait" doc:"while an Argo CD sync window blocks an app: wait (park until it opens) or override (sync as Argo CD's manual sync; fails when the window does not allow manual syncs)"`
	Connector  string `input:"connector" doc:"the release repo's connector, for ancestry checks (default: the stage's UpdateReleaseRepo/RevertPR)"`
	Repo       string `input:"repo" doc:"the release repo, for ancestry checks (default: the stage's UpdateReleaseRepo/RevertPR)"`
	outageInput
	agentInputs

	list []appTarget // ApplicationsList resolved
}

func (c *syncConfig) override() bool { return c.SyncWindow == syncWindowOverride }

func syncConfigFrom(in map[string]any, static bool) (*syncConfig, error) {
	c, err := Decode[syncConfig](in, static)
	if err != nil {
		return nil, err
	}
	if c.list, err = c.ApplicationsList.targets(c.agent(), static); err != nil {
		return nil, err
	}
	set := 0
	for _, given := range []bool{len(c.ApplicationsList) > 0, c.ApplicationRegex.Source != "", c.ApplicationLabels != ""} {
		if given {
			set++
		}
	}
	if set > 1 {
		return nil, fmt.Errorf("applicationsList, applicationRegex and applicationLabels: give at most one")
	}
	if !c.WaitTillHealthy && !hasExprIn(in, "waitTillHealthy") {
		if c.FailOnTimeout {
			return nil, fmt.Errorf("failOnTimeout: needs waitTillHealthy: true (it fails the step when health is not reached in time)")
		}
		if c.DegradedStateTimeout > 0 {
			return nil, fmt.Errorf("degradedStateTimeout: needs waitTillHealthy: true")
		}
	}
	return &c, nil
}

func hasExprIn(in map[string]any, f string) bool {
	s, ok := in[f].(string)
	return ok && template.Contains(s)
}

// durationInput parses a duration; "0" or "" means none.
func durationInput(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	return duration.Parse(s)
}

// labelSelector turns applicationLabels (["k:v"], "k=v,k2=v2", or {k: v}) into a selector.
func labelSelector(v any, field string, static bool) (string, error) {
	var parts []string
	switch x := v.(type) {
	case string:
		if static && template.Contains(x) {
			return x, nil
		}
		parts = strings.Split(x, ",")
	case []any:
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("%s[%d]: want \"key:value\", got %T", field, i, e)
			}
			parts = append(parts, s)
		}
	case map[string]any:
		for _, k := range sortedMapKeys(x) {
			parts = append(parts, k+"="+fmt.Sprint(x[k]))
		}
	default:
		return "", fmt.Errorf("%s: want a list of \"key:value\" or a map, got %T", field, v)
	}
	var reqs []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		// Harness writes key:value; Kubernetes writes key=value.
		if k, val, ok := strings.Cut(p, ":"); ok && !strings.ContainsAny(p, "=!()") {
			p = strings.TrimSpace(k) + "=" + strings.TrimSpace(val)
		}
		reqs = append(reqs, p)
	}
	sel := strings.Join(reqs, ",")
	if _, err := agent.ParseSelector(sel); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return sel, nil
}

func sortedMapKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// syncOptionsInput is Harness's syncOptions object mapped to Argo CD items; a list of Argo CD
// items ("CreateNamespace=true") passes as is. Only options that are set are sent: the agent
// lays them over the app's own syncPolicy options.
type syncOptionsInput []string

// syncOptionFlags is Harness's syncOptions object.
type syncOptionFlags struct {
	SkipSchemaValidation     *bool  `input:"skipSchemaValidation"`
	AutoCreateNamespace      *bool  `input:"autoCreateNamespace"`
	PruneResourcesAtLast     *bool  `input:"pruneResourcesAtLast"`
	ApplyOutOfSyncOnly       *bool  `input:"applyOutOfSyncOnly"`
	ReplaceResources         *bool  `input:"replaceResources"`
	ServerSideApply          *bool  `input:"serverSideApply"`
	RespectIgnoreDifferences *bool  `input:"respectIgnoreDifferences"`
	PrunePropagationPolicy   string `input:"prunePropagationPolicy,enum=foreground|background|orphan"`
}

func (syncOptionsInput) InputShape() Input {
	return Input{Type: InputObject, Fields: InputsOf[syncOptionFlags](),
		Or: []Input{{Type: InputList, Items: &Input{Type: InputString}}}}
}

func (o *syncOptionsInput) DecodeInput(v any, field string, static bool) error {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			s, ok := e.(string)
			if !ok || !strings.Contains(s, "=") {
				return fmt.Errorf("%s[%d]: want an Argo CD option such as \"CreateNamespace=true\", got %v", field, i, e)
			}
			*o = append(*o, s)
		}
		return nil
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			if !hasInput[syncOptionFlags](k) {
				return fmt.Errorf("%s.%s: unknown option (known: skipSchemaValidation, autoCreateNamespace, pruneResourcesAtLast, applyOutOfSyncOnly, replaceResources, serverSideApply, respectIgnoreDifferences, prunePropagationPolicy)", field, k)
			}
			if s, ok := e.(string); ok && k == "prunePropagationPolicy" && !template.Contains(s) {
				e = strings.ToLower(s) // Argo CD's values are lower case; Harness's UI writes them capitalised
			}
			m[k] = e
		}
		f, err := Decode[syncOptionFlags](m, static)
		if err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
		for _, b := range []struct {
			v      *bool
			item   string
			invert bool
		}{
			{f.SkipSchemaValidation, "Validate", true},
			{f.AutoCreateNamespace, "CreateNamespace", false},
			{f.PruneResourcesAtLast, "PruneLast", false},
			{f.ApplyOutOfSyncOnly, "ApplyOutOfSyncOnly", false},
			{f.ReplaceResources, "Replace", false},
			{f.ServerSideApply, "ServerSideApply", false},
			{f.RespectIgnoreDifferences, "RespectIgnoreDifferences", false},
		} {
			if b.v != nil {
				*o = append(*o, fmt.Sprintf("%s=%t", b.item, *b.v != b.invert))
			}
		}
		if f.PrunePropagationPolicy != "" && !template.Contains(f.PrunePropagationPolicy) {
			*o = append(*o, "PrunePropagationPolicy="+f.PrunePropagationPolicy)
		}
		return nil
	case string:
		if static && template.Contains(x) {
			return nil
		}
	}
	return fmt.Errorf("%s: want {autoCreateNamespace: true, …} or a list of Argo CD options, got %T", field, v)
}

// retryInput is Harness's retryStrategy mapped to Argo CD's (nil when not set).
type retryInput struct{ *agent.RetryStrategy }

type retryFields struct {
	Limit                   int          `input:"limit,required"`
	BaseBackoffDuration     durationText `input:"baseBackoffDuration"`
	IncreaseBackoffByFactor int          `input:"increaseBackoffByFactor"`
	MaxBackoffDuration      durationText `input:"maxBackoffDuration"`
}

func (retryInput) InputShape() Input {
	return Input{Type: InputObject, Fields: InputsOf[retryFields]()}
}

func (r *retryInput) DecodeInput(v any, field string, static bool) error {
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return nil
	}
	if s, ok := v.(string); ok && static && template.Contains(s) {
		return nil
	}
	f, err := decodeAs[retryFields](v, field, static)
	if err != nil {
		return err
	}
	if f.Limit < 0 {
		return fmt.Errorf("%s.limit: must be ≥ 0", field)
	}
	r.RetryStrategy = &agent.RetryStrategy{Limit: int64(f.Limit)}
	b := agent.Backoff{Duration: string(f.BaseBackoffDuration), Factor: int64(f.IncreaseBackoffByFactor), MaxDuration: string(f.MaxBackoffDuration)}
	if b != (agent.Backoff{}) {
		r.Backoff = &b
	}
	return nil
}

// ---- the run ----

// syncMemo is what a parked GitOpsSync remembers between wakes.
type syncMemo struct {
	Deadline time.Time `json:"deadline"`
	Expected string    `json:"expected,omitempty"` // the stage's merge commit, when known
	Apps     []syncApp `json:"apps"`
	// Quiet counts wakes in a row that changed nothing; a retried request's poll doubles with it.
	Quiet int `json:"quiet,omitempty"`
	// OutageSince is when the agents' view went stale (zero while it is fresh).
	OutageSince time.Time `json:"outageSince,omitzero"`
	// Selecting: the apps are still to be selected (the agent that lists them was out).
	Selecting bool `json:"selecting,omitempty"`
}

// syncApp is one app's progress.
type syncApp struct {
	Agent string `json:"agent"`
	App   string `json:"app"`
	// State: "todo" (sync to be requested), "syncing" (requested; waiting for it), "done".
	State     string    `json:"state"`
	Requested time.Time `json:"requested,omitzero"`
	// Revision is what this app must end up on.
	Revision      string    `json:"revision,omitempty"`
	Resyncs       int       `json:"resyncs,omitempty"`
	Tries         int       `json:"tries,omitempty"`
	Waiting       string    `json:"waiting,omitempty"` // why it is not done, for messages
	DegradedSince time.Time `json:"degradedSince,omitzero"`
	Superseded    string    `json:"superseded,omitempty"` // who started the operation that replaced ours
	Deployed      string    `json:"deployed,omitempty"`   // the revision it passed at (Revision or a commit containing it)
	// DriftSince: since when the app is OutOfSync at a good revision after our sync finished.
	DriftSince time.Time `json:"driftSince,omitzero"`
	// Comparing: since when Argo CD's automated sync is seen finished with the merge while the
	// app is not Synced yet (deployed.go: awaitingComparison).
	Comparing time.Time `json:"comparing,omitzero"`
	Note      string    `json:"note,omitempty"`

	// Unavailable: the last sync request failed because Argo CD cannot work right now (its
	// message); cleared once a sync is accepted (unavailable.go).
	Unavailable string `json:"unavailable,omitempty"`
	// UID is the uid of the app our sync went to: a record under the same name with another
	// uid is the app created again (by its ApplicationSet), which is synced and judged anew.
	UID string `json:"uid,omitempty"`
	// AppSet, Cluster and Namespace are the app's owner and destination as last seen, to
	// wait for the ApplicationSet to create a deleted app again or find it under a new name.
	AppSet    string `json:"appSet,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// GoneSince: since when the app is deleted (waiting for its ApplicationSet).
	GoneSince time.Time `json:"goneSince,omitzero"`
	Replaced  int       `json:"replaced,omitempty"` // how often it was created again or renamed
	Skipped   string    `json:"skipped,omitempty"`  // a rollback skipped it: why
}

const (
	appTodo    = "todo"
	appSyncing = "syncing"
	appDone    = "done"
)

func runGitOpsSync(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := syncConfigFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	g, err := gitopsFor(sc)
	if err != nil {
		return Result{}, err
	}
	var m syncMemo
	ok, err := sc.DecodeMemo(&m)
	if err != nil {
		return Result{}, Terminalf("GitOpsSync memo: %w", err)
	}
	if !ok {
		m.Deadline = sc.Deadline
		if m.Deadline.IsZero() {
			m.Deadline = time.Now().Add(syncDefaultWait)
		}
		m.Expected = expectedRevision(sc, cfg)
	}
	if !ok || m.Selecting {
		targets, err := syncTargets(ctx, sc, cfg, g)
		var out outage
		if err != nil {
			var ae *agent.Error
			if errors.As(err, &ae) {
				if v, isOutage := outageErr(ae.Agent, err); isOutage {
					out.add(v)
				}
			}
		}
		if out.any() {
			// The apps are selected through an agent that cannot answer: wait for it.
			now := time.Now()
			m.Selecting = true
			final := sc.WakeReason == "deadline" || !now.Before(m.Deadline)
			if out.track(&m.OutageSince, now, cfg.outageTimeout(), final) {
				return FailBlind(out.blindMessage("GitOps sync could not select its applications", m.OutageSince, cfg.outageTimeout(), final, now)), nil
			}
			poll := min(outagePoll, max(time.Until(m.OutageSince.Add(cfg.outageTimeout())), time.Second))
			return Park(Wait{Poll: poll, Deadline: m.Deadline, Reason: "waiting: " + out.describe()}, m), nil
		}
		if err != nil {
			return Result{}, err
		}
		m.Selecting, m.OutageSince = false, time.Time{}
		if len(targets) == 0 {
			sc.Log.Info("No application found to be synced")
			return Done(map[string]any{"applications": []any{}}), nil
		}
		var agents []string
		owners := linkedOwners(sc)
		for _, t := range targets {
			m.Apps = append(m.Apps, syncApp{Agent: t.Agent, App: t.App, State: appTodo, AppSet: owners[t]})
			agents = append(agents, t.Agent)
		}
		if mergedWithoutRefresh(sc) {
			refreshAppSets(ctx, sc, g, "", agents) // see fetchlinkedapps.go
		}
		sc.Log.Info("syncing applications", "apps", len(m.Apps), "expectedRevision", orDefault(m.Expected, "(what Argo CD resolves)"))
	}
	final := sc.WakeReason == "deadline" || !time.Now().Before(m.Deadline)
	if final {
		// The job's context ends at the deadline; the final verdict still needs the last status.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	rev, err := newRevisionGate(sc)
	if err != nil {
		return Result{}, err
	}
	run := &syncRun{sc: sc, cfg: cfg, g: g, m: &m, tag: syncTag(sc), now: time.Now(), rev: rev}
	return run.step(ctx, final)
}

// syncTag is the InfoStep tag of this step's operations: a retried step (new attempt) starts
// new operations, a re-run of the same attempt finds its own.
func syncTag(sc *Context) string {
	return fmt.Sprintf("%s/%s/%d", sc.Stage, sc.StepID, max(sc.Attempt, 1))
}

// expectedRevision is the revision the apps must reach: the expectedRevision input, else the
// commit of this stage's latest MergePR, else "" (what Argo CD resolves per app).
func expectedRevision(sc *Context, cfg *syncConfig) string {
	switch strings.ToLower(cfg.ExpectedRevision) {
	case "any":
		return ""
	case "":
	default:
		return cfg.ExpectedRevision
	}
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		p := sc.Priors[i]
		if p.Type == "MergePR" {
			s, _ := p.Outputs["commitId"].(string)
			if already, _ := p.Outputs["alreadyPromoted"].(bool); already {
				s, _ = p.Outputs["revision"].(string) // nothing merged: the base head held the values
			}
			return s
		}
	}
	return ""
}

// syncTargets resolves the apps: applicationsList, applicationRegex or applicationLabels,
// plus the stage's FetchLinkedApps output; de-duplicated.
func syncTargets(ctx context.Context, sc *Context, cfg *syncConfig, g GitOps) ([]appTarget, error) {
	seen := map[appTarget]bool{}
	var out []appTarget
	add := func(t appTarget) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	for _, t := range linkedApps(sc) {
		add(t)
	}
	for _, t := range updatedApps(sc) { // the stage's UpdateGitOpsApp (updategitopsapp.go)
		add(t)
	}
	for _, t := range cfg.list {
		add(t)
	}
	if cfg.ApplicationRegex.Source != "" || string(cfg.ApplicationLabels) != "" {
		agents := stageAgents(sc, cfg.agent())
		if len(agents) == 0 {
			return nil, Terminalf("applicationRegex/applicationLabels: no agent to ask; set agentId or give the stage an environment whose clusters name an agent")
		}
		for _, a := range agents {
			apps, err := g.Apps(ctx, a, agent.AppsQuery{NameRegex: cfg.ApplicationRegex.Source, Selector: string(cfg.ApplicationLabels)})
			if err != nil {
				return nil, agentErr(err, "list apps")
			}
			for _, s := range apps {
				add(appTarget{Agent: a, App: s.Ref()})
			}
		}
	}
	if len(out) > syncMaxApps {
		return nil, Terminalf("%d applications selected; GitOpsSync syncs at most %d per step (narrow applicationRegex/applicationLabels)", len(out), syncMaxApps)
	}
	return out, nil
}

// linkedApps reads the apps of this stage's latest FetchLinkedApps.
func linkedApps(sc *Context) []appTarget {
	var out []appTarget
	for t := range linkedEntries(sc) {
		if t.Agent != "" && t.App != "" {
			out = append(out, t)
		}
	}
	return out
}

// linkedOwners is the owning ApplicationSet of each app of this stage's latest FetchLinkedApps.
func linkedOwners(sc *Context) map[appTarget]string {
	out := map[appTarget]string{}
	for t, m := range linkedEntries(sc) {
		if set, _ := m["applicationSet"].(string); set != "" {
			out[t] = set
		}
	}
	return out
}

// linkedEntries yields each app entry of this stage's latest FetchLinkedApps outputs, with
// its agent and namespaced name.
func linkedEntries(sc *Context) iter.Seq2[appTarget, map[string]any] {
	return func(yield func(appTarget, map[string]any) bool) {
		for i := len(sc.Priors) - 1; i >= 0; i-- {
			p := sc.Priors[i]
			if p.Type != "FetchLinkedApps" {
				continue
			}
			list, _ := p.Outputs["apps"].([]any)
			for _, e := range list {
				m, _ := e.(map[string]any)
				a, _ := m["agent"].(string)
				n, _ := m["name"].(string)
				if ns, _ := m["appNamespace"].(string); ns != "" {
					n = ns + "/" + n
				}
				if !yield(appTarget{Agent: a, App: n}, m) {
					return
				}
			}
			return
		}
	}
}

// linkedAppSet is the ApplicationSet this stage's latest FetchLinkedApps selected its apps
// by ("" when it selected them otherwise): the stage follows that ApplicationSet's apps.
func linkedAppSet(sc *Context) string {
	for i := len(sc.Priors) - 1; i >= 0; i-- {
		if p := sc.Priors[i]; p.Type == "FetchLinkedApps" {
			s, _ := p.Outputs["applicationSet"].(string)
			return s
		}
	}
	return ""
}

// stageAgents are the agents to ask: the explicit one, else those of the stage's clusters.
func stageAgents(sc *Context, explicit string) []string {
	if explicit != "" {
		return []string{explicit}
	}
	var out []string
	seen := map[string]bool{}
	if sc.Env != nil {
		for _, c := range sc.Env.Clusters {
			if c.Agent != "" && !seen[c.Agent] {
				seen[c.Agent] = true
				out = append(out, c.Agent)
			}
		}
	}
	return out
}

// agentErr classifies an agent error: offline, slow and busy agents are retried by the worker;
// the rest fail the step.
func agentErr(err error, what string) error {
	if agent.Transient(err) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return Terminalf("%s: %w", what, err)
}

type syncRun struct {
	sc  *Context
	cfg *syncConfig
	g   GitOps
	m   *syncMemo
	tag string
	now time.Time
	rev *revisionGate // which revisions have the change (revision.go)
}

// appTag is the InfoStep tag of an app's current operation: each re-sync gets its own, so a
// record that still shows the previous operation is not mistaken for the new one.
func (r *syncRun) appTag(a *syncApp) string {
	if a.Resyncs > 0 {
		return fmt.Sprintf("%s/r%d", r.tag, a.Resyncs)
	}
	return r.tag
}

// verdict of one app on this run.
type verdict struct {
	fail string // non-empty: the app failed, for this reason
}

func (r *syncRun) step(ctx context.Context, final bool) (Result, error) {
	m := r.m
	before := m.fingerprint()
	status := make([]*agent.AppStatus, len(m.Apps))
	gone := make([]*agent.Error, len(m.Apps)) // the app was deleted: the agent's tombstone
	for i, a := range m.Apps {
		if a.State == appDone {
			continue
		}
		st, err := r.g.Status(ctx, a.Agent, a.App)
		var ae *agent.Error
		if errors.Is(err, agent.ErrDeleted) && errors.As(err, &ae) {
			gone[i] = ae
		}
		if err != nil && !errors.Is(err, agent.ErrNotFound) {
			if final {
				continue
			}
			return Result{}, fmt.Errorf("read status of %s on agent %s: %w", a.App, a.Agent, err)
		}
		status[i] = st
		m.Apps[i].remember(st)
	}
	if err := r.prepareRevisions(ctx, status); err != nil {
		return Result{}, err
	}

	// Never judge an app on a stale view: its agent must have a live leader that sees Argo
	// CD, and the record must not be marked stale.
	views := &viewCache{g: r.g}
	blind := make([]bool, len(m.Apps))
	var out outage
	for i := range m.Apps {
		a := &m.Apps[i]
		if a.State == appDone {
			continue
		}
		if v := agent.RecordView(views.get(ctx, a.Agent), status[i]); !v.Fresh {
			blind[i] = true
			a.Waiting = v.Describe()
			out.add(v)
		}
	}
	if out.track(&m.OutageSince, r.now, r.cfg.outageTimeout(), final) {
		return r.blind(ctx, status, &out, final), nil
	}

	// Apps deleted since the step chose them, or deleted and created again: fail, wait for
	// the ApplicationSet (held like a blind app: not judged), follow it to the app's new
	// name, or sync the new app.
	if f := r.replaced(ctx, status, gone, blind); len(f) > 0 {
		return r.failed(ctx, status, f), nil
	}

	// Apps whose sync was requested: done, failed, or still going.
	var failures []string
	for i := range m.Apps {
		a := &m.Apps[i]
		if a.State != appSyncing || blind[i] {
			continue
		}
		if v := r.evaluate(a, status[i]); v.fail != "" {
			failures = append(failures, fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, v.fail))
		}
	}
	if len(failures) > 0 {
		return r.failed(ctx, status, failures), nil
	}

	// Apps still to sync: wait out an operation someone else is running and a sync window
	// that blocks, then request ours.
	var windows windowWait
	byAgent := map[string][]int{}
	for i := range m.Apps {
		a := &m.Apps[i]
		if a.State != appTodo || blind[i] {
			continue
		}
		st := status[i]
		if st != nil && st.Operation.Tagged(r.sc.RunID, r.appTag(a)) {
			// An earlier delivery of this step already started it (and it may have ended):
			// judge that operation instead of starting another.
			a.State, a.Waiting = appSyncing, "sync requested by an earlier attempt"
			a.Requested, a.UID = firstTime(st.Operation.StartedAt, r.now), st.UID
			a.Revision = firstNonEmptyStr(r.m.Expected, st.Operation.Revision)
			if v := r.evaluate(a, st); v.fail != "" {
				return r.failed(ctx, status, []string{fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, v.fail)}), nil
			}
			continue
		}
		if st != nil && st.Operation != nil && !st.Operation.Finished() {
			a.Waiting = fmt.Sprintf("waiting for an operation started by %s (phase %s) to finish before syncing", who(st.Operation), st.Operation.Phase)
			continue
		}
		if r.alreadyDeployed(a, st) {
			if v := r.evaluate(a, st); v.fail != "" {
				return r.failed(ctx, status, []string{fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, v.fail)}), nil
			}
			continue
		}
		if r.awaitingComparison(a, st) {
			continue
		}
		if w := windowsOf(st); w != nil && w.Blocked {
			if !r.cfg.override() {
				// Park: the agent rewrites the record when the window opens.
				a.Waiting = w.Describe()
				windows.add(w.Until)
				continue
			}
			if !w.ManualSync {
				failures = append(failures, fmt.Sprintf("%s (agent %s): %s, and the window does not allow manual syncs: syncWindow: override needs manualSync: true on every blocking window",
					a.App, a.Agent, w.Describe()))
				continue
			}
		}
		if !final {
			k := a.Agent + "\x00" + r.appTag(a)
			byAgent[k] = append(byAgent[k], i)
		}
	}
	if len(failures) > 0 {
		// A window refused the override: fail before syncing any other app.
		return r.failed(ctx, status, failures), nil
	}
	retry := false
	for _, k := range sortedKeysOf(byAgent) {
		idx := byAgent[k]
		agentID, tag, _ := strings.Cut(k, "\x00")
		f, again := r.request(ctx, agentID, tag, idx, status, &windows)
		failures = append(failures, f...)
		retry = retry || again
	}
	if len(failures) > 0 {
		return r.failed(ctx, status, failures), nil
	}

	pending := 0
	var keys []string
	goneWait := time.Duration(0)
	for i := range m.Apps {
		if a := &m.Apps[i]; a.State != appDone {
			pending++
			keys = append(keys, agent.StatusKey(a.Agent, a.App))
			if !a.GoneSince.IsZero() {
				// A new app of its ApplicationSet changes the agent's inventory.
				keys = append(keys, agent.InventoryKey(a.Agent))
				left := max(a.GoneSince.Add(syncGoneGrace).Sub(r.now), 0) + time.Second
				if goneWait == 0 || left < goneWait {
					goneWait = left
				}
			}
		}
	}
	if pending == 0 {
		res := Done(map[string]any{"applications": r.outputs(ctx, status)})
		res.Message = r.skippedSummary()
		return res, nil
	}
	if final {
		return r.timedOut(ctx, status), nil
	}
	// Wakes come from the apps' records changing; a change that lands between this run's
	// last read and the controller indexing the park wakes it too (the controller remembers
	// when keys changed). Only a sync request to retry needs a poll: short right after
	// something moved, doubling while nothing does.
	if m.fingerprint() != before {
		m.Quiet = 0
	} else {
		m.Quiet = min(m.Quiet+1, 8)
	}
	poll := syncPollSafetyNet
	if retry {
		poll = max(min(syncRetryMax, syncFirstPoll<<m.Quiet), syncRetryPoll)
	}
	for _, a := range m.Apps {
		if !a.DegradedSince.IsZero() && r.cfg.DegradedStateTimeout > 0 {
			poll = min(poll, max(time.Until(a.DegradedSince.Add(r.cfg.DegradedStateTimeout)), time.Second))
		}
		if !a.Comparing.IsZero() && a.State == appTodo {
			// The comparison may never come: look again when the wait for it is over.
			poll = min(poll, max(time.Until(a.Comparing.Add(syncDriftGrace)), 0)+time.Second)
		}
		if !a.DriftSince.IsZero() && a.State != appDone {
			// An app OutOfSync after our sync is synced again once the grace is over: no
			// record change comes to say so.
			poll = min(poll, max(time.Until(a.DriftSince.Add(syncDriftGrace)), 0)+time.Second)
		}
	}
	reason := fmt.Sprintf("waiting for %d of %d application(s): %s", pending, len(m.Apps), r.waitingSummary())
	if windows.n > 0 {
		// Look again when the first window opens, in case its record change is missed.
		wp := syncWindowPoll
		if !windows.first.IsZero() {
			wp = max(min(wp, time.Until(windows.first)+time.Second), time.Second)
		}
		if windows.n == pending {
			poll, reason = wp, windows.describe(m)
		} else {
			poll = min(poll, wp)
		}
	}
	if n := r.unavailableApps(); n > 0 {
		// Argo CD coming back changes no record: ask again soon, not on the quiet backoff.
		poll = min(poll, syncRetryPoll)
		reason = fmt.Sprintf("Argo CD cannot sync %d application(s) right now (retrying until the step's deadline; no rollback on it): ", n) + reason
	}
	if goneWait > 0 {
		poll = min(poll, goneWait)
	}
	if out.any() {
		// Recovery may change no record (only the registration): look again soon.
		poll = min(poll, outagePoll, max(time.Until(m.OutageSince.Add(r.cfg.outageTimeout())), time.Second))
		reason = "waiting: " + out.describe() + "; " + reason
	}
	return Park(Wait{Keys: keys, Poll: poll, Deadline: m.Deadline, Reason: reason}, m), nil
}

// windowsOf is the record's sync windows (nil for no record).
func windowsOf(st *agent.AppStatus) *agent.SyncWindows {
	if st == nil {
		return nil
	}
	return st.SyncWindows
}

// windowWait collects the apps a sync window holds back on this run.
type windowWait struct {
	n     int
	first time.Time // the earliest known end of a block (zero: none known)
	last  time.Time
}

func (w *windowWait) add(until time.Time) {
	w.n++
	if until.IsZero() {
		return
	}
	if w.first.IsZero() || until.Before(w.first) {
		w.first = until
	}
	if until.After(w.last) {
		w.last = until
	}
}

// describe is the park reason when every pending app is held by a window: "blocked by sync
// window until T" with T when the last of them opens, and the apps.
func (w *windowWait) describe(m *syncMemo) string {
	var apps []string
	for _, a := range m.Apps {
		if a.State != appDone {
			apps = append(apps, a.App)
		}
	}
	if len(apps) > 5 {
		apps = append(apps[:5], "…")
	}
	if w.last.IsZero() || len(apps) == 1 {
		for _, a := range m.Apps {
			if a.State != appDone {
				return a.Waiting + " (" + strings.Join(apps, ", ") + ")"
			}
		}
	}
	return "blocked by sync window until " + w.last.UTC().Format(time.RFC3339) + " (" + strings.Join(apps, ", ") + ")"
}

// fingerprint summarises the apps' progress, to tell a wake that changed something.
func (m *syncMemo) fingerprint() string {
	var b strings.Builder
	for _, a := range m.Apps {
		b.WriteString(a.State + "|" + a.Waiting + "|" + a.Revision + "|" + a.Superseded + "\n")
	}
	return b.String()
}

// request asks one agent to sync apps idx. It returns failure messages and whether some apps
// must be asked again soon (agent offline, busy app).
func (r *syncRun) request(ctx context.Context, agentID, tag string, idx []int, status []*agent.AppStatus, windows *windowWait) ([]string, bool) {
	m := r.m
	refresh := agent.RefreshNone
	refs := make([]string, len(idx))
	for j, i := range idx {
		refs[j] = m.Apps[i].App
		// A commit merged a moment ago may not be what Argo CD resolves the branch to yet:
		// have it re-read git before syncing.
		if m.Expected != "" && (status[i] == nil || status[i].Revision != m.Expected) {
			refresh = agent.RefreshHard
		}
	}
	req := agent.SyncRequest{Apps: refs, RunID: r.sc.RunID, Step: tag, Prune: r.cfg.Prune, DryRun: r.cfg.DryRun,
		ApplyOnly: r.cfg.ApplyOnly, ForceApply: r.cfg.ForceApply, SyncOptions: r.cfg.SyncOptions, Retry: r.cfg.RetryStrategy.RetryStrategy, Refresh: refresh,
		Manual: r.cfg.override()}
	rep, err := r.g.Sync(ctx, agentID, req)
	if err != nil {
		// A refused token is an agent outage too (its view goes stale and the next run parks
		// on it), not a reason to fail and roll back.
		if agent.Transient(err) || errors.Is(err, agent.ErrUnauthorized) || errors.Is(err, context.DeadlineExceeded) {
			for _, i := range idx {
				m.Apps[i].Tries++
				m.Apps[i].Waiting = "could not ask the agent yet: " + err.Error()
				if cannotWork(err) {
					m.Apps[i].Unavailable = err.Error()
				}
			}
			r.sc.Log.Warn("sync request failed; will retry", "agent", agentID, "err", err)
			return nil, true
		}
		return []string{fmt.Sprintf("sync request to agent %s: %v", agentID, err)}, false
	}
	var failures []string
	retry := false
	for j, i := range idx {
		a := &m.Apps[i]
		if j >= len(rep.Results) {
			failures = append(failures, fmt.Sprintf("%s (agent %s): the agent did not answer for this app", a.App, agentID))
			continue
		}
		res := rep.Results[j]
		switch {
		case res.Error == nil:
			a.State, a.Waiting, a.Unavailable = appSyncing, "sync requested", ""
			a.Requested = res.At
			if a.Requested.IsZero() {
				a.Requested = r.now
			}
			a.UID = res.UID
			if a.UID == "" && status[i] != nil {
				a.UID = status[i].UID
			}
			a.Revision = firstNonEmptyStr(m.Expected, res.Revision)
			r.sc.Log.Info("sync started", "app", a.App, "agent", agentID, "revision", res.Revision, "alreadyRunning", res.AlreadyRunning)
		case errors.Is(res.Error, agent.ErrOperationInProgress):
			a.Waiting, a.Unavailable = "waiting for another operation to finish: "+res.Error.Message, ""
			retry = true
		case errors.Is(res.Error, agent.ErrNotFound) && r.sc.Rollback:
			// Deleted since (or Argo CD's 403 for a missing app): nothing to roll back there.
			r.skip(a, "no longer exists in Argo CD ("+res.Error.Message+")")
		case errors.Is(res.Error, agent.ErrSyncWindow) && !r.cfg.override():
			// The record did not show the window yet (the agent reads windows shortly
			// after it first sees an app): park like for a window it shows.
			a.Waiting = res.Error.Message
			until := time.Time{}
			if w := windowsOf(status[i]); w != nil {
				until = w.Until
			}
			windows.add(until)
		case cannotWork(res.Error):
			// Argo CD cannot work right now (repo-server or redis down, a 5xx): no verdict on
			// the change. Ask again until the step's deadline; never roll back on it.
			a.Tries++
			a.Unavailable = res.Error.Message
			a.Waiting = "Argo CD cannot sync right now, retrying until the step's deadline: " + res.Error.Message
			retry = true
		case agent.Transient(res.Error) || errors.Is(res.Error, agent.ErrUnauthorized):
			a.Tries++
			a.Waiting = "could not sync yet: " + res.Error.Error()
			retry = true
		default:
			failures = append(failures, fmt.Sprintf("%s (agent %s): %s", a.App, agentID, res.Error.Message))
		}
	}
	return failures, retry
}

// evaluate moves a syncing app on from what its status record says.
func (r *syncRun) evaluate(a *syncApp, st *agent.AppStatus) verdict {
	if st == nil {
		a.Waiting = "no status record (is the agent's leader running?)"
		return verdict{}
	}
	op := st.Operation
	ours := op.Tagged(r.sc.RunID, r.appTag(a))
	if !ours {
		switch {
		case op == nil || (!op.StartedAt.IsZero() && op.StartedAt.Before(a.Requested.Truncate(time.Second)) && a.Superseded == ""):
			a.Waiting = "waiting for the agent to report the sync"
			return verdict{}
		case !op.Finished():
			// Ours ended and another operation started; judge the app once that one ends.
			a.Superseded = who(op)
			a.Waiting = fmt.Sprintf("our sync was followed by an operation of %s (phase %s)", who(op), op.Phase)
			return verdict{}
		}
		a.Superseded = who(op)
	} else {
		a.Superseded = ""
		switch op.Phase {
		case agent.PhasePending, agent.PhaseRunning, agent.PhaseTerminating:
			a.Waiting = "sync " + strings.ToLower(op.Phase)
			if op.Message != "" {
				a.Waiting += ": " + op.Message
			}
			return verdict{}
		case agent.PhaseFailed, agent.PhaseError:
			return verdict{fail: fmt.Sprintf("sync %s: %s", op.Phase, orDefault(op.Message, "no message from Argo CD"))}
		}
		if a.Revision == "" {
			a.Revision = op.Revision
		}
		// Succeeded: on the revision we want?
		if a.Revision != "" && op.SyncedRevision != "" && !r.rev.has(st, a.Revision, op.SyncedRevision) {
			if a.Resyncs >= syncMaxResyncs {
				return verdict{fail: fmt.Sprintf("synced revision %s, expected %s (after %d re-syncs with a hard refresh)%s", op.SyncedRevision, a.Revision, a.Resyncs,
					r.rev.why(st, a.Revision, op.SyncedRevision))}
			}
			r.sc.Log.Warn("sync finished on the wrong revision; syncing again after a hard refresh", "app", a.App,
				"synced", op.SyncedRevision, "expected", a.Revision)
			a.Resyncs++
			a.State, a.Waiting = appTodo, fmt.Sprintf("synced %s, expected %s: syncing again", short(op.SyncedRevision), short(a.Revision))
			return verdict{}
		}
		if op.DryRun || r.cfg.DryRun {
			a.State, a.Waiting = appDone, ""
			return verdict{}
		}
	}
	// The phase turns Succeeded before sync status and health are updated: wait for them at
	// the wanted revision. Without prune, resources removed from git stay behind and keep the
	// app OutOfSync; that alone does not hold the step.
	leftovers := st.Sync == agent.SyncOutOfSync && !r.cfg.Prune && st.Resources.OutOfSync > 0 &&
		st.Resources.OutOfSync == st.Resources.RequiresPruning
	if leftovers && a.Note == "" {
		a.Note = fmt.Sprintf("%d resource(s) removed from git are still live (prune: false)", st.Resources.RequiresPruning)
		r.sc.Log.Warn("app is OutOfSync only by resources awaiting pruning", "app", a.App, "resources", st.Resources.RequiresPruning)
	}
	hasRev := r.rev.has(st, a.Revision, st.Revision)
	onlyPruning := st.Resources.OutOfSync > 0 && st.Resources.OutOfSync == st.Resources.RequiresPruning
	if ours && hasRev && st.Sync == agent.SyncOutOfSync && !leftovers && !onlyPruning {
		// Our sync finished at a revision with our change, yet the app is OutOfSync there:
		// its desired state changed after the sync (on Argo CD, typically its ApplicationSet
		// re-rendered it from the merged config later than the sync), so the sync deployed a
		// stale spec and nobody will sync the new one. Allow Argo CD a moment to compare
		// (the phase turns Succeeded before the sync status does), then sync again.
		if a.DriftSince.IsZero() {
			a.DriftSince = r.now
		}
		if r.now.Sub(a.DriftSince) < syncDriftGrace {
			a.Waiting = fmt.Sprintf("sync finished; app is OutOfSync at %s, waiting for Synced at %s", short(st.Revision), short(a.Revision))
			return verdict{}
		}
		if a.Resyncs >= syncMaxResyncs {
			return verdict{fail: fmt.Sprintf("app stays OutOfSync at %s after our sync finished there (after %d re-syncs): its desired state keeps changing", short(st.Revision), a.Resyncs)}
		}
		r.sc.Log.Warn("app went OutOfSync after our sync finished at a revision with our change; syncing again", "app", a.App, "revision", st.Revision)
		a.Resyncs++
		a.DriftSince = time.Time{}
		a.State, a.Waiting = appTodo, fmt.Sprintf("OutOfSync at %s after our sync (its desired state changed): syncing again", short(st.Revision))
		return verdict{}
	} else {
		a.DriftSince = time.Time{}
	}
	if (st.Sync != agent.SyncSynced && !leftovers) || !hasRev {
		a.Waiting = fmt.Sprintf("sync finished; app is %s at %s", orDefault(st.Sync, "Unknown"), short(st.Revision))
		if a.Revision != "" {
			a.Waiting += ", waiting for Synced at " + short(a.Revision)
			if r.rev.enabled() && !pinned(st) {
				a.Waiting += " or a commit that contains it"
			}
			if !hasRev { // only then is the revision the reason
				a.Waiting += r.rev.why(st, a.Revision, st.Revision)
			}
		}
		return verdict{}
	}
	a.Deployed = firstNonEmptyStr(st.Revision, a.Revision)
	if !r.cfg.WaitTillHealthy {
		a.State, a.Waiting = appDone, ""
		return verdict{}
	}
	switch st.Health {
	case agent.HealthHealthy:
		a.State, a.Waiting, a.DegradedSince = appDone, "", time.Time{}
	case agent.HealthDegraded:
		if a.DegradedSince.IsZero() {
			a.DegradedSince = r.now
		}
		a.Waiting = "Degraded: " + st.HealthMessage
		if r.cfg.DegradedStateTimeout > 0 && r.now.Sub(a.DegradedSince) >= r.cfg.DegradedStateTimeout {
			return verdict{fail: fmt.Sprintf("Degraded for longer than degradedStateTimeout %s: %s", r.cfg.DegradedStateTimeout, orDefault(st.HealthMessage, "no message"))}
		}
	default:
		a.DegradedSince = time.Time{}
		a.Waiting = "health " + orDefault(st.Health, "Unknown")
		if st.HealthMessage != "" {
			a.Waiting += ": " + st.HealthMessage
		}
	}
	return verdict{}
}

// timedOut is the verdict at the step's deadline. As Harness documents: a sync still running
// fails the step; a finished sync whose app is not healthy fails only with failOnTimeout.
func (r *syncRun) timedOut(ctx context.Context, status []*agent.AppStatus) Result {
	if res, ok := r.unavailableAtDeadline(ctx, status); ok {
		return res
	}
	var running, unhealthy []string
	for i, a := range r.m.Apps {
		if a.State == appDone {
			continue
		}
		synced := a.State == appSyncing && status[i] != nil && status[i].Sync == agent.SyncSynced &&
			r.rev.has(status[i], a.Revision, status[i].Revision) && status[i].Operation != nil &&
			status[i].Operation.Phase == agent.PhaseSucceeded
		desc := fmt.Sprintf("%s (agent %s): %s", a.App, a.Agent, orDefault(a.Waiting, "not synced"))
		if synced && r.cfg.WaitTillHealthy {
			unhealthy = append(unhealthy, desc)
		} else {
			running = append(running, desc)
		}
	}
	if len(running) > 0 {
		return r.failed(ctx, status, []string{"timed out with the sync not finished for " + strings.Join(running, "; ")})
	}
	if r.cfg.FailOnTimeout {
		return r.failed(ctx, status, []string{"timed out waiting for Healthy (failOnTimeout): " + strings.Join(unhealthy, "; ")})
	}
	r.sc.Log.Warn("synced, but not healthy before the timeout; succeeding because failOnTimeout is false", "apps", strings.Join(unhealthy, "; "))
	return Done(map[string]any{"applications": r.outputs(ctx, status)})
}

// blind fails the step without rollback: the agents could not see Argo CD for too long.
func (r *syncRun) blind(ctx context.Context, status []*agent.AppStatus, out *outage, final bool) Result {
	res := FailBlind(out.blindMessage("GitOps sync could not be judged", r.m.OutageSince, r.cfg.outageTimeout(), final, r.now))
	res.Outputs = map[string]any{"applications": r.outputs(ctx, status)}
	return res
}

func (r *syncRun) failed(ctx context.Context, status []*agent.AppStatus, failures []string) Result {
	res := Fail("GitOps sync failed: " + strings.Join(failures, "; "))
	res.Outputs = map[string]any{"applications": r.outputs(ctx, status)}
	return res
}

func (r *syncRun) waitingSummary() string {
	var parts []string
	for _, a := range r.m.Apps {
		if a.State == appDone {
			continue
		}
		parts = append(parts, a.App+": "+orDefault(a.Waiting, a.State))
		if len(parts) == 5 {
			parts = append(parts, "…")
			break
		}
	}
	return strings.Join(parts, "; ")
}

// outputs is the `applications` output: every app's final state (apps finished on earlier
// wakes are read again).
func (r *syncRun) outputs(ctx context.Context, status []*agent.AppStatus) []any {
	out := make([]any, 0, len(r.m.Apps))
	for i, a := range r.m.Apps {
		if status[i] == nil {
			status[i], _ = r.g.Status(ctx, a.Agent, a.App)
		}
		o := map[string]any{"name": a.App, "agent": a.Agent, "state": a.State, "expectedRevision": a.Revision}
		if a.Skipped != "" {
			o["state"], o["skipped"] = "skipped", a.Skipped
		}
		if a.Waiting != "" {
			o["waiting"] = a.Waiting
		}
		if a.Superseded != "" {
			o["supersededBy"] = a.Superseded
		}
		if a.Note != "" {
			o["note"] = a.Note
		}
		r.revisionOutputs(o, &r.m.Apps[i])
		if st := status[i]; st != nil {
			o["sync"], o["health"], o["revision"] = st.Sync, st.Health, st.Revision
			o["cluster"], o["namespace"], o["url"] = st.Cluster, st.Namespace, st.URL
			if st.HealthMessage != "" {
				o["healthMessage"] = st.HealthMessage
			}
			if !st.ConfirmedAt.IsZero() {
				o["confirmedAt"] = st.ConfirmedAt.UTC().Format(time.RFC3339)
			}
			if st.Stale != nil {
				o["stale"] = fmt.Sprintf("since %s: %s", st.Stale.Since.UTC().Format(time.RFC3339), st.Stale.Reason)
			}
			if op := st.Operation; op != nil {
				o["phase"], o["syncedRevision"] = op.Phase, op.SyncedRevision
				if op.Message != "" {
					o["message"] = op.Message
				}
				if !op.StartedAt.IsZero() {
					o["startedAt"] = op.StartedAt.UTC().Format(time.RFC3339)
				}
				if !op.FinishedAt.IsZero() {
					o["finishedAt"] = op.FinishedAt.UTC().Format(time.RFC3339)
				}
			}
		}
		out = append(out, o)
	}
	return out
}

func who(op *agent.Operation) string {
	switch {
	case op == nil:
		return "someone"
	case op.RunID != "":
		return "prflow run " + op.RunID
	case op.Automated:
		return "automated sync"
	case op.InitiatedBy != "":
		return op.InitiatedBy
	}
	return "someone"
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	if sha == "" {
		return "(none)"
	}
	return sha
}

func firstTime(v ...time.Time) time.Time {
	for _, t := range v {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

func firstNonEmptyStr(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
