package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"

	// Forge drivers register themselves with the connector registry.
	_ "github.com/prflow/prflow/scm/bitbucket"
	_ "github.com/prflow/prflow/scm/github"
	_ "github.com/prflow/prflow/scm/gitlab"
	_ "github.com/prflow/prflow/scm/local"
)

func newConnectors(*globals) *cobra.Command {
	cmd := &cobra.Command{Use: "connectors", Short: "Work with a worker's connectors file"}
	var repos []string
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check that each connector authenticates and can see its repos",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := connector.Load(args[0])
			if err != nil {
				return err
			}
			want := map[string][]scm.Repo{}
			for _, r := range repos {
				name, repo, ok := strings.Cut(r, "=")
				if !ok {
					return fmt.Errorf("--repo %q: want CONNECTOR=OWNER/REPO", r)
				}
				want[name] = append(want[name], scm.Repo(repo))
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, res := range set.Check(cmd.Context(), want) {
				if res.Err != nil {
					bad++
					fmt.Fprintf(out, "✗ %s (%s): %v\n", res.Connector, res.Provider, res.Err)
					continue
				}
				fmt.Fprintf(out, "✓ %s (%s): authenticated as %s\n", res.Connector, res.Provider, res.Identity.Login)
				for _, rc := range res.Repos {
					if rc.Err != nil {
						bad++
						fmt.Fprintf(out, "    ✗ %s: %v\n", rc.Repo, rc.Err)
					} else {
						fmt.Fprintf(out, "    ✓ %s\n", rc.Repo)
					}
				}
			}
			if bad > 0 {
				return exitError{code: 1, msg: fmt.Sprintf("%d connector check(s) failed", bad)}
			}
			return nil
		},
	}
	check.Flags().StringArrayVar(&repos, "repo", nil, "also check that CONNECTOR=OWNER/REPO is visible (repeatable)")
	cmd.AddCommand(check)
	return cmd
}
