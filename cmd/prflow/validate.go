package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/steps"
)

func newValidate(g *globals) *cobra.Command {
	var hf harnessFlags
	var sets []string
	var policyDir string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check pipeline files; print every problem with file:line and field",
		Long: `validate loads each pipeline file and prints every problem with file:line and field.
With --server given explicitly it also asks that server (POST /api/v1/pipelines/check) whether a
run could start now: every connector a step names is held by a live worker of its pool and every
agent the pipeline names is registered. Nothing is started.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote := cmd.Flags().Changed("server")
			var c *client
			var inputs map[string]any
			if remote {
				var err error
				if c, err = g.client(); err != nil {
					return err
				}
				if len(sets) > 0 {
					if inputs, err = parseSets(sets); err != nil {
						return err
					}
				}
			}
			var pols *policy.Set
			if policyDir != "" {
				var err error
				if pols, err = policy.Load(cmd.Context(), policyDir); err != nil {
					return err
				}
			}
			bad, mapReported := 0, false
			for _, f := range args {
				src, err := os.ReadFile(f)
				if err == nil {
					src, err = hf.convert(f, src, nil, true, cmd.ErrOrStderr())
				}
				var p *pipelines.Pipeline
				if err == nil {
					p, err = pipelines.Load(f, src, steps.Default)
				}
				if err == nil && pols.Has(policy.Pipeline) {
					var d policy.Decision
					if d, err = pols.Evaluate(cmd.Context(), policy.Pipeline, policy.PipelineInput(p)); err == nil {
						for _, w := range d.Warn {
							fmt.Fprintf(cmd.ErrOrStderr(), "%s: warning: %s\n", f, w)
						}
						if err = d.Err(policy.Pipeline); err != nil {
							err = fmt.Errorf("%s: %w", f, err)
						}
					}
				}
				if err == nil && remote {
					var res controller.CheckResult
					req := controller.CheckRequest{File: filepath.Base(f), Source: src, Inputs: inputs}
					if err = c.do(cmd.Context(), "POST", "/api/v1/pipelines/check", req, &res); err != nil {
						var he *httpError
						if errors.As(err, &he) {
							err = fmt.Errorf("%s: %s", f, he.Msg) // the server's verdict, not the API path
						}
					}
				}
				if err != nil {
					bad++
					if hf.isMapErr(err) {
						if mapReported {
							continue // said once, not again for every Harness file
						}
						mapReported = true
					}
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					continue
				}
				where := ""
				if remote {
					where = ", connectors and agents live on " + g.server
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (pipeline %s, %d stages%s)\n", f, p.Name, len(p.Stages), where)
			}
			if bad > 0 {
				return exitError{code: 1, msg: fmt.Sprintf("%d of %d files invalid", bad, len(args))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyDir, "policies", "", "directory of Rego policies: apply prflow.pipeline to each file offline")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "with --server: runtime input key=value to check too (repeatable)")
	hf.add(cmd)
	return cmd
}
