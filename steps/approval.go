package steps

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Approval parks until enough allowed people approve (prflow approve / the API), or one of
// them rejects. Approvers are user names and groups from the server's tokens file; the API
// stamps each decision with the caller's identity, so nobody can approve as someone else.
func init() {
	Register(Definition{
		Type:     "Approval",
		Parks:    true,
		Aliases:  []string{"HarnessApproval"},
		New:      func() Step { return StepFunc(runApproval) },
		Validate: validateApproval,
		Inputs: []Input{
			{Name: "approvers", Type: InputStrings, Required: true, Doc: "who may approve: user names and group:NAME, or {users, groups, minimumCount}",
				Or: []Input{{Type: InputObject, Fields: []Input{
					{Name: "users", Type: InputStrings, Doc: "user names"},
					{Name: "groups", Type: InputStrings, Doc: "groups from the tokens file"},
					{Name: "minimumCount", Type: InputInt, Default: 1, Doc: "approvals needed"},
					{Name: "disallowPipelineExecutor", Type: InputBool, Default: false, Doc: "the run's starter may not approve"},
				}}}},
			{Name: "minimumCount", Type: InputInt, Default: 1, Doc: "approvals needed"},
			{Name: "disallowPipelineExecutor", Type: InputBool, Default: false, Doc: "the run's starter may not approve"},
			{Name: "message", Type: InputString, Doc: "shown to approvers"},
		},
	})
}

type approvalConfig struct {
	users, groups    []string
	min              int
	disallowExecutor bool
	message          string
}

func validateApproval(in map[string]any) error {
	_, err := approvalFrom(in, true)
	return err
}

func approvalFrom(in map[string]any, static bool) (approvalConfig, error) {
	c := approvalConfig{min: 1}
	switch a := in["approvers"].(type) {
	case map[string]any:
		var err error
		if c.users, err = stringList(a["users"], "approvers.users"); err != nil {
			return c, err
		}
		if c.groups, err = stringList(a["groups"], "approvers.groups"); err != nil {
			return c, err
		}
		if v, ok := a["minimumCount"]; ok {
			n, err := intInput(v, "approvers.minimumCount", static)
			if err != nil {
				return c, err
			}
			c.min = n
		}
		if b, ok := a["disallowPipelineExecutor"].(bool); ok {
			c.disallowExecutor = b
		}
	case []any:
		for _, x := range a {
			s, ok := x.(string)
			if !ok {
				return c, fmt.Errorf("approvers: want user names or group:NAME, got %v", x)
			}
			if g, ok := strings.CutPrefix(s, "group:"); ok {
				c.groups = append(c.groups, g)
			} else {
				c.users = append(c.users, s)
			}
		}
	case nil:
		return c, fmt.Errorf("approvers: required (users and/or groups allowed to approve)")
	case string:
		if !static {
			return c, fmt.Errorf("approvers: want a list or {users, groups}, got %q", a)
		}
	default:
		return c, fmt.Errorf("approvers: want a list or {users, groups}, got %T", a)
	}
	if v, ok := in["minimumCount"]; ok {
		n, err := intInput(v, "minimumCount", static)
		if err != nil {
			return c, err
		}
		c.min = n
	}
	if b, ok := in["disallowPipelineExecutor"].(bool); ok {
		c.disallowExecutor = b
	}
	c.message, _ = in["message"].(string)
	if c.min < 1 {
		return c, fmt.Errorf("minimumCount: must be ≥ 1")
	}
	if len(c.users) == 0 && len(c.groups) == 0 && !static {
		return c, fmt.Errorf("approvers: no users or groups given")
	}
	return c, nil
}

func runApproval(_ context.Context, sc *Context) (Result, error) {
	c, err := approvalFrom(sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	approved := map[string]Signal{}
	var order []string
	for _, s := range sc.Signals {
		if s.Kind != "approval" {
			continue
		}
		if !c.allowed(s) {
			sc.Log.Warn("ignoring decision from someone who is not an approver", "user", s.User)
			continue
		}
		if c.disallowExecutor && s.User == sc.Executor {
			sc.Log.Warn("ignoring the pipeline executor's own decision (disallowPipelineExecutor)", "user", s.User)
			continue
		}
		if !s.Approve {
			msg := "rejected by " + s.User
			if s.Comment != "" {
				msg += ": " + s.Comment
			}
			return Fail(msg), nil
		}
		if _, dup := approved[s.User]; !dup {
			order = append(order, s.User)
		}
		approved[s.User] = s
	}
	if len(approved) >= c.min {
		var approvers []any
		var comments []any
		for _, u := range order {
			s := approved[u]
			approvers = append(approvers, map[string]any{"user": u, "comment": s.Comment, "at": s.At.UTC().Format("2006-01-02T15:04:05Z")})
			if s.Comment != "" {
				comments = append(comments, u+": "+s.Comment)
			}
		}
		return Done(map[string]any{"approvers": approvers, "comments": comments}), nil
	}
	if sc.WakeReason == "deadline" {
		return Fail(fmt.Sprintf("approval timed out with %d of %d approvals", len(approved), c.min)), nil
	}
	who := append(append([]string{}, c.users...), prefixed("group:", c.groups)...)
	sort.Strings(who)
	reason := fmt.Sprintf("waiting for %d more approval(s) from %s", c.min-len(approved), strings.Join(who, ", "))
	if c.message != "" {
		reason = c.message + " — " + reason
	}
	return Park(Wait{Topics: []string{"approval"}, Deadline: sc.Deadline, Reason: reason,
		Approvers: &Approvers{Users: c.users, Groups: c.groups, NotExecutor: c.disallowExecutor}}, nil), nil
}

func (c approvalConfig) allowed(s Signal) bool {
	return (&Approvers{Users: c.users, Groups: c.groups}).Allows(s.User, s.Groups)
}

func prefixed(p string, list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = p + s
	}
	return out
}
