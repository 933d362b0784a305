package main

import (
	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

// newSchema prints the pipeline JSON Schema generated from the step types' declared inputs
// (the same as pipelines/schema.json and GET /api/v1/schema).
func newSchema(*globals) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the pipeline JSON Schema (for editors: # yaml-language-server: $schema=…)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := pipelines.GenerateSchema(steps.Default)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
}
