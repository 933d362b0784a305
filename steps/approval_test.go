package steps

import (
	"strings"
	"testing"
)

// TestApprovalInputs: Approval reads its config through approvalInputs: the top-level
// minimumCount and disallowPipelineExecutor win over the ones inside approvers, a boolean given
// as text (what an expression yields) counts, and mistakes are refused naming the field.
func TestApprovalInputs(t *testing.T) {
	for _, c := range []struct {
		name string
		in   map[string]any
		want approvalConfig
	}{
		{"list", map[string]any{"approvers": []any{"alice", "group:release"}},
			approvalConfig{users: []string{"alice"}, groups: []string{"release"}, min: 1}},
		{"object", map[string]any{"approvers": map[string]any{"users": "alice,bob", "minimumCount": 2, "disallowPipelineExecutor": true}, "message": "go?"},
			approvalConfig{users: []string{"alice", "bob"}, min: 2, disallowExecutor: true, message: "go?"}},
		{"top level wins", map[string]any{"approvers": map[string]any{"groups": []any{"ops"}, "minimumCount": 3, "disallowPipelineExecutor": true},
			"minimumCount": "2", "disallowPipelineExecutor": false},
			approvalConfig{groups: []string{"ops"}, min: 2}},
		{"boolean as text", map[string]any{"approvers": []any{"alice"}, "disallowPipelineExecutor": "true"},
			approvalConfig{users: []string{"alice"}, min: 1, disallowExecutor: true}},
	} {
		got, err := approvalFrom(c.in, false)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if strings.Join(got.users, ",") != strings.Join(c.want.users, ",") || strings.Join(got.groups, ",") != strings.Join(c.want.groups, ",") ||
			got.min != c.want.min || got.disallowExecutor != c.want.disallowExecutor || got.message != c.want.message {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{}, "approvers: required"},
		{map[string]any{"approvers": 3}, "approvers: want a list or {users, groups}, got int"},
		{map[string]any{"approvers": "alice"}, `approvers: want a list or {users, groups}, got "alice"`},
		{map[string]any{"approvers": []any{"alice", 7}}, "approvers: want user names or group:NAME, got 7"},
		{map[string]any{"approvers": map[string]any{"user": []any{"alice"}}}, "approvers.user: unknown input"},
		{map[string]any{"approvers": map[string]any{"users": []any{"a"}, "minimumCount": "two"}}, "approvers.minimumCount: want a whole number"},
		{map[string]any{"approvers": []any{"alice"}, "minimumCount": 0}, "minimumCount: must be ≥ 1"},
		{map[string]any{"approvers": map[string]any{}}, "approvers: no users or groups given"},
		{map[string]any{"approvers": []any{"alice"}, "disallowPipelineExecutor": "maybe"}, "disallowPipelineExecutor: want true or false"},
	} {
		if _, err := approvalFrom(c.in, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.in, err, c.want)
		}
	}
	// At load an expression is left for run time.
	if _, err := approvalFrom(map[string]any{"approvers": "${{ vars.approvers }}", "minimumCount": "${{ vars.n }}"}, true); err != nil {
		t.Errorf("static expression: %v", err)
	}
}
