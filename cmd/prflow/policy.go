package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/policy"
)

func newPolicy(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with OPA policies (prflow.pipeline, prflow.run, prflow.stage)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "test DIR...",
		Short: "Run the Rego unit tests (test_ rules in *_test.rego) of policy directories",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, dir := range args {
				// The policies must load the way the server loads them, not only under test.
				if _, err := policy.Load(cmd.Context(), dir); err != nil {
					return err
				}
			}
			results, err := tester.Run(cmd.Context(), args...)
			if err != nil {
				return fmt.Errorf("policy test: %w", err)
			}
			failed := 0
			for _, r := range results {
				switch {
				case r.Error != nil:
					failed++
					fmt.Fprintf(cmd.OutOrStdout(), "ERROR %s.%s (%s): %v\n", r.Package, r.Name, loc(r), r.Error)
				case r.Fail:
					failed++
					fmt.Fprintf(cmd.OutOrStdout(), "FAIL  %s.%s (%s)\n", r.Package, r.Name, loc(r))
				case r.Skip:
					fmt.Fprintf(cmd.OutOrStdout(), "SKIP  %s.%s\n", r.Package, r.Name)
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "PASS  %s.%s\n", r.Package, r.Name)
				}
			}
			if len(results) == 0 {
				return exitError{code: 1, msg: "no Rego tests (test_ rules) found in " + strings.Join(args, ", ")}
			}
			if failed > 0 {
				return exitError{code: 1, msg: fmt.Sprintf("%d of %d policy tests failed", failed, len(results))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d policy tests passed\n", len(results))
			return nil
		},
	})
	return cmd
}

func loc(r *tester.Result) string {
	if r.Location == nil {
		return "?"
	}
	return fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row)
}

// openPolicies loads --policies DIR for a server and reloads it while ctx lives.
func openPolicies(ctx context.Context, dir string, log *slog.Logger) (*policy.Engine, error) {
	e, err := policy.Open(ctx, dir, log)
	if err != nil {
		return nil, err
	}
	log.Info("policies loaded", "dir", dir, "files", e.Current().Files)
	go e.Watch(ctx, 2*time.Second)
	return e, nil
}
