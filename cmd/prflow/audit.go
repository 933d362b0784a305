package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
)

func newAudit(g *globals) *cobra.Command {
	var since, actor, run, remote string
	var actions []string
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
			for k, v := range map[string]string{"since": since, "actor": actor, "run": run, "remote": remote} {
				if v != "" {
					q.Set(k, v)
				}
			}
			for _, a := range actions {
				q.Add("action", a) // the server checks each (a typo is refused with the closest action)
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
				runs := e.Run
				if runs == "" {
					runs = strings.Join(e.Runs, ",")
				}
				from := e.Remote
				if e.Delivery != "" {
					from = strings.TrimPrefix(from+" delivery "+e.Delivery, " ")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.RFC3339), e.Actor, e.Action, runs, from, e.Detail)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "entries since an RFC3339 time or a duration ago (24h)")
	cmd.Flags().StringVar(&actor, "actor", "", "only this user or system (webhook:github:LOGIN, "+controller.Unauthenticated+")")
	cmd.Flags().StringSliceVar(&actions, "action", nil, "only these actions, or families of them (webhook.*): "+strings.Join(audit.Actions, ", ")+", "+audit.SignalPrefix+"KIND")
	cmd.Flags().StringVar(&run, "run", "", "only entries about this run (webhook entries: the runs they started)")
	cmd.Flags().StringVar(&remote, "remote", "", "only entries from this address (host or host:port)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (the newest); default 1000")
	return cmd
}
