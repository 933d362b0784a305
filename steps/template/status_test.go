package template

import (
	"context"
	"strings"
	"testing"
)

func TestStatusFunctions(t *testing.T) {
	failed := map[string]any{StatusKey: map[string]any{"success": false, "failure": true, "cancelled": false}}
	ok := map[string]any{StatusKey: map[string]any{"success": true, "failure": false, "cancelled": false}}
	for _, tc := range []struct {
		src          string
		afterFailure bool
		onOK, onFail bool
	}{
		{"failure()", true, false, true},
		{"${{ always() }}", true, true, true},
		{"success()", false, true, false},
		{"cancelled()", true, false, false},
		{"failure() || success()", true, true, true},
		{"true", false, true, true},
	} {
		tp, err := CompileCondition(tc.src, WithStatusFunctions())
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if tp.RunsAfterFailure() != tc.afterFailure {
			t.Errorf("%s: RunsAfterFailure %v, want %v", tc.src, tp.RunsAfterFailure(), tc.afterFailure)
		}
		for _, c := range []struct {
			env  map[string]any
			want bool
		}{{ok, tc.onOK}, {failed, tc.onFail}} {
			got, err := tp.EvalBool(context.Background(), c.env)
			if err != nil || got != c.want {
				t.Errorf("%s on %v: %v, %v; want %v", tc.src, c.env, got, err, c.want)
			}
		}
	}
	// Outside a when (no option) the names are refused with a clear message.
	if _, err := CompileCondition("failure()"); err == nil || !strings.Contains(err.Error(), "only available in a stage's or step's when") {
		t.Errorf("failure() without the option: %v", err)
	}
	if _, err := CompileCondition("failure(1)", WithStatusFunctions()); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Errorf("failure(1): %v", err)
	}
}
