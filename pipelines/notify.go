package pipelines

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
	"github.com/prflow/prflow/yamlconf"
)

// NotifyRule is one entry of a pipeline's `notifications:` list: on which events a message goes
// to which channel. Channels are configured on workers (their URLs and passwords are secrets
// the controller never holds); a rule only names one.
type NotifyRule struct {
	On      []string // events (NotifyEvents)
	Stages  []string // only these stages' stage events (empty: every stage)
	Channel string   // a channel name of the workers' notifiers file
	Line    int
}

// Notification events.
const (
	EvRunStarted      = "run.started"
	EvRunSucceeded    = "run.succeeded"
	EvRunFailed       = "run.failed"
	EvRunCancelled    = "run.cancelled"
	EvStageStarted    = "stage.started"
	EvStageSucceeded  = "stage.succeeded"
	EvStageFailed     = "stage.failed"
	EvApprovalWaiting = "approval.waiting"
	EvRollbackStarted = "rollback.started"
	// EvInterventionWaiting: a stage waits for a person's decision (manual failure strategy);
	// EvInterventionDecided: a person or the timeout decided.
	EvInterventionWaiting = "intervention.waiting"
	EvInterventionDecided = "intervention.decided"
)

// NotifyEvents are the events a rule may name, in the order they are documented.
var NotifyEvents = []string{EvRunStarted, EvRunSucceeded, EvRunFailed, EvRunCancelled,
	EvStageStarted, EvStageSucceeded, EvStageFailed, EvApprovalWaiting, EvRollbackStarted,
	EvInterventionWaiting, EvInterventionDecided}

// NotifyStage is where notification jobs go: no pipeline stage can have this id (ids start
// with a letter), so their Nats-Msg-Ids never collide with a step's.
const NotifyStage = "_notify"

// notifyDoc is one entry of notifications: as written.
type notifyDoc struct {
	On      yamlconf.Strings `want:"a list of strings"`
	Stages  yamlconf.Strings `want:"a list of stage ids"`
	Channel string
}

func (l *loader) notifications(docs []notifyDoc) []*NotifyRule {
	var out []*NotifyRule
	for i, nd := range docs {
		path := fmt.Sprintf("notifications[%d]", i)
		n := l.node(path)
		r := &NotifyRule{Line: n.Line, Channel: nd.Channel, Stages: nd.Stages}
		switch {
		case !l.d.Has(path + ".channel"):
			if !l.d.Bad(path) {
				l.errf(n, path+".channel", "required: the name of a channel configured on the workers (--notifiers)")
			}
		case r.Channel != "" && !idRE.MatchString(r.Channel):
			l.errf(l.node(path+".channel"), path+".channel", "%q: use letters, digits, - and _ (start with a letter, ≤ 63 chars)", r.Channel)
		}
		op := path + ".on"
		on := l.d.Node(op)
		if on == nil && !l.d.Bad(path) {
			l.errf(n, op, "required: one or more of %s", strings.Join(NotifyEvents, ", "))
		}
		for j, ev := range nd.On {
			ep := yamlconf.Index(op, j)
			node := l.node(ep)
			if !slices.Contains(NotifyEvents, ev) {
				hint := ""
				if s := suggest(ev, NotifyEvents); s != "" {
					hint = fmt.Sprintf(" (did you mean %q?)", s)
				}
				l.errf(node, ep, "unknown event %q%s; known events: %s", ev, hint, strings.Join(NotifyEvents, ", "))
				continue
			}
			if slices.Contains(r.On, ev) {
				l.errf(node, ep, "event %q is listed twice", ev)
				continue
			}
			r.On = append(r.On, ev)
		}
		if on != nil && on.Kind == yaml.SequenceNode && len(on.Content) == 0 {
			l.errf(on, op, "empty: name one or more of %s", strings.Join(NotifyEvents, ", "))
		}
		out = append(out, r)
	}
	return out
}

// checkNotifyStages reports rule stage filters that name no stage of p (a typo would
// otherwise silence the rule for ever).
func (l *loader) checkNotifyStages(p *Pipeline) {
	var ids []string
	for _, s := range p.Stages {
		ids = append(ids, s.ID)
	}
	for i, r := range p.Notifications {
		for j, s := range r.Stages {
			if slices.Contains(ids, s) {
				continue
			}
			path := yamlconf.Index(fmt.Sprintf("notifications[%d].stages", i), j)
			hint := ""
			if sg := suggest(s, ids); sg != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", sg)
			}
			l.errf(l.node(path), path, "no stage %q%s; stages: %s", s, hint, strings.Join(ids, ", "))
		}
	}
}

// NotifyChannels lists the channels p's rules name, in order of first use.
func (p *Pipeline) NotifyChannels() []string {
	var out []string
	for _, r := range p.Notifications {
		if r.Channel != "" && !slices.Contains(out, r.Channel) {
			out = append(out, r.Channel)
		}
	}
	return out
}

