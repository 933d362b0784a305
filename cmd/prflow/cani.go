package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/rbac"
)

// newCanI is `prflow can-i ACTION RESOURCE OBJECT`, like `argocd account can-i`: offline
// against a policy file (--rbac FILE --as USER [--groups a,b]), or asked of the server for
// the token's user. It prints yes or no and exits 0 or 1.
func newCanI(g *globals) *cobra.Command {
	var policyFile, as string
	var groups []string
	cmd := &cobra.Command{
		Use:   "can-i ACTION RESOURCE PIPELINE/ENV",
		Short: "Say whether a user may take an action (RBAC): yes (exit 0) or no (exit 1)",
		Long: "Resources and their actions: " + resourceHelp() + ".\n" +
			"The object is PIPELINE/ENV (or * for a request about no one pipeline, such as the audit log).\n" +
			"With --rbac FILE the policy file is read here and --as names the user; without it the server answers for the token's user.",
		Example: "  prflow can-i cancel runs web/prod\n  prflow can-i approve approvals web/prod --rbac rbac.yaml --as alice --groups release-managers",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			action, resource, object := args[0], args[1], args[2]
			if err := controller.CheckCanI(resource, action, object); err != nil {
				return err
			}
			if policyFile == "" {
				if as != "" || len(groups) > 0 {
					return errors.New("--as and --groups need --rbac FILE: the server answers for the user of the token only")
				}
				return canIServer(cmd, g, action, resource, object)
			}
			if as == "" {
				return errors.New("--rbac FILE needs --as USER: whose permission to look up")
			}
			p, err := rbac.Load(policyFile)
			if err != nil {
				return err
			}
			who := rbac.Subject{Name: as, Groups: groups}
			return answer(cmd, p.Check(who, resource, action, object))
		},
	}
	cmd.Flags().StringVar(&policyFile, "rbac", "", "policy file to decide with, offline (as prflow server --rbac)")
	cmd.Flags().StringVar(&as, "as", "", "with --rbac: the user to decide for")
	cmd.Flags().StringSliceVar(&groups, "groups", nil, "with --rbac: the user's groups (a,b)")
	return cmd
}

func resourceHelp() string {
	var parts []string
	for _, r := range rbac.Resources {
		parts = append(parts, r+" ("+strings.Join(rbac.Actions[r], ", ")+")")
	}
	return strings.Join(parts, "; ")
}

func canIServer(cmd *cobra.Command, g *globals, action, resource, object string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	q := url.Values{"action": {action}, "resource": {resource}, "object": {object}}
	var a controller.CanIAnswer
	if err := c.do(cmd.Context(), "GET", "/api/v1/can-i?"+q.Encode(), nil, &a); err != nil {
		return err
	}
	if a.Allowed {
		return answer(cmd, nil)
	}
	return answer(cmd, &rbac.Denied{Subject: rbac.Subject{Name: a.User, Groups: a.Groups}, Resource: resource, Action: action, Object: object})
}

// answer prints yes, or no with the reason as the error (exit 1).
func answer(cmd *cobra.Command, denied error) error {
	if denied == nil {
		fmt.Fprintln(cmd.OutOrStdout(), "yes")
		return nil
	}
	fmt.Fprintln(cmd.OutOrStdout(), "no")
	return exitError{code: 1, msg: denied.Error()}
}
