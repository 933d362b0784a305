package main

import (
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/audit"
)

func newAudit(g *globals) *cobra.Command {
	var since, actor, action, run string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log (GET /api/v1/audit): who did what, when, from where",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			for k, v := range map[string]string{"since": since, "actor": actor, "action": action, "run": run} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var list []audit.Entry
			if err := c.do(cmd.Context(), "GET", "/api/v1/audit?"+q.Encode(), nil, &list); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tRUN\tFROM\tDETAIL")
			for _, e := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.RFC3339), e.Actor, e.Action, e.Run, e.Remote, e.Detail)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "entries since an RFC3339 time or a duration ago (24h)")
	cmd.Flags().StringVar(&actor, "actor", "", "only this user or system")
	cmd.Flags().StringVar(&action, "action", "", "only this action (run.started, run.cancelled, policy.denied)")
	cmd.Flags().StringVar(&run, "run", "", "only entries about this run")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (the newest); default 1000")
	return cmd
}
