package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
)

// SCMConsumer is the durable consumer controllers share on PRFLOW_SCM.
const SCMConsumer = "controller-scm"

// TriggerSet is the pipelines a server starts on webhooks (--pipelines DIR).
type TriggerSet struct {
	Pipelines []*pipelines.Pipeline
	// All is every pipeline the directory holds, with triggers or not: what the catalog offers
	// to start by name (catalog.go). Nil: Pipelines.
	All []*pipelines.Pipeline
}

// LoadTriggerDir loads every *.yaml / *.yml file of dir and keeps those with triggers. Any file
// that does not load is an error (all problems are reported, with file:line:field).
func LoadTriggerDir(dir string, reg *steps.Registry) (*TriggerSet, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pipelines dir: %w", err)
	}
	ts := &TriggerSet{}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		p, err := pipelines.LoadFile(filepath.Join(dir, e.Name()), reg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ts.All = append(ts.All, p)
		if len(p.Triggers) > 0 {
			ts.Pipelines = append(ts.Pipelines, p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(ts.Pipelines, func(i, j int) bool { return ts.Pipelines[i].File < ts.Pipelines[j].File })
	sort.Slice(ts.All, func(i, j int) bool { return ts.All[i].File < ts.All[j].File })
	return ts, nil
}

// NewTriggerSet loads pipeline sources (file name → YAML) in code; tests and `prflow dev` use it.
func NewTriggerSet(reg *steps.Registry, files map[string][]byte) (*TriggerSet, error) {
	ts := &TriggerSet{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p, err := pipelines.Load(n, files[n], reg)
		if err != nil {
			return nil, err
		}
		if len(p.Triggers) == 0 {
			return nil, fmt.Errorf("%s: no triggers", n)
		}
		ts.Pipelines = append(ts.Pipelines, p)
	}
	return ts, nil
}

// SetTriggers replaces the pipelines started by webhooks (nil: none).
func (c *Controller) SetTriggers(ts *TriggerSet) {
	c.triggers.Store(ts)
	c.envs.Nudge() // their environments are listed even before a run
}

func (c *Controller) scmConsumer(ctx context.Context) (jetstream.Consumer, error) {
	return c.conn.JS.CreateOrUpdateConsumer(ctx, queue.StreamSCM, jetstream.ConsumerConfig{
		Durable: SCMConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxDeliver: 20, DeliverPolicy: jetstream.DeliverNewPolicy, FilterSubject: "prflow.scm.>",
		Description: "prflow controllers: webhook triggers and PR wakes",
	})
}

// consumeSCM applies normalised webhook events: it wakes the steps parked on them and starts
// the runs whose triggers match.
func (c *Controller) consumeSCM(ctx context.Context, cons jetstream.Consumer) {
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		var ev scm.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Provider == "" || ev.DeliveryID == "" {
			c.log.Error("dropping bad SCM event", "subject", msg.Subject(), "err", err)
			_ = msg.Term()
			return
		}
		if err := c.handleSCMEvent(ctx, &ev, msg.Headers().Get(hookRemoteHeader)); err != nil {
			c.log.Warn("SCM event failed, will retry", "provider", ev.Provider, "delivery", ev.DeliveryID, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.Ack()
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if ctx.Err() == nil {
			c.log.Warn("SCM consumer", "err", err)
		}
	}))
	if err != nil {
		c.log.Error("consume SCM events", "err", err)
		return
	}
	<-ctx.Done()
	queue.DrainConsumer(cc, c.conn.NC)
}

// PRTopic is the wake topic of a PR's events (as steps park on it): pr:<provider>:<repo>#<n>.
func PRTopic(provider string, repo scm.Repo, n int) string {
	return fmt.Sprintf("pr:%s:%s#%d", provider, repo, n)
}

// HandleSCMEvent wakes parked steps and starts triggered runs for one event. It is idempotent:
// runs get ids derived from the delivery id, so a redelivered event starts nothing new.
func (c *Controller) HandleSCMEvent(ctx context.Context, ev *scm.Event) error {
	return c.handleSCMEvent(ctx, ev, "")
}

// handleSCMEvent is HandleSCMEvent for an event that came from remote (a webhook's address);
// once the event is handled it is audited (webhook.accepted) with the runs it started.
func (c *Controller) handleSCMEvent(ctx context.Context, ev *scm.Event, remote string) error {
	if err := c.loadStoredEvent(ctx, ev); err != nil {
		return err
	}
	if ev.Kind == scm.EventPullRequest && ev.PR != nil {
		topic := PRTopic(ev.Provider, ev.Repo, ev.PR.Number)
		c.noteTopic(topic)
		if err := c.WakeTopic(ctx, topic); err != nil {
			return fmt.Errorf("wake %s: %w", topic, err)
		}
	}
	if ev.Kind == scm.EventStatus && ev.SHA != "" {
		topic := steps.CommitTopic(ev.Provider, string(ev.Repo), ev.SHA)
		c.noteTopic(topic)
		if err := c.WakeTopic(ctx, topic); err != nil {
			return fmt.Errorf("wake %s: %w", topic, err)
		}
	}
	var first error
	var runs, notes, failed []string
	if ts := c.triggers.Load(); ts != nil {
		for _, p := range ts.Pipelines {
			for _, t := range p.Triggers {
				m, err := t.Match(ctx, p.File, ev)
				if err != nil {
					// A bad expression result is the pipeline author's problem; retrying will not
					// help. It is recorded with the event (webhook.accepted, the UI's event list):
					// expressions read only the event, so the error holds no secret.
					c.log.Error("trigger expression failed", "pipeline", p.Name, "trigger", t.Name, "delivery", ev.DeliveryID, "err", err)
					failed = append(failed, triggerFailure(p.Name, t.Name, err))
					continue
				}
				if t.PathsOnPartialList(ev) {
					// The forge listed only part of the push's files and this trigger cannot ask
					// for the rest (no connector, or a new branch with nothing to compare with).
					decided := "no match"
					if m != nil {
						decided = "matched"
					}
					c.log.Warn("trigger paths decided on an incomplete file list", "pipeline", p.Name, "trigger", t.Name,
						"delivery", ev.DeliveryID, "branch", ev.Branch, "listed", len(ev.Changed), "decided", decided)
					notes = append(notes, fmt.Sprintf("pipeline %s trigger %s: paths %s on the %d files the webhook listed, which may not be all the push changed",
						p.Name, t.Name, decided, len(ev.Changed)))
				}
				if m == nil {
					continue
				}
				id, note, err := c.startTriggered(ctx, p, t, ev, m, remote)
				switch {
				case err != nil && first == nil:
					first = err
				case id != "":
					runs = append(runs, id)
				case note != "":
					notes = append(notes, note)
				}
			}
		}
	}
	if first != nil {
		return first // retried: the entry waits for the outcome
	}
	c.recordHookAccepted(ctx, ev, remote, runs, notes, failed) // audit.go
	return nil
}

// maxFailureText bounds one recorded trigger failure (an expression error quotes the
// expression and what it read).
const maxFailureText = 1000

// triggerFailure words a trigger whose expression failed: the pipeline, the trigger and the
// error (file:line: triggers[i].inputs.NAME: …).
func triggerFailure(pipeline, trigger string, err error) string {
	msg := fmt.Sprintf("pipeline %s trigger %s started no run: %v", pipeline, trigger, err)
	if len(msg) > maxFailureText {
		msg = strings.ToValidUTF8(msg[:maxFailureText], "") + "…"
	}
	return msg
}

// startTriggered starts the run of a matched trigger and returns its id (also when an earlier
// delivery of the event started it), or why no run was started, or an error worth a retry.
func (c *Controller) startTriggered(ctx context.Context, p *pipelines.Pipeline, t *pipelines.Trigger, ev *scm.Event, m *pipelines.TriggerMatch, remote string) (id, note string, err error) {
	inputs := m.Inputs
	// PendingPaths: the run's first job checks the PR's files through the connector (a
	// worker holds its token) and the stages start only if one matches.
	info := &pipelines.TriggerInfo{Kind: "webhook", DeliveryID: ev.DeliveryID, Trigger: t.Name, Provider: ev.Provider,
		Event: string(ev.Kind), Action: string(ev.Action), Repo: string(ev.Repo), SHA: pipelines.EventSHA(ev), Connector: t.Connector,
		Paths: m.PendingPaths}
	if ev.PR != nil {
		info.PR = ev.PR.Number
	}
	if ev.Kind == scm.EventPush {
		info.Before = ev.Before
	}
	// Keyed like the PRFLOW_SCM dedupe: another event reusing the delivery id starts its own run.
	id = pipelines.TriggerRunID(ev.Provider, ev.DedupeKey(), p.Name, t.Index)
	executor := "webhook:" + ev.Provider
	if ev.Sender != "" {
		executor += ":" + ev.Sender
	}
	r, err := c.Start(ctx, StartRequest{File: p.File, Source: p.Source, Inputs: inputs, Executor: executor, ID: id, Trigger: info, Remote: remote})
	switch {
	case errors.Is(err, ErrExists):
		c.log.Info("trigger already started its run", "pipeline", p.Name, "trigger", t.Name, "run", id, "delivery", ev.DeliveryID)
		return id, "", nil
	case errors.Is(err, ErrInvalid):
		c.log.Error("triggered run not started", "pipeline", p.Name, "trigger", t.Name, "delivery", ev.DeliveryID, "err", err)
		return "", fmt.Sprintf("pipeline %s trigger %s: run not started: invalid", p.Name, t.Name), nil
	case errors.Is(err, policy.ErrDenied):
		// A decision, not a fault: a retry would ask the same policy again (and audit each
		// denial). The denial itself is audited by Start.
		return "", fmt.Sprintf("pipeline %s trigger %s: run denied by policy", p.Name, t.Name), nil
	case err != nil:
		return "", "", err
	}
	c.log.Info("run triggered", "pipeline", p.Name, "trigger", t.Name, "run", r.ID, "provider", ev.Provider,
		"repo", ev.Repo, "sha", info.SHA, "pr", info.PR, "delivery", ev.DeliveryID)
	return r.ID, "", nil
}

// noteTopic remembers when a topic's event arrived, so that a step that parks on it just after
// (its job was running while the webhook came) is woken at once instead of by its poll.
func (c *Controller) noteTopic(topic string) {
	now := time.Now()
	c.changed.set(topic, now, now)
}
