package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

// newRerun is `prflow rerun RUN`: POST /api/v1/runs/RUN/rerun.
func newRerun(g *globals) *cobra.Command {
	var follow bool
	var key string
	cmd := &cobra.Command{
		Use:   "rerun RUN",
		Short: "Start a finished run again: its pipeline source and inputs, every stage",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAction(cmd, g, args[0], "rerun", nil, key, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print progress until the new run ends; exit non-zero unless it succeeds")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "start at most one run for this key (default: a new key per invocation)")
	return cmd
}

// newRetry is `prflow retry RUN`: POST /api/v1/runs/RUN/retry.
func newRetry(g *globals) *cobra.Command {
	var follow bool
	var key, file string
	cmd := &cobra.Command{
		Use:   "retry RUN",
		Short: "Retry a failed or cancelled run from its failed stage (the stages that succeeded are not run again)",
		Long: `Retry a failed or cancelled run from its failed stage: a new run of the same pipeline source and
inputs in which the stages that succeeded are carried over (their outputs copied, not run again) and
the others run. --pipeline retries with a fixed pipeline file instead of the stored source; the server
refuses it when a stage that succeeded no longer exists or its steps changed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body *controller.RetryRequest
			if file != "" {
				src, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("--pipeline: %w", err)
				}
				body = &controller.RetryRequest{File: filepath.Base(file), Source: src}
			}
			return runAction(cmd, g, args[0], "retry", body, key, follow)
		},
	}
	cmd.Flags().StringVarP(&file, "pipeline", "p", "", "retry with this (fixed) pipeline file instead of the run's stored source")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print progress until the new run ends; exit non-zero unless it succeeds")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "start at most one run for this key (default: a new key per invocation)")
	return cmd
}

// runAction starts a re-run or retry of run id with an Idempotency-Key and says what started.
func runAction(cmd *cobra.Command, g *globals, id, action string, body any, key string, follow bool) error {
	if key == "" {
		key = newIdempotencyKey()
	} else if err := controller.CheckIdempotencyKey(key); err != nil {
		return fmt.Errorf("--idempotency-key: %w", err)
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	if body == nil {
		body = struct{}{}
	}
	var run pipelines.Run
	h, err := c.doHeader(cmd.Context(), "POST", "/api/v1/runs/"+id+"/"+action, http.Header{controller.IdempotencyHeader: {key}}, body, &run)
	if err != nil {
		return err
	}
	what := "re-run of " + id
	if action == "retry" {
		var carried []string
		for _, s := range run.Stages {
			if s.CarriedFrom != "" {
				carried = append(carried, fmt.Sprintf("%s (from %s)", s.ID, s.CarriedFrom))
			}
		}
		what = "retry of " + id + " from its failed stage; carried over, not run again: " + orNone(strings.Join(carried, ", "))
	}
	if h.Get(controller.ReplayedHeader) == "true" {
		fmt.Fprintf(cmd.OutOrStdout(), "run %s already started by an earlier request with idempotency key %s (%s; %s)\n", run.ID, key, what, run.Status)
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "run %s started (%s)\n", run.ID, what)
	}
	if !follow {
		return nil
	}
	return followRun(cmd.Context(), c, run.ID, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
