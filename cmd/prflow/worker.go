package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/transport"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/notify"
	"github.com/prflow/prflow/steps/verify"
	"github.com/prflow/prflow/steps/worker"

	// Metrics backends of the Verify step register themselves.
	_ "github.com/prflow/prflow/steps/verify/datadog"
	_ "github.com/prflow/prflow/steps/verify/prometheus"
)

func newWorker(g *globals) *cobra.Command {
	w := &worker.Worker{}
	var ackWait time.Duration
	var maxDeliver int
	var connectorsFile, notifiersFile, metricsFile string
	var embedded bool
	var listen string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a delegate worker that takes step jobs of its pools",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := g.requireNATS("worker", embedded); err != nil {
				return err
			}
			// Metrics: Go runtime, process, the forge clients' (scm/transport) and the job pullers' series.
			reg := processRegistry()
			scmMetrics, err := transport.NewMetrics(reg)
			if err != nil {
				return err
			}
			if w.PullerMetrics, err = queue.NewPullerMetrics(reg); err != nil {
				return err
			}
			var nc atomic.Pointer[queue.Conn]
			ops, err := listenOps(listen, reg, natsReady(&nc))
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			ops.run(ctx, log) // /healthz answers while NATS connects; /readyz once connected
			conn, err := g.join(ctx, log, "prflow-worker")
			if err != nil {
				return err
			}
			defer conn.Close()
			nc.Store(conn)
			w.Log, w.Version, w.Registry = log, version, steps.Default
			if w.ID == "" {
				w.ID = os.Getenv("PRFLOW_WORKER_ID")
			}
			if w.ID == "" {
				host, _ := os.Hostname()
				w.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
			}
			svc := map[string]any{}
			if connectorsFile != "" {
				set, err := connector.Load(connectorsFile, connector.WithDeps(connector.Deps{Logger: log, Metrics: scmMetrics}))
				if err != nil {
					return err
				}
				svc[steps.ServiceSCM] = set
				w.Secrets = set.Secrets()
			}
			if notifiersFile != "" {
				set, err := notify.Load(notifiersFile)
				if err != nil {
					return err
				}
				marks, err := queue.OpenNotifyMarks(ctx, conn.JS)
				if err != nil {
					return err
				}
				svc[steps.ServiceNotify], svc[steps.ServiceNotifyMarks] = set, marks
				w.Secrets = append(w.Secrets, set.Secrets()...)
			}
			if metricsFile != "" {
				set, err := verify.Load(metricsFile, nil)
				if err != nil {
					return err
				}
				svc[steps.ServiceMetrics] = set
				w.Secrets = append(w.Secrets, set.Secrets()...)
			}
			b, locks, err := openLocks(ctx, conn, w.ID)
			if err != nil {
				return err
			}
			svc[steps.ServiceLocks] = locks
			svc[steps.ServiceGitOps] = agent.NewClient(conn.NC, b.Apps, b.Agents)
			w.Services = steps.NewServices(svc)
			w.Tuning = queue.ConsumerTuning{AckWait: ackWait, MaxDeliver: maxDeliver}
			return w.Run(ctx, conn)
		},
	}
	f := cmd.Flags()
	f.StringVar(&connectorsFile, "connectors", "", "connectors file: forges this worker can reach and their credentials")
	f.StringVar(&notifiersFile, "notifiers", "", "notifiers file: the notification channels (Slack, webhook, email) this worker sends to, with their secrets")
	f.StringVar(&metricsFile, "metrics", "", "metrics connectors file: the Prometheus and Datadog servers the Verify step queries, with their credentials")
	f.StringVar(&listen, "listen", "", "serve /metrics, /healthz and /readyz on this address (e.g. :9090; empty: none)")
	f.BoolVar(&embedded, "embedded", false, "without --nats, run on a private embedded NATS server (tests and demos only: no controller reaches it)")
	f.StringSliceVar(&w.Pools, "pool", []string{"default"}, "worker pools to take jobs from (repeatable)")
	f.IntVar(&w.Concurrency, "concurrency", 4, "jobs run at once per pool")
	f.StringVar(&w.ID, "id", "", "worker id (default host-pid)")
	f.DurationVar(&ackWait, "ack-wait", queue.DefaultTuning.AckWait, "redelivery timeout; heartbeats every third of it")
	f.IntVar(&maxDeliver, "max-deliver", queue.DefaultTuning.MaxDeliver, "deliveries before a job fails its step")
	f.DurationVar(&w.DrainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight jobs may finish before they are handed back")
	return cmd
}

// openLocks opens the buckets and the merge queue, and returns the buckets with the locks
// the worker holder's steps take on release repos (steps.ServiceLocks).
func openLocks(ctx context.Context, conn *queue.Conn, holder string) (*queue.Buckets, *worker.LeaseLocker, error) {
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		return nil, nil, err
	}
	mq, err := queue.OpenMergeQueue(ctx, conn.JS)
	if err != nil {
		return nil, nil, err
	}
	return b, worker.NewLeaseLocker(b, mq, holder), nil
}