// NotifySnapshot is what notifications compare before and after an event. The zero value
// (nil maps) means "nothing happened yet": comparing it with a run yields every event the
// run's state shows, which a controller republishes after a crash (Nats-Msg-Ids and the
// workers' sent marks drop the ones already out).
type NotifySnapshot struct {
	run         Status
	rollingBack bool
	stages      map[string]StageRun
	approvals   map[string]Status // stage/step → status of Approval steps
	// interventions: stage → decided interventions, plus one while one waits.
	interventions map[string]int
}

// NotifySnapshot records r's state for NotifyJobs; nil when the pipeline has no rules.
func (m *Machine) NotifySnapshot(r *Run) *NotifySnapshot {
	if len(m.P.Notifications) == 0 {
		return nil
	}
	s := &NotifySnapshot{run: r.Status, rollingBack: r.RollingBack, stages: map[string]StageRun{}, approvals: map[string]Status{}, interventions: map[string]int{}}
	for _, sr := range r.Stages {
		s.stages[sr.ID] = StageRun{Status: sr.Status, RollingBack: sr.RollingBack}
		s.interventions[sr.ID] = interventionCount(sr)
		for _, st := range sr.Steps {
			if isApproval(st.Type) {
				s.approvals[sr.ID+"/"+st.ID] = st.Status
			}
		}
	}
	return s
}

func isApproval(t string) bool { return t == "Approval" || t == "HarnessApproval" }

// notifyEvent is one thing that happened to a run.
type notifyEvent struct {
	event, stage, step, status, message string
	at                                  time.Time // when it happened, when the state says (else zero)
}

// NotifyJobs returns one Notify job per rule and event that happened between before and r.
// before == nil with rules means the zero snapshot (every event r's state shows). runURL is
// the link to the run's page. Each job's Nats-Msg-Id (run/_notify/<event>:<stage>:<channel>/1/0)
// is the same whenever the same event is seen again, so it goes out once.
func (m *Machine) NotifyJobs(before *NotifySnapshot, r *Run, runURL string) []*envelope.Job {
	return m.notifyJobs(before, r, runURL, time.Time{})
}

// NotifyJobsSince is NotifyJobs from nothing (every event r's state shows) for the events that
// happened at or after since, or whose time the state does not hold: what a controller
// republishes after a redelivery or a restart. Older events went out long ago, and their sent
// marks may have expired (queue.NotifyMarkAge): a run parked for days must not announce its
// start again.
func (m *Machine) NotifyJobsSince(r *Run, runURL string, since time.Time) []*envelope.Job {
	return m.notifyJobs(nil, r, runURL, since)
}

func (m *Machine) notifyJobs(before *NotifySnapshot, r *Run, runURL string, since time.Time) []*envelope.Job {
	if len(m.P.Notifications) == 0 {
		return nil
	}
	if before == nil {
		before = &NotifySnapshot{}
	}
	var evs []notifyEvent
	if before.run == "" || before.run == StPending {
		if r.Status != StPending {
			evs = append(evs, notifyEvent{event: EvRunStarted, status: string(StRunning), at: r.Started})
		}
	}
	for _, sr := range r.Stages {
		was := before.stages[sr.ID]
		if was.Status == "" {
			was.Status = StPending
		}
		if !sr.Started.IsZero() && (was.Status == StPending || was.Status == StQueued) && sr.Status != StSkipped && sr.Status != StNotRun {
			evs = append(evs, notifyEvent{event: EvStageStarted, stage: sr.ID, status: string(StRunning), at: sr.Started})
		}
		if sr.RollingBack && !was.RollingBack {
			evs = append(evs, notifyEvent{event: EvRollbackStarted, stage: sr.ID, status: string(sr.Status), message: sr.Error})
		}
		if sr.Status != was.Status {
			switch sr.Status {
			case StSucceeded:
				evs = append(evs, notifyEvent{event: EvStageSucceeded, stage: sr.ID, status: string(sr.Status), at: sr.Ended})
			case StFailed:
				evs = append(evs, notifyEvent{event: EvStageFailed, stage: sr.ID, status: string(sr.Status), message: sr.Error, at: sr.Ended})
			}
		}
		evs = append(evs, interventionEvents(sr, before.interventions[sr.ID])...)
		for _, st := range sr.Steps {
			// The first park only: a woken approval (a signal that did not settle it) parks again.
			if !isApproval(st.Type) || st.Status != StWaiting || st.Wake > 0 {
				continue
			}
			if before.approvals[sr.ID+"/"+st.ID] == StWaiting {
				continue
			}
			msg := ""
			if st.Wait != nil {
				msg = st.Wait.Reason
			}
			evs = append(evs, notifyEvent{event: EvApprovalWaiting, stage: sr.ID, step: st.ID, status: string(st.Status), message: msg, at: st.WaitSince})
		}
	}
	if r.RollingBack && !before.rollingBack {
		evs = append(evs, notifyEvent{event: EvRollbackStarted, status: string(r.Status), message: r.Error})
	}
	if r.Status.Terminal() && !before.run.Terminal() {
		switch r.Status {
		case StSucceeded:
			evs = append(evs, notifyEvent{event: EvRunSucceeded, status: string(r.Status), at: r.Ended})
		case StFailed:
			evs = append(evs, notifyEvent{event: EvRunFailed, status: string(r.Status), message: r.Error, at: r.Ended})
		case StCancelled:
			evs = append(evs, notifyEvent{event: EvRunCancelled, status: string(r.Status), message: r.Error, at: r.Ended})
		}
	}
	var jobs []*envelope.Job
	for _, ev := range evs {
		if !since.IsZero() && !ev.at.IsZero() && ev.at.Before(since) {
			continue
		}
		for _, rule := range m.P.Notifications {
			if !rule.matches(ev) {
				continue
			}
			jobs = append(jobs, m.notifyJob(r, ev, rule.Channel, runURL))
		}
	}
	return jobs
}

