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
		Priors:   NoPriors,
		Parks:    true,
		Pure:     true, // reads its inputs and the run's decisions only
		Aliases:  []string{"HarnessApproval"},
		New:      func() Step { return StepFunc(runApproval) },
		Validate: validateApproval,
		Config:   approvalInputs{},
	})
}

// approvalInputs is Approval's `with:`. The top-level minimumCount and
// disallowPipelineExecutor, when given, win over the ones inside approvers.
type approvalInputs struct {
	Approvers                approversInput `input:"approvers,required" doc:"who may approve: user names and group:NAME, or {users, groups, minimumCount}"`
	MinimumCount             *int           `input:"minimumCount,default=1,fallback" doc:"approvals needed"`
	DisallowPipelineExecutor *bool          `input:"disallowPipelineExecutor,default=false,fallback" doc:"the run's starter may not approve"`
	Message                  string         `input:"message" doc:"shown to approvers"`
}

// approversObject is approvers given as a mapping.
type approversObject struct {
	Users                    []string `input:"users" doc:"user names"`
	Groups                   []string `input:"groups" doc:"groups from the tokens file"`
	MinimumCount             *int     `input:"minimumCount,default=1,fallback" doc:"approvals needed"`
	DisallowPipelineExecutor *bool    `input:"disallowPipelineExecutor,default=false,fallback" doc:"the run's starter may not approve"`
}

// approversInput is approvers: a list of user names and group:NAME, or an approversObject.
type approversInput struct{ approversObject }

func (approversInput) InputShape() Input {
	return Input{Type: InputStrings, Or: []Input{{Type: InputObject, Fields: InputsOf[approversObject]()}}}
}

func (a *approversInput) DecodeInput(v any, field string, static bool) error {
	switch x := v.(type) {
	case map[string]any:
		o, err := decodeAs[approversObject](x, field, static)
		a.approversObject = o
		return err
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("%s: want user names or group:NAME, got %v", field, e)
			}
			if g, ok := strings.CutPrefix(s, "group:"); ok {
				a.Groups = append(a.Groups, g)
			} else {
				a.Users = append(a.Users, s)
			}
		}
		return nil
	case string:
		if !static { // at load it may be an expression
			return fmt.Errorf("%s: want a list or {users, groups}, got %q", field, x)
		}
		return nil
	}
	return fmt.Errorf("%s: want a list or {users, groups}, got %T", field, v)
}

// approvalConfig is what runApproval needs, resolved from approvalInputs.
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
	cfg, err := Decode[approvalInputs](in, static)
	if err != nil {
		return approvalConfig{}, err
	}
	a := cfg.Approvers
	c := approvalConfig{min: 1, users: a.Users, groups: a.Groups, message: cfg.Message}
	for _, n := range []*int{a.MinimumCount, cfg.MinimumCount} {
		if n != nil {
			c.min = *n
		}
	}
	for _, b := range []*bool{a.DisallowPipelineExecutor, cfg.DisallowPipelineExecutor} {
		if b != nil {
			c.disallowExecutor = *b
		}
	}
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
