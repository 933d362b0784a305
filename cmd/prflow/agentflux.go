package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prflow/prflow/deploy/flux"
	"github.com/prflow/prflow/queue"
)

// fluxFlags are `prflow agent --engine flux`'s own flags.
type fluxFlags struct {
	kubeconfig, namespace string
	stuckAfter            time.Duration
}

// runFluxAgent runs the Flux agent: in-cluster config unless --kubeconfig is given.
func runFluxAgent(ctx context.Context, log *slog.Logger, id, replica string, ff fluxFlags, connect func() (*queue.Conn, error)) error {
	var cfg *rest.Config
	var err error
	if ff.kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", ff.kubeconfig); err != nil {
			return fmt.Errorf("--kubeconfig %s: %w", ff.kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return fmt.Errorf("--engine flux: not running in a cluster (%v); give --kubeconfig", err)
	}
	a, err := flux.New(flux.Options{AgentID: id, Replica: replica, Config: cfg, Namespace: ff.namespace,
		StuckAfter: ff.stuckAfter, Version: version, Log: log})
	if err != nil {
		return err
	}
	return runAgent(ctx, connect, a)
}
