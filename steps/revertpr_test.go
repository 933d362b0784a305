package steps

import "testing"

func TestDeleteRevertBranchDefault(t *testing.T) {
	revert := Prior{ID: "revert", Type: "RevertPR", Outputs: map[string]any{"prNumber": float64(7)}}
	update := Prior{ID: "update", Type: "UpdateReleaseRepo", Outputs: map[string]any{"prNumber": float64(5)}}
	for _, tc := range []struct {
		name   string
		input  any // deleteSourceBranch as given; nil = not set
		given  bool
		number int
		priors []Prior
		want   bool
	}{
		{"revert PR, not set", nil, false, 7, []Prior{update, revert}, true},
		{"revert PR, explicitly kept", false, false, 7, []Prior{revert}, false},
		{"revert PR, explicitly kept as a string", "false", false, 7, []Prior{revert}, false},
		{"update PR, not set", nil, false, 5, []Prior{update, revert}, false},
		{"update PR, set", true, true, 5, []Prior{update}, true},
		{"another PR by number", nil, false, 9, []Prior{revert}, false},
		{"no priors", nil, false, 7, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := map[string]any{}
			if tc.input != nil {
				in["deleteSourceBranch"] = tc.input
			}
			sc := &Context{Inputs: in, Priors: tc.priors}
			if got := deleteRevertBranch(sc, tc.number, tc.given); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
