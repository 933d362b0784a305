package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
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
		job, err := queue.DecodeJob(raw.Data)
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
			ev := queue.Event{Kind: queue.EvDead, Run: job.Run, Stage: job.Stage, Step: job.Step, Rollback: job.Rollback,
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