// matches reports whether rule sends ev. The stage filter applies to events of a stage; run
// events (and a pipeline rollback) always pass it.
func (rule *NotifyRule) matches(ev notifyEvent) bool {
	if !slices.Contains(rule.On, ev.event) {
		return false
	}
	return ev.stage == "" || len(rule.Stages) == 0 || slices.Contains(rule.Stages, ev.stage)
}

// NotifyStep is the step name of a notification job: event, stage (and step) or "-", channel.
// Stage and step ids start with a letter, so "-" cannot be one.
func NotifyStep(event, stage, step, channel string) string {
	where := "-"
	if stage != "" {
		where = stage
		if step != "" {
			where += "." + step
		}
	}
	return event + ":" + where + ":" + channel
}

// ParseNotifyStep splits a NotifyStep name.
func ParseNotifyStep(s string) (event, where, channel string, ok bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

func (m *Machine) notifyJob(r *Run, ev notifyEvent, channel, runURL string) *envelope.Job {
	in := map[string]any{"channel": channel, "event": ev.event, "status": ev.status, "url": runURL}
	if ev.stage != "" {
		in["stage"] = ev.stage
	}
	if ev.step != "" {
		in["step"] = ev.step
	}
	if ev.message != "" {
		in["message"] = clipText(ev.message, 1000)
	}
	return &envelope.Job{V: envelope.Version, Run: r.ID, Pipeline: r.Pipeline, Stage: NotifyStage,
		Step: NotifyStep(ev.event, ev.stage, ev.step, channel), Type: steps.TypeNotify, Pool: DefaultPool,
		Attempt: 1, Executor: r.Executor, Connectors: []string{steps.NotifyRoute(channel)}, Inputs: in}
}

// applyNotify takes a notification job's result: a failure (the worker gave up, or the job
// ran out of deliveries) becomes a warning on the run, which is never failed by it. The run
// may have ended already (run.succeeded goes out after the end); a repeated result adds
// nothing.
func (m *Machine) applyNotify(r *Run, ev *envelope.Event) bool {
	if ev.Kind != queue.EvResult && ev.Kind != queue.EvDead {
		return false
	}
	msg := ev.Reason
	if ev.Kind == queue.EvResult {
		if ev.Result == nil || ev.Result.Status == steps.Succeeded {
			return false
		}
		msg = orDefault(ev.Result.Message, "failed")
	}
	event, where, channel, ok := ParseNotifyStep(ev.Step)
	if !ok {
		return false
	}
	what := event
	if where != "-" {
		what += " of " + where
	}
	w := fmt.Sprintf("notification %s to channel %s not sent: %s", what, channel, clipText(msg, 300))
	if slices.Contains(r.Warnings, w) {
		return false
	}
	r.Warnings = append(r.Warnings, w)
	return true
}

// clipText shortens s to at most n bytes on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

func interventionCount(sr *StageRun) int {
	n := 2 * len(sr.Interventions)
	if sr.Intervention != nil {
		n++
	}
	return n
}

// interventionEvents are the intervention events of sr since the snapshot's count (twice the
// decided ones, plus one while one waits). The n-th intervention of a stage after the first
// names its step "STEP.n", so that each one's notification goes out (Nats-Msg-Id).
func interventionEvents(sr *StageRun, was int) []notifyEvent {
	var evs []notifyEvent
	name := func(i int, step string) string {
		if i == 0 {
			return step
		}
		return fmt.Sprintf("%s.%d", step, i+1)
	}
	for i, iv := range sr.Interventions {
		if 2*i >= was {
			evs = append(evs, notifyEvent{event: EvInterventionWaiting, stage: sr.ID, step: name(i, iv.Step), status: string(StWaiting), message: iv.Error, at: iv.Since})
		}
		if 2*i+1 >= was {
			evs = append(evs, notifyEvent{event: EvInterventionDecided, stage: sr.ID, step: name(i, iv.Step), status: iv.Action, message: iv.Outcome, at: iv.Decided})
		}
	}
	if iv := sr.Intervention; iv != nil && 2*len(sr.Interventions) >= was {
		evs = append(evs, notifyEvent{event: EvInterventionWaiting, stage: sr.ID, step: name(len(sr.Interventions), iv.Step), status: string(StWaiting),
			message: fmt.Sprintf("step %s failed: %s; decide by %s (then %s)", iv.Step, iv.Error, iv.Deadline.UTC().Format(time.RFC3339), iv.OnTimeout), at: iv.Since})
	}
	return evs
}
