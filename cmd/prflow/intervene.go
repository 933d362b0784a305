package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

func newIntervene(g *globals) *cobra.Command {
	var action, comment string
	cmd := &cobra.Command{
		Use:   "intervene RUN STAGE --action retry|ignore|abort|rollback",
		Short: "Decide a stage waiting for a manual intervention (onFailure: manual)",
		Long: `A stage whose failure strategy is manual waits after a failed step until someone decides:
  retry     run the failed step again
  ignore    treat the failed step as passed (recorded on the step) and go on
  abort     fail the stage, and so the run, without rollback
  rollback  run the stage's rollback steps`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if action == "" {
				return fmt.Errorf("--action: required (%s)", strings.Join(pipelines.InterventionActions, ", "))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var rec pipelines.Intervention
			req := controller.InterveneRequest{Action: action, Comment: comment}
			path := "/api/v1/runs/" + url.PathEscape(args[0]) + "/interventions/" + url.PathEscape(args[1])
			if err := c.do(cmd.Context(), "POST", path, req, &rec); err != nil {
				return err
			}
			// The server answers once the decision is in the run's state.
			fmt.Fprintf(cmd.OutOrStdout(), "stage %s of run %s: step %s %s\n", args[1], args[0], rec.Step, rec.Outcome)
			return nil
		},
	}
	cmd.Flags().StringVar(&action, "action", "", "retry, ignore, abort or rollback")
	cmd.Flags().StringVar(&comment, "comment", "", "comment recorded with the decision")
	return cmd
}
