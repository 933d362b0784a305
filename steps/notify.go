package steps

import (
	"context"
	"fmt"
	"time"
)

// TypeNotify sends one notification (a run event) to one channel configured on the worker. The
// controller dispatches it when a pipeline's `notifications:` rule matches an event
// (pipelines.Machine.NotifyJobs); a failure becomes a warning on the run, never a failed run.
const TypeNotify = "Notify"

// ServiceNotify is the worker's notification channels (a Notifier); ServiceNotifyMarks
// remembers which notifications were sent (NotifyMarks).
const (
	ServiceNotify      = "notify"
	ServiceNotifyMarks = "notify-marks"
)

// NotifyRoutePrefix marks a job route (envelope.Job.Connectors) as a notification channel rather
// than a forge connector: a notification job goes only to workers that hold its channel.
const NotifyRoutePrefix = "notify:"

// NotifyRoute is the route of a notification job for channel.
func NotifyRoute(channel string) string { return NotifyRoutePrefix + channel }

// Notification is what a channel sends: one event of one run.
type Notification struct {
	ID       string    `json:"id"` // the same for every delivery of this event to this channel
	Event    string    `json:"event"`
	Run      string    `json:"run"`
	Pipeline string    `json:"pipeline"`
	Stage    string    `json:"stage,omitempty"`
	Step     string    `json:"step,omitempty"`
	Status   string    `json:"status"`
	Message  string    `json:"message,omitempty"`
	URL      string    `json:"url,omitempty"` // the run's page
	Executor string    `json:"executor,omitempty"`
	Time     time.Time `json:"time"`
}

// Notifier sends notifications through named channels. Send's error is transient (retried)
// unless IsTerminal; it never contains a secret (URL, key, password).
type Notifier interface {
	Channels() []string
	Send(ctx context.Context, channel string, n Notification) error
	// Attempts is how many deliveries a notification to channel gets before it is given up.
	Attempts(channel string) int
}

// NotifyMarks remembers sent notifications by id, so that a job redelivered after its worker
// died between sending and acking does not send again.
type NotifyMarks interface {
	Sent(ctx context.Context, id string) (bool, error)
	MarkSent(ctx context.Context, id string) error
}

func init() {
	Register(Definition{Type: TypeNotify, Internal: true, Priors: NoPriors, New: func() Step { return StepFunc(runNotify) },
		Config: notifyConfig{}})
}

// notifyConfig is a notification job's inputs, set by the controller (pipelines.Machine.notifyJob).
type notifyConfig struct {
	Channel string `input:"channel,required" doc:"the channel (workers' notifiers file)"`
	Event   string `input:"event,required" doc:"run.started, stage.failed, …"`
	Status  string `input:"status" doc:"the run's, stage's or step's status"`
	Stage   string `input:"stage" doc:"the stage of a stage event"`
	Step    string `input:"step" doc:"the step of a step event (approval.waiting)"`
	Message string `input:"message" doc:"the error of a failure, the reason of a wait"`
	URL     string `input:"url" doc:"the run's page"`
}

// runNotify sends the notification once: a repeat (redelivery) that finds it marked sent does
// nothing; transient failures are retried by the worker with backoff up to the channel's
// attempts, then reported as a failed result, which the controller records as a warning.
func runNotify(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := Decode[notifyConfig](sc.Inputs, false)
	if err != nil {
		return Fail("notification job: " + err.Error()), nil
	}
	channel, event := cfg.Channel, cfg.Event
	if channel == "" || event == "" {
		return Fail("notification job without channel or event"), nil
	}
	n := sc.Services.Notify
	if n == nil {
		return Fail(fmt.Sprintf("channel %s: this worker has no notification channels (prflow worker --notifiers FILE)", channel)), nil
	}
	id := sc.RunID + "/" + sc.StepID
	marks := sc.Services.NotifyMarks
	if marks != nil {
		sent, err := marks.Sent(ctx, id)
		if err != nil {
			return Result{}, fmt.Errorf("channel %s: read sent marks: %w", channel, err)
		}
		if sent {
			sc.Log.Info("notification already sent; not sending it again", "channel", channel, "event", event)
			return Done(map[string]any{"channel": channel, "sent": false, "duplicate": true}), nil
		}
	}
	msg := Notification{ID: id, Event: event, Run: sc.RunID, Pipeline: sc.Pipeline, Stage: cfg.Stage, Step: cfg.Step,
		Status: cfg.Status, Message: cfg.Message, URL: cfg.URL, Executor: sc.Executor, Time: time.Now().UTC()}
	if err := n.Send(ctx, channel, msg); err != nil {
		if IsTerminal(err) {
			return Fail(fmt.Sprintf("channel %s: %v", channel, err)), nil
		}
		if limit := n.Attempts(channel); sc.Delivery >= limit {
			return Fail(fmt.Sprintf("channel %s: gave up after %d attempts: %v", channel, sc.Delivery, err)), nil
		}
		return Result{}, fmt.Errorf("channel %s: %w", channel, err)
	}
	if marks != nil {
		if err := marks.MarkSent(ctx, id); err != nil {
			// Sent, but a redelivery would not know: report it and do not retry (that would send twice).
			sc.Log.Warn("notification sent but not marked; a redelivery may send it again", "channel", channel, "err", err)
		}
	}
	sc.Log.Info("notification sent", "channel", channel, "event", event)
	return Done(map[string]any{"channel": channel, "sent": true}), nil
}
