package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

func newValidate(*globals) *cobra.Command {
	var hf harnessFlags
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check pipeline files; print every problem with file:line and field",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, f := range args {
				src, err := os.ReadFile(f)
				if err == nil {
					src, err = hf.convert(f, src, nil, true, cmd.ErrOrStderr())
				}
				var p *pipelines.Pipeline
				if err == nil {
					p, err = pipelines.Load(f, src, steps.Default)
				}
				if err != nil {
					bad++
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (pipeline %s, %d stages)\n", f, p.Name, len(p.Stages))
			}
			if bad > 0 {
				return exitError{code: 1, msg: fmt.Sprintf("%d of %d files invalid", bad, len(args))}
			}
			return nil
		},
	}
	hf.add(cmd)
	return cmd
}
