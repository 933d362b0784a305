package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

func newWorker(g *globals) *cobra.Command {
	w := &worker.Worker{}
	var ackWait time.Duration
	var maxDeliver int
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a delegate worker that takes step jobs of its pools",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			conn, err := g.connect(ctx, log, "prflow-worker")
			if err != nil {
				return err
			}
			defer conn.Close()
			w.Log, w.Version, w.Registry = log, version, steps.Default
			w.Tuning = queue.ConsumerTuning{AckWait: ackWait, MaxDeliver: maxDeliver}
			if w.ID == "" {
				w.ID = os.Getenv("PRFLOW_WORKER_ID")
			}
			return w.Run(ctx, conn)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&w.Pools, "pool", []string{"default"}, "worker pools to take jobs from (repeatable)")
	f.IntVar(&w.Concurrency, "concurrency", 4, "jobs run at once per pool")
	f.StringVar(&w.ID, "id", "", "worker id (default host-pid)")
	f.DurationVar(&ackWait, "ack-wait", queue.DefaultTuning.AckWait, "redelivery timeout; heartbeats every third of it")
	f.IntVar(&maxDeliver, "max-deliver", queue.DefaultTuning.MaxDeliver, "deliveries before a job fails its step")
	f.DurationVar(&w.DrainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight jobs may finish before they are handed back")
	return cmd
}
