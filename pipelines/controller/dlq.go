package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/envelope"
)

type deliveryAdvisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason"`
}

// consumeDLQ turns a job that ran out of deliveries (a worker died on every try) into a failed
// step with the last error the step logged, so no run is left hanging.
func (c *Controller) consumeDLQ(ctx context.Context, cons jetstream.Consumer) {
	jobs, err := c.conn.JS.Stream(ctx, queue.StreamJobs)
	if err != nil {
		c.log.Error("dead letters: jobs stream", "err", err)
		return
	}
	logs, _ := c.conn.JS.Stream(ctx, queue.StreamLogs)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		var adv deliveryAdvisory
		if err := json.Unmarshal(msg.Data(), &adv); err != nil || !strings.Contains(msg.Subject(), "MAX_DELIVERIES") {
			_ = msg.Ack() // terminated jobs were already reported by the worker
			return
		}
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		raw, err := jobs.GetMsg(gctx, adv.StreamSeq)
		if err != nil {
			_ = msg.Ack() // already handled by another replica
			return
		}
		job, err := envelope.DecodeJob(raw.Data)
		if err == nil && c.redispatch(gctx, job, raw, adv.Deliveries) {
			_ = jobs.DeleteMsg(gctx, adv.StreamSeq)
			_ = msg.Ack()
			return
		}
		if err == nil {
			reason := fmt.Sprintf("job delivered %d times without a result (worker lost)", adv.Deliveries)
			if logs != nil {
				if last, lerr := logs.GetLastMsgForSubject(gctx, queue.LogSubject(job.Run, job.Stage, job.Step)); lerr == nil {
					var line struct {
						Msg   string            `json:"msg"`
						Attrs map[string]string `json:"attrs"`
					}
					if json.Unmarshal(last.Data, &line) == nil {
						reason += "; last log: " + line.Msg
						if e := line.Attrs["err"]; e != "" {
							reason += ": " + e
						}
					}
				}
			}
			ev := envelope.Event{Kind: queue.EvDead, Run: job.Run, Stage: job.Stage, Step: job.Step, Rollback: job.Rollback,
				Attempt: job.Attempt, Wake: job.Wake, Reason: reason}
			if err := c.Publish(gctx, ev, "dead/"+job.ID()); err != nil {
				_ = msg.NakWithDelay(time.Second)
				return
			}
		}
		_ = jobs.DeleteMsg(gctx, adv.StreamSeq)
		_ = msg.Ack()
	})
	if err != nil {
		c.log.Error("dead letters: consume", "err", err)
		return
	}
	<-ctx.Done()
	cc.Stop()
}

// RedispatchHeader counts how often a job that ran out of deliveries was dispatched again.
const RedispatchHeader = "Prflow-Redispatch"

// maxRedispatch bounds the extra rounds of deliveries a parking step gets.
const maxRedispatch = 2

// redispatch gives a job of a step that parks or waits (steps.Definition.Parks) a fresh round
// of deliveries when its worker died on every one of them: such a step runs briefly and
// parks, so losing it with a worker says that workers die, not that it crashes them. The new
// message has its own Nats-Msg-Id and the same job (attempt and wake), so its result is taken
// like the first one's. Bounded by maxRedispatch, so a step that does crash its worker still
// fails its run. It reports whether the job went out again.
func (c *Controller) redispatch(ctx context.Context, job *envelope.Job, raw *jetstream.RawStreamMsg, deliveries uint64) bool {
	def, ok := c.reg.Lookup(job.Type)
	if !ok || !def.Parks {
		return false
	}
	n := 0
	if raw.Header != nil {
		n, _ = strconv.Atoi(raw.Header.Get(RedispatchHeader))
	}
	if n >= maxRedispatch {
		return false
	}
	m := nats.NewMsg(raw.Subject)
	m.Data = raw.Data
	m.Header.Set(RedispatchHeader, strconv.Itoa(n+1))
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s/redispatch-%d", job.ID(), n+1))
	if _, err := c.conn.JS.PublishMsg(ctx, m); err != nil {
		c.log.Warn("dead letters: dispatch again", "run", job.Run, "stage", job.Stage, "step", job.Step, "err", err)
		return false
	}
	c.log.Warn("job lost its worker on every delivery; its step parks, so it is dispatched again",
		"run", job.Run, "stage", job.Stage, "step", job.Step, "deliveries", deliveries, "round", n+2)
	return true
}
